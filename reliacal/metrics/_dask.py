"""Metrics of Dask arrays and DataFrames: one CalibrationState per partition, merged.

Each partition (a row block of a Dask array, a partition of a Dask DataFrame)
is summarised where it lives into a :class:`~reliacal.metrics.CalibrationState`;
only these states (per-bin sums, a few kilobytes) travel to the client, where
they are merged in partition order. The merged state is the state a loop
over the partitions would build, so the streamable metrics equal the in-memory
ones up to floating-point summation order (relative 1e-12 in the tests). The
metrics that need every confidence (quantile bins, smoothing, sorting) gather
one confidence and one correctness flag per row (9 bytes) to the client.

Dask is imported only when a Dask collection is passed: ``import
reliacal.metrics`` does not import it.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

__all__ = ["accepts_dask", "dask_state", "is_dask_collection"]


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


def _as_dask_array(value, row_chunks, name: str):
    import dask.array as da

    if _is_frame(value):
        # Partition lengths are unknown until counted: one cheap pass.
        value = value.to_dask_array(lengths=True)
    if isinstance(value, da.Array):
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


def _partitions(y_true, y_prob) -> list[tuple]:
    """Pairs of delayed ``(labels, probabilities)`` partitions, row-aligned."""
    if _is_frame(y_true) and _is_frame(y_prob):
        if y_true.npartitions != y_prob.npartitions:
            raise ValueError(
                f"y_true has {y_true.npartitions} partitions and y_prob {y_prob.npartitions}: "
                "take both from one DataFrame (df[label_column], df[probability_columns])"
            )
        return list(zip(y_true.to_delayed(), y_prob.to_delayed(), strict=True))
    if is_dask_collection(y_prob) or not is_dask_collection(y_true):
        y_prob = _as_dask_array(y_prob, None, "y_prob")
        y_true = _as_dask_array(y_true, y_prob.chunks[0], "y_true")
    else:
        y_true = _as_dask_array(y_true, None, "y_true")
        y_prob = _as_dask_array(y_prob, y_true.chunks[0], "y_prob")
    if y_prob.ndim not in (1, 2):
        raise ValueError(f"y_prob must be 1-D or 2-D, got shape {y_prob.shape}")
    probabilities = y_prob.to_delayed().reshape(-1)
    return list(zip(y_true.to_delayed().reshape(-1), probabilities, strict=True))


def _partition_state(y_true, y_prob, n_bins, labels, keep_confidences):
    """The state of one partition (runs on a worker)."""
    from reliacal.metrics._streaming import CalibrationState

    state = CalibrationState(n_bins, labels=labels, keep_confidences=keep_confidences)
    y_true = y_true.to_numpy() if hasattr(y_true, "to_numpy") else np.asarray(y_true)
    y_prob = y_prob.to_numpy() if hasattr(y_prob, "to_numpy") else np.asarray(y_prob)
    if y_true.shape[0] == 0 and y_prob.shape[0] == 0:
        return state  # Dask DataFrames may have empty partitions
    return state.update(y_true, y_prob)


def _merge(first, second):
    """A new state holding both (task results are not modified in place)."""
    from reliacal.metrics._streaming import CalibrationState

    merged = CalibrationState(
        first.n_bins, labels=first.labels, keep_confidences=first.keep_confidences
    )
    # Adding to the new state's zeros is exact: the sums equal a loop's over the partitions.
    return merged.merge(first).merge(second)


def dask_state(y_true, y_prob, *, n_bins: int = 15, labels=None, keep_confidences=False):
    """The merged :class:`CalibrationState` of Dask (or mixed Dask and in-memory) inputs.

    Parameters
    ----------
    y_true : dask array or Series of shape (n,), or array-like
        True labels.
    y_prob : dask array of shape (n, K) or (n,), or dask DataFrame with one column
        per class (in class order), or array-like
        Predicted probabilities. A DataFrame's partitions must match ``y_true``'s
        (take both from one frame).
    n_bins, labels, keep_confidences
        As :class:`CalibrationState`.

    Returns
    -------
    CalibrationState
        Equal to a state updated with the partitions in order.

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

    parts = [
        dask.delayed(_partition_state)(labels_part, probs_part, n_bins, labels, keep_confidences)
        for labels_part, probs_part in _partitions(y_true, y_prob)
    ]
    # A fold in partition order: the sums then add up exactly as a loop's would.
    merged = functools.reduce(dask.delayed(_merge), parts)
    (state,) = dask.compute(merged)
    return state


def accepts_dask(*names: str, combine=None):
    """Let a metric function take Dask collections, computed from the table's ``names``.

    With Dask input, the function's value comes from :func:`dask_state` and the
    metric table (which equals the function at its defaults); only ``n_bins=``
    and ``labels=`` may differ from the defaults. ``combine`` builds the result
    from the named values (default: the single value).
    """

    def decorate(function):
        signature = inspect.signature(function)
        defaults = {
            key: parameter.default
            for key, parameter in signature.parameters.items()
            if parameter.default is not inspect.Parameter.empty
        }

        @functools.wraps(function)
        def wrapper(y_true, y_prob, **kwargs):
            if not (is_dask_collection(y_true) or is_dask_collection(y_prob)):
                return function(y_true, y_prob, **kwargs)
            from reliacal.metrics._registry import BY_NAME

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
                keep_confidences=any(BY_NAME[name].needs_samples for name in names),
            )
            values = state.compute(names)
            if combine is None:
                return values[names[0]]
            return combine(*values.values())

        return wrapper

    return decorate


def _same(value, default) -> bool:
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False
