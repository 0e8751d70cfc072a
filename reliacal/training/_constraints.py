"""scikit-learn parameter constraints of the training settings, written once.

:class:`reliacal.training.TrainingConfig` validates itself with them, and the
estimators that train a network declare the ones they expose under the same
names, so a setting is checked by one rule, with one message, wherever it is
given.
"""

from __future__ import annotations

import numbers
import os

import torch
from sklearn.utils._param_validation import Interval, StrOptions

__all__ = ["OPTIMIZERS", "SELECTION_METRICS", "TRAINING_CONSTRAINTS"]

OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("cosine", "step", "constant")
SELECTION_METRICS = ("ece", "nll", "loss", "accuracy")

_POSITIVE_INT = [Interval(numbers.Integral, 1, None, closed="left")]
# Intervals open at infinity: inf and NaN are refused too.
_NON_NEGATIVE = [Interval(numbers.Real, 0, None, closed="left")]
_POSITIVE = [Interval(numbers.Real, 0, None, closed="neither")]

TRAINING_CONSTRAINTS: dict[str, list] = {
    "max_epochs": _POSITIVE_INT,
    "batch_size": _POSITIVE_INT,
    "optimizer": [StrOptions(set(OPTIMIZERS))],
    "learning_rate": _POSITIVE,
    "head_learning_rate": [*_POSITIVE, None],
    "weight_decay": _NON_NEGATIVE,
    "momentum": [Interval(numbers.Real, 0, 1, closed="left")],
    "nesterov": ["boolean"],
    "schedule": [StrOptions(set(SCHEDULES))],
    "warmup_epochs": _NON_NEGATIVE,
    "milestones": ["array-like"],
    "gamma": _POSITIVE,
    "grad_clip_norm": [*_POSITIVE, None],
    "mixed_precision": ["boolean", StrOptions({"auto", "bf16", "fp16"})],
    "validation_fraction": [Interval(numbers.Real, 0, 1, closed="left")],
    "selection_metric": [StrOptions(set(SELECTION_METRICS))],
    "n_iter_no_change": [*_POSITIVE_INT, None],
    "ema_decay": [Interval(numbers.Real, 0, 1, closed="left"), None],
    "checkpoint_dir": [str, os.PathLike, None],
    "device": [str, torch.device],
    "verbose": ["verbose"],
    # The trainer takes an int seed; the estimators also accept a RandomState.
    "random_state": [Interval(numbers.Integral, 0, None, closed="left"), None],
    "num_workers": [Interval(numbers.Integral, 0, None, closed="left")],
    "min_learning_rate": _NON_NEGATIVE,
}
