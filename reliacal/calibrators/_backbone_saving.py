"""How an estimator with a ``backbone`` parameter saves it: a record, and the object given to load.

A backbone is the user's model: a saved file names its class and
configuration (or its timm name) instead of holding its weights, and
:func:`reliacal.load` takes the model itself (``backbone=``). A fitted
adapter (``backbone_``, what a calibrator read its inputs through) is
recorded by the SHA-256 of its weights, so that loading with other weights
is refused: the calibration holds only for the model it was fitted on.
Torch is imported only when a backbone object is present.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from reliacal.persistence import SaveMixin

__all__ = ["BackboneSaveMixin"]


def _class_path(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _user_model(backbone: Any) -> Any:
    from reliacal.backbones import BackboneAdapter

    return backbone.model if isinstance(backbone, BackboneAdapter) else backbone


def _model_record(backbone: Any) -> dict:
    """The class of the user's model, and its configuration when it has one (for the record)."""
    model = _user_model(backbone)
    record = {"class": _class_path(model)}
    config = getattr(model, "config", None)
    if hasattr(config, "to_dict"):
        # Values JSON cannot hold (dtypes) are written as their text.
        record["config"] = json.loads(json.dumps(config.to_dict(), default=str))
    return record


def _weights_fingerprint(module: Any) -> str:
    """SHA-256 of a module's state: names, dtypes, shapes and bytes of every tensor."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _record(record: Any, keys: set[str], what: str) -> dict:
    if not isinstance(record, dict) or not set(record) <= keys or not record:
        raise ValueError(f"the manifest holds a malformed record of the {what}")
    return record


class BackboneSaveMixin(SaveMixin):
    """:class:`~reliacal.persistence.SaveMixin` for estimators that take a ``backbone``.

    The ``backbone`` parameter is saved as a reference: a timm model name as
    itself, a model object as its class and configuration; on load the
    backbone given to :func:`reliacal.load` replaces either (a name alone
    loads as the name). The fitted adapter ``backbone_`` is saved as the
    SHA-256 of its weights and rebuilt on load around the given backbone,
    whose weights must match.

    Examples
    --------
    >>> from reliacal.calibrators import TemperatureScaling
    >>> TemperatureScaling()._saved_reference("backbone", "vit_tiny_patch16_224")
    {'name': 'vit_tiny_patch16_224'}
    """

    def _saved_reference(self, name: str, value: Any) -> dict | None:
        if name == "backbone" and value is not None:
            return {"name": value} if isinstance(value, str) else {"model": _model_record(value)}
        if name == "backbone_":
            return {"fingerprint": _weights_fingerprint(value)}
        return super()._saved_reference(name, value)

    def _loaded_reference(self, name: str, record: Any, given: Any) -> Any:
        if name == "backbone":
            return self._loaded_backbone(_record(record, {"name", "model"}, "backbone"), given)
        if name == "backbone_":
            return self._loaded_adapter(_record(record, {"fingerprint"}, "fitted adapter"))
        return super()._loaded_reference(name, record, given)

    def _loaded_backbone(self, record: dict, given: Any) -> Any:
        model = given.get("backbone")
        if "name" in record:
            # A model name: the given backbone, if any, replaces it.
            if not isinstance(record["name"], str):
                raise ValueError("the manifest holds a backbone name that is not a string")
            return record["name"] if model is None else model
        saved = _record(record["model"], {"class", "config"}, "backbone")
        expected = saved.get("class")
        if model is None:
            raise ValueError(
                f"this model was saved with a backbone object ({expected}): pass it, or a "
                "function that builds it, as reliacal.load(path, backbone=...)"
            )
        actual = _class_path(_user_model(model))
        if actual != expected:
            raise ValueError(
                f"the backbone given is a {actual}, but the model was saved with a "
                f"{expected}: pass the same architecture"
            )
        return model

    def _loaded_adapter(self, record: dict) -> Any:
        from reliacal.backbones import as_backbone

        adapter = as_backbone(self.backbone)
        if _weights_fingerprint(adapter) != record.get("fingerprint"):
            raise ValueError(
                "the backbone given does not match the one the calibrator was fitted with "
                "(its weights differ); the calibration holds only for the same model"
            )
        return adapter
