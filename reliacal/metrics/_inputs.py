"""The entry of every metric's input: labels and probabilities, validated once.

:func:`check_predictions` is :func:`reliacal._validation.check_probabilities` with
what only the metrics need on top:

- a pandas DataFrame of probabilities is read by its column names, never by the
  columns' position (:func:`frame_class_order`), so that a frame whose columns
  come as ``p2, p0, p1`` or ``p0, p1, p10, p2`` gives the metrics of its classes;
- a missing label (NaN, None, ``pd.NA``) is named as such, with its row, instead
  of being reported as a non-integer or non-numeric label.
"""

from __future__ import annotations

import re
import sys

import numpy as np

from reliacal._validation import (
    NUMBERED_NAME,
    check_probabilities,
    check_probability_inputs,
    check_tensor_probabilities,
    on_its_device,
    to_numpy,
)

__all__ = [
    "check_prediction_inputs",
    "check_predictions",
    "frame_class_order",
    "in_class_order",
    "is_pandas_frame",
    "rows_shifted",
]

# The checks' messages name a row as "row <number>", counted within the data they saw.
_ROW_IN_MESSAGE = re.compile(r"\brow (\d+)\b")


def is_pandas_frame(value) -> bool:
    """Whether ``value`` is a pandas DataFrame (pandas is not imported for that)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(value, pandas.DataFrame)


def _class_numbers(names: list) -> list[int] | None:
    """The distinct class number each column name carries, or None when they carry none.

    Integer names are their own numbers; string names must all share one prefix and
    one suffix around a number (``p0``, ``p_1``, ``class3_prob``).
    """
    if all(isinstance(name, int | np.integer) and not isinstance(name, bool) for name in names):
        numbers = [int(name) for name in names]
    elif all(isinstance(name, str) for name in names):
        matches = [NUMBERED_NAME.match(name) for name in names]
        if not all(matches) or len({(m.group(1), m.group(3)) for m in matches}) != 1:
            return None
        numbers = [int(match.group(2)) for match in matches]
    else:
        return None
    return numbers if len(set(numbers)) == len(numbers) else None


def _hashable_values(values) -> list:
    return [value.item() if isinstance(value, np.generic) else value for value in values]


def frame_class_order(names, labels=None) -> tuple[list[int], np.ndarray | None]:
    """Which class each column of a probability frame holds, read from the column names.

    The names say it, in one of two ways:

    - the names are the classes (``"cat"``, ``"dog"``; or the integers of a frame made
      from an array);
    - the names carry class numbers between a prefix and a suffix that they all share
      (``p0, p1, ...``, ``p_1``, ``class3_prob``), as the command reads a file's columns.

    Without ``labels``, numbered columns are put in the order of their numbers (the
    classes are the numbers, so ``y_true`` holds them), and other names are the classes
    themselves (``y_true`` holds names). With ``labels``, the names must be these
    classes, or numbers that are these classes; the columns are put in the order of
    ``labels``. Anything else is refused: a column's position says nothing about its
    class.

    Parameters
    ----------
    names : sequence
        The column names, in the frame's order.
    labels : array-like of shape (K,), optional
        The classes, in the order the columns should take.

    Returns
    -------
    order : list of int
        Positions of the columns, in class order.
    labels : ndarray or None
        The ``labels=`` to validate the reordered columns with (None: ``y_true`` holds
        column indices).

    Raises
    ------
    ValueError
        On duplicate names, or names that do not name the given ``labels``.

    Examples
    --------
    >>> frame_class_order(["p2", "p0", "p1"])
    ([1, 2, 0], None)
    >>> frame_class_order(["dog", "cat"])
    ([0, 1], array(['dog', 'cat'], dtype='<U3'))
    >>> frame_class_order(["dog", "cat"], labels=["cat", "dog"])
    ([1, 0], array(['cat', 'dog'], dtype='<U3'))
    >>> frame_class_order(["a", "b"], labels=[0, 1])
    Traceback (most recent call last):
    ...
    ValueError: y_prob's columns ['a', 'b'] do not name the classes [0, 1] ...
    """
    names = _hashable_values(names)
    if len(set(names)) != len(names):
        repeated = sorted({str(name) for name in names if names.count(name) > 1})
        raise ValueError(f"y_prob has duplicate columns {repeated}: each class needs one column")
    numbers = _class_numbers(names)
    if labels is None:
        if numbers is None:
            return list(range(len(names))), np.asarray(names)
        order = sorted(range(len(names)), key=numbers.__getitem__)
        classes = sorted(numbers)
        return order, None if classes == list(range(len(names))) else np.asarray(classes)
    labels = to_numpy(labels, "labels")
    wanted = _hashable_values(labels.tolist()) if labels.ndim == 1 else None
    if wanted is None or len(wanted) != len(names):
        # Not one class per column: check_probabilities says so.
        return list(range(len(names))), labels
    for keys in (names, numbers):
        if keys is not None and set(keys) == set(wanted):
            position = {key: index for index, key in enumerate(keys)}
            return [position[label] for label in wanted], labels
    raise ValueError(
        f"y_prob's columns {names[:10]} do not name the classes {wanted[:10]} of labels=: "
        "name each column by its class or class number (p0, p1, ...), or pass "
        "y_prob.to_numpy() with the columns in the order of labels"
    )


def in_class_order(y_prob, labels):
    """``(y_prob, labels)`` with a DataFrame's columns in class order; other input as given.

    Works on pandas and on Dask DataFrames (whose ``columns`` are known without
    computing them).
    """
    # Frames are 2-D and have columns (a Dask Series answers for ``columns`` too).
    if getattr(y_prob, "ndim", None) != 2 or not hasattr(y_prob, "columns"):
        return y_prob, labels
    names = list(y_prob.columns)
    order, labels = frame_class_order(names, labels)
    if order != list(range(len(names))):
        y_prob = y_prob[[names[position] for position in order]]
    return y_prob, labels


def rows_shifted(message: str, offset: int) -> str:
    """A check's message about a block of rows, its rows counted from the block's start.

    The blocks of a stream and the partitions of a Dask collection are checked one
    at a time; the user needs the row in the whole input.

    Examples
    --------
    >>> rows_shifted("y_prob contains NaN (first in row 50); ...", 200)
    'y_prob contains NaN (first in row 250); ...'
    """
    return _ROW_IN_MESSAGE.sub(lambda match: f"row {int(match.group(1)) + offset}", message)


def _check_no_missing_labels(y_true: np.ndarray) -> None:
    if y_true.ndim != 1 or y_true.dtype.kind not in "fO":
        return
    if y_true.dtype.kind == "f":
        missing = np.isnan(y_true)
    else:
        import pandas as pd

        missing = np.asarray(pd.isna(y_true), dtype=bool)
    if missing.any():
        rows = np.flatnonzero(missing)
        raise ValueError(
            f"y_true has {rows.size} missing label{'s' if rows.size > 1 else ''} (NaN or None; "
            f"first in row {int(rows[0])}): drop those rows or fill in their labels"
        )


def _read_predictions(y_true, y_prob, labels):
    """``(y_true, y_prob, labels)`` as the checks take them.

    A DataFrame's columns put in class order (and read as an array), the labels read
    as a numpy array and refused where one is missing.
    """
    if is_pandas_frame(y_prob):
        y_prob, labels = in_class_order(y_prob, labels)
        y_prob = y_prob.to_numpy()
    y_true = to_numpy(y_true, "y_true")
    _check_no_missing_labels(y_true)
    return y_true, y_prob, labels


def check_predictions(y_true, y_prob, *, labels=None, on_device: bool = False):
    """Validate labels and probabilities as every metric does; map the labels to columns.

    :func:`reliacal._validation.check_probabilities`, after a pandas DataFrame's
    columns are put in class order by their names (:func:`frame_class_order`) and
    after missing labels are refused by name.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels.
    y_prob : array-like of shape (n, K) or (n,), or pandas DataFrame
        Predicted probabilities.
    labels : array-like of shape (K,), optional
        The class of each column (of each named column, for a DataFrame).
    on_device : bool, default=False
        Keep a torch tensor ``y_prob`` where it lies (a CPU tensor only when the
        device paths run on the CPU), for the metrics that compute there; the
        others read it as a numpy array (a host copy).

    Returns
    -------
    y_index, y_prob, classes
        As :func:`reliacal._validation.check_probabilities`; with ``on_device``, a
        torch ``y_prob`` gives tensors on its device
        (:func:`reliacal._validation.check_tensor_probabilities`).

    Examples
    --------
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"p1": [0.9, 0.2], "p0": [0.1, 0.8]})
    >>> y_index, y_prob, classes = check_predictions([1, 0], frame)
    >>> y_prob
    array([[0.1, 0.9],
           [0.8, 0.2]])
    >>> check_predictions([1.0, np.nan], [0.4, 0.6])
    Traceback (most recent call last):
    ...
    ValueError: y_true has 1 missing label (NaN or None; first in row 1): ...
    """
    if on_device and on_its_device(y_prob):
        # Checked on its device; a doubt is diagnosed below, on a host copy.
        checked = check_tensor_probabilities(y_true, y_prob, labels=labels)
        if checked is not None:
            return checked
    y_true, y_prob, labels = _read_predictions(y_true, y_prob, labels)
    return check_probabilities(y_true, y_prob, labels=labels)


def check_prediction_inputs(y_true, y_prob, *, labels=None):
    """:func:`check_predictions` with the probabilities' value checks left to the scan.

    Returns ``(y_index, y_prob, classes, values)``, ``values`` the
    :class:`reliacal._validation.ProbabilityValues` that a pass over a 2-D ``y_prob``
    runs block by block (:func:`reliacal.metrics._predictions.scan_matrix` takes it).
    """
    y_true, y_prob, labels = _read_predictions(y_true, y_prob, labels)
    return check_probability_inputs(y_true, y_prob, labels=labels)
