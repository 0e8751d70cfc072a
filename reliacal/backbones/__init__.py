"""One adapter protocol over classifiers from timm, transformers and plain modules.

Estimators never ask which library a model came from: :func:`as_backbone`
wraps it in a :class:`BackboneAdapter` whose ``forward`` gives the final
tokens, the pooled pre-logits features and the logits from one pass, and
whose ``embed`` / ``blocks`` / ``apply_block`` / ``finish`` expose the
transformer stack for reconfiguration. :func:`extract_outputs` runs a frozen
backbone over a data set once, with optional caching.
"""

from __future__ import annotations

from reliacal.backbones._base import (
    BackboneAdapter,
    BackboneOutput,
    ReconfigurationNotSupportedError,
)
from reliacal.backbones._extract import extract_outputs
from reliacal.backbones._hf import HFBertAdapter, HFViTAdapter
from reliacal.backbones._plain import PlainAdapter
from reliacal.backbones._resolve import as_backbone
from reliacal.backbones._timm import TimmAdapter, TimmDistilledAdapter
from reliacal.backbones._torch_logits import torch_logits

__all__ = [
    "BackboneAdapter",
    "BackboneOutput",
    "HFBertAdapter",
    "HFViTAdapter",
    "PlainAdapter",
    "ReconfigurationNotSupportedError",
    "TimmAdapter",
    "TimmDistilledAdapter",
    "as_backbone",
    "extract_outputs",
    "torch_logits",
]
