"""The training loop's public entry points: fit_module and TrainingConfig."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import torch
from sklearn.utils._param_validation import validate_parameter_constraints
from torch import nn
from torch.utils.data import Dataset, IterableDataset

from reliacal.training._checkpoint import CheckpointError
from reliacal.training._constraints import TRAINING_CONSTRAINTS
from reliacal.training._loop import PreservedHostRNG, Run
from reliacal.training._results import TrainingDivergedError, TrainingResult

__all__ = [
    "CheckpointError",
    "TrainingConfig",
    "TrainingDivergedError",
    "TrainingResult",
    "fit_module",
]


@dataclass
class TrainingConfig:
    """Settings of :func:`fit_module`.

    Parameters
    ----------
    max_epochs : int, default=10
        Number of passes over the training data.
    batch_size : int, default=64
        Samples per optimiser step; under DDP, per process (the global batch is
        ``batch_size * world_size``).
    optimizer : {"adamw", "adam", "sgd"}, default="adamw"
        AdamW (decoupled weight decay), Adam (L2 penalty) or SGD with
        ``momentum`` and ``nesterov``. Only parameters with ``requires_grad``
        are optimised.
    learning_rate : float, default=1e-4
        Peak learning rate.
    head_learning_rate : float or None, default=None
        Peak learning rate of the module's head: the parameters its
        ``head_parameters()`` method returns (CalAttn's scale head, for one),
        which follow the same warm-up and schedule scaled to this peak; the
        other parameters keep ``learning_rate``. ``None``: ``learning_rate``
        for every parameter. A newly initialised head often wants a larger
        rate than a pre-trained backbone.
    weight_decay : float, default=0.05
    momentum : float, default=0.9
        SGD only.
    nesterov : bool, default=True
        SGD only; needs ``momentum > 0``.
    schedule : {"cosine", "step", "constant"}, default="cosine"
        Learning-rate schedule, updated after every optimiser step. ``"cosine"``
        decays from ``learning_rate`` to ``min_learning_rate`` over the steps
        after the warm-up; ``"step"`` multiplies by ``gamma`` once each epoch
        in ``milestones`` is reached; ``"constant"`` keeps it.
    warmup_epochs : float, default=1.0
        Linear warm-up length in epochs (may be fractional), applied before any
        schedule: ``warmup_steps = round(warmup_epochs * steps_per_epoch)``
        (Python's ``round``: halves go to the even number), and step ``s``
        (0-based) of the warm-up uses ``learning_rate * (s + 1) / warmup_steps``.
        Set 0 to disable.
    milestones : tuple of int, default=()
        Epochs (0-based) from which the ``"step"`` schedule lowers the rate.
    gamma : float, default=0.1
        Factor of the ``"step"`` schedule.
    grad_clip_norm : float or None, default=1.0
        Clip the global gradient norm to this value; ``None`` disables it.
    mixed_precision : bool or {"auto", "bf16", "fp16"}, default="auto"
        Autocast on CUDA: ``"auto"`` / ``True`` use bfloat16 when the GPU
        supports it, else float16 with a ``GradScaler``. On the CPU mixed
        precision is always off (every value gives the same fp32 training).
    validation_fraction : float, default=0.1
        Fraction of ``train_data`` held out (seeded random split) when no
        ``validation_data`` is given. 0 trains on everything and keeps the last
        weights.
    selection_metric : {"ece", "nll", "loss", "accuracy"}, default="ece"
        Validation score that picks the returned checkpoint: lowest ECE, NLL or
        mean loss, highest accuracy. An epoch whose validation accuracy is at
        or below chance (the share of the most frequent validation label) is
        never kept when another epoch is above chance, since a network that
        always answers the majority label can have an ECE of zero; when no
        epoch is above chance, a ``UserWarning`` says so.
    n_iter_no_change : int or None, default=None
        Early stopping: stop after this many epochs without a strictly better
        validation score. Needs validation data.
    ema_decay : float or None, default=None
        If set, validation and the returned weights use an exponential moving
        average of the trainable parameters, ``ema <- d * ema + (1 - d) * w``
        after every step (no bias correction).
    checkpoint_dir : str or None, default=None
        Directory of ``checkpoint.pt``, rewritten after every epoch; when it
        exists, :func:`fit_module` resumes from it (a finished run returns at
        once). Use a fresh directory for a new run: a checkpoint written for
        another network (parameter names or shapes), other training data or,
        with ``fit_module(fingerprint=...)``, other starting weights is
        refused. Each write is atomic and records the file's SHA-256; a
        damaged file is refused, never resumed.
    device : str or torch.device, default="auto"
        Where the module trains: ``"auto"`` picks CUDA when a GPU is visible,
        else the CPU; asking for CUDA on a machine without one is a ``ValueError``.
    verbose : int or bool, default=0
        0 (False) silent; 1 (True) progress bars over the epochs and over the
        batches of the current epoch (training, then validation), as
        PyTorch Lightning shows them; 2 also writes each epoch's scores as a
        line above the bars. Bars go to stderr, on rank 0 only.
    random_state : int or None, default=None
        Seeds the validation split, the shuffling and (inside the fit only) the
        Python, NumPy and torch generators, so that a CPU fit is reproducible.
    num_workers : int, default=0
        ``DataLoader`` worker processes.
    min_learning_rate : float, default=0.0
        Final learning rate of the ``"cosine"`` schedule.

    Examples
    --------
    >>> from reliacal.training import TrainingConfig
    >>> TrainingConfig(max_epochs=3, optimizer="sgd", learning_rate=0.1).schedule
    'cosine'
    """

    max_epochs: int = 10
    batch_size: int = 64
    optimizer: str = "adamw"
    learning_rate: float = 1e-4
    weight_decay: float = 0.05
    momentum: float = 0.9
    nesterov: bool = True
    schedule: str = "cosine"
    warmup_epochs: float = 1.0
    milestones: tuple[int, ...] = ()
    gamma: float = 0.1
    grad_clip_norm: float | None = 1.0
    mixed_precision: bool | str = "auto"
    validation_fraction: float = 0.1
    selection_metric: str = "ece"
    n_iter_no_change: int | None = None
    ema_decay: float | None = None
    checkpoint_dir: str | None = None
    device: str = "auto"
    verbose: int = 0
    random_state: int | None = None
    num_workers: int = 0
    min_learning_rate: float = 0.0
    head_learning_rate: float | None = None

    def __post_init__(self) -> None:
        validate_parameter_constraints(
            TRAINING_CONSTRAINTS,
            {item.name: getattr(self, item.name) for item in fields(self)},
            caller_name=type(self).__name__,
        )
        self.milestones = tuple(self.milestones)
        for milestone in self.milestones:
            if isinstance(milestone, bool) or not isinstance(milestone, numbers.Integral):
                raise ValueError(f"each of milestones must be an integer >= 0, got {milestone!r}")
            if milestone < 0:
                raise ValueError(f"each of milestones must be an integer >= 0, got {milestone!r}")
        if self.min_learning_rate > self.learning_rate:
            raise ValueError("min_learning_rate must not exceed learning_rate")
        if self.optimizer == "sgd" and self.nesterov and self.momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0 (or set nesterov=False)")


def fit_module(
    module: nn.Module,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    train_data: Dataset,
    *,
    config: TrainingConfig | None = None,
    validation_data: Dataset | None = None,
    logits_fn: Callable[[Any], torch.Tensor] | None = None,
    train_transform: Callable[[Any], Any] | None = None,
    callbacks: Iterable[Callable[[int, dict[str, Any]], bool | None]] = (),
    chance_advice: str | None = None,
    fingerprint: str | None = None,
) -> TrainingResult:
    """Train ``module`` in place by minimising ``loss_fn(module(x), y)``.

    Every optimiser step draws a batch (reshuffled each epoch with a generator
    seeded from ``config.random_state``), applies ``train_transform`` to ``x``,
    and updates the parameters that have ``requires_grad``; frozen ones are
    never touched. ``module.train()`` is called before every epoch: a module
    whose frozen parts must stay in eval mode (BatchNorm statistics, dropout
    of a frozen teacher) overrides ``train(mode)`` to keep them there. After each epoch the module (or its EMA weights) is scored
    on the validation data in eval mode under ``no_grad`` without
    ``train_transform``: mean ``loss_fn``, and top-label ECE (15 equal-width
    bins; Guo et al., ICML 2017), NLL and accuracy of ``softmax(logits)``. The
    weights of the best epoch by ``config.selection_metric`` are kept, epochs
    at chance accuracy only when no epoch rose above chance. Without
    validation data (``validation_fraction=0`` and no ``validation_data``) the
    last weights are kept.

    Under ``torch.distributed`` (initialised, e.g. by ``torchrun``) the module
    is wrapped in ``DistributedDataParallel`` and each process trains on its
    shard of every batch (``DistributedSampler``, ``batch_size`` per process);
    each process scores the whole validation set, so that selection and early
    stopping agree everywhere; only rank 0 writes checkpoints, logs and
    progress bars. With the same seed the result equals single-process
    training with ``batch_size * world_size`` up to floating-point noise.

    Parameters
    ----------
    module : nn.Module
        The network; ``module(x)`` returns the outputs handed to ``loss_fn``.
    loss_fn : callable
        ``loss_fn(outputs, y) -> scalar tensor``, the mean loss of a batch.
    train_data : torch Dataset
        Map-style dataset of ``(x, y)``; ``x`` is a tensor or a tuple of tensors.
    config : TrainingConfig, optional
        Settings; ``TrainingConfig()`` when omitted.
    validation_data : torch Dataset, optional
        Held-out ``(x, y)`` pairs; when omitted ``config.validation_fraction``
        of ``train_data`` is split off.
    logits_fn : callable, optional
        ``logits_fn(outputs) -> (B, K)`` logits for the validation ECE / NLL /
        accuracy; the outputs themselves by default. Required (or
        ``selection_metric="loss"``) when the outputs are not logits.
    train_transform : callable, optional
        Applied to the ``x`` batch (on the device) in training only, e.g. data
        augmentation.
    callbacks : iterable of callable
        Each is called as ``callback(epoch, logs)`` after every epoch (on every
        process, after the checkpoint is written), with ``epoch`` counted from
        1 and ``logs`` that epoch's history entry. A callback that returns
        ``True`` stops training.
    chance_advice : str or None, default=None
        The advice that ends the warning raised when no epoch's validation
        accuracy rose above chance. ``None``: train longer, change the
        learning rate, check the labels, which suits a network trained from
        its inputs; an estimator whose accuracy cannot change (a temperature
        on fixed logits) says what applies instead.
    fingerprint : str or None, default=None
        Identifies the weights the run starts from, for ``checkpoint_dir``:
        a folder whose checkpoint was written with another value is refused
        rather than resumed. The loop itself records the module's parameter
        names and shapes and a fingerprint of ``train_data`` and
        ``validation_data`` (their values, labels and order), but not the
        starting weights, which a resumed run need not reproduce; pass, for
        instance, :func:`reliacal.training.fingerprint` of the module when
        they are reproducible (a seeded initialisation around pre-trained
        weights).

    Returns
    -------
    TrainingResult
        The history, the selected epoch and its score, and whether training
        stopped early. ``module`` now holds the selected weights (EMA weights
        when ``ema_decay`` is set), sits on the CPU and is in eval mode.

    Raises
    ------
    TrainingDivergedError
        On a NaN or infinite loss (or gradient), naming the epoch, the step and
        the loss; ``module`` holds the last weights known to be good (those
        from before that step, or from before the previous one when the
        previous update is what broke them) and is the error's ``module``.
    CheckpointError
        When ``checkpoint_dir`` is not a writable folder (checked before
        training) or holds a damaged checkpoint; the message names the file.
        It is a ``ValueError``.
    ValueError
        On invalid inputs, or a checkpoint written by a different
        configuration, for another network, other data or other starting
        weights.

    Warns
    -----
    UserWarning
        When no epoch's validation accuracy rose above chance: the kept
        weights predict no better than always answering the most frequent
        validation label. The warning is attributed to the caller's line
        (the first frame outside reliacal). Also when, with
        ``checkpoint_dir``, the training data cannot be fingerprinted (it
        cannot be pickled): other data of the same size would then not be
        recognised.

    Examples
    --------
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> from reliacal.training import TrainingConfig, fit_module
    >>> _ = torch.manual_seed(0)
    >>> x = torch.randn(64, 2)
    >>> y = (x[:, 0] > 0).long()
    >>> model = torch.nn.Linear(2, 2)
    >>> config = TrainingConfig(max_epochs=5, batch_size=16, learning_rate=0.1,
    ...                         validation_fraction=0.25, random_state=0)
    >>> result = fit_module(model, torch.nn.functional.cross_entropy,
    ...                     TensorDataset(x, y), config=config)
    >>> len(result.history)
    5
    >>> result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    True
    >>> sorted(key for key in result.history[0] if key.startswith("val_"))
    ['val_accuracy', 'val_ece', 'val_loss', 'val_nll']
    """
    config = TrainingConfig() if config is None else config
    if not isinstance(config, TrainingConfig):
        raise ValueError(f"config must be a TrainingConfig, got {type(config).__name__}")
    if not isinstance(module, nn.Module):
        raise ValueError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not callable(loss_fn):
        raise ValueError("loss_fn must be callable: loss_fn(outputs, y) -> scalar tensor")
    _check_dataset("train_data", train_data)
    if validation_data is not None:
        _check_dataset("validation_data", validation_data)
    callbacks = tuple(callbacks)
    if not all(callable(callback) for callback in callbacks):
        raise ValueError("every callback must be callable as callback(epoch, logs)")
    has_validation = validation_data is not None or config.validation_fraction > 0
    if config.n_iter_no_change is not None and not has_validation:
        raise ValueError(
            "n_iter_no_change needs validation data: pass validation_data or "
            "set validation_fraction > 0"
        )

    for name, value in (("chance_advice", chance_advice), ("fingerprint", fingerprint)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string or None, got {value!r}")
    run = Run(
        module,
        loss_fn,
        train_data,
        config,
        validation_data=validation_data,
        logits_fn=logits_fn,
        transform=train_transform,
        chance_advice=chance_advice,
        start_fingerprint=fingerprint,
    )
    forked = torch.random.fork_rng(
        devices=[run.device] if run.device.type == "cuda" else [],
        enabled=config.random_state is not None,
    )
    with forked, PreservedHostRNG(config.random_state is not None):
        return run.fit(callbacks)


def _check_dataset(name: str, data: Any) -> None:
    if isinstance(data, IterableDataset) or not (
        hasattr(data, "__getitem__") and hasattr(data, "__len__")
    ):
        raise ValueError(
            f"{name} must be a map-style torch Dataset of (x, y) pairs with __len__ "
            f"and __getitem__, got {type(data).__name__}"
        )
