"""The one pass over a probability matrix that every metric starts from.

A top-label metric needs, per sample, the confidence ``max_k p_k`` and whether the
arg-max is the true class; proper scores need ``p_{i, y_i}`` and ``sum_k p_ik^2``;
classwise binning needs the few entries above the first bin edge and the column
sums. :func:`scan_matrix` reads the matrix once, in row blocks, and returns these
O(n) summaries, so that no metric allocates an ``(n, K)`` temporary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reliacal._validation import check_option

MODES = ("top-label", "positive")

# Row blocks of about 4 MiB stay in cache while several reductions read them.
_BLOCK_BYTES = 1 << 22


@dataclass(frozen=True)
class ClasswiseEntries:
    """The entries of a probability matrix above the first uniform bin edge.

    In a row summing to 1 fewer than ``n_bins`` entries exceed ``1 / n_bins``, so
    this sparse list is O(n) while the rest of each column is summarised by its sum.
    """

    rows: np.ndarray  # int64 row index of each entry
    columns: np.ndarray  # int64 column index of each entry
    values: np.ndarray  # float64 probability of each entry
    column_sums: np.ndarray  # float64 (K,) sum of every column


@dataclass(frozen=True)
class MatrixScan:
    """O(n) per-sample summaries of one ``(n, K)`` probability matrix."""

    confidence: np.ndarray | None  # float64 max_k p_ik
    correct: np.ndarray | None  # bool, argmax_k p_ik == y_i
    true_probability: np.ndarray | None  # float64 p_{i, y_i}
    sum_of_squares: np.ndarray | None  # float64 sum_k p_ik^2
    classwise: ClasswiseEntries | None


def _float32_threshold(edge: float) -> np.float32:
    """Largest float32 not above ``edge``: for float32 x, ``x > it`` iff ``x > edge``."""
    threshold = np.float32(edge)
    if float(threshold) > edge:
        threshold = np.nextafter(threshold, np.float32(-np.inf))
    return threshold


def scan_matrix(
    y_prob: np.ndarray,
    y_index: np.ndarray,
    *,
    top_label: bool = True,
    true_class: bool = False,
    squares: bool = False,
    classwise_edge: float | None = None,
) -> MatrixScan:
    """Summarise a validated ``(n, K)`` probability matrix in one blocked pass.

    Each row block is read from memory once and stays in cache while the requested
    reductions run; gathers (the arg-max's probability, the true class's) hit the
    cached block instead of missing the cache once per row of the whole matrix.

    Parameters
    ----------
    y_prob : ndarray of shape (n, K)
        Validated probabilities (float32 or float64).
    y_index : ndarray of int64, shape (n,)
        Column of the true class of each row.
    top_label : bool
        Compute the top-label confidence and correctness (arg-max; ties go to the
        lowest column, as ``numpy.argmax``).
    true_class : bool
        Gather ``p_{i, y_i}`` (for the negative log-likelihood and the Brier score).
    squares : bool
        Compute ``sum_k p_ik^2`` (for the Brier score), accumulated in the input
        precision and stored in float64.
    classwise_edge : float, optional
        If given, list the entries strictly above this value and the column sums.
    """
    n_samples, n_classes = y_prob.shape
    confidence = np.empty(n_samples) if top_label else None
    correct = np.empty(n_samples, dtype=bool) if top_label else None
    true_probability = np.empty(n_samples) if true_class else None
    sum_of_squares = np.empty(n_samples) if squares else None
    column_sums = np.zeros(n_classes)
    entry_rows, entry_columns, entry_values = [], [], []
    block_rows = max(1, _BLOCK_BYTES // (n_classes * y_prob.itemsize))
    if classwise_edge is not None:
        threshold = (
            _float32_threshold(classwise_edge)
            if y_prob.dtype == np.float32
            else np.float64(classwise_edge)
        )
        # Column sums in float64: copying a float32 block into a reused float64
        # buffer and summing it is faster than a casting reduction along axis 0.
        cast_buffer = None
        if y_prob.dtype != np.float64:
            cast_buffer = np.empty((min(block_rows, n_samples), n_classes))
    for start in range(0, n_samples, block_rows):
        stop = min(start + block_rows, n_samples)
        block = y_prob[start:stop]
        if top_label:
            predicted = np.argmax(block, axis=1)
            confidence[start:stop] = np.take_along_axis(block, predicted[:, None], axis=1)[:, 0]
            correct[start:stop] = predicted == y_index[start:stop]
        if true_class:
            true_probability[start:stop] = block[np.arange(stop - start), y_index[start:stop]]
        if squares:
            sum_of_squares[start:stop] = np.einsum("ij,ij->i", block, block)
        if classwise_edge is not None:
            if cast_buffer is None:
                column_sums += block.sum(axis=0)
            else:
                cast = cast_buffer[: stop - start]
                cast[...] = block
                column_sums += cast.sum(axis=0)
            # Flat indices: 1-D nonzero and gather are several times faster than 2-D ones.
            flat_block = block.reshape(-1)
            flat = np.flatnonzero(flat_block > threshold)
            rows, columns = np.divmod(flat, n_classes)
            entry_rows.append(rows + start)
            entry_columns.append(columns)
            entry_values.append(flat_block[flat].astype(np.float64))
    classwise = None
    if classwise_edge is not None:
        classwise = ClasswiseEntries(
            rows=np.concatenate(entry_rows).astype(np.int64, copy=False),
            columns=np.concatenate(entry_columns).astype(np.int64, copy=False),
            values=np.concatenate(entry_values),
            column_sums=column_sums,
        )
    return MatrixScan(confidence, correct, true_probability, sum_of_squares, classwise)


def without_negative_zero(values: np.ndarray) -> np.ndarray:
    """Turn ``-0.0`` into ``0.0`` in place (quantile keys use the sign bit)."""
    values += 0.0
    return values


def binary_columns(y_prob: np.ndarray) -> np.ndarray:
    """The ``(n, 2)`` matrix ``[1 - p, p]`` of 1-D positive-class probabilities."""
    positive = y_prob.astype(np.float64)
    return np.column_stack([1.0 - positive, positive])


def confidences_and_outcomes(
    y_index: np.ndarray, y_prob: np.ndarray, mode: str
) -> tuple[np.ndarray, np.ndarray]:
    """Return the binned variable and its outcome for a calibration ``mode``.

    ``"top-label"``: ``(max_k p_k, [argmax_k p_k == y])``; 1-D input is the binary
    matrix ``[1 - p, p]`` (so ``p = 0.5`` predicts the negative class).
    ``"positive"``: ``(p(positive), [y == positive])`` for 1-D input or two columns.
    Both are float64 confidences (``-0.0`` normalised to ``0.0``) and boolean outcomes.
    """
    check_option(mode, "mode", MODES)
    if mode == "positive":
        if y_prob.ndim == 2:
            if y_prob.shape[1] != 2:
                raise ValueError(
                    f"mode='positive' needs a binary problem (1-D y_prob or 2 columns), got "
                    f"{y_prob.shape[1]} columns; use mode='top-label' or "
                    "classwise_calibration_error"
                )
            positive = y_prob[:, 1]
        else:
            positive = y_prob
        return without_negative_zero(positive.astype(np.float64)), y_index == 1
    if y_prob.ndim == 1:
        positive = y_prob.astype(np.float64)
        predicted = (positive > 0.5).astype(np.int64)
        return np.maximum(positive, 1.0 - positive), predicted == y_index
    scan = scan_matrix(y_prob, y_index)
    return without_negative_zero(scan.confidence), scan.correct
