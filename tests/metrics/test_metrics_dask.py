"""Dask arrays and DataFrames: per-partition states merged on a 2-worker LocalCluster."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from reliacal import metrics
from reliacal.metrics import CalibrationState, calibration_report, softmax
from reliacal.metrics._dask import dask_state
from reliacal.metrics._registry import FUNCTIONS, STREAMABLE

da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

# Uneven row chunks, and the class columns split across chunks (they are rejoined).
ROW_CHUNKS = (700, 1300, 1, 999, 1000)
N_SAMPLES = sum(ROW_CHUNKS)


@pytest.fixture(scope="module")
def client(local_dask_client):
    with local_dask_client(processes=False) as dask_client:
        yield dask_client


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(19)
    probs = softmax(rng.normal(scale=2.0, size=(N_SAMPLES, 5)))
    labels = rng.integers(0, 5, size=N_SAMPLES)
    return labels, probs


def _dask_arrays(labels, probs):
    return (
        da.from_array(labels, chunks=(ROW_CHUNKS,)),
        da.from_array(probs, chunks=(ROW_CHUNKS, (2, 3))),
    )


def _frame(labels, probs, npartitions=4):
    frame = pd.DataFrame(probs, columns=[f"p{k}" for k in range(probs.shape[1])])
    frame["label"] = labels
    frame = dd.from_pandas(frame, npartitions=npartitions)
    return frame["label"], frame[[f"p{k}" for k in range(probs.shape[1])]]


def test_merged_state_is_the_loop_over_partitions_exactly(client, data, one_shot_metrics):
    labels, probs = data
    merged = dask_state(*_dask_arrays(labels, probs), n_bins=10)
    loop = CalibrationState(n_bins=10)
    bounds = np.cumsum((0,) + ROW_CHUNKS)
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        loop.update(labels[start:stop], probs[start:stop])
    assert merged.n_samples == N_SAMPLES
    # Same sums added in the same order: bit for bit the state of a loop.
    assert merged.compute() == loop.compute()
    expected = one_shot_metrics(labels, probs, n_bins=10)
    for name in STREAMABLE:
        assert merged.compute([name])[name] == pytest.approx(expected[name], rel=1e-12), name


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_metric_function_accepts_dask_arrays(client, data, name):
    labels, probs = data
    function = FUNCTIONS[name]
    dask_labels, dask_probs = _dask_arrays(labels, probs)
    expected = function(labels, probs)
    assert function(dask_labels, dask_probs) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    # Mixed inputs: in-memory labels with Dask probabilities.
    assert function(labels, dask_probs) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_spiegelhalter_and_signed_error_accept_dask_frames(client, data):
    labels, probs = data
    dask_labels, dask_probs = _frame(labels, probs)
    expected = metrics.spiegelhalter_test(labels, probs)
    result = metrics.spiegelhalter_test(dask_labels, dask_probs)
    assert isinstance(result, metrics.SpiegelhalterResult)
    np.testing.assert_allclose(result, expected, rtol=1e-12)
    assert metrics.signed_calibration_error(dask_labels, dask_probs) == pytest.approx(
        metrics.signed_calibration_error(labels, probs), rel=1e-12
    )
    with pytest.raises(ValueError, match="undefined"):
        metrics.spiegelhalter_test(da.from_array(np.array([0, 1])), np.full((2, 2), 0.5))


def test_report_of_dask_frames_equals_the_in_memory_report(client, data):
    labels, probs = data
    dask_labels, dask_probs = _frame(labels, probs)
    report = calibration_report(
        dask_labels, {"m": dask_probs, "arr": _dask_arrays(labels, probs)[1]}
    )
    expected = calibration_report(labels, {"m": probs, "arr": probs})
    assert list(report.columns) == list(expected.columns)
    np.testing.assert_allclose(report.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)


def test_string_labels_and_binary_input(client):
    rng = np.random.default_rng(3)
    positive = rng.uniform(size=900)
    names = np.array(["no", "yes"])
    labels = names[(rng.uniform(size=900) < positive).astype(int)]
    dask_labels = da.from_array(labels, chunks=200)
    dask_positive = da.from_array(positive, chunks=300)
    value = metrics.brier_score(dask_labels, dask_positive, labels=names)
    assert value == pytest.approx(metrics.brier_score(labels, positive, labels=names), rel=1e-12)


def test_empty_partitions_are_skipped(client, data):
    labels, probs = data
    frame = pd.DataFrame(probs[:50], columns=list("abcde")).assign(label=labels[:50])
    frame = dd.from_pandas(frame, npartitions=4)
    # Filtering leaves the first partitions empty.
    frame = frame.map_partitions(lambda part: part[part.index >= 30])
    assert frame.map_partitions(len).compute().tolist()[0] == 0
    value = metrics.negative_log_likelihood(frame["label"], frame[list("abcde")])
    assert value == pytest.approx(metrics.negative_log_likelihood(labels[30:50], probs[30:50]))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda y, p: metrics.expected_calibration_error(y, p, strategy="quantile"),
            "strategy='quantile' is not supported",
        ),
        (lambda y, p: calibration_report(y, {"m": p}, bootstrap=5), "model 'm': bootstrap"),
        (lambda y, p: metrics.accuracy(y[:-1], p), "different lengths"),
        (lambda y, p: metrics.accuracy(y.compute()[:-1], p), "different lengths"),
        (lambda y, p: metrics.accuracy(y, p * 0.5), "sum to 1"),
    ],
)
def test_bad_dask_input_raises(client, data, call, message):
    with pytest.raises(ValueError, match=message):
        call(*_dask_arrays(*data))


def test_unknown_arguments_raise_as_in_memory(client, data):
    with pytest.raises(TypeError, match="n_bins"):
        metrics.accuracy(*_dask_arrays(*data), n_bins=3)


def test_frames_with_different_partitions_raise(client, data):
    labels, probs = data
    dask_labels, _ = _frame(labels, probs, npartitions=3)
    _, dask_probs = _frame(labels, probs, npartitions=5)
    with pytest.raises(ValueError, match="partitions"):
        metrics.accuracy(dask_labels, dask_probs)


def test_importing_the_metrics_does_not_import_dask():
    code = "import sys, reliacal.metrics; print(any(m.startswith('dask') for m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.slow
def test_states_travel_between_worker_processes(data, local_dask_client):
    # Worker processes: the per-partition states are pickled to the client.
    labels, probs = data
    with local_dask_client(processes=True):
        dask_labels, dask_probs = _dask_arrays(labels, probs)
        report = calibration_report(dask_labels, {"m": dask_probs})
    expected = calibration_report(labels, {"m": probs})
    np.testing.assert_allclose(report.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)
