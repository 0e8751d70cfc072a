"""The one pass over a probability matrix that every metric starts from.

A top-label metric needs, per sample, the confidence ``max_k p_k`` and whether the
arg-max is the true class; proper scores need ``p_{i, y_i}`` and ``sum_k p_ik^2``;
classwise binning needs, per (class, bin) cell, a count and two sums.
:func:`scan_matrix` reads the matrix once, in row blocks, and returns O(n)
summaries and the ``(K, n_bins)`` cell sums, so that no metric allocates a
temporary of the size of the ``(n, K)`` matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reliacal._validation import check_classwise_bins
from reliacal.metrics._edges import uniform_bin_index, uniform_edges
from reliacal.metrics.modes import POSITIVE, SCORE_MODES, check_mode

# Row blocks of about 4 MiB stay in cache while several reductions read them.
_BLOCK_BYTES = 1 << 22
# Classwise binning makes about 70 bytes of temporaries per entry of a block: blocks
# of at most 2**17 entries (512 KiB of float32) and at most 1/64 of the matrix keep
# them a small share of the input, also for small inputs.
_CLASSWISE_BLOCK_ENTRIES = (1 << 12, 1 << 17)


def _classwise_block_entries(matrix_size: int) -> int:
    low, high = _CLASSWISE_BLOCK_ENTRIES
    return min(high, max(low, matrix_size // 64))


@dataclass(frozen=True)
class ClasswiseSums:
    """Per-(class, bin) sums of every binary problem ``(p_k, [y == k])``.

    Each array has shape ``(K, n_bins)``: the (weighted) number of samples whose
    ``p_k`` lies in the bin, the sum of those ``p_k``, and the (weighted) number of
    them whose label is ``k``.
    """

    counts: np.ndarray
    sum_probability: np.ndarray
    sum_outcome: np.ndarray

    def __iter__(self):
        return iter((self.counts, self.sum_probability, self.sum_outcome))


@dataclass(frozen=True)
class MatrixScan:
    """O(n) per-sample summaries of one ``(n, K)`` probability matrix."""

    confidence: np.ndarray | None  # float64 max_k p_ik
    correct: np.ndarray | None  # bool, argmax_k p_ik == y_i
    true_probability: np.ndarray | None  # float64 p_{i, y_i}
    sum_of_squares: np.ndarray | None  # float64 sum_k p_ik^2
    classwise: ClasswiseSums | None


def _float32_threshold(edge: float) -> np.float32:
    """Largest float32 not above ``edge``: for float32 x, ``x > it`` iff ``x > edge``."""
    threshold = np.float32(edge)
    if float(threshold) > edge:
        threshold = np.nextafter(threshold, np.float32(-np.inf))
    return threshold


class _CellSums:
    """Weighted counts (and value sums) over ``n_cells`` cells, fed in pieces.

    Pieces are buffered and binned together, so that each ``bincount`` (which
    allocates ``n_cells`` entries) covers at least ``n_cells`` (and ``pending``)
    entries.
    """

    def __init__(self, n_cells: int, with_values: bool, pending: int):
        self.n_cells = n_cells
        self.counts = np.zeros(n_cells)
        self.sums = np.zeros(n_cells) if with_values else None
        self._pieces: list[tuple] = []
        self._pending = 0
        self._limit = max(n_cells, pending)

    def add(self, cells: np.ndarray, values=None, weights=None) -> None:
        self._pieces.append((cells, values, weights))
        self._pending += cells.shape[0]
        if self._pending >= self._limit:
            self.flush()

    def flush(self) -> None:
        if not self._pieces:
            return
        cells, values, weights = zip(*self._pieces, strict=True)
        self._pieces, self._pending = [], 0
        cells = np.concatenate(cells)
        weights = None if weights[0] is None else np.concatenate(weights)
        self.counts += np.bincount(cells, weights=weights, minlength=self.n_cells)
        if self.sums is not None:
            values = np.concatenate(values)
            if weights is not None:
                values *= weights
            self.sums += np.bincount(cells, weights=values, minlength=self.n_cells)


class _ClasswiseBinning:
    """Accumulates :class:`ClasswiseSums` over row blocks.

    In a row summing to 1 fewer than ``n_bins`` entries exceed the first edge
    ``1 / n_bins``; only those are binned one by one, and everything else lies in
    bin 0, whose count and probability sum follow from the totals and the column
    sums. The outcome sums bin each row's true-class probability.
    """

    def __init__(self, n_classes: int, n_bins: int, dtype: np.dtype, block_entries: int):
        edge = float(uniform_edges(n_bins)[1])
        self.threshold = _float32_threshold(edge) if dtype == np.float32 else np.float64(edge)
        self.n_classes, self.n_bins = n_classes, n_bins
        # Buffers of about two blocks' entries: one bincount per two blocks.
        self.entries = _CellSums(n_classes * n_bins, True, 2 * block_entries)
        self.outcomes = _CellSums(n_classes * n_bins, False, 2 * block_entries)
        self.column_sums = np.zeros(n_classes)
        self.total = 0.0
        # Column sums in float64: copying a float32 block into a reused float64
        # buffer and summing it is faster than a casting reduction along axis 0.
        self.cast_buffer = None

    def add_block(self, block, y_index, true_probability, weights) -> None:
        if block.dtype == np.float64:
            cast = block
        else:
            if self.cast_buffer is None or self.cast_buffer.shape[0] < block.shape[0]:
                self.cast_buffer = np.empty(block.shape)
            cast = self.cast_buffer[: block.shape[0]]
            cast[...] = block
        if weights is None:
            self.column_sums += cast.sum(axis=0)
            self.total += block.shape[0]
        else:
            self.column_sums += weights @ cast
            self.total += float(weights.sum())
        # Flat indices: 1-D nonzero and gather are several times faster than 2-D ones.
        flat_block = block.reshape(-1)
        flat = np.flatnonzero(flat_block > self.threshold)
        rows, columns = np.divmod(flat, self.n_classes)
        values = flat_block[flat].astype(np.float64)
        cells = columns * self.n_bins + uniform_bin_index(values, self.n_bins)
        self.entries.add(cells, values, None if weights is None else weights[rows])
        true_cells = y_index * self.n_bins + uniform_bin_index(true_probability, self.n_bins)
        self.outcomes.add(true_cells, None, weights)

    def result(self) -> ClasswiseSums:
        self.entries.flush()
        self.outcomes.flush()
        shape = (self.n_classes, self.n_bins)
        counts = self.entries.counts.reshape(shape)
        sum_probability = self.entries.sums.reshape(shape)
        counts[:, 0] = self.total - counts[:, 1:].sum(axis=1)
        sum_probability[:, 0] = self.column_sums - sum_probability[:, 1:].sum(axis=1)
        return ClasswiseSums(counts, sum_probability, self.outcomes.counts.reshape(shape))


def scan_matrix(
    y_prob: np.ndarray,
    y_index: np.ndarray,
    *,
    top_label: bool = True,
    true_class: bool = False,
    squares: bool = False,
    classwise_bins: int | None = None,
    weights: np.ndarray | None = None,
) -> MatrixScan:
    """Summarise a validated ``(n, K)`` probability matrix in one blocked pass.

    Each row block is read from memory once and stays in cache while the requested
    reductions run; gathers (the arg-max's probability, the true class's) hit the
    cached block instead of missing the cache once per row of the whole matrix.
    Besides ``y_prob`` itself, memory is O(n) plus O(K * n_bins).

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
    classwise_bins : int, optional
        If given, the :class:`ClasswiseSums` of that many uniform bins.
    weights : ndarray of shape (n,), optional
        Sample multiplicities of the classwise sums (for the bootstrap).
    """
    n_samples, n_classes = y_prob.shape
    confidence = np.empty(n_samples) if top_label else None
    correct = np.empty(n_samples, dtype=bool) if top_label else None
    true_probability = np.empty(n_samples) if true_class else None
    sum_of_squares = np.empty(n_samples) if squares else None
    block_rows = max(1, _BLOCK_BYTES // (n_classes * y_prob.itemsize))
    classwise = None
    if classwise_bins is not None:
        block_entries = _classwise_block_entries(y_prob.size)
        block_rows = max(1, min(block_rows, block_entries // n_classes))
        check_classwise_bins(classwise_bins, n_classes)
        classwise = _ClasswiseBinning(n_classes, classwise_bins, y_prob.dtype, block_entries)
    for start in range(0, n_samples, block_rows):
        stop = min(start + block_rows, n_samples)
        block = y_prob[start:stop]
        if top_label:
            predicted = np.argmax(block, axis=1)
            confidence[start:stop] = np.take_along_axis(block, predicted[:, None], axis=1)[:, 0]
            correct[start:stop] = predicted == y_index[start:stop]
        if true_class or classwise is not None:
            block_true = block[np.arange(stop - start), y_index[start:stop]].astype(np.float64)
            if true_class:
                true_probability[start:stop] = block_true
        if squares:
            sum_of_squares[start:stop] = np.einsum("ij,ij->i", block, block)
        if classwise is not None:
            block_weights = None if weights is None else weights[start:stop]
            classwise.add_block(block, y_index[start:stop], block_true, block_weights)
    return MatrixScan(
        confidence,
        correct,
        true_probability,
        sum_of_squares,
        None if classwise is None else classwise.result(),
    )


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
    check_mode(mode, SCORE_MODES)
    if mode == POSITIVE:
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
