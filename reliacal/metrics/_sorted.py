"""Scores sorted by confidence (ties by outcome): the input of every bin-free sorted metric.

The KS calibration error, the monotonic-sweep ECE and the CORP decomposition all
read the samples in increasing confidence. Sorting once, with ties ordered by
outcome (negatives first, as the quantile bins order them), makes their values
independent of the sample order and lets the report share one sort between them.
"""

from __future__ import annotations

import numpy as np


def sort_scores(
    confidence: np.ndarray, outcome: np.ndarray, *, float32_values: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(confidence, outcome)`` sorted by confidence, ties by outcome.

    ``confidence`` holds float64 values in [0, 1] without ``-0.0`` (validated
    scores); ``outcome`` is boolean. A non-negative float64's bit pattern sorts
    like the float, so one int64 key carries the confidence and, in its lowest
    bit, the outcome: one 8-byte array is sorted instead of an index and two
    gathers. ``float32_values``: every confidence is a float32 number (the
    maximum of a float32 row), whose 30 significant bits and the outcome fit in
    a 4-byte key, which sorts about twice as fast; the result is the same.

    Examples
    --------
    >>> sort_scores(np.array([0.5, 0.2, 0.5]), np.array([True, False, False]))
    (array([0.2, 0.5, 0.5]), array([False, False,  True]))
    >>> sort_scores(np.array([0.5, 0.25]), np.array([True, False]), float32_values=True)
    (array([0.25, 0.5 ]), array([False,  True]))
    """
    if float32_values:
        key = confidence.astype(np.float32).view(np.uint32)
        key <<= 1
        key |= np.asarray(outcome, dtype=bool)
        key.sort()
        outcome = (key & 1).astype(bool)
        key >>= 1
        return key.view(np.float32).astype(np.float64), outcome
    key = score_key(confidence, outcome)
    key.sort()
    return scores_of_key(key)


def score_key(confidence: np.ndarray, outcome: np.ndarray) -> np.ndarray:
    """One int64 per sample that orders by confidence, then outcome (see :func:`sort_scores`)."""
    key = np.asarray(confidence, dtype=np.float64).view(np.int64) << 1
    key |= np.asarray(outcome, dtype=bool)  # no copy when already boolean
    return key


def scores_of_key(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(confidence, outcome)`` back from :func:`score_key`'s keys (``key`` is reused)."""
    outcome = (key & 1).astype(bool)
    key >>= 1
    return key.view(np.float64), outcome


def run_ends(sorted_confidence: np.ndarray) -> np.ndarray:
    """Boolean mask of the last sample of each run of equal (sorted) confidences."""
    ends = np.ones(sorted_confidence.shape[0], dtype=bool)
    np.not_equal(sorted_confidence[1:], sorted_confidence[:-1], out=ends[:-1])
    return ends
