"""Torch tensors are computed on their device: same values as numpy, no host copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reliacal import _validation, metrics
from reliacal._validation import array_namespace
from reliacal.metrics import _array_api
from reliacal.metrics._calibration_error import classwise_sums
from reliacal.metrics._inputs import check_predictions
from reliacal.metrics._predictions import confidences_and_outcomes

PORTED = [
    (metrics.expected_calibration_error, {}),
    (metrics.expected_calibration_error, {"strategy": "quantile"}),
    (metrics.expected_calibration_error, {"norm": "l2", "n_bins": 10}),
    (metrics.expected_calibration_error, {"norm": "max", "strategy": "quantile"}),
    (metrics.expected_calibration_error, {"mode": "classwise"}),
    (metrics.maximum_calibration_error, {}),
    (metrics.classwise_calibration_error, {}),
    (metrics.classwise_calibration_error, {"strategy": "quantile", "norm": "l2"}),
    (metrics.classwise_calibration_error, {"norm": "max", "n_bins": 40}),
    (metrics.debiased_calibration_error, {}),
    (metrics.debiased_calibration_error, {"strategy": "uniform", "mode": "classwise"}),
    (metrics.negative_log_likelihood, {}),
    (metrics.brier_score, {}),
    (metrics.accuracy, {}),
]
IDS = [f"{function.__name__}-{kwargs}" for function, kwargs in PORTED]
# float32 probabilities: the device sums them in another order than numpy's scan.
FLOAT32_RTOL = 1e-6

# The device paths, run on CPU tensors (CPU tensors take numpy by default).
pytestmark = pytest.mark.usefixtures("device_paths_on_cpu")


def _problem(n=3000, n_classes=6, seed=0, ties=False):
    rng = np.random.default_rng(seed)
    logits = 2.5 * rng.normal(size=(n, n_classes))
    if ties:  # rounded logits: tied confidences, tied columns and values on bin edges
        logits = np.round(logits)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    return rng.integers(0, n_classes, n), probs


@pytest.mark.parametrize(("function", "kwargs"), PORTED, ids=IDS)
@pytest.mark.parametrize("ties", [False, True])
def test_float64_tensors_give_the_numpy_value(function, kwargs, ties):
    labels, probs = _problem(ties=ties)
    expected = function(labels, probs, **kwargs)
    got = function(torch.as_tensor(labels), torch.as_tensor(probs), **kwargs)
    assert isinstance(got, float)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(("function", "kwargs"), PORTED, ids=IDS)
def test_float32_tensors_give_the_numpy_value(function, kwargs):
    labels, probs = _problem(seed=1)
    probs32 = probs.astype(np.float32)
    expected = function(labels, probs32, **kwargs)
    got = function(torch.as_tensor(labels), torch.from_numpy(probs32.copy()), **kwargs)
    assert got == pytest.approx(expected, rel=FLOAT32_RTOL, abs=1e-7)


@pytest.mark.parametrize(
    ("function", "kwargs"),
    [
        (metrics.expected_calibration_error, {}),
        (metrics.expected_calibration_error, {"mode": "positive", "strategy": "quantile"}),
        (metrics.classwise_calibration_error, {}),
        (metrics.negative_log_likelihood, {}),
        (metrics.brier_score, {}),
        (metrics.accuracy, {}),
    ],
)
def test_binary_tensors_and_label_maps_give_the_numpy_value(function, kwargs):
    rng = np.random.default_rng(2)
    positive = rng.uniform(size=500)
    positive[:20] = 0.5  # the tie that predicts the negative class
    labels = (rng.uniform(size=500) < positive).astype(np.int64)
    classes = np.array([3, 7])
    expected = function(classes[labels], positive, labels=classes, **kwargs)
    got = function(
        torch.as_tensor(classes[labels]), torch.as_tensor(positive), labels=classes, **kwargs
    )
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # Labels on the host with a tensor of probabilities.
    assert function(labels, torch.as_tensor(positive), **kwargs) == pytest.approx(
        function(labels, positive, **kwargs), rel=1e-12, abs=1e-12
    )


def test_a_hand_computed_ece_on_tensors():
    # Right-closed bins of width 0.2: (0.8, 1] holds 0.9 (right), (0.6, 0.8] holds 0.8
    # (on its upper edge, wrong) and 0.7 (right), (0.4, 0.6] holds 0.6 (right).
    y_prob = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], dtype=torch.float64)
    y_true = torch.tensor([0, 1, 1, 0])
    gaps = [(1, 1.0 - 0.9), (2, abs(0.5 - 0.75)), (1, 1.0 - 0.6)]
    expected = sum(count * gap for count, gap in gaps) / 4
    assert metrics.expected_calibration_error(y_true, y_prob, n_bins=5) == pytest.approx(expected)
    assert metrics.maximum_calibration_error(y_true, y_prob, n_bins=5) == pytest.approx(0.4)


def test_top_label_ece_matches_torchmetrics():
    torchmetrics = pytest.importorskip("torchmetrics.classification")
    labels, probs = _problem(n=4000, n_classes=5, seed=3)
    y_true, y_prob = torch.as_tensor(labels), torch.as_tensor(probs, dtype=torch.float32)
    for norm, oracle_norm in (("l1", "l1"), ("max", "max")):
        oracle = torchmetrics.MulticlassCalibrationError(num_classes=5, n_bins=15, norm=oracle_norm)
        expected = float(oracle(y_prob, y_true))
        got = metrics.expected_calibration_error(y_true, y_prob, norm=norm)
        # torchmetrics bins with float32 edges from linspace: an edge case may differ.
        assert got == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(("function", "kwargs"), PORTED, ids=IDS)
def test_tensors_are_not_copied_to_the_host(function, kwargs, no_host_copy):
    labels, probs = _problem(n=400, seed=4)
    value = function(torch.as_tensor(labels), torch.as_tensor(probs), **kwargs)
    assert 0.0 <= value


def _many_classes_float32(n=300, n_classes=2100, seed=11):
    # Past K ~ 2,098 the rounding margin of float32 sums exceeds the 1e-3 tolerance.
    labels, probs = _problem(n=n, n_classes=n_classes, seed=seed)
    return labels, probs.astype(np.float32)


@pytest.mark.parametrize(("function", "kwargs"), PORTED, ids=IDS)
def test_many_float32_classes_are_checked_on_the_device(function, kwargs, no_host_copy):
    labels, probs = _many_classes_float32()
    if kwargs.get("mode") == "classwise" or function is metrics.classwise_calibration_error:
        kwargs = {**kwargs, "n_bins": 2}  # classwise bins: at most 2e6 cells
    expected = function(labels, probs, **kwargs)
    got = function(torch.as_tensor(labels), torch.as_tensor(probs), **kwargs)
    assert got == pytest.approx(expected, rel=FLOAT32_RTOL, abs=1e-9)


@pytest.mark.parametrize("off", [0.9e-3, -0.9e-3, 1.2e-3, -1.2e-3])
def test_row_sums_near_the_tolerance_get_the_numpy_verdict(off):
    # Rows summing to 1 + off: within the float32 tolerance (1e-3) or beyond it.
    labels, probs = _many_classes_float32(seed=12)
    probs[::7] *= np.float32(1 + off)
    sums = probs.sum(axis=1)
    assert abs(float(np.abs(sums - 1).max()) - abs(off)) < 1e-4  # as numpy sums them
    if abs(off) < 1e-3:
        expected = metrics.negative_log_likelihood(labels, probs)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(torch.Tensor, "cpu", _refuse_host_copy)
            patch.setattr(torch.Tensor, "numpy", _refuse_host_copy)
            got = metrics.negative_log_likelihood(torch.as_tensor(labels), torch.as_tensor(probs))
        assert got == pytest.approx(expected, rel=FLOAT32_RTOL)
        return
    with pytest.raises(ValueError, match="rows of y_prob must sum to 1") as from_numpy:
        metrics.negative_log_likelihood(labels, probs)
    with pytest.raises(ValueError) as from_tensor:
        metrics.negative_log_likelihood(torch.as_tensor(labels), torch.as_tensor(probs))
    assert str(from_tensor.value) == str(from_numpy.value)


def _refuse_host_copy(self, *args, **kwargs):
    raise AssertionError("a tensor was copied to the host")


def _outcome(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except ValueError as error:
        return str(error)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.complex64])
def test_labels_that_torch_cannot_map_are_mapped_on_the_host(dtype):
    # The value (or the refusal) of the same labels as a numpy array.
    _, probs = _problem(n=300, seed=13)
    y_true = torch.as_tensor(_problem(n=300, seed=13)[0]).to(dtype)
    for label_map in (None, list(range(6))):
        ece = metrics.expected_calibration_error
        expected = _outcome(ece, y_true.numpy(), probs, labels=label_map)
        got = _outcome(ece, y_true, torch.as_tensor(probs), labels=label_map)
        assert got == (expected if isinstance(expected, str) else pytest.approx(expected))


def test_a_programming_error_in_the_label_mapping_is_not_hidden(monkeypatch):
    def broken(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(_validation, "_tensor_labels", broken)
    labels, probs = _problem(n=50, seed=14)
    with pytest.raises(TypeError, match="a bug"):
        metrics.expected_calibration_error(torch.as_tensor(labels), torch.as_tensor(probs))


def test_unported_metrics_read_tensors_on_the_host():
    labels, probs = _problem(n=500, seed=5)
    expected = metrics.smooth_calibration_error(labels, probs)
    assert metrics.smooth_calibration_error(
        torch.as_tensor(labels), torch.as_tensor(probs)
    ) == pytest.approx(expected, rel=1e-12)


def _bad_inputs():
    probs = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    nan = probs.copy()
    nan[1, 0] = np.nan
    return [
        ([0, 1, 1], nan, {}),  # NaN
        ([0, 1, 1], np.log(probs), {}),  # logits given as probabilities
        ([0, 1, 1], probs * 1.2, {}),  # rows not summing to 1
        ([0, 1, 2], probs, {}),  # unknown label
        ([0, 5, 1], probs, {"labels": [0, 1]}),  # unknown label, labels given
        ([0, 1], probs, {}),  # lengths differ
        ([0.0, 1.5, 1.0], probs, {}),  # not an integer label
        ([0.0, np.nan, 1.0], probs, {}),  # missing label
        ([0, 1, 1], probs[:, :1], {}),  # one column
        ([0, 1, 1], probs[None], {}),  # 3-D
        ([], np.zeros((0, 2)), {}),  # empty
        ([0, 0, 1], probs, {"labels": [1, 1]}),  # duplicate classes
    ]


@pytest.mark.parametrize(("labels", "probs", "kwargs"), _bad_inputs())
@pytest.mark.parametrize(
    "function", [metrics.expected_calibration_error, metrics.classwise_calibration_error]
)
@pytest.mark.parametrize("labels_as_tensor", [False, True])
def test_bad_tensors_get_the_numpy_message(function, labels, probs, kwargs, labels_as_tensor):
    with pytest.raises(ValueError) as from_numpy:
        function(np.asarray(labels), probs, **kwargs)
    y_true = torch.as_tensor(np.asarray(labels)) if labels_as_tensor else labels
    with pytest.raises(ValueError) as from_tensor:
        function(y_true, torch.as_tensor(probs), **kwargs)
    assert str(from_tensor.value) == str(from_numpy.value)


def test_validation_keeps_the_tensor_on_its_device():
    labels, probs = _problem(n=50, seed=6)
    y_index, y_prob, classes = check_predictions(
        torch.as_tensor(labels, dtype=torch.float64),
        torch.as_tensor(probs, dtype=torch.float16),
        on_device=True,
    )
    assert isinstance(y_index, torch.Tensor) and y_index.dtype == torch.int64
    assert isinstance(y_prob, torch.Tensor) and y_prob.dtype == torch.float32
    np.testing.assert_array_equal(classes, np.arange(6))
    # Without on_device (the metrics that compute on the host), numpy as before.
    assert isinstance(check_predictions(labels, torch.as_tensor(probs))[1], np.ndarray)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_the_namespace_bodies_on_numpy_equal_the_numpy_scans(strategy):
    # One body for both namespaces: on numpy it gives the blocked scans' sums.
    labels, probs = _problem(n=2000, seed=7, ties=True)
    xp = array_namespace(probs)
    assert xp is np
    confidence, outcome = confidences_and_outcomes(labels, probs, "top-label")
    got = _array_api.device_binned_sums(confidence, outcome, 15, strategy, xp)
    stats = metrics.binned_statistics(labels, probs, strategy=strategy)
    np.testing.assert_array_equal(got[0], stats.counts)
    np.testing.assert_allclose(got[1] / np.maximum(got[0], 1), np.nan_to_num(stats.mean_confidence))
    expected = classwise_sums(labels, probs, 15, strategy)
    for mine, theirs in zip(
        _array_api.device_classwise_sums(labels, probs, 15, strategy, xp), expected
    ):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("function", "kwargs"), PORTED, ids=IDS)
def test_cuda_tensors_give_the_numpy_value_without_a_host_copy(function, kwargs, no_host_copy):
    labels, probs = _problem(seed=8, ties=True)
    expected = function(labels, probs, **kwargs)
    y_true = torch.as_tensor(labels, device="cuda")
    got = function(y_true, torch.as_tensor(probs, device="cuda"), **kwargs)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_cpu_tensors_take_the_numpy_passes_by_default(monkeypatch):
    # A CPU tensor is a numpy array without a copy; numpy's blocked passes read it.
    monkeypatch.setattr(_validation, "_DEVICE_PATHS_ON_CPU", False)
    labels, probs = _problem(n=300, seed=9)
    tensor = torch.as_tensor(probs)
    _, y_prob, _ = check_predictions(labels, tensor, on_device=True)
    assert isinstance(y_prob, np.ndarray) and np.shares_memory(y_prob, tensor.numpy())
    for function, kwargs in PORTED:
        expected = function(labels, probs, **kwargs)
        assert function(labels, tensor, **kwargs) == pytest.approx(expected, rel=1e-12, abs=1e-12)
