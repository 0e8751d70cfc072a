"""CalibrationState: batches and merged states give the one-shot numbers."""

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliacal.metrics import (
    CalibrationState,
    binned_statistics,
    softmax,
)


def assert_matches(values, expected):
    for name, value in values.items():
        # nan_ok: Spiegelhalter's test is NaN in both where it is undefined.
        assert value == pytest.approx(expected[name], rel=1e-12, abs=1e-14, nan_ok=True), name


def test_batches_equal_one_shot_on_a_record(cifar_record, one_shot_metrics):
    _, probs, labels = cifar_record
    state = CalibrationState(keep_confidences=True)
    for start in range(0, len(labels), 3000):
        state.update(labels[start : start + 3000], probs[start : start + 3000])
    assert state.n_samples == len(labels) and state.n_classes == probs.shape[1]
    assert_matches(state.compute(), one_shot_metrics(labels, probs))


def test_merged_workers_equal_one_shot(one_shot_metrics):
    rng = np.random.default_rng(0)
    probs = softmax(rng.normal(scale=2, size=(900, 6)))
    labels = rng.integers(0, 6, size=900)
    workers = [CalibrationState(n_bins=10) for _ in range(3)]
    for index, worker in enumerate(workers):
        worker.update(labels[index::3], probs[index::3])
    # States travel between processes as pickles.
    merged = pickle.loads(pickle.dumps(workers[0]))
    merged.merge(workers[1]).merge(pickle.loads(pickle.dumps(workers[2])))
    expected = one_shot_metrics(labels, probs, n_bins=10)
    values = merged.compute()
    assert set(values) == {
        "accuracy",
        "ece",
        "classwise_ece",
        "mce",
        "nll",
        "brier",
        "signed_ece",
        "overconfidence_error",
        "underconfidence_error",
        "spiegelhalter_z",
        "spiegelhalter_p",
    }
    assert_matches(values, expected)
    stats = merged.binned_statistics()
    reference = binned_statistics(labels, probs, n_bins=10)
    np.testing.assert_array_equal(stats.counts, reference.counts)
    np.testing.assert_allclose(stats.accuracy, reference.accuracy, rtol=1e-12)


def test_merging_an_empty_state_changes_nothing():
    rng = np.random.default_rng(1)
    probs = softmax(rng.normal(size=(50, 3)))
    labels = rng.integers(0, 3, size=50)
    state = CalibrationState().update(labels, probs)
    before = state.compute()
    assert state.merge(CalibrationState()).compute() == before
    empty = CalibrationState().merge(state)
    assert empty.compute() == before


def test_binary_1d_and_string_labels(one_shot_metrics):
    rng = np.random.default_rng(2)
    positive = rng.uniform(size=200)
    labels = np.where(rng.uniform(size=200) < positive, "pos", "neg")
    state = CalibrationState(labels=["neg", "pos"], keep_confidences=True)
    state.update(labels[:120], positive[:120]).update(labels[120:], positive[120:])
    assert_matches(state.compute(), one_shot_metrics((labels == "pos").astype(int), positive))


def test_compute_a_subset():
    state = CalibrationState().update([0, 1], [[0.8, 0.2], [0.4, 0.6]])
    assert list(state.compute(["nll", "ece"])) == ["nll", "ece"]
    assert list(state.compute("brier")) == ["brier"]


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda s: s.compute(), "empty"),
        (lambda s: s.update([0, 1], [[0.5, 0.5], [0.2, 0.8]]).compute(["smooth_ece"]), "keep_"),
        (lambda s: s.update([0, 1], [[0.5, 0.5], [0.2, 0.8]]).compute(["ece2"]), "unknown"),
        (
            lambda s: s.update([0], [[0.5, 0.5]]).update([0], [[0.2, 0.3, 0.5]]),
            "classes",
        ),
        (lambda s: s.merge(CalibrationState(n_bins=10)), "n_bins"),
        (lambda s: s.merge(CalibrationState(keep_confidences=True)), "keep_confidences"),
        (lambda s: s.merge(CalibrationState(labels=[0, 1])), "labels"),
        (lambda s: s.merge(object()), "CalibrationState"),
        (lambda s: s.update([0, 1], [[0.5, 0.6], [0.2, 0.8]]), "sum to 1"),
    ],
)
def test_misuse_raises(action, message):
    with pytest.raises(ValueError, match=message):
        action(CalibrationState())


def test_bad_n_bins_raises():
    with pytest.raises(ValueError, match="n_bins"):
        CalibrationState(n_bins=0)


@st.composite
def split_predictions(draw):
    n_samples = draw(st.integers(1, 60))
    n_classes = draw(st.integers(2, 5))
    # Logits on a coarse grid produce tied confidences and values on bin edges.
    logits = np.array(
        draw(
            st.lists(
                st.integers(-8, 8), min_size=n_samples * n_classes, max_size=n_samples * n_classes
            )
        ),
        dtype=np.float64,
    ).reshape(n_samples, n_classes)
    labels = np.array(
        draw(st.lists(st.integers(0, n_classes - 1), min_size=n_samples, max_size=n_samples))
    )
    cuts = sorted(draw(st.lists(st.integers(0, n_samples), max_size=4)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return softmax(0.5 * logits).astype(dtype), labels, cuts


@settings(max_examples=60, deadline=None)
@given(split_predictions(), st.integers(1, 20))
def test_streaming_equals_one_shot_for_any_split(one_shot_metrics, data, n_bins):
    probs, labels, cuts = data
    state = CalibrationState(n_bins=n_bins, keep_confidences=True)
    bounds = [0, *cuts, len(labels)]
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        if stop > start:
            state.update(labels[start:stop], probs[start:stop])
    assert_matches(state.compute(), one_shot_metrics(labels, probs, n_bins))


# Issue 19: top-label confidences 0.8 (right), 0.7 (wrong), 0.6 (right).
HAND_PROBS = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
HAND_LABELS = np.array([0, 0, 0])


def test_spiegelhalter_and_signed_parts_stream_to_hand_computed_values():
    first = CalibrationState(n_bins=5).update(HAND_LABELS[:1], HAND_PROBS[:1])
    second = CalibrationState(n_bins=5).update(HAND_LABELS[1:], HAND_PROBS[1:])
    values = first.merge(second).compute()
    # Sum of (o - x)(1 - 2x): 0.2 * -0.6 + -0.7 * -0.4 + 0.4 * -0.2 = 0.08; the variance
    # sum of (1 - 2x)^2 x (1 - x): 0.0576 + 0.0336 + 0.0096 = 0.1008.
    z = 0.08 / math.sqrt(0.1008)
    assert values["spiegelhalter_z"] == pytest.approx(z, rel=1e-12)
    assert values["spiegelhalter_p"] == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)
    # Bins of width 0.2: (0.6, 0.8] holds 0.8 and 0.7 (accuracy 0.5, over-confident by
    # 0.25, mass 2/3); (0.4, 0.6] holds 0.6 (accuracy 1, under-confident by 0.4, mass 1/3).
    assert values["overconfidence_error"] == pytest.approx(0.25 * 2 / 3, rel=1e-12)
    assert values["underconfidence_error"] == pytest.approx(0.4 / 3, rel=1e-12)


def test_undefined_spiegelhalter_is_nan_in_the_state():
    # Every forecast is 1 or 0.5: the variance under calibration is 0.
    values = CalibrationState().update([0, 1], [[1.0, 0.0], [0.5, 0.5]]).compute()
    assert math.isnan(values["spiegelhalter_z"]) and math.isnan(values["spiegelhalter_p"])
    assert values["ece"] == pytest.approx(0.25)


@pytest.mark.parametrize("name", ["ks_error", "sweep_ece", "corp_miscalibration"])
def test_sorted_metrics_do_not_stream(name):
    state = CalibrationState().update(HAND_LABELS, HAND_PROBS)
    with pytest.raises(ValueError, match=rf"\['{name}'\] need every confidence .* sorted"):
        state.compute([name])
    kept = CalibrationState(keep_confidences=True)
    kept.update(HAND_LABELS[:2], HAND_PROBS[:2]).update(HAND_LABELS[2:], HAND_PROBS[2:])
    assert name in kept.compute()


def test_one_state_takes_one_form_of_binary_batches():
    # The same predictions as 1-D and as two columns: their Brier scores differ by a factor
    # of 2, so a state holding both would report neither value.
    y = np.array([0, 1, 1, 0])
    positive = np.array([0.2, 0.7, 0.6, 0.4])
    columns = np.column_stack([1 - positive, positive])
    # By hand: (0.04 + 0.09 + 0.16 + 0.16) / 4 = 0.1125 in 1-D, twice that in two columns.
    assert CalibrationState().update(y, positive).compute(["brier"])["brier"] == pytest.approx(
        0.1125, rel=1e-14
    )
    assert CalibrationState().update(y, columns).compute(["brier"])["brier"] == pytest.approx(
        0.225, rel=1e-14
    )
    with pytest.raises(ValueError, match="1-D positive-class probabilities but the state"):
        CalibrationState().update(y, columns).update(y, positive)
    with pytest.raises(ValueError, match="two columns but the state holds 1-D"):
        CalibrationState().update(y, positive).update(y, columns)
    one_dimensional = CalibrationState().update(y, positive)
    with pytest.raises(ValueError, match="same form"):
        CalibrationState().update(y, columns).merge(one_dimensional)
    # One form throughout is fine, and an empty state merges into either.
    merged = CalibrationState().merge(one_dimensional).update(y, positive)
    assert merged.compute(["brier"])["brier"] == pytest.approx(0.1125, rel=1e-14)
