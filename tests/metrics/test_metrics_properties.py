"""Properties that must hold for any input (hypothesis)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliacal.metrics import (
    brier_score,
    classwise_calibration_error,
    debiased_calibration_error,
    expected_calibration_error,
    negative_log_likelihood,
    smooth_calibration_error,
    softmax,
)

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def predictions(draw, max_samples=50, max_classes=5):
    n_samples = draw(st.integers(1, max_samples))
    n_classes = draw(st.integers(2, max_classes))
    size = n_samples * n_classes
    # Integer logits: many ties between confidences, and exact 1/2, 1/3, ... values.
    logits = draw(st.lists(st.integers(-6, 6), min_size=size, max_size=size))
    logits = np.array(logits, dtype=np.float64).reshape(n_samples, n_classes)
    scale = draw(st.sampled_from([0.0, 0.5, 1.0, 3.0, 40.0]))  # 40: confidences of 1.0
    labels = draw(st.lists(st.integers(0, n_classes - 1), min_size=n_samples, max_size=n_samples))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return softmax(scale * logits).astype(dtype), np.array(labels)


def all_errors(labels, probs, n_bins):
    values = {}
    for strategy in ("uniform", "quantile"):
        for norm in ("l1", "l2", "max"):
            values[f"ece-{strategy}-{norm}"] = expected_calibration_error(
                labels, probs, n_bins=n_bins, strategy=strategy, norm=norm
            )
            values[f"classwise-{strategy}-{norm}"] = classwise_calibration_error(
                labels, probs, n_bins=n_bins, strategy=strategy, norm=norm
            )
        for mode in ("top-label", "classwise"):
            values[f"debiased-{strategy}-{mode}"] = debiased_calibration_error(
                labels, probs, n_bins=n_bins, strategy=strategy, mode=mode
            )
    values["smooth"] = smooth_calibration_error(labels, probs)
    return values


@SETTINGS
@given(predictions(), st.integers(1, 20))
def test_calibration_errors_lie_in_unit_interval(data, n_bins):
    probs, labels = data
    for name, value in all_errors(labels, probs, n_bins).items():
        assert 0.0 <= value <= 1.0 + 1e-12, name


@SETTINGS
@given(predictions(), st.integers(1, 20), st.randoms(use_true_random=False))
def test_invariant_to_sample_order(data, n_bins, random):
    probs, labels = data
    order = np.array(random.sample(range(len(labels)), len(labels)))
    before = all_errors(labels, probs, n_bins)
    after = all_errors(labels[order], probs[order], n_bins)
    for name, value in before.items():
        assert after[name] == pytest.approx(value, abs=1e-12), name
    for score in (negative_log_likelihood, brier_score):
        assert score(labels[order], probs[order]) == pytest.approx(score(labels, probs), rel=1e-12)


@SETTINGS
@given(predictions(), st.integers(1, 20), st.randoms(use_true_random=False))
def test_classwise_invariant_to_class_order(data, n_bins, random):
    probs, labels = data
    n_classes = probs.shape[1]
    permutation = np.array(random.sample(range(n_classes), n_classes))
    # column j of the new matrix is old class permutation[j]; relabel accordingly
    new_labels = np.argsort(permutation)[labels]
    for strategy in ("uniform", "quantile"):
        for norm in ("l1", "l2", "max"):
            before = classwise_calibration_error(
                labels, probs, n_bins=n_bins, strategy=strategy, norm=norm
            )
            after = classwise_calibration_error(
                new_labels, probs[:, permutation], n_bins=n_bins, strategy=strategy, norm=norm
            )
            assert after == pytest.approx(before, abs=1e-12)


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_perfect_calibration_ece_shrinks_with_n(seed):
    rng = np.random.default_rng(seed)

    def calibrated_ece(n_samples, **kwargs):
        positive = rng.uniform(size=n_samples)
        labels = (rng.uniform(size=n_samples) < positive).astype(int)
        return expected_calibration_error(labels, positive, mode="positive", **kwargs)

    for kwargs in ({}, {"strategy": "quantile"}):
        small, large = calibrated_ece(300, **kwargs), calibrated_ece(300_000, **kwargs)
        # The sampling error of 15 bins is ~ sqrt(15 / n): ~0.09 and ~0.003.
        assert large < 0.01
        assert large < small
