"""Argument checks of the training loop: each bad value is a ValueError that names it."""

from __future__ import annotations

import math
import numbers
from typing import Any

from torch.utils.data import IterableDataset


def check_dataset(name: str, data: Any) -> None:
    if isinstance(data, IterableDataset) or not (
        hasattr(data, "__getitem__") and hasattr(data, "__len__")
    ):
        raise ValueError(
            f"{name} must be a map-style torch Dataset of (x, y) pairs with __len__ "
            f"and __getitem__, got {type(data).__name__}"
        )


def check_choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high if high is not None else 'inf'}{')' if high_open or high is None else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
