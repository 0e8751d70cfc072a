"""QuadraticScaling against scikit-learn's unpenalised logistic regression and probmetrics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV

from reliacal.calibrators import ConvergenceWarning, PlattScaling, QuadraticScaling
from reliacal.calibrators._classic import one_vs_rest_log_odds


def _unequal_variances(seed, n=2000):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    # Positives spread twice as wide as negatives: the true log-odds are quadratic.
    scores = np.where(y == 1, rng.normal(1.0, 2.0, n), rng.normal(-1.0, 1.0, n))
    return scores, y


def _oracle(scores, y, sample_weight=None):
    features = np.column_stack([scores, scores**2])
    model = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000)
    return model.fit(features, y, sample_weight=sample_weight)


def test_binary_map_is_the_maximum_likelihood_logistic_fit_on_s_and_s_squared():
    scores, y = _unequal_variances(0)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    fitted = QuadraticScaling().fit(scores, y, sample_weight=weights)
    oracle = _oracle(scores, y, weights)
    np.testing.assert_allclose(fitted.coef_[0], oracle.coef_[0], rtol=1e-6)
    np.testing.assert_allclose(fitted.intercept_, oracle.intercept_, rtol=1e-6)
    test = np.linspace(-8, 8, 33)
    np.testing.assert_allclose(
        fitted.predict_proba(test)[:, 1],
        oracle.predict_proba(np.column_stack([test, test**2]))[:, 1],
        atol=1e-8,
    )


def test_the_likelihood_is_never_worse_than_platt_scaling():
    # Platt's map is the c = 0 member of the family: the fit can only gain.
    scores, y = _unequal_variances(2)

    def nll(model):
        p = model.predict_proba(scores)[np.arange(len(y)), y]
        return -np.mean(np.log(p))

    assert nll(QuadraticScaling().fit(scores, y)) < nll(PlattScaling().fit(scores, y)) - 0.01


def test_multiclass_is_one_vs_rest_maps_renormalised():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, size=900)
    logits = 2.5 * (np.eye(3)[y] + rng.normal(size=(900, 3)))
    fitted = QuadraticScaling().fit(logits, y)
    log_odds = one_vs_rest_log_odds(logits)
    columns = []
    for k in range(3):
        oracle = _oracle(log_odds[:, k], (y == k).astype(int))
        columns.append(
            oracle.predict_proba(np.column_stack([log_odds[:, k], log_odds[:, k] ** 2]))[:, 1]
        )
    expected = np.column_stack(columns)
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(fitted.predict_proba(logits), expected, atol=1e-7)


def test_equals_probmetrics_quadratic_scaling():
    calibrators = pytest.importorskip("probmetrics.calibrators")
    scores, y = _unequal_variances(4)
    probabilities = 1.0 / (1.0 + np.exp(-scores))
    peer = calibrators.get_calibrator("quadratic-scaling")
    peer.fit(np.column_stack([1 - probabilities, probabilities]), y)
    test = np.linspace(-4, 4, 17)
    p_test = 1.0 / (1.0 + np.exp(-test))
    expected = peer.predict_proba(np.column_stack([1 - p_test, p_test]))[:, 1]
    fitted = QuadraticScaling().fit(scores, y)
    # probmetrics takes the log-odds of float32 probabilities and stops L-BFGS at 1e-4.
    np.testing.assert_allclose(fitted.predict_proba(test)[:, 1], expected, atol=1e-3)


def test_separable_scores_warn_that_the_fit_did_not_converge():
    scores = np.linspace(-3, 3, 60)
    y = (np.abs(scores) > 1.5).astype(int)  # the square of the score separates the labels
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        QuadraticScaling(max_iter=20).fit(scores, y)
    # Run to float64's floor, Newton "converges" on a zero loss: that is named too.
    with pytest.warns(
        ConvergenceWarning, match=r"separate the calibration labels of map\(s\) \[0\]"
    ):
        QuadraticScaling(max_iter=1000).fit(scores, y)


def test_grid_search_over_max_iter_runs():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, size=600)
    logits = 3.0 * (np.eye(3)[y] + rng.normal(size=(600, 3)))
    grid = {"max_iter": [50, 100]}
    search = GridSearchCV(QuadraticScaling(), grid, scoring="neg_log_loss", cv=3)
    search.fit(logits, y)
    assert search.best_params_["max_iter"] in grid["max_iter"]
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert np.allclose(search.predict_proba(logits).sum(axis=1), 1.0)


def test_probabilities_are_a_softmax_free_function_of_the_one_vs_rest_odds():
    rng = np.random.default_rng(6)
    y = rng.integers(0, 4, size=400)
    logits = 2.0 * (np.eye(4)[y] + rng.normal(size=(400, 4)))
    fitted = QuadraticScaling().fit(logits, y)
    shifted = logits + rng.normal(size=(400, 1))  # softmax is shift invariant: so is the map
    np.testing.assert_allclose(
        fitted.predict_proba(shifted), fitted.predict_proba(logits), atol=1e-10
    )
    assert np.allclose(softmax(logits, axis=1).sum(axis=1), 1)
