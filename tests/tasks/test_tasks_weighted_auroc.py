"""The one weighted AUROC (kinject.tasks.weighted_auroc) that the knowledge probe's gain interval and the evidence
library's bootstrap share: scikit-learn's roc_auc_score with sample_weight, row by row, on random data."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from kinject.tasks import weighted_auroc


@pytest.mark.parametrize("ties", [False, True])
def test_weighted_auroc_is_sklearn_s_with_sample_weight_on_every_row(ties):
    rng = np.random.default_rng(7 + ties)
    for _ in range(50):
        n = int(rng.integers(2, 40))
        scores = rng.integers(0, 5, n).astype(float) if ties else rng.normal(size=n)
        labels = rng.integers(0, 2, n)
        weights = rng.integers(0, 4, (6, n)).astype(float) * rng.random((6, n))  # zero and fractional weights
        got = weighted_auroc(scores, labels, weights)
        assert got.shape == (6,)
        for row, value in zip(weights, got):
            if (row * labels).sum() > 0 and (row * (1 - labels)).sum() > 0:
                assert value == pytest.approx(roc_auc_score(labels, scores, sample_weight=row), abs=1e-12)
            else:  # a class without weight: no AUROC
                assert np.isnan(value)


def test_weighted_auroc_unweighted_over_leading_axes_and_integer_counts_equal_repeated_examples():
    rng = np.random.default_rng(3)
    labels, scores = rng.integers(0, 2, (3, 4, 25)), np.round(rng.random((3, 4, 25)), 1)
    got = weighted_auroc(scores, labels)
    assert got.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            assert got[i, j] == pytest.approx(roc_auc_score(labels[i, j], scores[i, j]), abs=1e-12)
    counts = rng.integers(0, 3, 25)
    assert weighted_auroc(scores[0, 0], labels[0, 0], counts) == pytest.approx(
        roc_auc_score(np.repeat(labels[0, 0], counts), np.repeat(scores[0, 0], counts)), abs=1e-12)
    assert np.isnan(weighted_auroc(np.array([0.1, 0.2]), np.array([1, 1])))  # one class
    assert weighted_auroc(np.zeros((2, 0)), np.zeros((2, 0))).shape == (2,)  # no examples: NaN per row
