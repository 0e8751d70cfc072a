"""Reading prediction files written by other tools into validated probabilities and labels.

``.npz``, ``.npy``, ``.csv`` and ``.parquet`` files become a
:class:`Predictions` record (probabilities, labels, the class of each column
and a one-line description of where each came from), as the ``reliacal``
command reads them.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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
      column name without the ``probs_key`` prefix (``p_cat``).

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
    column_names = None
    if suffix == ".npz":
        values, file_labels, values_from, labels_from = _read_npz(path, probs_key, labels_key)
    elif suffix == ".npy":
        values, file_labels = np.load(path, allow_pickle=False), None
        values_from = labels_from = ""
        if labels_path is None:
            raise ValueError(
                f"{path.name} holds one array (the predictions); give the labels in a second "
                "file (--labels FILE)"
            )
    elif suffix in TABLE_SUFFIXES:
        values, file_labels, values_from, labels_from, column_names = _read_table(
            path, probs_key, labels_key, labels_in_table=labels_path is None
        )
    else:
        raise ValueError(
            f"{path.name}: unknown prediction file type {suffix!r}; "
            "use .npz, .npy, .csv or .parquet"
        )
    if labels_path is not None:
        file_labels, labels_from = _read_labels_file(Path(labels_path), labels_key)

    logits = logits or values_from.endswith("'logits'")
    values_from = values_from or "the array"
    description = f"{path.name}: {'logits' if logits else 'probabilities'} from {values_from}"
    description += " (softmax applied)" if logits else ""
    source = f"{description}, labels from {labels_from}"
    return _validated(path, values, file_labels, logits, source, column_names, labels)


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
        labels = None if label_key is None else archive[label_key]
        return archive[value_key], labels, f"key {value_key!r}", f"key {label_key!r}"


def _read_dataframe(path: Path):
    import pandas as pd

    try:
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path)
        return pd.read_parquet(path)
    except (OSError, ValueError, ImportError) as error:
        raise ValueError(f"{path.name} cannot be read as a table: {error}") from None


def _read_table(path: Path, probs_key: str | None, labels_key: str | None, labels_in_table: bool):
    frame = _read_dataframe(path)
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
    from pandas.api.types import is_numeric_dtype

    non_numeric = [column for column in value_columns if not is_numeric_dtype(frame[column])]
    if non_numeric:
        raise ValueError(f"{path.name}: columns {non_numeric} are not numeric")
    values = frame[value_columns].to_numpy(dtype=np.float64)
    if len(value_columns) == 1:
        values = values[:, 0]
    labels = None if label_column is None else frame[label_column].to_numpy()
    shown = ", ".join(value_columns[:3]) + (", ..." if len(value_columns) > 3 else "")
    column_names = [column[len(probs_key or "") :] for column in value_columns]
    return (
        values,
        labels,
        f"{len(value_columns)} columns ({shown})",
        f"column {label_column!r}",
        column_names,
    )


def _read_labels_file(path: Path, labels_key: str | None) -> tuple[np.ndarray, str]:
    _require_file(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return np.load(path, allow_pickle=False), path.name
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
            return archive[key], f"{path.name} key {key!r}"
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


def _validated(
    path: Path, values, labels, from_logits: bool, source: str, column_names, given_classes
):
    from reliacal._validation import _SOFTMAX_HINT, check_logits, check_probabilities
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
        classes = _given_classes(path, given_classes, labels)
    elif labels.dtype.kind not in "biuf" and column_names is not None:
        classes = np.asarray(column_names)
    logit_values = None
    try:
        if from_logits:
            logit_values = check_logits(values, name="logits")
            values = softmax(logit_values)
        # The validated labels and probabilities are discarded: the point is the error message.
        check_probabilities(labels, values, labels=classes)
    except ValueError as error:
        # Where the check suspects logits, say how to pass them to this loader instead.
        message = str(error).replace(_SOFTMAX_HINT, _LOGITS_HINT)
        message = message.replace("pass labels=[...]", "pass labels=[...] (--classes A,B,...)")
        raise ValueError(f"{path.name}: {message}") from None
    return Predictions(np.asarray(values), labels, logit_values, source, classes)


def _given_classes(path: Path, given, labels: np.ndarray) -> np.ndarray:
    classes = np.asarray(given)
    if classes.ndim != 1:
        raise ValueError(f"labels= must be a flat list of class names, got shape {classes.shape}")
    if labels.dtype.kind in "biuf" and classes.dtype.kind in "OSU":
        try:
            classes = classes.astype(labels.dtype)
        except ValueError:
            raise ValueError(
                f"{path.name} has numeric labels, but the class names {list(given)[:5]} are not "
                "numbers"
            ) from None
    return classes
