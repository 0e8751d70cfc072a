"""Logits of a trained torch classifier, for wrappers that need nothing else.

:class:`reliacal.CalibratedClassifier` calibrates a torch model's logits; it
never reads pre-logits features, so a plain ``nn.Module`` whose output is the
logits needs no ``features=``/``head=`` split. Models the backbone adapters
know (timm, Hugging Face ViT and BERT-style classifiers, a
:class:`~reliacal.backbones.BackboneAdapter`) go through their adapter, which
reads the logits from the model's own output. This module imports torch:
import it only once a model is known to be a torch module.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from reliacal.backbones._base import BackboneAdapter
from reliacal.backbones._extract import extract_outputs
from reliacal.backbones._hf import hf_adapter_for
from reliacal.backbones._resolve import as_backbone
from reliacal.backbones._timm import is_timm_model

__all__ = ["OutputIsLogits", "logits_adapter", "torch_logits"]


class OutputIsLogits(BackboneAdapter):
    """Adapter of a plain module whose output ``(B, K)`` is the logits.

    No features are read: ``pool`` and ``head`` are the identity, so the
    pooled output is the logits too.

    Examples
    --------
    >>> from torch import nn
    >>> net = nn.Linear(4, 3)
    >>> OutputIsLogits(net)(torch.zeros(2, 4)).logits.shape
    torch.Size([2, 3])
    """

    def encode(self, x: Any) -> torch.Tensor:
        output = self.model(x)
        if not isinstance(output, torch.Tensor) or output.ndim != 2:
            described = (
                f"shape {tuple(output.shape)}"
                if isinstance(output, torch.Tensor)
                else f"a {type(output).__name__}"
            )
            raise ValueError(
                f"{type(self.model).__name__} returned {described}; a torch module's output "
                "is read as its logits, which must be one (batch, n_classes) tensor: wrap the "
                "model so that forward returns them"
            )
        return output

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        return pooled


def logits_adapter(model: torch.nn.Module) -> BackboneAdapter:
    """The adapter that reads ``model``'s logits: its family's, else :class:`OutputIsLogits`.

    Examples
    --------
    >>> from torch import nn
    >>> type(logits_adapter(nn.Linear(4, 3))).__name__
    'OutputIsLogits'
    """
    if isinstance(model, BackboneAdapter) or is_timm_model(model):
        return as_backbone(model)
    adapter = hf_adapter_for(model)  # None for a plain module; ValueError if unsupported
    return adapter if adapter is not None else OutputIsLogits(model)


def torch_logits(
    model: torch.nn.Module,
    X: Any,
    y: Any = None,
    *,
    batch_size: int = 256,
    device: Any = "auto",
) -> tuple[np.ndarray, np.ndarray | None]:
    """Run a trained torch classifier once over ``X``: ``(logits, y)``.

    The model runs frozen (eval mode, ``no_grad``, batched on ``device``) and
    is left on its device and in its mode, as
    :func:`reliacal.backbones.extract_outputs` does.

    Parameters
    ----------
    model : torch.nn.Module
        A plain module whose output is the logits ``(B, K)``, or a model the
        backbone adapters know (timm, Hugging Face ViT or BERT-style, a
        ``BackboneAdapter``), whose logits its adapter reads.
    X : array-like, tensor, Dataset or DataLoader
        The model's inputs (a Dataset or DataLoader yields ``(x, y)``).
    y : array-like of shape (n,), optional
        Labels of array inputs.
    batch_size : int, default=256
        Samples per forward pass (array inputs and Datasets).
    device : str or torch.device, default="auto"
        Where the model runs.

    Returns
    -------
    logits : ndarray of shape (n, K), float32
    y : ndarray of shape (n,) or None
        ``y`` as given, or the labels a Dataset or DataLoader yielded.

    Examples
    --------
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    >>> images = torch.randn(5, 3, 2, 2)
    >>> logits, _ = torch_logits(net, images, batch_size=2, device="cpu")
    >>> logits.shape, bool(torch.allclose(net(images), torch.from_numpy(logits)))
    ((5, 3), True)
    """
    _, logits, y = extract_outputs(
        logits_adapter(model), X, y, batch_size=batch_size, device=device
    )
    return logits, y
