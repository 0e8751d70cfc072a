"""The epoch and step loop behind :func:`reliacal.training.fit_module`.

A maintainer's map of the moving parts:

- Randomness. One run seed (``config.random_state``, else drawn and shared by
  rank 0) is expanded by ``SeedSequence`` into three independent streams: the
  validation split, the shuffling (``DistributedSampler`` seed, and the
  loader generator reseeded per epoch so that worker seeds do not depend on
  how many epochs ran in this process) and the host generators (Python,
  NumPy, torch: dropout, augmentations), the last one mixed with the rank so
  that processes draw different dropout masks. ``fit_module`` forks the
  generators around the run, so a seeded fit leaves the caller's RNG alone.
- Resume. A checkpoint is written after every epoch (rank 0 only; every
  rank's RNG state is gathered into it) and holds the weights, optimiser,
  scheduler, scaler, EMA, best state and history, the run seed and the
  configuration minus the settings that may change (``RESUMABLE_CHANGES``),
  and what the run was written for (network shapes, data, starting weights:
  ``_checkpoint.run_fingerprint``). A new run in the same folder checks all of
  these, reloads the state and continues with the next epoch; the RNG states
  make the continuation bit-identical on the CPU.
- DDP. Each process trains on its shard of every batch, all-reduces the
  loss sums for the epoch log and the NaN verdict of every step, scores the
  whole validation set itself (so selection and early stopping agree), and
  only rank 0 writes or logs.
- EMA. With ``ema_decay`` an average of the trainable parameters is updated
  after each optimiser step; validation and the kept weights use it, the
  optimiser never sees it.
- NaN guard. See :mod:`reliacal.training._guard`: the state of the last two
  steps is kept so that a failure hands back weights known to be good.
"""

from __future__ import annotations

import logging
import math
import os
import random
import sys
import time
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Subset
from tqdm.auto import tqdm

from reliacal._data import collate_fn_of, split_batch
from reliacal._device import resolve_device, to_device
from reliacal.training._checkpoint import (
    check_checkpoint_dir,
    check_entries,
    check_fingerprint,
    checkpoint_path,
    load_checkpoint,
    run_fingerprint,
    save_checkpoint,
)
from reliacal.training._evaluation import as_input, batch_length, evaluate
from reliacal.training._guard import LastGoodWeights
from reliacal.training._optim import Precision, make_optimizer, make_scheduler
from reliacal.training._randomness import (
    draw_shared_seed,
    loop_generator_seeds,
    loop_split,
)
from reliacal.training._results import TrainingDivergedError, TrainingResult
from reliacal.training._selection import improves, warn_if_never_above_chance
from reliacal.training._state import (
    ExponentialMovingAverage,
    capture_rng_state,
    cpu_state,
    restore_rng_state,
)

logger = logging.getLogger("reliacal")

# Settings that may change between an interrupted run and its resumption.
RESUMABLE_CHANGES = ("checkpoint_dir", "device", "verbose", "num_workers")


class Run:
    """State of one call to :func:`fit_module`."""

    def __init__(
        self,
        module,
        loss_fn,
        train_data,
        config,
        validation_data,
        logits_fn,
        transform,
        chance_advice=None,
        start_fingerprint=None,
    ):
        """Set up a run: processes, seed, split, loaders, model on its device, optimiser.

        Nothing is trained yet (:meth:`fit` does); a checkpoint found in
        ``config.checkpoint_dir`` is read here and restored by :meth:`fit`.

        Parameters
        ----------
        module : torch.nn.Module
            The network, trained in place (moved to the training device here).
        loss_fn : callable
            ``loss_fn(outputs, target)`` -> scalar tensor, on the module's outputs.
        train_data : torch.utils.data.Dataset
            Training items ``(x, y)``.
        config : TrainingConfig
            The settings; see :class:`reliacal.training.TrainingConfig`.
        validation_data : torch.utils.data.Dataset or None
            Held-out items; ``None`` holds out ``config.validation_fraction`` of
            ``train_data`` (split by the run seed, so a resumed run splits alike).
        logits_fn : callable
            Maps the module's outputs to the logits that validation scores.
        transform : callable or None
            Applied to each training batch's inputs on the device (augmentation).
        chance_advice : str or None
            The estimator's advice in the warning of a run never above chance.
        start_fingerprint : object or None
            What else the run starts from (a backbone's weights), recorded in
            the checkpoint's fingerprint beside the network and the data.

        Raises
        ------
        ValueError
            A checkpoint written for another configuration, another number of
            training samples, other data, labels, network or starting weights,
            or an empty ``train_data``.

        Notes
        -----
        The steps, in order: find the processes and the device; settle the run
        seed (the checkpoint's when resuming, else ``config.random_state`` or one
        drawn and shared by rank 0); split off the validation data; build the
        loaders (a ``DistributedSampler`` shuffles, also in one process); derive
        this process's host seed; move the module to the device (wrapped in
        ``DistributedDataParallel`` under ``torch.distributed``); build the
        optimiser, schedule, precision, NaN guard and EMA; and start the
        bookkeeping of the best epoch and early stopping empty.
        """
        self.module, self.loss_fn, self.config = module, loss_fn, config
        self.logits_fn, self.transform = logits_fn, transform
        self.chance_advice = chance_advice
        self._find_processes()
        self.n_samples = len(train_data)
        # What a checkpoint is written for (before training moves the weights).
        self.fingerprint = (
            None
            if not self.config.checkpoint_dir
            else run_fingerprint(module, train_data, validation_data, start_fingerprint)
        )
        self._settle_seed()
        train_data, validation_data = self._split(train_data, validation_data)
        self._build_loaders(train_data, validation_data)
        self._derive_host_seed()
        self._place_model()
        self._build_optimisation()
        self._start_bookkeeping()

    def _find_processes(self) -> None:
        """Rank, world size and training device; rank 0 alone writes and logs."""
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        self.main = self.rank == 0
        self.device = _training_device(self.config.device, self.distributed)

    def _settle_seed(self) -> None:
        """The run seed and its shuffling and host streams; reads a checkpoint to resume."""
        config = self.config
        self.path = (
            checkpoint_path(check_checkpoint_dir(config.checkpoint_dir))
            if config.checkpoint_dir
            else None
        )
        # A checkpoint found here means resuming: its seed, not a new one, drives the run.
        self.checkpoint = load_checkpoint(self.path) if self.path is not None else None
        if self.checkpoint is not None:
            _check_checkpoint_config(self.checkpoint, config, self.path)
            if self.checkpoint["n_samples"] != self.n_samples:
                raise ValueError(
                    f"the checkpoint {self.path} was written for {self.checkpoint['n_samples']} "
                    f"training samples, train_data has {self.n_samples}; use a new checkpoint_dir"
                )
            check_fingerprint(self.checkpoint["fingerprint"], self.fingerprint, self.path)
            self.seed = int(self.checkpoint["seed"])
        else:
            self.seed = self._shared_seed()
        self.shuffle_seed = loop_generator_seeds(self.seed)[0]

    def _split(self, train_data, validation_data):
        """``(train, validation)``: the given validation data, else a seeded hold-out."""
        if validation_data is None and self.config.validation_fraction > 0:
            train_rows, validation_rows = loop_split(
                len(train_data), self.config.validation_fraction, self.seed
            )
            validation_data = Subset(train_data, validation_rows.tolist())
            train_data = Subset(train_data, train_rows.tolist())
        return train_data, validation_data

    def _build_loaders(self, train_data, validation_data) -> None:
        """The shuffled (sharded under DDP) training loader and the ordered validation one."""
        config = self.config
        self.sampler = DistributedSampler(
            train_data,
            num_replicas=self.world_size,
            rank=self.rank,
            shuffle=True,
            seed=int(self.shuffle_seed),
        )
        pin = self.device.type == "cuda"
        self.loader_generator = torch.Generator()
        self.train_loader = DataLoader(
            train_data,
            batch_size=config.batch_size,
            sampler=self.sampler,
            num_workers=config.num_workers,
            pin_memory=pin,
            generator=self.loader_generator,
            # A user's DataLoader may pad text in its collate_fn; keep it.
            collate_fn=collate_fn_of(train_data),
        )
        if len(self.train_loader) == 0:
            raise ValueError("train_data is empty")
        self.validation_loader = (
            None
            if validation_data is None
            else DataLoader(
                validation_data,
                batch_size=config.batch_size,
                shuffle=False,
                num_workers=config.num_workers,
                pin_memory=pin,
                collate_fn=collate_fn_of(validation_data),
            )
        )

    def _derive_host_seed(self) -> None:
        """The seed of this process's Python, NumPy and torch generators (None: unseeded)."""
        if self.config.random_state is not None:
            self.host_seed: int | None = loop_generator_seeds(self.seed, self.rank)[1]
        else:
            self.host_seed = None

    def _place_model(self) -> None:
        """The module on the training device; ``model`` is it, or its DDP wrapper."""
        if self.distributed and self.device.type == "cuda":
            # Collectives on objects (checkpoint RNG states) use the current device.
            torch.cuda.set_device(self.device)
        self.module.to(self.device)
        self.model: nn.Module = self.module
        if self.distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = DistributedDataParallel(self.module, device_ids=device_ids)

    def _build_optimisation(self) -> None:
        """Optimiser, learning-rate schedule, mixed precision, NaN guard and EMA."""
        config = self.config
        self.optimizer = make_optimizer(self.module, config)
        self.steps_per_epoch = len(self.train_loader)
        self.scheduler = make_scheduler(self.optimizer, config, self.steps_per_epoch)
        self.precision = Precision(config.mixed_precision, self.device)
        self.guard = LastGoodWeights(self.module)
        self.ema = (
            ExponentialMovingAverage(self.module, config.ema_decay)
            if config.ema_decay is not None
            else None
        )
        self._last_lr = self.optimizer.param_groups[0]["lr"]

    def _start_bookkeeping(self) -> None:
        """No epoch done yet: empty history, no best epoch, no early-stopping count."""
        self.history: list[dict[str, Any]] = []
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_epoch, self.best_score = 0, math.nan
        self.epochs_without_improvement = 0
        # Chance accuracy of the validation labels, known after the first validation.
        self.chance: float | None = None
        self.epochs_done = 0
        self.finished = self.stopped_early = False

    def fit(self, callbacks) -> TrainingResult:
        if self.host_seed is not None:
            # Seeded here, then overwritten by the checkpoint's RNG states when resuming.
            _seed_host(self.host_seed)
        if self.checkpoint is not None:
            self._load(self.checkpoint)
            self.checkpoint = None
            if self.main:
                logger.info("resuming from %s after epoch %d", self.path, self.epochs_done)
        config = self.config
        epochs = tqdm(
            range(self.epochs_done, config.max_epochs),
            desc="epochs",
            disable=not (config.verbose and self.main),
            initial=self.epochs_done,
            total=config.max_epochs,
        )
        try:
            for epoch_index in epochs:
                if self.finished:
                    break
                logs = self._epoch(epoch_index)
                epochs.set_postfix(
                    {k: f"{v:.4g}" for k, v in logs.items() if k in ("train_loss", "val_ece")}
                )
                # Before the callbacks: a callback that interrupts leaves a resumable epoch.
                self._save()
                if self._callbacks_stop(callbacks, logs) and not self.finished:
                    self.finished = self.stopped_early = True
                    self._save()
        finally:
            epochs.close()
        return self._finish()

    def _epoch(self, epoch_index: int) -> dict[str, Any]:
        start = time.perf_counter()
        train_loss = self._train_epoch(epoch_index)
        logs: dict[str, Any] = {"epoch": epoch_index + 1, "train_loss": train_loss}
        logs["lr"] = self._last_lr
        if self.validation_loader is not None:
            scores, self.chance = self._validate()
            logs.update({f"val_{name}": value for name, value in scores.items()})
            score = scores[self.config.selection_metric]
            # The kept epoch's entry; after a resume it comes from the restored history.
            best = None if self.best_state is None else self.history[self.best_epoch - 1]
            metric = self.config.selection_metric
            if improves(logs, best, metric=metric, chance=self.chance):
                self.best_state = self._current_weights()
                self.best_epoch, self.best_score = epoch_index + 1, score
                self.epochs_without_improvement = 0
            else:
                self.epochs_without_improvement += 1
        logs["time"] = time.perf_counter() - start
        self.history.append(logs)
        self.epochs_done = epoch_index + 1
        patience = self.config.n_iter_no_change
        if self.epochs_done == self.config.max_epochs:
            self.finished = True
        elif patience is not None and self.epochs_without_improvement >= patience:
            self.finished = self.stopped_early = True
        if self.main:
            scores = " ".join(f"{k}={v:.4g}" for k, v in logs.items() if k != "epoch")
            logger.info("epoch %d/%d %s", self.epochs_done, self.config.max_epochs, scores)
            if self.config.verbose >= 2:
                # Above the bars, which tqdm redraws below it.
                tqdm.write(
                    f"epoch {self.epochs_done}/{self.config.max_epochs} {scores}", file=sys.stderr
                )
        return logs

    def _train_epoch(self, epoch_index: int) -> float:
        self.model.train()
        self.sampler.set_epoch(epoch_index)
        # Worker seeds come from this generator: tie them to the epoch for resumption.
        self.loader_generator.manual_seed(int(self.shuffle_seed) + epoch_index)
        batches = tqdm(
            self.train_loader,
            desc=f"epoch {epoch_index + 1}",
            leave=False,
            disable=not (self.config.verbose >= 1 and self.main),
        )
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        count = torch.zeros((), dtype=torch.float64, device=self.device)
        for step, batch in enumerate(batches):
            x, y = split_batch(batch, require_labels=True)
            x, y = as_input(to_device(x, self.device)), to_device(y, self.device)
            if self.transform is not None:
                x = self.transform(x)
            loss = self._step(x, y, epoch_index, step)
            n = batch_length(x, y)
            loss_sum += loss * n
            count += n
        batches.close()
        if self.distributed:
            dist.all_reduce(loss_sum)
            dist.all_reduce(count)
        return float(loss_sum / count)

    def _step(self, x, y, epoch_index: int, step: int) -> torch.Tensor:
        self.guard.start_step()
        self.optimizer.zero_grad(set_to_none=True)
        with self.precision.autocast():
            loss = self.loss_fn(self.model(x), y)
        if not (isinstance(loss, torch.Tensor) and loss.ndim == 0):
            raise ValueError("loss_fn must return a scalar tensor (the mean loss of the batch)")
        scaler = self.precision.scaler
        (loss if scaler is None else scaler.scale(loss)).backward()
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        if self.config.grad_clip_norm is None:
            grads = [p.grad for p in params if p.grad is not None]
            grad_norm = torch.nn.utils.get_total_norm(grads)
        else:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip_norm)
        loss_value = loss.detach().double()
        # float16 gradients overflow routinely; the scaler then skips the step.
        bad = ~torch.isfinite(loss_value)
        if scaler is None:
            bad = bad | ~torch.isfinite(grad_norm)
        if self.distributed:
            # One process's NaN stops every process, before anyone's weights change.
            bad = bad.to(torch.int64)
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bool(bad):
            self._diverged(epoch_index, step, float(loss_value), float(grad_norm))
        if scaler is None:
            self.optimizer.step()
        else:
            scaler.step(self.optimizer)
            scaler.update()
        self._last_lr = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update(self.module)
        self.guard.end_step((x, y))
        return loss_value

    def _diverged(self, epoch_index, step, loss_value, grad_norm) -> None:
        """Restore the last weights known to be good, then raise TrainingDivergedError."""
        broken_by_update = self._previous_batch_fails()
        # Buffers (batch-norm statistics) are restored either way: the failed forward
        # pass may have written NaN into them.
        self.guard.restore(previous=broken_by_update)
        self.module.to("cpu").eval()
        if broken_by_update:
            kept = (
                "the previous step's update broke the weights (they fail on the batch before "
                "too), so the weights from before that step were restored"
            )
        else:
            kept = "the weights from before this step were kept"
        error = TrainingDivergedError(
            f"training diverged at epoch {epoch_index + 1}, step {step + 1}: "
            f"loss={loss_value}, gradient norm={grad_norm}; {kept}. Lower learning_rate, "
            "set grad_clip_norm, or check the inputs and loss_fn for NaN/inf."
        )
        error.module = self.module
        raise error

    def _previous_batch_fails(self) -> bool:
        """Whether the current weights fail the step check on the previous step's batch.

        The previous weights passed it there (finite loss, and finite gradient
        unless a float16 scaler is in charge of overflow); if the current ones
        fail on that same batch, the last update is what broke them. Every
        process takes the same decision.
        """
        if self.guard.previous_batch is None:
            return False
        x, y = self.guard.previous_batch
        self.optimizer.zero_grad(set_to_none=True)
        # The unwrapped module: a DDP forward and backward would start collectives of their own.
        with self.precision.autocast():
            loss = self.loss_fn(self.module(x), y)
        bad = ~torch.isfinite(loss.detach().double())
        if self.precision.scaler is None and bool(loss.requires_grad) and not bool(bad):
            loss.backward()
            grads = [p.grad for p in self.module.parameters() if p.grad is not None]
            bad = bad | ~torch.isfinite(torch.nn.utils.get_total_norm(grads))
        self.optimizer.zero_grad(set_to_none=True)
        if self.distributed:
            bad = bad.to(torch.int64)
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        return bool(bad)

    def _validate(self) -> tuple[dict[str, float], float | None]:
        """The validation scores and the chance accuracy of the validation labels."""
        scores, why_not, chance = evaluate(
            self.module,
            self.validation_loader,
            self.loss_fn,
            logits_fn=self.logits_fn,
            device=self.device,
            autocast=self.precision.autocast,
            params=None if self.ema is None else self.ema.params,
            progress=self.config.verbose >= 1 and self.main,
        )
        if self.config.selection_metric not in scores:
            raise ValueError(
                f"selection_metric={self.config.selection_metric!r} cannot be computed: "
                f"{why_not}. Pass logits_fn, or use selection_metric='loss'."
            )
        return scores, chance

    def _current_weights(self) -> dict[str, torch.Tensor]:
        # A CPU copy: the best state must not alias the live weights, nor hold GPU memory.
        return cpu_state(self.module) if self.ema is None else self.ema.full_state(self.module)

    def _callbacks_stop(self, callbacks, logs) -> bool:
        stop = False
        for callback in callbacks:
            stop = bool(callback(logs["epoch"], dict(logs))) or stop
        if self.distributed:
            flag = torch.tensor(int(stop), device=self.device if self._nccl() else "cpu")
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = bool(flag)
        return stop

    def _nccl(self) -> bool:
        return dist.get_backend() == "nccl"

    def _finish(self) -> TrainingResult:
        if self.best_state is None:
            # No validation data: the last weights (or their EMA) are the result.
            self.best_state = self._current_weights()
            self.best_epoch = self.epochs_done
        elif self.main:
            # A run resumed after it finished validates nothing: chance is then unknown.
            warn_if_never_above_chance(
                self.history, self.chance, self.best_epoch, self.chance_advice
            )
        self.module.load_state_dict(self.best_state)
        self.module.to("cpu").eval()
        return TrainingResult(
            history=[dict(entry) for entry in self.history],
            best_epoch=self.best_epoch,
            best_score=self.best_score,
            stopped_early=self.stopped_early,
        )

    # Checkpoints -------------------------------------------------------------------------

    def _save(self) -> None:
        if self.path is None:
            return
        rng = capture_rng_state(self.device)
        if self.distributed:
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, rng)
            rng_states = gathered
        else:
            rng_states = [rng]
        if not self.main:
            return
        save_checkpoint(
            self.path,
            {
                "config": _config_dict(self.config),
                "fingerprint": self.fingerprint,
                "seed": self.seed,
                "n_samples": self.n_samples,
                "epochs_done": self.epochs_done,
                "finished": self.finished,
                "stopped_early": self.stopped_early,
                "module": cpu_state(self.module),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": None
                if self.precision.scaler is None
                else self.precision.scaler.state_dict(),
                "ema": None if self.ema is None else self.ema.state_dict(),
                "best_state": self.best_state,
                "best_epoch": self.best_epoch,
                "best_score": self.best_score,
                "epochs_without_improvement": self.epochs_without_improvement,
                "history": self.history,
                "last_lr": self._last_lr,
                "rng": rng_states,
            },
        )

    def _load(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.precision.scaler is not None and state["scaler"] is not None:
            self.precision.scaler.load_state_dict(state["scaler"])
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])
        self.best_state = state["best_state"]
        self.best_epoch, self.best_score = state["best_epoch"], state["best_score"]
        self.epochs_without_improvement = state["epochs_without_improvement"]
        self.history = list(state["history"])
        self.epochs_done = state["epochs_done"]
        self.finished, self.stopped_early = state["finished"], state["stopped_early"]
        self._last_lr = state["last_lr"]
        rng_states = state["rng"]
        if len(rng_states) != self.world_size:
            raise ValueError(
                f"the checkpoint was written by {len(rng_states)} processes, this run has "
                f"{self.world_size}; resume with the same number of processes"
            )
        restore_rng_state(rng_states[self.rank], self.device)

    def _shared_seed(self) -> int:
        if self.config.random_state is not None:
            return int(self.config.random_state)
        return draw_shared_seed(self.device)


def _training_device(device: str, distributed: bool) -> torch.device:
    resolved = resolve_device(device)
    if distributed and resolved.type == "cuda" and resolved.index is None:
        # One GPU per process: torchrun's LOCAL_RANK, else the current device.
        local_rank = os.environ.get("LOCAL_RANK")
        index = (
            int(local_rank) % torch.cuda.device_count()
            if local_rank
            else torch.cuda.current_device()
        )
        resolved = torch.device("cuda", index)
    return resolved


def _seed_host(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - user code draws from the legacy global RNG
    torch.manual_seed(seed)


class PreservedHostRNG:
    """Restore Python's and NumPy's global generators on exit (torch has ``fork_rng``)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __enter__(self) -> None:
        if self.enabled:
            self.python, self.numpy = random.getstate(), np.random.get_state()  # noqa: NPY002

    def __exit__(self, *exc) -> None:
        if self.enabled:
            random.setstate(self.python)
            np.random.set_state(self.numpy)  # noqa: NPY002


def _config_dict(config) -> dict[str, Any]:
    return {k: v for k, v in asdict(config).items() if k not in RESUMABLE_CHANGES}


# What Run._save writes and Run._load reads.
CHECKPOINT_ENTRIES = (
    "config",
    "fingerprint",
    "seed",
    "n_samples",
    "epochs_done",
    "finished",
    "stopped_early",
    "module",
    "optimizer",
    "scheduler",
    "scaler",
    "ema",
    "best_state",
    "best_epoch",
    "best_score",
    "epochs_without_improvement",
    "history",
    "last_lr",
    "rng",
)


def _check_checkpoint_config(checkpoint: dict[str, Any], config, path) -> None:
    check_entries(checkpoint, CHECKPOINT_ENTRIES, path)
    saved, current = checkpoint["config"], _config_dict(config)
    changed = sorted(k for k in current if saved.get(k) != current[k])
    if changed:
        raise ValueError(
            f"the checkpoint {path} was written with a different configuration "
            f"({', '.join(f'{k}: {saved.get(k)!r} -> {current[k]!r}' for k in changed)}); "
            "use a new checkpoint_dir or delete the checkpoint"
        )
