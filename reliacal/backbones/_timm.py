"""Adapters for timm classifiers (ViT, DeiT incl. distilled, Swin, and any model
with timm's ``forward_features`` / ``forward_head`` seam)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from reliacal.backbones._base import BackboneAdapter

__all__ = ["TimmAdapter", "TimmDistilledAdapter", "is_timm_model"]


def is_timm_model(model: Any) -> bool:
    """Whether ``model`` offers timm's feature/head seam."""
    return (
        isinstance(model, nn.Module)
        and type(model).__module__.startswith("timm.")
        and all(hasattr(model, name) for name in ("forward_features", "forward_head"))
        and hasattr(model, "get_classifier")
    )


def _flat_vit_stack(model: nn.Module) -> bool:
    """True for a VisionTransformer whose features are embed -> blocks -> norm.

    Subclasses that override ``forward_features`` (for instance with rotary
    embeddings) may feed the blocks more than the hidden states, so only the
    base implementation is trusted for reconfiguration.
    """
    from timm.models.vision_transformer import VisionTransformer

    return (
        isinstance(model, VisionTransformer)
        and type(model).forward_features is VisionTransformer.forward_features
        and isinstance(model.blocks, nn.Sequential)
    )


class TimmAdapter(BackboneAdapter):
    """Adapter for a timm classifier.

    ``encode`` is ``forward_features`` (tokens after the final norm; Swin's is
    the spatial map ``(B, H, W, D)``), ``pool`` is
    ``forward_head(tokens, pre_logits=True)`` (the class token for ViT/DeiT,
    average pooling for Swin, including any ``fc_norm``), and ``head`` is
    ``get_classifier()``. Reconfiguration is available for plain
    ``VisionTransformer`` stacks (ViT, DeiT): ``embed`` is patch embedding,
    position embedding with the prefix tokens, patch dropout and ``norm_pre``;
    ``finish`` is the final ``norm``.

    Parameters
    ----------
    model : timm model
        Needs a classifier (``num_classes > 0``) and a pooling that returns
        one vector per sample (``global_pool != ""``).
    """

    def __init__(self, model: nn.Module):
        super().__init__(model)
        if int(getattr(model, "num_classes", 0)) <= 0:
            raise ValueError(
                f"the timm model {type(model).__name__} has no classifier (num_classes=0); "
                "create it with num_classes=K or call model.reset_classifier(K)"
            )
        if getattr(model, "global_pool", None) == "":
            raise ValueError(
                "the timm model has global_pool='' (no pooling): its pre-logits are not one "
                "vector per sample; create it with global_pool='token' or 'avg'"
            )
        self.num_classes = int(model.num_classes)
        self.num_features = int(getattr(model, "head_hidden_size", None) or model.num_features)
        self.has_cls_token = getattr(model, "cls_token", None) is not None
        self.num_prefix_tokens = int(getattr(model, "num_prefix_tokens", 0))
        self.supports_reconfiguration = _flat_vit_stack(model)
        self.num_heads = _block_heads(model.blocks[0]) if self.supports_reconfiguration else None

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_features(x)

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.forward_head(tokens, pre_logits=True)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.model.get_classifier()(pooled)

    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if not self.supports_reconfiguration:
            raise self._unsupported()
        model = self.model
        h = model.patch_embed(x)
        # timm (1.0.31) has no public call for the embedding alone: forward_intermediates
        # always runs at least one block. _pos_embed adds the prefix tokens and positions.
        h = model._pos_embed(h)
        h = model.patch_drop(h)
        return model.norm_pre(h), None

    @property
    def blocks(self) -> list[nn.Module]:
        if not self.supports_reconfiguration:
            raise self._unsupported()
        return list(self.model.blocks)

    def apply_block(self, index: int, h: torch.Tensor, context: Any) -> torch.Tensor:
        if not self.supports_reconfiguration:
            raise self._unsupported()
        return self.model.blocks[index](h)

    def finish(self, h: torch.Tensor, context: Any) -> torch.Tensor:
        if not self.supports_reconfiguration:
            raise self._unsupported()
        return self.model.norm(h)

    def readout_parameters(self) -> list[nn.Parameter]:
        if not self.supports_reconfiguration:
            raise self._unsupported()
        model = self.model
        # finish is `norm`; forward_head pools (attention pooling when present), applies
        # fc_norm and dropout, and the classifier.
        attn_pool = getattr(model, "attn_pool", None)
        return self._parameters_of(model.norm, attn_pool, model.fc_norm, model.head)


class TimmDistilledAdapter(TimmAdapter):
    """Adapter for timm's distilled DeiT (``VisionTransformerDistilled``).

    The model has two heads: ``head`` reads the class token and ``head_dist``
    the distillation token; its eval-mode output is their average. Here
    ``pooled`` is the model's own pre-logits, the mean of the two tokens, and
    ``forward``/``classify`` return the model's logits exactly,
    ``(head(tokens[:, 0]) + head_dist(tokens[:, 1])) / 2``, also in training
    mode (where timm would return the two heads separately when
    ``distilled_training`` is set).

    ``head(pooled)`` cannot reproduce those logits from the mean token alone;
    it applies the average of the two linear heads to ``pooled``, the single
    linear classifier that agrees with the model when the two tokens
    coincide. It is meant for initialising a new classifier on pooled
    features; use ``classify(tokens)`` for the model's logits.
    """

    def _logits(self, tokens: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        model = self.model
        cls_logits = model.head(model.head_drop(tokens[:, 0]))
        dist_logits = model.head_dist(model.head_drop(tokens[:, 1]))
        return (cls_logits + dist_logits) / 2

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        return (self.model.head(pooled) + self.model.head_dist(pooled)) / 2

    def readout_parameters(self) -> list[nn.Parameter]:
        model = self.model
        return self._parameters_of(model.norm, model.head, model.head_dist)


def _block_heads(block: nn.Module) -> int | None:
    """The head count of a timm transformer block: its attention module's ``num_heads``."""
    for module in block.modules():
        heads = getattr(module, "num_heads", None)
        if isinstance(heads, int) and heads > 0:
            return heads
    return None
