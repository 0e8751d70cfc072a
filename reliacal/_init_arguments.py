"""Store an estimator's constructor arguments, as scikit-learn's contract asks, in one call."""

from __future__ import annotations

import inspect

__all__ = ["store_init_arguments"]


def store_init_arguments(estimator, arguments: dict) -> None:
    """Set each parameter of ``estimator`` found in ``arguments`` as an attribute, unchanged.

    Called first thing in an ``__init__`` as ``store_init_arguments(self,
    locals())``. scikit-learn's contract is that ``__init__`` stores every
    parameter under its own name and does nothing else (``get_params``,
    ``set_params`` and ``clone`` rely on it, ``check_estimator`` tests it).
    Which names count is read from the same place ``get_params`` reads them:
    the (spelled-out) signature of ``type(estimator).__init__``. So ``self``,
    the ``**kwargs`` dict and the ``__class__`` cell that ``super()`` adds to
    ``locals()`` are never stored, and a base class's ``__init__`` stores its
    own parameters by the same call. Values are stored as given: validation
    belongs in ``fit``.

    >>> from sklearn.base import BaseEstimator
    >>> class Scaler(BaseEstimator):
    ...     def __init__(self, factor=2.0, *, offset=None):
    ...         store_init_arguments(self, locals())
    >>> vars(Scaler(offset=1))
    {'factor': 2.0, 'offset': 1}
    """
    parameters = inspect.signature(type(estimator).__init__).parameters
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for name, value in arguments.items():
        if name != "self" and name in parameters and parameters[name].kind in named:
            setattr(estimator, name, value)
