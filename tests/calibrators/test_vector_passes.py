"""VectorScaling's Newton fit: the optimum, in few passes over the logits.

References: scipy's BFGS on the loss of the shared L-BFGS code
(``_LogitScaling._loss``, whose gradient test_scaling.py checks against
finite differences), the shared L-BFGS fit itself (``_LogitScaling._fit_core``,
the fit VectorScaling had before), and invariances that hold at the optimum
(row repetition for integer weights, ``a(c z) = a(z) / c``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

from reliacal.calibrators import ConvergenceWarning, VectorScaling
from reliacal.calibrators import _vector_newton as newton
from reliacal.calibrators.scaling import _LogitScaling


class _LbfgsVectorScaling(VectorScaling):
    """VectorScaling fitted by the shared L-BFGS code, as before the Newton solver."""

    def _fit_core(self, features, logits, y_index, sample_weight):
        _LogitScaling._fit_core(self, features, logits, y_index, sample_weight)


def _weights(n_samples, sample_weight=None):
    if sample_weight is None:
        return np.full(n_samples, 1.0 / n_samples)
    return sample_weight / sample_weight.sum()


def _loss_and_gradient(fitted, logits, y, sample_weight=None):
    parameters = np.concatenate([fitted.coef_, fitted.intercept_])
    return fitted._loss(
        parameters, np.asarray(logits, np.float64), y, _weights(len(y), sample_weight)
    )


def _bfgs_oracle(logits, y, reg_bias=0.0, sample_weight=None):
    """``(coef, intercept, loss)`` minimised by scipy's BFGS from the identity map."""
    logits = np.asarray(logits, np.float64)
    n_classes = logits.shape[1]
    loss = VectorScaling(reg_bias=reg_bias)._loss
    result = minimize(
        loss,
        np.concatenate([np.ones(n_classes), np.zeros(n_classes)]),
        args=(logits, y, _weights(len(y), sample_weight)),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-10, "maxiter": 10_000},
    )
    return result.x[:n_classes], result.x[n_classes:], result.fun


def _check_against_oracle(fitted, logits, y, reg_bias=0.0, sample_weight=None, atol=1e-6):
    coef, intercept, oracle_loss = _bfgs_oracle(logits, y, reg_bias, sample_weight)
    loss, gradient = _loss_and_gradient(fitted, logits, y, sample_weight)
    assert loss <= oracle_loss * (1 + 1e-12)
    # Convex: a point where the gradient vanishes is the optimum.
    assert np.abs(gradient).max() < 1e-8
    # softmax is unchanged by b -> b + c, which BFGS and Newton both leave at sum(b) = 0
    # when unpenalised (every gradient step is orthogonal to it).
    np.testing.assert_allclose(fitted.coef_, coef, atol=atol)
    np.testing.assert_allclose(fitted.intercept_, intercept, atol=atol)


@pytest.mark.parametrize("name", ["lenet-5-cifar-10", "wideresnet-16-4-cifar-10"])
def test_cifar_10_records_reach_the_bfgs_optimum_in_few_passes(name, load_record):
    probabilities, labels = load_record(name)
    logits = np.log(probabilities)
    fitted = VectorScaling().fit(logits, labels)
    assert fitted.n_passes_ <= 5
    _check_against_oracle(fitted, logits, labels)


# L-BFGS takes seconds on the CIFAR-100 records.
@pytest.mark.parametrize(
    "name",
    [
        "lenet-5-cifar-10",
        "wideresnet-16-4-cifar-10",
        pytest.param("lenet-5-cifar-100", marks=pytest.mark.slow),
        pytest.param("wideresnet-16-4-cifar-100", marks=pytest.mark.slow),
    ],
)
def test_cifar_records_beat_the_lbfgs_fit_in_few_passes(name, load_record):
    probabilities, labels = load_record(name)
    logits = np.log(probabilities)
    fitted = VectorScaling().fit(logits, labels)
    before = _LbfgsVectorScaling().fit(logits, labels)
    # The design goal: at most five reads of the logits on the records, and the subset's
    # reads (its temperature and the model steps) below three.
    assert fitted.n_passes_ <= 5
    assert 0 < fitted.subset_passes_ < 3
    assert fitted.n_iter_ <= fitted.n_passes_
    loss, gradient = _loss_and_gradient(fitted, logits, labels)
    lbfgs_loss, lbfgs_gradient = _loss_and_gradient(before, logits, labels)
    assert loss <= lbfgs_loss * (1 + 1e-10)
    assert np.abs(gradient).max() < 1e-3 * np.abs(lbfgs_gradient).max()
    # L-BFGS stops at a gradient of 1e-6, in flat directions a few 1e-4 from the optimum.
    np.testing.assert_allclose(
        fitted.predict_proba(logits), before.predict_proba(logits), atol=1e-3
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lenet-5-cifar-100", "wideresnet-16-4-cifar-100"])
def test_cifar_100_records_reach_the_bfgs_optimum(name, load_record):
    probabilities, labels = load_record(name)
    logits = np.log(probabilities)
    fitted = VectorScaling().fit(logits, labels)
    # Rare classes leave flat directions: BFGS's own error there is ~1e-5.
    _check_against_oracle(fitted, logits, labels, atol=1e-4)


def test_the_pass_counter_counts_the_rows_read(mixed_logits, counting_logits):
    logits, y = mixed_logits(11, n=5000, n_classes=7)
    counting = counting_logits(logits)
    fit = newton.fit_vector_scaling(counting, y, None, bias_weight=0.0, tol=1e-6, max_iter=100)
    assert fit.solution is not None
    # Every pass slices each row once; the subset is gathered once, and its own solves
    # read the copy, not the logits.
    assert counting.counts["sliced"] == fit.n_passes * len(y)
    subset = newton._subset_rows(y, 7)
    assert counting.counts["gathered"] == len(subset) < len(y)
    assert fit.subset_passes > len(subset) / len(y)
    assert fit.n_passes <= 5


@pytest.mark.parametrize("reg_bias", [0.0, 0.5, 20.0])
def test_the_bias_penalty_is_honoured(reg_bias, mixed_logits):
    logits, y = mixed_logits(12, n=800, n_classes=5)
    fitted = VectorScaling(reg_bias=reg_bias).fit(logits, y)
    _check_against_oracle(fitted, logits, y, reg_bias=reg_bias)
    if reg_bias:
        free = VectorScaling().fit(logits, y)
        assert np.abs(fitted.intercept_).sum() < np.abs(free.intercept_).sum()


def test_sample_weights_are_honoured(mixed_logits):
    logits, y = mixed_logits(13, n=700, n_classes=4)
    counts = np.random.default_rng(0).integers(0, 4, size=len(y))
    weighted = VectorScaling().fit(logits, y, sample_weight=counts.astype(float))
    repeated = VectorScaling().fit(np.repeat(logits, counts, axis=0), np.repeat(y, counts))
    np.testing.assert_allclose(weighted.coef_, repeated.coef_, atol=1e-7)
    np.testing.assert_allclose(weighted.intercept_, repeated.intercept_, atol=1e-7)
    _check_against_oracle(weighted, logits, y, sample_weight=counts.astype(float))


def test_many_classes_take_the_float32_hessian_path(monkeypatch):
    # More classes than _FLOAT64_HESSIAN_CLASSES and _REUSE_HESSIAN_CLASSES: the outer
    # products run in float32 and short steps reuse the last factor (chord steps, which
    # converge linearly), and rows span several chunks.
    n_classes = max(newton._FLOAT64_HESSIAN_CLASSES, newton._REUSE_HESSIAN_CLASSES) + 44
    rng = np.random.default_rng(14)
    y = rng.integers(0, n_classes, size=8000)
    logits = 2.0 * rng.normal(size=(8000, n_classes)) + 3.0 * np.eye(n_classes)[y]
    fitted = VectorScaling().fit(logits, y)
    assert fitted.n_passes_ <= 14
    assert fitted.subset_passes_ < 1  # the temperature's subset: no model beyond 256 classes
    loss, gradient = _loss_and_gradient(fitted, logits, y)
    assert np.abs(gradient).max() < 1e-8
    monkeypatch.setattr(newton, "_FLOAT64_HESSIAN_CLASSES", n_classes)
    monkeypatch.setattr(newton, "_REUSE_HESSIAN_CLASSES", n_classes)
    exact = VectorScaling().fit(logits, y)  # a float64 Hessian on every pass
    assert np.abs(_loss_and_gradient(exact, logits, y)[1]).max() < 1e-8
    assert loss <= _loss_and_gradient(exact, logits, y)[0] * (1 + 1e-12)
    np.testing.assert_allclose(fitted.coef_, exact.coef_, atol=1e-6)
    np.testing.assert_allclose(fitted.intercept_, exact.intercept_, atol=1e-6)


def test_a_separated_class_is_fitted_as_before():
    # Class 0's logit is largest exactly on its rows: its scale grows without bound, Newton
    # steps keep heading out, and the L-BFGS fit takes over, unchanged.
    rng = np.random.default_rng(16)
    y = rng.integers(0, 3, size=600)
    logits = rng.normal(size=(600, 3)) + 1.0 * np.eye(3)[y]
    logits[:, 0] = np.where(y == 0, 5.0, -5.0) + 0.1 * rng.normal(size=600)
    fitted = VectorScaling().fit(logits, y)
    before = _LbfgsVectorScaling().fit(logits, y)
    np.testing.assert_array_equal(fitted.coef_, before.coef_)
    np.testing.assert_array_equal(fitted.intercept_, before.intercept_)


@pytest.mark.parametrize("scale", [1e38, 1e-34, 1e-300, 1e300, 1e4, 1e-4])
def test_extreme_scales_give_the_scaled_optimum(scale, scale_problem):
    # The extreme-scale problem of TemperatureScaling's tests: a(c z) = a(z) / c.
    logits, y = scale_problem
    reference = VectorScaling().fit(logits, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = VectorScaling().fit(logits * scale, y)
    # 400 rows give no subset: Newton steps from the temperature of all the rows.
    assert fitted.n_passes_ <= 10
    np.testing.assert_allclose(fitted.coef_ * scale, reference.coef_, rtol=1e-8)
    np.testing.assert_allclose(fitted.intercept_, reference.intercept_, atol=1e-8)
    _check_against_oracle(reference, logits, y)


def test_a_class_never_seen_is_fitted_as_before(mixed_logits):
    # No finite optimum (its probability falls forever): the L-BFGS fit, unchanged.
    logits, y = mixed_logits(6, n=1200, n_classes=6)
    present = y < 4
    classes = np.arange(6)
    fitted = VectorScaling(classes=classes).fit(logits[present], y[present])
    before = _LbfgsVectorScaling(classes=classes).fit(logits[present], y[present])
    np.testing.assert_array_equal(fitted.coef_, before.coef_)
    np.testing.assert_array_equal(fitted.intercept_, before.intercept_)
    assert fitted.n_iter_ == before.n_iter_
    assert fitted.n_passes_ > fitted.n_iter_


@pytest.mark.parametrize(
    "logits",
    [np.zeros((300, 4)), np.repeat(np.linspace(-2, 2, 300)[:, None], 4, axis=1)],
    ids=["zeros", "rows-constant"],
)
def test_constant_logits_are_fitted_as_before(logits):
    # No finite temperature: the L-BFGS fit, unchanged.
    y = np.arange(300) % 3
    y[:20] = 3
    fitted = VectorScaling().fit(logits, y)
    before = _LbfgsVectorScaling().fit(logits, y)
    np.testing.assert_array_equal(fitted.coef_, before.coef_)
    np.testing.assert_array_equal(fitted.intercept_, before.intercept_)
    if not logits.any():  # nothing but the biases can fit: the class frequencies
        frequencies = np.bincount(y) / len(y)
        np.testing.assert_allclose(fitted.predict_proba(logits[:1])[0], frequencies, atol=1e-5)


def test_too_few_iterations_warn_as_before(mixed_logits):
    logits, y = mixed_logits(8)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        fitted = VectorScaling(max_iter=2).fit(logits, y)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        before = _LbfgsVectorScaling(max_iter=2).fit(logits, y)
    np.testing.assert_array_equal(fitted.coef_, before.coef_)


def test_the_weight_of_an_all_zero_column_stays_at_one():
    # 1-D binary scores are the columns [0, s]: the weight of the zero column changes
    # nothing, and L-BFGS (and BFGS), whose gradient in it is zero, leave it at 1.
    rng = np.random.default_rng(17)
    scores = 2.0 * rng.normal(size=500)
    y = (rng.random(500) < 1.0 / (1.0 + np.exp(-1.5 * scores - 0.3))).astype(int)
    fitted = VectorScaling().fit(scores, y)
    before = _LbfgsVectorScaling().fit(scores, y)
    assert fitted.coef_[0] == before.coef_[0] == 1.0
    np.testing.assert_allclose(fitted.coef_, before.coef_, atol=1e-5)
    np.testing.assert_allclose(fitted.intercept_, before.intercept_, atol=1e-5)
    _check_against_oracle(fitted, np.column_stack([np.zeros_like(scores), scores]), y)
    # A zero column among others, and a penalised bias.
    logits, y = _mixed_logits_with_a_zero_column()
    fitted = VectorScaling(reg_bias=0.5).fit(logits, y)
    assert fitted.coef_[2] == 1.0
    _check_against_oracle(fitted, logits, y, reg_bias=0.5)


def _mixed_logits_with_a_zero_column():
    rng = np.random.default_rng(18)
    y = rng.integers(0, 4, size=800)
    logits = 2.0 * np.eye(4)[y] + 1.5 * rng.normal(size=(800, 4))
    logits[:, 2] = 0.0
    return logits, y


def test_lbfgs_loss_evaluations_are_counted_without_changing_the_estimator():
    # The separated class of test_a_separated_class_is_fitted_as_before: L-BFGS takes over.
    rng = np.random.default_rng(16)
    y = rng.integers(0, 3, size=600)
    logits = rng.normal(size=(600, 3)) + 1.0 * np.eye(3)[y]
    logits[:, 0] = np.where(y == 0, 5.0, -5.0) + 0.1 * rng.normal(size=600)

    class Counting(VectorScaling):
        evaluations = 0

        def _loss(self, *args):
            assert "_loss" not in vars(self)  # the estimator is left as it is
            type(self).evaluations += 1
            return super()._loss(*args)

    fitted = Counting().fit(logits, y)
    newton_fit = newton.fit_vector_scaling(
        logits, y, None, bias_weight=0.0, tol=fitted.tol, max_iter=fitted.max_iter
    )
    assert newton_fit.solution is None and newton_fit.n_passes > 0
    assert Counting.evaluations > fitted.n_iter_
    assert fitted.n_passes_ == newton_fit.n_passes + Counting.evaluations
    assert "_loss" not in vars(fitted)


def _overconfident_logits(n_samples, n_classes, seed=0):
    """float32 logits with the true class boosted, 30% of the labels wrong and a class
    bias: the typical case of the pass goals (TemperatureScaling's, plus biases)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n_samples)
    logits = rng.normal(size=(n_samples, n_classes)).astype(np.float32)
    logits[np.arange(n_samples), y] += 4.0
    logits = 2.5 * logits + np.linspace(-1.0, 1.0, n_classes, dtype=np.float32)
    wrong = rng.random(n_samples) < 0.3
    return logits, np.where(wrong, rng.integers(0, n_classes, size=n_samples), y)


@pytest.mark.parametrize(("n_samples", "n_classes"), [(30_000, 10), (4_000, 2), (6_000, 5)])
def test_typical_logits_are_read_at_most_three_times(n_samples, n_classes):
    logits, y = _overconfident_logits(n_samples, n_classes)
    fitted = VectorScaling().fit(logits, y)
    assert fitted.n_passes_ <= 3
    assert 0 < fitted.subset_passes_ < 2
    _check_against_oracle(fitted, logits, y)  # scipy's BFGS to a gradient of 1e-10


def test_a_subset_model_that_fails_falls_back_to_the_temperature_start(mixed_logits, monkeypatch):
    # A model whose step never decreases the loss: the passes backtrack until the fit gives
    # up, and the plain Newton fit from the temperature of all the rows reaches the optimum.
    logits, y = mixed_logits(19, n=4000, n_classes=4)
    monkeypatch.setattr(newton._SubsetModel, "step", lambda self, theta, g, h, step: -100.0 * step)
    fitted = VectorScaling().fit(logits, y)
    _check_against_oracle(fitted, logits, y)
    assert fitted.subset_passes_ > 0


def test_subnormal_weights_on_the_subset_rows_give_the_weighted_optimum():
    # Reweighting the subset divided by a subnormal class weight, which overflowed and
    # raised FloatingPointError; the fit must equal the one with those rows' weight 0.
    logits, y = _overconfident_logits(4_000, 10)
    weights = np.ones(len(y))
    rows = np.flatnonzero(y == 2)[::8]
    weights[rows] = 1e-310
    fitted = VectorScaling().fit(logits, y, sample_weight=weights)
    _check_against_oracle(fitted, logits, y, sample_weight=weights)


def test_long_tailed_labels_read_no_more_than_the_temperature_start(monkeypatch):
    # With 4-12 subset rows in most classes the subset model is poor (and need not be
    # convex); solving it must not cost more reads in all than plain Newton steps.
    rng = np.random.default_rng(0)
    counts = np.maximum(2, (400 * 100.0 ** (-np.arange(100) / 99)).astype(int))
    y = rng.permutation(np.repeat(np.arange(100), counts))
    logits = rng.normal(size=(len(y), 100)) * 2 + 3 * np.eye(100)[y]
    logits += np.log(counts / counts.sum())
    fitted = VectorScaling().fit(logits, y)
    # Classes of 2 rows leave the loss flat in their parameters: the loss and the gradient
    # meet the oracle's, the parameters only to 1e-4.
    _check_against_oracle(fitted, logits, y, atol=1e-4)
    monkeypatch.setattr(newton, "_subset_start", lambda *args: (None, None, 0))
    plain = VectorScaling().fit(logits, y)
    assert plain.subset_passes_ > 0  # the temperature solver's own subset
    assert fitted.n_passes_ + fitted.subset_passes_ <= plain.n_passes_ + plain.subset_passes_
