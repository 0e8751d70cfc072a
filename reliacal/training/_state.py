"""Training state that outlives one step: EMA weights and RNG states.

Checkpoint files are :mod:`reliacal.training._checkpoint`'s job.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import nn


def cpu_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of ``module.state_dict()``."""
    return {
        name: value.detach().to("cpu", copy=True) for name, value in module.state_dict().items()
    }


class ExponentialMovingAverage:
    """EMA of the trainable parameters: ``ema <- decay * ema + (1 - decay) * param``.

    Started from the parameters at construction and updated after every optimiser
    step, without bias correction. Frozen parameters and buffers are not copied:
    they are read from the module itself when the averaged weights are used.
    """

    def __init__(self, module: nn.Module, decay: float) -> None:
        self.decay = decay
        self.params = {
            name: param.detach().clone()
            for name, param in module.named_parameters()
            if param.requires_grad
        }

    @torch.no_grad()
    def update(self, module: nn.Module) -> None:
        current = dict(module.named_parameters())
        averaged = list(self.params.values())
        latest = [current[name].detach() for name in self.params]
        torch._foreach_lerp_(averaged, latest, 1.0 - self.decay)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: value.to("cpu", copy=True) for name, value in self.params.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if set(state) != set(self.params):
            raise ValueError("the checkpoint's EMA weights do not match the module's parameters")
        for name, value in state.items():
            self.params[name].copy_(value)

    def full_state(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """``module``'s CPU state dict with the trainable parameters replaced by their EMA."""
        state = cpu_state(module)
        averaged = {}
        for name, param in module.named_parameters():
            if name in self.params:
                averaged[id(param)] = self.params[name].to("cpu", copy=True)
        # Tied weights appear under several names; every alias must get the average.
        for name, param in module.named_parameters(remove_duplicate=False):
            if id(param) in averaged:
                state[name] = averaged[id(param)]
        return state


def capture_rng_state(device: torch.device) -> dict[str, Any]:
    """Python, NumPy, torch (and CUDA) generator states, in a ``weights_only``-loadable form."""
    # The legacy global NumPy generator is the one user code (augmentations) draws from.
    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    state = {
        "python": random.getstate(),
        "numpy": (kind, keys.tolist(), pos, has_gauss, cached),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict[str, Any], device: torch.device) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    keys = np.asarray(keys, dtype=np.uint32)
    np.random.set_state((kind, keys, pos, has_gauss, cached))  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
