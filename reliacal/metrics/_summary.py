"""Per-sample summaries of one probability matrix, shared by the report and the stream.

One blocked pass over the ``(n, K)`` matrix yields everything the registered
metrics need; after it, every metric (and every bootstrap replicate but the
classwise one) is O(n) work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reliacal.metrics._predictions import (
    ClasswiseSums,
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
    log_loss: np.ndarray  # float64 per-sample clipped -log p_{i, y_i}
    brier: np.ndarray  # float64 per-sample Brier term
    classwise: ClasswiseSums  # uniform-bin sums of every class's binary problem


def prediction_matrix(y_prob: np.ndarray) -> np.ndarray:
    """The ``(n, K)`` matrix of validated probabilities (1-D input: ``[1 - p, p]``)."""
    return binary_columns(y_prob) if y_prob.ndim == 1 else y_prob


def summarize(
    y_index: np.ndarray, y_prob: np.ndarray, n_bins: int, values=None
) -> PredictionSummary:
    """Summarise validated ``y_prob`` ((n, K), or 1-D binary) in one pass.

    ``values``: the deferred value checks of a 2-D ``y_prob``
    (:class:`reliacal._validation.ProbabilityValues`), run by the pass itself.
    """
    if y_prob.ndim == 1:
        positive = y_prob.astype(np.float64)
        brier = (positive - y_index) ** 2  # the 1-D Brier score's scale
    else:
        brier = None
    scan = scan_matrix(
        prediction_matrix(y_prob),
        y_index,
        top_label=True,
        true_class=True,
        squares=brier is None,
        classwise_bins=n_bins,
        values=values if y_prob.ndim == 2 else None,
    )
    # The scan's arrays are overwritten in place, so that at most n floats of
    # temporaries pile up beside the summary.
    if brier is None:
        brier = brier_terms(scan.true_probability, scan.sum_of_squares, in_place=True)
    return PredictionSummary(
        y_index=y_index,
        confidence=without_negative_zero(scan.confidence),
        correct=scan.correct,
        log_loss=clipped_log_loss(scan.true_probability, y_prob.dtype, in_place=True),
        brier=brier,
        classwise=scan.classwise,
    )
