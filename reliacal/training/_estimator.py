"""The base of the scikit-learn estimators that train a torch network with ``fit_module``.

Private and neutral: it depends only on :mod:`reliacal.training`, so both
``reliacal.calibrators`` (AdaptiveTS) and ``reliacal.finetune`` (CalAttn,
DIRECTOR) can import it without either importing the other.

:class:`NetworkEstimatorMixin` owns, once for the three: the seed of a fit
(drawn, shared under DDP, and kept across a resumed fit), the
train/validation split, the trainer's settings, the parameter constraints of
the training settings, and what a diverging fit leaves behind.
"""

from __future__ import annotations

import contextlib
import numbers
import os
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval

from reliacal.training._checkpoint import check_checkpoint_dir, read_seed_file, write_seed_file
from reliacal.training._constraints import TRAINING_CONSTRAINTS as _TRAINER_CONSTRAINTS
from reliacal.training._fit import TrainingConfig, TrainingDivergedError
from reliacal.training._randomness import SplitStream, broadcast_seed, split_indices

__all__ = [
    "SMALL_WORK",
    "THREADS_CONSTRAINT",
    "TRAINING_CONSTRAINTS",
    "NetworkEstimatorMixin",
    "PositiveIntegers",
    "resumable_seed",
    "seeded_torch",
    "thread_count",
    "torch_threads",
    "training_config",
]

# The training settings' constraints (TrainingConfig's own), except that an estimator's
# random_state may also be a RandomState, from which the fit's seed is drawn.
TRAINING_CONSTRAINTS: dict[str, list] = {
    **_TRAINER_CONSTRAINTS,
    "random_state": ["random_state"],
}


#: The ``n_threads`` parameter of the estimators that train a network: like
#: scikit-learn's ``n_jobs``, a positive count, or None to let the estimator choose.
THREADS_CONSTRAINT: list = [Interval(numbers.Integral, 1, None, closed="left"), None]

#: Parameters times rows per batch below which a network works on one CPU thread
#: when ``n_threads=None``: 2**26 (67 million), for instance AdaptiveTS's automatic
#: widths on up to about 100 classes of logits, or any network of 500,000 parameters
#: in batches of 128. Each of its matrix products is then too small for more threads
#: to gain much, while threads that wait on one another cost a great deal on a busy
#: machine (torch starts one per core).
SMALL_WORK = 2**26


def thread_count(n_threads: int | None, module: torch.nn.Module, rows: int) -> int | None:
    """torch's CPU threads for work on ``module`` in batches of ``rows``; None: leave them.

    ``n_threads`` as given, else 1 for small work (parameters times ``rows``
    below :data:`SMALL_WORK`) and None (torch's current setting) above it.

    Examples
    --------
    >>> from torch import nn
    >>> thread_count(None, nn.Linear(16, 16), rows=128), thread_count(4, nn.Linear(16, 16), 128)
    (1, 4)
    >>> thread_count(None, nn.Linear(4096, 4096), rows=64) is None
    True
    """
    if n_threads is not None:
        return int(n_threads)
    n_parameters = sum(parameter.numel() for parameter in module.parameters())
    return 1 if n_parameters * int(rows) < SMALL_WORK else None


@contextlib.contextmanager
def torch_threads(n_threads: int | None) -> Iterator[None]:
    """Run the block on ``n_threads`` intra-op CPU threads, then restore the caller's count.

    ``None`` leaves the setting alone. ``torch.set_num_threads`` is
    process-wide: the block should not share the process with other torch
    work running in parallel threads.

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    previous = torch.get_num_threads()
    if n_threads is None or n_threads == previous:
        yield
        return
    torch.set_num_threads(int(n_threads))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class PositiveIntegers(HasMethods):
    """scikit-learn constraint: a non-empty sequence of positive integers (layer widths).

    A ``HasMethods`` (with no methods) only because scikit-learn accepts
    constraint objects of its own classes alone; the test is the one below.

    Examples
    --------
    >>> constraint = PositiveIntegers()
    >>> constraint.is_satisfied_by((64, 32)), constraint.is_satisfied_by((8, 0))
    (True, False)
    """

    def __init__(self) -> None:
        super().__init__([])

    def is_satisfied_by(self, val: Any) -> bool:
        if isinstance(val, str):
            return False
        try:
            values = tuple(val)
        except TypeError:
            return False
        return bool(values) and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in values
        )

    def __str__(self) -> str:
        return "a non-empty sequence of positive integers"


# Written in checkpoint_dir: the seed an interrupted fit started with.
SEED_FILE = "fit_seed.json"


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
    values = {name: getattr(estimator, name) for name in names}
    if "verbose" in values:
        # scikit-learn's verbose may be a bool; the trainer counts levels.
        values["verbose"] = int(values["verbose"])
    return TrainingConfig(**values, **settings)


def resumable_seed(seed: int, checkpoint_dir: str | os.PathLike | None) -> int:
    """The seed a run in ``checkpoint_dir`` started with, else ``seed`` (recorded there).

    Without an integer ``random_state`` every fit draws a new seed; a fit that
    resumes an interrupted run must reuse the interrupted run's seed, or the
    split and the network's initialisation would differ from the checkpoint's.
    Only rank 0 writes the file under DDP (all ranks hold the same seed).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first = resumable_seed(11, folder)
    ...     second = resumable_seed(12, folder)  # the interrupted run's seed wins
    >>> first, second
    (11, 11)
    """
    if checkpoint_dir is None:
        return seed
    path = check_checkpoint_dir(checkpoint_dir) / SEED_FILE
    if path.is_file():
        return read_seed_file(path)
    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()) or (
        distributed.get_rank() == 0
    ):
        write_seed_file(path, seed)
    return seed


class NetworkEstimatorMixin:
    """What the estimators that train a network share (private).

    A subclass sets two class attributes that keep its random streams as they
    were first written (so that a seed reproduces earlier releases' fits):

    ``_split_stream``
        How ``_split`` shuffles: ``"torch"`` (the first rows of a
        ``torch.randperm`` validate, as in the training loop), ``"numpy"`` (the
        first rows of a NumPy ``RandomState`` permutation) or ``"stratified"``
        (scikit-learn's ``train_test_split``, stratified by the labels).
    ``_seed_from_int``
        ``True``: even an integer ``random_state`` is only the seed of a
        NumPy generator from which the fit's seed is drawn (CalAttn);
        ``False``: an integer is the fit's seed itself and ``None`` leaves the
        drawing to the trainer.

    The fitted network is ``network_`` (for an ensemble, each member's
    ``network``). A fit that fails leaves the estimator unfitted; when
    training diverged, the error's ``module`` attribute holds the network with
    the last good weights (see ``_divergence_policy``).
    """

    _split_stream: ClassVar[SplitStream] = "torch"
    _seed_from_int: ClassVar[bool] = False

    def _fit_seed(self) -> int | None:
        """The seed of this fit: initialisation, split, shuffling and dropout."""
        random_state = self.random_state
        if isinstance(random_state, numbers.Integral) and not self._seed_from_int:
            return int(random_state)
        if random_state is None and not self._seed_from_int:
            return None
        drawn = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
        if not isinstance(random_state, numbers.Integral):
            # Drawn from a generator that differs between processes: take rank 0's.
            drawn = broadcast_seed(drawn)
        return resumable_seed(drawn, getattr(self, "checkpoint_dir", None))

    def _split(
        self, n: int, seed: int | None, labels: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Train and validation rows for ``validation_fraction``, in the class's stream."""
        return split_indices(
            n, float(self.validation_fraction), seed, stream=self._split_stream, labels=labels
        )

    def _threads(self, module: torch.nn.Module, rows: int):
        """Context: the CPU threads for work on ``module`` (see :func:`thread_count`)."""
        return torch_threads(thread_count(getattr(self, "n_threads", None), module, rows))

    def _reset_fitted(self) -> None:
        """Forget every fitted attribute (the names ending in ``_``)."""
        for name in [name for name in vars(self) if name.endswith("_")]:
            delattr(self, name)

    @contextlib.contextmanager
    def _divergence_policy(self, network: torch.nn.Module | None = None) -> Iterator[None]:
        """Leave the estimator unfitted if the block fails; hand a diverged network over.

        On :class:`~reliacal.training.TrainingDivergedError` the error's
        ``module`` becomes ``network`` (the one the fit would have kept, its
        weights the last good ones): the trained work is not lost, but the
        estimator cannot predict with a half-trained state. ``network=None``
        keeps what the trainer attached.
        """
        try:
            yield
        except TrainingDivergedError as error:
            if network is not None:
                error.module = network
            self._reset_fitted()
            raise
        except BaseException:
            # An interruption or a bad input: no half-fitted state either.
            self._reset_fitted()
            raise
