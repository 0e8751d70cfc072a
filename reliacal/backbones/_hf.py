"""Adapters for Hugging Face transformers classifiers (ViT and BERT-style encoders)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from reliacal.backbones._base import BackboneAdapter

__all__ = ["HFBertAdapter", "HFViTAdapter", "hf_adapter_for"]

_TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def _is_hf_model(model: Any) -> bool:
    # transformers is imported by whoever built the model; never import it just to check.
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


def _bidirectional_mask(config, embeddings: torch.Tensor, attention_mask):
    from transformers.masking_utils import create_bidirectional_mask

    return create_bidirectional_mask(
        config=config, inputs_embeds=embeddings, attention_mask=attention_mask
    )


def _layers(base: nn.Module) -> nn.ModuleList | None:
    """The ordered blocks of a transformers encoder (the attribute moved across versions)."""
    layers = getattr(base, "layers", None)
    if isinstance(layers, nn.ModuleList):
        return layers
    encoder = getattr(base, "encoder", None)
    for name in ("layer", "layers"):
        layers = getattr(encoder, name, None)
        if isinstance(layers, nn.ModuleList):
            return layers
    return None


def _heads(config) -> int | None:
    heads = getattr(config, "num_attention_heads", None)
    return heads if isinstance(heads, int) and heads > 0 else None


class HFViTAdapter(BackboneAdapter):
    """Adapter for ``transformers.ViTForImageClassification``.

    ``encode(x)`` is the ViT encoder's ``last_hidden_state`` (after its final
    LayerNorm); ``pool`` takes the class token (what the classifier reads);
    ``head`` is ``model.classifier``. ``x`` is a ``pixel_values`` tensor
    ``(B, C, H, W)`` or a dict holding ``"pixel_values"``. Reconfiguration:
    ``embed`` is ``vit.embeddings`` (context: the attention mask, None for
    images), the blocks are the encoder layers and ``finish`` is
    ``vit.layernorm``.
    """

    has_cls_token = True
    num_prefix_tokens = 1
    supports_reconfiguration = True

    def __init__(self, model: nn.Module):
        super().__init__(model)
        self.num_features = int(model.config.hidden_size)
        self.num_classes = int(model.config.num_labels)
        self.num_heads = _heads(model.config)

    @staticmethod
    def _pixels(x: Any) -> torch.Tensor:
        if isinstance(x, Mapping):
            if "pixel_values" not in x:
                raise ValueError("a dict input to a ViT model must hold 'pixel_values'")
            return x["pixel_values"]
        return x

    def encode(self, x: Any) -> torch.Tensor:
        return self.model.vit(pixel_values=self._pixels(x)).last_hidden_state

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens[:, 0, :]

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.model.classifier(pooled)

    def embed(self, x: Any) -> tuple[torch.Tensor, Any]:
        vit = self.model.vit
        pixels = self._pixels(x)
        # ViTModel casts the pixels to its weights' dtype before embedding; so do we.
        pixels = pixels.to(vit.embeddings.patch_embeddings.projection.weight.dtype)
        h = vit.embeddings(pixels)
        return h, _bidirectional_mask(vit.config, h, None)

    @property
    def blocks(self) -> list[nn.Module]:
        return list(_layers(self.model.vit))

    def apply_block(self, index: int, h: torch.Tensor, context: Any) -> torch.Tensor:
        return _layers(self.model.vit)[index](h, context)

    def finish(self, h: torch.Tensor, context: Any) -> torch.Tensor:
        return self.model.vit.layernorm(h)

    def readout_parameters(self) -> list[nn.Parameter]:
        return self._parameters_of(self.model.vit.layernorm, self.model.classifier)


class HFBertAdapter(BackboneAdapter):
    """Adapter for BERT-style ``*ForSequenceClassification`` models.

    A BERT-style model has a base encoder with ``embeddings``, an ordered list
    of layers and a ``pooler``, and classifies ``classifier(dropout(pooler_output))``
    (``BertForSequenceClassification`` and models built the same way).
    ``encode`` is the encoder's ``last_hidden_state``, ``pool`` the pooler
    (tanh of a dense layer on the first token: what the classifier reads),
    ``head`` the dropout and classifier.

    Inputs ``x``: a tensor of token ids ``(B, L)``, whose attention mask marks
    every position that is not ``config.pad_token_id`` (all positions when the
    config has no pad token); a dict with ``input_ids`` and optionally
    ``attention_mask`` and ``token_type_ids``; or a tuple
    ``(input_ids, attention_mask[, token_type_ids])``.

    Reconfiguration: ``embed`` returns the embeddings and, as context, the
    attention mask in the form the layers expect; the blocks are the encoder
    layers; ``finish`` is the identity (BERT's layers end in their own
    LayerNorm).
    """

    has_cls_token = True
    num_prefix_tokens = 1
    supports_reconfiguration = True

    def __init__(self, model: nn.Module):
        super().__init__(model)
        config = model.config
        if getattr(config, "is_decoder", False):
            raise ValueError("the text model is configured as a decoder; pass an encoder")
        self.num_features = int(config.hidden_size)
        self.num_classes = int(config.num_labels)
        self.num_heads = _heads(config)

    @property
    def _base(self) -> nn.Module:
        return self.model.base_model

    def _inputs(self, x: Any) -> dict[str, torch.Tensor]:
        if isinstance(x, Mapping):
            unknown = set(x) - set(_TEXT_KEYS)
            if unknown or "input_ids" not in x:
                raise ValueError(
                    f"a dict input to a text model needs 'input_ids' and may hold {_TEXT_KEYS}; "
                    f"got keys {sorted(x)}"
                )
            inputs = dict(x)
        elif isinstance(x, Sequence) and not isinstance(x, torch.Tensor):
            if not 1 <= len(x) <= 3:
                raise ValueError(
                    "a tuple input to a text model is (input_ids, attention_mask"
                    f"[, token_type_ids]); got {len(x)} elements"
                )
            inputs = dict(zip(_TEXT_KEYS, x))
        else:
            inputs = {"input_ids": x}
        if inputs["input_ids"].ndim != 2:
            raise ValueError(
                f"input_ids must be (batch, length); got shape {tuple(inputs['input_ids'].shape)}"
            )
        if inputs.get("attention_mask") is None:
            pad_id = self.model.config.pad_token_id
            ids = inputs["input_ids"]
            mask = torch.ones_like(ids) if pad_id is None else (ids != pad_id).long()
            inputs["attention_mask"] = mask
        return inputs

    def encode(self, x: Any) -> torch.Tensor:
        return self._base(**self._inputs(x)).last_hidden_state

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._base.pooler(tokens)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.model.classifier(self.model.dropout(pooled))

    def embed(self, x: Any) -> tuple[torch.Tensor, Any]:
        inputs = self._inputs(x)
        h = self._base.embeddings(
            input_ids=inputs["input_ids"], token_type_ids=inputs.get("token_type_ids")
        )
        return h, _bidirectional_mask(self._base.config, h, inputs["attention_mask"])

    @property
    def blocks(self) -> list[nn.Module]:
        return list(_layers(self._base))

    def apply_block(self, index: int, h: torch.Tensor, context: Any) -> torch.Tensor:
        return _layers(self._base)[index](h, context)

    def finish(self, h: torch.Tensor, context: Any) -> torch.Tensor:
        return h

    def readout_parameters(self) -> list[nn.Parameter]:
        # finish is the identity; classify is the pooler, dropout and classifier.
        return self._parameters_of(self._base.pooler, self.model.classifier)


def _is_bert_style(model: nn.Module) -> bool:
    base = getattr(model, "base_model", None)
    return (
        type(model).__name__.endswith("ForSequenceClassification")
        and isinstance(getattr(model, "classifier", None), nn.Linear)
        and isinstance(getattr(model, "dropout", None), nn.Dropout)
        and base is not None
        and base is not model
        and getattr(base, "pooler", None) is not None
        and hasattr(base, "embeddings")
        and _layers(base) is not None
    )


def hf_adapter_for(model: Any) -> BackboneAdapter | None:
    """The adapter for a supported transformers model, None if not one, ValueError if unsupported."""
    if not _is_hf_model(model):
        return None
    from transformers import ViTForImageClassification

    if isinstance(model, ViTForImageClassification):
        return HFViTAdapter(model)
    if _is_bert_style(model):
        return HFBertAdapter(model)
    raise ValueError(
        f"the transformers model {type(model).__name__} is not supported: pass a "
        "ViTForImageClassification or a BERT-style *ForSequenceClassification model (encoder, "
        "pooler, dropout, linear classifier), or name its parts with "
        "as_backbone(model, features=..., head=...)"
    )
