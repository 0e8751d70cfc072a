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

from reliacal._validation import array_namespace, check_classwise_bins, on_its_device
from reliacal.metrics._edges import uniform_bin_index, uniform_edges
from reliacal.metrics._inputs import check_prediction_inputs, check_predictions
from reliacal.metrics.modes import POSITIVE, SCORE_MODES, TOP_LABEL, check_mode

# Row blocks of about 4 MiB stay in cache while several reductions read them.
_BLOCK_BYTES = 1 << 22
# Classwise binning makes about 70 bytes of temporaries per entry of a block: blocks
# of at most 2**17 entries (512 KiB of float32) and at most 1/64 of the matrix keep
# them a small share of the input, also for small inputs.
_CLASSWISE_BLOCK_ENTRIES = (1 << 12, 1 << 16)
# From this many classes on, the classwise pass's entries give the top label.
_SPARSE_CLASSES = 32
# Up to this many classes, the arg-max (and the row maximum) run column by column.
_COLUMN_PASS_CLASSES = 4
_COLUMN_MAX_CLASSES = 32
# Bits of a float32 in [0, 1] (at most those of 1.0, 0x3F800000), and of a key of the
# top label: an int64's, less its sign.
_VALUE_BITS = 30
_KEY_BITS = 63


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


def bins_of(
    values: np.ndarray, n_bins: int, *, float32_values: bool, positive: bool = False
) -> np.ndarray:
    """:func:`uniform_bin_index` of ``values``, faster for float32 numbers (of either dtype).

    A float32 number has 24 significant bits, so its product with ``n_bins`` (below
    ``2**29``) is exact in float64 and ``ceil(v * n_bins) - 1`` is its bin; and no
    float32 lies between ``b / n_bins`` and the float64 edge that rounds it, so
    comparing with the exact fraction or with the edge is the same. ``positive``:
    every value exceeds 0 (no clipping of 0 into the first bin).
    """
    if not float32_values:
        return uniform_bin_index(values, n_bins)
    product = np.multiply(values, n_bins, dtype=np.float64)  # exact, also of float32 values
    index = np.ceil(product, out=product).astype(np.intp)
    index -= 1
    if not positive:
        np.maximum(index, 0, out=index)  # 0 lies in the first bin
    return index


class _ClasswiseBinning:
    """Accumulates :class:`ClasswiseSums` over the row blocks of one matrix.

    In a row summing to 1 fewer than ``n_bins`` entries exceed the first edge
    ``1 / n_bins``; only those are binned one by one, and everything else lies in
    bin 0, whose count and probability sum follow from the totals and the column
    sums (float64 products with a vector of ones). The outcome sums bin each row's
    true-class probability.

    Each numpy call costs microseconds whatever its size, so a block makes few: it
    gathers its true-class entries, finds its entries above the edge (with many
    classes, from the non-zero words of eight mask bytes, while the block is in cache)
    and everything else waits for :meth:`flush`, which bins a group of blocks'
    entries at once, runs the deferred value checks (``values``) on them and, when
    asked (``top_label``, float32 input), gives each row's arg-max.
    """

    def __init__(
        self,
        y_prob,
        y_index,
        n_bins: int,
        block_rows: int,
        *,
        weights,
        true_probability,
        top_label,
        values,
        packed: bool,
    ):
        n_classes = y_prob.shape[1]
        dtype = y_prob.dtype
        edge = float(uniform_edges(n_bins)[1])
        self.threshold = _float32_threshold(edge) if dtype == np.float32 else np.float64(edge)
        self.float32_values = dtype == np.float32
        # A value's bits, read as an unsigned integer, order like the value where it is
        # non-negative, and lie above the bits of 1 for negative values, infinity and
        # NaN: one comparison of the bits finds the entries above the edge and those.
        self.bits = np.dtype(f"u{dtype.itemsize}")
        self.threshold_bits = self.threshold.view(self.bits)
        self.one_bits = np.array(1, dtype).view(self.bits)
        self.y_prob, self.y_index, self.weights = y_prob, y_index, weights
        # Where to store each row's float64 true-class probability, or None.
        self.true_probability = true_probability
        # (confidence, correct) arrays to fill from the entries, or None.
        self.top_label = top_label
        self.values = values
        self.n_classes, self.n_bins = n_classes, n_bins
        n_cells = n_classes * n_bins
        self.counts = np.zeros(n_cells)
        self.sums = np.zeros(n_cells)
        self.outcomes = np.zeros(n_cells)
        self.column_sums = np.zeros(n_classes)
        self.total = 0.0
        # Products with a matrix of ones, not a vector: numpy hands a matrix times a
        # vector to a BLAS routine several times slower on short rows.
        self.ones_column = np.ones((n_classes, 1), dtype=dtype)
        self.ones = np.ones((1, block_rows))
        # The column sums read a C-ordered float64 block, so that their rounding does
        # not depend on the input's dtype or memory layout.
        as_is = dtype == np.float64 and y_prob.flags.c_contiguous
        self.cast = None if as_is else np.empty((block_rows, n_classes))
        # A block's true-class entries lie at these offsets plus the labels.
        self.row_offsets = np.arange(block_rows) * n_classes
        self.offsets = np.empty(block_rows, dtype=np.intp)
        # packed: the mask is read as words of eight bytes, eight entries at a time
        # (blocks of a multiple of 8 rows of a C-ordered matrix start on a word).
        self.packed = packed
        entries = block_rows * n_classes
        self.mask = np.zeros(entries + (-entries % 8), dtype=bool) if packed else None
        # Each bincount allocates n_cells entries: bin at least that many at once, in
        # groups of blocks of at most _group_rows rows.
        self._limit = max(n_cells, entries)
        self._group_rows = max(2 * block_rows, self._limit // 4)
        self._true_values = np.empty(self._group_rows, dtype=dtype)
        # (rows, 1), as the product with a column writes it (a view of a vector with
        # a stride-0 axis would make numpy skip BLAS).
        self._row_sums = np.empty((self._group_rows, 1), dtype=dtype)
        # The top label's keys (see _top_label): a float32 in [0, 1] has 30 significant
        # bits, then the column's complement and, where they fit, the row in the group.
        self._column_bits = max(1, (n_classes - 1).bit_length())
        row_shift = _VALUE_BITS + self._column_bits
        fits = row_shift + self._group_rows.bit_length() <= _KEY_BITS
        self._row_shift = row_shift if fits else None
        self._views: dict[int, tuple] = {}
        self._entries: list[tuple] = []
        self._pending = 0
        self._start = self._stop = 0  # the rows of the pending group
        self._summed_rows = 0  # the group's first rows, whose row sums await their check

    def _buffers(self, n_rows: int) -> tuple:
        """The views of the per-block buffers for blocks of ``n_rows`` rows.

        Made once per block size (every block but the last has the same), so that a
        block slices nothing.
        """
        if n_rows not in self._views:
            entries = n_rows * self.n_classes
            cast = None if self.cast is None else self.cast[:n_rows]
            mask = words = nonzero_words = None
            if self.packed:
                mask = self.mask[: entries + (-entries % 8)]
                words = mask.view(np.uint64)
                nonzero_words = np.empty(words.shape[0], dtype=bool)
            self._views[n_rows] = (
                cast,
                self.ones[:, :n_rows],
                self.row_offsets[:n_rows],
                self.offsets[:n_rows],
                None if mask is None else mask[:entries],
                words,
                nonzero_words,
            )
        return self._views[n_rows]

    def add_block(self, block, start: int) -> None:
        """Add the rows ``start:start + len(block)`` (checked at :meth:`flush`)."""
        n_rows = block.shape[0]
        stop = start + n_rows
        if not self._entries:
            self._start = start
        position = start - self._start
        cast, ones, row_offsets, offsets, mask, words, nonzero_words = self._buffers(n_rows)
        flat_block = block.reshape(-1)  # a C-ordered copy of other layouts
        above, threshold = flat_block, self.threshold
        if self.values is not None and not self.values.checked:
            row_sums = self._row_sums[position : position + n_rows]
            np.matmul(block, self.ones_column, out=row_sums)
            self._summed_rows = position + n_rows
            # Negative values, infinity and NaN join the entries, so that no pass
            # looks for them: flush checks the entries.
            above, threshold = flat_block.view(self.bits), self.threshold_bits
        # The column sums in float64, of a C-ordered float64 block, so that their
        # rounding does not depend on the input's dtype or memory layout.
        if cast is None:
            cast = block
        else:
            cast[...] = block  # no array-function dispatch, unlike numpy.copyto
        if self.weights is not None:  # a reshape, not a new axis: no stride-0 axis, so BLAS
            ones = self.weights[start:stop].reshape(1, n_rows)
        self.column_sums += (ones @ cast)[0]
        # Gathered after the block's first full read: from the cache, not one memory
        # round trip per row.
        np.add(row_offsets, self.y_index[start:stop], out=offsets)
        # mode="clip": the offsets are valid, and the default mode copies `out`.
        true_values = self._true_values[position : position + n_rows]
        flat_block.take(offsets, out=true_values, mode="clip")
        if self.packed:
            np.greater(above, threshold, out=mask)
            if mask.shape[0] % 8:  # the last block: pad to whole words
                self.mask[mask.shape[0] : words.shape[0] * 8] = False
            # The non-zero words (a boolean pass is faster than one on the words
            # themselves), then their mask bytes, in order: the entries' positions,
            # whose values are read while the block is in cache.
            word = np.not_equal(words, 0, out=nonzero_words).nonzero()[0]
            hit = words.take(word).view(np.bool_).nonzero()[0]
            flat = word.take(hit >> 3)
            flat <<= 3
            flat += hit & 7
            values = flat_block.take(flat)
        else:
            flat = (above > threshold).nonzero()[0]
            values = flat_block.take(flat)
        # Positions in the group, as flush reads them.
        flat += position * self.n_classes
        self._entries.append((flat, values))
        self._stop = stop
        self._pending += flat.shape[0] + n_rows
        if self._pending >= self._limit or position + 2 * n_rows > self._group_rows:
            self.flush()

    def _checked_entries(self, flat, values):
        """The entries above the edge, once the group's values are checked.

        The entries of unchecked blocks include every value whose bits exceed the
        edge's: a value out of [0, 1] (or NaN) among them fails the check, and a
        passing check leaves only ``-0.0`` to drop.
        """
        checks = self.values
        checks.check_row_sums(self._row_sums[: self._summed_rows, 0])
        self._summed_rows = 0
        if values.shape[0] and not values.view(self.bits).max() <= self.one_bits:
            checks.check_all()  # raises, or the suspects are -0.0
        if not checks.checked:
            return flat, values
        keep = np.flatnonzero(values > self.threshold)
        return flat[keep], values[keep]

    def flush(self) -> None:
        if not self._entries:
            return
        blocks, self._entries, self._pending = self._entries, [], 0
        start, stop = self._start, self._stop
        flat = np.concatenate([part[0] for part in blocks])
        values = np.concatenate([part[1] for part in blocks])
        if self._summed_rows:
            flat, values = self._checked_entries(flat, values)
        true_values = self._true_values[: stop - start]
        if self.true_probability is not None:
            self.true_probability[start:stop] = true_values
        weights = None if self.weights is None else self.weights[start:stop]
        # Division by a constant is fast in numpy; the remainder is not.
        rows = flat // self.n_classes
        columns = flat - rows * self.n_classes
        n_cells = self.counts.shape[0]
        # The values in float64 once (exactly), for the bins and the sums: bincount
        # and a float32-by-float64 product would each cast them again.
        values64 = values.astype(np.float64, copy=False)
        cells = columns * self.n_bins
        cells += bins_of(values64, self.n_bins, float32_values=self.float32_values, positive=True)
        entry_weights = None if weights is None else weights.take(rows)
        self.counts += np.bincount(cells, weights=entry_weights, minlength=n_cells)
        weighted_values = values64 if weights is None else values64 * entry_weights
        self.sums += np.bincount(cells, weights=weighted_values, minlength=n_cells)
        true_cells = self.y_index[start:stop] * self.n_bins
        true_cells += bins_of(true_values, self.n_bins, float32_values=self.float32_values)
        self.outcomes += np.bincount(true_cells, weights=weights, minlength=n_cells)
        self.total += stop - start if weights is None else float(weights.sum())
        if self.top_label is not None:
            self._top_label(rows, columns, values, start, stop)

    def _top_label(self, rows, columns, values, start: int, stop: int) -> None:
        """Each row's largest float32 entry and whether its first column is the label.

        A row's maximum, when above ``1 / n_bins``, is among its entries, which come
        sorted by row. A non-negative float32's bits order like the float, so one
        int64 key per entry, its bits above the column's complement, is largest at
        the row's maximum and, among equal values, at the first column:
        ``numpy.argmax``'s. Rows without an entry take the arg-max of their row.
        The flags are written here, so that no array of n predicted columns exists.
        """
        confidence, correct = self.top_label
        n_classes, column_bits = self.n_classes, self._column_bits
        n_rows = stop - start
        row_ids = np.empty(0, dtype=np.intp)
        if rows.shape[0]:
            key = values.view(np.int32).astype(np.int64)
            key <<= column_bits
            key |= (n_classes - 1) - columns
            # Each row's last entry.
            last = np.flatnonzero(rows[1:] != rows[:-1])
            last = np.append(last, rows.shape[0] - 1)
            if self._row_shift is None:
                best = np.maximum.reduceat(key, np.concatenate([[0], last[:-1] + 1]))
            else:
                # With the row above them, the keys of a row exceed those of every
                # earlier row, so a maximum over each entry and its predecessors, in
                # doubling steps until they span the longest row, holds each row's
                # largest key at its last entry (reduceat pays per row, and a running
                # maximum is a sequential pass).
                key |= rows << self._row_shift
                longest = int(np.diff(last, prepend=-1).max())
                other = np.empty_like(key)
                step = 1
                while step < longest:
                    other[:step] = key[:step]
                    np.maximum(key[step:], key[:-step], out=other[step:])
                    key, other = other, key
                    step *= 2
                best = key.take(last)
                best &= (1 << self._row_shift) - 1
            row_ids = rows.take(last)
            predicted = (n_classes - 1) - (best & ((1 << column_bits) - 1))
            best >>= column_bits
            top = best.astype(np.int32).view(np.float32)
            if row_ids.shape[0] == n_rows:  # every row has an entry: slices, no scatter
                np.equal(predicted, self.y_index[start:stop], out=correct[start:stop])
                confidence[start:stop] = top
                return
            row_ids += start
            correct[row_ids] = predicted == self.y_index.take(row_ids)
            confidence[row_ids] = top
            row_ids -= start
        covered = np.zeros(n_rows, dtype=bool)
        covered[row_ids] = True
        missing = np.flatnonzero(~covered)
        missing += start
        # A block's worth of rows at a time: the gathered rows are a copy.
        chunk = max(1, self._limit // n_classes)
        for first_row in range(0, missing.shape[0], chunk):
            some = missing[first_row : first_row + chunk]
            block = self.y_prob[some]
            arg_max = np.argmax(block, axis=1)
            correct[some] = arg_max == self.y_index.take(some)
            confidence[some] = np.take_along_axis(block, arg_max[:, None], axis=1)[:, 0]

    def result(self) -> ClasswiseSums:
        self.flush()
        shape = (self.n_classes, self.n_bins)
        counts = self.counts.reshape(shape)
        sum_probability = self.sums.reshape(shape)
        counts[:, 0] = self.total - counts[:, 1:].sum(axis=1)
        sum_probability[:, 0] = self.column_sums - sum_probability[:, 1:].sum(axis=1)
        return ClasswiseSums(counts, sum_probability, self.outcomes.reshape(shape))


def _row_squares(block, out):
    """``sum_k block_ik ** 2`` per row into ``out``: ``numpy.vecdot`` from numpy 2 on,
    ``einsum`` on the 1.x versions that pyproject.toml still allows."""
    if hasattr(np, "vecdot"):
        np.vecdot(block, block, out=out)
    else:
        np.einsum("ij,ij->i", block, block, out=out)


def scan_matrix(
    y_prob: np.ndarray,
    y_index: np.ndarray,
    *,
    top_label: bool = True,
    true_class: bool = False,
    squares: bool = False,
    classwise_bins: int | None = None,
    weights: np.ndarray | None = None,
    values=None,
) -> MatrixScan:
    """Summarise a validated ``(n, K)`` probability matrix in one blocked pass.

    Each row block is read from memory once and stays in cache while the requested
    reductions run; gathers (the arg-max's probability, the true class's) hit the
    cached block instead of missing the cache once per row of the whole matrix.
    Besides ``y_prob`` itself, memory is O(n) plus O(K * n_bins).

    Parameters
    ----------
    y_prob : ndarray of shape (n, K)
        Probabilities (float32 or float64), validated unless ``values`` is given.
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
    values : reliacal._validation.ProbabilityValues, optional
        The deferred value checks of ``y_prob``, run on each block as it is read
        (``ValueError`` as :func:`reliacal._validation.check_probabilities`).
    """
    n_samples, n_classes = y_prob.shape
    confidence = np.empty(n_samples) if top_label else None
    correct = np.empty(n_samples, dtype=bool) if top_label else None
    true_probability = np.empty(n_samples) if true_class else None
    sum_of_squares = np.empty(n_samples) if squares else None
    block_rows = max(1, _BLOCK_BYTES // (n_classes * y_prob.itemsize))
    classwise = None
    # With many classes, few entries of a row exceed 1 / n_bins: the classwise pass's
    # entries give the arg-max for less than a dense arg-max costs.
    sparse_top_label = (
        top_label
        and classwise_bins is not None
        and n_classes >= _SPARSE_CLASSES
        and y_prob.dtype == np.float32
    )
    if classwise_bins is not None:
        block_entries = _classwise_block_entries(y_prob.size)
        block_rows = max(1, min(block_rows, block_entries // n_classes))
        check_classwise_bins(classwise_bins, n_classes)
        # Packed masks need blocks of whole words of a C-ordered matrix.
        packed = n_classes >= _SPARSE_CLASSES and y_prob.flags.c_contiguous
        if packed:
            block_rows = max(8, block_rows - block_rows % 8)
        classwise = _ClasswiseBinning(
            y_prob,
            y_index,
            classwise_bins,
            min(block_rows, n_samples),
            weights=weights,
            true_probability=true_probability,
            top_label=(confidence, correct) if sparse_top_label else None,
            values=values,
            packed=packed,
        )
    row_range = np.arange(min(block_rows, n_samples))
    squares_buffer = np.empty(row_range.shape[0], dtype=y_prob.dtype) if squares else None
    # A C-ordered block's true-class entries lie at these offsets plus the labels.
    row_offsets = row_range * n_classes if y_prob.flags.c_contiguous else None
    for start in range(0, n_samples, block_rows):
        stop = min(start + block_rows, n_samples)
        block = y_prob[start:stop]
        if classwise is not None:
            # It checks its blocks itself, and gathers the true class's entries.
            classwise.add_block(block, start)
        elif values is not None:
            values.check_block(block)
        if top_label and not sparse_top_label:
            arg_max, confidence[start:stop] = _top_of_block(block)
            np.equal(arg_max, y_index[start:stop], out=correct[start:stop])
        if true_class and classwise is None:
            labels = y_index[start:stop]
            if row_offsets is None:
                true_probability[start:stop] = block[row_range[: stop - start], labels]
            else:  # a flat take: far cheaper than indexing rows and columns
                offsets = row_offsets[: stop - start] + labels
                true_probability[start:stop] = block.reshape(-1).take(offsets)
        if squares:
            # A dot product per row (BLAS where the rows are contiguous): a third of
            # einsum's time, accumulated in the input precision as well.
            _row_squares(block, squares_buffer[: stop - start])
            sum_of_squares[start:stop] = squares_buffer[: stop - start]
    classwise_sums = None if classwise is None else classwise.result()
    return MatrixScan(confidence, correct, true_probability, sum_of_squares, classwise_sums)


def _top_of_block(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(arg_max, max)`` of each row of a block, ties to the lowest column.

    With few columns ``numpy.argmax`` pays a per-row cost several times that of a
    column-by-column pass, which keeps a running maximum and replaces it only
    where a later column is strictly larger (so the first maximum wins, as
    ``numpy.argmax``'s).
    """
    if block.shape[1] > _COLUMN_PASS_CLASSES:
        arg_max = np.argmax(block, axis=1)
        return arg_max, block[np.arange(block.shape[0]), arg_max]
    best = block[:, 0].copy()
    arg_max = np.zeros(block.shape[0], dtype=np.intp)
    larger = np.empty(block.shape[0], dtype=bool)
    for column in range(1, block.shape[1]):
        values = block[:, column]
        np.greater(values, best, out=larger)
        np.copyto(best, values, where=larger)
        np.copyto(arg_max, column, where=larger)
    return arg_max, best


def row_maxima(y_prob: np.ndarray) -> np.ndarray:
    """The float64 maximum of each row of a probability matrix (no arg-max).

    Up to ``_COLUMN_MAX_CLASSES`` columns, a running maximum over the columns: far
    cheaper than ``numpy.max`` along short rows, which pays a per-row cost.
    """
    n_samples, n_classes = y_prob.shape
    if n_classes > _COLUMN_MAX_CLASSES:
        return y_prob.max(axis=1).astype(np.float64)
    best = np.empty(n_samples)
    block_rows = max(1, _BLOCK_BYTES // (n_classes * y_prob.itemsize))
    for start in range(0, n_samples, block_rows):
        block = y_prob[start : start + block_rows]
        running = block[:, 0].copy()
        for column in range(1, n_classes):
            np.maximum(running, block[:, column], out=running)
        best[start : start + block_rows] = running
    return best


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
    Both are float64 confidences (``-0.0`` normalised to ``0.0``) and boolean outcomes,
    numpy arrays or torch tensors on ``y_prob``'s device.
    """
    check_mode(mode, SCORE_MODES)
    xp = array_namespace(y_prob)
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
        return without_negative_zero(xp.astype(positive, xp.float64)), y_index == 1
    if y_prob.ndim == 1:
        positive = xp.astype(y_prob, xp.float64)
        predicted = xp.astype(positive > 0.5, xp.int64)
        return xp.maximum(positive, 1.0 - positive), predicted == y_index
    if xp is not np:  # a tensor, read on its device (the blocked scan is numpy's)
        # Ties go to the lowest column, as numpy.argmax (and torch.argmax).
        confidence = xp.astype(xp.max(y_prob, axis=1), xp.float64) + 0.0
        return confidence, xp.argmax(y_prob, axis=1) == y_index
    scan = scan_matrix(y_prob, y_index)
    return without_negative_zero(scan.confidence), scan.correct


def checked_scores(
    y_true, y_prob, mode: str, *, labels=None, on_device: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`confidences_and_outcomes` of unchecked predictions, checked as every metric is.

    A numpy matrix's top label comes from :func:`scan_matrix`, which runs the value
    checks on each row block it reads, so that no other pass over the matrix looks
    for its minimum, maximum and row sums; an error is the one
    :func:`~reliacal.metrics._inputs.check_predictions` raises. Other inputs (and,
    with ``on_device``, a tensor on its device) are checked first.
    """
    check_mode(mode, SCORE_MODES)
    if mode != TOP_LABEL or (on_device and on_its_device(y_prob)):
        y_index, y_prob, _ = check_predictions(y_true, y_prob, labels=labels, on_device=on_device)
        return confidences_and_outcomes(y_index, y_prob, mode)
    y_index, y_prob, _, values = check_prediction_inputs(y_true, y_prob, labels=labels)
    if y_prob.ndim != 2:  # checked already
        return confidences_and_outcomes(y_index, y_prob, mode)
    scan = scan_matrix(y_prob, y_index, values=values)
    return without_negative_zero(scan.confidence), scan.correct
