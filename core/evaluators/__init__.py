"""Built-in evaluators (metrics), registered through the ``kinject.evaluators`` entry points."""
