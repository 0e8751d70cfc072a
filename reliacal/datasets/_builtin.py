"""The digits images, the tiny models, the split and the training run."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported lazily at run time: torch and timm are slow to import
    import torch
    from timm.models.vision_transformer import VisionTransformer
    from transformers import BertForSequenceClassification

    from reliacal.training import TrainingConfig, TrainingResult


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
    of 4 heads) has about 140k parameters, small enough to train on the
    digits on a CPU. Nothing is downloaded (``pretrained=False``).

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
    from timm.models.vision_transformer import VisionTransformer

    from reliacal.training import seeded_torch

    if image_size % patch_size:
        raise ValueError(
            f"image_size ({image_size}) must be a multiple of patch_size ({patch_size})"
        )
    with seeded_torch(random_state):
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


def make_tiny_bert(
    num_classes: int = 3,
    vocab_size: int = 40,
    *,
    max_length: int = 16,
    hidden_size: int = 32,
    depth: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 64,
    pad_token_id: int = 0,
    random_state: int | None = None,
    **kwargs: Any,
) -> BertForSequenceClassification:
    """Build a small transformers BERT sequence classifier with random weights.

    The text counterpart of :func:`make_tiny_vit`: a
    ``BertForSequenceClassification`` whose default (vocabulary 40, sequences
    of at most 16 tokens, width 32, 2 layers of 2 heads) has about 20k
    parameters, for tests and benchmarks of the language path (the BERT
    adapter of :mod:`reliacal.backbones`, DIRECTOR on token ids). Nothing is
    downloaded. Token ``pad_token_id`` marks padding; pass
    ``attention_mask=(ids != pad_token_id)`` when calling the model directly
    (the adapters derive it themselves).

    Parameters
    ----------
    num_classes : int, default=3
        Size of the classification head.
    vocab_size : int, default=40
        Number of token ids, ``0 .. vocab_size - 1``.
    max_length : int, default=16
        Longest sequence the position embeddings cover.
    hidden_size, depth, num_heads, intermediate_size
        Width, number of layers, attention heads per layer and width of the
        feed-forward layers (``BertConfig``'s ``hidden_size``,
        ``num_hidden_layers``, ``num_attention_heads``,
        ``intermediate_size``); ``hidden_size`` must be a multiple of
        ``num_heads``.
    pad_token_id : int, default=0
        Id of the padding token, in ``[0, vocab_size)``.
    random_state : int or None, default=None
        Seed for the weight initialisation (the global torch generator is
        left untouched); ``None`` draws from the global generator.
    **kwargs
        Further ``BertConfig`` arguments (e.g. ``initializer_range``).

    Returns
    -------
    transformers.BertForSequenceClassification
        A model in training mode, on the CPU.

    Examples
    --------
    >>> import torch
    >>> model = make_tiny_bert(num_classes=3, random_state=0).eval()
    >>> ids = torch.tensor([[39, 5, 7, 1, 0, 0], [39, 2, 2, 3, 9, 4]])
    >>> model(ids, attention_mask=(ids != 0).long()).logits.shape
    torch.Size([2, 3])
    """
    from transformers import BertConfig, BertForSequenceClassification

    from reliacal.training import seeded_torch

    if hidden_size % num_heads:
        raise ValueError(
            f"hidden_size ({hidden_size}) must be a multiple of num_heads ({num_heads})"
        )
    if not 0 <= pad_token_id < vocab_size:
        raise ValueError(
            f"pad_token_id must be a token id in [0, vocab_size={vocab_size}), got {pad_token_id!r}"
        )
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=depth,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_length,
        num_labels=num_classes,
        pad_token_id=pad_token_id,
        **kwargs,
    )
    with seeded_torch(random_state):
        return BertForSequenceClassification(config)


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


def make_logits(
    n_samples: int,
    n_classes: int,
    *,
    scale: float = 3.0,
    bias: Any = None,
    random_state: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw toy classifier logits and labels, like scikit-learn's ``make_classification``.

    The labels are uniform over the ``n_classes`` classes; the logits add
    ``scale`` to the true class's column, then standard normal noise on
    every column, then ``bias``::

        rng = np.random.default_rng(random_state)
        y = rng.integers(0, n_classes, size=n_samples)
        logits = scale * np.eye(n_classes)[y] + rng.normal(size=(n_samples, n_classes)) + bias

    Larger ``scale`` separates the classes more. Multiplying the returned
    logits by a factor above 1 makes them over-confident (what temperature
    scaling undoes); a ``bias`` favours some classes (what vector scaling
    undoes). The examples of the calibrators use it.

    Parameters
    ----------
    n_samples : int
        Number of rows, at least 1.
    n_classes : int
        Number of classes ``K``, at least 2.
    scale : float, default=3.0
        Added to the logit of each row's true class before the noise; finite.
    bias : array-like of shape (K,), default=None
        Added to every row at the end (finite values); ``None`` adds nothing.
    random_state : int, numpy.random.Generator or None, default=None
        Seed of :func:`numpy.random.default_rng`.

    Returns
    -------
    logits : ndarray of shape (n_samples, K), float64
    y : ndarray of shape (n_samples,), int64
        Labels in ``0 .. K - 1``.

    Raises
    ------
    ValueError
        For a non-integer or too small ``n_samples`` or ``n_classes``, a
        non-finite ``scale``, or a ``bias`` that is not ``K`` finite numbers.

    Examples
    --------
    >>> logits, y = make_logits(5, 3, random_state=0)
    >>> logits.shape, y.shape
    ((5, 3), (5,))
    >>> logits.round(2)
    array([[ 0.1 , -0.54,  3.36],
           [ 1.3 ,  3.95, -0.7 ],
           [-1.27,  2.38,  0.04],
           [ 0.67, -0.22, -1.25],
           [ 2.27, -0.54, -0.32]])
    >>> y
    array([2, 1, 1, 0, 0])
    >>> make_logits(4, 2, bias=[1.0, 0.0], random_state=0)[0].shape
    (4, 2)
    """
    for name, value, least in (("n_samples", n_samples, 1), ("n_classes", n_classes, 2)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not np.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    if bias is not None:
        bias = _finite_vector(bias, n_classes, "bias")
    rng = np.random.default_rng(random_state)
    y = rng.integers(0, n_classes, size=n_samples)
    logits = scale * np.eye(n_classes)[y] + rng.normal(size=(n_samples, n_classes))
    if bias is not None:
        logits = logits + bias
    return logits, y


def _finite_vector(values: Any, length: int, name: str) -> np.ndarray:
    """``values`` as a float64 vector of ``length`` finite numbers, or a ValueError naming it."""
    try:
        vector = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold {length} finite numbers, got {values!r}") from None
    if vector.shape != (length,) or not np.all(np.isfinite(vector)):
        raise ValueError(f"{name} must hold {length} finite numbers, got {values!r}")
    return vector
