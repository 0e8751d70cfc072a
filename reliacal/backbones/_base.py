"""The adapter protocol every backbone family implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["BackboneAdapter", "BackboneOutput", "ReconfigurationNotSupportedError"]


class ReconfigurationNotSupportedError(ValueError, NotImplementedError):
    """The backbone does not expose its embedding and ordered blocks.

    Raised by :meth:`BackboneAdapter.embed`, :attr:`BackboneAdapter.blocks`,
    :meth:`BackboneAdapter.apply_block` and :meth:`BackboneAdapter.finish` for
    families (Swin, plain modules) whose computation is not a flat stack of
    transformer blocks. It is both a ``ValueError`` (the estimator was given
    an unsuitable backbone) and a ``NotImplementedError``.
    """


@dataclass
class BackboneOutput:
    """Everything one forward pass of a backbone produces.

    Attributes
    ----------
    tokens : torch.Tensor
        Final token sequence ``(B, N, D)`` after the final norm (for Swin the
        spatial map ``(B, H, W, D)``).
    pooled : torch.Tensor
        Pre-logits features ``(B, D)``, exactly what the classifier reads.
    logits : torch.Tensor
        Classifier outputs ``(B, K)``, equal to the wrapped model's own output.
    """

    tokens: torch.Tensor
    pooled: torch.Tensor
    logits: torch.Tensor


class BackboneAdapter(nn.Module):
    """One protocol over classifiers from timm, transformers and plain modules.

    ``forward(x)`` runs the wrapped model once and returns a
    :class:`BackboneOutput` with the final tokens, the pooled pre-logits
    features and the logits: ``encode -> pool -> head``. The wrapped model is
    the registered submodule ``model``, so ``adapter.parameters()`` are the
    model's parameters and ``adapter.train()/eval()/to()`` act on it.

    Reconfiguration (DIRECTOR) uses the decomposition
    ``h, context = embed(x)``; ``h = apply_block(i, h, context)`` for each
    ``i`` in ``range(len(blocks))``; ``tokens = finish(h, context)``, which
    equals ``encode(x)`` exactly. Families without it set
    ``supports_reconfiguration = False`` and raise
    :class:`ReconfigurationNotSupportedError`.

    Attributes
    ----------
    model : torch.nn.Module
        The wrapped classifier.
    num_features : int or None
        Width D of the pooled features (None when it cannot be read from a
        plain module).
    num_classes : int or None
        Number of logits K (None when it cannot be read from a plain module).
    has_cls_token : bool
        Whether ``tokens[:, 0]`` is a class token.
    num_prefix_tokens : int
        Tokens before the patch tokens (class, distillation, register tokens);
        ``tokens[:, num_prefix_tokens:]`` are the patch (or word) tokens.
    num_heads : int or None
        Attention heads of each transformer block (None when unknown, or not
        one number for the whole stack, as in Swin).
    supports_reconfiguration : bool
        Whether ``embed``/``blocks``/``apply_block``/``finish`` and
        ``readout_parameters`` are available.
    """

    num_features: int | None = None
    num_heads: int | None = None
    num_classes: int | None = None
    has_cls_token: bool = False
    num_prefix_tokens: int = 0
    supports_reconfiguration: bool = False

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def encode(self, x: Any) -> torch.Tensor:
        """Return the final tokens ``(B, N, D)`` (Swin: ``(B, H, W, D)``)."""
        raise NotImplementedError

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        """Return the pre-logits features ``(B, D)`` the classifier reads."""
        raise NotImplementedError

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Return the logits ``(B, K)`` for pre-logits features ``(B, D)``."""
        raise NotImplementedError

    def classify(self, tokens: torch.Tensor) -> torch.Tensor:
        """Return the model's logits from its final tokens (``pool`` then ``head``).

        Use this rather than ``head(pool(tokens))`` to get logits from tokens:
        it is exact also for a distilled DeiT, whose two heads read two
        different tokens.
        """
        return self._logits(tokens, self.pool(tokens))

    def _logits(self, tokens: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        return self.head(pooled)

    def forward(self, x: Any) -> BackboneOutput:
        """Run the model once: ``encode``, ``pool`` and the logits."""
        tokens = self.encode(x)
        pooled = self.pool(tokens)
        return BackboneOutput(tokens=tokens, pooled=pooled, logits=self._logits(tokens, pooled))

    # Reconfiguration -----------------------------------------------------------------------

    def _unsupported(self) -> ReconfigurationNotSupportedError:
        return ReconfigurationNotSupportedError(
            f"{type(self).__name__} ({type(self.model).__name__}) does not expose its embedding "
            "and ordered transformer blocks; reconfiguration supports timm ViT/DeiT, "
            "Hugging Face ViT and BERT-style encoders"
        )

    def embed(self, x: Any) -> tuple[torch.Tensor, Any]:
        """Return ``(h0, context)``: the input embedding ``(B, N, D)`` (with
        positions and prefix tokens) and what every block needs besides the
        hidden states (the attention mask of a text model; None for images)."""
        raise self._unsupported()

    @property
    def blocks(self) -> list[nn.Module]:
        """The ordered transformer blocks (the model's own modules)."""
        raise self._unsupported()

    def apply_block(self, index: int, h: torch.Tensor, context: Any) -> torch.Tensor:
        """Apply block ``index`` to hidden states ``h`` ``(B, N, D)``."""
        raise self._unsupported()

    def finish(self, h: torch.Tensor, context: Any) -> torch.Tensor:
        """Map the last block's output to the final tokens (the final norm)."""
        raise self._unsupported()

    def readout_parameters(self) -> list[nn.Parameter]:
        """The parameters that ``finish`` and ``classify`` use, in ``parameters()`` order.

        The final norm, pooler and classifier(s): what maps the last block's
        output to logits, and what a reconfigured read-out fine-tunes.
        """
        raise self._unsupported()

    def _parameters_of(self, *modules: nn.Module | None) -> list[nn.Parameter]:
        """This adapter's parameters that belong to any of ``modules``, in ``parameters()`` order."""
        owned = {id(p) for module in modules if module is not None for p in module.parameters()}
        return [p for p in self.parameters() if id(p) in owned]

    def _cache_config(self) -> Any:
        """What besides the model's architecture and weights fixes the outputs."""
        return None
