"""Validation pass of the training loop: mean loss and calibration scores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from reliacal._data import split_batch
from reliacal._device import to_device
from reliacal.metrics import accuracy, expected_calibration_error, negative_log_likelihood
from reliacal.training._selection import chance_accuracy

N_BINS = 15


def as_input(x: Any) -> Any:
    """The collated ``x`` of a batch; ``default_collate`` turns a tuple of tensors into a list."""
    return tuple(x) if isinstance(x, list) else x


def batch_length(x: Any, y: Any) -> int:
    if isinstance(y, torch.Tensor) and y.ndim > 0:
        return int(y.shape[0])
    first = x[0] if isinstance(x, tuple) else x
    return int(first.shape[0])


def classification_scores(logits: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Top-label ECE (15 equal-width bins), NLL and accuracy of ``softmax(logits)``."""
    probabilities = torch.softmax(logits.double(), dim=1).numpy()
    # Columns are the classes: a validation split may miss some of them.
    labels = np.arange(logits.shape[1])
    y_true = y.numpy()
    return {
        "ece": expected_calibration_error(y_true, probabilities, n_bins=N_BINS, labels=labels),
        "nll": negative_log_likelihood(y_true, probabilities, labels=labels),
        "accuracy": accuracy(y_true, probabilities, labels=labels),
    }


@torch.no_grad()
def evaluate(
    module: nn.Module,
    loader: DataLoader,
    loss_fn: Callable,
    *,
    logits_fn: Callable | None,
    device: torch.device,
    autocast: Callable,
    params: dict[str, torch.Tensor] | None = None,
    progress: bool = False,
) -> tuple[dict[str, float], str | None, float | None]:
    """Mean loss and, when the outputs are classification logits, ECE / NLL / accuracy.

    ``params`` (EMA weights) replace the module's trainable parameters for this
    pass only. Returns the scores, the reason why ECE / NLL / accuracy cannot
    be computed (None when they are), and the chance accuracy of the
    validation labels (:func:`~reliacal.training._selection.chance_accuracy`;
    None without classification scores). ``progress`` shows a bar over the
    batches.
    """
    was_training = module.training
    module.eval()
    loss_sum, count = 0.0, 0
    all_logits, all_y = [], []
    why_not: str | None = None
    # Updated by hand: tqdm.auto's class opens an iterator of what it wraps, and a
    # DataLoader's iterator draws its seed from torch's generator (dropout's stream).
    bar = tqdm(total=len(loader), desc="validation", leave=False, disable=not progress)
    try:
        for batch in loader:
            bar.update()
            x, y = split_batch(batch, require_labels=True)
            x, y = as_input(to_device(x, device)), to_device(y, device)
            with autocast():
                outputs = module(x) if params is None else functional_call(module, params, (x,))
                loss = loss_fn(outputs, y)
            n = batch_length(x, y)
            loss_sum += float(loss.float()) * n
            count += n
            if why_not is not None:
                continue
            logits = outputs if logits_fn is None else logits_fn(outputs)
            if not (isinstance(logits, torch.Tensor) and logits.ndim == 2):
                why_not = "the outputs (after logits_fn) are not a (batch, n_classes) tensor"
            elif not (isinstance(y, torch.Tensor) and y.ndim == 1 and not y.is_floating_point()):
                why_not = "the validation targets are not a 1-D tensor of class indices"
            else:
                all_logits.append(logits.detach().float().cpu())
                all_y.append(y.detach().cpu())
    finally:
        bar.close()
        module.train(was_training)
    if count == 0:
        raise ValueError("the validation data is empty")
    scores = {"loss": loss_sum / count}
    chance = None
    if why_not is None:
        logits = torch.cat(all_logits)
        if not bool(torch.isfinite(logits).all()):
            # Training steps passed the NaN guard, so the weights are finite: the cause is
            # almost always a NaN or infinite value in the validation inputs.
            raise ValueError(
                f"the network's outputs on {int((~torch.isfinite(logits)).any(dim=1).sum())} "
                "validation samples are NaN or infinite: check the validation inputs for "
                "NaN or infinite values"
            )
        y = torch.cat(all_y)
        scores.update(classification_scores(logits, y))
        chance = chance_accuracy(y.numpy(), logits.shape[1])
    return scores, why_not, chance
