"""Training losses for calibration-aware fine-tuning.

Every loss here maps ``(logits (B, K), target (B,) int64)`` to a scalar
tensor (the batch mean), so that any of them can serve as the base loss of
:class:`~reliacal.finetune.CalAttnFinetuner` or be passed to the shared
training loop. :func:`get_base_loss` resolves the names the estimators accept.

References
----------
Guo et al., "On Calibration of Modern Neural Networks", ICML 2017.
Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017.
Kumar, Sarawagi, Jain, "Trainable Calibration Measures for Neural Networks
from Kernel Mean Embeddings", ICML 2018.
Mukhoti et al., "Calibrating Deep Neural Networks using Focal Loss",
NeurIPS 2020.
Tao, Dong, Xu, "Dual Focal Loss for Calibration", ICML 2023.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from reliacal._docstrings import shared_doc
from reliacal._validation import check_scores_and_target

LossFunction = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# The docstring sections every loss shares (see reliacal._docstrings).
_LOSS_INPUTS = """\
Parameters
----------
logits : torch.Tensor of shape (B, K)
target : torch.Tensor of shape (B,), int64 class indices"""
_LOSS_DOCS = {
    "loss_inputs": _LOSS_INPUTS,
    "focal_inputs": _LOSS_INPUTS + "\ngamma : float >= 0, default 3.0",
    "loss_returns": "Returns\n-------\ntorch.Tensor\n    Scalar loss.",
}

BASE_LOSSES = ("ce", "label_smoothing", "brier", "focal", "flsd53", "dual_focal", "mmce")


def _check_at_least_zero(name: str, value: float) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def _check_label_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")


def _as_float(logits: torch.Tensor) -> torch.Tensor:
    # Half-precision logits (autocast) are upcast; float64 stays float64.
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def _target_log_probability(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    log_probs = F.log_softmax(_as_float(logits), dim=1)
    return log_probs.gather(1, target.long()[:, None])[:, 0]


@shared_doc(_LOSS_DOCS)
def cross_entropy_loss(
    logits: torch.Tensor, target: torch.Tensor, *, label_smoothing: float = 0.0
) -> torch.Tensor:
    r"""Mean cross-entropy, optionally with label smoothing.

    With smoothing :math:`\epsilon` the target distribution is
    :math:`(1 - \epsilon)\,\mathrm{onehot}(y) + \epsilon / K` (Szegedy et al.,
    2016), the convention of ``torch.nn.functional.cross_entropy``:

    .. math:: L = -\frac{1}{B}\sum_i \sum_c q_{ic} \log p_{ic}.

    {loss_inputs}
    label_smoothing : float in [0, 1), default 0.0

    {loss_returns}

    Examples
    --------
    >>> import torch
    >>> logits = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    >>> round(cross_entropy_loss(logits, torch.tensor([0, 1])).item(), 4)
    0.4100
    """
    check_scores_and_target(logits, target, "logits")
    _check_label_smoothing(label_smoothing)
    return F.cross_entropy(_as_float(logits), target.long(), label_smoothing=label_smoothing)


@shared_doc(_LOSS_DOCS)
def brier_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    r"""Multi-class Brier score of ``softmax(logits)`` (Brier, 1950).

    .. math:: L = \frac{1}{B}\sum_i \sum_c (p_{ic} - \mathbb{1}[y_i = c])^2,

    the mean over samples of the squared error summed over classes (values in
    [0, 2]).

    {loss_inputs}

    {loss_returns}

    Examples
    --------
    >>> import torch
    >>> brier_loss(torch.zeros(1, 2), torch.tensor([0])).item()
    0.5
    """
    check_scores_and_target(logits, target, "logits")
    probs = torch.softmax(_as_float(logits), dim=1)
    onehot = F.one_hot(target.long(), num_classes=logits.shape[1]).to(probs.dtype)
    return (probs - onehot).pow(2).sum(dim=1).mean()


@shared_doc(_LOSS_DOCS)
def focal_loss(logits: torch.Tensor, target: torch.Tensor, *, gamma: float = 3.0) -> torch.Tensor:
    r"""Focal loss with a fixed focusing parameter (Lin et al., 2017).

    .. math:: L = -\frac{1}{B}\sum_i (1 - p_{i,y_i})^{\gamma} \log p_{i,y_i}.

    ``gamma = 0`` is cross-entropy. Mukhoti et al. (2020) show that focal loss
    improves calibration; ``gamma = 3`` is their fixed-gamma setting.

    {focal_inputs}

    {loss_returns}

    Examples
    --------
    >>> import torch
    >>> # p_true = 0.5: (1 - 0.5) ** 2 * log(2)
    >>> round(focal_loss(torch.zeros(1, 2), torch.tensor([1]), gamma=2.0).item(), 6)
    0.173287
    """
    check_scores_and_target(logits, target, "logits")
    _check_at_least_zero("gamma", gamma)
    log_p = _target_log_probability(logits, target)
    return -((1.0 - log_p.exp()).pow(gamma) * log_p).mean()


@shared_doc(_LOSS_DOCS)
def flsd53_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    r"""Focal loss with the sample-dependent schedule FLSD-53 (Mukhoti et al., 2020).

    Each sample uses :math:`\gamma_i = 5` when its true-class probability
    :math:`p_{i,y_i} < 0.2` and :math:`\gamma_i = 3` otherwise:

    .. math:: L = -\frac{1}{B}\sum_i (1 - p_{i,y_i})^{\gamma_i} \log p_{i,y_i}.

    The choice of :math:`\gamma_i` is piecewise constant, so no gradient flows
    through it.

    {loss_inputs}

    {loss_returns}

    Examples
    --------
    >>> import torch
    >>> # 10 classes, uniform: p_true = 0.1 < 0.2, so gamma = 5: 0.9 ** 5 * log(10)
    >>> round(flsd53_loss(torch.zeros(1, 10), torch.tensor([3])).item(), 6)
    1.359653
    """
    check_scores_and_target(logits, target, "logits")
    log_p = _target_log_probability(logits, target)
    p = log_p.exp()
    gamma = torch.where(p.detach() < 0.2, 5.0, 3.0)
    return -((1.0 - p).pow(gamma) * log_p).mean()


@shared_doc(_LOSS_DOCS)
def dual_focal_loss(
    logits: torch.Tensor, target: torch.Tensor, *, gamma: float = 3.0
) -> torch.Tensor:
    r"""Dual focal loss (Tao, Dong, Xu, ICML 2023).

    .. math::

        L = -\frac{1}{B}\sum_i (1 - p_{i,y_i} + p_{i,j_i})^{\gamma} \log p_{i,y_i},
        \qquad j_i = \arg\max_{k \ne y_i} p_{ik},

    where :math:`p_{i,j_i}` is the largest non-target probability. Unlike focal
    loss, the weight stays large when a wrong class competes closely with the
    true one, which counters under-confidence.

    {focal_inputs}

    {loss_returns}

    Examples
    --------
    >>> import torch
    >>> # p = (0.5, 0.5), target 0: (1 - 0.5 + 0.5) ** 2 * log(2)
    >>> round(dual_focal_loss(torch.zeros(1, 2), torch.tensor([0]), gamma=2.0).item(), 6)
    0.693147
    """
    check_scores_and_target(logits, target, "logits")
    _check_at_least_zero("gamma", gamma)
    log_probs = F.log_softmax(_as_float(logits), dim=1)
    probs = log_probs.exp()
    target = target.long()[:, None]
    log_p = log_probs.gather(1, target)[:, 0]
    # Probabilities are >= 0, so zeroing the target column leaves the largest rival on top.
    runner_up = probs.scatter(1, target, 0.0).max(dim=1).values
    return -((1.0 - log_p.exp() + runner_up).pow(gamma) * log_p).mean()


@shared_doc(_LOSS_DOCS)
def mmce_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    *,
    weight: float = 1.0,
    bandwidth: float = 0.4,
) -> torch.Tensor:
    r"""Cross-entropy plus the weighted MMCE penalty (Kumar, Sarawagi, Jain, ICML 2018).

    With confidences :math:`r_i = \max_c p_{ic}`, the Laplacian kernel
    :math:`k(r, r') = \exp(-|r - r'| / \text{bandwidth})`, the correctly
    classified set :math:`C` and the misclassified set :math:`W`, the weighted
    MMCE is the RKHS distance

    .. math::

        \mathrm{MMCE}_w^2 = \Big\| \frac{1}{|C|}\sum_{i \in C} (1 - r_i)\,\phi(r_i)
            - \frac{1}{|W|}\sum_{j \in W} r_j\,\phi(r_j) \Big\|^2,

    expanded with :math:`k`, and the training objective is the paper's
    :math:`\mathrm{NLL} + \lambda\,\mathrm{MMCE}_w`. The paper's kernel width
    is 0.4. An empty set contributes nothing (its mean embedding is taken as
    zero); ``1e-10`` is added under the square root so that its gradient stays
    finite at zero.

    {loss_inputs}
    weight : float >= 0, default 1.0
        :math:`\lambda`, the weight of the MMCE term (tuned on validation data
        in the paper).
    bandwidth : float > 0, default 0.4

    {loss_returns}

    Examples
    --------
    >>> import torch
    >>> # one correct sample with confidence 0.5: NLL = log 2, MMCE_w = 0.5
    >>> round(mmce_loss(torch.zeros(1, 2), torch.tensor([0])).item(), 4)
    1.1931
    """
    check_scores_and_target(logits, target, "logits")
    _check_at_least_zero("weight", weight)
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth!r}")
    logits = _as_float(logits)
    nll = F.cross_entropy(logits, target.long())
    confidence, predicted = torch.softmax(logits, dim=1).max(dim=1)
    correct = (predicted == target).to(confidence.dtype)
    n_correct, n_wrong = correct.sum(), (1.0 - correct).sum()
    # Signed weight of each sample in the difference of the two mean embeddings.
    coefficient = correct * (1.0 - confidence) / n_correct.clamp(min=1.0) - (
        1.0 - correct
    ) * confidence / n_wrong.clamp(min=1.0)
    kernel = torch.exp(-torch.abs(confidence[:, None] - confidence[None, :]) / bandwidth)
    squared = coefficient @ kernel @ coefficient
    return nll + weight * torch.sqrt(squared.clamp(min=0.0) + 1e-10)


def get_base_loss(
    base_loss: str | LossFunction,
    *,
    label_smoothing: float = 0.0,
    focal_gamma: float = 3.0,
) -> LossFunction:
    """Return the loss function that ``base_loss`` names.

    Parameters
    ----------
    base_loss : {"ce", "label_smoothing", "brier", "focal", "flsd53", \
"dual_focal", "mmce"} or callable
        A callable must map ``(logits (B, K), target (B,))`` to a scalar
        tensor and is returned as it is.
    label_smoothing : float, default 0.0
        The smoothing of ``"ce"`` and ``"label_smoothing"``; the latter needs
        a value > 0 (the CalAttn paper uses 0.1). Any other base loss needs 0,
        so that a setting is never silently ignored.
    focal_gamma : float, default 3.0
        The fixed gamma of ``"focal"`` and ``"dual_focal"``.

    Returns
    -------
    callable
        ``loss(logits, target) -> scalar tensor``.

    Examples
    --------
    >>> import torch
    >>> loss = get_base_loss("label_smoothing", label_smoothing=0.1)
    >>> round(loss(torch.zeros(2, 3), torch.tensor([0, 2])).item(), 4)
    1.0986
    """
    if callable(base_loss):
        return base_loss
    if base_loss not in BASE_LOSSES:
        raise ValueError(f"base_loss must be one of {BASE_LOSSES} or a callable, got {base_loss!r}")
    _check_label_smoothing(label_smoothing)
    if base_loss == "label_smoothing" and label_smoothing == 0.0:
        raise ValueError(
            "base_loss='label_smoothing' needs label_smoothing > 0 (the CalAttn paper uses 0.1)"
        )
    if base_loss not in ("ce", "label_smoothing") and label_smoothing != 0.0:
        raise ValueError(
            f"label_smoothing={label_smoothing!r} applies only to base_loss 'ce' or "
            f"'label_smoothing', not {base_loss!r}"
        )
    _check_at_least_zero("focal_gamma", focal_gamma)
    if base_loss in ("ce", "label_smoothing"):
        return partial(cross_entropy_loss, label_smoothing=label_smoothing)
    if base_loss == "focal":
        return partial(focal_loss, gamma=focal_gamma)
    if base_loss == "dual_focal":
        return partial(dual_focal_loss, gamma=focal_gamma)
    return {"brier": brier_loss, "flsd53": flsd53_loss, "mmce": mmce_loss}[base_loss]
