"""Prediction files (.npz, .npy, .csv, .parquet) read into a Predictions record."""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reliacal.io._columns import number_columns, odd_column, pandas_index_columns

__all__ = ["Predictions", "load_prediction_file"]

# Searched in this order when the caller names no key or column.
PROBABILITY_KEYS = ("probs", "probabilities", "predictions", "y_prob", "proba")
LOGIT_KEYS = ("logits",)
LABEL_KEYS = ("labels", "label", "ground_truth", "y", "y_true", "targets", "target")
TABLE_SUFFIXES = (".csv", ".parquet")
_LOGITS_HINT = "pass logits=True (--logits) or store them under the key 'logits'"


@dataclass(frozen=True)
class Predictions:
    """Probabilities and labels read from a prediction file.

    Attributes
    ----------
    probs : ndarray of shape (n, K) or (n,)
        Validated probabilities (the softmax of ``logits`` when the file held
        logits).
    labels : ndarray of shape (n,)
        The true labels.
    logits : ndarray of shape (n, K) or None
        The logits, when the file held logits; else None.
    source : str
        Which file, keys or columns the arrays came from, for the user.
    classes : ndarray of shape (K,) or None
        The class of each column, when given (``labels=``) or when the file
        names them (a table with non-numeric labels and one column per
        class); None when the labels are column indices (or sorted unique
        values).

    Examples
    --------
    See :func:`load_prediction_file`.
    """

    probs: np.ndarray
    labels: np.ndarray
    logits: np.ndarray | None
    source: str
    classes: np.ndarray | None = None


def load_prediction_file(
    path: str | Path,
    *,
    labels_path: str | Path | None = None,
    probs_key: str | None = None,
    labels_key: str | None = None,
    logits: bool = False,
    labels: Sequence | None = None,
) -> Predictions:
    """Read predicted probabilities (or logits) and true labels from a file.

    Formats, chosen by the file suffix:

    - ``.npz``: the predictions under ``probs_key``, or else the first of the
      keys ``probs``, ``probabilities``, ``predictions``, ``y_prob``,
      ``proba``, ``logits``; the labels under ``labels_key``, or else the
      first of ``labels``, ``label``, ``ground_truth``, ``y``, ``y_true``,
      ``targets``, ``target`` (or from ``labels_path``).
    - ``.npy``: one array of predictions; the labels come from
      ``labels_path`` (``.npy``, ``.npz``, ``.csv`` or ``.parquet``).
    - ``.csv`` / ``.parquet``: one row per sample; the label column is
      ``labels_key`` or the first column with a name from the list above,
      and every other column is a class probability (or only the columns
      whose name starts with ``probs_key``, when given). A single
      probability column is the positive-class probability of a binary
      problem. Non-numeric labels (``"cat"``) name their column: the
      column name without the ``probs_key`` prefix (``p_cat``). Numeric
      labels are matched to the class numbers in the column names when
      every name is a number between a shared prefix and suffix (``p_1, p_0`` or
      ``p0, p1, p10, p2, ...`` are put in class order; numbers other than
      ``0..K-1`` become ``Predictions.classes``); other names keep the
      file's order. A column outside such a numbered set, pandas' index
      column (``Unnamed: 0``) and two names for one class are refused.

    Values are logits only when the caller says so: the key is named
    ``logits`` or ``logits=True``; then the softmax gives the probabilities.
    Probabilities are never guessed from logits.

    Parameters
    ----------
    path : str or Path
        The prediction file.
    labels_path : str or Path or None, default=None
        A separate file with the labels.
    probs_key : str or None, default=None
        Key (``.npz``) or column-name prefix (tables) of the predictions.
    labels_key : str or None, default=None
        Key or column name of the labels.
    logits : bool, default=False
        The predictions are logits (softmax is applied).
    labels : sequence or None, default=None
        The label of each prediction column, in column order (then
        ``Predictions.classes``). Required for non-numeric labels in
        ``.npz`` and ``.npy`` files; names given as strings are converted to
        the type of numeric labels (``["3", "5"]`` for labels 3 and 5).

    Returns
    -------
    Predictions

    Raises
    ------
    FileNotFoundError
        When a file does not exist.
    ValueError
        Unknown suffix or key, labels missing, lengths that disagree, or
        predictions that are not probabilities (the message says how to pass
        logits).

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> tmp = tempfile.mkdtemp()
    >>> file = os.path.join(tmp, "preds.npz")
    >>> np.savez(file, logits=np.array([[2.0, 0.0], [0.0, 1.0]]), y=np.array([0, 1]))
    >>> preds = load_prediction_file(file)
    >>> preds.source
    "preds.npz: logits from key 'logits' (softmax applied), labels from key 'y'"
    >>> np.round(preds.probs, 3)
    array([[0.881, 0.119],
           [0.269, 0.731]])
    >>> np.savez(file, probs=np.array([[0.9, 0.1], [0.3, 0.7]]), y=np.array(["cat", "dog"]))
    >>> load_prediction_file(file, labels=["cat", "dog"]).classes
    array(['cat', 'dog'], dtype='<U3')
    """
    path = Path(path)
    _require_file(path)
    suffix = path.suffix.lower()
    table = None
    if suffix == ".npz":
        values, file_labels, values_from, labels_from = _read_npz(path, probs_key, labels_key)
    elif suffix == ".npy":
        values, file_labels = _load_array(path, "the array", lambda: _load_npy(path)), None
        values_from = labels_from = ""
        if labels_path is None:
            raise ValueError(
                f"{path.name} holds one array (the predictions); give the labels in a second "
                "file (--labels FILE)"
            )
    elif suffix in TABLE_SUFFIXES:
        table = _read_table(path, probs_key, labels_key, labels_in_table=labels_path is None)
        values, file_labels = table.values, table.labels
        labels_from = f"column {table.label_column!r}"
    else:
        raise ValueError(
            f"{path.name}: unknown prediction file type {suffix!r}; "
            "use .npz, .npy, .csv or .parquet"
        )
    if labels_path is not None:
        file_labels, labels_from = _read_labels_file(Path(labels_path), labels_key)
    if table is not None:
        table = _arrange_table(path, table, file_labels, labels)
        values, values_from = table.values, table.description

    logits = logits or values_from.endswith("'logits'")
    values_from = values_from or "the array"
    description = f"{path.name}: {'logits' if logits else 'probabilities'} from {values_from}"
    description += " (softmax applied)" if logits else ""
    source = f"{description}, labels from {labels_from}"
    return _validated(path, values, file_labels, logits, source, table, labels)


def _require_file(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if not path.is_file():
        raise ValueError(f"{path} is not a file")


def _pick_key(available: list[str], requested: str | None, candidates: tuple[str, ...], what: str):
    if requested is not None:
        if requested not in available:
            raise ValueError(
                f"no {what} key {requested!r} in the file; it has: {', '.join(available)}"
            )
        return requested
    for candidate in candidates:
        if candidate in available:
            return candidate
    return None


def _open_npz(path: Path):
    # np.load reads a file that is not a zip archive as a pickle, whose error talks of
    # allow_pickle; say what is wrong with the file instead.
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path.name} is not a valid .npz file (not a complete zip archive)")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as error:  # a damaged archive
        raise ValueError(f"{path.name} cannot be read as .npz: {error}") from None


def _read_npz(path: Path, probs_key: str | None, labels_key: str | None):
    with _open_npz(path) as archive:
        keys = list(archive.files)
        value_key = _pick_key(keys, probs_key, PROBABILITY_KEYS + LOGIT_KEYS, "prediction")
        if value_key is None:
            raise ValueError(
                f"{path.name} has no prediction key (looked for {', '.join(PROBABILITY_KEYS)}, "
                f"logits); it has: {', '.join(keys)}; name one with --probs-key"
            )
        label_key = _pick_key(keys, labels_key, LABEL_KEYS, "label")
        labels = None
        if label_key is not None:
            labels = _load_array(path, f"key {label_key!r}", lambda: archive[label_key])
        values = _load_array(path, f"key {value_key!r}", lambda: archive[value_key])
        return values, labels, f"key {value_key!r}", f"key {label_key!r}"


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as error:
        if "Object arrays" in str(error):
            raise
        # numpy reads a file without the .npy header as a pickle and suggests unpickling it.
        raise ValueError(f"{path.name} is not a valid .npy file") from None
    except (OSError, EOFError) as error:
        raise ValueError(f"{path.name} cannot be read as .npy: {error}") from None


def _load_array(path: Path, where: str, load) -> np.ndarray:
    """``load()``, with numpy's refusal of object arrays explained for this file and key."""
    try:
        return load()
    except ValueError as error:
        if "Object arrays" not in str(error):
            raise
        # Loading Python objects would run code from the file, so they stay refused; say how
        # to write the array in a form numpy stores as plain data.
        raise ValueError(
            f"{path.name}: {where} holds Python objects (dtype=object), which are not loaded "
            "from files for safety; save it as numbers or as fixed-width strings, e.g. "
            "np.asarray(values, dtype=str) or values.astype(int), before np.save/np.savez"
        ) from None


def _read_dataframe(path: Path):
    import pandas as pd

    try:
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path)
        return pd.read_parquet(path)
    except (OSError, ValueError, ImportError) as error:
        raise ValueError(f"{path.name} cannot be read as a table: {error}") from None


@dataclass(frozen=True)
class _Table:
    """The value columns of a table, before and after they are put in class order."""

    values: np.ndarray  # (n, K), or (n,) for one column
    labels: np.ndarray | None
    label_column: str | None
    columns: list[str]  # the value columns' names, in the order of ``values``
    names: list[str]  # the same without the probs_key prefix
    classes: np.ndarray | None = None  # the class of each column, when the names say it
    description: str = ""


def _read_table(
    path: Path, probs_key: str | None, labels_key: str | None, labels_in_table: bool
) -> _Table:
    return table_from_frame(path, _read_dataframe(path), probs_key, labels_key, labels_in_table)


def table_from_frame(
    path: Path, frame, probs_key: str | None, labels_key: str | None, labels_in_table: bool
) -> _Table:
    """The label and value columns of a DataFrame read from ``path`` (a whole file or a batch)."""
    columns = [str(column) for column in frame.columns]
    frame.columns = columns
    label_column = None
    if labels_in_table:
        label_column = _pick_key(columns, labels_key, LABEL_KEYS, "label column")
        if label_column is None:
            raise ValueError(
                f"{path.name} has no label column (looked for {', '.join(LABEL_KEYS)}); "
                "name it with --labels-key or give --labels FILE"
            )
    value_columns = [
        column
        for column in columns
        if column != label_column and (probs_key is None or column.startswith(probs_key))
    ]
    if not value_columns:
        raise ValueError(f"{path.name} has no probability columns")
    index_columns = pandas_index_columns(value_columns)
    if index_columns:
        raise ValueError(
            f"{path.name}: column {index_columns[0]!r} has no name in the file: it is the row "
            "index that pandas writes unless to_csv(..., index=False), not a class; write the "
            "file with index=False, or select the class columns with --probs-key PREFIX"
        )
    from pandas.api.types import is_numeric_dtype

    non_numeric = [column for column in value_columns if not is_numeric_dtype(frame[column])]
    if non_numeric:
        raise ValueError(f"{path.name}: columns {non_numeric} are not numeric")
    values = frame[value_columns].to_numpy(dtype=np.float64)
    if len(value_columns) == 1:
        values = values[:, 0]
    return _Table(
        values=values,
        labels=None if label_column is None else frame[label_column].to_numpy(),
        label_column=label_column,
        columns=value_columns,
        names=[column[len(probs_key or "") :] for column in value_columns],
    )


def _arrange_table(path: Path, table: _Table, labels, given_classes) -> _Table:
    """Put the value columns in class order and say which class each holds.

    Non-numeric labels name their columns; numeric labels are matched to the
    class numbers in the column names (``p_1, p_0`` is reordered to class 0
    then 1); names without numbers leave the columns in file order. With
    ``labels=`` (--classes) the caller gives the class of each column in file
    order, which no name overrides.
    """
    order, classes = list(range(len(table.columns))), None
    numeric = labels is not None and np.asarray(labels).dtype.kind in "biuf"
    if table.values.ndim == 2 and given_classes is None and labels is not None:
        if not numeric:
            classes = np.asarray(table.names)
        else:
            order, classes = _numbered_order(path, table)
    columns = [table.columns[position] for position in order]
    values = table.values if order == sorted(order) else table.values[:, order]
    shown = ", ".join(columns[:3]) + (", ..." if len(columns) > 3 else "")
    description = f"{len(columns)} columns ({shown})"
    if order != sorted(order):
        description += " put in the order of the class numbers in their names"
    return _Table(
        values=values,
        labels=table.labels,
        label_column=table.label_column,
        columns=columns,
        names=[table.names[position] for position in order],
        classes=classes,
        description=description,
    )


def _numbered_order(path: Path, table: _Table) -> tuple[list[int], np.ndarray | None]:
    """Column order and classes from the numbers in the column names (numeric labels)."""
    try:
        numbering = number_columns(table.names)
    except ValueError as error:
        raise ValueError(f"{path.name}: {error}") from None
    if numbering is None:
        return list(range(len(table.columns))), None
    if numbering.strays:
        strays = [table.columns[position] for position in numbering.strays]
        numbered = [table.columns[position] for position in numbering.order]
        shown = numbered if len(numbered) <= 3 else [*numbered[:2], "...", numbered[-1]]
        # The names were read without the --probs-key prefix; the hint needs the whole one.
        given_prefix = table.columns[0][: len(table.columns[0]) - len(table.names[0])]
        prefix = given_prefix + numbering.prefix
        pattern = f"{prefix}<class>{numbering.suffix}"
        row_sums = table.values.sum(axis=1)
        worst = int(np.argmax(np.abs(row_sums - 1)))
        effect = (
            f"with {'them' if len(strays) > 1 else 'it'} the rows do not sum to 1 "
            f"(row {worst} sums to {row_sums[worst]:.6g})"
            if abs(row_sums[worst] - 1) > 1e-4
            else "so the class of each column is unknown"
        )
        raise ValueError(
            f"{path.name}: column{'s' if len(strays) > 1 else ''} "
            f"{', '.join(repr(name) for name in strays)} "
            f"{'are' if len(strays) > 1 else 'is'} not named like the class columns "
            f"{', '.join(shown)} ({pattern}): {effect}; select the class columns with "
            f"--probs-key {prefix or 'PREFIX'}, or drop the others"
        )
    numbers = numbering.numbers
    # Numbers 0..K-1 are column indices, as integer labels are without names.
    classes = None if numbers == list(range(len(numbers))) else np.asarray(numbers)
    return numbering.order, classes


def _read_labels_file(path: Path, labels_key: str | None) -> tuple[np.ndarray, str]:
    _require_file(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _load_array(path, "the labels", lambda: _load_npy(path)), path.name
    if suffix == ".npz":
        with _open_npz(path) as archive:
            keys = list(archive.files)
            key = _pick_key(keys, labels_key, LABEL_KEYS, "label")
            if key is None:
                if len(keys) != 1:
                    raise ValueError(
                        f"{path.name} has no label key (looked for {', '.join(LABEL_KEYS)}); "
                        f"it has: {', '.join(keys)}"
                    )
                key = keys[0]
            labels = _load_array(path, f"key {key!r}", lambda: archive[key])
            return labels, f"{path.name} key {key!r}"
    if suffix in TABLE_SUFFIXES:
        frame = _read_dataframe(path)
        columns = [str(column) for column in frame.columns]
        frame.columns = columns
        column = _pick_key(columns, labels_key, LABEL_KEYS, "label column")
        if column is None:
            if len(columns) != 1:
                raise ValueError(f"{path.name} has no label column; name it with --labels-key")
            column = columns[0]
        return frame[column].to_numpy(), f"{path.name} column {column!r}"
    raise ValueError(f"{path.name}: unknown label file type {suffix!r}; use .npy, .npz, .csv")


def _validated(path: Path, values, labels, from_logits: bool, source: str, table, given_classes):
    from reliacal._validation import check_logits, check_probabilities
    from reliacal.metrics import softmax

    if labels is None:
        raise ValueError(
            f"{path.name} has no labels (looked for keys {', '.join(LABEL_KEYS)}); "
            "name the key with --labels-key or give --labels FILE"
        )
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"{path.name}: labels must be one-dimensional, got shape {labels.shape}")
    classes = None
    if given_classes is not None:
        classes = _given_classes(path, given_classes, labels, values)
    elif table is not None:
        classes = table.classes
    logit_values = None
    try:
        if from_logits:
            logit_values = check_logits(values, name="logits")
            values = softmax(logit_values)
        # The validated labels and probabilities are discarded: the point is the error message.
        check_probabilities(labels, values, labels=classes)
    except ValueError as error:
        columns = None if table is None else table.columns
        message = _explain_not_probabilities(error, values, columns, from_logits)
        raise ValueError(f"{path.name}: {message}") from None
    return Predictions(np.asarray(values), labels, logit_values, source, classes)


def _explain_not_probabilities(error: ValueError, values, columns, from_logits: bool) -> str:
    """A prediction file's words for values that failed the probability check.

    ``columns`` names the value columns of a table (None for an array file).
    Shared by this loader and the parquet stream.
    """
    from reliacal._validation import _SOFTMAX_HINT, _row_sum_tolerance

    if columns is not None and not from_logits and np.ndim(values) == 2:
        odd = odd_column(np.asarray(values), _row_sum_tolerance(values))
        if odd is not None:
            # One extra column (an identifier, a weight) explains it: name it, not logits.
            return (
                f"column {columns[odd]!r} is not a class probability: without it every row "
                "sums to 1; select the class columns with --probs-key PREFIX, or drop it"
            )
    # Where the check suspects logits, say how to pass them to this loader instead.
    message = str(error).replace(_SOFTMAX_HINT, _LOGITS_HINT)
    return message.replace("pass labels=[...]", "pass labels=[...] (--classes A,B,...)")


def _given_classes(path: Path, given, labels: np.ndarray, values) -> np.ndarray:
    classes = np.asarray(given)
    if classes.ndim != 1:
        raise ValueError(f"labels= must be a flat list of class names, got shape {classes.shape}")
    n_columns = {1: 2, 2: np.shape(values)[-1]}.get(np.ndim(values), len(classes))
    if len(classes) != n_columns:
        raise ValueError(
            f"{path.name}: {len(classes)} class names given (labels=, --classes) for "
            f"{n_columns} prediction columns; give one name per column"
        )
    if labels.dtype.kind in "biuf" and classes.dtype.kind in "OSU":
        try:
            classes = classes.astype(labels.dtype)
        except ValueError:
            raise ValueError(
                f"{path.name} has numeric labels, but the class names {list(given)[:5]} are not "
                "numbers"
            ) from None
    return classes
