"""kinject-legacy: a strategy that marks its inputs ([E] .. [/E]) and a Brier-score evaluator, written against the
previous kinject's module paths."""
