"""The train/validation split and the run seed, written once for every trainer.

Private. Three estimators split their data and the loop splits when asked;
each keeps the random stream it had when it was written (so that a seed gives
the same split release after release), chosen here by name. Under DDP every
process must split and shuffle alike, so a seed drawn at random is rank 0's.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.distributed as dist
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state

__all__ = [
    "broadcast_seed",
    "draw_shared_seed",
    "loop_generator_seeds",
    "loop_split",
    "split_indices",
]

SplitStream = Literal["torch", "numpy", "stratified"]


def split_indices(
    n: int,
    fraction: float,
    seed: int | None,
    *,
    stream: SplitStream,
    labels: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded, sorted train and validation row indices; ``ceil(fraction * n)`` validate.

    Parameters
    ----------
    n : int
        Number of rows.
    fraction : float
        Share of the rows held out, in ``[0, 1)``; 0 gives an empty validation part.
    seed : int or None
        ``None`` draws from NumPy's global generator (not with ``"torch"``).
    stream : {"torch", "numpy", "stratified"}
        ``"torch"``: the first rows of ``torch.randperm`` validate (the training
        loop's split); ``"numpy"``: the first rows of a NumPy ``RandomState``
        permutation (AdaptiveTS); ``"stratified"``: scikit-learn's
        ``train_test_split``, stratified by ``labels`` when every class has two
        rows and both parts can hold every class (CalAttn).
    labels : ndarray of shape (n,), optional
        Class of each row, for ``"stratified"``.

    Returns
    -------
    train, validation : ndarray of int

    Examples
    --------
    >>> train, validation = split_indices(10, 0.3, 0, stream="numpy")
    >>> len(train), len(validation), sorted([*train, *validation]) == list(range(10))
    (7, 3, True)
    """
    n_validation = math.ceil(fraction * n)
    if n_validation >= n:
        raise ValueError(
            f"validation_fraction={fraction} leaves no training data out of {n} samples"
        )
    if stream == "torch":
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
    elif stream == "numpy":
        order = check_random_state(seed).permutation(n)
    elif stream == "stratified":
        return _stratified(n, n_validation, labels, seed)
    else:
        raise ValueError(f"stream must be 'torch', 'numpy' or 'stratified', got {stream!r}")
    return np.sort(order[n_validation:]), np.sort(order[:n_validation])


def _stratified(n: int, n_validation: int, labels: np.ndarray | None, seed: int | None):
    if n_validation == 0:
        return np.arange(n), np.arange(0)
    stratify = None
    if labels is not None:
        _, counts = np.unique(labels, return_counts=True)
        # train_test_split refuses a stratification that cannot give every part every class.
        if counts.min() >= 2 and n_validation >= len(counts) and n - n_validation >= len(counts):
            stratify = labels
    train, validation = train_test_split(
        np.arange(n), test_size=n_validation, random_state=seed, stratify=stratify
    )
    return np.sort(train), np.sort(validation)


def seed_streams(seed: int) -> tuple[int, int, int]:
    """The split, shuffling and host seeds that a training run derives from its seed.

    Three independent streams from one seed: changing how one is used (say,
    the shuffling) leaves the others, and so the split, as they were. The
    training loop and an estimator that makes the loop's split ahead of it
    (DIRECTOR scores its teacher on those rows) both read them here.

    >>> seed_streams(0) == seed_streams(0)
    True
    """
    split_seed, shuffle_seed, host_seed = np.random.SeedSequence(seed).generate_state(3)
    return int(split_seed), int(shuffle_seed), int(host_seed)


def loop_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The train and validation rows the training loop holds out for the run seed ``seed``.

    The first of the seed's streams (``seed_streams``) drives a ``torch.randperm`` split; an
    estimator that needs those rows ahead of the loop (DIRECTOR scores its
    teacher on them) gets the same ones here.

    >>> train, validation = loop_split(10, 0.2, 0)
    >>> len(train), len(validation)
    (8, 2)
    """
    split_seed, _, _ = seed_streams(seed)
    return split_indices(n, fraction, split_seed, stream="torch")


def loop_generator_seeds(seed: int, rank: int = 0) -> tuple[int, int]:
    """The shuffling seed and process ``rank``'s host seed of a run with seed ``seed``.

    :func:`reliacal.training.fit_module` shuffles epoch ``e`` (from 0) with
    ``torch.randperm`` under a generator seeded ``shuffle + e`` (a
    ``DistributedSampler``'s order) and seeds Python, NumPy and torch with
    the host seed (dropout, latent samples); a trainer that must draw what
    the loop draws, without running it, takes both here.

    >>> shuffle, host = loop_generator_seeds(0)
    >>> (shuffle, host) == loop_generator_seeds(0) and host != loop_generator_seeds(0, rank=1)[1]
    True
    """
    _, shuffle_seed, host_stream = seed_streams(seed)
    # Mixed with the rank: different dropout masks on each process, the same run after run.
    host_seed = int(np.random.SeedSequence([int(host_stream), int(rank)]).generate_state(1)[0])
    return int(shuffle_seed), host_seed


def draw_shared_seed(device: torch.device | None = None) -> int:
    """A run seed drawn from torch's global generator, rank 0's on every process.

    What an unseeded run trains with: it follows ``torch.manual_seed``, and
    under DDP all processes split and shuffle alike.
    """
    return broadcast_seed(int(torch.randint(0, 2**31 - 1, (), dtype=torch.int64)), device)


def broadcast_seed(seed: int, device: torch.device | None = None) -> int:
    """Rank 0's ``seed`` on every process under ``torch.distributed``; ``seed`` otherwise.

    A seed drawn at random differs between processes, which would then split
    and shuffle differently. NCCL moves only CUDA tensors: ``device`` (by
    default the current CUDA device) carries the value there.

    Examples
    --------
    >>> broadcast_seed(7)  # not distributed: the seed itself
    7
    """
    if not (dist.is_available() and dist.is_initialized()):
        return int(seed)
    if dist.get_backend() == "nccl":
        device = device if device is not None else torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    holder = torch.tensor(int(seed), dtype=torch.int64, device=device)
    dist.broadcast(holder, src=0)
    return int(holder)
