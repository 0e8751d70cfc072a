"""The NaN guard's memory: the weights of the last two steps and the batch that tested them.

A non-finite loss or gradient at step ``s`` has two possible causes. Either
the batch is bad (a NaN pixel, a poisoned augmentation): the weights ``W_s``
that met it are still good. Or the update of step ``s - 1`` broke the weights
(a learning rate far too high): ``W_s`` is finite yet gives NaN outputs or
gradients, and only ``W_{s-1}`` is known to be good, since it passed the step
check on batch ``s - 1``. :class:`LastGoodWeights` keeps both states and that
batch, so the loop can tell the two apart by checking ``W_s`` on batch
``s - 1`` again.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class LastGoodWeights:
    """Snapshots of the trainable parameters and buffers at the start of the last two steps.

    Frozen parameters never change, so they are not copied. Two preallocated
    slots are swapped rather than reallocated: a step costs one copy of the
    trainable state on the training device, and the guard twice its memory.

    Examples
    --------
    >>> import torch
    >>> layer = torch.nn.Linear(1, 1)
    >>> guard = LastGoodWeights(layer)
    >>> guard.start_step()
    >>> guard.end_step((torch.ones(1, 1), torch.zeros(1)))
    >>> guard.start_step()
    >>> with torch.no_grad():
    ...     _ = layer.weight.fill_(float("nan"))
    >>> guard.restore(previous=True)
    >>> bool(torch.isfinite(layer.weight).all())
    True
    """

    def __init__(self, module: nn.Module) -> None:
        self.tensors = [p for p in module.parameters() if p.requires_grad]
        self.tensors += list(module.buffers())
        self.current: list[torch.Tensor] | None = None
        self.previous: list[torch.Tensor] | None = None
        # The (x, y) of the previous step, which the previous weights scored finitely.
        self.previous_batch: tuple[Any, Any] | None = None

    @torch.no_grad()
    def start_step(self) -> None:
        """Record the state the coming step starts from."""
        if self.current is None:
            self.current = [t.detach().clone() for t in self.tensors]
        else:
            for saved, live in zip(self.current, self.tensors):
                saved.copy_(live)

    def end_step(self, batch: tuple[Any, Any]) -> None:
        """The step's loss was finite: its starting state becomes the previous good one."""
        self.previous, self.current = self.current, self.previous
        self.previous_batch = batch

    def forget(self) -> None:
        """Drop the previous state (after a checkpoint load: it belongs to another run)."""
        self.previous, self.current, self.previous_batch = None, None, None

    @torch.no_grad()
    def restore(self, *, previous: bool) -> None:
        """Put back the state the failing step started from, or the one before it."""
        saved = self.previous if previous else self.current
        if saved is None:
            return
        for live, value in zip(self.tensors, saved):
            live.copy_(value)
