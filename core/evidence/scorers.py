"""Per-example sufficient statistics for every metric kinject reports, and the metric recomputed from them.

A :class:`Scorer` turns the prediction records of one run into an array ``(n_examples, d)`` and computes
the metric from such arrays - on all examples (the value in metrics.json) or on bootstrap resamples. For
a metric that is a sum over examples (accuracy, MRR, recall@k, micro/macro F1 from per-example
tp/fp/fn counts, entity F1 from per-sentence counts, Pearson from moments, ECE from per-bin sums) a
resample only sums rows, so 2000 resamples of 5000 NER sentences take about a second. AUROC is
recomputed on every resample (Mann-Whitney, ``kinject.tasks.weighted_auroc``), ties counting one half as
scikit-learn does.

``value(x)`` takes ``x`` of shape ``(d, *rest, n)`` (statistics first, examples last: ``rest`` is the
seed axis, and the bootstrap batch axis when resampling) and returns an array of shape ``rest``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kinject.api import KinjectError
from kinject.evidence.metrics import MetricDef


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, 0 where den is 0 (scikit-learn's ``zero_division=0``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def _f1(tp, fp, fn):
    return _ratio(2 * tp, 2 * tp + fp + fn)


class Scorer:
    """Base: ``fit`` sees every compared run's records (to fix class sets), ``stats`` one run's."""

    def __init__(self, metric: MetricDef):
        self.metric = metric

    def fit(self, record_sets: Sequence[list[dict]]) -> "Scorer":
        return self

    def stats(self, records: list[dict]) -> np.ndarray:
        raise NotImplementedError

    def reduce(self, sums: np.ndarray, n: int) -> np.ndarray:
        raise NotImplementedError

    def value(self, x: np.ndarray) -> np.ndarray:
        return self.reduce(x.sum(axis=-1), x.shape[-1])


class MeanScorer(Scorer):
    """Metrics that are means over examples (accuracy, recall@k, MRR): columns (value, counted)."""

    def stats(self, records):
        key, ev = self.metric.key, self.metric.evaluator
        rows = []
        for r in records:
            if ev == "accuracy":
                multi = isinstance(r["gold"], list)
                rows.append((float(set(r["gold"]) == set(r["pred"]) if multi else r["gold"] == r["pred"]), 1.0))
                continue
            from kinject.tasks import relevant_ranks

            gold = set(r["gold"])
            ranks = relevant_ranks(np.array([pid in gold for pid in r["ranking"]], dtype=bool),
                                   np.asarray(r["scores"], dtype=float))
            if not ranks.size:
                rows.append((0.0, 0.0))  # no relevant candidate: left out, as the evaluator does
            elif ev == "mrr":
                rows.append((1.0 / ranks.min(), 1.0))
            else:
                rows.append((float((ranks <= int(key.split("@")[1])).mean()), 1.0))
        return np.array(rows, dtype=float).reshape(len(records), 2)

    def reduce(self, sums, n):
        return _ratio(sums[0], sums[1])


class F1Scorer(Scorer):
    """F1 over classes (single- or multi-label): per example and class tp/fp/fn, plus one column per class
    that marks whether the class counts for this run - scikit-learn's label set: the given positives, else
    every label in this run's gold or predicted labels (plus the task's labels when multi-label). The
    columns are over the classes of every compared run, so runs and seeds stack."""

    def fit(self, record_sets):
        o = self.metric.options
        self.multi = any(isinstance(r["gold"], list) for records in record_sets for r in records[:1])
        seen = {str(x) for records in record_sets for r in records for x in self._labels(r)}
        if o["average"] == "binary" and not self.multi:
            self.classes = [(o["positive"] or ["1"])[0]]
        elif o["positive"]:
            self.classes = list(o["positive"])
        else:
            self.classes = sorted(seen | (set(self.metric.labels) if self.multi else set()))
        return self

    def _labels(self, r):
        return [*r["gold"], *r["pred"]] if self.multi else [r["gold"], r["pred"]]

    def stats(self, records):
        index = {c: j for j, c in enumerate(self.classes)}
        k = len(self.classes)
        out = np.zeros((len(records), 4 * k))
        present = np.zeros(k)
        for i, r in enumerate(records):
            gold = {str(x) for x in r["gold"]} if self.multi else {str(r["gold"])}
            pred = {str(x) for x in r["pred"]} if self.multi else {str(r["pred"])}
            for c in gold | pred:
                j = index.get(c)
                if j is None:
                    continue
                present[j] = 1
                out[i, j] += c in gold and c in pred
                out[i, k + j] += c in pred and c not in gold
                out[i, 2 * k + j] += c in gold and c not in pred
        o = self.metric.options
        if o["positive"] or o["average"] == "binary":
            present[:] = 1  # a fixed label set: every class counts
        elif self.multi:
            present[[index[c] for c in self.metric.labels if c in index]] = 1  # the task's labels always count
        out[:, 3 * k:] = present
        return out

    def reduce(self, sums, n):
        k = len(self.classes)
        tp, fp, fn, counts = sums[:k], sums[k:2 * k], sums[2 * k:3 * k], sums[3 * k:] > 0
        average = self.metric.options["average"]
        if average in ("micro", "binary"):
            return _f1((tp * counts).sum(0), (fp * counts).sum(0), (fn * counts).sum(0))
        per_class = _f1(tp, fp, fn) * counts
        if average == "macro":
            return _ratio(per_class.sum(0), counts.sum(0))
        support = (tp + fn) * counts
        return _ratio((per_class * support).sum(0), support.sum(0))


class EntityScorer(Scorer):
    """Entity-level precision/recall/F1 (seqeval's chunking): per sentence (tp, fp, fn) entity counts."""

    def stats(self, records):
        strict = self.metric.options["mode"] == "strict"
        if strict:
            from seqeval import scheme as schemes
            from seqeval.scheme import Entities

            scheme = getattr(schemes, self.metric.options["scheme"])

            def entities(tags):
                return {e.to_tuple()[1:] for e in Entities([list(tags)], scheme).entities[0]}
        else:
            from seqeval.metrics.sequence_labeling import get_entities

            def entities(tags):
                return set(get_entities(list(tags)))
        out = np.zeros((len(records), 3))
        for i, r in enumerate(records):
            gold, pred = entities(r["gold"]), entities(r["pred"])
            tp = len(gold & pred)
            out[i] = (tp, len(pred) - tp, len(gold) - tp)
        return out

    def reduce(self, sums, n):
        tp, fp, fn = sums
        which = self.metric.key[len(self.metric.options["prefix"]):]
        return {"f1": _f1(tp, fp, fn), "precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn)}[which]


class PicoScorer(Scorer):
    """Word-level F1 per PICO element and their mean: per sentence and element (tp, fp, fn) word counts."""

    def stats(self, records):
        elements = self.metric.options["elements"]
        out = np.zeros((len(records), 3 * len(elements)))

        def members(label):
            return set() if label is None else {label} if isinstance(label, str) else set(label)

        for i, r in enumerate(records):
            for g, p in zip(r["gold"], r["pred"]):
                g, p = members(g), members(p)
                for j, e in enumerate(elements):
                    out[i, 3 * j:3 * j + 3] += (e in g and e in p, e in p and e not in g, e in g and e not in p)
        return out

    def reduce(self, sums, n):
        name, elements = self.metric.options["name"], self.metric.options["elements"]
        per = [_f1(*sums[3 * j:3 * j + 3]) for j in range(len(elements))]
        if self.metric.key == name:
            return np.mean(per, axis=0)
        return per[elements.index(self.metric.key[len(name) + 1:])]


class PearsonScorer(Scorer):
    """Pearson correlation from per-example moments (x, y, x², y², xy); 0 when either side is constant."""

    def stats(self, records):
        x = np.array([float(r["gold"]) for r in records])
        y = np.array([float(r["pred"]) for r in records])
        return np.stack([x, y, x * x, y * y, x * y], axis=1)

    def reduce(self, sums, n):
        sx, sy, sxx, syy, sxy = sums
        vx, vy = n * sxx - sx * sx, n * syy - sy * sy
        ok = (vx > 1e-12 * np.maximum(1, n * sxx)) & (vy > 1e-12 * np.maximum(1, n * syy))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(ok, (n * sxy - sx * sy) / np.sqrt(np.where(ok, vx * vy, 1)), 0.0)


def _probabilities(scores: np.ndarray, inputs: str = "logits") -> np.ndarray:
    from kinject.tasks import softmax

    if scores.shape[1] == 1:
        p = scores[:, 0] if inputs == "probabilities" else 1 / (1 + np.exp(-scores[:, 0]))
        return np.stack([1 - p, p], axis=1)
    return scores if inputs == "probabilities" else softmax(scores)


def _scores(records: list[dict], metric: MetricDef) -> np.ndarray:
    if any("scores" not in r for r in records):
        raise KinjectError(f"metric {metric.key!r} needs the model's scores, which these predictions lack")
    if not metric.labels:
        raise KinjectError(f"metric {metric.key!r} needs the task's label order (the run's model/config.json "
                           "id2label, or labels=...)")
    return np.array([r["scores"] for r in records], dtype=float).reshape(len(records), -1)


class AurocScorer(Scorer):
    """AUROC (binary, one-vs-rest multi-class, multi-label; macro/weighted/micro) on every sample
    (``kinject.tasks.weighted_auroc``, the knowledge probe's too):
    columns = one 0/1 gold column per class, then one score column per class."""

    def stats(self, records):
        labels, o = list(self.metric.labels), self.metric.options
        scores = _scores(records, self.metric)
        multi = bool(records) and isinstance(records[0]["gold"], list)
        if multi:
            y = np.array([[name in set(r["gold"]) for name in labels] for r in records], dtype=float)
            keep = [j for j in range(y.shape[1]) if 0 < y[:, j].sum() < len(y)]
            y, s = y[:, keep], scores[:, keep]
        elif scores.shape[1] <= 2:
            positive = o["positive"] or (labels[1] if len(labels) > 1 else labels[0])
            s = scores[:, -1:] if scores.shape[1] == 1 else \
                scores[:, [labels.index(positive)]] - scores[:, [1 - labels.index(positive)]]
            y = np.array([[str(r["gold"]) == positive] for r in records], dtype=float)
        else:
            s = _probabilities(scores)
            y = np.array([[str(r["gold"]) == name for name in labels] for r in records], dtype=float)
        return np.concatenate([y, s], axis=1)

    def value(self, x):
        from kinject.tasks import weighted_auroc

        k = x.shape[0] // 2
        y, s = x[:k], x[k:]
        average = self.metric.key.split("_", 1)[1]
        if k == 0:
            return np.zeros(x.shape[1:-1])
        if average == "micro":
            flat = (*x.shape[1:-1], k * x.shape[-1])
            return np.nan_to_num(weighted_auroc(np.moveaxis(s, 0, -2).reshape(flat),
                                                np.moveaxis(y, 0, -2).reshape(flat)))
        auc = weighted_auroc(s, y)
        valid = np.isfinite(auc)
        weights = valid * (y.sum(-1) if average == "weighted" else 1.0)
        return _ratio(np.where(valid, auc, 0) * weights, weights.sum(0, keepdims=True)).sum(0)


class EceScorer(Scorer):
    """Expected calibration error from per-bin sums: columns = correct-in-bin-m, confidence-in-bin-m."""

    def stats(self, records):
        o, labels = self.metric.options, list(self.metric.labels)
        probs = _probabilities(_scores(records, self.metric), o["inputs"])
        confidence = probs.max(axis=1)
        correct = np.array([labels[j] == str(r["gold"]) for j, r in zip(probs.argmax(axis=1), records)], dtype=float)
        bins = o["bins"]
        index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
        out = np.zeros((len(records), 2 * bins))
        out[np.arange(len(records)), index] = correct
        out[np.arange(len(records)), bins + index] = confidence
        return out

    def reduce(self, sums, n):
        bins = sums.shape[0] // 2
        return np.abs(sums[:bins] - sums[bins:]).sum(0) / n


SCORERS: dict[str, type[Scorer]] = {
    "accuracy": MeanScorer, "recall-at-k": MeanScorer, "mrr": MeanScorer, "f1": F1Scorer,
    "entity-f1": EntityScorer, "pico-f1": PicoScorer, "pearson": PearsonScorer, "auroc": AurocScorer,
    "ece": EceScorer,
}


class EvaluatorScorer(Scorer):
    """Any other evaluator (a third party's): the evaluator itself recomputes the metric on every (re)sample from
    the records' ``gold`` and ``pred``, with ``labels`` and, where the records keep them, ``scores`` - what the
    evaluate stage handed it - exact, but a call per resample instead of a sum of rows. It fails as one line."""

    def fit(self, record_sets):
        from kinject.api import MetricRef

        self.evaluator = MetricRef(name=self.metric.evaluator, options=self.metric.options).build()
        needs = tuple(getattr(self.evaluator, "needs", ()))
        self.sets: list[list[dict]] = []
        every = [r for records in record_sets for r in records]
        self.with_scores = bool(every) and all("scores" in r for r in every)
        missing = [field for field in needs if field != "scores" and any(field not in r for r in every)]
        if "scores" in needs and not self.with_scores:
            missing.insert(0, "scores")
        if missing:
            raise KinjectError(f"metric {self.metric.key!r}: evaluator {self.metric.evaluator!r} needs the records' "
                               f"{' and '.join(missing)}, which these predictions lack (re-run their evaluate stage: "
                               "kinject keeps what an evaluator's `needs` declares)")
        self.extra = [field for field in needs if field != "scores"]
        return self

    def stats(self, records):
        """One column: which record (set number x 2**20 + position) a row stands for."""
        self.sets.append(records)
        base = (len(self.sets) - 1) * 2**20
        return np.arange(base, base + len(records), dtype=float).reshape(-1, 1)

    def value(self, x):
        ids = x[0].astype(np.int64)
        out = np.empty(ids.shape[:-1])
        labels = list(self.metric.labels) or None
        for where in np.ndindex(out.shape):
            rows = [self.sets[i >> 20][i & (2**20 - 1)] for i in ids[where].tolist()]
            kwargs = {field: [r[field] for r in rows] for field in self.extra}
            if self.with_scores:
                kwargs["scores"] = np.asarray([r["scores"] for r in rows], dtype=float)  # as the run passed them
            try:
                scores = self.evaluator.compute([r["gold"] for r in rows], [r["pred"] for r in rows], labels=labels,
                                                **kwargs)
                out[where] = scores[self.metric.key]
            except Exception as exc:  # noqa: BLE001 - a plugin's metric failing is one line, not a traceback
                raise KinjectError(f"metric {self.metric.key!r}: evaluator {self.metric.evaluator!r} failed on the "
                                   f"predictions: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                                   ) from None
        return out


def scorer_for(metric: MetricDef, record_sets: Sequence[list[dict]]) -> Scorer:
    """The scorer of ``metric``, fitted on every record set that will be compared: a sufficient-statistics scorer
    for the built-in evaluators (fast resampling), else the evaluator itself (:class:`EvaluatorScorer`)."""
    return SCORERS.get(metric.evaluator, EvaluatorScorer)(metric).fit(record_sets)


def seed_statistic(scorer: Scorer) -> callable:
    """``statistic(x, axis=-1)`` for :func:`kinject.evidence.stats.paired_bootstrap` over arrays
    ``(n, d, seeds)``: the metric of each seed on the (re)sampled examples, averaged over seeds."""

    def statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return scorer.value(x).mean(axis=0)  # (d, seeds[, batch], n) -> ([batch])

    return statistic
