"""Per-sample summaries of one probability matrix, shared by the report and the stream.

One blocked pass over the ``(n, K)`` matrix yields everything the report's metrics
need; after it, every metric (and every bootstrap replicate) is O(n) work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reliacal.metrics._binning import (
    quantile_sums,
    statistics_from_sums,
    uniform_edges,
    uniform_sums,
)
from reliacal.metrics._calibration_error import (
    classwise_uniform_sums,
    combine_classes,
    error_from_statistics,
    norm_of_gaps,
)
from reliacal.metrics._predictions import (
    ClasswiseEntries,
    binary_columns,
    scan_matrix,
    without_negative_zero,
)
from reliacal.metrics._scores import brier_terms, clipped_log_loss


@dataclass(frozen=True)
class PredictionSummary:
    """O(n) summaries of validated predictions (see :func:`summarize`)."""

    y_index: np.ndarray  # int64 true column
    confidence: np.ndarray  # float64 top-label confidence
    correct: np.ndarray  # bool top-label correctness
    true_probability: np.ndarray  # float64 p_{i, y_i}
    log_loss: np.ndarray  # float64 per-sample clipped -log p_{i, y_i}
    brier: np.ndarray  # float64 per-sample Brier term
    classwise: ClasswiseEntries  # entries above 1 / n_bins and column sums


def summarize(y_index: np.ndarray, y_prob: np.ndarray, n_bins: int) -> PredictionSummary:
    """Summarise validated ``y_prob`` ((n, K), or 1-D binary) in one pass."""
    if y_prob.ndim == 1:
        positive = y_prob.astype(np.float64)
        matrix = binary_columns(y_prob)
        brier = (positive - y_index) ** 2  # the 1-D Brier score's scale
    else:
        matrix = y_prob
        brier = None
    scan = scan_matrix(
        matrix,
        y_index,
        top_label=True,
        true_class=True,
        squares=brier is None,
        classwise_edge=float(uniform_edges(n_bins)[1]),
    )
    if brier is None:
        brier = brier_terms(scan.true_probability, scan.sum_of_squares)
    return PredictionSummary(
        y_index=y_index,
        confidence=without_negative_zero(scan.confidence),
        correct=scan.correct,
        true_probability=scan.true_probability,
        log_loss=clipped_log_loss(scan.true_probability, y_prob.dtype),
        brier=brier,
        classwise=scan.classwise,
    )


def sample_metrics(
    confidence, correct, log_loss, brier, n_bins: int, smooth_ece
) -> dict[str, float]:
    """Every report metric that depends on per-sample values only."""
    uniform = statistics_from_sums(*uniform_sums(confidence, correct, n_bins))
    quantile = statistics_from_sums(*quantile_sums(confidence, correct, n_bins))
    mean_correct = float(np.mean(correct))
    return {
        "accuracy": mean_correct,
        "ece": error_from_statistics(uniform, "l1"),
        "adaptive_ece": error_from_statistics(quantile, "l1"),
        "mce": error_from_statistics(uniform, "max"),
        "smooth_ece": smooth_ece(confidence, correct),
        "nll": float(np.mean(log_loss)),
        "brier": float(np.mean(brier)),
        "overconfidence": float(np.mean(confidence)) - mean_correct,
    }


def classwise_ece(
    summary: PredictionSummary, n_bins: int, *, weights=None, column_sums=None
) -> float:
    """Uniform-bin classwise ECE (L1) from a summary, optionally sample-weighted."""
    sums = classwise_uniform_sums(
        summary.classwise,
        summary.y_index,
        summary.true_probability,
        n_bins,
        weights=weights,
        column_sums=column_sums,
    )
    return combine_classes(norm_of_gaps(*sums, "l1"), "l1")
