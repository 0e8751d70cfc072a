"""TemperatureScaling: the exact NLL optimum, boundaries, weights and the ECE grid."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import brentq, minimize_scalar
from scipy.special import log_softmax, softmax
from torchmetrics.functional.classification import multiclass_calibration_error

from reliacal.calibrators import ConvergenceWarning, TemperatureScaling


def _nll(logits, y, temperature, weights=None):
    log_p = log_softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=1)
    return float(np.average(-log_p[np.arange(len(y)), y], weights=weights))


def _gradient_in_b(logits, y, b, weights=None):
    """d NLL / d(1/T), straight from the definition: mean(E_p[z] - z_y)."""
    z = np.asarray(logits, dtype=np.float64)
    p = softmax(b * z, axis=1)
    return float(np.average((p * z).sum(axis=1) - z[np.arange(len(y)), y], weights=weights))


def _brentq_temperature(logits, y, weights=None):
    """Reference optimum: the root of the float64 gradient by Brent's bracketing method."""
    b = brentq(lambda b: _gradient_in_b(logits, y, b, weights), 1e-4, 1e4, xtol=1e-300, rtol=1e-15)
    return 1.0 / b


def _minimize_scalar_temperature(logits, y, weights=None):
    result = minimize_scalar(
        lambda log_t: _nll(logits, y, np.exp(log_t), weights),
        bounds=(-5.0, 5.0),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(np.exp(result.x))


def _random_problem(seed, n, n_classes, dtype=np.float64):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    scale = rng.uniform(0.3, 5.0)
    signal = rng.uniform(1.0, 6.0)
    logits = scale * rng.normal(size=(n, n_classes)) + signal * np.eye(n_classes)[y]
    # Some wrong labels, so that no draw is separable (T -> 0 is tested on its own).
    noisy = rng.random(n) < 0.1
    y = np.where(noisy, (y + 1) % n_classes, y)
    return logits.astype(dtype), y


@pytest.mark.parametrize(
    ("seed", "n", "n_classes", "dtype", "weighted"),
    [
        (0, 500, 3, np.float64, False),
        (1, 2000, 10, np.float32, False),
        (2, 1500, 100, np.float64, True),
        (3, 40, 2, np.float64, True),
        # Large enough for the strided-subset start and many row chunks.
        (4, 3000, 1000, np.float32, False),
    ],
)
def test_lands_on_the_exact_nll_optimum(seed, n, n_classes, dtype, weighted):
    logits, y = _random_problem(seed, n, n_classes, dtype)
    weights = np.random.default_rng(seed).uniform(0.0, 3.0, size=n) if weighted else None
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fitted = TemperatureScaling().fit(logits, y, sample_weight=weights)
    reference = _brentq_temperature(logits, y, weights)
    assert fitted.temperature_ == pytest.approx(reference, rel=1e-12)
    # Brent's minimiser is limited to ~sqrt(eps) in T by the flat minimum; its NLL is
    # never lower than ours (beyond the rounding of the NLL evaluation itself).
    bounded = _minimize_scalar_temperature(logits, y, weights)
    assert fitted.temperature_ == pytest.approx(bounded, rel=1e-6)
    nll_bounded = _nll(logits, y, bounded, weights)
    assert _nll(logits, y, fitted.temperature_, weights) <= nll_bounded * (1 + 1e-15)


# methods.md: exact NLL minimisation on the first half of permutation(10000) (seed 0).
DOCUMENTED_TEMPERATURES = {
    "lenet-5-cifar-10": 1.41,
    "wideresnet-16-4-cifar-10": 2.07,
    "lenet-5-cifar-100": 1.13,
    "wideresnet-16-4-cifar-100": 1.12,
}


def test_cifar_records_optimum(record_name, load_record):
    probabilities, labels = load_record(record_name)
    calibration = np.random.default_rng(0).permutation(len(labels))[: len(labels) // 2]
    logits, y = np.log(probabilities[calibration]), labels[calibration]
    fitted = TemperatureScaling().fit(logits, y)
    assert fitted.temperature_ == pytest.approx(_brentq_temperature(logits, y), rel=1e-12)
    bounded = _minimize_scalar_temperature(logits, y)
    assert _nll(logits, y, fitted.temperature_) <= _nll(logits, y, bounded) * (1 + 1e-15)
    assert fitted.temperature_ == pytest.approx(DOCUMENTED_TEMPERATURES[record_name], abs=0.005)
    # Accuracy never changes.
    np.testing.assert_array_equal(fitted.predict(logits), np.argmax(logits, axis=1))


def test_argmax_unchanged_and_probabilities_are_softmax_of_scaled_logits():
    logits, y = _random_problem(5, 300, 7)
    fitted = TemperatureScaling().fit(logits, y)
    test_logits = np.random.default_rng(6).normal(scale=3.0, size=(200, 7))
    np.testing.assert_array_equal(
        fitted.predict_proba(test_logits).argmax(axis=1), test_logits.argmax(axis=1)
    )
    np.testing.assert_allclose(
        fitted.predict_proba(test_logits), softmax(test_logits / fitted.temperature_, axis=1)
    )
    np.testing.assert_array_equal(
        fitted.decision_function(test_logits), test_logits / fitted.temperature_
    )


def test_integer_weights_equal_repeated_rows():
    logits, y = _random_problem(7, 200, 5)
    counts = np.random.default_rng(8).integers(0, 4, size=200)
    weighted = TemperatureScaling().fit(logits, y, sample_weight=counts)
    repeated = TemperatureScaling().fit(np.repeat(logits, counts, axis=0), np.repeat(y, counts))
    assert weighted.temperature_ == pytest.approx(repeated.temperature_, rel=1e-12)


def fit_warns(seed, label_of_row, warning):
    """Fit on random logits labelled by ``label_of_row(logits, axis=1)``; expect ``warning``."""
    logits = np.random.default_rng(seed).normal(size=(300, 4))
    y = label_of_row(logits, axis=1)
    with pytest.warns(ConvergenceWarning, match=warning):
        fitted = TemperatureScaling().fit(logits, y)
    return logits, y, fitted


def test_uninformative_logits_warn_and_return_a_large_finite_temperature():
    # Every label holds the smallest logit of its row: no positive T beats uniform.
    logits, _, fitted = fit_warns(9, np.argmin, "T -> infinity")
    assert np.isfinite(fitted.temperature_) and fitted.temperature_ > 1e5
    probabilities = fitted.predict_proba(logits)
    np.testing.assert_allclose(probabilities, 0.25, atol=1e-6)
    np.testing.assert_array_equal(probabilities.argmax(axis=1), logits.argmax(axis=1))


def test_constant_logits_warn():
    with pytest.warns(ConvergenceWarning, match="T -> infinity"):
        fitted = TemperatureScaling().fit(np.ones((10, 3)), np.arange(10) % 3)
    assert np.isfinite(fitted.temperature_) and fitted.temperature_ > 0


def test_separable_logits_warn_and_return_a_small_positive_temperature():
    logits, y, fitted = fit_warns(10, np.argmax, "T -> 0")
    assert 0 < fitted.temperature_ < 1e-4
    probabilities = fitted.predict_proba(logits)
    assert np.all(np.isfinite(probabilities))
    np.testing.assert_array_equal(probabilities.argmax(axis=1), y)


def test_non_convergence_is_reported():
    logits, y = _random_problem(11, 300, 5)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        fitted = TemperatureScaling(max_iter=1).fit(logits, y)
    assert fitted.temperature_ > 0
    assert fitted.n_iter_ == 1


def test_ece_objective_picks_the_grid_point_with_the_lowest_ece():
    logits, y = _random_problem(12, 2000, 10)
    fitted = TemperatureScaling(objective="ece").fit(logits, y)
    grid = np.arange(1, 101) / 10

    def torchmetrics_ece(temperature):
        probabilities = torch.from_numpy(softmax(logits / temperature, axis=1))
        return float(
            multiclass_calibration_error(
                probabilities, torch.from_numpy(y), num_classes=10, n_bins=15, norm="l1"
            )
        )

    errors = np.array([torchmetrics_ece(t) for t in grid])
    assert fitted.temperature_ in grid
    # torchmetrics works in float32: allow its rounding between near-equal grid points.
    assert torchmetrics_ece(fitted.temperature_) <= errors.min() + 1e-6
    assert fitted.n_iter_ == 100


def test_ece_objective_rejects_sample_weight():
    logits, y = _random_problem(13, 100, 3)
    with pytest.raises(ValueError, match="sample_weight is not supported"):
        TemperatureScaling(objective="ece").fit(logits, y, sample_weight=np.ones(100))


def test_float32_and_float64_inputs_agree():
    logits, y = _random_problem(14, 1000, 20, np.float32)
    single = TemperatureScaling().fit(logits, y).temperature_
    double = TemperatureScaling().fit(logits.astype(np.float64), y).temperature_
    assert single == pytest.approx(double, rel=1e-12)


# Issue 16.1: logits on extreme scales. The oracle is the scale invariance of the NLL
# optimum, T(c z) = c T(z), with T(z) found by Brent's method on the unscaled logits.
@pytest.mark.parametrize("scale", [1e38, 3e37, 1e-34, 1e-300, 1e300, 2.0**-1000])
def test_extreme_logit_scales_give_the_scaled_optimum(scale):
    logits, y = _random_problem(15, 400, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning, no overflow RuntimeWarning
        fitted = TemperatureScaling().fit(logits * scale, y)
        probabilities = fitted.predict_proba(logits * scale)
    reference = _brentq_temperature(logits, y)
    assert fitted.temperature_ == pytest.approx(scale * reference, rel=1e-12)
    np.testing.assert_allclose(
        probabilities, softmax(logits / reference, axis=1), rtol=1e-10, atol=1e-300
    )


def test_tiny_logits_beside_huge_constant_rows():
    # Constant rows add log K to the NLL whatever T is, so T is that of the other rows;
    # z / T would overflow on them (1e300 / 1e-30), their probabilities are uniform.
    logits, y = _random_problem(18, 300, 3)
    stacked = np.vstack([logits * 1e-30, np.full((100, 3), 1e300)])
    labels = np.concatenate([y, np.arange(100) % 3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = TemperatureScaling().fit(stacked, labels)
        probabilities = fitted.predict_proba(stacked)
    reference = _brentq_temperature(logits, y)
    assert fitted.temperature_ == pytest.approx(1e-30 * reference, rel=1e-12)
    np.testing.assert_allclose(probabilities[:300], softmax(logits / reference, axis=1))
    np.testing.assert_allclose(probabilities[300:], 1.0 / 3.0)


@pytest.mark.parametrize("exponent", [120, -110])
def test_extreme_float32_logits_give_the_scaled_optimum(exponent):
    logits, y = _random_problem(16, 400, 5, np.float32)
    scale = np.float32(2.0**exponent)  # a power of two: the scaled float32 logits are exact
    fitted = TemperatureScaling().fit(logits * scale, y)
    reference = _brentq_temperature(logits.astype(np.float64), y)
    assert fitted.temperature_ == pytest.approx(float(scale) * reference, rel=1e-12)
    assert np.all(np.isfinite(fitted.predict_proba(logits * scale)))


def test_logits_near_the_largest_float_have_a_finite_temperature():
    logits = np.array([[1e308, -1e308, 0.0]] * 4)
    y = np.array([0, 2, 0, 2])
    # By hand, with b = 1e308 / T: the mean NLL is log(e^b + e^-b + 1) - b / 2, zero
    # in slope where (e^b - e^-b) / (e^b + e^-b + 1) = 1/2, i.e. e^b = (1 + sqrt(13)) / 2.
    b = np.log((1.0 + np.sqrt(13.0)) / 2.0)
    fitted = TemperatureScaling().fit(logits, y)
    assert fitted.temperature_ == pytest.approx(1e308 / b, rel=1e-12)
    np.testing.assert_allclose(
        fitted.predict_proba(logits), np.tile(softmax([b, -b, 0.0]), (4, 1)), rtol=1e-12
    )


def test_a_temperature_beyond_the_float64_range_is_refused():
    logits = np.array([[1e308, -1e308, 0.0]] * 4)
    # As above with y = 0, 1, 2, 0: 3 e^2b - e^b - 5 = 0, so T = 1e308 / log((1 + sqrt 61) / 6).
    mantissa = 1.0 / np.log((1.0 + np.sqrt(61.0)) / 6.0)  # T = mantissa * 1e308
    with pytest.raises(ValueError, match=rf"T = {mantissa:.3g}e\+308, above the largest"):
        TemperatureScaling().fit(logits, np.array([0, 1, 2, 0]))


# Issue 16.5: the ECE objective on logits whose optimum lies far off the fixed grid.
def _torchmetrics_ece(logits, y, temperature):
    probabilities = torch.from_numpy(softmax(logits / temperature, axis=1))
    return float(
        multiclass_calibration_error(
            probabilities, torch.from_numpy(y), num_classes=logits.shape[1], n_bins=15, norm="l1"
        )
    )


def test_ece_objective_searches_around_the_nll_optimum_off_the_grid():
    logits, y = _random_problem(12, 2000, 10)
    logits = logits * 1e3  # the fixed grid 0.1..10 holds only nearly one-hot predictions
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fitted = TemperatureScaling(objective="ece").fit(logits, y)
    fixed = np.arange(1, 101) / 10
    centred = _brentq_temperature(logits, y) * fixed
    errors = [_torchmetrics_ece(logits, y, t) for t in np.concatenate([fixed, centred])]
    assert fitted.n_iter_ == 200
    assert _torchmetrics_ece(logits, y, fitted.temperature_) <= min(errors) + 1e-6
    # The fixed grid alone reaches no better than 0.2 here.
    assert min(errors[:100]) > 0.2 > _torchmetrics_ece(logits, y, fitted.temperature_)


def test_ece_objective_warns_when_its_optimum_is_at_the_end_of_the_search():
    rng = np.random.default_rng(17)
    logits = rng.normal(size=(300, 4))
    y = np.argmax(logits, axis=1)  # always right: the ECE falls as T -> 0
    with pytest.warns(ConvergenceWarning, match="ECE is lowest at T = .*the smallest"):
        fitted = TemperatureScaling(objective="ece").fit(logits, y)
    assert 0 < fitted.temperature_ < 0.1
