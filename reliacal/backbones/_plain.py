"""Adapter for a plain ``nn.Module`` whose feature and head parts the user names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from reliacal.backbones._base import BackboneAdapter

__all__ = ["PlainAdapter"]

Part = str | Callable[[Any], torch.Tensor]


def _describe(part: Part) -> Any:
    """A stable description of a part for cache keys (a name, or the code of a callable)."""
    if isinstance(part, str):
        return ("name", part)
    if isinstance(part, nn.Module):
        return ("module", repr(part))
    code = getattr(part, "__code__", None)
    if code is None:
        return ("callable", getattr(part, "__qualname__", type(part).__qualname__))
    return ("function", code.co_code, repr(code.co_consts), code.co_names)


class PlainAdapter(BackboneAdapter):
    """Adapter for any classifier split by the user into features and head.

    ``encode(x) = features(x)`` must return the pre-logits features ``(B, D)``
    (fold any pooling into ``features``); ``pool`` is the identity;
    ``head(pooled)`` returns the logits ``(B, K)``. The parts are given by
    the dotted name of a submodule of ``model`` (``"backbone"``,
    ``"net.fc"``) or as callables; a module given as a callable that is not
    part of ``model`` is registered too, so that ``.to(device)`` moves it.
    Reconfiguration is not supported. Prefer names to callables: an adapter
    (and an estimator holding it) pickles only if its callables do, which
    rules out lambdas and local functions.

    Parameters
    ----------
    model : torch.nn.Module
        The classifier.
    features, head : str or callable
        The feature part and the classifier part.
    """

    def __init__(self, model: nn.Module, features: Part, head: Part):
        super().__init__(model)
        # Named parts are looked up on each call rather than registered a second time, so the
        # adapter's state_dict stays the model's.
        self._features = self._resolve(features, "features")
        self._head = self._resolve(head, "head")
        linears = [m for m in _modules_of(self._part(self._head)) if isinstance(m, nn.Linear)]
        self.num_features = linears[0].in_features if linears else None
        self.num_classes = linears[-1].out_features if linears else None

    def _part(self, part: Part) -> Callable[[Any], torch.Tensor]:
        return self.model.get_submodule(part) if isinstance(part, str) else part

    def _resolve(self, part: Part, role: str) -> Part:
        if isinstance(part, str):
            try:
                self.model.get_submodule(part)
            except AttributeError:
                names = [name for name, _ in self.model.named_children()]
                raise ValueError(
                    f"{role}={part!r} is not a submodule of {type(self.model).__name__}; "
                    f"its children are {names}"
                ) from None
            return part
        if not callable(part):
            raise ValueError(f"{role} must be a submodule name or a callable; got {part!r}")
        return part

    def encode(self, x: Any) -> torch.Tensor:
        features = self._part(self._features)(x)
        if not isinstance(features, torch.Tensor):
            # Models that return (features, auxiliary) would otherwise fail inside pool.
            raise ValueError(
                f"features returned a {_describe_output(features)}; it must return one tensor "
                "of pre-logits features (batch, D): name a submodule that returns it, or pass "
                "a function that picks it (def features(x): return model.body(x)[0]; a named "
                "function, not a lambda, so that the adapter pickles)"
            )
        return features

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.ndim != 2:
            raise ValueError(
                f"features returned shape {tuple(tokens.shape)}; it must return pre-logits "
                "features (batch, D): include the pooling/flattening in `features`"
            )
        return tokens

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        return self._part(self._head)(pooled)

    def _cache_config(self) -> Any:
        return (_describe(self._features), _describe(self._head))


def _describe_output(value: Any) -> str:
    """``tuple of 2 elements``, ``dict with keys ['a', 'b']``, ``str``: what a part returned."""
    kind = type(value).__name__
    if isinstance(value, Mapping):
        return f"{kind} with keys {sorted(map(str, value))}"
    if isinstance(value, list | tuple):
        return f"{kind} of {len(value)} elements"
    return kind


def _modules_of(part: Any) -> list[nn.Module]:
    return list(part.modules()) if isinstance(part, nn.Module) else []
