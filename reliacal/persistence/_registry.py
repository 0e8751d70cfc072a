"""The classes that :func:`reliacal.load` may build, by the path a manifest names them with.

Two kinds register: the estimators (every ``SaveMixin`` subclass defined in
reliacal, from its ``__init_subclass__``) and the named tuples they hold
(marked with :func:`loadable`). Nothing else can be named by a manifest.
"""

from __future__ import annotations

__all__ = ["class_path", "loadable", "loadable_class", "register_estimator"]

_ESTIMATORS: dict[str, type] = {}
_TUPLES: dict[str, type] = {}


def class_path(cls: type) -> str:
    """``"module.QualifiedName"`` of a class, as manifests name it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _defined_in_reliacal(cls: type) -> bool:
    return cls.__module__.startswith("reliacal.") and "<locals>" not in cls.__qualname__


def register_estimator(cls: type) -> None:
    """Make an estimator class loadable, if reliacal defines it (a user's subclass is not)."""
    if _defined_in_reliacal(cls):
        _ESTIMATORS[class_path(cls)] = cls


def loadable(cls: type) -> type:
    """Let :func:`reliacal.load` build ``cls``, a named tuple that fitted estimators hold.

    A decorator; estimators that subclass
    :class:`~reliacal.persistence.SaveMixin` are loadable without it. Only
    named tuples defined in reliacal can be registered, so a manifest can
    never name code from elsewhere.

    Examples
    --------
    >>> import collections
    >>> from reliacal.persistence import loadable
    >>> loadable(collections.namedtuple("Pair", "left right", module="elsewhere"))
    Traceback (most recent call last):
    ...
    ValueError: only named tuples defined in reliacal are loadable, not elsewhere.Pair
    """
    if not (_defined_in_reliacal(cls) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise ValueError(
            f"only named tuples defined in reliacal are loadable, not {class_path(cls)}"
        )
    _TUPLES[class_path(cls)] = cls
    return cls


def loadable_class(path: str, *, estimator: bool) -> type | None:
    """The registered estimator (or named tuple) named ``path``, or None."""
    return (_ESTIMATORS if estimator else _TUPLES).get(path)
