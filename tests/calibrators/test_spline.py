"""SplineCalibration: its basis against scipy's natural splines, its fit against
scikit-learn's penalised logistic regression, and its choice of lambda by held-out loss."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.interpolate import CubicSpline
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold

from reliacal.calibrators import ConvergenceWarning, PlattScaling, SplineCalibration
from reliacal.calibrators.spline import _unity_prior, natural_spline_basis


def test_basis_spans_scipys_natural_cubic_splines_and_is_linear_beyond_the_ends():
    knots = np.array([-3.0, -1.0, 0.5, 2.0, 4.0])
    values = np.array([0.3, -1.0, 2.0, 0.5, 1.0])
    reference = CubicSpline(knots, values, bc_type="natural")
    x = np.linspace(-3, 4, 200)
    basis = natural_spline_basis(x, knots)
    coef = np.linalg.lstsq(basis, reference(x), rcond=None)[0]
    np.testing.assert_allclose(basis @ coef, reference(x), atol=1e-10)
    # Beyond the boundary knots every basis function is linear: zero second differences.
    outside = natural_spline_basis(np.array([-9.0, -8.0, -7.0, 6.0, 7.0, 8.0]), knots)
    np.testing.assert_allclose(outside[:3].T @ [1, -2, 1], 0, atol=1e-9)
    np.testing.assert_allclose(outside[3:].T @ [1, -2, 1], 0, atol=1e-9)


def _data(seed, n=1500):
    rng = np.random.default_rng(seed)
    scores = rng.normal(0.0, 2.5, size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-np.tanh(scores) * 2))).astype(int)
    return scores, y


def _objective(scores, y, weights, knots, reg_param, prior_weight):
    """The penalised likelihood of the docstring, written out: a function of beta."""
    prior_scores, prior_targets, prior_weights = _unity_prior(prior_weight)
    design = natural_spline_basis(np.concatenate([scores, prior_scores]), knots)
    targets = np.concatenate([y, prior_targets])
    row_weights = np.concatenate([weights, prior_weights])
    normaliser = weights.sum() + len(prior_scores)

    def objective(beta):
        eta = design @ beta
        losses = np.logaddexp(0.0, eta) - targets * eta
        return row_weights @ losses / normaliser + reg_param / len(beta) * beta @ beta

    return objective


def _sklearn_fit(scores, y, weights, knots, reg_param, prior_weight):
    """The same penalised likelihood by scikit-learn: rows + prior rows, no intercept."""
    prior_scores, prior_targets, prior_weights = _unity_prior(prior_weight)
    design = natural_spline_basis(np.concatenate([scores, prior_scores]), knots)
    # Soft prior targets t as two weighted rows: t of label 1 and 1 - t of label 0.
    features = np.vstack([design[: len(y)], design[len(y) :], design[len(y) :]])
    labels = np.concatenate([y, np.ones(len(prior_scores)), np.zeros(len(prior_scores))])
    row_weights = np.concatenate(
        [weights, prior_weights * prior_targets, prior_weights * (1 - prior_targets)]
    )
    normaliser = weights.sum() + len(prior_scores)
    # sklearn minimises ||beta||^2 / 2 + C sum_i v_i l_i; ours is sum v l / N + lambda/p ||beta||^2.
    c = design.shape[1] / (2 * reg_param * normaliser)
    model = LogisticRegression(C=c, fit_intercept=False, tol=1e-12, max_iter=100_000)
    return model.fit(features, labels, sample_weight=row_weights).coef_[0]


@pytest.mark.parametrize(("reg_param", "prior_weight"), [(1e-2, 20.0), (10.0, 20.0), (1.0, 0.0)])
def test_fixed_lambda_fit_equals_sklearns_penalised_logistic_regression(reg_param, prior_weight):
    scores, y = _data(0)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    model = SplineCalibration(reg_param_grid=[reg_param], unity_prior_weight=prior_weight)
    model.fit(scores, y, sample_weight=weights)
    expected = _sklearn_fit(scores, y, weights, model.knots_[0], reg_param, prior_weight)
    objective = _objective(scores, y, weights, model.knots_[0], reg_param, prior_weight)
    # The cubic basis makes the optimum flat along some directions: Newton's method gets
    # at least as low as scikit-learn's L-BFGS, and the two maps agree closely.
    assert objective(model.coef_[0]) <= objective(expected) + 1e-12
    grid = np.linspace(-6, 6, 49)
    np.testing.assert_allclose(
        model.predict_proba(grid)[:, 1],
        1 / (1 + np.exp(-natural_spline_basis(grid, model.knots_[0]) @ expected)),
        atol=1e-3,
    )
    assert model.reg_param_[0] == reg_param


@pytest.mark.parametrize("param_search", ["fast", "full"])
def test_lambda_is_the_held_out_log_loss_minimiser(param_search):
    scores, y = _data(2, n=800)
    grid = [1e-3, 1e-1, 10.0, 1e3]
    model = SplineCalibration(reg_param_grid=grid, param_search=param_search).fit(scores, y)
    folds = list(StratifiedKFold(5, shuffle=True, random_state=42).split(scores, y))
    folds = folds[:1] if param_search == "fast" else folds
    losses = []
    for reg_param in grid:
        total = 0.0
        for train, test in folds:
            beta = _sklearn_fit(
                scores[train], y[train], np.ones(len(train)), model.knots_[0], reg_param, 20.0
            )
            eta = natural_spline_basis(scores[test], model.knots_[0]) @ beta
            total += np.mean(np.logaddexp(0.0, eta) - y[test] * eta)
        losses.append(total / len(folds))
    losses = np.array(losses)
    best = max(g for g, loss in zip(grid, losses) if loss <= losses.min() + 1e-4)
    assert model.reg_param_[0] == best


def test_recovers_a_saturating_map_that_platt_cannot():
    scores, y = _data(3, n=4000)
    model = SplineCalibration().fit(scores, y)
    where = np.array([-4.0, -1.0, 0.0, 1.0, 4.0])  # within the bulk of the scores
    truth = 1 / (1 + np.exp(-np.tanh(where) * 2))
    np.testing.assert_allclose(model.predict_proba(where)[:, 1], truth, atol=0.03)
    fresh, labels = _data(30, n=20_000)

    def log_loss(fitted):
        return -np.mean(np.log(fitted.predict_proba(fresh)[np.arange(len(labels)), labels]))

    assert log_loss(model) < log_loss(PlattScaling().fit(scores, y)) - 0.01


def test_knots_are_quantiles_of_the_scores_plus_the_fixed_log_odds():
    scores, y = _data(4, n=500)
    model = SplineCalibration(n_knots=5, reg_param_grid=[1.0]).fit(scores, y)
    fixed = np.log(np.arange(1, 10) / (10 - np.arange(1, 10)))
    expected = np.unique(
        np.concatenate([np.quantile(np.unique(scores), np.linspace(0, 1, 5)), fixed])
    )
    np.testing.assert_allclose(model.knots_[0], expected)


def test_bad_grids_and_budgets_are_named():
    scores, y = _data(5, n=200)
    with pytest.raises(ValueError, match="reg_param_grid must hold finite non-negative"):
        SplineCalibration(reg_param_grid=[-1.0]).fit(scores, y)
    with pytest.raises(ValueError, match="'param_search' parameter"):
        SplineCalibration(param_search="all").fit(scores, y)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        SplineCalibration(reg_param_grid=[1e-4], max_iter=1).fit(scores, y)


def test_grid_search_over_the_number_of_knots():
    rng = np.random.default_rng(6)
    y = rng.integers(0, 3, size=450)
    logits = 3.0 * (np.eye(3)[y] + rng.normal(size=(450, 3)))
    grid = {"n_knots": [5, 15]}
    search = GridSearchCV(
        SplineCalibration(reg_param_grid=[0.1, 10.0], cv=3), grid, scoring="neg_log_loss", cv=3
    )
    search.fit(logits, y)
    assert search.best_params_["n_knots"] in grid["n_knots"]
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
