"""Every metric against an independent reference implementation.

Oracles: torchmetrics (ECE l1/l2/max), scikit-learn (calibration_curve, log_loss,
brier_score_loss), relplot (smECE) and Kumar et al.'s ``calibration`` package
(get_ece, get_ece_em, the debiased estimator), on continuous random probabilities
(no ties at bin edges) and on the bundled CIFAR records.
"""

import calibration as kumar
import numpy as np
import pytest
import relplot
import torch
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, log_loss
from torchmetrics.functional.classification import (
    binary_calibration_error,
    multiclass_calibration_error,
)

from reliacal import metrics

SEEDS = (0, 1, 2)
CLASS_COUNTS = (2, 10, 100)
DTYPES = (np.float32, np.float64)


def random_predictions(seed: int, n_classes: int, dtype, n_samples: int = 3000):
    """Continuous, miscalibrated probabilities: labels come from a flatter softmax."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.5, size=(n_samples, n_classes))
    truth = metrics.softmax(0.6 * logits)
    labels = (truth.cumsum(axis=1) > rng.uniform(size=(n_samples, 1))).argmax(axis=1)
    return metrics.softmax(logits).astype(dtype), labels


def tolerance(dtype) -> float:
    # Oracles given float32 input compute in float32.
    return 1e-5 if dtype == np.float32 else 1e-6


def top_label(probs, labels):
    confidence = probs.max(axis=1).astype(np.float64)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    return confidence, correct


def no_ties_at_quantile_boundaries(values, n_bins) -> bool:
    ordered = np.sort(values)
    cuts = np.cumsum([len(part) for part in np.array_split(ordered, n_bins)])[:-1]
    cuts = cuts[(cuts > 0) & (cuts < len(ordered))]
    return bool(np.all(ordered[cuts - 1] < ordered[cuts]))


# ----------------------------------------------------------------------------- torchmetrics


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_classes", CLASS_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_top_label_ece_matches_torchmetrics(seed, n_classes, dtype, norm):
    probs, labels = random_predictions(seed, n_classes, dtype)
    expected = multiclass_calibration_error(
        torch.from_numpy(probs), torch.from_numpy(labels), n_classes, n_bins=15, norm=norm
    ).item()
    ours = metrics.expected_calibration_error(labels, probs, norm=norm)
    assert ours == pytest.approx(expected, abs=tolerance(dtype))
    assert expected > 0.01  # the data is miscalibrated, so the comparison means something


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_records_match_torchmetrics(cifar_record, norm):
    name, probs, labels = cifar_record
    confidence, correct = top_label(probs, labels)
    if np.isin(confidence, np.arange(16) / 15).any():
        # torchmetrics bins are [lo, hi) plus a bin of their own for 1.0;
        # test_records_right_closed_bins_match_torchmetrics covers these records.
        pytest.skip(f"{name}: confidences lie exactly on bin edges")
    expected = multiclass_calibration_error(
        torch.from_numpy(probs),
        torch.from_numpy(labels),
        probs.shape[1],
        n_bins=15,
        norm=norm,
    ).item()
    assert metrics.expected_calibration_error(labels, probs, norm=norm) == pytest.approx(
        expected, abs=1e-5
    )


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_records_right_closed_bins_match_torchmetrics(cifar_record, norm):
    """Reflecting c -> 1 - c turns torchmetrics' [lo, hi) bins into our (lo, hi]."""
    _, probs, labels = cifar_record
    confidence, correct = top_label(probs, labels)
    expected = binary_calibration_error(
        torch.from_numpy(1.0 - confidence),
        torch.from_numpy(1.0 - correct).long(),
        n_bins=15,
        norm=norm,
    ).item()
    assert metrics.expected_calibration_error(labels, probs, norm=norm) == pytest.approx(
        expected, abs=1e-6
    )


def test_maximum_calibration_error_is_the_max_norm(cifar_record):
    _, probs, labels = cifar_record
    assert metrics.maximum_calibration_error(labels, probs) == metrics.expected_calibration_error(
        labels, probs, norm="max"
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_positive_mode_matches_torchmetrics_binary(seed, norm):
    rng = np.random.default_rng(seed)
    positive = rng.uniform(size=2000)
    labels = (rng.uniform(size=2000) < positive**1.5).astype(np.int64)
    expected = binary_calibration_error(
        torch.from_numpy(positive), torch.from_numpy(labels), n_bins=15, norm=norm
    ).item()
    ours = metrics.expected_calibration_error(labels, positive, norm=norm, mode="positive")
    assert ours == pytest.approx(expected, abs=1e-6)


# ------------------------------------------------------------------- Kumar et al. (calibration)


def kumar_plugin_l2(probs, labels, mode):
    """Kumar et al.'s plug-in (not debiased) l2 calibration error on 15 equal-mass bins."""
    return kumar.lower_bound_scaling_ce(
        probs,
        labels,
        p=2,
        debias=False,
        num_bins=15,
        binning_scheme=kumar.get_equal_prob_bins,
        mode=mode,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_classes", CLASS_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_top_label_matches_kumar(seed, n_classes, dtype):
    probs, labels = random_predictions(seed, n_classes, dtype)
    atol = tolerance(dtype)
    assert metrics.expected_calibration_error(labels, probs) == pytest.approx(
        kumar.get_ece(probs, labels, num_bins=15), abs=atol
    )
    assert metrics.expected_calibration_error(labels, probs, strategy="quantile") == pytest.approx(
        kumar.get_ece_em(probs, labels, num_bins=15), abs=atol
    )
    plugin_l2 = kumar_plugin_l2(probs, labels, mode="top-label")
    assert metrics.expected_calibration_error(labels, probs, norm="l2") == pytest.approx(
        plugin_l2, abs=atol
    )
    # get_calibration_error picks the scaling (binned, equal-mass) estimator for
    # continuous outputs; make sure that is the branch being compared.
    assert not kumar.utils.is_discrete(probs.max(axis=1))
    debiased = kumar.get_calibration_error(probs, labels, p=2, debias=True, mode="top-label")
    assert metrics.debiased_calibration_error(labels, probs) == pytest.approx(debiased, abs=atol)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_classes", (2, 10))
def test_classwise_matches_kumar_marginal(seed, n_classes):
    probs, labels = random_predictions(seed, n_classes, np.float64, n_samples=1500)
    assert metrics.classwise_calibration_error(labels, probs) == pytest.approx(
        kumar.get_ece(probs, labels, num_bins=15, mode="marginal"), abs=1e-6
    )
    assert metrics.classwise_calibration_error(labels, probs, strategy="quantile") == pytest.approx(
        kumar.get_ece_em(probs, labels, num_bins=15, mode="marginal"), abs=1e-6
    )
    plugin_l2 = kumar_plugin_l2(probs, labels, mode="marginal")
    assert metrics.classwise_calibration_error(labels, probs, norm="l2") == pytest.approx(
        plugin_l2, abs=1e-6
    )
    debiased = kumar.get_calibration_error(probs, labels, p=2, debias=True, mode="marginal")
    assert metrics.debiased_calibration_error(labels, probs, mode="classwise") == pytest.approx(
        debiased, abs=1e-6
    )


def test_classwise_matches_kumar_with_100_classes():
    probs, labels = random_predictions(3, 100, np.float64, n_samples=600)
    assert metrics.classwise_calibration_error(labels, probs) == pytest.approx(
        kumar.get_ece(probs, labels, num_bins=15, mode="marginal"), abs=1e-6
    )


def test_classwise_float32_matches_kumar():
    probs, labels = random_predictions(4, 10, np.float32, n_samples=1500)
    assert metrics.classwise_calibration_error(labels, probs) == pytest.approx(
        kumar.get_ece(probs, labels, num_bins=15, mode="marginal"), abs=1e-5
    )


def test_records_match_kumar(cifar_record):
    name, probs, labels = cifar_record
    assert metrics.expected_calibration_error(labels, probs) == pytest.approx(
        kumar.get_ece(probs, labels, num_bins=15), abs=1e-5
    )
    if probs.shape[1] == 10:  # marginal mode is slow in pure Python for 100 classes
        assert metrics.classwise_calibration_error(labels, probs) == pytest.approx(
            kumar.get_ece(probs, labels, num_bins=15, mode="marginal"), abs=1e-5
        )
    confidence = probs.max(axis=1)
    if not no_ties_at_quantile_boundaries(confidence, 15):
        # Kumar's midpoint edges put all tied values in the lower bin; array_split
        # does not. test_quantile_ties_follow_array_split pins our rule down.
        pytest.skip(f"{name}: tied confidences straddle a quantile boundary")
    probs64 = probs.astype(np.float64)
    assert metrics.expected_calibration_error(labels, probs, strategy="quantile") == pytest.approx(
        kumar.get_ece_em(probs64, labels, num_bins=15), abs=1e-6
    )
    debiased = kumar.lower_bound_scaling_ce(
        probs64, labels, p=2, debias=True, num_bins=15, mode="top-label"
    )
    assert metrics.debiased_calibration_error(labels, probs) == pytest.approx(debiased, abs=1e-6)


def test_quantile_ties_follow_array_split(load_record):
    """Brute force: sort by (confidence, outcome), array_split, average per group."""
    probs, labels = load_record("wideresnet-16-4-cifar-10")
    confidence, correct = top_label(probs, labels)
    assert not no_ties_at_quantile_boundaries(confidence, 15)  # the record has ties
    order = np.lexsort((correct, confidence))
    expected = sum(
        len(group) * abs(correct[group].mean() - confidence[group].mean())
        for group in np.array_split(order, 15)
    ) / len(order)
    ours = metrics.expected_calibration_error(labels, probs, strategy="quantile")
    assert ours == pytest.approx(expected, abs=1e-12)


# ------------------------------------------------------------------------------ scikit-learn


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_binary_bins_match_sklearn_calibration_curve(seed, strategy):
    rng = np.random.default_rng(seed)
    n_samples = 15 * 200  # array_split and sklearn's percentile edges agree for n = 15 m
    positive = rng.beta(0.7, 0.7, size=n_samples)
    labels = (rng.uniform(size=n_samples) < positive**1.3).astype(int)
    prob_true, prob_pred = calibration_curve(labels, positive, n_bins=15, strategy=strategy)
    stats = metrics.binned_statistics(labels, positive, strategy=strategy, mode="positive")
    filled = stats.counts > 0
    np.testing.assert_allclose(stats.accuracy[filled], prob_true, atol=1e-12)
    np.testing.assert_allclose(stats.mean_confidence[filled], prob_pred, atol=1e-12)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_record_binary_bins_match_sklearn(cifar_record, strategy):
    name, probs, labels = cifar_record
    positive = probs[:, 0].astype(np.float64)  # class 0 against the rest
    outcome = (labels == 0).astype(int)
    n_bins = 10  # 10,000 samples: array_split and sklearn's percentile edges agree
    if strategy == "quantile" and not no_ties_at_quantile_boundaries(positive, n_bins):
        pytest.skip(f"{name}: tied probabilities straddle a quantile boundary")
    prob_true, prob_pred = calibration_curve(outcome, positive, n_bins=n_bins, strategy=strategy)
    stats = metrics.binned_statistics(
        outcome, positive, n_bins=n_bins, strategy=strategy, mode="positive"
    )
    filled = stats.counts > 0
    np.testing.assert_allclose(stats.accuracy[filled], prob_true, atol=1e-12)
    np.testing.assert_allclose(stats.mean_confidence[filled], prob_pred, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_classes", CLASS_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_proper_scores_match_sklearn(seed, n_classes, dtype):
    probs, labels = random_predictions(seed, n_classes, dtype)
    classes = np.arange(n_classes)
    rtol = 1e-5 if dtype == np.float32 else 1e-9
    assert metrics.negative_log_likelihood(labels, probs) == pytest.approx(
        log_loss(labels, probs, labels=classes), rel=rtol
    )
    assert metrics.brier_score(labels, probs) == pytest.approx(
        brier_score_loss(labels, probs, labels=classes, scale_by_half=False), rel=rtol
    )


def test_records_proper_scores_match_sklearn(cifar_record):
    _, probs, labels = cifar_record
    classes = np.arange(probs.shape[1])
    # float32 input: both clip at float32's epsilon
    assert metrics.negative_log_likelihood(labels, probs) == pytest.approx(
        log_loss(labels, probs, labels=classes), rel=1e-5
    )
    assert metrics.brier_score(labels, probs) == pytest.approx(
        brier_score_loss(labels, probs, labels=classes), rel=1e-5
    )


def test_binary_1d_proper_scores_match_sklearn():
    rng = np.random.default_rng(5)
    positive = rng.uniform(size=1000)
    labels = (rng.uniform(size=1000) < positive).astype(int)
    assert metrics.negative_log_likelihood(labels, positive) == pytest.approx(
        log_loss(labels, positive), rel=1e-12
    )
    assert metrics.brier_score(labels, positive) == pytest.approx(
        brier_score_loss(labels, positive), rel=1e-12
    )
    # Two columns use the sum over both classes: twice the 1-D value.
    two_columns = np.column_stack([1 - positive, positive])
    assert metrics.brier_score(labels, two_columns) == pytest.approx(
        2 * metrics.brier_score(labels, positive), rel=1e-12
    )


def test_string_labels_match_sklearn():
    probs, labels = random_predictions(0, 3, np.float64, n_samples=300)
    names = np.array(["ant", "bee", "cat"])
    assert metrics.negative_log_likelihood(names[labels], probs, labels=names) == pytest.approx(
        log_loss(names[labels], probs), rel=1e-12
    )


# ---------------------------------------------------------------------------------- relplot


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_classes", CLASS_COUNTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_smooth_ece_matches_relplot(seed, n_classes, dtype):
    probs, labels = random_predictions(seed, n_classes, dtype, n_samples=2000)
    confidence, correct = top_label(probs, labels)
    expected, width = relplot.smECE(confidence, correct, return_width=True)
    value, bandwidth = metrics.smooth_calibration_error(labels, probs, return_bandwidth=True)
    assert value == pytest.approx(expected, abs=1e-6)
    assert bandwidth == width


def test_records_smooth_ece_match_relplot(cifar_record):
    _, probs, labels = cifar_record
    confidence, correct = top_label(probs, labels)
    expected, width = relplot.smECE(confidence, correct, return_width=True)
    value, bandwidth = metrics.smooth_calibration_error(labels, probs, return_bandwidth=True)
    assert value == pytest.approx(expected, abs=1e-6)
    assert bandwidth == width


@pytest.mark.parametrize("power", [1.0, 1.02, 3.0])
def test_smooth_ece_positive_mode_matches_relplot(power):
    # power 1.02 is nearly calibrated: the bandwidth falls below 0.01, where
    # relplot's grids change size with the bandwidth.
    rng = np.random.default_rng(11)
    positive = rng.uniform(size=20000)
    labels = (rng.uniform(size=20000) < positive**power).astype(float)
    expected, width = relplot.smECE(positive, labels, return_width=True)
    value, bandwidth = metrics.smooth_calibration_error(
        labels.astype(int), positive, mode="positive", return_bandwidth=True
    )
    assert value == pytest.approx(expected, abs=1e-6)
    assert bandwidth == width


@pytest.mark.parametrize("bandwidth", [0.003, 0.05, 0.3])
def test_smooth_ece_at_fixed_bandwidth_matches_relplot(bandwidth):
    probs, labels = random_predictions(7, 10, np.float64, n_samples=2000)
    confidence, correct = top_label(probs, labels)
    expected = relplot.smECE_sigma(confidence, correct, bandwidth)
    assert metrics.smooth_calibration_error(labels, probs, bandwidth=bandwidth) == pytest.approx(
        expected, abs=1e-6
    )
