"""Prediction files (.npz, .npy, .csv, .parquet) read into a Predictions record."""

from __future__ import annotations

import fnmatch
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reliacal.io._columns import (
    label_affixes,
    names_logits,
    number_columns,
    odd_column,
    pandas_index_columns,
)

__all__ = ["Predictions", "is_key_pattern", "load_prediction_file", "prediction_keys"]

# Searched in this order when the caller names no key or column.
PROBABILITY_KEYS = ("probs", "probabilities", "predictions", "y_prob", "proba")
LOGIT_KEYS = ("logits",)
LABEL_KEYS = ("labels", "label", "ground_truth", "y", "y_true", "targets", "target")
TABLE_SUFFIXES = (".csv", ".parquet")
_LOGITS_HINT = (
    "pass logits=True (--logits), or store them under the key 'logits' (columns "
    "'logit_0', 'logit_1', ... in a table)"
)
# What makes --probs-key a pattern of .npz keys rather than one key.
_PATTERN_CHARACTERS = frozenset("*?[")


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
    columns : tuple of str or None
        The names of a table's value columns, in the order of the columns of
        ``probs`` (``("p_cat", "p_dog")``); None for ``.npz`` and ``.npy``
        files. A file written from these predictions can keep the names.

    Examples
    --------
    See :func:`load_prediction_file`.
    """

    probs: np.ndarray
    labels: np.ndarray
    logits: np.ndarray | None
    source: str
    classes: np.ndarray | None = None
    columns: tuple[str, ...] | None = None


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
      ``targets``, ``target`` (or from ``labels_path``). A ``probs_key``
      with ``*``, ``?`` or ``[`` is a pattern that must match one key
      (:func:`prediction_keys` lists every match).
    - ``.npy``: one array of predictions; the labels come from
      ``labels_path`` (``.npy``, ``.npz``, ``.csv`` or ``.parquet``).
    - ``.csv`` / ``.parquet``: one row per sample; the label column is
      ``labels_key`` or the first column with a name from the list above,
      and every other column is a class probability (or only the columns
      whose name starts with ``probs_key``, when given). A single
      probability column is the positive-class probability of a binary
      problem. Non-numeric labels (``"cat"``) name their column: the
      column name is the label between a prefix and a suffix that every
      column shares (``p_cat``, ``cat_prob``, or ``cat``). Numeric
      labels are matched to the class numbers in the column names when
      every name is a number between a shared prefix and suffix (``p_1, p_0`` or
      ``p0, p1, p10, p2, ...`` are put in class order; numbers other than
      ``0..K-1`` become ``Predictions.classes``); other names keep the
      file's order. A column outside such a numbered set, pandas' index
      column (``Unnamed: 0``) and two names for one class are refused.

    Values are logits only when the file or the caller says so: the key is
    named ``logits`` (or ``logits_<model>``), the table's value columns all
    start with ``logit`` (``logit_0, logit_1, ...``), or ``logits=True``;
    then the softmax gives the probabilities. Probabilities are never
    guessed from logits.

    Parameters
    ----------
    path : str or Path
        The prediction file.
    labels_path : str or Path or None, default=None
        A separate file with the labels.
    probs_key : str or None, default=None
        Key (``.npz``; a pattern such as ``probs_*`` that matches one key) or
        column-name prefix (tables) of the predictions.
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
    >>> import pandas as pd
    >>> table = os.path.join(tmp, "pets.csv")
    >>> pets = pd.DataFrame({"p_dog": [0.2, 0.6], "p_cat": [0.8, 0.4], "label": ["cat", "dog"]})
    >>> pets.to_csv(table, index=False)
    >>> pets = load_prediction_file(table)
    >>> pets.classes, pets.columns
    (array(['dog', 'cat'], dtype='<U3'), ('p_dog', 'p_cat'))
    """
    path = Path(path)
    _require_file(path)
    suffix = path.suffix.lower()
    table = None
    # The names (the .npz key, the table's columns) that the values came from.
    names: list[str] = []
    if suffix == ".npz":
        values, file_labels, value_key, labels_from = _read_npz(path, probs_key, labels_key)
        names, values_from = [value_key], f"key {value_key!r}"
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
        values, values_from, names = table.values, table.description, table.columns
    # The key 'logits', or columns logit_0, logit_1, ...: the names say logits.
    named_logits = not logits and names_logits(names)
    logits = logits or named_logits
    values_from = values_from or "the array"
    description = f"{path.name}: {'logits' if logits else 'probabilities'} from {values_from}"
    description += " (softmax applied)" if logits else ""
    source = f"{description}, labels from {labels_from}"
    if named_logits:
        warn_if_probabilities(path, values, values_from)
    return _validated(path, values, file_labels, logits, source, table, labels)


def warn_if_probabilities(path: Path, values, values_from: str) -> None:
    """Warn when values that their names call logits are probabilities, rows summing to 1.

    ``values_from`` says where they are (``key 'logits'``, ``2 columns (logit_0, logit_1)``).
    """
    from reliacal._validation import _row_sum_tolerance

    values = np.asarray(values)
    if values.ndim != 2 or values.size == 0 or values.dtype.kind not in "biuf":
        return
    if not (values.min() >= 0 and values.max() <= 1):
        return
    if np.all(np.abs(values.sum(axis=1) - 1) <= _row_sum_tolerance(values)):
        warnings.warn(
            f"{path.name}: the values of {values_from} are named as logits, but every row "
            "is in [0, 1] and sums to 1 like probabilities; the softmax is applied as the "
            "names say (if they are probabilities, name them probs, or p_0, p_1, ...)",
            UserWarning,
            stacklevel=3,
        )


def _require_file(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a prediction file")
    if not path.is_file():
        raise ValueError(f"{path} is not a file")


def is_key_pattern(probs_key: str | None) -> bool:
    """Whether ``probs_key`` is a pattern of keys (``probs_*``) rather than one key.

    Examples
    --------
    >>> is_key_pattern("probs_*"), is_key_pattern("probs"), is_key_pattern(None)
    (True, False, False)
    """
    return probs_key is not None and not _PATTERN_CHARACTERS.isdisjoint(probs_key)


def prediction_keys(path: str | Path, pattern: str, *, labels_key: str | None = None) -> list[str]:
    """The keys of an ``.npz`` file that match a shell-style pattern, in file order.

    One file may hold the predictions of several models, one key each (the
    demo's ``probs_<method>``); the labels' key is never among them.

    Parameters
    ----------
    path : str or Path
        An ``.npz`` file.
    pattern : str
        A pattern of :mod:`fnmatch` (``*``, ``?``, ``[...]``), matched
        case-sensitively, as keys are.
    labels_key : str or None, default=None
        The labels' key; None: the first of the label keys that
        :func:`load_prediction_file` looks for.

    Returns
    -------
    list of str
        At least one key.

    Raises
    ------
    ValueError
        When the file is not an ``.npz`` file or no key matches.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> file = os.path.join(tempfile.mkdtemp(), "models.npz")
    >>> probs = np.array([[0.9, 0.1], [0.3, 0.7]])
    >>> np.savez(file, probs_raw=probs, probs_ts=probs, labels=np.array([0, 1]))
    >>> prediction_keys(file, "probs_*")
    ['probs_raw', 'probs_ts']
    """
    path = Path(path)
    _require_file(path)
    if path.suffix.lower() != ".npz":
        raise ValueError(
            f"{path.name}: a pattern such as {pattern!r} selects the keys of an .npz file; "
            "in a table, --probs-key is the prefix of the class columns (e.g. --probs-key p_)"
        )
    with _open_npz(path) as archive:
        keys = list(archive.files)
    label_key = _pick_key(keys, labels_key, LABEL_KEYS, "label")
    matches = [key for key in keys if key != label_key and fnmatch.fnmatchcase(key, pattern)]
    if not matches:
        raise ValueError(f"{path.name}: no key matches {pattern!r}; it has: {', '.join(keys)}")
    return matches


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
    if is_key_pattern(probs_key):
        matches = prediction_keys(path, probs_key, labels_key=labels_key)
        if len(matches) > 1:
            raise ValueError(
                f"{path.name}: {len(matches)} keys match {probs_key!r} "
                f"({', '.join(matches)}); name one of them"
            )
        probs_key = matches[0]
    with _open_npz(path) as archive:
        keys = list(archive.files)
        value_key = _pick_key(keys, probs_key, PROBABILITY_KEYS + LOGIT_KEYS, "prediction")
        if value_key is None:
            hint = _pattern_hint(keys, labels_key)
            raise ValueError(
                f"{path.name} has no prediction key (looked for {', '.join(PROBABILITY_KEYS)}, "
                f"logits); it has: {', '.join(keys)}; name one with --probs-key{hint}"
            )
        label_key = _pick_key(keys, labels_key, LABEL_KEYS, "label")
        labels = None
        if label_key is not None:
            labels = _load_array(path, f"key {label_key!r}", lambda: archive[label_key])
        values = _load_array(path, f"key {value_key!r}", lambda: archive[value_key])
        return values, labels, value_key, f"key {label_key!r}"


def _pattern_hint(keys: list[str], labels_key: str | None) -> str:
    """``, or all of them with --probs-key 'probs_*'`` when several keys share a prefix."""
    label_key = _pick_key(keys, labels_key, LABEL_KEYS, "label")
    others = [key for key in keys if key != label_key]
    prefix = others[0].split("_")[0] + "_" if others and "_" in others[0] else None
    if prefix is None or sum(key.startswith(prefix) for key in others) < 2:
        return ""
    return f", or evaluate all of them with --probs-key '{prefix}*'"


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
    if is_key_pattern(probs_key):
        raise ValueError(
            f"{path.name}: --probs-key {probs_key!r} is a pattern of .npz keys; in a table it "
            f"is the prefix of the class columns (e.g. --probs-key {probs_key.rstrip('*?[]')})"
        )
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

    Non-numeric labels name their columns (``p_cat`` holds the class
    ``cat``: the label between a prefix and a suffix that every column
    shares); numeric labels are matched to the class numbers in the column
    names (``p_1, p_0`` is reordered to class 0 then 1); names without
    numbers leave the columns in file order. With ``labels=`` (--classes)
    the caller gives the class of each column in file order, which no name
    overrides.
    """
    order, classes = list(range(len(table.columns))), None
    numeric = labels is not None and np.asarray(labels).dtype.kind in "biuf"
    if table.values.ndim == 2 and given_classes is None and labels is not None:
        if not numeric:
            classes = _labelled_classes(table.names, labels)
        else:
            order, classes = _numbered_order(path, table)
    columns = [table.columns[position] for position in order]
    values = table.values if order == sorted(order) else table.values[:, order]
    shown = ", ".join(columns[:3]) + (", ..." if len(columns) > 3 else "")
    description = f"{len(columns)} column{'s' if len(columns) > 1 else ''} ({shown})"
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


def _labelled_classes(names: list[str], labels) -> np.ndarray:
    """The class of each column of non-numeric labels: its name without a shared prefix/suffix.

    When no prefix and suffix leave names among which every label is found,
    the names themselves are the classes, and the probability check says
    which labels are not among them.
    """
    affixes = label_affixes(names, labels)
    if affixes is None:
        return np.asarray(names)
    prefix, suffix = affixes
    return np.asarray([name[len(prefix) : len(name) - len(suffix)] for name in names])


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
    if from_logits and np.ndim(values) == 1:
        raise ValueError(
            f"{path.name}: logits are read as one column per class (two for a binary "
            "problem); one column is read as the positive-class probability"
        )
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
    columns = None if table is None else tuple(table.columns)
    return Predictions(np.asarray(values), labels, logit_values, source, classes, columns)


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
            f"{path.name}: {len(classes)} class name{'s' if len(classes) != 1 else ''} given "
            f"(labels=, --classes) for {n_columns} prediction columns; give one name per column"
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
