"""Calibration Attention (CalAttn): a per-sample scale learned end to end with the backbone.

Liang et al., "Instance-wise Temperature Scaling for Vision Transformers" /
"Learning Reliability-Aware Representations", arXiv:2508.08547 (2025, 2026).
A small head reads the transformer's final [CLS] token and predicts a positive
scale ``s(x)``; the classifier's logits are divided by it, and the whole
network is trained under a proper scoring rule, so that calibration gradients
reach the representation as well as the confidence.
"""

from __future__ import annotations

import copy
import json
import numbers
import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from torch import nn
from torch.utils.data import Subset

from reliacal._data import as_dataset, check_label_key, check_ordered
from reliacal._device import resolve_device
from reliacal._torch_estimator import seeded_torch
from reliacal.backbones import BackboneAdapter, BackboneOutput, as_backbone
from reliacal.calibrators import TemperatureScaling
from reliacal.finetune._estimator import FinetuneEstimator, count_parameters
from reliacal.finetune.losses import brier_loss, get_base_loss
from reliacal.training import TrainingConfig, TrainingDivergedError, fit_module

__all__ = ["CalAttnFinetuner"]

TOKENS = ("cls", "patch_mean", "concat", "pooled")
SCALE_FLOOR = 1e-6


class _CalAttnOutput(NamedTuple):
    """What one forward pass of the CalAttn network returns (a tuple, so DDP can read it)."""

    calibrated_logits: torch.Tensor
    scale: torch.Tensor
    logits: torch.Tensor


class _ScaleHead(nn.Module):
    """``s(h) = softplus(W2 gelu(W1 h + b1) + b2) + 1e-6``, default PyTorch initialisation."""

    def __init__(self, in_features: int, hidden: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden), nn.GELU(), nn.Linear(hidden, 1), nn.Softplus()
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.layers(features).squeeze(-1).float() + SCALE_FLOOR


class _CalAttnNetwork(nn.Module):
    """A backbone adapter and the scale head that reads its tokens, in one forward pass.

    ``scale_head=None`` is plain fine-tuning (the scale is fixed to 1): the
    baseline the method is compared with.
    """

    def __init__(
        self,
        backbone: BackboneAdapter,
        *,
        token: str,
        hidden: int,
        calibration_head: bool,
        freeze_backbone: bool,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.token = token
        self.freeze_backbone = freeze_backbone
        self.in_features = _head_width(backbone, token)
        self.scale_head = _ScaleHead(self.in_features, hidden) if calibration_head else None
        if freeze_backbone:
            self.backbone.requires_grad_(False)

    def train(self, mode: bool = True) -> _CalAttnNetwork:
        super().train(mode)
        if self.freeze_backbone:
            # A frozen backbone is a fixed function: no dropout, no batch-norm statistics.
            self.backbone.eval()
        return self

    def features(self, output: BackboneOutput) -> torch.Tensor:
        """The input of the scale head, read from the backbone's single forward pass."""
        if self.token == "pooled":
            return output.pooled
        tokens = output.tokens
        if self.token == "cls":
            return tokens[:, 0]
        if tokens.ndim == 4:  # Swin's (B, H, W, D) map: every position is a patch
            patch_mean = tokens.mean(dim=(1, 2))
        elif tokens.ndim == 3:
            patch_mean = tokens[:, self.backbone.num_prefix_tokens :].mean(dim=1)
        else:
            raise ValueError(
                f"token={self.token!r} needs a token sequence, but the backbone's tokens have "
                f"shape {tuple(tokens.shape)}; use token='pooled'"
            )
        if self.token == "patch_mean":
            return patch_mean
        return torch.cat([tokens[:, 0], patch_mean], dim=1)

    def forward(self, x: Any) -> _CalAttnOutput:
        # Frozen: the head's gradient needs only the logits' values, not the backbone's graph.
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze_backbone):
            output = self.backbone(x)
        logits = output.logits.float()
        if self.scale_head is None:
            scale = torch.ones(logits.shape[0], dtype=logits.dtype, device=logits.device)
        else:
            features = self.features(output)
            if features.shape[-1] != self.in_features:
                raise ValueError(
                    f"the scale head expects {self.in_features} features but token="
                    f"{self.token!r} gives {features.shape[-1]}; use token='pooled'"
                )
            scale = self.scale_head(features)
        return _CalAttnOutput(logits / scale[:, None], scale, logits)


def _head_width(backbone: BackboneAdapter, token: str) -> int:
    width = backbone.num_features
    if width is None:
        raise ValueError(
            "the backbone does not tell its feature width (num_features); wrap it with "
            "reliacal.backbones.as_backbone(model, features=..., head=...) around a Linear head"
        )
    return 2 * int(width) if token == "concat" else int(width)


def _resolve_token(token: str, backbone: BackboneAdapter) -> str:
    if token not in TOKENS:
        raise ValueError(f"token must be one of {TOKENS}, got {token!r}")
    if backbone.has_cls_token:
        return token
    if token == "cls":
        # Swin-like backbones have no class token: their pooled pre-logits play its role.
        return "pooled"
    if token == "concat":
        raise ValueError(
            f"token='concat' needs a class token, and the {type(backbone.model).__name__} "
            "backbone has none; use token='patch_mean' or 'pooled'"
        )
    return token


class _CalAttnLoss:
    """``base_loss(z / s, y) + lambda_brier * Brier(softmax(z / s), y)``; picklable."""

    def __init__(self, base_loss, lambda_brier: float, n_classes: int) -> None:
        self.base_loss = base_loss
        self.lambda_brier = lambda_brier
        self.n_classes = n_classes

    def __call__(self, outputs: _CalAttnOutput, target: torch.Tensor) -> torch.Tensor:
        if bool(((target < 0) | (target >= self.n_classes)).any()):
            raise ValueError(
                f"training labels must be class indices in [0, {self.n_classes}); got values "
                f"from {int(target.min())} to {int(target.max())}"
            )
        logits = outputs.calibrated_logits
        loss = self.base_loss(logits, target)
        if self.lambda_brier:
            loss = loss + self.lambda_brier * brier_loss(logits, target)
        return loss


def _calibrated_logits(outputs: _CalAttnOutput) -> torch.Tensor:
    return outputs.calibrated_logits


def _shared_seed(random_state) -> int:
    """The seed of the head, the split and the trainer; under DDP every process gets rank 0's."""
    seed = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
    if isinstance(random_state, numbers.Integral):
        return seed
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        holder = [seed]
        distributed.broadcast_object_list(holder, src=0)
        seed = int(holder[0])
    return seed


def _resumable_seed(seed: int, checkpoint_dir: str | None) -> int:
    """The seed a run in ``checkpoint_dir`` started with, else ``seed`` (recorded there).

    Without an integer ``random_state`` every fit draws a new seed; a fit that
    resumes an interrupted run must reuse the interrupted run's seed, or the
    split and the trainer's configuration would differ from the checkpoint's.
    """
    if checkpoint_dir is None:
        return seed
    path = Path(checkpoint_dir) / "calattn_seed.json"
    if path.is_file():
        return int(json.loads(path.read_text())["seed"])
    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()) or (
        distributed.get_rank() == 0
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"seed": seed}))
        os.replace(temporary, path)
    return seed


def _split_indices(n: int, fraction: float, labels: np.ndarray | None, seed: int):
    """Seeded train/validation indices; stratified when the labels are known and allow it."""
    n_validation = int(np.ceil(fraction * n))
    if n_validation >= n:
        raise ValueError(
            f"validation_fraction={fraction} leaves no training data out of {n} samples"
        )
    indices = np.arange(n)
    stratify = None
    if labels is not None:
        _, counts = np.unique(labels, return_counts=True)
        if counts.min() >= 2 and n_validation >= len(counts) and n - n_validation >= len(counts):
            stratify = labels
    train, validation = train_test_split(
        indices, test_size=n_validation, random_state=seed, stratify=stratify
    )
    return np.sort(train), np.sort(validation)


def _float64_outputs(module: nn.Module, x: Any) -> _CalAttnOutput:
    return _CalAttnOutput(*(value.double() for value in module(x)))


class CalAttnFinetuner(FinetuneEstimator):
    r"""Calibration Attention: fine-tune a transformer with a learned per-sample scale.

    A head :math:`s(h) = \mathrm{softplus}(W_2\,\mathrm{GELU}(W_1 h + b_1) + b_2)
    + 10^{-6}` reads the backbone's final [CLS] token :math:`h` (Liang et al.,
    arXiv:2508.08547) and the calibrated logits are :math:`z(x) / s(x)`. Both
    come from one forward pass of the backbone, nothing is detached, and the
    network (backbone and head) minimises

    .. math::

        L = \ell_{\text{base}}(z / s, y)
            + \lambda_{\text{Brier}} \cdot \frac{1}{B}\sum_i \sum_c
              \big(\mathrm{softmax}(z_i / s_i)_c - \mathbb{1}[y_i = c]\big)^2,

    with :func:`reliacal.training.fit_module` (AdamW, warm-up then cosine
    decay; the paper's SGD recipe with ``optimizer="sgd"``). The checkpoint
    with the best score on a held-out validation split (never augmented) is
    kept. Optionally a temperature is then fitted on that split
    (``post_hoc="temperature"``), since the paper reports results before and
    after temperature scaling.

    The head adds ``hidden * (D + 2) + 1`` parameters (``128 D + 257`` at the
    default width; 98,561 for ViT-B, D = 768), ``n_extra_parameters_``.

    Parameters
    ----------
    backbone : nn.Module, BackboneAdapter or str
        A classifier that :func:`reliacal.backbones.as_backbone` accepts (timm
        ViT / DeiT / Swin instance or name, Hugging Face
        ``ViTForImageClassification``, ...). ``fit`` trains a deep copy; the
        object passed here is never modified.
    token : {"cls", "patch_mean", "concat", "pooled"}, default="cls"
        What the head reads from the final tokens: the [CLS] token, the mean of
        the patch tokens (class and distillation tokens excluded), their
        concatenation (width 2D), or the pooled pre-logits features. Backbones
        without a class token (Swin) have no [CLS] to read: ``"cls"`` then
        reads the pooled features (``token_`` records the choice) and
        ``"concat"`` is an error.
    hidden : int, default=128
        Width of the head's hidden layer.
    base_loss : {"ce", "label_smoothing", "brier", "focal", "flsd53", \
"dual_focal", "mmce"} or callable, default="ce"
        Loss on the calibrated logits (see :func:`reliacal.finetune.losses.get_base_loss`);
        a callable maps ``(logits (B, K), target (B,))`` to a scalar tensor.
    lambda_brier : float, default=0.1
        Weight of the added Brier term (0.1 in the paper; 0 removes it).
    label_smoothing : float, default=0.0
        Smoothing of ``"ce"`` / ``"label_smoothing"`` (the paper uses 0.1 on
        CIFAR-100); must be 0 for the other losses.
    focal_gamma : float, default=3.0
        Gamma of ``"focal"`` and ``"dual_focal"``.
    freeze_backbone : bool, default=False
        Train only the head (a post-hoc method on a frozen model). The frozen
        backbone runs in eval mode and without a gradient graph.
    calibration_head : bool, default=True
        ``False`` trains the same backbone with the same loss, trainer and
        schedule but with the scale fixed to 1: plain fine-tuning, the baseline
        CalAttn is compared with.
    post_hoc : {None, "temperature"}, default=None
        Fit :class:`reliacal.calibrators.TemperatureScaling` on the held-out
        validation predictions after training (needs ``validation_fraction > 0``).
    max_epochs, batch_size, optimizer, learning_rate, weight_decay, warmup_epochs, \
grad_clip_norm, validation_fraction, selection_metric, n_iter_no_change, \
mixed_precision, checkpoint_dir, device, verbose
        Training settings, as in :class:`reliacal.training.TrainingConfig`
        (``optimizer`` is ``"adamw"``, ``"adam"`` or ``"sgd"``: SGD with
        Nesterov momentum 0.9). ``checkpoint_dir`` makes an interrupted
        ``fit`` resume where it stopped.
    random_state : int, RandomState or None, default=None
        Seeds the head's initialisation, the validation split, the shuffling
        and dropout; an int makes a CPU fit reproducible.
    train_transform : callable or None, default=None
        Applied to each training batch ``x`` (on the device), e.g. data
        augmentation; never to validation data.
    classes : array-like of shape (K,) or None, default=None
        The label of each logit column. ``None``: integer labels in
        ``[0, K)`` are the column indices; other labels must be exactly K
        distinct values (sorted order gives the columns).
    label_key : str, default="labels"
        The key of the labels when a Dataset or DataLoader yields Hugging
        Face style mappings (``{"input_ids", "attention_mask", "labels"}``,
        ``{"pixel_values", "labels"}``); the other entries go to the model.
        ``"label"`` suits a ``datasets`` column read with the default
        collation.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
        The label of each column of ``predict_proba``.
    module_ : torch.nn.Module
        The trained network (backbone adapter ``module_.backbone`` and head
        ``module_.scale_head``), on the CPU.
    token_ : str
        The token mode used (``"pooled"`` where ``"cls"`` fell back).
    n_extra_parameters_ : int
        Parameters of the scale head (0 with ``calibration_head=False``).
    n_backbone_parameters_ : int
        Parameters of the backbone.
    parameter_overhead_ : float
        ``n_extra_parameters_ / n_backbone_parameters_``.
    history_ : list of dict
        Per-epoch training log (``train_loss``, ``val_ece``, ``val_nll``, ...).
    best_epoch_ : int
        The epoch whose weights were kept.
    post_hoc_ : TemperatureScaling or None
        The post-hoc calibrator fitted after training.

    Notes
    -----
    The fitted network lives on the CPU (pickles load on machines without a
    GPU); prediction moves it to ``device`` for the call and runs in float32.
    A checkpointed fit resumes only with the same data and settings.

    References
    ----------
    Liang et al., "Learning Reliability-Aware Representations" (v1:
    "Instance-wise Temperature Scaling for Vision Transformers"),
    arXiv:2508.08547, 2025.

    Examples
    --------
    >>> import numpy as np
    >>> from timm.models.vision_transformer import VisionTransformer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((32, 1, 8, 8), dtype=np.float32)
    >>> y = np.arange(32) % 2
    >>> vit = VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=2,
    ...                         embed_dim=16, depth=1, num_heads=2)
    >>> model = CalAttnFinetuner(vit, max_epochs=2, batch_size=16, device="cpu",
    ...                          validation_fraction=0.25, random_state=0).fit(X, y)
    >>> model.predict_proba(X[:3]).sum(axis=1)
    array([1., 1., 1.])
    >>> bool((model.scale(X[:3]) > 0).all()), model.n_extra_parameters_ == 128 * 16 + 257
    (True, True)
    """

    def __init__(
        self,
        backbone: Any,
        *,
        token: str = "cls",
        hidden: int = 128,
        base_loss: Any = "ce",
        lambda_brier: float = 0.1,
        label_smoothing: float = 0.0,
        focal_gamma: float = 3.0,
        freeze_backbone: bool = False,
        calibration_head: bool = True,
        post_hoc: str | None = None,
        max_epochs: int = 10,
        batch_size: int = 64,
        optimizer: str = "adamw",
        learning_rate: float = 1e-4,
        weight_decay: float = 0.05,
        warmup_epochs: float = 1.0,
        grad_clip_norm: float | None = 1.0,
        validation_fraction: float = 0.1,
        selection_metric: str = "ece",
        n_iter_no_change: int | None = None,
        mixed_precision: bool | str = "auto",
        checkpoint_dir: str | None = None,
        device: str = "auto",
        random_state: Any = None,
        verbose: int = 0,
        train_transform: Any = None,
        classes: Any = None,
        label_key: str = "labels",
    ) -> None:
        self.backbone = backbone
        self.token = token
        self.hidden = hidden
        self.base_loss = base_loss
        self.lambda_brier = lambda_brier
        self.label_smoothing = label_smoothing
        self.focal_gamma = focal_gamma
        self.freeze_backbone = freeze_backbone
        self.calibration_head = calibration_head
        self.post_hoc = post_hoc
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.warmup_epochs = warmup_epochs
        self.grad_clip_norm = grad_clip_norm
        self.validation_fraction = validation_fraction
        self.selection_metric = selection_metric
        self.n_iter_no_change = n_iter_no_change
        self.mixed_precision = mixed_precision
        self.checkpoint_dir = checkpoint_dir
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.train_transform = train_transform
        self.classes = classes
        self.label_key = label_key

    # Fitting -----------------------------------------------------------------------------

    def _check_params(self) -> None:
        if isinstance(self.hidden, bool) or not isinstance(self.hidden, numbers.Integral):
            raise ValueError(f"hidden must be a positive integer, got {self.hidden!r}")
        if self.hidden < 1:
            raise ValueError(f"hidden must be a positive integer, got {self.hidden!r}")
        lam = self.lambda_brier
        if not isinstance(lam, numbers.Real) or isinstance(lam, bool) or not 0 <= lam < np.inf:
            raise ValueError(f"lambda_brier must be a finite number >= 0, got {lam!r}")
        if self.post_hoc not in (None, "temperature"):
            raise ValueError(f"post_hoc must be None or 'temperature', got {self.post_hoc!r}")
        if self.post_hoc is not None and not self.validation_fraction:
            raise ValueError(
                "post_hoc='temperature' fits on the held-out validation split: "
                "set validation_fraction > 0"
            )
        for name in ("freeze_backbone", "calibration_head"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.freeze_backbone and not self.calibration_head:
            raise ValueError(
                "freeze_backbone=True with calibration_head=False leaves nothing to train"
            )
        check_label_key(self.label_key)
        if self.train_transform is not None and not callable(self.train_transform):
            raise ValueError("train_transform must be a callable applied to a batch, or None")

    def _build_network(self, seed: int) -> _CalAttnNetwork:
        with seeded_torch(seed):
            adapter = as_backbone(self.backbone)
            # fit trains a copy: the caller's model stays as it was, and refits start alike.
            adapter = copy.deepcopy(adapter)
            token = _resolve_token(self.token, adapter)
            return _CalAttnNetwork(
                adapter,
                token=token,
                hidden=self.hidden,
                calibration_head=self.calibration_head,
                freeze_backbone=self.freeze_backbone,
            )

    def fit(self, X: Any, y: Any = None) -> CalAttnFinetuner:
        """Fine-tune the backbone and the scale head on ``(X, y)``.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n, ...), Dataset or DataLoader
            Raw inputs (images or token ids) with ``y``, or a torch ``Dataset``
            / ``DataLoader`` yielding ``(x, y)`` with class-index labels.
        y : array-like of shape (n,), optional
            Labels of array inputs; None for a Dataset or DataLoader.

        Returns
        -------
        self : CalAttnFinetuner

        Raises
        ------
        ValueError
            Invalid settings or inputs.
        reliacal.training.TrainingDivergedError
            A NaN or infinite loss (a ``ValueError``). The estimator stays
            unfitted; the error's ``module`` attribute holds the network with
            the last good weights.
        """
        self._check_params()
        base = get_base_loss(
            self.base_loss, label_smoothing=self.label_smoothing, focal_gamma=self.focal_gamma
        )
        seed = _resumable_seed(_shared_seed(self.random_state), self.checkpoint_dir)
        config = self._training_config(
            optimizer=self.optimizer,
            grad_clip_norm=self.grad_clip_norm,
            # The split is made here (the post-hoc temperature needs it), not by the trainer.
            validation_fraction=0.0,
            random_state=(
                self.random_state if isinstance(self.random_state, numbers.Integral) else seed
            ),
        )
        dataset, labels = as_dataset(X, y, require_y=True, label_key=self.label_key)
        self._reset()
        try:
            self._fit(X, dataset, labels, base, seed, config)
        except BaseException:
            # A failed fit (divergence, interruption) leaves the estimator unfitted.
            self._reset()
            raise
        return self

    def _reset(self) -> None:
        for name in [name for name in vars(self) if name.endswith("_")]:
            delattr(self, name)

    def _fit(self, X, dataset, labels, base, seed: int, config: TrainingConfig) -> None:
        network = self._build_network(seed)
        n_classes = network.backbone.num_classes
        if n_classes is None:
            raise ValueError("the backbone does not tell its number of classes (num_classes)")
        if labels is None:
            # A Dataset's labels are column indices already; passing the column labels
            # themselves through _fit_labels validates `classes` and sets classes_.
            given = np.arange(n_classes) if self.classes is None else self.classes
            self._fit_labels(given, n_columns=n_classes)
            y_index = None
        else:
            y_index = self._fit_labels(labels, n_columns=n_classes)
            dataset, _ = as_dataset(X, y_index)

        train, validation = dataset, None
        if self.validation_fraction:
            train_index, validation_index = _split_indices(
                len(dataset), float(self.validation_fraction), y_index, seed
            )
            train = Subset(dataset, train_index.tolist())
            validation = Subset(dataset, validation_index.tolist())

        try:
            result = fit_module(
                network,
                _CalAttnLoss(base, float(self.lambda_brier), n_classes),
                train,
                config=config,
                validation_data=validation,
                logits_fn=_calibrated_logits,
                train_transform=self.train_transform,
            )
        except TrainingDivergedError as error:
            # The estimator stays unfitted, but the trained work is not lost: the
            # network with the last good weights travels with the error.
            error.module = network
            raise
        self.module_ = network
        self.token_ = network.token
        self.history_ = result.history
        self.best_epoch_ = result.best_epoch
        self.n_extra_parameters_ = (
            0 if network.scale_head is None else count_parameters(network.scale_head)
        )
        self.n_backbone_parameters_ = count_parameters(network.backbone)
        self.parameter_overhead_ = self.n_extra_parameters_ / self.n_backbone_parameters_
        self.post_hoc_ = None
        if self.post_hoc == "temperature":
            held_out, held_out_y = self._run(validation)
            self.post_hoc_ = TemperatureScaling().fit(held_out.calibrated_logits, held_out_y)

    # Prediction --------------------------------------------------------------------------

    def _run(self, data: Any) -> tuple[_CalAttnOutput, np.ndarray]:
        """Run the trained network over ``data`` once, in eval mode, without gradients.

        Returns the calibrated logits, scales and backbone logits (float64
        numpy arrays) and the labels the data yields (``MISSING_LABEL`` for
        arrays without labels).
        """
        if not isinstance(data, torch.utils.data.Dataset):
            # Rows come back in the data's order: a shuffling loader's cannot be recovered.
            check_ordered(data)
            data, _ = as_dataset(data, label_key=self.label_key)
        outputs, labels = self._run_batches(
            self.module_, data, _float64_outputs, resolve_device(self.device), keep_labels=True
        )
        return _CalAttnOutput(*outputs), labels

    def _predict_proba_with_labels(self, X: Any, y: Any) -> tuple[np.ndarray, Any]:
        if y is not None:
            return self.predict_proba(X), y
        if isinstance(X, torch.utils.data.Dataset | torch.utils.data.DataLoader):
            check_is_fitted(self, "module_")
            outputs, y_index = self._run(as_dataset(X, label_key=self.label_key)[0])
            return self._probabilities(outputs.calibrated_logits, True), self.classes_[y_index]
        raise ValueError("y is required to score array inputs")

    def _probabilities(self, logits: np.ndarray, post_hoc: bool) -> np.ndarray:
        if post_hoc and self.post_hoc_ is not None:
            return self.post_hoc_.predict_proba(logits)
        return torch.softmax(torch.from_numpy(logits), dim=1).numpy()

    def decision_function(self, X: Any) -> np.ndarray:
        """Return the calibrated logits ``z(x) / s(x)``.

        Parameters
        ----------
        X : array-like, torch.Tensor, Dataset or DataLoader
            Inputs in the form ``fit`` accepts (labels, if any, are ignored).

        Returns
        -------
        ndarray of shape (n, K)
            The backbone's logits divided by :meth:`scale` (no post-hoc temperature).
        """
        check_is_fitted(self, "module_")
        return self._run(X)[0].calibrated_logits

    def scale(self, X: Any) -> np.ndarray:
        """Return the per-sample scale ``s(x) > 0`` that divides the logits.

        Parameters
        ----------
        X : array-like, torch.Tensor, Dataset or DataLoader

        Returns
        -------
        ndarray of shape (n,)
            All ones with ``calibration_head=False``.
        """
        check_is_fitted(self, "module_")
        return self._run(X)[0].scale

    def predict_proba(self, X: Any, *, post_hoc: bool = True) -> np.ndarray:
        """Return the calibrated class probabilities.

        Parameters
        ----------
        X : array-like, torch.Tensor, Dataset or DataLoader
        post_hoc : bool, default=True
            Apply the post-hoc temperature (when ``post_hoc="temperature"``
            was fitted); ``False`` gives CalAttn's own probabilities.

        Returns
        -------
        ndarray of shape (n, K)
            Rows sum to 1; columns follow ``classes_``.
        """
        return self._probabilities(self.decision_function(X), post_hoc)
