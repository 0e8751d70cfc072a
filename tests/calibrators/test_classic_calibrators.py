"""The classic calibrators (Platt, isotonic, beta, histogram binning, ETS) against oracles."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar
from scipy.special import expit, log_softmax, softmax
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV, _sigmoid_calibration
from sklearn.frozen import FrozenEstimator
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.utils.estimator_checks import parametrize_with_checks

from reliacal.calibrators import (
    BetaCalibration,
    ConvergenceWarning,
    EnsembleTemperatureScaling,
    HistogramBinning,
    IsotonicCalibration,
    PlattScaling,
)
from reliacal.calibrators._classic import CLASSIC_NOTES_DOC, OneVsRestCalibrator

CLASSIC = [
    PlattScaling(),
    IsotonicCalibration(),
    BetaCalibration(),
    HistogramBinning(),
    HistogramBinning(mode="top-label"),
    EnsembleTemperatureScaling(),
]
_TINY = np.finfo(np.float64).tiny
_LOG_TINY = float(np.log(1 / _TINY))


def _ids(estimators):
    return [f"{type(e).__name__}-{getattr(e, 'mode', '')}".rstrip("-") for e in estimators]


@parametrize_with_checks(CLASSIC, expected_failed_checks=lambda e: e._expected_failed_checks())
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# ------------------------------------------------------------------------------------
# Oracles, written independently of the package.


def _one_vs_rest(probabilities):
    """log p_k - log(sum_{j != k} p_j), each complement summed directly."""
    p = np.maximum(probabilities.astype(np.float64), _TINY)
    n_classes = p.shape[1]
    others = np.column_stack(
        [p[:, np.arange(n_classes) != k].sum(axis=1) for k in range(n_classes)]
    )
    return np.clip(np.log(p) - np.log(others), -_LOG_TINY, _LOG_TINY)


def _normalised(columns):
    totals = columns.sum(axis=1, keepdims=True)
    uniform = np.full_like(columns, 1.0 / columns.shape[1])
    return np.where(totals > 0, columns / np.where(totals > 0, totals, 1.0), uniform)


def _logistic_oracle(features, targets, bounds=None):
    """Direct likelihood fit of sigmoid(features @ coef + intercept) by L-BFGS-B."""
    design = np.column_stack([features, np.ones(len(targets))])

    def loss(theta):
        eta = design @ theta
        value = np.mean(np.logaddexp(0.0, eta) - targets * eta)
        return value, design.T @ (expit(eta) - targets) / len(targets)

    result = minimize(
        loss,
        np.zeros(design.shape[1]),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 10000},
    )
    return result.x


def _checked_classes(n_classes):
    """All classes of CIFAR-10; every tenth of CIFAR-100 (the oracle fits are slow)."""
    return np.arange(0, n_classes, max(1, n_classes // 10))


def _assert_maps_equal(calibrator, oracle_columns, maps, test_p, n_classes):
    """The full predict_proba when every class has an oracle, else each checked map."""
    if len(oracle_columns) == n_classes:
        expected = _normalised(np.column_stack(oracle_columns))
        np.testing.assert_allclose(calibrator.predict_proba(test_p), expected, atol=1e-6)
    else:
        np.testing.assert_allclose(
            np.column_stack(maps), np.column_stack(oracle_columns), atol=1e-6
        )


@pytest.fixture
def record_halves(cifar_record):
    """Each CIFAR record: the first half to fit on, its labels, the second half to predict."""
    _, probabilities, labels = cifar_record
    half = len(labels) // 2
    return probabilities[:half], labels[:half], probabilities[half:]


# ------------------------------------------------------------------------------------
# Each calibrator equals its oracle to 1e-6 on the four CIFAR records.


def _assert_maps_match_oracles(calibrator, record_halves, oracle_and_map):
    """Fit on the first half; compare each checked class's map with its oracle.

    ``oracle_and_map(fitted, fit_s, target, test_s, k)`` gets class ``k``'s
    one-vs-rest log-odds on both halves and its 0/1 targets, and returns the
    oracle's and the calibrator's probabilities on the second half.
    """
    fit_p, fit_y, test_p = record_halves
    fit_s, test_s = _one_vs_rest(fit_p), _one_vs_rest(test_p)
    calibrator.fit(fit_p, fit_y)
    columns, maps = [], []
    for k in _checked_classes(fit_p.shape[1]):
        target = (fit_y == k).astype(float)
        column, mapped = oracle_and_map(calibrator, fit_s[:, k], target, test_s[:, k], k)
        columns.append(column)
        maps.append(mapped)
    _assert_maps_equal(calibrator, columns, maps, test_p, fit_p.shape[1])


def _platt_map(platt, test_s, k):
    return expit(platt.coef_[k] * test_s + platt.intercept_[k])


def test_platt_equals_a_direct_likelihood_fit_on_cifar(record_halves):
    def oracle_and_map(platt, fit_s, target, test_s, k):
        slope, intercept = _logistic_oracle(fit_s[:, None], target)
        return expit(slope * test_s + intercept), _platt_map(platt, test_s, k)

    _assert_maps_match_oracles(PlattScaling(input="probs"), record_halves, oracle_and_map)


def test_platt_with_target_smoothing_equals_sklearn_sigmoid_on_cifar(record_halves):
    def oracle_and_map(platt, fit_s, target, test_s, k):
        # sklearn's sign convention: p = 1 / (1 + exp(a s + b)).
        a, b = _sigmoid_calibration(fit_s, target)
        return expit(-(a * test_s + b)), _platt_map(platt, test_s, k)

    platt = PlattScaling(input="probs", target_smoothing=True)
    _assert_maps_match_oracles(platt, record_halves, oracle_and_map)


def test_isotonic_equals_sklearn_isotonic_regression_on_cifar(record_halves):
    fit_p, fit_y, test_p = record_halves
    fit_s, test_s = _one_vs_rest(fit_p), _one_vs_rest(test_p)
    columns = [
        IsotonicRegression(out_of_bounds="clip").fit(fit_s[:, k], fit_y == k).predict(test_s[:, k])
        for k in range(fit_p.shape[1])
    ]
    calibrated = IsotonicCalibration(input="probs").fit(fit_p, fit_y).predict_proba(test_p)
    np.testing.assert_allclose(calibrated, _normalised(np.column_stack(columns)), atol=1e-6)


def test_beta_equals_a_bounded_likelihood_fit_on_cifar(record_halves):
    def oracle_and_map(beta, fit_s, target, test_s, k):
        # [ln p, -ln(1 - p)] of the one-vs-rest probability, with a, b >= 0.
        features = np.column_stack([-np.logaddexp(0, -fit_s), np.logaddexp(0, fit_s)])
        a, b, c = _logistic_oracle(features, target, bounds=[(0, None), (0, None), (None, None)])
        log_p, minus_log_q = -np.logaddexp(0, -test_s), np.logaddexp(0, test_s)
        (fitted_a, fitted_b), fitted_c = beta.coef_[k], beta.intercept_[k]
        return (
            expit(a * log_p + b * minus_log_q + c),
            expit(fitted_a * log_p + fitted_b * minus_log_q + fitted_c),
        )

    _assert_maps_match_oracles(BetaCalibration(input="probs"), record_halves, oracle_and_map)


def test_ets_equals_a_direct_likelihood_fit_on_cifar(record_halves):
    fit_p, fit_y, test_p = record_halves
    fit_z = np.log(np.maximum(fit_p.astype(np.float64), _TINY))
    test_z = np.log(np.maximum(test_p.astype(np.float64), _TINY))
    rows = np.arange(len(fit_y))

    def ts_nll(log_t):
        return -np.mean(log_softmax(fit_z / np.exp(log_t), axis=1)[rows, fit_y])

    temperature = np.exp(
        minimize_scalar(ts_nll, bounds=(-5, 5), method="bounded", options={"xatol": 1e-10}).x
    )
    components = np.column_stack(
        [
            softmax(fit_z / temperature, axis=1)[rows, fit_y],
            softmax(fit_z, axis=1)[rows, fit_y],
            np.full(len(fit_y), 1.0 / fit_p.shape[1]),
        ]
    )
    weights = minimize(
        lambda w: -np.mean(np.log(components @ w)),
        np.full(3, 1 / 3),
        method="SLSQP",
        bounds=[(0, 1)] * 3,
        constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1}],
        options={"ftol": 1e-15, "maxiter": 1000},
    ).x
    expected = (
        weights[0] * softmax(test_z / temperature, axis=1)
        + weights[1] * softmax(test_z, axis=1)
        + weights[2] / fit_p.shape[1]
    )
    ets = EnsembleTemperatureScaling(input="probs").fit(fit_p, fit_y)
    assert ets.temperature_ == pytest.approx(temperature, rel=1e-6)
    assert ets.weights_.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(ets.weights_ >= 0)
    np.testing.assert_allclose(ets.predict_proba(test_p), expected, atol=1e-6)


# ------------------------------------------------------------------------------------
# Binary problems: side by side with scikit-learn's CalibratedClassifierCV.


def _binary_problem(seed=0, n=2000):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = (X @ [1.5, -1.0, 0.5, 0.0] + rng.logistic(size=n) > 0).astype(int)
    model = LogisticRegression().fit(X[: n // 2], y[: n // 2])
    return model, X[n // 2 :], y[n // 2 :]


@pytest.mark.parametrize(
    ("method", "calibrator"),
    [
        ("sigmoid", PlattScaling(target_smoothing=True)),
        ("isotonic", IsotonicCalibration()),
    ],
    ids=["sigmoid", "isotonic"],
)
def test_binary_scores_match_calibrated_classifier_cv(method, calibrator):
    model, X, y = _binary_problem()
    half = len(y) // 2
    reference = CalibratedClassifierCV(FrozenEstimator(model), method=method)
    reference.fit(X[:half], y[:half])
    scores = model.decision_function(X)
    ours = clone(calibrator).fit(scores[:half], y[:half])
    np.testing.assert_allclose(
        ours.predict_proba(scores[half:]), reference.predict_proba(X[half:]), atol=1e-6
    )


@pytest.mark.parametrize("estimator", CLASSIC, ids=_ids(CLASSIC))
def test_one_dimensional_scores_are_the_positive_class_logit(estimator):
    model, X, y = _binary_problem(seed=1)
    scores = model.decision_function(X)
    probabilities = expit(scores)
    as_columns = clone(estimator).fit(np.column_stack([np.zeros_like(scores), scores]), y)
    as_scores = clone(estimator).fit(scores, y)
    as_probabilities = clone(estimator).set_params(input="probs").fit(probabilities, y)
    expected = as_columns.predict_proba(np.column_stack([np.zeros_like(scores), scores]))
    assert as_scores.n_features_in_ == 1
    np.testing.assert_allclose(as_scores.predict_proba(scores), expected, atol=1e-12)
    np.testing.assert_allclose(as_probabilities.predict_proba(probabilities), expected, atol=1e-9)
    np.testing.assert_array_equal(as_scores.predict(scores), as_scores.classes_[expected.argmax(1)])
    with pytest.raises(ValueError, match="X has 2 features, but .* is expecting 1"):
        as_scores.predict_proba(np.column_stack([scores, scores]))
    with pytest.raises(ValueError, match="Reshape your data"):
        as_columns.predict_proba(scores)


@pytest.mark.parametrize("estimator", CLASSIC, ids=_ids(CLASSIC))
def test_bad_inputs_raise_clear_errors(estimator):
    scores = np.linspace(-3, 3, 40)
    y = (scores > 0).astype(int)
    with pytest.raises(ValueError, match="NaN or infinite"):
        clone(estimator).fit(np.where(y == 1, np.nan, scores), y)
    with pytest.raises(ValueError, match=r"labels \[2\] are not column indices"):
        clone(estimator).fit(scores, np.where(scores > 2, 2, y))
    with pytest.raises(ValueError, match="does not hold probabilities"):
        clone(estimator).set_params(input="probs").fit(scores, y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        clone(estimator).fit(scores, y[:-1])
    with pytest.raises(ValueError, match="0 sample"):
        clone(estimator).fit(np.empty(0), np.empty(0, dtype=int))


def test_invalid_parameters_are_named():
    scores, y = np.linspace(-3, 3, 40), (np.linspace(-3, 3, 40) > 0).astype(int)
    with pytest.raises(ValueError, match="'n_bins' parameter"):
        HistogramBinning(n_bins=0).fit(scores, y)
    with pytest.raises(ValueError, match="'mode' parameter"):
        HistogramBinning(mode="confidence").fit(scores, y)
    with pytest.raises(ValueError, match="'target_smoothing' parameter"):
        PlattScaling(target_smoothing="yes").fit(scores, y)


# ------------------------------------------------------------------------------------
# Hand-computed cases.


def test_histogram_binning_classwise_equals_sorted_equal_mass_groups():
    rng = np.random.default_rng(3)
    scores = rng.normal(size=1200)
    y = (rng.uniform(size=1200) < expit(2 * scores)).astype(int)
    calibrator = HistogramBinning(n_bins=12).fit(scores, y)
    order = np.argsort(scores)
    group_means = y[order].reshape(12, 100).mean(axis=1)
    np.testing.assert_allclose(calibrator.values_[0], group_means, atol=1e-15)
    # Every calibration sample gets its own group's frequency.
    expected = np.empty(1200)
    expected[order] = np.repeat(group_means, 100)
    np.testing.assert_allclose(calibrator.predict_proba(scores)[:, 1], expected, atol=1e-15)


def test_histogram_binning_top_label_bins_the_confidence():
    # Three classes; confidence order is set by the top logit. Two bins of 3 samples.
    logits = np.array(
        [
            [5.0, 0.0, 0.0],
            [0.0, 4.0, 0.0],
            [0.0, 0.0, 3.0],
            [1.0, 0.0, 0.0],
            [0.0, 0.8, 0.0],
            [0.0, 0.0, 0.6],
        ]
    )
    y = np.array([0, 1, 0, 0, 2, 2])  # high-confidence bin: 2/3 correct; low: 2/3 correct
    y[4] = 1  # low bin: 3/3 correct
    calibrator = HistogramBinning(n_bins=2, mode="top-label").fit(logits, y)
    proba = calibrator.predict_proba(logits)
    np.testing.assert_allclose(proba[[0, 1, 2], [0, 1, 2]], 2 / 3)
    np.testing.assert_allclose(proba[[3, 4, 5], [0, 1, 2]], 1.0)
    # The other two classes share the rest equally (their logits are equal).
    np.testing.assert_allclose(proba[0, 1:], 1 / 6)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_rows_whose_maps_all_give_zero_become_uniform():
    class _ZeroMaps(OneVsRestCalibrator):
        def _fit_maps(self, scores, targets, sample_weight) -> None:
            return None

        def _apply_maps(self, scores) -> np.ndarray:
            return np.where(scores[:, :1] > 0, np.eye(scores.shape[1])[0], 0.0)

    logits = np.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])
    calibrator = _ZeroMaps().fit(logits, [0, 1, 2])
    proba = calibrator.predict_proba(np.array([[0.0, 0.0, 5.0], [3.0, 0.0, 0.0]]))
    np.testing.assert_allclose(proba, [[1 / 3, 1 / 3, 1 / 3], [1.0, 0.0, 0.0]])


def test_isotonic_gives_a_class_without_calibration_samples_laplaces_rule():
    # Class 2 never occurs among the 4 samples: its map is 1/(4 + 2), not 0.
    logits = np.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [3.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    with pytest.warns(UserWarning, match=r"no calibration sample of class\(es\) \[2\]"):
        calibrator = IsotonicCalibration().fit(logits, [0, 1, 0, 1])
    np.testing.assert_allclose(calibrator.values_[2], 1 / 6)
    proba = calibrator.predict_proba(np.array([[0.0, 0.0, 5.0], [3.0, 0.0, 0.0]]))
    # Row 1: maps (1, 0, 1/6) divided by their sum; row 0: only the unseen class's map is > 0.
    np.testing.assert_allclose(proba, [[0.0, 0.0, 1.0], [6 / 7, 0.0, 1 / 7]])


_ONE_VS_REST = [PlattScaling(), IsotonicCalibration(), BetaCalibration(), HistogramBinning()]


@pytest.mark.parametrize("estimator", _ONE_VS_REST, ids=_ids(_ONE_VS_REST))
@pytest.mark.parametrize(
    "case", ["class missing", "one class, binary", "one sample", "weighted, class missing"]
)
def test_a_class_without_calibration_samples_keeps_a_positive_probability(estimator, case):
    rng = np.random.default_rng(12)
    logits = 2.0 * rng.normal(size=(200, 3))
    y = np.where(logits.argmax(axis=1) == 2, 1, logits.argmax(axis=1))  # never class 2
    weights = None
    if case == "one class, binary":
        logits, y = logits[:, 0] - logits[:, 1], np.ones(200, dtype=int)  # never class 0
    elif case == "one sample":
        logits, y = logits[:1], y[:1]
    elif case == "weighted, class missing":
        weights = rng.integers(0, 3, size=200).astype(float)
    with pytest.warns(UserWarning, match=r"no calibration sample of class\(es\)"):
        fitted = clone(estimator).fit(logits, y, sample_weight=weights)
    test = 4.0 * rng.normal(size=(500,) + logits.shape[1:])
    proba = fitted.predict_proba(test)
    never_seen = np.setdiff1d(np.arange(proba.shape[1]), y)
    assert never_seen.size and np.all(proba[:, never_seen] > 0.0)
    assert np.all(proba[:, never_seen] < 1.0)
    # Laplace's rule of succession: the unseen class's map is 1 / (n + 2), n the samples
    # (their summed weight).
    n = len(y) if weights is None else weights.sum()
    if proba.shape[1] == 2:
        np.testing.assert_allclose(proba[:, 0], 1.0 / (n + 2.0))


def test_top_label_binning_of_all_right_predictions_keeps_the_other_classes_possible():
    rng = np.random.default_rng(13)
    logits = 3.0 * rng.normal(size=(100, 4))
    with pytest.warns(UserWarning, match="top-label predictions of the calibration data are all"):
        fitted = HistogramBinning(mode="top-label").fit(logits, logits.argmax(axis=1))
    np.testing.assert_allclose(fitted.values_[0], 101 / 102)
    assert fitted.predict_proba(logits).min() > 0.0


def test_beta_keeps_a_and_b_non_negative_only_when_monotonic():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.02, 0.98, size=3000)
    # Label frequency falls as p rises near 1: the free fit wants b < 0.
    truth = expit(3 * np.log(p) + 2 * np.log1p(-p) + 1)
    y = (rng.uniform(size=3000) < truth).astype(int)
    free = BetaCalibration(monotonic=False, input="probs").fit(p, y)
    bounded = BetaCalibration(input="probs").fit(p, y)
    assert free.coef_[0, 1] < 0
    assert bounded.coef_[0, 1] == 0.0 and bounded.coef_[0, 0] > 0
    features = np.column_stack([np.log(p), -np.log1p(-p)])
    oracle = LogisticRegression(C=np.inf, tol=1e-12, max_iter=1000).fit(features, y)
    np.testing.assert_allclose(free.coef_[0], oracle.coef_[0], rtol=1e-5)
    oracle_a = LogisticRegression(C=np.inf, tol=1e-12, max_iter=1000).fit(features[:, :1], y)
    np.testing.assert_allclose(bounded.coef_[0, 0], oracle_a.coef_[0, 0], rtol=1e-5)


def test_platt_warns_when_the_scores_separate_the_classes():
    scores = np.array([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0])
    y = (scores > 0).astype(int)
    with pytest.warns(ConvergenceWarning, match="separate the classes"):
        PlattScaling(max_iter=5).fit(scores, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        smoothed = PlattScaling(target_smoothing=True).fit(scores, y)
    assert np.isfinite(smoothed.coef_[0])


@pytest.mark.parametrize(
    ("calibrator", "fit_name"),
    [
        (PlattScaling, "PlattScaling: the logistic fit"),
        (BetaCalibration, "BetaCalibration: the fit"),
    ],
)
def test_newton_maps_name_the_unconverged_maps(calibrator, fit_name):
    # Three classes; only class 0 is separated from the rest by its one-vs-rest log-odds.
    rng = np.random.default_rng(7)
    y = np.repeat([0, 1, 2], 40)
    logits = rng.normal(size=(120, 3))
    logits[:, 0] = np.where(y == 0, 5.0, -5.0) + rng.uniform(-1, 1, size=120)
    with pytest.warns(ConvergenceWarning) as caught:
        fitted = calibrator(max_iter=20).fit(logits, y)
    (warning,) = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert str(warning.message).startswith(f"{fit_name} of map(s) [0] did not converge")
    assert "max_iter=20 Newton steps" in str(warning.message)
    assert fitted.n_iter_ == 20 and fitted.intercept_.shape == (3,)


@pytest.mark.parametrize("estimator", CLASSIC, ids=_ids(CLASSIC))
def test_docstring_holds_the_shared_input_forms_note(estimator):
    doc = type(estimator).__doc__
    assert "{classic_notes}" not in doc
    notes = doc[doc.index("    Notes\n") : doc.index("    Examples\n")]
    # The shared paragraph, whatever its indentation, once in the Notes section.
    flat = " ".join(notes.split())
    assert flat.count(" ".join(CLASSIC_NOTES_DOC.split())) == 1


@pytest.mark.parametrize("estimator", CLASSIC, ids=_ids(CLASSIC))
def test_integer_sample_weights_equal_repeated_samples(estimator):
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, size=300)
    logits = 2.0 * (np.eye(3)[y] + rng.normal(size=(300, 3)))
    counts = rng.integers(0, 4, size=300)
    weighted = clone(estimator).fit(logits, y, sample_weight=counts)
    repeated = clone(estimator).fit(np.repeat(logits, counts, axis=0), np.repeat(y, counts))
    np.testing.assert_allclose(
        weighted.predict_proba(logits), repeated.predict_proba(logits), atol=1e-7
    )


@pytest.mark.parametrize(
    ("estimator", "grid"),
    [
        (HistogramBinning(), {"n_bins": [2, 10, 30], "mode": ["classwise", "top-label"]}),
        (PlattScaling(), {"target_smoothing": [False, True]}),
        (BetaCalibration(), {"monotonic": [False, True]}),
    ],
    ids=["HistogramBinning", "PlattScaling", "BetaCalibration"],
)
def test_grid_search_tunes_the_parameters(estimator, grid):
    rng = np.random.default_rng(6)
    y = rng.integers(0, 3, size=900)
    logits = 3.0 * (np.eye(3)[y] + rng.normal(size=(900, 3)))
    search = GridSearchCV(estimator, grid, scoring="neg_log_loss", cv=3).fit(logits, y)
    assert set(search.best_params_) == set(grid)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


def test_the_classic_calibrators_do_not_import_torch():
    # The package __init__ is bypassed, so only the calibrator modules themselves count.
    code = """
import importlib.util, sys, types
import reliacal
package = types.ModuleType("reliacal.calibrators")
package.__path__ = [reliacal.__path__[0] + "/calibrators"]
sys.modules["reliacal.calibrators"] = package
for name in ("platt", "isotonic", "beta", "binning", "ensemble"):
    importlib.import_module("reliacal.calibrators." + name)
print("torch" in sys.modules)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
