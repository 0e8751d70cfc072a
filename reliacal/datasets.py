"""The embedded demo data, the demo's tiny classifier, and loaders for prediction files.

Two jobs live here, both about getting data into the package:

- the demo data: scikit-learn's bundled digits as small images, a tiny timm
  Vision Transformer for them, a fixed train / calibration / test split, and
  the plain cross-entropy training run (through the shared loop in
  :mod:`reliacal.training`);
- prediction files written by other tools (``.npz``, ``.npy``, ``.csv``,
  ``.parquet``), read into validated probabilities and labels for the
  ``reliacal`` command.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported lazily at run time: torch and timm are slow to import
    import torch
    from timm.models.vision_transformer import VisionTransformer

    from reliacal.training import TrainingConfig, TrainingResult

__all__ = [
    "DataSplits",
    "Predictions",
    "default_digits_training_config",
    "load_digits_images",
    "load_prediction_file",
    "make_tiny_vit",
    "train_calibration_test_split",
    "train_digits_classifier",
]

# Searched in this order when the caller names no key or column.
PROBABILITY_KEYS = ("probs", "probabilities", "predictions", "y_prob", "proba")
LOGIT_KEYS = ("logits",)
LABEL_KEYS = ("labels", "label", "ground_truth", "y", "y_true", "targets", "target")
TABLE_SUFFIXES = (".csv", ".parquet")
_LOGITS_HINT = "pass logits=True (--logits) or store them under the key 'logits'"


def load_digits_images(image_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Return scikit-learn's digits as single-channel images of side ``image_size``.

    The 1,797 bundled 8x8 images (grey levels 0..16) are scaled to [0, 1] and
    resized with bilinear interpolation, so that a Vision Transformer with
    4x4 patches sees a 4x4 grid of patches at the default size. Bilinear
    weights are a convex combination, so values stay in [0, 1].

    Parameters
    ----------
    image_size : int, default=16
        Side length of the returned images (at least 8).

    Returns
    -------
    X : ndarray of shape (1797, 1, image_size, image_size), float32
        Pixel intensities in [0, 1].
    y : ndarray of shape (1797,), int64
        Digit labels 0..9.

    Examples
    --------
    >>> X, y = load_digits_images(image_size=16)
    >>> X.shape, X.dtype, y[:5]
    ((1797, 1, 16, 16), dtype('float32'), array([0, 1, 2, 3, 4]))
    >>> bool(X.min() >= 0.0 and X.max() <= 1.0)
    True
    """
    import torch
    from sklearn.datasets import load_digits

    if int(image_size) != image_size or image_size < 8:
        raise ValueError(f"image_size must be an integer of at least 8, got {image_size!r}")
    digits = load_digits()
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)
    if image_size != 8:
        images = torch.nn.functional.interpolate(
            images, size=(int(image_size), int(image_size)), mode="bilinear", align_corners=False
        )
    return images.numpy().astype(np.float32), digits.target.astype(np.int64)


def make_tiny_vit(
    num_classes: int = 10,
    image_size: int = 16,
    *,
    patch_size: int = 4,
    embed_dim: int = 64,
    depth: int = 4,
    num_heads: int = 4,
    in_chans: int = 1,
    mlp_ratio: float = 2.0,
    random_state: int | None = None,
    **kwargs: Any,
) -> VisionTransformer:
    """Build a small timm Vision Transformer with random weights.

    The default (16x16 single-channel input, 4x4 patches, width 64, 4 blocks
    of 4 heads) has about 140k parameters and trains on the digits in a
    minute on two CPU cores. Nothing is downloaded (``pretrained=False``).

    Parameters
    ----------
    num_classes : int, default=10
        Size of the classification head.
    image_size : int, default=16
        Input side length; must be a multiple of ``patch_size``.
    patch_size, embed_dim, depth, num_heads, in_chans, mlp_ratio
        Passed to :class:`timm.models.vision_transformer.VisionTransformer`.
    random_state : int or None, default=None
        Seed for the weight initialisation (the global torch generator is
        left untouched); ``None`` draws from the global generator.
    **kwargs
        Further ``VisionTransformer`` arguments (e.g. ``drop_rate``).

    Returns
    -------
    timm.models.vision_transformer.VisionTransformer
        A model in training mode, on the CPU.

    Examples
    --------
    >>> import torch
    >>> model = make_tiny_vit(num_classes=10, image_size=16, random_state=0)
    >>> model(torch.zeros(2, 1, 16, 16)).shape
    torch.Size([2, 10])
    """
    import torch
    from timm.models.vision_transformer import VisionTransformer

    if image_size % patch_size:
        raise ValueError(
            f"image_size ({image_size}) must be a multiple of patch_size ({patch_size})"
        )

    def build() -> VisionTransformer:
        return VisionTransformer(
            img_size=image_size,
            patch_size=patch_size,
            in_chans=in_chans,
            num_classes=num_classes,
            embed_dim=embed_dim,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            **kwargs,
        )

    if random_state is None:
        return build()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(random_state)
        return build()


@dataclass(frozen=True)
class DataSplits:
    """Three disjoint parts of one data set: train, calibration and test.

    Attributes
    ----------
    X_train, y_train : ndarray
        Data to fit the classifier on.
    X_calibration, y_calibration : ndarray
        Held-out data to fit post-hoc calibrators on.
    X_test, y_test : ndarray
        Held-out data every reported number is measured on.

    Examples
    --------
    >>> import numpy as np
    >>> splits = train_calibration_test_split(np.arange(20), np.arange(20) % 2)
    >>> len(splits.X_train), len(splits.X_calibration), len(splits.X_test)
    (11, 4, 5)
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_calibration: np.ndarray
    y_calibration: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def train_calibration_test_split(
    X: np.ndarray,
    y: np.ndarray,
    *,
    calibration_size: float = 0.2,
    test_size: float = 0.25,
    random_state: int = 0,
) -> DataSplits:
    """Split ``(X, y)`` into stratified train, calibration and test parts.

    Parameters
    ----------
    X : array-like of shape (n_samples, ...)
        Inputs; any array that scikit-learn's ``train_test_split`` indexes.
    y : array-like of shape (n_samples,)
        Class labels; every part keeps the class proportions.
    calibration_size, test_size : float, default=0.2 and 0.25
        Fractions of the whole data set; their sum must be below 1.
    random_state : int, default=0
        Seed of the shuffle, so the same call gives the same split.

    Returns
    -------
    DataSplits

    Examples
    --------
    >>> X, y = load_digits_images()
    >>> splits = train_calibration_test_split(X, y, random_state=0)
    >>> len(splits.y_train), len(splits.y_calibration), len(splits.y_test)
    (987, 360, 450)
    """
    from sklearn.model_selection import train_test_split

    if not (0 < calibration_size < 1 and 0 < test_size < 1 and calibration_size + test_size < 1):
        raise ValueError(
            "calibration_size and test_size must lie in (0, 1) and sum to less than 1, got "
            f"{calibration_size} and {test_size}"
        )
    X_rest, X_test, y_rest, y_test = train_test_split(
        X, y, test_size=test_size, random_state=random_state, stratify=y
    )
    X_train, X_cal, y_train, y_cal = train_test_split(
        X_rest,
        y_rest,
        test_size=calibration_size / (1.0 - test_size),
        random_state=random_state,
        stratify=y_rest,
    )
    return DataSplits(X_train, y_train, X_cal, y_cal, X_test, y_test)


def default_digits_training_config(*, quick: bool = False, random_state: int = 0) -> TrainingConfig:
    """Return the training recipe of the demo's digits classifier.

    AdamW without weight decay, a short warm-up then cosine decay, plain
    cross-entropy, a fixed number of epochs on the whole training split
    and the last weights kept (no validation split). Trained this way, long
    past a training loss near zero, the network ends up over-confident: the
    usual starting point of post-hoc calibration.

    Parameters
    ----------
    quick : bool, default=False
        Few epochs, for tests (the accuracy is then far from converged).
    random_state : int, default=0
        Seed of the shuffling.

    Returns
    -------
    reliacal.training.TrainingConfig

    Examples
    --------
    >>> default_digits_training_config(quick=True).max_epochs
    5
    """
    from reliacal.training import TrainingConfig

    return TrainingConfig(
        max_epochs=5 if quick else 60,
        batch_size=64,
        optimizer="adamw",
        learning_rate=2e-3,
        weight_decay=0.0,
        schedule="cosine",
        warmup_epochs=0.5 if quick else 2.0,
        validation_fraction=0.0,
        random_state=random_state,
    )


def train_digits_classifier(
    X_train: np.ndarray,
    y_train: np.ndarray,
    *,
    model: torch.nn.Module | None = None,
    config: TrainingConfig | None = None,
    random_state: int = 0,
) -> tuple[torch.nn.Module, TrainingResult]:
    """Train a classifier on digit images with plain cross-entropy.

    The training itself is :func:`reliacal.training.fit_module`, the shared
    loop (validation split, best checkpoint, NaN guard, progress).

    Parameters
    ----------
    X_train : ndarray of shape (n, 1, S, S)
        Images, e.g. from :func:`load_digits_images`.
    y_train : ndarray of shape (n,)
        Integer labels in ``[0, 10)``.
    model : torch.nn.Module or None, default=None
        The network to train; ``None`` builds :func:`make_tiny_vit` for the
        image size of ``X_train``, seeded with ``random_state``.
    config : TrainingConfig or None, default=None
        ``None`` uses :func:`default_digits_training_config`.
    random_state : int, default=0
        Seed of the model initialisation (when ``model`` is None).

    Returns
    -------
    model : torch.nn.Module
        The trained network, in eval mode, on the CPU.
    result : reliacal.training.TrainingResult
        The per-epoch history and the selected epoch.

    Examples
    --------
    >>> from reliacal.training import TrainingConfig
    >>> X, y = load_digits_images()
    >>> model = make_tiny_vit(embed_dim=16, depth=1, num_heads=2, random_state=0)
    >>> config = TrainingConfig(max_epochs=2, validation_fraction=0.0, random_state=0)
    >>> model, result = train_digits_classifier(X[:64], y[:64], model=model, config=config)
    >>> [row["epoch"] for row in result.history]
    [1, 2]
    """
    import torch

    from reliacal.training import fit_module

    X_train = np.asarray(X_train, dtype=np.float32)
    y_train = np.asarray(y_train)
    if X_train.ndim != 4 or len(X_train) != len(y_train):
        raise ValueError(
            "X_train must have shape (n, channels, height, width) and y_train shape (n,), got "
            f"{X_train.shape} and {y_train.shape}"
        )
    if model is None:
        model = make_tiny_vit(
            num_classes=10,
            image_size=X_train.shape[-1],
            in_chans=X_train.shape[1],
            random_state=random_state,
        )
    if config is None:
        config = default_digits_training_config(random_state=random_state)
    dataset = torch.utils.data.TensorDataset(
        torch.from_numpy(X_train), torch.from_numpy(y_train.astype(np.int64))
    )
    result = fit_module(model, torch.nn.functional.cross_entropy, dataset, config=config)
    model.eval()
    return model, result


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


# WordNet glosses: the loader lives in its own module (one job each); it is part of this API.
from reliacal._wordnet import load_wordnet_glosses  # noqa: E402

__all__ += ["load_wordnet_glosses"]
