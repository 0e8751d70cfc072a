"""Vector, matrix and structured scalings apply their fitted map on a tensor's device."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import softmax

from reliacal.calibrators import (
    MatrixScaling,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    VectorScaling,
)

ESTIMATORS = [VectorScaling, MatrixScaling, StructuredVectorScaling, StructuredMatrixScaling]

# The device paths, run on CPU tensors (CPU tensors take numpy by default).
pytestmark = pytest.mark.usefixtures("device_paths_on_cpu")


def _problem(seed=0, n=1200, n_classes=4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    logits = 2.5 * (rng.normal(size=(n, n_classes)) + 2.0 * np.eye(n_classes)[y])
    logits[:, 0] += 1.0  # a class bias for the maps to undo
    y = np.where(rng.random(n) < 0.2, rng.integers(0, n_classes, size=n), y)
    return logits, y


@pytest.fixture(scope="module")
def fitted():
    logits, y = _problem()
    return logits, {estimator: estimator().fit(logits, y) for estimator in ESTIMATORS}


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: e.__name__)
def test_predict_proba_of_a_tensor_is_the_numpy_one_on_its_device(estimator, fitted):
    logits, models = fitted
    model = models[estimator]
    expected = model.predict_proba(logits)
    proba = model.predict_proba(torch.from_numpy(logits.copy()))
    assert isinstance(proba, torch.Tensor) and proba.dtype == torch.float64
    np.testing.assert_allclose(proba.numpy(), expected, rtol=1e-12, atol=1e-300)
    np.testing.assert_array_equal(model.predict(torch.from_numpy(logits)), model.predict(logits))


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: e.__name__)
def test_a_float32_tensor_gives_the_float64_probabilities_of_the_float32_array(estimator, fitted):
    # Large logits: probabilities that float32 would round (or underflow to zero).
    logits, models = fitted
    model = models[estimator]
    single = (30.0 * logits).astype(np.float32)
    expected = model.predict_proba(single)
    assert expected.dtype == np.float64
    proba = model.predict_proba(torch.from_numpy(single))
    assert proba.dtype == torch.float64
    np.testing.assert_allclose(proba.numpy(), expected, rtol=1e-12, atol=1e-300)
    log_proba = model.predict_log_proba(torch.from_numpy(single))
    assert isinstance(log_proba, torch.Tensor) and log_proba.dtype == torch.float64
    np.testing.assert_allclose(
        log_proba.numpy(), model.predict_log_proba(single), rtol=1e-12, atol=1e-14
    )
    logits_out = model.decision_function(torch.from_numpy(single))
    assert isinstance(logits_out, torch.Tensor) and logits_out.dtype == torch.float64
    np.testing.assert_allclose(
        logits_out.numpy(), model.decision_function(single), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("estimator", [VectorScaling, MatrixScaling], ids=lambda e: e.__name__)
def test_the_map_is_softmax_of_the_linear_map(estimator, fitted):
    # Oracle: the definition, softmax(W z + b) (vector scaling: W diagonal), in scipy.
    logits, models = fitted
    model = models[estimator]
    weights = np.diag(model.coef_) if model.coef_.ndim == 1 else model.coef_
    expected = softmax(logits @ weights.T + model.intercept_, axis=1)
    proba = model.predict_proba(torch.from_numpy(logits.copy())).numpy()
    np.testing.assert_allclose(proba, expected, rtol=1e-12)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: e.__name__)
def test_predict_proba_makes_no_host_copy(estimator, fitted, no_host_copy):
    logits, models = fitted
    X = torch.as_tensor(logits)
    for method in ("predict_proba", "predict_log_proba", "decision_function"):
        assert getattr(models[estimator], method)(X).shape == logits.shape


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: e.__name__)
def test_fit_on_a_tensor_reads_it_on_the_host_and_finds_the_same_map(estimator, fitted):
    logits, models = fitted
    _, y = _problem()
    model = estimator().fit(torch.from_numpy(logits.copy()), torch.as_tensor(y))
    np.testing.assert_allclose(model.coef_, models[estimator].coef_, rtol=1e-12, atol=1e-15)


def test_bad_tensors_get_the_numpy_messages(fitted):
    logits, models = fitted
    model = models[VectorScaling]
    bad = logits.copy()
    bad[2, 2] = np.inf
    for X in (logits[:, :3], bad):
        with pytest.raises(ValueError) as on_host:
            model.predict_proba(X)
        with pytest.raises(ValueError) as on_device:
            model.predict_proba(torch.from_numpy(X.copy()))
        assert str(on_device.value) == str(on_host.value)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: e.__name__)
def test_cuda_tensors_are_calibrated_on_the_device(estimator, fitted, no_host_copy):
    logits, models = fitted
    X = torch.as_tensor(logits, device="cuda")
    proba = models[estimator].predict_proba(X.float())
    assert proba.device == X.device and proba.dtype == torch.float64
