"""Store an estimator's constructor arguments, as scikit-learn's contract asks, in one call."""

from __future__ import annotations

import inspect

__all__ = ["store_init_arguments"]


def store_init_arguments(estimator, arguments: dict) -> None:
    """Set each named parameter of the calling ``__init__`` as an attribute, unchanged.

    Called first thing in an ``__init__`` as ``store_init_arguments(self,
    locals())``, in place of one ``self.name = name`` line per parameter.
    scikit-learn's contract is that ``__init__`` stores every parameter under
    its own name and does nothing else (``get_params``, ``set_params`` and
    ``clone`` rely on it, ``check_estimator`` tests it). The names stored are
    the named parameters of the calling function, read from its code object:
    ``self``, a ``**kwargs`` dict (passed on to a base ``__init__``, which
    stores its own the same way), ``*args`` and the ``__class__`` cell that
    ``super()`` adds to ``locals()`` are not. Values are stored as given:
    validation belongs in ``fit``.

    >>> from sklearn.base import BaseEstimator
    >>> class Scaler(BaseEstimator):
    ...     def __init__(self, factor=2.0, *, offset=None, **ignored):
    ...         store_init_arguments(self, locals())
    >>> vars(Scaler(offset=1, other=3))
    {'factor': 2.0, 'offset': 1}
    """
    frame = inspect.currentframe()
    try:
        # CPython always has the caller's frame; its code object lists the parameters
        # first: positional ones, then keyword-only ones, then *args and **kwargs.
        code = frame.f_back.f_code
    finally:
        del frame  # a frame referencing itself would keep the caller's locals alive
    for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
        if name != "self":
            setattr(estimator, name, arguments[name])
