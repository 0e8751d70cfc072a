"""Dask arrays and DataFrames: per-partition states merged on a 2-worker LocalCluster."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from reliacal import metrics
from reliacal.metrics import CalibrationState, calibration_report, softmax
from reliacal.metrics._dask import dask_state
from reliacal.metrics._registry import FUNCTIONS, STREAMABLE

dask = pytest.importorskip("dask")
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
    # The public face: the table holds the NumPy definitions, reliacal.metrics wraps them.
    function = getattr(metrics, FUNCTIONS[name].__name__)
    assert inspect.unwrap(function) is FUNCTIONS[name]
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
    columns = [f"p{k}" for k in range(5)]
    frame = pd.DataFrame(probs[:50], columns=columns).assign(label=labels[:50])
    frame = dd.from_pandas(frame, npartitions=4)
    # Filtering leaves the first partitions empty.
    frame = frame.map_partitions(lambda part: part[part.index >= 30])
    assert frame.map_partitions(len).compute().tolist()[0] == 0
    value = metrics.negative_log_likelihood(frame["label"], frame[columns])
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


def test_frames_with_different_partitions_are_matched_by_index(client, data):
    # Two frames of the same rows, partitioned differently: joined by index, as pandas'
    # assign joins them, so the labels meet their own rows.
    labels, probs = data
    dask_labels, _ = _frame(labels, probs, npartitions=3)
    _, dask_probs = _frame(labels, probs, npartitions=5)
    report = calibration_report(dask_labels, {"m": dask_probs})
    expected = calibration_report(labels, {"m": probs})
    np.testing.assert_allclose(report.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)


def _write_parquet_folder(folder, labels, probs, n_files):
    folder.mkdir()
    columns = [f"p{k}" for k in range(probs.shape[1])]
    for index, rows in enumerate(np.array_split(np.arange(labels.shape[0]), n_files)):
        part = pd.DataFrame(probs[rows], columns=columns).assign(label=labels[rows])
        part.to_parquet(folder / f"part-{index:02d}.parquet")
    return columns


def test_a_parquet_folder_of_several_files(client, tmp_path):
    # The label column alone is small: Dask reads it in fewer, larger partitions than the
    # probability columns, so the two selections do not line up partition by partition.
    rng = np.random.default_rng(8)
    probs = softmax(rng.normal(scale=2.0, size=(3000, 10)))
    labels = rng.integers(0, 10, size=3000)
    columns = _write_parquet_folder(tmp_path / "predictions", labels, probs, n_files=10)
    frame = dd.read_parquet(tmp_path / "predictions")
    expected = calibration_report(labels, {"model": probs})
    report = calibration_report(frame["label"], {"model": frame[columns]})
    np.testing.assert_allclose(report.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)
    # As arrays of unknown chunk sizes: the sizes are measured and the labels rechunked.
    as_arrays = calibration_report(
        frame["label"].to_dask_array(), {"model": frame[columns].to_dask_array()}
    )
    np.testing.assert_allclose(as_arrays.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)


def test_frame_columns_are_matched_to_classes_by_name(client, data):
    labels, probs = data
    shuffled = [f"p{k}" for k in (2, 0, 4, 1, 3)]
    frame = pd.DataFrame(probs, columns=[f"p{k}" for k in range(5)])[shuffled]
    dask_probs = dd.from_pandas(frame, npartitions=4)
    dask_labels = dd.from_pandas(pd.Series(labels), npartitions=4)
    expected = metrics.expected_calibration_error(labels, probs)
    assert metrics.expected_calibration_error(dask_labels, dask_probs) == pytest.approx(
        expected, rel=1e-12
    )
    assert metrics.expected_calibration_error(labels, dask_probs) == pytest.approx(
        expected, rel=1e-12
    )


@pytest.mark.parametrize("form", ["array", "frame"])
def test_a_bad_row_is_reported_by_its_row_in_the_whole_input(client, data, form):
    labels, probs = data
    probs = probs.copy()
    probs[2250, 1] = np.nan  # in the fourth chunk of ROW_CHUNKS, its row 249 there
    if form == "array":
        dask_labels, dask_probs = _dask_arrays(labels, probs)
    else:
        dask_labels, dask_probs = _frame(labels, probs, npartitions=7)
    with pytest.raises(ValueError, match=r"NaN \(first in row 2250\)"):
        metrics.accuracy(dask_labels, dask_probs)


def test_a_missing_label_is_named(client, data):
    labels, probs = data
    with_gap = labels.astype(np.float64)
    with_gap[1500] = np.nan
    dask_labels = dd.from_pandas(pd.Series(with_gap), npartitions=4)
    dask_probs = dd.from_pandas(pd.DataFrame(probs), npartitions=4)
    with pytest.raises(ValueError, match=r"missing label .*first in row 1500\)"):
        metrics.negative_log_likelihood(dask_labels, dask_probs)
    nullable = dd.from_pandas(pd.Series(labels, dtype="Int64").mask(pd.Series(labels) == 3))
    first = int(np.flatnonzero(labels == 3)[0])
    with pytest.raises(ValueError, match=rf"missing labels .*first in row {first}\)"):
        calibration_report(nullable, {"m": dask_probs})


def test_empty_input_is_named(client):
    empty_labels = da.from_array(np.zeros(0, dtype=np.int64))
    empty_probs = da.from_array(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="empty"):
        metrics.expected_calibration_error(empty_labels, empty_probs)
    frame = dd.from_pandas(pd.DataFrame({"p0": [0.5], "p1": [0.5], "label": [0]}), npartitions=1)
    frame = frame[frame["label"] > 0]
    with pytest.raises(ValueError, match="empty"):
        calibration_report(frame["label"], {"m": frame[["p0", "p1"]]})


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
    bad = probs.copy()
    bad[3500, 0] = np.nan
    with local_dask_client(processes=True):
        dask_labels, dask_probs = _dask_arrays(labels, probs)
        report = calibration_report(dask_labels, {"m": dask_probs})
        # A refused partition travels back too, and its row is counted in the whole input.
        with pytest.raises(ValueError, match=r"first in row 3500\)"):
            metrics.accuracy(*_dask_arrays(labels, bad))
    expected = calibration_report(labels, {"m": probs})
    np.testing.assert_allclose(report.to_numpy(), expected.to_numpy(), rtol=1e-12, atol=1e-15)


def _tied_data(n_samples=60_000, seed=23):
    # Two-decimal probabilities: many buckets hold both p and a neighbour of 1 - p,
    # so the sorted metrics need a refining pass over the partitions.
    rng = np.random.default_rng(seed)
    positive = np.round(rng.random(n_samples), 2)
    return (rng.random(n_samples) < positive).astype(int), positive


def test_the_sorted_metrics_refine_a_histogram_over_the_partitions(client, monkeypatch):
    from reliacal.metrics import _dask

    labels, positive = _tied_data()
    passes = []
    refine = _dask._partition_refinement

    def counted(partition, *arguments):
        passes.append(partition)
        return refine(partition, *arguments)

    monkeypatch.setattr(_dask, "_partition_refinement", counted)
    dask_labels = da.from_array(labels, chunks=15_000)
    dask_positive = da.from_array(positive, chunks=15_000)
    # In this process, so that the counting closure's list is this one (the client's
    # workers would get a pickled copy of it).
    with dask.config.set(scheduler="synchronous"):
        state = dask_state(dask_labels, dask_positive, histogram=True)
    assert passes and sorted(set(passes)) == [0, 1, 2, 3]  # every partition, again
    assert state._sums.confidences == []  # nothing per row reached the client
    names = ["adaptive_ece", "debiased_ece", "smooth_ece", "ks_error", "sweep_ece"]
    expected = CalibrationState(keep_confidences=True).update(labels, positive).compute(names)
    values = state.compute(names)
    for name in names:
        assert values[name] == pytest.approx(expected[name], abs=1e-12), name
    report = calibration_report(dask_labels, {"m": dask_positive})
    in_memory = calibration_report(labels, {"m": positive})
    np.testing.assert_allclose(report.to_numpy(), in_memory.to_numpy(), rtol=1e-12, atol=1e-12)
