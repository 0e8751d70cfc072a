"""CenteredIsotonicCalibration against the cir_model package and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV

from reliacal.calibrators import CenteredIsotonicCalibration, IsotonicCalibration
from reliacal.calibrators._classic import one_vs_rest_log_odds
from reliacal.calibrators.cir import centered_isotonic_knots


def test_hand_computed_knots():
    # Isotonic fit: 0.2, 0.5, 0.5, 0.9; the flat stretch at 0.5 (scores 2 and 3) becomes
    # one knot at its mean score 2.5.
    x, f = centered_isotonic_knots(
        np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.2, 0.6, 0.4, 0.9]), np.ones(4)
    )
    np.testing.assert_allclose(x, [1.0, 2.5, 4.0])
    np.testing.assert_allclose(f, [0.2, 0.5, 0.9])
    # Weights move the mean score: weight 3 on score 3 puts it at (2 + 9) / 4.
    x, _ = centered_isotonic_knots(
        np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.2, 0.6, 0.4, 0.9]), np.array([1, 1, 3, 1.0])
    )
    np.testing.assert_allclose(x, [1.0, 2.75, 4.0])


def test_stretches_at_zero_and_one_keep_both_ends_unless_collapsed():
    scores = np.arange(8.0)
    targets = np.array([0, 0, 0, 1, 0, 1, 1, 1.0])
    x, f = centered_isotonic_knots(scores, targets, np.ones(8))
    np.testing.assert_allclose(x, [0, 2, 3.5, 5, 7])
    np.testing.assert_allclose(f, [0, 0, 0.5, 1, 1])
    x, f = centered_isotonic_knots(scores, targets, np.ones(8), collapse_extremes=True)
    # The first and last stretches still keep their outer ends (the fitted range).
    np.testing.assert_allclose(x, [0, 1, 3.5, 6, 7])
    np.testing.assert_allclose(f, [0, 0, 0.5, 1, 1])


cir_model = pytest.importorskip("cir_model")


@pytest.mark.parametrize("seed", range(8))
def test_equals_the_cir_model_package_on_the_same_scores(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 300))
    scores = rng.normal(size=n) if seed % 2 else rng.integers(0, 12, size=n).astype(float)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-scores))).astype(int)
    weights = np.ones(n) if seed < 4 else rng.uniform(0.5, 2.0, size=n)
    reference = cir_model.CenteredIsotonicRegression().fit(scores, y.astype(float), weights)
    model = CenteredIsotonicCalibration().fit(scores, y, sample_weight=weights)
    test = np.linspace(scores.min(), scores.max(), 101)
    expected = reference.transform(test)
    inside = np.isfinite(expected)  # cir_model gives NaN beyond its knots when one stretch
    np.testing.assert_allclose(model.predict_proba(test)[inside, 1], expected[inside], atol=1e-12)
    # Beyond the calibration range the end values stay (cir_model returns NaN there).
    ends = model.predict_proba(np.array([scores.min() - 5, scores.max() + 5]))[:, 1]
    np.testing.assert_allclose(ends, model.values_[0][[0, -1]])


def test_multiclass_is_one_vs_rest_cir_renormalised():
    rng = np.random.default_rng(9)
    y = rng.integers(0, 3, size=600)
    logits = 2.0 * (np.eye(3)[y] + rng.normal(size=(600, 3)))
    model = CenteredIsotonicCalibration().fit(logits, y)
    test = 2.0 * rng.normal(size=(100, 3))
    scores, test_scores = one_vs_rest_log_odds(logits), one_vs_rest_log_odds(test)
    columns = []
    for k in range(3):
        reference = cir_model.CenteredIsotonicRegression(out_of_bounds="clip")
        reference.fit(scores[:, k], (y == k).astype(float))
        columns.append(reference.transform(test_scores[:, k]))
    expected = np.column_stack(columns)
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict_proba(test), expected, atol=1e-12)


def test_agrees_with_isotonic_at_the_centres_and_rises_strictly_between():
    rng = np.random.default_rng(10)
    scores = rng.normal(size=800)
    y = (rng.uniform(size=800) < 1 / (1 + np.exp(-2 * scores))).astype(int)
    cir = CenteredIsotonicCalibration().fit(scores, y)
    isotonic = IsotonicCalibration().fit(scores, y)
    assert set(np.round(cir.values_[0], 12)) == set(np.round(isotonic.values_[0], 12))
    inner = cir.values_[0][(cir.values_[0] > 0) & (cir.values_[0] < 1)]
    assert np.all(np.diff(inner) > 0)


def test_probability_scale_equals_cir_model_on_the_probabilities():
    rng = np.random.default_rng(12)
    scores = 2.0 * rng.normal(size=400)
    y = (rng.uniform(size=400) < 1 / (1 + np.exp(-scores))).astype(int)
    probabilities = 1 / (1 + np.exp(-scores))
    reference = cir_model.CenteredIsotonicRegression(out_of_bounds="clip")
    reference.fit(probabilities, y.astype(float))
    model = CenteredIsotonicCalibration(scale="probability").fit(scores, y)
    test = 2.5 * rng.normal(size=200)
    expected = reference.transform(1 / (1 + np.exp(-test)))
    np.testing.assert_allclose(model.predict_proba(test)[:, 1], expected, atol=1e-12)
    # Same ranks: the isotonic values at the knots agree with the log-odds scale's.
    on_log_odds = CenteredIsotonicCalibration().fit(scores, y)
    np.testing.assert_allclose(np.unique(model.values_[0]), np.unique(on_log_odds.values_[0]))


def test_grid_search_over_collapse_extremes():
    rng = np.random.default_rng(11)
    y = rng.integers(0, 3, size=600)
    logits = 3.0 * (np.eye(3)[y] + rng.normal(size=(600, 3)))
    grid = {"collapse_extremes": [False, True], "scale": ["log-odds", "probability"]}
    search = GridSearchCV(CenteredIsotonicCalibration(), grid, scoring="neg_brier_score", cv=3)
    search.fit(logits, y)
    assert search.best_params_["collapse_extremes"] in (False, True)
    assert search.best_params_["scale"] in grid["scale"]
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
