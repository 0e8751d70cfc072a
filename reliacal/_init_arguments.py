"""Constructor arguments, as scikit-learn's contract asks: stored in one call, signatures spelled out.

:func:`store_init_arguments` stores the arguments of an ``__init__``;
:func:`spell_out_init_signature` gives an ``__init__`` that passes ``**kwargs``
on to a base class the full signature that ``get_params`` and ``help()`` read.
"""

from __future__ import annotations

import inspect

__all__ = ["merged_init_signature", "spell_out_init_signature", "store_init_arguments"]


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


def merged_init_signature(init, base_init) -> inspect.Signature | None:
    """The signature of ``init`` with its ``**kwargs`` spelled out as ``base_init``'s.

    ``None`` when ``init`` takes no ``**kwargs`` (it lists every parameter
    itself). The keyword-only parameters of ``base_init`` follow ``init``'s
    own, in ``base_init``'s order; one that ``init`` names keyword-only (to
    change its default) takes ``init``'s form in that place.

    >>> def base(self, *, input="logits", verbose=0): ...
    >>> def init(self, tol=1e-6, *, verbose=1, **base_params): ...
    >>> str(merged_init_signature(init, base))
    "(self, tol=1e-06, *, input='logits', verbose=1)"
    """
    own = list(inspect.signature(init).parameters.values())
    if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in own):
        return None
    base = {
        parameter.name: parameter
        for parameter in inspect.signature(base_init).parameters.values()
        if parameter.kind is parameter.KEYWORD_ONLY
    }
    named = {parameter.name: parameter for parameter in own}
    overrides = {
        name: parameter
        for name, parameter in named.items()
        if name in base and parameter.kind is parameter.KEYWORD_ONLY
    }
    head = [
        parameter
        for parameter in own
        if parameter.kind is not parameter.VAR_KEYWORD and parameter.name not in overrides
    ]
    tail = [
        overrides.get(name, parameter)
        for name, parameter in base.items()
        if name not in named or name in overrides
    ]
    return inspect.Signature(head + tail)


def spell_out_init_signature(cls: type, base_init) -> None:
    """Give ``cls.__init__``, when it takes ``**kwargs``, its :func:`merged_init_signature`.

    Meant for a base class's ``__init_subclass__``; an ``__init__`` inherited
    rather than defined by ``cls`` already carries its signature.
    """
    init = cls.__dict__.get("__init__")
    signature = None if init is None else merged_init_signature(init, base_init)
    if signature is not None:
        init.__signature__ = signature
