"""Checks that the estimators' ``_check_loaded_state`` hooks share: one message for each refusal.

A saved file is checked for integrity (its checksums) and for form (the
codec), but only the estimator knows which values its fit can give; these
helpers let each state what it expects in a line.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = ["check_loaded_array", "check_loaded_number", "loaded_state_error"]


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def loaded_state_error(estimator: Any, name: str, value: Any, expected: str) -> ValueError:
    """The error for a fitted attribute ``name`` that is not what a fit gives.

    Examples
    --------
    >>> from reliacal.calibrators import TemperatureScaling
    >>> print(loaded_state_error(TemperatureScaling(), "temperature_", -1.0, "a positive number"))
    the saved TemperatureScaling has temperature_ = -1.0, but a fit gives a positive number: the file was not written by reliacal's save of a fitted model; refusing to load it
    """
    return ValueError(
        f"the saved {type(estimator).__name__} has {name} = {_describe(value)}, but a fit "
        f"gives {expected}: the file was not written by reliacal's save of a fitted model; "
        "refusing to load it"
    )


def _fetch(estimator: Any, name: str, value: Any) -> Any:
    if value is not _FROM_ESTIMATOR:
        return value
    if not hasattr(estimator, name):
        raise ValueError(
            f"the saved {type(estimator).__name__} is fitted (it has classes_) but has no "
            f"{name}; refusing to load it"
        )
    return getattr(estimator, name)


_FROM_ESTIMATOR = object()


def check_loaded_number(
    estimator: Any,
    name: str,
    *,
    value: Any = _FROM_ESTIMATOR,
    minimum: float | None = None,
    positive: bool = False,
    integer: bool = False,
    finite: bool = True,
) -> None:
    """Refuse a fitted number that is not a real (or integer) number in range.

    Parameters
    ----------
    estimator : estimator
        The estimator read from the file (its attribute ``name`` is checked
        unless ``value`` is given).
    name : str
        The attribute, as the message names it.
    value : optional
        The value to check, for an entry of a list or tuple.
    minimum : float, optional
        The smallest value allowed.
    positive : bool, default=False
        Whether the value must be above 0.
    integer : bool, default=False
        Whether the value must be an integer.
    finite : bool, default=True
        Whether infinity is refused (NaN always is).

    Examples
    --------
    >>> from reliacal.calibrators import TemperatureScaling
    >>> check_loaded_number(TemperatureScaling(), "temperature_", value=float("nan"), positive=True)
    Traceback (most recent call last):
    ...
    ValueError: the saved TemperatureScaling has temperature_ = nan, but a fit gives a positive finite number...
    """
    value = _fetch(estimator, name, value)
    kind = numbers.Integral if integer else numbers.Real
    ok = isinstance(value, kind) and not isinstance(value, bool | np.bool_)
    ok = ok and not math.isnan(value) and (not finite or math.isfinite(value))
    ok = ok and (minimum is None or value >= minimum) and (not positive or value > 0)
    if not ok:
        expected = "an integer" if integer else "a finite number" if finite else "a number"
        if positive:
            expected = "a positive " + expected.split(" ", 1)[1]
        elif minimum is not None:
            expected += f" of at least {minimum:g}"
        raise loaded_state_error(estimator, name, value, expected)


def check_loaded_array(
    estimator: Any,
    name: str,
    shape: tuple[int | None, ...],
    *,
    value: Any = _FROM_ESTIMATOR,
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    finite: bool = True,
    increasing: bool = False,
) -> np.ndarray:
    """Refuse a fitted array that is not real-valued, of ``shape``, finite and in range.

    Parameters
    ----------
    estimator : estimator
        The estimator read from the file.
    name : str
        The attribute, as the message names it.
    shape : tuple of int or None
        The expected shape; ``None`` leaves an axis free.
    value : optional
        The array to check, for an entry of a list.
    minimum, maximum : float, optional
        Bounds of every entry.
    positive : bool, default=False
        Whether every entry must be above 0.
    finite : bool, default=True
        Whether infinity is refused (NaN always is).
    increasing : bool, default=False
        Whether a 1-D array must be sorted (non-decreasing).

    Returns
    -------
    ndarray
        The array.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators import VectorScaling
    >>> check_loaded_array(VectorScaling(), "coef_", (3,), value=np.ones(2))
    Traceback (most recent call last):
    ...
    ValueError: the saved VectorScaling has coef_ = an array of shape (2,) and dtype float64, but a fit gives a finite real array of shape (3,)...
    """
    value = _fetch(estimator, name, value)
    wanted = "(" + ", ".join("n" if size is None else str(size) for size in shape)
    wanted += ",)" if len(shape) == 1 else ")"
    expected = f"{'a finite' if finite else 'a'} real array of shape {wanted}"
    if minimum is not None or maximum is not None:
        expected += f" with entries in [{minimum}, {maximum}]"
    if positive:
        expected += " with positive entries"
    if increasing:
        expected += ", sorted"
    ok = (
        isinstance(value, np.ndarray)
        and value.dtype.kind in "fiu"
        and value.ndim == len(shape)
        and all(size is None or size == actual for size, actual in zip(shape, value.shape))
    )
    if ok and value.size:
        ok = not np.isnan(value).any() and (not finite or np.isfinite(value).all())
        ok = ok and (minimum is None or value.min() >= minimum)
        ok = ok and (maximum is None or value.max() <= maximum)
        ok = ok and (not positive or value.min() > 0)
        ok = ok and (not increasing or bool(np.all(np.diff(value) >= 0)))
    if not ok:
        raise loaded_state_error(estimator, name, value, expected)
    return value
