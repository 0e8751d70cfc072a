"""The CalAttn network: a backbone adapter, the scale head on its tokens, and the loss.

Private to :mod:`reliacal.finetune.calattn`, which holds the estimator.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from reliacal._data import check_column_indices
from reliacal.backbones import BackboneAdapter, BackboneOutput
from reliacal.finetune.director_network import inverse_softplus
from reliacal.finetune.losses import brier_loss

TOKENS = ("cls", "patch_mean", "concat", "pooled")
SCALE_FLOOR = 1e-6


class CalAttnOutput(NamedTuple):
    """What one forward pass of the CalAttn network returns (a tuple, so DDP can read it)."""

    calibrated_logits: torch.Tensor
    scale: torch.Tensor
    logits: torch.Tensor


class ScaleHead(nn.Module):
    """``s(h) = softplus(W2 gelu(W1 h + b1) + b2) + 1e-6``, default PyTorch initialisation.

    With ``initial_scale`` the output bias ``b2`` is set so that the scale starts
    centred on that value (``W2`` keeps its small random start, so samples still
    differ a little); without it ``b2`` is near 0 and the scale starts near
    ``softplus(0) = ln 2``.
    """

    def __init__(self, in_features: int, hidden: int, initial_scale: float | None = None) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden), nn.GELU(), nn.Linear(hidden, 1), nn.Softplus()
        )
        if initial_scale is not None:
            nn.init.constant_(self.layers[2].bias, inverse_softplus(initial_scale))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.layers(features).squeeze(-1).float() + SCALE_FLOOR


class GlobalScale(nn.Module):
    """One learnable scale shared by every sample, ``softplus(b) + 1e-6``.

    The control for the per-sample head: trained end to end with the same
    loss, it shows how much of CalAttn's gain a single learned logit scale
    gives by itself. It starts at ``initial_scale`` (default 1: training
    starts from plain fine-tuning's logits).
    """

    def __init__(self, initial_scale: float | None = None) -> None:
        super().__init__()
        start = 1.0 if initial_scale is None else initial_scale
        self.raw_scale = nn.Parameter(torch.tensor(inverse_softplus(start)))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        scale = nn.functional.softplus(self.raw_scale.float()) + SCALE_FLOOR
        return scale.expand(features.shape[0])


class CalAttnNetwork(nn.Module):
    """A backbone adapter and the scale head that reads its tokens, in one forward pass.

    ``calibration_head=False`` is plain fine-tuning (the scale is fixed to 1):
    the baseline the method is compared with; ``"global"`` learns one scale
    for all samples (:class:`GlobalScale`), the control for the per-sample head.
    """

    def __init__(
        self,
        backbone: BackboneAdapter,
        *,
        token: str,
        hidden: int,
        calibration_head: bool | str,
        freeze_backbone: bool,
        initial_scale: float | None = None,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.token = token
        self.freeze_backbone = freeze_backbone
        self.in_features = _head_width(backbone, token)
        self.scale_head = _scale_head(calibration_head, self.in_features, hidden, initial_scale)
        if freeze_backbone:
            self.backbone.requires_grad_(False)

    def head_parameters(self) -> list[nn.Parameter]:
        """The parameters outside the backbone: those ``head_learning_rate`` trains."""
        backbone = {id(param) for param in self.backbone.parameters()}
        return [param for param in self.parameters() if id(param) not in backbone]

    def train(self, mode: bool = True) -> CalAttnNetwork:
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

    def forward(self, x: Any) -> CalAttnOutput:
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
        return CalAttnOutput(logits / scale[:, None], scale, logits)


def _scale_head(
    calibration_head: bool | str, in_features: int, hidden: int, initial_scale: float | None
) -> nn.Module | None:
    if calibration_head == "global":
        return GlobalScale(initial_scale)
    return ScaleHead(in_features, hidden, initial_scale) if calibration_head else None


def _head_width(backbone: BackboneAdapter, token: str) -> int:
    width = backbone.num_features
    if width is None:
        raise ValueError(
            "the backbone does not tell its feature width (num_features); wrap it with "
            "reliacal.backbones.as_backbone(model, features=..., head=...) around a Linear head"
        )
    return 2 * int(width) if token == "concat" else int(width)


def resolve_token(token: str, backbone: BackboneAdapter) -> str:
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


class CalAttnLoss:
    """``base_loss(z / s, y) + lambda_brier * Brier(softmax(z / s), y)``; picklable."""

    def __init__(self, base_loss, lambda_brier: float, n_classes: int) -> None:
        self.base_loss = base_loss
        self.lambda_brier = lambda_brier
        self.n_classes = n_classes

    def __call__(self, outputs: CalAttnOutput, target: torch.Tensor) -> torch.Tensor:
        check_column_indices(target, self.n_classes, "the training data")
        logits = outputs.calibrated_logits
        loss = self.base_loss(logits, target)
        if self.lambda_brier:
            loss = loss + self.lambda_brier * brier_loss(logits, target)
        return loss


def calibrated_logits(outputs: CalAttnOutput) -> torch.Tensor:
    return outputs.calibrated_logits


def float64_outputs(module: nn.Module, x: Any) -> CalAttnOutput:
    return CalAttnOutput(*(value.double() for value in module(x)))
