"""Warnings for calibration data that cannot inform a fit: one class, or constant scores."""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["warn_uninformative"]


def warn_uninformative(estimator, logits: np.ndarray, y_index: np.ndarray, sample_weight) -> None:
    """Warn (``UserWarning``) when ``y`` holds one class or every row of ``logits`` is the same.

    Rows of zero weight do not count. Both fits still run (a calibration split
    may legitimately be small), but the map they learn says nothing about the
    model: the user should know.

    Examples
    --------
    >>> import numpy as np, warnings
    >>> from reliacal.calibrators import QuadraticScaling
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_uninformative(QuadraticScaling(), np.zeros((3, 2)), np.array([0, 1, 1]), None)
    >>> "same scores" in str(caught[0].message)
    True
    """
    name = type(estimator).__name__
    if sample_weight is not None:
        keep = sample_weight > 0
        logits, y_index = logits[keep], y_index[keep]
    present = np.unique(y_index)
    if present.size == 1:
        label = estimator.classes_[present[0]]
        label = label.item() if isinstance(label, np.generic) else label
        warnings.warn(
            f"{name}: y holds a single class ({label!r}); a calibration map fitted on one "
            "class only pushes every prediction towards it. Calibrate on data with both "
            "outcomes",
            UserWarning,
            stacklevel=5,
        )
    if logits.shape[0] > 1 and np.all(logits == logits[0]):
        warnings.warn(
            f"{name}: every row of X holds the same scores, so the calibration data say "
            "nothing about how the scores relate to the labels; the fitted map is constant "
            "on them (the class frequencies). Check that X holds the model's outputs",
            UserWarning,
            stacklevel=5,
        )
