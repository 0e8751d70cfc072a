"""Edge conventions worked out by hand, and ValueError on every kind of bad input."""

import numpy as np
import pytest

from reliacal.metrics import (
    BinnedStatistics,
    accuracy,
    binned_statistics,
    brier_score,
    classwise_calibration_error,
    debiased_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
    negative_log_likelihood,
    smooth_calibration_error,
    smooth_reliability_curve,
    softmax,
)
from reliacal.metrics._binning import uniform_bin_index, uniform_edges

# --------------------------------------------------------------------------- bin edges


def test_edges_are_exact_divisions():
    edges = uniform_edges(10)
    assert edges[3] == 3 / 10 == 0.3  # linspace would give 0.30000000000000004
    np.testing.assert_array_equal(edges, [b / 10 for b in range(11)])


@pytest.mark.parametrize("n_bins", [1, 2, 3, 7, 10, 15, 49, 100])
def test_fast_bin_index_equals_searchsorted_definition(n_bins):
    edges = uniform_edges(n_bins)
    rng = np.random.default_rng(n_bins)
    values = np.concatenate(
        [
            edges,
            np.nextafter(edges, 2.0),
            np.nextafter(edges, -1.0),
            rng.uniform(size=1000),
            np.float32(edges).astype(np.float64),  # float32 edges are off the exact edges
        ]
    )
    values = np.clip(values, 0.0, 1.0)
    expected = np.searchsorted(edges[1:-1], values, side="left")
    np.testing.assert_array_equal(uniform_bin_index(values, n_bins), expected)


def test_values_on_edges_go_to_the_lower_bin():
    # p = b / 10 exactly: each lies in bin b - 1; 0 lies in bin 0; 1.0 in the last.
    positive = np.arange(11) / 10
    stats = binned_statistics(np.zeros(11, dtype=int), positive, n_bins=10, mode="positive")
    np.testing.assert_array_equal(stats.counts, [2, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    assert stats.mean_confidence[0] == pytest.approx(0.05)  # {0.0, 0.1}
    assert stats.mean_confidence[-1] == 1.0  # {1.0}


def test_just_above_an_edge_goes_to_the_upper_bin():
    stats = binned_statistics([0, 0], [0.3, np.nextafter(0.3, 1.0)], n_bins=10, mode="positive")
    assert stats.counts[2] == 1 and stats.counts[3] == 1


def test_float32_values_are_compared_exactly():
    # float32(0.3) = 0.30000001192... > 0.3, so it belongs to (0.3, 0.4].
    stats = binned_statistics([0], np.array([0.3], dtype=np.float32), n_bins=10, mode="positive")
    assert stats.counts[3] == 1


def test_confidence_one_is_in_the_last_bin():
    stats = binned_statistics([0, 1], [[1.0, 0.0], [0.0, 1.0]], n_bins=15)
    assert stats.counts[-1] == 2 and stats.counts.sum() == 2


def test_binary_case_from_the_docs():
    # both in the last bin: mean p 0.975, frequency 0.5
    for mode in ("positive", "top-label"):
        ece = expected_calibration_error([1, 0], [0.95, 1.0], n_bins=10, mode=mode)
        assert ece == pytest.approx(0.475, abs=1e-15)


def test_one_sample_per_bin():
    positive = np.array([0.1, 0.3, 0.6, 0.9])
    labels = np.array([0, 1, 1, 0])
    ece = expected_calibration_error(labels, positive, n_bins=4, mode="positive")
    assert ece == pytest.approx((0.1 + 0.7 + 0.4 + 0.9) / 4)
    mce = maximum_calibration_error(labels, positive, n_bins=4, mode="positive")
    assert mce == pytest.approx(0.9)
    rmsce = expected_calibration_error(labels, positive, n_bins=4, norm="l2", mode="positive")
    assert rmsce == pytest.approx(np.sqrt((0.01 + 0.49 + 0.16 + 0.81) / 4))


def test_single_bin_is_the_overall_gap():
    probs = np.array([[0.9, 0.1], [0.3, 0.7], [0.55, 0.45]])
    labels = np.array([0, 0, 0])
    # confidences 0.9, 0.7, 0.55; correct 1, 0, 1
    expected = abs(2 / 3 - (0.9 + 0.7 + 0.55) / 3)
    for strategy in ("uniform", "quantile"):
        ece = expected_calibration_error(labels, probs, n_bins=1, strategy=strategy)
        assert ece == pytest.approx(expected)
        # classwise: per class |frequency - mean probability|, averaged
        classwise = classwise_calibration_error(labels, probs, n_bins=1, strategy=strategy)
        assert classwise == pytest.approx((abs(1 - 0.5833333) + abs(0 - 0.4166667)) / 2)


def test_one_class_present_is_computed():
    probs = np.array([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.5, 0.25, 0.25]])
    labels = np.array([0, 0, 0])
    # top-label, 5 bins: 0.6 -> (0.4, 0.6], 0.7 -> (0.6, 0.8], 0.5 -> (0.4, 0.6]
    # bin (0.4, 0.6]: conf 0.55, acc 1 ; bin (0.6, 0.8]: conf 0.7, acc 0
    expected = (2 * 0.45 + 1 * 0.7) / 3
    assert expected_calibration_error(labels, probs, n_bins=5) == pytest.approx(expected)
    # classwise: class 0 column (0.6, 0.2, 0.5) all positive; classes 1, 2 all negative
    # (0.6, 0.5 in (0.4, 0.6], 0.2 on the edge goes to [0, 0.2])
    class0 = (2 * abs(1 - 0.55) + 1 * abs(1 - 0.2)) / 3
    # classes 1 and 2 are never true, so every bin's gap is its mean probability
    class1 = (2 * 0.275 + 1 * 0.7) / 3  # 0.3 and 0.25 share (0.2, 0.4]
    class2 = (2 * 0.1 + 1 * 0.25) / 3
    assert classwise_calibration_error(labels, probs, n_bins=5) == pytest.approx(
        (class0 + class1 + class2) / 3
    )
    assert np.isfinite(negative_log_likelihood(labels, probs))
    assert np.isfinite(smooth_calibration_error(labels, probs))


def test_quantile_with_fewer_samples_than_bins():
    positive = np.array([0.2, 0.5, 0.9])
    labels = np.array([1, 0, 1])
    stats = binned_statistics(labels, positive, strategy="quantile", mode="positive")
    np.testing.assert_array_equal(stats.counts[:3], [1, 1, 1])
    assert np.all(stats.counts[3:] == 0) and np.all(np.isnan(stats.accuracy[3:]))
    ece = expected_calibration_error(labels, positive, strategy="quantile", mode="positive")
    assert ece == pytest.approx((0.8 + 0.5 + 0.1) / 3)
    np.testing.assert_allclose(stats.edges[:4], [0.0, 0.35, 0.7, 1.0])


def test_quantile_groups_are_array_split_of_sorted_confidences():
    positive = np.linspace(0.01, 0.99, 17)[::-1]
    labels = np.arange(17) % 2
    stats = binned_statistics(labels, positive, n_bins=5, strategy="quantile", mode="positive")
    np.testing.assert_array_equal(stats.counts, [4, 4, 3, 3, 3])
    ordered = np.sort(positive)
    groups = np.array_split(ordered, 5)
    np.testing.assert_allclose(stats.mean_confidence, [g.mean() for g in groups])


def test_empty_bins_contribute_nothing():
    stats = binned_statistics([0, 1], [0.05, 0.95], n_bins=15, mode="positive")
    assert stats.counts.sum() == 2 and np.count_nonzero(stats.counts) == 2
    assert np.isnan(stats.mean_confidence[5])
    assert expected_calibration_error([0, 1], [0.05, 0.95], mode="positive") == pytest.approx(0.05)


def test_binned_statistics_is_a_frozen_read_only_record():
    stats = binned_statistics([0, 1, 1], [[0.8, 0.2], [0.3, 0.7], [0.4, 0.6]], n_bins=4)
    assert isinstance(stats, BinnedStatistics)
    assert stats.edges.shape == (5,) and stats.n_samples == 3 and stats.n_bins == 4
    with pytest.raises(ValueError):
        stats.counts[0] = 5
    np.testing.assert_allclose(stats.gaps, stats.accuracy - stats.mean_confidence)


def test_argmax_ties_go_to_the_lowest_column():
    assert accuracy([0, 1], [[0.5, 0.5], [0.5, 0.5]]) == 0.5
    assert accuracy([0, 1], [0.5, 0.5]) == 0.5  # 1-D: p = 0.5 predicts the negative class


def test_debiased_by_hand():
    # Two uniform bins of 4 samples: (0, 0.5]: conf 0.25 acc 0.5; (0.5, 1]: conf 0.75 acc 0.75
    positive = np.array([0.25] * 4 + [0.75] * 4)
    labels = np.array([1, 1, 0, 0, 1, 1, 1, 0])
    squared = 0.5 * (0.25**2 - 0.25 / 3) + 0.5 * (0.0 - 0.1875 / 3)
    expected = np.sqrt(max(squared, 0.0))
    ours = debiased_calibration_error(
        labels, positive, n_bins=2, strategy="uniform", mode="positive"
    )
    assert ours == pytest.approx(expected, abs=1e-15)
    # A well-calibrated bin: the variance correction exceeds the gap, clipped to 0.
    assert debiased_calibration_error([1, 0, 1, 0], [0.5] * 4, n_bins=1, mode="positive") == 0.0


def test_smooth_reliability_curve_shape_and_density():
    rng = np.random.default_rng(0)
    positive = rng.uniform(size=3000)
    labels = (rng.uniform(size=3000) < positive).astype(int)
    curve = smooth_reliability_curve(labels, positive, mode="positive", n_points=101)
    grid, acc, density, bandwidth = curve
    assert grid.shape == acc.shape == density.shape == (101,)
    assert (
        bandwidth
        == smooth_calibration_error(labels, positive, mode="positive", return_bandwidth=True)[1]
    )
    assert np.trapezoid(density, grid) == pytest.approx(1.0, abs=0.02)


def test_softmax_is_stable_and_keeps_float32():
    logits = np.array([[1000.0, 1000.0, -1000.0], [0.0, 0.0, -np.inf]], dtype=np.float32)
    probs = softmax(logits)
    assert probs.dtype == np.float32
    np.testing.assert_allclose(probs, [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    np.testing.assert_allclose(softmax(np.array([1.0, 2.0, 3.0])).sum(), 1.0)
    np.testing.assert_allclose(softmax(np.zeros((2, 3)), axis=0), np.full((2, 3), 0.5))


@pytest.mark.parametrize("bad", [[[np.nan, 0.0]], [[np.inf, 0.0]], [[-np.inf, -np.inf]], []])
def test_softmax_rejects_bad_logits(bad):
    with pytest.raises(ValueError):
        softmax(np.array(bad))


# ---------------------------------------------------------------------------- bad input

PROBABILITY_METRICS = [
    expected_calibration_error,
    maximum_calibration_error,
    classwise_calibration_error,
    debiased_calibration_error,
    smooth_calibration_error,
    negative_log_likelihood,
    brier_score,
    accuracy,
    binned_statistics,
    smooth_reliability_curve,
]
GOOD = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3]])
LOGITS = np.array([[2.0, -1.0, 0.5], [0.1, 3.0, -2.0], [1.0, 1.0, 1.0]])
BAD_INPUTS = {
    "nan": ([0, 1, 2], np.where(np.eye(3, dtype=bool), np.nan, GOOD), "NaN"),
    "inf": ([0, 1, 2], np.where(np.eye(3, dtype=bool), np.inf, GOOD), "infinite"),
    "above one": ([0, 1, 2], GOOD * 1.5, "outside|sum to 1"),
    "logits": ([0, 1, 2], LOGITS, "softmax"),
    "rows": ([0, 1, 2], GOOD * 0.9, "sum to 1"),
    "label outside": ([0, 1, 3], GOOD, "not among"),
    "strings": (["a", "b", "c"], GOOD, "labels="),
    "length": ([0, 1], GOOD, "lengths"),
    "empty": ([], np.zeros((0, 3)), "empty"),
    "shape": ([0, 1, 2], GOOD[:, :, None], "1-D or 2-D"),
}


@pytest.mark.parametrize("metric", PROBABILITY_METRICS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_every_metric_rejects_bad_input(metric, case):
    y_true, y_prob, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=message):
        metric(y_true, y_prob)


@pytest.mark.parametrize(
    "metric",
    [
        expected_calibration_error,
        maximum_calibration_error,
        classwise_calibration_error,
        debiased_calibration_error,
        binned_statistics,
    ],
    ids=lambda f: f.__name__,
)
@pytest.mark.parametrize("n_bins", [0, -3, 2.5, "15", True])
def test_bad_n_bins_raise(metric, n_bins):
    with pytest.raises(ValueError, match="n_bins"):
        metric([0, 1, 2], GOOD, n_bins=n_bins)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: expected_calibration_error([0], [[0.5, 0.5]], strategy="equal"), "strategy"),
        (lambda: expected_calibration_error([0], [[0.5, 0.5]], norm="l3"), "norm"),
        (lambda: expected_calibration_error([0], [[0.5, 0.5]], mode="marginal"), "mode"),
        (lambda: expected_calibration_error([0, 1, 2], GOOD, mode="positive"), "binary"),
        (lambda: smooth_calibration_error([0, 1, 2], GOOD, bandwidth=0.0), "bandwidth"),
        (lambda: smooth_calibration_error([0, 1, 2], GOOD, mode="classwise"), "mode"),
        (lambda: smooth_reliability_curve([0, 1, 2], GOOD, n_points=1), "n_points"),
        (lambda: binned_statistics([0, 1, 2], GOOD, mode="classwise"), "mode"),
        (lambda: classwise_calibration_error([0, 1, 2], GOOD, norm="l0"), "norm"),
    ],
)
def test_bad_options_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_one_nan_row_is_an_error_not_a_silent_softmax():
    probs = GOOD.copy()
    probs[1] = np.nan
    with pytest.raises(ValueError, match="row 1"):
        expected_calibration_error([0, 1, 2], probs)
