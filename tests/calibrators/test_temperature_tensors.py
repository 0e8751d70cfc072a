"""TemperatureScaling on torch tensors: fitted and applied on the tensor's device."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from reliacal import _validation
from reliacal.calibrators import ConvergenceWarning, TemperatureScaling
from reliacal.calibrators import _temperature_nll as nll

# The device paths, run on CPU tensors (CPU tensors take numpy by default).
pytestmark = pytest.mark.usefixtures("device_paths_on_cpu")


def _problem(seed, n, n_classes, dtype=np.float64, wrong=0.15):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    logits = rng.normal(size=(n, n_classes)) + 3.0 * np.eye(n_classes)[y]
    y = np.where(rng.random(n) < wrong, rng.integers(0, n_classes, size=n), y)
    return logits.astype(dtype), y


def _fit_both(logits, y, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the tensor fit warns exactly when numpy's does
        on_host = TemperatureScaling(**kwargs).fit(logits, y)
        on_device = TemperatureScaling(**kwargs).fit(torch.from_numpy(logits.copy()), y)
    return on_host, on_device


def test_cifar_records_give_the_numpy_temperature(record_name, load_record):
    probabilities, labels = load_record(record_name)
    calibration = np.random.default_rng(0).permutation(len(labels))[: len(labels) // 2]
    logits, y = np.log(probabilities[calibration]), labels[calibration]
    on_host, on_device = _fit_both(logits, y)
    assert on_device.temperature_ == pytest.approx(on_host.temperature_, rel=1e-10)
    assert on_device.n_passes_ <= 3
    X = torch.from_numpy(logits.copy())
    proba = on_device.predict_proba(X)
    # Computed and returned in float64, whatever the logits' dtype (float32 records).
    assert isinstance(proba, torch.Tensor) and proba.dtype == torch.float64
    np.testing.assert_allclose(
        proba.numpy(), on_host.predict_proba(logits), rtol=1e-12, atol=1e-300
    )


@pytest.mark.parametrize("scale", [1.0, 1e38, 1e-34, 1e-300, 1e300, 2.0**-1000])
def test_extreme_scales_give_the_numpy_temperature(scale):
    logits, y = _problem(15, 400, 4)
    on_host, on_device = _fit_both(logits * scale, y)
    assert on_device.temperature_ == pytest.approx(on_host.temperature_, rel=1e-10)
    proba = on_device.predict_proba(torch.from_numpy(logits * scale))
    np.testing.assert_allclose(
        proba.numpy(), on_host.predict_proba(logits * scale), rtol=1e-10, atol=1e-300
    )


def test_tiny_logits_beside_huge_constant_rows_give_the_numpy_temperature():
    logits, y = _problem(18, 300, 3)
    stacked = np.vstack([logits * 1e-30, np.full((100, 3), 1e300)])
    labels = np.concatenate([y, np.arange(100) % 3])
    on_host, on_device = _fit_both(stacked, labels)
    assert on_device.temperature_ == pytest.approx(on_host.temperature_, rel=1e-10)
    proba = on_device.predict_proba(torch.from_numpy(stacked))
    np.testing.assert_allclose(proba.numpy(), on_host.predict_proba(stacked), rtol=1e-12)


@pytest.mark.parametrize("factor", [1e12, 1e5])
def test_a_scale_hidden_from_the_subset_gives_the_numpy_temperature(factor):
    # Rows the start's subset skips set the optimum: the search pass runs on the device.
    logits, y = _problem(3, 10_000, 100, wrong=0.5)
    subset = nll.subset_rows(10_000, 100)
    outside = np.setdiff1d(np.arange(10_000), subset)
    logits[outside[:: len(outside) // 5][:5]] *= factor
    on_host, on_device = _fit_both(logits, y)
    assert on_device.temperature_ == pytest.approx(on_host.temperature_, rel=1e-10)
    assert on_device.n_passes_ <= 5


def test_float32_tensors_weights_and_labels_give_the_numpy_temperature():
    logits, y = _problem(4, 2000, 10, np.float32)
    weights = np.random.default_rng(4).uniform(size=2000)
    on_host = TemperatureScaling().fit(logits, y, sample_weight=weights)
    on_device = TemperatureScaling().fit(
        torch.from_numpy(logits), torch.as_tensor(y), sample_weight=weights
    )
    assert on_device.temperature_ == pytest.approx(on_host.temperature_, rel=1e-10)
    proba = on_device.predict_proba(torch.from_numpy(logits))
    assert proba.dtype == torch.float64
    np.testing.assert_allclose(proba.numpy(), on_host.predict_proba(logits), rtol=1e-9)
    np.testing.assert_array_equal(
        on_device.predict(torch.from_numpy(logits)), on_host.predict(logits)
    )
    assert on_device.score(torch.from_numpy(logits), y) == on_host.score(logits, y)


def test_a_float32_tensor_gives_the_float64_probabilities_of_the_float32_array():
    # Large logits: float32 probabilities would underflow to zeros where the float64
    # ones do not.
    logits, y = _problem(11, 1500, 10, np.float32)
    fitted = TemperatureScaling().fit(logits, y)
    logits = 50.0 * logits
    expected = fitted.predict_proba(logits)
    assert expected.dtype == np.float64 and 0 < expected.min() < np.finfo(np.float32).tiny
    X = torch.from_numpy(logits)
    proba = fitted.predict_proba(X)
    assert proba.dtype == torch.float64
    np.testing.assert_allclose(proba.numpy(), expected, rtol=1e-12, atol=0)
    log_proba = fitted.predict_log_proba(X)
    assert log_proba.dtype == torch.float64
    np.testing.assert_allclose(
        log_proba.numpy(), fitted.predict_log_proba(logits), rtol=1e-12, atol=1e-14
    )
    logits_out = fitted.decision_function(X)
    assert logits_out.dtype == torch.float64
    np.testing.assert_allclose(logits_out.numpy(), fitted.decision_function(logits), rtol=1e-15)


@pytest.mark.parametrize(
    "labels_of",
    [
        lambda logits, rng: rng.integers(0, 3, len(logits)),  # uninformative: T -> infinity
        lambda logits, rng: np.argmax(logits, axis=1),  # separable: T -> 0
    ],
)
def test_boundaries_warn_as_on_numpy(labels_of):
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(300, 3))
    y = labels_of(logits, rng)
    with pytest.warns(ConvergenceWarning) as on_host:
        host = TemperatureScaling().fit(logits, y)
    with pytest.warns(ConvergenceWarning) as on_device:
        device = TemperatureScaling().fit(torch.from_numpy(logits), y)
    assert [str(w.message) for w in on_device] == [str(w.message) for w in on_host]
    assert device.temperature_ == pytest.approx(host.temperature_, rel=1e-10)


def test_bad_tensors_get_the_numpy_messages():
    logits, y = _problem(6, 50, 3)
    bad = logits.copy()
    bad[3, 1] = np.nan
    fitted = TemperatureScaling().fit(logits, y)
    for X, action in [
        (bad, lambda X: TemperatureScaling().fit(X, y)),
        (logits[:, :1], lambda X: TemperatureScaling().fit(X, y)),
        (logits[:, :2], fitted.predict_proba),
        (np.array([[1e308, -1e308, 0.0]] * 4), lambda X: TemperatureScaling().fit(X, [0, 1, 2, 0])),
    ]:
        with pytest.raises(ValueError) as on_host:
            action(X)
        with pytest.raises(ValueError) as on_device:
            action(torch.from_numpy(X.copy()))
        assert str(on_device.value) == str(on_host.value)
    # Empty tensors were named by the logit check before scikit-learn's, as before.
    with pytest.raises(ValueError, match=r"X is empty \(shape \(0, 3\)\)"):
        TemperatureScaling().fit(torch.zeros(0, 3), y[:0])


def test_the_ece_objective_reads_tensors_on_the_host():
    logits, y = _problem(7, 1000, 5)
    on_host, on_device = _fit_both(logits, y, objective="ece")
    assert on_device.temperature_ == on_host.temperature_


def test_fit_and_predict_proba_make_no_host_copy(no_host_copy):
    logits, y = _problem(8, 3000, 10)
    X = torch.as_tensor(logits)
    fitted = TemperatureScaling().fit(X, y)
    for method in ("predict_proba", "predict_log_proba", "decision_function"):
        assert getattr(fitted, method)(X).shape == X.shape
    assert fitted.temperature_ > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("scale", [1.0, 1e-300, 1e300])
def test_cuda_tensors_are_fitted_and_calibrated_on_the_device(scale, no_host_copy):
    logits, y = _problem(9, 5000, 10)
    on_host = TemperatureScaling().fit(logits * scale, y)
    X = torch.as_tensor(logits * scale, device="cuda")
    fitted = TemperatureScaling().fit(X, y)  # labels on the host (they are read there)
    assert fitted.temperature_ == pytest.approx(on_host.temperature_, rel=1e-10)
    proba = fitted.predict_proba(X.float() if scale == 1.0 else X)
    assert proba.device == X.device and proba.dtype == torch.float64


def test_cpu_tensors_take_the_numpy_passes_by_default(monkeypatch):
    # A CPU tensor is read as a numpy array without a copy; a tensor comes back.
    monkeypatch.setattr(_validation, "_DEVICE_PATHS_ON_CPU", False)
    logits, y = _problem(10, 800, 4, np.float32)
    X = torch.from_numpy(logits)
    fitted = TemperatureScaling().fit(X, y)
    assert fitted.temperature_ == TemperatureScaling().fit(logits, y).temperature_
    proba = fitted.predict_proba(X)
    assert isinstance(proba, torch.Tensor) and proba.dtype == torch.float64
    np.testing.assert_array_equal(proba.numpy(), fitted.predict_proba(logits))
    log_proba = fitted.predict_log_proba(X)
    assert isinstance(log_proba, torch.Tensor) and log_proba.dtype == torch.float64
    np.testing.assert_array_equal(log_proba.numpy(), fitted.predict_log_proba(logits))
