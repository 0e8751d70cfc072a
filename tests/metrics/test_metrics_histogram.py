"""Histogram states refined in passes: every metric equals the in-memory function.

The oracle of each streamed value is the public metric function on all the data at
once (which sorts and smooths every confidence). Exact metrics (quantile bins, KS,
the sweep) must agree to 1e-12; the smooth ECE, whose grids come from bucket sums,
within its stated bound (1e-11).
"""

import pickle

import numpy as np
import pytest

from reliacal import metrics
from reliacal.metrics import CalibrationState, _refinement
from reliacal.metrics._cells import Cells, Unresolved
from reliacal.metrics._histogram import BUCKET_BITS

EXACT = 1e-12
SMOOTH_BOUND = 1e-11
FROM_HISTOGRAM = ("adaptive_ece", "debiased_ece", "smooth_ece", "ks_error", "sweep_ece")


def _oracles(labels, probs, n_bins=15):
    return {
        "adaptive_ece": metrics.expected_calibration_error(
            labels, probs, n_bins=n_bins, strategy="quantile"
        ),
        "debiased_ece": metrics.debiased_calibration_error(labels, probs, n_bins=n_bins),
        "smooth_ece": metrics.smooth_calibration_error(labels, probs),
        "ks_error": metrics.ks_calibration_error(labels, probs),
        "sweep_ece": metrics.monotonic_sweep_calibration_error(labels, probs),
    }


def _batches(labels, probs, size):
    def batches():
        return ((labels[s : s + size], probs[s : s + size]) for s in range(0, len(labels), size))

    return batches


def _refined(labels, probs, *, n_bins=15, batch=4096):
    batches = _batches(labels, probs, batch)
    state = CalibrationState(n_bins, histogram=True)
    for y_batch, p_batch in batches():
        state.update(y_batch, p_batch)
    return state.refine_with(batches)


def assert_equal_to_oracles(values, expected):
    for name in FROM_HISTOGRAM:
        bound = SMOOTH_BOUND if name == "smooth_ece" else EXACT
        assert abs(values[name] - expected[name]) <= bound, (name, values[name], expected[name])


def _calibrated(rng, n_samples, n_classes, concentration=0.3, dtype=np.float64):
    probs = rng.dirichlet(np.full(n_classes, concentration), size=n_samples).astype(dtype)
    probs /= probs.sum(axis=1, keepdims=True)
    draws = rng.random(n_samples)[:, None] > np.cumsum(probs, axis=1)
    return np.minimum(draws.sum(axis=1), n_classes - 1), probs


def _cases():
    rng = np.random.default_rng(0)
    cases = {}
    cases["calibrated float64, no ties"] = _calibrated(rng, 60_000, 5)
    cases["calibrated float32, 10 classes"] = _calibrated(rng, 80_000, 10, dtype=np.float32)
    labels, probs = _calibrated(rng, 50_000, 4)
    cases["miscalibrated"] = (rng.integers(0, 4, 50_000), probs)
    positive = np.round(rng.random(40_000), 2)  # two decimals: heavy ties
    cases["binary 1-D, ties"] = ((rng.random(40_000) < positive).astype(int), positive)
    half = np.where(rng.random(30_000) < 0.5, 0.5, rng.random(30_000))
    cases["half the samples at 0.5"] = ((rng.random(30_000) < half).astype(int), half)
    # Confidences exactly on bucket edges b / 2**20, and one float below and above them.
    edges = rng.integers(2**19, 2**20, 3000) / float(1 << BUCKET_BITS)
    around = np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, 1)])
    cases["bucket edges"] = ((rng.random(around.shape[0]) < around).astype(int), around)
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", list(CASES))
def test_refined_histogram_equals_the_metric_functions(case):
    labels, probs = CASES[case]
    values = _refined(labels, probs).compute(list(FROM_HISTOGRAM))
    assert_equal_to_oracles(values, _oracles(labels, probs))


def test_every_partitioning_and_merged_workers_give_the_same_values():
    labels, probs = CASES["calibrated float32, 10 classes"]
    expected = _oracles(labels, probs)
    workers = [CalibrationState(histogram=True) for _ in range(3)]
    for index, worker in enumerate(workers):
        worker.update(labels[index::3], probs[index::3])
    merged = pickle.loads(pickle.dumps(workers[0]))
    merged.merge(workers[1]).merge(pickle.loads(pickle.dumps(workers[2])))
    refinement = merged.refinement()
    parts = [refinement.fresh() for _ in range(2)]
    parts[0].update(labels[:30_000], probs[:30_000])
    parts[1].update(labels[30_000:], probs[30_000:])
    merged.refine(pickle.loads(pickle.dumps(parts[0])).merge(parts[1]))
    while (refinement := merged.refinement()) is not None:
        merged.refine(refinement.update(labels, probs))
    assert_equal_to_oracles(merged.compute(list(FROM_HISTOGRAM)), expected)


@pytest.mark.parametrize("n_bins", [1, 7, 15, 200_000])
def test_quantile_bins_of_any_count(n_bins):
    labels, probs = CASES["binary 1-D, ties"]
    state = _refined(labels, probs, n_bins=n_bins)
    assert state.compute(["adaptive_ece"])["adaptive_ece"] == pytest.approx(
        metrics.expected_calibration_error(labels, probs, n_bins=n_bins, strategy="quantile"),
        abs=EXACT,
    )


def test_large_buckets_are_split_before_they_are_collected(monkeypatch):
    # Every sample in one bucket of many values: the quantile cuts need its order.
    rng = np.random.default_rng(5)
    base = 0.75
    positive = base + rng.integers(0, 2**20, 50_000) * 2.0**-45
    labels = (rng.random(50_000) < positive).astype(int)
    monkeypatch.setattr(_refinement, "RESOLVE_SAMPLES", 1 << 12)
    state = CalibrationState(histogram=True).update(labels, positive)
    splits = 0
    while (refinement := state.refinement()) is not None:
        splits += refinement.split.size > 0
        state.refine(refinement.update(labels, positive))
    assert splits >= 1
    assert_equal_to_oracles(state.compute(list(FROM_HISTOGRAM)), _oracles(labels, positive))


def test_a_state_needs_its_passes_before_the_sorted_metrics():
    labels, probs = CASES["binary 1-D, ties"]
    state = CalibrationState(histogram=True).update(labels, probs)
    assert state.refinement() is not None
    # The sums and the smooth ECE need no further pass.
    assert state.compute(["ece", "smooth_ece"])["ece"] == pytest.approx(
        metrics.expected_calibration_error(labels, probs), rel=1e-12
    )
    with pytest.raises(ValueError, match="needs another pass over the data"):
        state.compute(["adaptive_ece"])
    with pytest.raises(ValueError, match="keep_confidences=True"):
        state.compute(["corp_miscalibration"])
    with pytest.raises(ValueError, match="choose one"):
        CalibrationState(histogram=True, keep_confidences=True)


def test_a_pass_over_other_rows_is_refused():
    labels, probs = CASES["calibrated float64, no ties"]
    state = CalibrationState(histogram=True).update(labels, probs)
    refinement = state.refinement()
    refinement.update(labels[:-10], probs[:-10])
    with pytest.raises(ValueError, match="every pass must read the same rows"):
        state.refine(refinement)


def test_the_histogram_does_not_keep_the_confidences():
    labels, probs = CASES["calibrated float64, no ties"]
    state = _refined(labels, probs)
    sums = state._sums
    assert sums.confidences == [] and sums.corrects == []
    with pytest.raises(ValueError, match="histogram"):
        sums.samples()


# Cells, by hand ---------------------------------------------------------------------


def _cells(groups):
    """Cells from ``[(values, outcomes), ...]``, one cell per group."""
    fields = []
    for values, outcomes in groups:
        values, outcomes = np.asarray(values, float), np.asarray(outcomes, bool)
        fields.append(
            (
                len(values),
                int(outcomes.sum()),
                values.sum(),
                values[outcomes].sum(),
                values.min(),
                values.max(),
            )
        )
    return Cells(*map(np.array, zip(*fields, strict=True)))


def test_a_cut_inside_a_cell_of_several_values_names_that_cell():
    cells = _cells([([0.1, 0.2], [0, 0]), ([0.5, 0.6, 0.7, 0.8], [1, 0, 1, 0])])
    with pytest.raises(Unresolved) as caught:
        cells.quantile_statistics(3)  # cuts at ranks 2 and 4: the second inside cell 1
    assert caught.value.cells.tolist() == [1]
    # One value per cell: the order is known (negatives first) and the bins are exact.
    single = _cells([([0.1, 0.1], [1, 0]), ([0.5, 0.5, 0.5], [1, 0, 1])])
    stats = single.quantile_statistics(2)
    expected = metrics.binned_statistics(
        [1, 0, 1, 0, 1], [0.1, 0.1, 0.5, 0.5, 0.5], n_bins=2, strategy="quantile", mode="positive"
    )
    np.testing.assert_allclose(stats.accuracy, expected.accuracy)
    np.testing.assert_allclose(stats.mean_confidence, expected.mean_confidence)
    np.testing.assert_allclose(stats.edges, expected.edges)


def test_ks_asks_only_for_cells_that_can_hold_the_maximum():
    # The running sum of c - o ends cells at 0.9 and 0.6; the second cell's inner
    # values stay within [0.9 - 0.5, 0.9 + 0.2]: below 0.9 + 0.3 only if small.
    cells = _cells([([0.9], [0]), ([0.2, 0.5], [0, 1])])
    with pytest.raises(Unresolved) as caught:
        cells.ks_error()
    assert caught.value.cells.tolist() == [1]
    quiet = _cells([([0.9], [0]), ([0.95, 0.96], [1, 1])])
    assert quiet.ks_error() == pytest.approx(
        metrics.ks_calibration_error([0, 1, 1], [0.9, 0.95, 0.96], mode="positive")
    )
