"""as_backbone: a model, a model name or an adapter, wrapped in its adapter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from reliacal.backbones._base import BackboneAdapter
from reliacal.backbones._hf import hf_adapter_for
from reliacal.backbones._plain import PlainAdapter
from reliacal.backbones._timm import TimmAdapter, TimmDistilledAdapter, is_timm_model

__all__ = ["as_backbone"]

_WHAT_TO_PASS = (
    "pass a timm model or timm model name, a transformers ViTForImageClassification or "
    "BERT-style *ForSequenceClassification model, a BackboneAdapter, or any nn.Module with "
    "as_backbone(model, features=..., head=...) naming its feature and classifier parts"
)


def _create_timm(name: str, pretrained: bool, num_classes: int | None, kwargs: dict) -> nn.Module:
    import timm

    if not timm.is_model(name):
        raise ValueError(
            f"{name!r} is not a timm model name (see timm.list_models()); " + _WHAT_TO_PASS
        )
    if num_classes is not None:
        kwargs = {**kwargs, "num_classes": num_classes}
    return timm.create_model(name, pretrained=pretrained, **kwargs)


def as_backbone(
    model: Any,
    *,
    features: str | Callable | None = None,
    head: str | Callable | None = None,
    pretrained: bool = False,
    num_classes: int | None = None,
    model_kwargs: dict | None = None,
) -> BackboneAdapter:
    """Wrap a classifier in the :class:`BackboneAdapter` for its family.

    Supported families:

    - timm models (ViT, DeiT, distilled DeiT, Swin and anything with timm's
      ``forward_features`` / ``forward_head`` / ``get_classifier`` seam):
      :class:`TimmAdapter`, :class:`TimmDistilledAdapter`;
    - a timm model name: ``timm.create_model(name, pretrained=pretrained,
      num_classes=num_classes, **model_kwargs)``;
    - ``transformers.ViTForImageClassification``: :class:`HFViTAdapter`;
    - BERT-style ``*ForSequenceClassification`` (``BertForSequenceClassification``
      or ``AutoModelForSequenceClassification`` of a BERT checkpoint):
      :class:`HFBertAdapter`;
    - any ``nn.Module`` with ``features=`` and ``head=`` naming its parts:
      :class:`PlainAdapter` (these also override the automatic choice);
    - a :class:`BackboneAdapter`, returned unchanged.

    Parameters
    ----------
    model : nn.Module, BackboneAdapter or str
        The classifier, or a timm model name.
    features, head : str or callable, optional
        Submodule names (or callables) of a plain module's feature part
        (returning pre-logits ``(B, D)``) and classifier part. Give both or
        neither.
    pretrained : bool, default=False
        Load pretrained weights; only for a timm model name.
    num_classes : int, optional
        Size of the classifier created for a timm model name. For a model
        instance it must match the model's own, if given.
    model_kwargs : dict, optional
        Further arguments to ``timm.create_model`` (e.g. ``img_size``).

    Returns
    -------
    BackboneAdapter

    Raises
    ------
    ValueError
        For an unknown kind of model or name, only one of ``features``/``head``,
        ``pretrained``/``model_kwargs`` beside an instance, or a ``num_classes``
        that disagrees with the model.

    Examples
    --------
    >>> import torch
    >>> backbone = as_backbone("vit_tiny_patch16_224", num_classes=3,
    ...                        model_kwargs=dict(img_size=16, patch_size=8, embed_dim=16,
    ...                                          depth=2, num_heads=2))
    >>> out = backbone.eval()(torch.randn(2, 3, 16, 16))
    >>> out.tokens.shape, out.pooled.shape, out.logits.shape
    (torch.Size([2, 5, 16]), torch.Size([2, 16]), torch.Size([2, 3]))
    >>> h, context = backbone.embed(torch.randn(2, 3, 16, 16))
    >>> len(backbone.blocks), h.shape
    (2, torch.Size([2, 5, 16]))
    """
    if (features is None) != (head is None):
        raise ValueError("give both features= and head= (or neither)")
    if isinstance(model, BackboneAdapter):
        if features is not None or num_classes not in (None, model.num_classes):
            raise ValueError("model is already a BackboneAdapter: pass it without other options")
        return model
    if isinstance(model, str):
        model = _create_timm(model, pretrained, num_classes, dict(model_kwargs or {}))
    elif pretrained or model_kwargs:
        raise ValueError("pretrained= and model_kwargs= apply only when model is a timm name")
    if not isinstance(model, nn.Module):
        raise ValueError(f"cannot use a {type(model).__name__} as a backbone: " + _WHAT_TO_PASS)

    if features is not None:
        adapter: BackboneAdapter = PlainAdapter(model, features, head)
    elif is_timm_model(model):
        from timm.models.deit import VisionTransformerDistilled

        if isinstance(model, VisionTransformerDistilled):
            adapter = TimmDistilledAdapter(model)
        else:
            adapter = TimmAdapter(model)
    else:
        adapter = hf_adapter_for(model)
        if adapter is None:
            raise ValueError(
                f"cannot tell how to split a {type(model).__name__} into features and head: "
                + _WHAT_TO_PASS
            )
    if num_classes is not None and adapter.num_classes not in (None, num_classes):
        raise ValueError(
            f"num_classes={num_classes} but the model has {adapter.num_classes} outputs"
        )
    return adapter
