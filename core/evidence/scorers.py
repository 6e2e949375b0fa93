"""One metric of the compared runs, recomputed from their prediction records on all units or on bootstrap resamples.

A :class:`Scorer` turns one run's records into an array ``(n_units, d)`` and computes the metric from such arrays.
The arithmetic is the evaluator's own, found on the evaluator object, never by its name:

* :class:`StatisticsScorer`: an evaluator that declares sufficient statistics (``Evaluator.statistics``; every
  built-in). The array holds their columns, the union over the compared runs. A metric from sums
  (``from_statistics``: accuracy, F1 from counts, entity F1, MRR, Pearson from moments, ECE from per-bin sums) is
  resampled by summing rows, so 2000 resamples of 5000 NER sentences take about a second. AUROC (``from_units``)
  is recomputed from the resampled rows, vectorised.
* :class:`EvaluatorScorer`: any other evaluator; its ``compute`` runs on every (re)sample.

``value(x)`` takes ``x`` of shape ``(d, *rest, n)`` (statistics first, units last: ``rest`` is the seed axis, and
the bootstrap batch axis when resampling) and returns an array of shape ``rest``; ``reduce(sums, n)``, for an
``additive`` scorer, does the same from the sums over the units.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from kinject.api import Evaluator, KinjectError
from kinject.evidence.metrics import MetricDef


def evaluator_inputs(records: list[dict], labels: Sequence[str], extra: Sequence[str] = (),
                     scores: bool = False) -> tuple[list, list, dict[str, Any]]:
    """(references, predictions, keyword arguments) of ``compute`` for prediction records, as a run passes them:
    a record's ``gold`` and ``pred``, ``labels=``, ``scores=`` (with ``scores``) and the ``extra`` fields. Retrieval
    records (with a ``ranking``) become one row per candidate: its relevance, its score, and ``groups=`` (its
    record's position, so a record drawn twice is two queries)."""
    if records and "ranking" in records[0]:
        references = [pid in set(r["gold"]) for r in records for pid in r["ranking"]]
        predictions = [score for r in records for score in r["scores"]]
        return references, predictions, {"groups": [i for i, r in enumerate(records) for _ in r["ranking"]]}
    kwargs: dict[str, Any] = {"labels": list(labels) or None, **{field: [r[field] for r in records] for field in extra}}
    if scores:
        kwargs["scores"] = np.asarray([r["scores"] for r in records], dtype=float)  # as the run passed them
    return [r["gold"] for r in records], [r["pred"] for r in records], kwargs


class Scorer:
    """Base: the metric, its evaluator, and the records it is given, checked against what the evaluator ``needs``
    (every compared run's, seen at once)."""

    additive = False  # whether the metric is a function of per-unit sums (a replicate is then a weighted sum)

    def __init__(self, metric: MetricDef, evaluator: Evaluator, record_sets: Sequence[list[dict]]):
        self.metric, self.evaluator = metric, evaluator
        needs = tuple(getattr(evaluator, "needs", ()))
        every = [r for records in record_sets for r in records]
        self.with_scores = bool(every) and all("scores" in r for r in every)
        missing = [field for field in needs if field != "scores" and any(field not in r for r in every)]
        if "scores" in needs and not self.with_scores:
            missing.insert(0, "scores")
        if missing:
            raise KinjectError(f"metric {metric.key!r}: evaluator {metric.evaluator!r} needs the records' "
                               f"{' and '.join(missing)}, which these predictions lack (re-run their evaluate stage: "
                               "kinject keeps what an evaluator's `needs` declares)")
        self.extra = [field for field in needs if field != "scores"]

    def _call(self, function, *args, **kwargs) -> Any:
        """``function(*args, **kwargs)``, one of the evaluator's; a failure as one line."""
        try:
            return function(*args, **kwargs)
        except KinjectError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's metric failing is one line, not a traceback
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise KinjectError(f"metric {self.metric.key!r}: evaluator {self.metric.evaluator!r} failed on the "
                               f"predictions: {type(exc).__name__}: {first}") from None

    def _inputs(self, records: list[dict]) -> tuple[list, list, dict[str, Any]]:
        return evaluator_inputs(records, self.metric.labels, self.extra, self.with_scores)

    def stats(self, records: list[dict]) -> np.ndarray:
        raise NotImplementedError

    def reduce(self, sums: np.ndarray, n: int) -> np.ndarray:
        raise NotImplementedError

    def value(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class StatisticsScorer(Scorer):
    """A metric whose evaluator declares sufficient statistics. Its columns are the union over every compared run
    (a column a run lacks is 0 there), so runs and seeds stack."""

    def __init__(self, metric: MetricDef, evaluator: Evaluator, record_sets: Sequence[list[dict]],
                 memo: dict | None = None):
        super().__init__(metric, evaluator, record_sets)
        self.additive = type(evaluator).from_units is Evaluator.from_units
        self.memo = memo  # id(records) -> (records, their statistics): shared by scorers of one metric
        found = [(records, self._columns(records)) for records in record_sets]
        self.columns = list(dict.fromkeys(key for _, columns in found for key in columns))
        self._arrays = {id(records): (records, self._array(columns, records)) for records, columns in found}

    def _columns(self, records: list[dict]) -> dict[Any, np.ndarray]:
        known = self.memo.get(id(records)) if self.memo is not None else None
        if known is not None and known[0] is records:
            return known[1]
        references, predictions, kwargs = self._inputs(records)
        columns = self._call(self.evaluator.statistics, references, predictions, **kwargs)
        found = {key: np.asarray(column, dtype=float) for key, column in columns.items()}
        if self.memo is not None:
            self.memo[id(records)] = (records, found)
        return found

    def _array(self, columns: dict[Any, np.ndarray], records: list[dict]) -> np.ndarray:
        unknown = [key for key in columns if key not in self.columns]
        wrong = [key for key, column in columns.items() if column.shape != (len(records),)]
        if unknown or wrong:
            raise KinjectError(f"metric {self.metric.key!r}: evaluator {self.metric.evaluator!r}'s statistics "
                               + (f"have a column {unknown[0]!r} the compared runs' did not" if unknown else
                                  f"column {wrong[0]!r} has {columns[wrong[0]].size} values for {len(records)} "
                                  "records (one per record, the evaluation unit)"))
        out = np.zeros((len(records), len(self.columns)))
        for j, key in enumerate(self.columns):
            if key in columns:
                out[:, j] = columns[key]
        return out

    def stats(self, records: list[dict]) -> np.ndarray:
        """The records' statistics, (units, d), in the columns of the compared runs."""
        known = self._arrays.get(id(records))
        if known is not None and known[0] is records:
            return known[1]
        return self._array(self._columns(records), records)

    def _pick(self, metrics: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
        if self.metric.key not in metrics:
            raise KinjectError(f"metric {self.metric.key!r}: evaluator {self.metric.evaluator!r}'s statistics give "
                               f"{', '.join(map(repr, metrics)) or 'no metric'}")
        return np.broadcast_to(np.asarray(metrics[self.metric.key], dtype=float), shape)

    def reduce(self, sums: np.ndarray, n: int) -> np.ndarray:
        """The metric from column sums ``(d, *rest)`` over ``n`` units."""
        return self._pick(self._call(self.evaluator.from_statistics, dict(zip(self.columns, sums)), n), sums.shape[1:])

    def value(self, x: np.ndarray) -> np.ndarray:
        if self.additive:
            return self.reduce(x.sum(axis=-1), x.shape[-1])
        return self._pick(self._call(self.evaluator.from_units, dict(zip(self.columns, x))), x.shape[1:-1])


class EvaluatorScorer(Scorer):
    """An evaluator without statistics (a third party's): the evaluator itself recomputes the metric on every
    (re)sample from the records, with what the evaluate stage handed it (:func:`evaluator_inputs`) - exact, but a
    call per resample instead of a sum of rows."""

    def __init__(self, metric: MetricDef, evaluator: Evaluator, record_sets: Sequence[list[dict]]):
        super().__init__(metric, evaluator, record_sets)
        self.sets: list[list[dict]] = []

    def stats(self, records: list[dict]) -> np.ndarray:
        """One column: which record (set number x 2**20 + position) a row stands for."""
        self.sets.append(records)
        base = (len(self.sets) - 1) * 2**20
        return np.arange(base, base + len(records), dtype=float).reshape(-1, 1)

    def value(self, x: np.ndarray) -> np.ndarray:
        ids = x[0].astype(np.int64)
        out = np.empty(ids.shape[:-1])
        for where in np.ndindex(out.shape):
            references, predictions, kwargs = self._inputs([self.sets[i >> 20][i & (2**20 - 1)]
                                                            for i in ids[where].tolist()])
            out[where] = self._call(lambda: self.evaluator.compute(references, predictions, **kwargs)[self.metric.key])
        return out


def scorer_for(metric: MetricDef, record_sets: Sequence[list[dict]], memo: dict | None = None) -> Scorer:
    """The scorer of ``metric``, fitted on every record set that will be compared: from its evaluator's statistics
    where the evaluator declares them (fast resampling), else the evaluator's ``compute`` (:class:`EvaluatorScorer`).
    The evaluator object decides, whatever name it is registered under. ``memo``: a dict that scorers of this
    metric share, so a record set's statistics are computed once (the records must not change meanwhile)."""
    from kinject.api import MetricRef

    evaluator = MetricRef(name=metric.evaluator, options=metric.options).build()
    if type(evaluator).statistics is not Evaluator.statistics:
        return StatisticsScorer(metric, evaluator, record_sets, memo)
    return EvaluatorScorer(metric, evaluator, record_sets)
