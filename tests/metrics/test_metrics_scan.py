"""The fused pass over the matrix: its value checks, arg-max, bins and packed masks.

Oracles: :func:`reliacal._validation.check_probabilities` for the errors,
``numpy.argmax`` for the top label, the exact bin definition
(:func:`uniform_bin_index`) for the bins, and the plain per-entry binning of the
whole matrix for the classwise sums.
"""

import numpy as np
import pytest

from reliacal import metrics
from reliacal._validation import check_probabilities, check_probability_inputs
from reliacal.metrics import CalibrationState, _predictions, calibration_report, softmax
from reliacal.metrics._binning import uniform_sums, uniform_sums_of_sorted
from reliacal.metrics._edges import uniform_bin_index
from reliacal.metrics._predictions import (
    _top_of_block,
    bins_of,
    row_maxima,
    scan_matrix,
)
from reliacal.metrics._sorted import sort_scores


def _matrix(n_samples=6000, n_classes=50, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    probs = softmax(rng.normal(scale=3, size=(n_samples, n_classes))).astype(dtype)
    return rng.integers(0, n_classes, n_samples), probs


def _spoiled(kind, dtype):
    labels, probs = _matrix(dtype=dtype)
    row = 5000  # a late row block
    if kind == "nan":
        probs[row, 3] = np.nan
    elif kind == "inf":
        probs[row, 3] = np.inf
    elif kind == "negative":
        probs[row, :2] = [-0.25, probs[row, 1] + probs[row, 0] + 0.25]
    elif kind == "above one":
        # The row sums to 1 within the tolerance, yet one value exceeds 1.
        probs[row] = 0
        probs[row, 7] = 1 + 5e-5
    elif kind == "row sum":
        probs[row] *= 1.01
    elif kind == "row sum, one last row":
        probs[-1] *= 1.01
    return labels, probs


KINDS = ["nan", "inf", "negative", "above one", "row sum", "row sum, one last row"]


def _message(call):
    with pytest.raises(ValueError) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_checks_in_the_pass_raise_what_the_upfront_check_raises(kind, dtype):
    labels, probs = _spoiled(kind, dtype)
    expected = _message(lambda: check_probabilities(labels, probs))
    calls = {
        "classwise": lambda: metrics.classwise_calibration_error(labels, probs),
        "state": lambda: CalibrationState().update(labels, probs),
        # The top-label metrics whose scan runs the checks (checked_scores).
        "ece": lambda: metrics.expected_calibration_error(labels, probs),
        "adaptive ece": lambda: metrics.expected_calibration_error(
            labels, probs, strategy="quantile"
        ),
        "debiased": lambda: metrics.debiased_calibration_error(labels, probs),
        "binned statistics": lambda: metrics.binned_statistics(labels, probs),
        "smooth": lambda: metrics.smooth_calibration_error(labels, probs),
        "ks": lambda: metrics.ks_calibration_error(labels, probs),
        "sweep": lambda: metrics.monotonic_sweep_calibration_error(labels, probs),
    }
    for name, call in calls.items():
        assert _message(call) == expected, name
    report = _message(lambda: calibration_report(labels, {"m": probs}))
    assert report == f"model 'm': {expected}"


def test_a_bad_value_is_reported_before_a_bad_label():
    labels, probs = _spoiled("nan", np.float32)
    labels = labels.copy()
    labels[0] = 10_000  # not a column
    expected = _message(lambda: check_probabilities(labels, probs))
    assert "NaN" in expected
    assert _message(lambda: metrics.classwise_calibration_error(labels, probs)) == expected
    assert _message(lambda: metrics.expected_calibration_error(labels, probs)) == expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sums_at_the_tolerance_are_decided_as_the_upfront_check_decides(dtype):
    labels, probs = _matrix(dtype=dtype)
    tolerance = 1e-3 if dtype == np.float32 else 1e-4
    for factor in (1 + 0.999 * tolerance, 1 + 1.001 * tolerance, 1 - 1.001 * tolerance):
        scaled = probs.copy()
        scaled[4000] = (scaled[4000].astype(np.float64) * factor).astype(dtype)
        try:
            check_probabilities(labels, scaled)
        except ValueError as error:
            with pytest.raises(ValueError, match="rows of y_prob must sum to 1"):
                metrics.classwise_calibration_error(labels, scaled)
            assert _message(lambda s=scaled: CalibrationState().update(labels, s)) == str(error)
            with pytest.raises(ValueError, match="rows of y_prob must sum to 1"):
                metrics.binned_statistics(labels, scaled)
        else:
            metrics.classwise_calibration_error(labels, scaled)
            metrics.binned_statistics(labels, scaled)


# 63: each row's key holds its row, read after a running maximum; 40: too few bits for
# the row, a maximum per row (reduceat).
@pytest.mark.parametrize("key_bits", [63, 40])
def test_the_top_label_from_the_entries_above_the_first_edge_is_numpys_argmax(
    key_bits, monkeypatch
):
    monkeypatch.setattr(_predictions, "_KEY_BITS", key_bits)
    labels, probs = _matrix(n_samples=5000, n_classes=64, seed=1)
    probs[:300] = 1 / 64  # no entry above 1 / 15: the row's own arg-max
    probs[300:600, 10] = probs[300:600, 20] = 0.4  # ties: the first column
    probs[300:600] /= probs[300:600].sum(axis=1, keepdims=True)
    probs[600:700] = 0.0  # fourteen equal entries above 1 / 15: long rows, all tied
    probs[600:700, 3:59:4] = 1 / 14
    scan = scan_matrix(probs, labels, classwise_bins=15)
    np.testing.assert_array_equal(scan.confidence, probs.max(axis=1).astype(np.float64))
    np.testing.assert_array_equal(scan.correct, probs.argmax(axis=1) == labels)


@pytest.mark.parametrize("n_classes", [2, 3, 4])
def test_the_column_by_column_arg_max_is_numpys(n_classes):
    rng = np.random.default_rng(n_classes)
    block = rng.integers(0, 3, size=(500, n_classes)).astype(np.float64)  # many ties
    arg_max, best = _top_of_block(block)
    np.testing.assert_array_equal(arg_max, block.argmax(axis=1))
    np.testing.assert_array_equal(best, block.max(axis=1))


@pytest.mark.parametrize("n_classes", [2, 10, 40])
def test_row_maxima_are_numpys(n_classes):
    _, probs = _matrix(n_samples=3000, n_classes=n_classes, seed=n_classes)
    np.testing.assert_array_equal(row_maxima(probs), probs.max(axis=1).astype(np.float64))


@pytest.mark.parametrize("n_bins", [2, 3, 7, 10, 15, 100, 999])
def test_float32_bins_equal_the_exact_definition_at_every_edge(n_bins):
    edges = np.arange(1, n_bins) / n_bins
    near = [edges.astype(np.float32)]
    for _ in range(4):
        near.append(np.nextafter(near[-1], np.float32(1)))
    below = [edges.astype(np.float32)]
    for _ in range(4):
        below.append(np.nextafter(below[-1], np.float32(0)))
    values = np.concatenate([*near, *below, np.array([0, 1], np.float32)]).astype(np.float64)
    np.testing.assert_array_equal(
        bins_of(values, n_bins, float32_values=True), uniform_bin_index(values, n_bins)
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_negative_zeros_are_zeros_to_the_pass(dtype):
    # -0.0 passes the value checks; its bits lie above those of 1, as a negative
    # value's do, so the pass meets it among its suspects and must drop it.
    labels, probs = _matrix(n_samples=3000, n_classes=40, dtype=dtype, seed=5)
    probs[probs < 1e-3] = 0.0
    probs /= probs.sum(axis=1, keepdims=True)
    signed = probs.copy()
    signed[signed == 0] = -0.0
    assert np.signbit(signed).any()
    for n_bins in (15, 10):
        expected = scan_matrix(probs, labels, classwise_bins=n_bins, true_class=True)
        values = check_probability_inputs(labels, signed)[3]
        got = scan_matrix(signed, labels, classwise_bins=n_bins, true_class=True, values=values)
        np.testing.assert_array_equal(got.classwise.counts, expected.classwise.counts)
        np.testing.assert_array_equal(got.classwise.sum_outcome, expected.classwise.sum_outcome)
        # float64 sums round by the order of the entries' groups, which the suspects move.
        np.testing.assert_allclose(
            got.classwise.sum_probability,
            expected.classwise.sum_probability,
            rtol=0 if dtype == np.float32 else 1e-13,
        )
        np.testing.assert_array_equal(got.confidence, expected.confidence)
        np.testing.assert_array_equal(got.correct, expected.correct)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("n_samples", [4999, 5000])  # the last block: whole bytes or not
def test_packed_masks_give_the_per_entry_classwise_sums(order, n_samples):
    labels, probs = _matrix(n_samples=n_samples, n_classes=40, seed=3)
    probs = np.asarray(probs, order=order)
    scan = scan_matrix(probs, labels, top_label=False, classwise_bins=15)
    cells = np.arange(40) * 15 + uniform_bin_index(probs.astype(np.float64), 15)
    counts = np.bincount(cells.ravel(), minlength=600).reshape(40, 15)
    sums = np.bincount(cells.ravel(), weights=probs.ravel(order="C"), minlength=600)
    np.testing.assert_array_equal(scan.classwise.counts, counts)
    np.testing.assert_allclose(scan.classwise.sum_probability, sums.reshape(40, 15), rtol=1e-9)


def test_uniform_bins_of_sorted_scores_equal_the_binned_ones():
    rng = np.random.default_rng(4)
    confidence = np.concatenate([rng.random(3000), np.arange(16) / 15, [0.0, 1.0]])
    outcome = rng.random(confidence.shape[0]) < confidence
    sorted_confidence, sorted_outcome = sort_scores(confidence, outcome)
    for expected, got in zip(
        uniform_sums(confidence, outcome, 15),
        uniform_sums_of_sorted(sorted_confidence, sorted_outcome, 15),
        strict=True,
    ):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_float32_sort_keys_order_as_numpys_lexsort():
    # The oracle: numpy.lexsort by confidence, then outcome, of float32 numbers with
    # ties (0, 1, repeats and neighbours one unit apart).
    rng = np.random.default_rng(5)
    values = rng.random(4000, dtype=np.float32)
    values[:300] = 0
    values[300:600] = 1
    values[600:1200] = values[1200:1800]
    values[1800:1900] = np.nextafter(values[1900:2000], np.float32(1))
    confidence = values.astype(np.float64)
    outcome = rng.random(confidence.shape[0]) < 0.5
    order = np.lexsort((outcome, confidence))
    sorted_confidence, sorted_outcome = sort_scores(confidence, outcome, float32_values=True)
    assert sorted_confidence.dtype == np.float64
    np.testing.assert_array_equal(sorted_confidence, confidence[order])
    np.testing.assert_array_equal(sorted_outcome, outcome[order])


@pytest.mark.parametrize("has_vecdot", [True, False])
def test_brier_score_needs_no_numpy_2_api(has_vecdot, monkeypatch):
    # pyproject.toml allows numpy 1.24, which has no numpy.vecdot: the row squares fall back
    # to einsum there. The oracle is the Brier score written out in float64.
    y, probs = _matrix()
    if not has_vecdot:
        monkeypatch.delattr(np, "vecdot", raising=False)
    expected = np.mean(np.sum((probs.astype(np.float64) - np.eye(50)[y]) ** 2, axis=1))
    np.testing.assert_allclose(metrics.brier_score(y, probs), expected, rtol=1e-6)
