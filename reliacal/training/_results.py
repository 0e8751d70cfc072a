"""What :func:`reliacal.training.fit_module` returns or raises (public there)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


class TrainingDivergedError(ValueError):
    """A non-finite loss or gradient stopped :func:`fit_module`.

    Before this was raised the module was given the last weights known to be
    good, moved to the CPU and put in eval mode; its ``module`` attribute is
    that module. The last good weights are those the failing step started
    from, unless they give a non-finite loss on the previous step's batch
    (which the weights before them scored finitely): the previous update broke
    them, and the weights from before it are restored. Estimators put the
    network they were fitting there instead.

    Attributes
    ----------
    module : torch.nn.Module or None
        The network with the last good weights (on the CPU, in eval mode).
    """

    module = None

    __module__ = "reliacal.training"


@dataclass
class TrainingResult:
    """What :func:`fit_module` returns besides the trained module.

    Attributes
    ----------
    history : list of dict
        One dict per epoch: ``epoch`` (from 1), ``train_loss``, ``lr`` (of the
        epoch's last step), ``time`` (seconds), and with validation data
        ``val_loss`` and, when the outputs are classification logits,
        ``val_ece``, ``val_nll``, ``val_accuracy``.
    best_epoch : int
        Epoch (from 1) whose weights the module holds.
    best_score : float
        Its validation ``selection_metric``; NaN without validation data.
    stopped_early : bool
        Whether early stopping or a callback ended training before ``max_epochs``.
    """

    history: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = 0
    best_score: float = math.nan
    stopped_early: bool = False


# Shown (and pickled) under its public module. Set after the decorator ran: @dataclass
# resolves the annotations in the module named by __module__, which would make this
# module importable only after reliacal.training.
TrainingResult.__module__ = "reliacal.training"
