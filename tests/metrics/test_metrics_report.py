"""calibration_report: every column equals its metric function; bootstrap; memory."""

import tracemalloc

import numpy as np
import pandas as pd
import pytest

from reliacal.metrics import (
    brier_score,
    calibration_report,
    classwise_calibration_error,
    expected_calibration_error,
    softmax,
)
from reliacal.metrics._binning import uniform_bin_index
from reliacal.metrics._calibration_error import classwise_error
from reliacal.metrics._predictions import scan_matrix
from reliacal.metrics._smooth import _spread_sorted, smooth_ece_of_scores, spread_scores

COLUMNS = [
    "accuracy",
    "ece",
    "adaptive_ece",
    "classwise_ece",
    "mce",
    "smooth_ece",
    "nll",
    "brier",
    "signed_ece",
    # Issue 19: Spiegelhalter's test streams from sums; the sorted metrics need samples.
    "spiegelhalter_z",
    "spiegelhalter_p",
    "ks_error",
    "sweep_ece",
]


def test_columns_equal_the_metric_functions(cifar_record, one_shot_metrics):
    name, probs, labels = cifar_record
    report = calibration_report(labels, {name: probs})
    assert list(report.columns) == COLUMNS
    assert list(report.index) == [name] and report.index.name == "model"
    expected = one_shot_metrics(labels, probs)
    for column in COLUMNS:
        assert report.loc[name, column] == pytest.approx(expected[column], rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("n_bins", [1, 7])
def test_several_models_and_bins(n_bins, one_shot_metrics):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=500)
    models = {
        "sharp": softmax(rng.normal(scale=3, size=(500, 4))),
        "flat": softmax(rng.normal(scale=0.3, size=(500, 4)).astype(np.float32)),
    }
    report = calibration_report(labels, models, n_bins=n_bins)
    assert list(report.index) == ["sharp", "flat"]
    for name, probs in models.items():
        expected = one_shot_metrics(labels, probs, n_bins)
        for column in COLUMNS:
            assert report.loc[name, column] == pytest.approx(expected[column], rel=1e-12, abs=1e-14)


def test_binary_1d_input_and_string_labels(one_shot_metrics):
    rng = np.random.default_rng(1)
    positive = rng.uniform(size=300)
    labels = np.where(rng.uniform(size=300) < positive, "yes", "no")
    report = calibration_report(labels, {"m": positive}, labels=["no", "yes"])
    expected = one_shot_metrics((labels == "yes").astype(int), positive)
    for column in COLUMNS:
        assert report.loc["m", column] == pytest.approx(expected[column], rel=1e-12, abs=1e-14)


def test_bootstrap_intervals():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, size=400)
    probs = softmax(rng.normal(scale=2, size=(400, 3)))
    report = calibration_report(labels, {"m": probs}, bootstrap=30, random_state=0)
    for column in COLUMNS:
        low, high = report.loc["m", f"{column}_ci_low"], report.loc["m", f"{column}_ci_high"]
        assert low <= high
    # Unbiased means lie inside their intervals.
    for column in ("accuracy", "nll", "brier"):
        assert report.loc["m", f"{column}_ci_low"] <= report.loc["m", column]
        assert report.loc["m", column] <= report.loc["m", f"{column}_ci_high"]
    again = calibration_report(labels, {"m": probs}, bootstrap=30, random_state=0)
    pd.testing.assert_frame_equal(report, again)
    other = calibration_report(labels, {"m": probs}, bootstrap=30, random_state=1)
    assert not report.equals(other)


def test_weighted_classwise_equals_resampled_data():
    """The bootstrap's classwise path (sample weights) against explicit resampling."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 5, size=300)
    probs = softmax(rng.normal(scale=2, size=(300, 5))).astype(np.float32)
    sample = rng.integers(0, 300, size=300)
    weights = np.bincount(sample, minlength=300).astype(np.float64)
    scan = scan_matrix(probs, labels, top_label=False, classwise_bins=15, weights=weights)
    weighted = classwise_error(scan.classwise, "l1")
    resampled = classwise_calibration_error(labels[sample], probs[sample])
    assert weighted == pytest.approx(resampled, rel=1e-10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predictions": {}}, "non-empty mapping"),
        ({"predictions": np.full((3, 2), 0.5)}, "mapping"),
        ({"bootstrap": -1}, "bootstrap"),
        ({"bootstrap": 2.5}, "bootstrap"),
        ({"confidence_level": 1.5}, "confidence_level"),
        ({"n_bins": 0}, "n_bins"),
        ({"predictions": {"bad": np.full((3, 2), 0.6)}}, "model 'bad': rows of y_prob"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    arguments = {"predictions": {"m": np.full((3, 2), 0.5)}} | kwargs
    predictions = arguments.pop("predictions")
    with pytest.raises(ValueError, match=message):
        calibration_report([0, 1, 1], predictions, **arguments)


def _peak_bytes(function) -> int:
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_no_full_size_temporaries():
    """Metrics allocate O(n) arrays and row blocks, never an (n, K) copy."""
    rng = np.random.default_rng(4)
    n_samples, n_classes = 100_000, 100
    probs = softmax(rng.normal(size=(n_samples, n_classes)).astype(np.float32))
    labels = rng.integers(0, n_classes, size=n_samples)
    matrix_bytes = probs.nbytes  # 40 MB
    assert _peak_bytes(lambda: expected_calibration_error(labels, probs)) < 0.25 * matrix_bytes
    assert _peak_bytes(lambda: brier_score(labels, probs)) < 0.5 * matrix_bytes
    assert _peak_bytes(lambda: classwise_calibration_error(labels, probs)) < 0.5 * matrix_bytes
    assert _peak_bytes(lambda: calibration_report(labels, {"m": probs})) < 0.5 * matrix_bytes


@pytest.mark.parametrize("n_classes", [10, 100])
def test_classwise_and_report_add_less_than_the_input_with_few_classes(n_classes):
    # With fewer classes than bins most entries exceed 1 / n_bins: listing them all
    # (24 bytes each) took 5x the float32 input; binning per block takes a fraction.
    # The report adds a few O(n) arrays (labels, confidences, scores) besides.
    rng = np.random.default_rng(n_classes)
    n_samples = 4_000_000 // n_classes
    probs = softmax(rng.normal(size=(n_samples, n_classes)).astype(np.float32))
    labels = rng.integers(0, n_classes, size=n_samples)
    calls = {
        "uniform": lambda: classwise_calibration_error(labels, probs),
        "quantile": lambda: classwise_calibration_error(labels, probs, strategy="quantile"),
        "report": lambda: calibration_report(labels, {"m": probs}),
    }
    for name, call in calls.items():
        assert _peak_bytes(call) < probs.nbytes + labels.nbytes, name


def test_scan_blocks_agree_with_whole_matrix():
    rng = np.random.default_rng(5)
    probs = softmax(rng.normal(size=(5000, 300)))  # several row blocks
    labels = rng.integers(0, 300, size=5000)
    blocked = scan_matrix(probs, labels, true_class=True, squares=True, classwise_bins=10)
    whole = scan_matrix(probs, labels, true_class=True)
    np.testing.assert_array_equal(blocked.confidence, whole.confidence)
    np.testing.assert_array_equal(blocked.correct, whole.correct)
    np.testing.assert_allclose(blocked.sum_of_squares, (probs**2).sum(axis=1), rtol=1e-12)
    # The classwise sums against binning every entry of the whole matrix at once.
    cells = np.arange(300) * 10 + uniform_bin_index(probs, 10)  # (n, K) cell of each entry
    counts = np.bincount(cells.ravel(), minlength=3000).reshape(300, 10)
    sums = np.bincount(cells.ravel(), weights=probs.ravel(), minlength=3000).reshape(300, 10)
    outcome = np.zeros((5000, 300), dtype=bool)
    outcome[np.arange(5000), labels] = True
    outcomes = np.bincount(cells[outcome], minlength=3000).reshape(300, 10)
    np.testing.assert_array_equal(blocked.classwise.counts, counts)
    np.testing.assert_allclose(blocked.classwise.sum_probability, sums, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(blocked.classwise.sum_outcome, outcomes)
    np.testing.assert_allclose(blocked.classwise.sum_probability.sum(axis=1), probs.sum(axis=0))


@pytest.mark.parametrize("size", [2, 3, 1001, 20001])
def test_sorted_spread_equals_the_bincount_spread(size):
    # The report's sorted confidences are spread run by run; the oracle is the
    # per-sample bincount spread. Ties, 0, 1 and runs longer than a chunk included.
    rng = np.random.default_rng(3)
    confidence = np.concatenate(
        [[0.0, 0.5, 0.5, 1.0, 1.0], rng.uniform(size=150_000), np.full(70_000, 0.25)]
    )
    confidence.sort()
    outcome = (rng.uniform(size=confidence.shape[0]) < confidence).astype(float)
    residual = confidence - outcome
    expected, spread = np.zeros((2, size)), np.zeros((2, size))
    spread_scores(confidence, residual, expected)
    _spread_sorted(confidence, residual, spread)
    np.testing.assert_allclose(spread, expected, rtol=1e-12, atol=1e-8)
    assert smooth_ece_of_scores(confidence, outcome, is_sorted=True) == pytest.approx(
        smooth_ece_of_scores(confidence, outcome), rel=1e-12
    )
