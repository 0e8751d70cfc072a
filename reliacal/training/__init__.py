"""The one training loop shared by every reliacal estimator that trains a network.

:func:`fit_module` trains any ``nn.Module`` on a torch ``Dataset`` of ``(x, y)``
pairs: AdamW (or Adam, SGD) with a warm-up then cosine learning-rate schedule,
gradient clipping, mixed precision on CUDA, a held-out validation split scored
by ECE / NLL / loss / accuracy with best-checkpoint selection and early
stopping, an optional EMA of the weights, a NaN guard, resumable checkpoints
and ``torch.distributed`` (DDP) training. :class:`TrainingConfig` holds the
settings; AdaptiveTS, CalAttnFinetuner and DiffusionReconfigurer build one from
their hyperparameters.
"""

from __future__ import annotations

from reliacal._data import fingerprint
from reliacal.training._estimator import (
    SMALL_WORK,
    THREADS_CONSTRAINT,
    TRAINING_CONSTRAINTS,
    NetworkEstimatorMixin,
    PositiveIntegers,
    resumable_seed,
    seeded_torch,
    thread_count,
    torch_threads,
    training_config,
)
from reliacal.training._fit import (
    CheckpointError,
    TrainingConfig,
    TrainingDivergedError,
    TrainingResult,
    fit_module,
)
from reliacal.training._randomness import draw_shared_seed, loop_generator_seeds, loop_split
from reliacal.training._selection import chance_accuracy, improves, warn_if_never_above_chance

__all__ = [
    "CheckpointError",
    "NetworkEstimatorMixin",
    "PositiveIntegers",
    "SMALL_WORK",
    "THREADS_CONSTRAINT",
    "TRAINING_CONSTRAINTS",
    "TrainingConfig",
    "TrainingDivergedError",
    "TrainingResult",
    "chance_accuracy",
    "draw_shared_seed",
    "fingerprint",
    "fit_module",
    "improves",
    "loop_generator_seeds",
    "loop_split",
    "resumable_seed",
    "seeded_torch",
    "thread_count",
    "torch_threads",
    "training_config",
    "warn_if_never_above_chance",
]
