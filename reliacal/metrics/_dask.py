"""Metrics of Dask arrays and DataFrames: one CalibrationState per partition, merged.

Each partition (a row block of a Dask array, a partition of a Dask DataFrame)
is summarised where it lives into a :class:`~reliacal.metrics.CalibrationState`;
only these states (per-bin sums, a few kilobytes) travel to the client, where
they are merged in partition order. The merged state is the state a loop
over the partitions would build, so the streamable metrics equal the in-memory
ones up to floating-point summation order (relative 1e-12 in the tests). The
metrics that need every confidence (quantile bins, smoothing, sorting) come from
histogram states (``CalibrationState(histogram=True)``): each partition bins its
confidences into a fine histogram, merged like the sums, and further passes over
the partitions refine the few buckets where those metrics need the samples'
order (:meth:`~reliacal.metrics.CalibrationState.refinement`), so the client's
memory stays constant and the values are exact (the same tolerance).

Labels and probabilities must reach each worker in the same rows:

- two Dask DataFrames (or Series) are joined into one frame first, so that both are
  read in one partitioning. Taken from one frame (``frame["label"]``,
  ``frame[columns]``), they are joined partition by partition; otherwise their rows
  are matched by index, as pandas' ``assign`` matches them (Dask's alignment, which
  needs an index without duplicates). Reading the columns
  separately is not safe: Dask may read a small selection of columns of a parquet
  folder in fewer, larger partitions than a wide one;
- otherwise both become Dask arrays, the labels rechunked to the probabilities' row
  chunks; chunks of unknown size (``DataFrame.to_dask_array()`` without
  ``lengths=True``) are measured first, at the cost of one pass.

A bad row is reported by its row in the whole input, not within its partition.
Dask is imported only when a Dask collection is passed: ``import
reliacal.metrics`` does not import it.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import NamedTuple

import numpy as np

from reliacal.metrics._inputs import in_class_order, rows_shifted
from reliacal.metrics._registry import BY_NAME
from reliacal.metrics._streaming import CalibrationState

# Refining passes at most (as CalibrationState.refine_with).
_MAX_PASSES = 16

__all__ = ["dask_aware", "dask_state", "is_dask_collection"]


def is_dask_collection(value) -> bool:
    """Whether ``value`` is a Dask collection (array, DataFrame, Series), without importing Dask.

    Examples
    --------
    >>> is_dask_collection(np.zeros(3))
    False
    """
    module = type(value).__module__ or ""
    return module == "dask" or module.startswith(("dask.", "dask_expr"))


def _is_frame(value) -> bool:
    """A Dask DataFrame or Series (they have divisions; arrays have chunks)."""
    return is_dask_collection(value) and hasattr(value, "divisions")


class _Refused(NamedTuple):
    """What a partition's check said (a worker returns it: the lowest partition's wins)."""

    message: str
    partition: int


def _partition_state(partition: int, y_true, y_prob, settings: dict):
    """The state of one partition, or why it was refused (runs on a worker)."""
    state = CalibrationState(**settings)
    y_true = y_true.to_numpy() if hasattr(y_true, "to_numpy") else np.asarray(y_true)
    y_prob = y_prob.to_numpy() if hasattr(y_prob, "to_numpy") else np.asarray(y_prob)
    if y_true.shape[0] == 0 and y_prob.shape[0] == 0:
        return state  # Dask DataFrames may have empty partitions
    try:
        return state.update(y_true, y_prob)
    except ValueError as error:
        # Returned, not raised: partitions fail in any order in time, and the message
        # should name the first bad row of the whole input.
        return _Refused(str(error), partition)


def _partition_refinement(partition: int, y_true, y_prob, refinement):
    """One partition's part of a refining pass (runs on a worker)."""
    del partition  # a pass over data checked by the first: no row to report
    part = refinement.fresh()
    y_true = y_true.to_numpy() if hasattr(y_true, "to_numpy") else np.asarray(y_true)
    y_prob = y_prob.to_numpy() if hasattr(y_prob, "to_numpy") else np.asarray(y_prob)
    if y_true.shape[0] == 0 and y_prob.shape[0] == 0:
        return part
    return part.update(y_true, y_prob)


def _on_frame(partition: int, frame, label_column, probability_columns, function, argument):
    """``function`` of one partition of the joined frame (runs on a worker)."""
    return function(partition, frame[label_column], frame[probability_columns], argument)


def _merge(first, second):
    """A new state holding both (task results are not modified in place), or the first refusal."""
    if isinstance(first, _Refused):
        return first
    if isinstance(second, _Refused):
        return second
    merged = CalibrationState(
        first.n_bins,
        labels=first.labels,
        keep_confidences=first.keep_confidences,
        histogram=first.histogram,
    )
    # Adding to the new state's zeros is exact: the sums equal a loop's over the partitions.
    return merged.merge(first).merge(second)


def _merge_refinements(first, second):
    """A new part of the pass holding both (task results are not modified in place)."""
    return first.fresh().merge(first).merge(second)


def _labels_series(y_true):
    if y_true.ndim == 2:  # a one-column DataFrame of labels
        if len(y_true.columns) != 1:
            raise ValueError(
                f"y_true must be 1-D: a Series or a one-column frame, got columns "
                f"{list(y_true.columns)[:10]}"
            )
        return y_true[y_true.columns[0]]
    return y_true


def _free_name(taken) -> str:
    name = "__reliacal_label__"
    while name in set(taken):
        name += "_"
    return name


class _FrameSource:
    """Two Dask frames joined into one: a task per partition, their lengths on demand."""

    def __init__(self, y_true, y_prob):
        y_true = _labels_series(y_true)
        if y_prob.ndim == 2:
            self.probability_columns = list(y_prob.columns)
            frame = y_prob
        else:  # a Series: the positive-class probabilities of a binary problem
            self.probability_columns = "__reliacal_probability__"
            frame = y_prob.to_frame(name=self.probability_columns)
        self.label_column = _free_name(frame.columns)
        self.frame = frame.assign(**{self.label_column: y_true})
        self._partitions = self.frame.to_delayed()

    def tasks(self, function, argument) -> list:
        """``function(index, labels, probabilities, argument)`` of every partition."""
        import dask

        # Each pass reads the partitions anew: nothing is held between passes.
        return [
            dask.delayed(_on_frame)(
                index, part, self.label_column, self.probability_columns, function, argument
            )
            for index, part in enumerate(self._partitions)
        ]

    def lengths(self, count: int) -> list[int]:
        """The lengths of the first ``count`` partitions (one pass over them)."""
        import dask

        parts = self._partitions[:count]
        return list(dask.compute(*[dask.delayed(len)(part) for part in parts]))


def _known_rows(array):
    """``array`` with known row chunks (one pass to measure them when unknown)."""
    if any(math.isnan(size) for size in array.chunks[0]):
        array = array.compute_chunk_sizes()
    return array


def _as_dask_array(value, row_chunks, name: str):
    import dask.array as da

    if _is_frame(value):
        # Partition lengths are unknown until counted: one cheap pass.
        value = value.to_dask_array(lengths=True)
    if isinstance(value, da.Array):
        value = _known_rows(value)
        if value.ndim == 2 and len(value.chunks[1]) > 1:
            value = value.rechunk({1: -1})  # a partition holds whole rows
        if row_chunks is not None and value.chunks[0] != row_chunks:
            if value.shape[0] != sum(row_chunks):
                raise ValueError(
                    f"y_true and y_prob have different lengths: {sum(row_chunks)} and "
                    f"{value.shape[0]} rows ({name})"
                )
            value = value.rechunk({0: row_chunks})
        return value
    array = np.asarray(value)
    if row_chunks is None:
        return da.from_array(array, chunks=(array.shape[0],) + array.shape[1:])
    if array.shape[0] != sum(row_chunks):
        raise ValueError(
            f"y_true and y_prob have different lengths: {array.shape[0]} and {sum(row_chunks)} "
            f"rows ({name} is in memory, the other is a Dask collection)"
        )
    return da.from_array(array, chunks=(row_chunks,) + array.shape[1:])


class _ArraySource:
    """Row-aligned Dask arrays: a task per row chunk, their lengths known."""

    def __init__(self, y_true, y_prob):
        if is_dask_collection(y_prob) or not is_dask_collection(y_true):
            y_prob = _as_dask_array(y_prob, None, "y_prob")
            y_true = _as_dask_array(y_true, y_prob.chunks[0], "y_true")
        else:
            y_true = _as_dask_array(y_true, None, "y_true")
            y_prob = _as_dask_array(y_prob, y_true.chunks[0], "y_prob")
        if y_prob.ndim not in (1, 2):
            raise ValueError(f"y_prob must be 1-D or 2-D, got shape {y_prob.shape}")
        self.y_true, self.y_prob = y_true, y_prob
        self.sizes = [int(size) for size in y_prob.chunks[0]]

    def tasks(self, function, argument) -> list:
        """``function(index, labels, probabilities, argument)`` of every row chunk."""
        import dask

        pairs = zip(
            self.y_true.to_delayed().reshape(-1), self.y_prob.to_delayed().reshape(-1), strict=True
        )
        return [
            dask.delayed(function)(index, labels, probabilities, argument)
            for index, (labels, probabilities) in enumerate(pairs)
        ]

    def lengths(self, count: int) -> list[int]:
        """The lengths of the first ``count`` row chunks."""
        return self.sizes[:count]


def _in_whole_input(refused: _Refused, lengths) -> str:
    """The refusal's message with its rows counted from the start of the whole input."""
    return rows_shifted(refused.message, sum(lengths(refused.partition)))


def dask_state(
    y_true, y_prob, *, n_bins: int = 15, labels=None, keep_confidences=False, histogram=False
):
    """The merged :class:`CalibrationState` of Dask (or mixed Dask and in-memory) inputs.

    Parameters
    ----------
    y_true : dask array or Series of shape (n,), or array-like
        True labels.
    y_prob : dask array of shape (n, K) or (n,), dask DataFrame with one column per
        class (matched to the classes by name, as a pandas DataFrame), or array-like
        Predicted probabilities. A DataFrame with a Series of labels is joined into
        one frame (by partition when both come from one frame, else by index).
    n_bins, labels, keep_confidences, histogram
        As :class:`CalibrationState`. A histogram state is refined by further passes
        over the partitions until its metrics are exact.

    Returns
    -------
    CalibrationState
        Equal to a state updated with the partitions in order (and refined).

    Raises
    ------
    ValueError
        As :meth:`CalibrationState.update`, with rows counted in the whole input; and
        for input without rows.

    Examples
    --------
    >>> import dask.array as da
    >>> y = da.from_array(np.array([0, 1, 1, 0]), chunks=2)
    >>> p = da.from_array(np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]]), chunks=2)
    >>> state = dask_state(y, p)
    >>> state.n_samples, round(state.compute(["ece"])["ece"], 4)
    (4, 0.25)
    """
    import dask

    y_prob, labels = in_class_order(y_prob, labels)
    settings = {
        "n_bins": n_bins,
        "labels": labels,
        "keep_confidences": keep_confidences,
        "histogram": histogram,
    }
    if _is_frame(y_true) and _is_frame(y_prob):
        source = _FrameSource(y_true, y_prob)
    else:
        source = _ArraySource(y_true, y_prob)
    # A fold in partition order: the sums then add up exactly as a loop's would.
    merged = functools.reduce(dask.delayed(_merge), source.tasks(_partition_state, settings))
    (state,) = dask.compute(merged)
    if isinstance(state, _Refused):
        raise ValueError(_in_whole_input(state, source.lengths))
    if state.n_samples == 0:
        raise ValueError(
            "y_true and y_prob are empty (no partition holds a row): need at least one sample"
        )
    for _ in range(_MAX_PASSES):
        refinement = state.refinement()
        if refinement is None:
            return state
        tasks = source.tasks(_partition_refinement, refinement)
        (refinement,) = dask.compute(functools.reduce(dask.delayed(_merge_refinements), tasks))
        state.refine(refinement)
    raise RuntimeError(f"the histogram was not exact after {_MAX_PASSES} passes")


def dask_aware(function, *names: str, combine=None):
    """``function`` that also takes Dask collections, computed from the table's ``names``.

    With Dask input, the value comes from :func:`dask_state` and the metric table
    (whose ``names`` equal ``function`` at its defaults); only ``n_bins=`` and
    ``labels=`` may differ from the defaults. ``combine`` builds the result from the
    named values (default: the single value). Other input goes to ``function``
    unchanged.

    Examples
    --------
    >>> from reliacal.metrics._scores import accuracy
    >>> public = dask_aware(accuracy, "accuracy")
    >>> public([0, 1], [[0.8, 0.2], [0.3, 0.7]])
    1.0
    """
    signature = inspect.signature(function)
    defaults = {
        key: parameter.default
        for key, parameter in signature.parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    # The confidence-based metrics come from a histogram, refined over the partitions.
    histogram = any(BY_NAME[name].needs_samples for name in names)

    @functools.wraps(function)
    def wrapper(y_true, y_prob, **kwargs):
        if not (is_dask_collection(y_true) or is_dask_collection(y_prob)):
            return function(y_true, y_prob, **kwargs)
        signature.bind(y_true, y_prob, **kwargs)  # a TypeError for unknown arguments
        fixed = {
            key: value
            for key, value in kwargs.items()
            if key not in ("n_bins", "labels") and not _same(value, defaults.get(key))
        }
        if fixed:
            key, value = next(iter(fixed.items()))
            raise ValueError(
                f"{function.__name__} on Dask collections merges per-partition states, "
                f"which hold the default settings only: {key}={value!r} is not supported "
                "(n_bins= and labels= are); compute on an in-memory sample instead"
            )
        state = dask_state(
            y_true,
            y_prob,
            n_bins=kwargs.get("n_bins", defaults.get("n_bins", 15)),
            labels=kwargs.get("labels"),
            histogram=histogram,
        )
        values = state.compute(names)
        if combine is None:
            return values[names[0]]
        return combine(*values.values())

    return wrapper


def _same(value, default) -> bool:
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False
