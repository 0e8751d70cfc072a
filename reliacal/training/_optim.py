"""Optimisers, learning-rate schedules and mixed-precision settings of the training loop."""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn


def parameter_groups(module: nn.Module, config) -> list[dict]:
    """The trainable parameters, split into the body and the head when the rates differ.

    Without ``config.head_learning_rate`` there is one group at
    ``config.learning_rate``. With it, the parameters that
    ``module.head_parameters()`` returns form a second group at that rate
    (the first group stays first: the training log reports its rate); the
    scheduler then scales both groups by the same factor.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.body, self.head = nn.Linear(2, 2), nn.Linear(2, 1)
    ...     def head_parameters(self):
    ...         return self.head.parameters()
    >>> groups = parameter_groups(Net(), SimpleNamespace(learning_rate=1e-4,
    ...                                                  head_learning_rate=1e-3))
    >>> [(group["lr"], len(group["params"])) for group in groups]
    [(0.0001, 2), (0.001, 2)]
    """
    params = [param for param in module.parameters() if param.requires_grad]
    if not params:
        raise ValueError("the module has no parameter with requires_grad=True: nothing to train")
    head_rate = getattr(config, "head_learning_rate", None)
    if head_rate is None:
        return [{"params": params, "lr": config.learning_rate}]
    if not callable(getattr(module, "head_parameters", None)):
        raise ValueError(
            f"head_learning_rate is set but {type(module).__name__} has no head_parameters() "
            "method that names its head; leave head_learning_rate=None"
        )
    head_ids = {id(param) for param in module.head_parameters() if param.requires_grad}
    body = [param for param in params if id(param) not in head_ids]
    head = [param for param in params if id(param) in head_ids]
    # An empty group would be harmless to torch but would hide a head that trains nothing.
    return [
        {"params": group, "lr": rate}
        for group, rate in ((body, config.learning_rate), (head, head_rate))
        if group
    ]


def make_optimizer(module: nn.Module, config) -> torch.optim.Optimizer:
    """Build the optimiser named by ``config.optimizer`` over the trainable parameters.

    The parameters come in the groups of :func:`parameter_groups`.
    """
    params = parameter_groups(module, config)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    return torch.optim.SGD(
        params,
        lr=config.learning_rate,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        nesterov=config.nesterov,
    )


def lr_factor(
    step: int,
    *,
    schedule: str,
    steps_per_epoch: int,
    total_steps: int,
    warmup_steps: int,
    milestones: tuple[int, ...] = (),
    gamma: float = 0.1,
    floor: float = 0.0,
) -> float:
    """Multiplier of the base learning rate for the optimiser step ``step`` (0-based).

    Linear warm-up ``(step + 1) / warmup_steps`` for the first ``warmup_steps``
    steps (so the first step already moves), then
    - ``"cosine"``: ``floor + (1 - floor) * (1 + cos(pi * progress)) / 2`` with
      ``progress = (step - warmup_steps) / (total_steps - warmup_steps)``;
    - ``"step"``: ``gamma ** (number of milestones <= epoch)``, epoch = step // steps_per_epoch;
    - ``"constant"``: 1.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "step":
        epoch = step // steps_per_epoch
        return gamma ** sum(epoch >= milestone for milestone in milestones)
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(
    optimizer: torch.optim.Optimizer, config, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step ``LambdaLR`` following :func:`lr_factor` for ``config``."""
    warmup_steps = round(config.warmup_epochs * steps_per_epoch)
    total_steps = config.max_epochs * steps_per_epoch
    floor = config.min_learning_rate / config.learning_rate

    def factor(step: int) -> float:
        return lr_factor(
            step,
            schedule=config.schedule,
            steps_per_epoch=steps_per_epoch,
            total_steps=total_steps,
            warmup_steps=warmup_steps,
            milestones=config.milestones,
            gamma=config.gamma,
            floor=floor,
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Precision:
    """Autocast dtype and gradient scaler for one run; everything off outside CUDA."""

    def __init__(self, mixed_precision: bool | str, device: torch.device) -> None:
        self.dtype: torch.dtype | None = None
        if device.type == "cuda" and mixed_precision is not False:
            if mixed_precision == "fp16":
                self.dtype = torch.float16
            elif mixed_precision == "bf16":
                if not torch.cuda.is_bf16_supported():
                    raise ValueError(
                        "mixed_precision='bf16' but this GPU does not support bfloat16"
                    )
                self.dtype = torch.bfloat16
            else:
                bf16 = torch.cuda.is_bf16_supported()
                self.dtype = torch.bfloat16 if bf16 else torch.float16
        # float16 overflows where bfloat16 does not: only it needs loss scaling.
        self.scaler = torch.amp.GradScaler("cuda") if self.dtype == torch.float16 else None

    def autocast(self) -> AbstractContextManager:
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type="cuda", dtype=self.dtype)
