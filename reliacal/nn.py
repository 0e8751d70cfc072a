"""The methods as PyTorch building blocks, for training in your own loop.

:class:`~reliacal.finetune.CalAttnFinetuner` and
:class:`~reliacal.finetune.DiffusionReconfigurer` are scikit-learn estimators
around the modules collected here. This module is their public home for
users who train with a plain PyTorch loop, PyTorch Lightning or the Hugging
Face ``Trainer``: every class is (or subclasses, adding only a documented
constructor) the one the estimators train, so there is no second
implementation to drift apart.

CalAttn (Liang et al., arXiv:2508.08547)
    :class:`CalAttnModel` wraps a backbone and a :class:`CalAttnHead` that
    divides the logits by a learned per-sample scale; :class:`CalAttnLoss`
    is the method's proper scoring rule. ``model(x)`` returns a
    :class:`CalAttnOutput` ``(calibrated_logits, scale, logits)``.
DIRECTOR (Dao et al., arXiv:2602.08920)
    :func:`build_director_student` recasts the last blocks of a frozen
    teacher as one shared stochastic :class:`ReverseStep`
    (:class:`TransitionNetwork`, :class:`MeanHead`, :class:`NoiseHead`);
    :class:`DirectorTrainingModule` runs teacher and student together and
    :class:`DirectorLoss` is the distillation loss.
Temperature scaling (Guo et al., ICML 2017)
    :class:`TemperatureScaler`: one learnable temperature, as a module.

Runnable scripts for each integration are in the repository's ``examples/``
folder (``calattn_plain_pytorch.py``, ``calattn_lightning.py``,
``calattn_hf_trainer.py``).

Examples
--------
CalAttn in a plain loop: the network's output goes to the loss as it is.

>>> import torch
>>> from reliacal.datasets import make_tiny_vit
>>> from reliacal.nn import CalAttnLoss, CalAttnModel
>>> _ = torch.manual_seed(0)
>>> vit = make_tiny_vit(num_classes=3, image_size=8, embed_dim=16, depth=1,
...                     num_heads=2, random_state=0)
>>> model = CalAttnModel(vit, hidden=8)
>>> loss_fn = CalAttnLoss(n_classes=3)
>>> optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
>>> x, y = torch.randn(8, 1, 8, 8), torch.arange(8) % 3
>>> for _ in range(2):
...     optimizer.zero_grad()
...     loss = loss_fn(model(x), y)
...     loss.backward()
...     optimizer.step()
>>> output = model.eval()(x)
>>> output.calibrated_logits.shape, bool((output.scale > 0).all())
(torch.Size([8, 3]), True)

DIRECTOR: the student trains against a frozen teacher.

>>> from reliacal.backbones import as_backbone
>>> from reliacal.nn import DirectorLoss, DirectorTrainingModule, build_director_student
>>> teacher = as_backbone(make_tiny_vit(num_classes=3, image_size=8, embed_dim=16,
...                                     depth=2, num_heads=2, random_state=0)).eval()
>>> _ = teacher.requires_grad_(False)
>>> student = build_director_student(teacher, n_reconfigured=1)
>>> module = DirectorTrainingModule(teacher, student).train()
>>> loss = DirectorLoss()(module(x), y)
>>> loss.backward()
>>> logits = student.eval().sample_logits(x, n_draws=4)  # 4 sampled paths per input
>>> logits.shape
torch.Size([4, 8, 3])
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
from torch import nn

from reliacal.backbones import BackboneAdapter, as_backbone
from reliacal.finetune.calattn_network import CalAttnLoss as _CalAttnLossBase
from reliacal.finetune.calattn_network import (
    CalAttnNetwork,
    CalAttnOutput,
    ScaleHead,
    resolve_token,
)
from reliacal.finetune.director_network import (
    DirectorStudent,
    DirectorTrainingModule,
    MeanHead,
    NoiseHead,
    ReverseStep,
    TransitionNetwork,
    WeightedDirectorLoss,
    build_student,
)
from reliacal.finetune.losses import get_base_loss

__all__ = [
    "CalAttnHead",
    "CalAttnLoss",
    "CalAttnModel",
    "CalAttnOutput",
    "DirectorLoss",
    "DirectorStudent",
    "DirectorTrainingModule",
    "MeanHead",
    "NoiseHead",
    "ReverseStep",
    "TemperatureScaler",
    "TransitionNetwork",
    "build_director_student",
]

# The estimator's builder under a name that says which method it belongs to.
build_director_student = build_student


class CalAttnHead(ScaleHead):
    r"""CalAttn's scale head: ``s(h) = softplus(W2 gelu(W1 h + b1) + b2) + 1e-6``.

    Maps token features ``h`` of shape ``(B, D)`` to one positive scale per
    row, shape ``(B,)`` in float32; divide the logits by it. It is the head
    :class:`~reliacal.finetune.CalAttnFinetuner` trains (its
    ``network_.scale_head``), with PyTorch's default initialisation, and has
    ``hidden * (D + 2) + 1`` parameters. :class:`CalAttnModel` builds one
    for you; use the head alone when you extract the features yourself.

    Parameters
    ----------
    in_features : int
        Width ``D`` of the features it reads (the backbone's token width;
        twice that for CalAttn's ``"concat"`` token).
    hidden : int, default=128
        Width of the hidden layer.

    Examples
    --------
    >>> import torch
    >>> head = CalAttnHead(16, hidden=8)
    >>> scale = head(torch.randn(4, 16))
    >>> scale.shape, bool((scale > 0).all())
    (torch.Size([4]), True)
    >>> sum(p.numel() for p in head.parameters()) == 8 * (16 + 2) + 1
    True
    """

    def __init__(self, in_features: int, hidden: int = 128) -> None:
        _check_positive_int("in_features", in_features)
        _check_positive_int("hidden", hidden)
        super().__init__(int(in_features), int(hidden))


class CalAttnModel(CalAttnNetwork):
    """A backbone and the CalAttn scale head on its tokens, in one forward pass.

    ``model(x)`` runs the backbone once, reads a token of its last layer
    with a :class:`CalAttnHead` and returns a :class:`CalAttnOutput`
    ``(calibrated_logits, scale, logits)`` with ``calibrated_logits = logits
    / scale[:, None]``. Nothing is detached: training it under
    :class:`CalAttnLoss` lets the calibration gradient reach the backbone.
    It is the network :class:`~reliacal.finetune.CalAttnFinetuner` trains
    (its ``network_``), so weights move between the two with
    ``load_state_dict``.

    Unlike the estimator, which trains a copy, the model wraps ``backbone``
    itself: training the model trains the object passed in.

    Parameters
    ----------
    backbone : nn.Module, BackboneAdapter or str
        A classifier :func:`reliacal.backbones.as_backbone` accepts (timm ViT
        / DeiT / Swin, Hugging Face ViT or BERT classifiers, a plain module
        wrapped with ``as_backbone(model, features=..., head=...)``).
    token : {"cls", "patch_mean", "concat", "pooled"}, default="cls"
        What the head reads (see :class:`~reliacal.finetune.CalAttnFinetuner`);
        ``"cls"`` reads the pooled features of a backbone without a class
        token.
    hidden : int, default=128
        Width of the head's hidden layer.
    freeze_backbone : bool, default=False
        Train only the head: the backbone's parameters get
        ``requires_grad=False`` and it stays in eval mode.

    Attributes
    ----------
    backbone : BackboneAdapter
        The wrapped backbone.
    scale_head : CalAttnHead
        The head (its parameters are the method's only extra ones).
    token : str
        The token read, after the ``"cls"`` fallback.

    Examples
    --------
    >>> import torch
    >>> from reliacal.datasets import make_tiny_vit
    >>> vit = make_tiny_vit(num_classes=3, image_size=8, embed_dim=16, depth=1,
    ...                     num_heads=2, random_state=0)
    >>> model = CalAttnModel(vit, hidden=8).eval()
    >>> out = model(torch.randn(2, 1, 8, 8))
    >>> torch.allclose(out.calibrated_logits, out.logits / out.scale[:, None])
    True
    >>> type(model.scale_head).__name__, model.token
    ('CalAttnHead', 'cls')
    """

    def __init__(
        self,
        backbone: Any,
        *,
        token: str = "cls",
        hidden: int = 128,
        freeze_backbone: bool = False,
    ) -> None:
        _check_positive_int("hidden", hidden)
        if not isinstance(freeze_backbone, bool):
            raise ValueError(f"freeze_backbone must be a bool, got {freeze_backbone!r}")
        adapter = backbone if isinstance(backbone, BackboneAdapter) else as_backbone(backbone)
        super().__init__(
            adapter,
            token=resolve_token(token, adapter),
            hidden=int(hidden),
            calibration_head=True,
            freeze_backbone=freeze_backbone,
        )
        # Same weights, same random draws (the parent built them): only the public class.
        self.scale_head.__class__ = CalAttnHead


class CalAttnLoss(_CalAttnLossBase):
    r"""CalAttn's training loss on a :class:`CalAttnOutput`.

    .. math::

        L = \ell_{\text{base}}(z / s, y)
            + \lambda_{\text{Brier}} \cdot \frac{1}{B}\sum_i \sum_c
              \big(\mathrm{softmax}(z_i / s_i)_c - \mathbb{1}[y_i = c]\big)^2

    on the calibrated logits ``z / s`` of the batch, the loss
    :class:`~reliacal.finetune.CalAttnFinetuner` minimises. Call it as
    ``loss_fn(model(x), y)``; it returns a scalar tensor.

    Parameters
    ----------
    n_classes : int
        Number of classes ``K``; labels outside ``[0, K)`` raise a ValueError.
    base_loss : str or callable, default="ce"
        A name :func:`reliacal.finetune.losses.get_base_loss` accepts
        (``"ce"``, ``"label_smoothing"``, ``"brier"``, ``"focal"``, ...) or a
        callable ``(logits, target) -> scalar``.
    lambda_brier : float, default=0.1
        Weight of the Brier term (0 removes it).
    label_smoothing : float, default=0.0
        Smoothing of ``"ce"`` / ``"label_smoothing"``.
    focal_gamma : float, default=3.0
        Gamma of ``"focal"`` and ``"dual_focal"``.

    Examples
    --------
    >>> import math, torch
    >>> from reliacal.nn import CalAttnOutput
    >>> logits = torch.tensor([[2.0, 0.0]])
    >>> out = CalAttnOutput(logits / 2.0, torch.tensor([2.0]), logits)
    >>> # softmax([1, 0]) = (p, 1 - p): CE = -log p, Brier = 2 (1 - p) ** 2
    >>> p = math.exp(1) / (math.exp(1) + 1)
    >>> value = CalAttnLoss(n_classes=2)(out, torch.tensor([0])).item()
    >>> math.isclose(value, -math.log(p) + 0.1 * 2 * (1 - p) ** 2, rel_tol=1e-6)
    True
    """

    def __init__(
        self,
        n_classes: int,
        *,
        base_loss: Any = "ce",
        lambda_brier: float = 0.1,
        label_smoothing: float = 0.0,
        focal_gamma: float = 3.0,
    ) -> None:
        if isinstance(n_classes, bool) or not isinstance(n_classes, numbers.Integral):
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
        if n_classes < 2:
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
        _check_at_least_zero("lambda_brier", lambda_brier)
        base = get_base_loss(base_loss, label_smoothing=label_smoothing, focal_gamma=focal_gamma)
        super().__init__(base, float(lambda_brier), int(n_classes))


class DirectorLoss(WeightedDirectorLoss):
    r"""DIRECTOR's loss on the outputs of :class:`DirectorTrainingModule`.

    .. math::

        L = \lambda_{\text{mean}}\,\mathrm{MSE}(\mu, h^{\text{teacher}})
            + \lambda_{\text{var}}\,D(\sigma, \sigma^q)
            + \lambda_{\text{CE}}\,\mathrm{CE}(\text{sampled logits}, y),

    the loss :class:`~reliacal.finetune.DiffusionReconfigurer` minimises
    (its defaults). ``D`` is the module's ``noise_error``: the squared error
    to ``sigma^q = 0`` or, with the module's ``noise_target > 0``, a Gaussian
    KL to that level. Call it as ``loss_fn(module(x), y)``. Each term is also
    summed, detached, per phase (training under gradients, validation under
    ``no_grad``); ``epoch_means()`` returns the per-sample means so far
    (``train_mean_matching``, ``val_cross_entropy``, ...; ``train_sigma``,
    the RMS noise scale, from the fourth output) and resets them.

    Parameters
    ----------
    lambda_mean, lambda_var, lambda_ce : float, default=0.5, 0.0, 0.5
        Weights of mean matching, noise matching and cross-entropy; each
        ``>= 0`` and at least one ``> 0``.

    Examples
    --------
    >>> import torch
    >>> loss_fn = DirectorLoss(lambda_mean=1.0, lambda_var=0.0, lambda_ce=0.0)
    >>> outputs = (torch.zeros(2, 3), torch.tensor([0.5, 1.5]), torch.zeros(2), torch.zeros(2))
    >>> loss_fn(outputs, torch.tensor([0, 1])).item()  # mean of the mean errors
    1.0
    >>> loss_fn.epoch_means()["train_mean_matching"]
    1.0
    """

    def __init__(
        self, lambda_mean: float = 0.5, lambda_var: float = 0.0, lambda_ce: float = 0.5
    ) -> None:
        weights = {"lambda_mean": lambda_mean, "lambda_var": lambda_var, "lambda_ce": lambda_ce}
        for name, value in weights.items():
            _check_at_least_zero(name, value)
        if not any(weights.values()):
            raise ValueError("at least one of lambda_mean, lambda_var, lambda_ce must be > 0")
        super().__init__(float(lambda_mean), float(lambda_var), float(lambda_ce))


class TemperatureScaler(nn.Module):
    r"""Temperature scaling as a module: ``forward(z) = z / T`` with ``T = exp(t)``.

    The one parameter is the log-temperature ``t`` (``log_temperature``), so
    any optimiser keeps ``T > 0``. There is no ``fit``: train it in your own
    loop, usually on held-out logits of a frozen model under cross-entropy,
    or put it after a model and train both. Softmax of the output gives the
    calibrated probabilities. For a fitted estimator on arrays use
    :class:`reliacal.calibrators.TemperatureScaling`.

    Parameters
    ----------
    temperature : float, default=1.0
        Initial temperature, finite and ``> 0``.

    Attributes
    ----------
    log_temperature : nn.Parameter
        Scalar ``log T`` (float32).

    Examples
    --------
    >>> import torch
    >>> scaler = TemperatureScaler(2.0)
    >>> scaler(torch.tensor([[2.0, 0.0]]))
    tensor([[1., 0.]], grad_fn=<DivBackward0>)

    Fitted in a loop on over-confident logits (those of a model twice too
    sure), the temperature comes out near 2:

    >>> _ = torch.manual_seed(0)
    >>> true_logits = torch.randn(4000, 5)
    >>> labels = torch.distributions.Categorical(logits=true_logits).sample()
    >>> scaler = TemperatureScaler()
    >>> optimizer = torch.optim.LBFGS(scaler.parameters(), lr=0.5, max_iter=100)
    >>> def closure():
    ...     optimizer.zero_grad()
    ...     loss = torch.nn.functional.cross_entropy(scaler(2 * true_logits), labels)
    ...     loss.backward()
    ...     return loss
    >>> _ = optimizer.step(closure)
    >>> round(scaler.temperature.item(), 1)
    2.0
    """

    def __init__(self, temperature: float = 1.0) -> None:
        super().__init__()
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
            raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
        if not (math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
        self.log_temperature = nn.Parameter(torch.tensor(math.log(temperature)))

    @property
    def temperature(self) -> torch.Tensor:
        """``T = exp(log_temperature)``, a scalar tensor (with gradient)."""
        return self.log_temperature.exp()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if not isinstance(logits, torch.Tensor) or logits.ndim < 1:
            raise ValueError(
                "logits must be a tensor of shape (..., K), got "
                f"{type(logits).__name__}{tuple(getattr(logits, 'shape', ()))}"
            )
        if not logits.is_floating_point():
            raise ValueError(f"logits must be floating point, got {logits.dtype}")
        # float64 logits stay float64: a 0-dim float32 tensor does not promote them.
        return logits / self.temperature

    def extra_repr(self) -> str:
        return f"temperature={self.temperature.item():.4g}"


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_at_least_zero(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
