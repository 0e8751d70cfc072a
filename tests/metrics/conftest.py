"""Fixtures of the metric tests: every metric's one-shot value from the public functions."""

from __future__ import annotations

import numpy as np
import pytest

from reliacal import metrics


def _one_shot_metrics(labels, probs, n_bins=15):
    confidence = probs.max(axis=1) if probs.ndim == 2 else np.maximum(probs, 1 - probs)
    accuracy = metrics.accuracy(labels, probs)
    binned = dict(n_bins=n_bins)
    try:
        spiegelhalter = metrics.spiegelhalter_test(labels, probs)
    except ValueError:  # undefined (every confidence 0.5 or 1): the table shows NaN
        spiegelhalter = metrics.SpiegelhalterResult(np.nan, np.nan)
    return {
        "accuracy": accuracy,
        "ece": metrics.expected_calibration_error(labels, probs, **binned),
        "adaptive_ece": metrics.expected_calibration_error(
            labels, probs, **binned, strategy="quantile"
        ),
        "classwise_ece": metrics.classwise_calibration_error(labels, probs, **binned),
        "mce": metrics.maximum_calibration_error(labels, probs, **binned),
        "smooth_ece": metrics.smooth_calibration_error(labels, probs),
        "nll": metrics.negative_log_likelihood(labels, probs),
        "brier": metrics.brier_score(labels, probs),
        "signed_ece": float(np.mean(confidence, dtype=np.float64)) - accuracy,
        "debiased_ece": metrics.debiased_calibration_error(labels, probs, **binned),
        "overconfidence_error": metrics.overconfidence_error(labels, probs, **binned),
        "underconfidence_error": metrics.underconfidence_error(labels, probs, **binned),
        "spiegelhalter_z": spiegelhalter.statistic,
        "spiegelhalter_p": spiegelhalter.pvalue,
        "ks_error": metrics.ks_calibration_error(labels, probs),
        "sweep_ece": metrics.monotonic_sweep_calibration_error(labels, probs),
        "corp_miscalibration": metrics.score_decomposition(labels, probs).miscalibration,
    }


@pytest.fixture(scope="session")
def one_shot_metrics():
    """``one_shot_metrics(labels, probs, n_bins=15)``: a dict of every metric by its name.

    Each value comes straight from its public function: the oracle of the report and of the
    streaming state. Session-scoped, so that Hypothesis tests may take it.
    """
    return _one_shot_metrics
