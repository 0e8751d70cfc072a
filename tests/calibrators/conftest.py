"""Fixtures of the calibrator tests: the miscalibrated logits the scaling families fit."""

from __future__ import annotations

import numpy as np
import pytest


def _mixed_logits(seed, n=600, n_classes=4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    # Miscalibrated on purpose: over-confident, with a class bias and class mixing, so
    # that temperature scaling alone cannot fix it and the vector and matrix maps can.
    logits = 2.0 * np.eye(n_classes)[y] + 1.5 * rng.normal(size=(n, n_classes))
    logits = 1.5 * logits @ (np.eye(n_classes) + 0.3 * rng.random((n_classes, n_classes)))
    return logits + np.linspace(0.0, 1.5, n_classes), y


@pytest.fixture
def mixed_logits():
    """``mixed_logits(seed, n=600, n_classes=4) -> (logits, y)``: float64 logits, int labels."""
    return _mixed_logits
