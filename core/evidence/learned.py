"""Did a run learn anything? It learned nothing its comparison could speak for when its predictions take one value
for every example (a constant predictor), or when its score does not beat the best predictor that ignores the input
by more than the score's own interval over examples.

The input-free predictors are built from the scored split's gold labels and scored by the metric's own evaluator,
so the baseline is the best one *for this metric* (:func:`input_free`): every constant label (for positive-class F1
with minority positives that is all-positive), for multi-label the most frequent labels, every constant tag for
sequence labelling, the gold mean for regression, and labels drawn at random by their gold frequency. Records with
scores get a constant score too (the gold frequencies, as probabilities and as logits, and the mean of the run's own
score rows), never the run's per-example scores. Retrieval is scored against a random ranking of each query's
candidates. A metric on which an input-free predictor scores as well as the gold labels themselves (ECE: a constant
at the base rate is perfectly calibrated) says nothing about learning, and is not checked against one.

:func:`not_learned` is the one check every view uses (compare and its ``--json``, report, forest plot, grid
leaderboard, model card, a method's comparison stage and so ``kinject.run``'s result). A baseline that learned
nothing voids its comparison: the verdict is ``not learned: <baseline>``. A method arm's seeds that learned nothing
are an outcome of the method: they count in its difference, as harm, and the verdict says how many collapsed
(:func:`collapsed_text`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from kinject.evidence.metrics import MetricDef

NOT_LEARNED = "not learned"
SEQUENCE = ("entity-f1", "pico-f1")  # evaluators whose gold and pred are one label per token
MOST_LABELS = 20  # constant predictors tried at most (the most frequent gold labels)
RANDOM_DRAWS = 8  # a random predictor is scored on this many draws of every example, pooled
SEARCH_UNITS = 1000  # above this many records the input-free candidates are ranked on a sample of them
CHECK_RESAMPLES = 500  # bootstrap resamples of the margin over the best input-free predictor
TOLERANCE = 1e-9
OWN_MEAN = "the mean of the run's score rows"  # the constant score row where the score columns' labels are unknown


def _key(value: Any) -> str:
    if isinstance(value, list) and not any(isinstance(v, (list, dict)) for v in value):
        value = sorted(map(str, value))  # a multi-label prediction: a set
    return json.dumps(value, sort_keys=True, default=str)


def _is_sequence(records: list[dict], metric: MetricDef | None) -> bool:
    """Whether gold and pred are one label per token: the evaluator is a tagging one, or every record's gold and
    pred are lists of equal length and some gold repeats a tag (a label set never does)."""
    if metric is not None and metric.evaluator in SEQUENCE:
        return True
    if not all(isinstance(r["gold"], list) and isinstance(r["pred"], list) and len(r["gold"]) == len(r["pred"])
               for r in records):
        return False
    return any(len({_key(t) for t in r["gold"]}) < len(r["gold"]) for r in records)


def constant_value(records: list[dict], metric: MetricDef | None = None) -> str | None:
    """The one value every prediction takes (as text), None when they vary: the predicted label (a label set for
    multi-label), every token's tag for sequence labelling, every candidate's score for retrieval."""
    if not records:
        return None
    if "ranking" in records[0]:
        if not all("scores" in r for r in records):
            return None
        values = {_key(float(s)) for r in records for s in r["scores"]}
        return f"one score ({next(iter(values))}) for every candidate" if len(values) == 1 else None
    found = (tag for r in records for tag in r["pred"]) if _is_sequence(records, metric) else \
        (r["pred"] for r in records)
    first = None
    for value in found:  # stops at the second value
        key = _key(value)
        if first is None:
            first = key
        elif key != first:
            return None
    return first


@dataclass
class Reference:
    """An input-free predictor: its name, and how it predicts a list of records (``build``: records -> its draws,
    one set for a constant, several for a random one)."""

    name: str
    build: Callable[[list[dict]], list[list[dict]]]
    label: Any = None  # the constant prediction, where it is one (constant score rows are tried with it)
    scores_name: str = ""  # the constant score row it carries, in words
    score: float = float("nan")  # its metric on the records it was last built on
    draws: list[list[dict]] = field(default_factory=list, repr=False)
    records: list[dict] = field(default_factory=list, repr=False)  # the draws pooled: one set to score

    def on(self, records: list[dict]) -> "Reference":
        """Built on ``records``: its draws, and their pool (each copy of an example keeps the example's group, so
        the margin's bootstrap resamples an example's copies together)."""
        self.draws = self.build(records)
        self.records = self.draws[0] if len(self.draws) == 1 else [
            {**r, "id": f"{r['id']}#{k}", "group": _group(r)} for k, draw in enumerate(self.draws) for r in draw]
        return self


def _group(record: dict) -> str:
    return str(record.get("group", record["id"]))


def _score_rows(records: list[dict], metric: MetricDef, frequency: dict[str, float]) -> list[tuple[str, list]]:
    """Constant score rows for records that carry scores (none for records without): the gold frequencies in the
    label order (as probabilities and as logits) where that order is known, else the mean of the run's own score
    rows (:data:`OWN_MEAN`)."""
    if not all("scores" in r for r in records):
        return []
    width = len(records[0]["scores"])
    rows: list[tuple[str, list]] = []
    labels = [str(x) for x in metric.labels]
    if labels and len(labels) == width:
        p = np.clip(np.array([frequency.get(label, 0.0) for label in labels]), 1e-6, 1.0)
        rows += [("the gold frequencies as probabilities", p.tolist()),
                 ("the gold frequencies as logits", np.log(p).tolist())]
    elif width == 1 and len(labels) == 2:  # one sigmoid column: the positive (second) label's rate
        rate = float(np.clip(frequency.get(labels[1], 0.0), 1e-6, 1 - 1e-6))
        rows += [("the positive rate as a probability", [rate]),
                 ("the positive rate as a logit", [float(np.log(rate / (1 - rate)))])]
    if not rows:
        rows.append((OWN_MEAN, np.mean(np.asarray([r["scores"] for r in records], dtype=float), axis=0).tolist()))
    return rows


def _constant(pred: Any, row: tuple[str, list] | None = None) -> Callable[[list[dict]], list[list[dict]]]:
    """Records -> one set predicting ``pred`` (with the score row ``row``) everywhere."""
    return lambda records: [[{**r, "pred": pred, **({"scores": row[1]} if row is not None else {})}
                             for r in records]]


def _random(draw: Callable[[list[dict], np.random.Generator], list[dict]],
            draws: int) -> Callable[[list[dict]], list[list[dict]]]:
    """Records -> ``draws`` sets, each ``draw(records, rng)`` (seeded: the same every time)."""
    def build(records: list[dict]) -> list[list[dict]]:
        rng = np.random.default_rng(0)
        return [draw(records, rng) for _ in range(draws)]
    return build


def _ranked(records: list[dict], rng: np.random.Generator) -> list[dict]:
    """Retrieval records whose candidates are in a random order (random scores)."""
    out = []
    for record in records:
        scores = rng.random(len(record["ranking"]))
        top = record["ranking"][int(np.argmax(scores))] if record["ranking"] else record.get("pred")
        out.append({**record, "scores": scores.tolist(), "pred": top})
    return out


def input_free(records: list[dict], metric: MetricDef,
               draws: int = RANDOM_DRAWS) -> tuple[list[Reference], list[tuple[str, list]]]:
    """The predictors that ignore the input, from the records' gold labels (module docstring), each with the first
    constant score row; and every constant score row (name, row), to try with the best constant."""
    if not records:
        return [], []
    gold = [r["gold"] for r in records]
    if "ranking" in records[0]:  # retrieval: a random order of each query's candidates
        return [Reference("a random ranking of each query's candidates", _random(_ranked, draws))], []
    if _is_sequence(records, metric):
        tags = [json.loads(tag) for tag, _ in Counter(_key(t) for g in gold for t in g).most_common(MOST_LABELS)]
        return [Reference(f"the tag {tag!r} everywhere", lambda found, tag=tag: [
            [{**r, "pred": [tag] * len(r["gold"])} for r in found]]) for tag in tags], []
    if all(isinstance(g, (int, float)) and not isinstance(g, bool) for g in gold):  # regression
        values = np.asarray(gold, dtype=float)

        def shuffled(found: list[dict], rng: np.random.Generator) -> list[dict]:
            own = rng.permutation(np.asarray([r["gold"] for r in found], dtype=float))
            return [{**r, "pred": float(v)} for r, v in zip(found, own)]
        return [Reference(f"the gold {name} {value:.4g}", _constant(value), label=value)
                for name, value in (("mean", float(values.mean())), ("median", float(np.median(values))))] + \
            [Reference("the gold values in a random order", _random(shuffled, draws))], []
    if all(isinstance(g, list) for g in gold):  # multi-label: the k most frequent labels, each label alone
        counts = Counter(str(x) for g in gold for x in set(map(str, g)))
        ranked = [label for label, _ in counts.most_common(MOST_LABELS)]
        sets = {json.dumps(ranked[:k]): ranked[:k] for k in range(len(ranked) + 1)}
        sets.update({json.dumps([label]): [label] for label in ranked})
        rows = _score_rows(records, metric, {label: c / len(gold) for label, c in counts.items()})
        first = rows[0] if rows else None
        return [Reference(f"the label set {labels}", _constant(labels, first), label=labels,
                          scores_name=first[0] if first else "") for labels in sets.values()], rows[1:]
    common = [(json.loads(label), c) for label, c in Counter(_key(g) for g in gold).most_common(MOST_LABELS)]
    rows = _score_rows(records, metric, {str(label): c / len(gold) for label, c in common})
    first = rows[0] if rows else None
    labels, weights = [label for label, _ in common], np.array([c for _, c in common], dtype=float)

    def drawn(found: list[dict], rng: np.random.Generator) -> list[dict]:
        picks = rng.choice(len(labels), len(found), p=weights / weights.sum())
        return [{**r, "pred": labels[i], **({"scores": first[1]} if first else {})} for r, i in zip(found, picks)]
    return [Reference(f"the constant prediction {label!r}", _constant(label, first), label=label,
                      scores_name=first[0] if first else "") for label in labels] + \
        [Reference("labels drawn at random by their gold frequency", _random(drawn, draws))], rows[1:]


def _oracle(records: list[dict], metric: MetricDef) -> list[list[dict]]:
    """Record sets that predict the gold labels themselves (with scores that put the gold label first)."""
    if "ranking" in records[0]:
        return [[{**r, "scores": [1.0 if pid in set(r["gold"]) else 0.0 for pid in r["ranking"]]} for r in records]]
    perfect = [{**r, "pred": r["gold"]} for r in records]
    if not all("scores" in r for r in records):
        return [perfect]
    labels = [str(x) for x in metric.labels]
    width = len(records[0]["scores"])
    if not labels or (width != len(labels) and not (width == 1 and len(labels) == 2)):
        return []  # the score columns' labels are unknown: no oracle
    out = []
    for scale in (1.0, 20.0):
        def row(gold: Any) -> list[float]:
            chosen = {str(x) for x in gold} if isinstance(gold, list) else {str(gold)}
            if width == 1:
                return [scale if labels[1] in chosen else (0.0 if scale == 1.0 else -scale)]
            return [scale if label in chosen else 0.0 for label in labels]
        out.append([{**r, "scores": row(r["gold"])} for r in perfect])
    return out


def _better(x: float, y: float, greater_is_better: bool) -> bool:
    return x > y + TOLERANCE if greater_is_better else x < y - TOLERANCE


def _baseline(records: list[dict], metric: MetricDef, greater_is_better: bool, cache: dict | None,
              memo: dict | None) -> dict | None:
    """The best input-free predictor of these records (cached by their gold labels), built on all of them: {reference,
    score}; None when there is none. On more than :data:`SEARCH_UNITS` records the candidates are ranked on a fixed
    sample of them."""
    from kinject.evidence.scorers import scorer_for

    gold_key = (metric.key, metric.evaluator, json.dumps(metric.options, sort_keys=True, default=str),
                json.dumps([[r["id"], r["gold"]] for r in records], default=str))
    if cache is not None and gold_key in cache:
        return cache[gold_key]
    candidates, rows = input_free(records, metric)
    sample = records if len(records) <= SEARCH_UNITS else \
        [records[i] for i in sorted(np.random.default_rng(0).choice(len(records), SEARCH_UNITS, replace=False))]

    def score(reference: Reference, found: list[dict]) -> float:
        reference.on(found)
        reference.score = _value(scorer_for(metric, [reference.records], memo), reference.records)
        return reference.score

    def best_of(found: list[Reference]) -> Reference:
        return max(found, key=lambda c: c.score if greater_is_better else -c.score)

    scored = [c for c in candidates if np.isfinite(score(c, sample))]
    found = None
    if scored:
        best = best_of(scored)
        if best.label is not None and rows:  # the best constant with every constant score row: does it read them?
            variants = [Reference(best.name, _constant(best.label, row), label=best.label, scores_name=row[0])
                        for row in rows]
            variants = [best, *(v for v in variants if np.isfinite(score(v, sample)))]
            reads = len({round(v.score, 12) for v in variants}) > 1
            best = best_of(variants)
            if reads:
                best.name += f" with {best.scores_name}"
        if sample is not records:
            score(best, records)
        if np.isfinite(best.score):
            found = {"reference": best, "score": best.score}
    if cache is not None and not any(name == OWN_MEAN for name, _ in rows):  # else it depends on the run
        cache[gold_key] = found
    return found


def _tells(records: list[dict], metric: MetricDef, baseline: float, greater_is_better: bool) -> bool:
    """Whether the metric can tell learning at all: the gold labels themselves score better than the best
    input-free predictor (ECE: a constant at the base rate is perfectly calibrated, as good as any model)."""
    from kinject.evidence.scorers import scorer_for

    perfect = []
    for oracle in _oracle(records, metric):
        value = _value(scorer_for(metric, [oracle]), oracle)
        if np.isfinite(value):
            perfect.append(value)
    top = (max(perfect) if greater_is_better else min(perfect)) if perfect else None
    return top is None or _better(top, baseline, greater_is_better)


def _value(scorer, records: list[dict]) -> float:
    return float(np.asarray(scorer.value(scorer.stats(records).T[:, None, :]))[0])


def _margin(records: list[dict], reference: Reference, metric: MetricDef,
            memo: dict | None) -> tuple[float, float, float]:
    """(the run's metric, and the 95% interval over examples of its difference to the reference predictor). A
    random reference's draws are paired with as many copies of the run's records, each example's copies resampled
    together."""
    from kinject.evidence.bootstrap import interval_set
    from kinject.evidence.scorers import StatisticsScorer, scorer_for

    scorer = scorer_for(metric, [records, reference.records], memo)
    copies = len(reference.draws)
    a = scorer.stats(reference.records)[:, :, None]
    if isinstance(scorer, StatisticsScorer):  # per-record statistics: the copies are the rows again
        b = np.tile(scorer.stats(records), (copies, 1))[:, :, None]
    else:
        b = scorer.stats([r for _ in range(copies) for r in records])[:, :, None]
    groups = [_group(r) for _ in range(copies) for r in records]
    found = interval_set(scorer, a, b, groups=groups, n_resamples=CHECK_RESAMPLES, seed=0)["examples"]
    return _value(scorer, records), found.low, found.high


def check(records: list[dict], metric: MetricDef, greater_is_better: bool = True,
          cache: dict | None = None, memo: dict | None = None) -> dict | None:
    """Why one run's predictions show it learned nothing (``{constant, score, baseline, baseline_name, margin,
    reason}``; ``margin``: the 95% interval over examples of score minus baseline), or None when it learned
    something (or nothing can be said: no input-free baseline and predictions that vary). ``cache``: shared by
    checks of runs scored on the same gold labels; ``memo``: record sets' statistics (:func:`scorer_for`)."""
    import warnings

    constant = constant_value(records, metric)
    baseline = None
    try:
        with warnings.catch_warnings():  # a metric undefined on a constant (NaN) is a candidate left out, not news
            warnings.simplefilter("ignore")
            memo = {} if memo is None else memo
            best = _baseline(records, metric, greater_is_better, cache, memo)
            if best is not None:
                score, low, high = _margin(records, best["reference"], metric, memo)
                beats = low > 0 if greater_is_better else high < 0
                if np.isfinite(score) and (beats or _tells(records, metric, best["score"], greater_is_better)):
                    baseline = (best["score"], score, best["reference"].name, low, high)
    except Exception:  # noqa: BLE001 - a third party's evaluator that cannot score an input-free predictor
        baseline = None
    beaten = baseline is None or (baseline[3] > 0 if greater_is_better else baseline[4] < 0)
    if constant is None and beaten:
        return None
    out: dict[str, Any] = {"constant": constant is not None, "score": None, "baseline": None, "baseline_name": None,
                           "margin": None}
    reasons = []
    if constant is not None:
        reasons.append(f"constant predictor ({constant if constant.startswith('one score') else 'every prediction ' + constant})")
    if baseline is not None:
        out.update(baseline=baseline[0], score=baseline[1], baseline_name=baseline[2],
                   margin=[baseline[3], baseline[4]])
        if not beaten:
            reasons.append(f"{metric.key} {baseline[1]:.4f} does not beat the best input-free predictor's "
                           f"{baseline[0]:.4f} ({baseline[2]}): the 95% interval of the difference over examples, "
                           f"[{baseline[3]:+.4f}, {baseline[4]:+.4f}], reaches 0")
    out["reason"] = "; ".join(reasons)
    return out


def not_learned(metric: MetricDef, per_seed: dict[int, list[dict]], greater_is_better: bool = True,
                cache: dict | None = None, memo: dict | None = None) -> dict | None:
    """:func:`check` over a system's seeds (seed -> records): None when every seed learned something, else
    ``{seeds (those flagged), of (how many), reason (the first flagged seed's), constant, score, baseline}``."""
    cache, memo = {} if cache is None else cache, {} if memo is None else memo
    flagged = {seed: found for seed in sorted(per_seed)
               if (found := check(per_seed[seed], metric, greater_is_better, cache, memo)) is not None}
    if not flagged:
        return None
    first = flagged[min(flagged)]
    return {**first, "seeds": sorted(flagged), "of": len(per_seed)}


def describe(flag: dict) -> str:
    """One line: why a system learned nothing, with how many of its seeds."""
    share = "" if flag.get("of", 1) == 1 else f" ({len(flag['seeds'])} of {flag['of']} seeds)"
    return f"{flag['reason']}{share}"


def collapsed_text(flag: dict | None) -> str:
    """How many of a method arm's seeds learned nothing: ``2 of 5 seeds collapsed`` (``collapsed`` with one)."""
    if not flag:
        return ""
    of = flag.get("of", 1)
    return "collapsed" if of == 1 else f"{len(flag.get('seeds') or [])} of {of} seeds collapsed"


def verdict_of(verdict: str, baseline: tuple[str, dict | None]) -> str:
    """``verdict``, or ``not learned: <baseline>`` when the baseline (``(name, its not_learned flag)``) learned
    nothing: that voids the comparison. A method arm's own collapse is part of its effect, not a void."""
    name, flag = baseline
    return f"{NOT_LEARNED}: {name}" if flag else verdict


def run_not_learned(run_dir, split: str = "test") -> dict | None:
    """:func:`check` of one run folder's ``predictions/<split>.jsonl`` on its task's primary metric (the model card's
    check); None when it learned something or has no such predictions."""
    from pathlib import Path

    from kinject.evidence.comparison import default_metric, metric_direction
    from kinject.evidence.metrics import build_task, define, task_metric_refs
    from kinject.evidence.runs import Run

    run = Run(Path(run_dir))
    if not (run.path / "predictions" / f"{split}.jsonl").is_file():
        return None
    try:
        key = default_metric(run, split)
        task = build_task(run.task_spec)
        direction = task.greater_is_better(key) if task is not None else metric_direction(key)
        return check(run.predictions(split), define(key, task_metric_refs(task), run.labels), direction)
    except Exception:  # noqa: BLE001 - a run whose metric cannot be recomputed: nothing to say
        return None
