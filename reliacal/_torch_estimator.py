"""Helpers for the scikit-learn estimators that train a torch network with ``fit_module``.

Private and neutral: it depends only on :mod:`reliacal.training`, so both
``reliacal.calibrators`` (AdaptiveTS) and ``reliacal.finetune`` (CalAttn,
DIRECTOR) can import it without either importing the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from reliacal.training import TrainingConfig

__all__ = ["seeded_torch", "training_config"]


@contextlib.contextmanager
def seeded_torch(seed: int | None) -> Iterator[None]:
    """Run the block under ``torch.manual_seed(seed)``, leaving the caller's CPU RNG as it was.

    Used to initialise a network reproducibly without shifting the random
    stream of the code around the ``fit`` call. ``seed=None`` runs the block
    on the global RNG, which then advances as usual.

    Parameters
    ----------
    seed : int or None

    Examples
    --------
    >>> import torch
    >>> with seeded_torch(0):
    ...     first = torch.rand(2)
    >>> with seeded_torch(0):
    ...     second = torch.rand(2)
    >>> torch.equal(first, second)
    True
    """
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        yield


def training_config(estimator: Any, names: Iterable[str], **settings: Any) -> TrainingConfig:
    """A :class:`~reliacal.training.TrainingConfig` from an estimator's parameters.

    The parameters in ``names`` are passed to the trainer as they are, so each
    must mean exactly what the ``TrainingConfig`` field of that name means
    (AdaptiveTS's ``mixed_precision``, for instance, is about the backbone and
    must not be listed). ``settings`` give every other field explicitly.

    Parameters
    ----------
    estimator : object
        Holds the parameters in ``names`` as attributes.
    names : iterable of str
        ``TrainingConfig`` fields read from ``estimator``.
    **settings
        Further fields (fixed recipe values, a derived seed, ...); a field may
        not be given both ways.

    Returns
    -------
    TrainingConfig

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> params = SimpleNamespace(max_epochs=3, batch_size=8)
    >>> config = training_config(params, ("max_epochs", "batch_size"), schedule="constant")
    >>> config.max_epochs, config.batch_size, config.schedule
    (3, 8, 'constant')
    """
    names = tuple(names)
    both = sorted(set(names) & set(settings))
    if both:
        # A silent precedence between the two would hide a wiring mistake.
        raise ValueError(f"training settings given both as parameters and explicitly: {both}")
    return TrainingConfig(**{name: getattr(estimator, name) for name in names}, **settings)
