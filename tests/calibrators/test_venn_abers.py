"""VennAbersCalibration against isotonic refits (the definition) and the venn-abers package."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import isotonic_regression
from scipy.special import softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import GridSearchCV

from reliacal.calibrators import IsotonicCalibration, VennAbersCalibration
from reliacal.calibrators.venn_abers import cumulative_diagram, venn_abers_bounds


def _isotonic_value_at_test_pair(scores, targets, weights, test_score, label, side):
    """The definition: isotonic regression of the calibration pairs plus (test, label).

    Tied calibration scores are pooled into one point (weighted mean target); the test
    pair is a point of its own, placed among tied calibration scores by ``side``:
    "right" after them, "left" before them (the venn-abers package's convention: p0
    right, p1 left).
    """
    knots, inverse = np.unique(scores, return_inverse=True)
    pooled_weights = np.bincount(inverse, weights=weights)
    means = np.bincount(inverse, weights=weights * targets) / pooled_weights
    gap = np.searchsorted(knots, test_score, side=side)
    values = np.insert(means, gap, label)
    fitted = isotonic_regression(values, weights=np.insert(pooled_weights, gap, 1.0)).x
    return fitted[gap]


@pytest.mark.parametrize("seed", range(6))
def test_bounds_equal_isotonic_refits_with_the_test_pair(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 40))
    # Continuous scores, then heavily tied ones; unit and integer weights.
    scores = rng.normal(size=n) if seed % 2 else rng.integers(0, 6, size=n).astype(float)
    targets = rng.integers(0, 2, size=n).astype(float)
    weights = np.ones(n) if seed < 3 else rng.integers(1, 4, size=n).astype(float)
    knots, W, S = cumulative_diagram(scores, targets, weights)
    p0, p1 = venn_abers_bounds(W, S)
    tests = np.concatenate([knots, (knots[1:] + knots[:-1]) / 2, [knots[0] - 1, knots[-1] + 1]])
    for test in tests:
        lower = p0[np.searchsorted(knots, test, side="right")]
        upper = p1[np.searchsorted(knots, test, side="left")]
        assert lower == pytest.approx(
            _isotonic_value_at_test_pair(scores, targets, weights, test, 0.0, "right"), abs=1e-12
        )
        assert upper == pytest.approx(
            _isotonic_value_at_test_pair(scores, targets, weights, test, 1.0, "left"), abs=1e-12
        )


def test_hand_computed_bounds():
    # Labels 0, 1, 0, 1 at increasing scores: with the test pair first, labelled 1, the
    # isotonic fit pools (1, 0, 1, 0, 1)... worked out per gap on paper.
    p0, p1 = venn_abers_bounds(np.arange(5.0), np.array([0.0, 0.0, 1.0, 1.0, 2.0]))
    np.testing.assert_allclose(p0, [0, 0, 1 / 3, 1 / 3, 1 / 2])
    np.testing.assert_allclose(p1, [1 / 2, 2 / 3, 2 / 3, 1, 1])


def test_bounds_bracket_the_plain_isotonic_fit_and_grow_with_the_score():
    rng = np.random.default_rng(7)
    scores = rng.normal(size=500)
    y = (rng.uniform(size=500) < 1 / (1 + np.exp(-2 * scores))).astype(int)
    model = VennAbersCalibration().fit(scores, y)
    test = np.sort(rng.normal(size=300))
    interval = model.predict_interval(test)
    isotonic = IsotonicCalibration().fit(scores, y).predict_proba(test)[:, 1]
    assert np.all(interval[:, 0] <= interval[:, 1])
    assert np.all(np.diff(interval, axis=0) >= -1e-15)  # both bounds non-decreasing
    # The plain fit lies within the interval up to one sample's weight.
    assert np.all(isotonic >= interval[:, 0] - 1e-12)
    assert np.all(isotonic <= interval[:, 1] + 1e-12)


venn_abers = pytest.importorskip("venn_abers")


def _binary(seed, n=300):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.02, 0.98, size=n)
    y = (rng.uniform(size=n) < p**1.5).astype(int)
    p_test = rng.uniform(0.02, 0.98, size=200)
    return np.column_stack([1 - p, p]), y, np.column_stack([1 - p_test, p_test])


@pytest.mark.parametrize("tied", [False, True])
def test_binary_ivap_equals_the_venn_abers_package(tied):
    probabilities, y, test = _binary(8)
    if tied:  # scores shared by calibration and test rows
        probabilities = np.round(probabilities, 1)
        test = np.round(test, 1)
    expected, expected_interval = venn_abers.VennAbers().fit(probabilities, y).predict_proba(test)
    model = VennAbersCalibration(input="probs").fit(probabilities, y)
    np.testing.assert_allclose(model.predict_proba(test), expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(model.predict_interval(test), expected_interval, rtol=0, atol=1e-9)


def _multiclass(seed, n=600, n_classes=4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    logits = 2.0 * np.eye(n_classes)[y] + rng.normal(size=(n, n_classes))
    test = 2.0 * np.eye(n_classes)[rng.integers(0, n_classes, size=250)] + rng.normal(
        size=(250, n_classes)
    )
    return logits, y, test


def test_multiclass_one_vs_rest_equals_the_venn_abers_package_from_probabilities_and_logits():
    logits, y, test = _multiclass(9)
    probabilities, test_probabilities = softmax(logits, axis=1), softmax(test, axis=1)
    expected, intervals = venn_abers.VennAbersCalibrator().predict_proba(
        p_cal=probabilities,
        y_cal=y,
        p_test=test_probabilities,
        va_type="one_vs_all",
        p0_p1_output=True,
    )
    from_probabilities = VennAbersCalibration(input="probs").fit(probabilities, y)
    from_logits = VennAbersCalibration().fit(logits, y)
    np.testing.assert_allclose(
        from_probabilities.predict_proba(test_probabilities), expected, rtol=0, atol=1e-9
    )
    np.testing.assert_allclose(from_logits.predict_proba(test), expected, rtol=0, atol=1e-9)
    ours = from_logits.predict_interval(test)
    assert ours.shape == (250, 4, 2)
    for k in range(4):
        np.testing.assert_allclose(ours[:, k], intervals[k], rtol=0, atol=1e-9)


class _Scores(ClassifierMixin, BaseEstimator):
    """A fixed model for venn-abers' cross predictor: its outputs are the given columns."""

    def fit(self, X, y):
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X):
        return X


def test_binary_cvap_equals_the_venn_abers_package():
    probabilities, y, test = _binary(10, n=500)
    reference = venn_abers.VennAbersCV(
        _Scores(), inductive=False, n_splits=5, shuffle=True, random_state=3
    )
    reference.fit(probabilities, y)  # returns None
    expected, bounds = reference.predict_proba(test, p0_p1_output=True)
    model = VennAbersCalibration(inductive=False, n_splits=5, random_state=3, input="probs")
    model.fit(probabilities, y)
    np.testing.assert_allclose(model.predict_proba(test), expected, rtol=0, atol=1e-9)
    # The merged bounds: 1 - GM(1 - p0) and GM(p1) of the folds' bounds.
    merged = np.column_stack(
        [
            1 - np.prod(1 - bounds[:, :5], axis=1) ** (1 / 5),
            np.prod(bounds[:, 5:], axis=1) ** (1 / 5),
        ]
    )
    np.testing.assert_allclose(model.predict_interval(test), merged, rtol=0, atol=1e-9)


def test_integer_sample_weights_equal_repeated_rows():
    logits, y, test = _multiclass(11, n=300, n_classes=3)
    counts = np.random.default_rng(12).integers(0, 4, size=300)
    weighted = VennAbersCalibration().fit(logits, y, sample_weight=counts)
    repeated = VennAbersCalibration().fit(np.repeat(logits, counts, axis=0), np.repeat(y, counts))
    np.testing.assert_allclose(
        weighted.predict_proba(test), repeated.predict_proba(test), atol=1e-12
    )


def test_too_many_folds_for_the_data_is_refused():
    with pytest.raises(ValueError, match="n_splits=5 folds need at least 5 samples"):
        VennAbersCalibration(inductive=False).fit(np.array([0.1, 0.5, -0.3]), [0, 1, 0])


def test_grid_search_chooses_between_inductive_and_cross():
    logits, y, _ = _multiclass(13, n=600, n_classes=3)
    grid = {"inductive": [True, False]}
    search = GridSearchCV(VennAbersCalibration(n_splits=3), grid, scoring="neg_log_loss", cv=3)
    search.fit(logits, y)
    assert search.best_params_["inductive"] in (True, False)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
