"""Which epoch's weights a run keeps: the best validation score, never a chance-level epoch.

A lowest-ECE rule alone can keep a network that learnt nothing: one that
predicts the most frequent class with that class's frequency as confidence
has an ECE of zero. So an epoch whose validation accuracy is at or below
chance (:func:`chance_accuracy`: the share of the most frequent validation
label) loses to any epoch above chance, whatever the metric says;
among epochs on the same side of chance the ``selection_metric`` decides,
and ties keep the earlier epoch. When no epoch rose above chance the run
warns (:func:`warn_if_never_above_chance`).

Without classification scores (outputs that are not logits, selected by
``"loss"``) there is no accuracy, and the metric alone decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reliacal._validation import warn_at_caller

__all__ = [
    "DEFAULT_CHANCE_ADVICE",
    "chance_accuracy",
    "improves",
    "is_above_chance",
    "warn_if_never_above_chance",
]

# Accuracy and chance are both counts over the same n; the slack only absorbs rounding.
_TOLERANCE = 1e-9


def chance_accuracy(y: np.ndarray, n_classes: int) -> float:
    """Accuracy of always answering the most frequent label of ``y``.

    It is at least ``1 / n_classes``, the accuracy of a uniform guess. When
    ``y`` holds a single label (a tiny validation split), no accuracy could
    beat its frequency of 1, so the uniform guess's ``1 / n_classes`` is
    chance instead.

    Examples
    --------
    >>> chance_accuracy(np.array([0, 0, 0, 1, 2]), 3)
    0.6
    >>> chance_accuracy(np.array([0, 1, 2, 3]), 4)
    0.25
    >>> chance_accuracy(np.array([1, 1]), 4)
    0.25
    """
    y = np.asarray(y)
    if y.size == 0:
        raise ValueError("the validation labels are empty: chance accuracy is undefined")
    counts = np.bincount(y, minlength=n_classes)
    uniform = 1.0 / n_classes
    if np.count_nonzero(counts) == 1:
        return uniform
    return float(max(counts.max() / y.size, uniform))


def is_above_chance(entry: Mapping[str, Any], chance: float | None) -> bool | None:
    """Whether the history ``entry``'s ``val_accuracy`` beats ``chance``; None when unknown."""
    accuracy = entry.get("val_accuracy")
    if chance is None or accuracy is None:
        return None
    return bool(accuracy > chance + _TOLERANCE)


def _metric_better(score: float, best: float, metric: str) -> bool:
    if metric == "accuracy":
        return score > best
    return score < best


def improves(
    entry: Mapping[str, Any],
    best: Mapping[str, Any] | None,
    *,
    metric: str,
    chance: float | None,
) -> bool:
    """Whether the epoch logged in ``entry`` should replace the kept epoch ``best``.

    Parameters
    ----------
    entry, best : mapping
        History entries (``val_<metric>`` and, when known, ``val_accuracy``);
        ``best`` is None before any epoch was kept.
    metric : {"ece", "nll", "loss", "accuracy"}
        Lower is better, except for accuracy.
    chance : float or None
        :func:`chance_accuracy` of the validation labels; None ignores it.

    Examples
    --------
    >>> at_chance = {"val_ece": 0.0, "val_accuracy": 0.6}
    >>> learnt = {"val_ece": 0.1, "val_accuracy": 0.8}
    >>> improves(learnt, at_chance, metric="ece", chance=0.6)
    True
    >>> improves(at_chance, learnt, metric="ece", chance=0.6)
    False
    >>> improves(at_chance, learnt, metric="ece", chance=None)
    True
    """
    if best is None:
        return True
    above, best_above = is_above_chance(entry, chance), is_above_chance(best, chance)
    if above is not None and best_above is not None and above != best_above:
        return above
    return _metric_better(entry[f"val_{metric}"], best[f"val_{metric}"], metric)


#: What the chance warning advises by default: a network trained from its inputs.
DEFAULT_CHANCE_ADVICE = (
    "Train longer (max_epochs), change learning_rate or warmup_epochs, and check that "
    "the labels match the inputs."
)


def warn_if_never_above_chance(
    history: Sequence[Mapping[str, Any]],
    chance: float | None,
    best_epoch: int,
    advice: str | None = None,
) -> None:
    """Warn when no epoch of ``history`` has a validation accuracy above ``chance``.

    ``advice`` ends the message (``DEFAULT_CHANCE_ADVICE`` when None); the
    warning names the first caller outside reliacal (its ``fit`` line).
    """
    if chance is None or not history:
        return
    verdicts = [is_above_chance(entry, chance) for entry in history]
    if any(verdict is None for verdict in verdicts) or any(verdicts):
        return
    best = max(entry["val_accuracy"] for entry in history)
    warn_at_caller(
        f"validation accuracy never rose above chance ({chance:.3f}, the share of the most "
        f"frequent validation label) in {len(history)} epoch(s) (best {best:.3f}); the kept "
        f"weights (epoch {best_epoch}) predict no better than always answering that label. "
        + (DEFAULT_CHANCE_ADVICE if advice is None else advice),
        UserWarning,
    )
