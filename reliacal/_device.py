"""Device resolution and moving nested batches between devices.

One place decides what ``device="auto"`` means, so that every estimator and
the training loop agree on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """Return the ``torch.device`` that ``device`` names.

    ``"auto"`` (or ``None``) picks CUDA when a GPU is visible, else the CPU.
    Asking for CUDA on a machine without one raises a ``ValueError`` instead
    of failing later inside PyTorch.

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda', 'cuda:N', another device type of this "
            f"torch build (such as 'mps') or a torch.device; got {device!r}"
        ) from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was requested but no CUDA device is available")
    return resolved


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor inside a (nested) tuple, list or dict to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {key: to_device(value, device, non_blocking) for key, value in batch.items()}
    if isinstance(batch, Sequence) and not isinstance(batch, str):
        return type(batch)(to_device(value, device, non_blocking) for value in batch)
    return batch
