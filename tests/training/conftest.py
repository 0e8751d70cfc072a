"""Fixtures of the training-loop tests: a separable toy problem and a quick configuration."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from reliacal.training import TrainingConfig

# A run on the toy problem that takes a fraction of a second on one CPU core...
QUICK_SCHEDULE = dict(max_epochs=3, batch_size=16, learning_rate=0.05, warmup_epochs=0)
# ...reproducible, and with a validation part so that the validation metrics exist.
QUICK_SETUP = dict(validation_fraction=0.25, random_state=0, device="cpu")


# Plain SGD: no momentum, decay, clipping or schedule, so that each step is
# -learning_rate * gradient and a test can replay it by hand.
PLAIN_SGD = dict(
    optimizer="sgd",
    momentum=0.0,
    nesterov=False,
    weight_decay=0.0,
    schedule="constant",
    grad_clip_norm=None,
)


def _blobs(n=64, seed=0, flip=False):
    generator = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = torch.randn(n, 2, generator=generator) * 0.5 + (2.0 * y[:, None] - 1.0) * 2.0
    return TensorDataset(x, (1 - y) if flip else y)


def _quick(**overrides):
    return TrainingConfig(**{**QUICK_SCHEDULE, **QUICK_SETUP, **overrides})


@pytest.fixture(scope="session")
def blobs():
    """``blobs(n=64, seed=0, flip=False)``: two well separated Gaussian blobs in 2-D.

    ``flip`` swaps the labels; the points depend on ``seed`` only.
    """
    return _blobs


@pytest.fixture(scope="session")
def quick():
    """``quick(**overrides)``: a :class:`TrainingConfig` for the toy problem."""
    return _quick


@pytest.fixture(scope="session")
def plain_sgd():
    """The :class:`TrainingConfig` settings of plain SGD (a dict): no momentum, weight decay,
    gradient clipping or schedule, so that a step is ``-learning_rate * gradient``."""
    return dict(PLAIN_SGD)
