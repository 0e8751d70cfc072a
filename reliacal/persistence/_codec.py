"""Estimators to JSON plus named arrays, and back, without pickle.

Values become JSON; arrays and tensors go to a flat ``{key: ndarray}`` store
and JSON refers to them by key. Tagged JSON objects (``{"$array": key}``,
``{"$tuple": [...]}``, ``{"$estimator": "reliacal.X", ...}``) mark what plain
JSON cannot say; every Python dict is written as ``{"$dict": {...}}`` so
that a tag can never be confused with data. Only classes defined in
reliacal are rebuilt on load (an estimator, a named tuple, one of the
networks of :mod:`._networks`), so a manifest cannot name code to run.
"""

from __future__ import annotations

import importlib
import math
import numbers
from typing import Any

import numpy as np

from reliacal._validation import is_torch_module, is_torch_tensor

__all__ = ["Decoder", "Encoder", "class_path", "resolve_class"]

_FLOAT_NAMES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def resolve_class(path: str, *, base: type | None = None) -> type:
    """The reliacal class at ``path`` (``"reliacal.module.Name"``); refuse any other."""
    if not isinstance(path, str) or not path.startswith("reliacal."):
        raise ValueError(f"the saved model names the class {path!r}, which is not reliacal's")
    module_name, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        raise ValueError(
            f"the saved model names the class {path!r}, which this reliacal does not have"
        ) from None
    if not isinstance(cls, type) or (base is not None and not issubclass(cls, base)):
        raise ValueError(f"the saved model names {path!r}, which is not a {base.__name__}")
    return cls


def _backbone_summary(backbone: Any) -> dict:
    """The class of the user's model (and its configuration when it has one, for the record)."""
    from reliacal.backbones import BackboneAdapter

    model = backbone.model if isinstance(backbone, BackboneAdapter) else backbone
    summary = {"class": class_path(type(model))}
    config = getattr(model, "config", None)
    if hasattr(config, "to_dict"):
        import json

        # Values JSON cannot hold (dtypes) are written as their text.
        summary["config"] = json.loads(json.dumps(config.to_dict(), default=str))
    return summary


class Encoder:
    """Turns values into JSON, collecting arrays into ``arrays``."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def _store(self, array: np.ndarray) -> str:
        key = f"a{len(self.arrays)}"
        self.arrays[key] = np.ascontiguousarray(array)
        return key

    def estimator(self, estimator: Any, where: str) -> dict:
        from sklearn.base import BaseEstimator

        cls = type(estimator)
        if not isinstance(estimator, BaseEstimator) or not cls.__module__.startswith("reliacal."):
            raise ValueError(
                f"{where} is a {cls.__name__}, which reliacal cannot save without pickle: only "
                "reliacal's own estimators are saved (a scikit-learn classifier inside "
                "CalibratedClassifier needs joblib, at your own risk)"
            )
        params = estimator.get_params(deep=False)
        encoded_params = {}
        for name, value in params.items():
            if name == "backbone":
                encoded_params[name] = self._backbone_parameter(value)
            elif name == "memory" and value is not None and not isinstance(value, str):
                # A cache, not part of the model: keep where it lives.
                encoded_params[name] = str(getattr(value, "location", value))
            else:
                encoded_params[name] = self.value(value, f"{where}.{name}")
        state = {}
        for name, value in vars(estimator).items():
            if name in params:
                continue
            if name == "backbone_":
                state[name] = {"$backbone_adapter": self.fingerprint(value)}
            else:
                state[name] = self.value(value, f"{where}.{name}")
        return {"$estimator": class_path(cls), "params": encoded_params, "state": state}

    def _backbone_parameter(self, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        return {"$backbone": _backbone_summary(value)}

    @staticmethod
    def fingerprint(module: Any) -> str:
        """SHA-256 of a module's state: names, dtypes, shapes and bytes of every tensor."""
        import hashlib

        import torch

        digest = hashlib.sha256()
        for name, tensor in sorted(module.state_dict().items()):
            tensor = tensor.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def tensor(self, tensor: Any) -> dict:
        import torch

        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds it exactly
            return {"$tensor": self._store(tensor.float().numpy()), "dtype": "bfloat16"}
        return {"$tensor": self._store(tensor.numpy())}

    def value(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            value = float(value)
            return value if math.isfinite(value) else {"$float": str(value)}
        if isinstance(value, np.ndarray):
            return self._ndarray(value, where)
        if isinstance(value, list):
            return [self.value(item, f"{where}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return self._named_tuple(value, where)
        if isinstance(value, tuple):
            return {"$tuple": [self.value(item, f"{where}[{i}]") for i, item in enumerate(value)]}
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                raise ValueError(f"{where} is a dict with non-string keys, which cannot be saved")
            return {
                "$dict": {key: self.value(item, f"{where}[{key!r}]") for key, item in value.items()}
            }
        if type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas"):
            return self._data_frame(value, where)
        if is_torch_module(value):
            from reliacal.persistence._networks import encode_network

            return encode_network(self, value, where)
        # A plain tensor only: a Parameter or another subclass would load back as a Tensor.
        if is_torch_tensor(value) and type(value).__name__ == "Tensor":
            return self.tensor(value)
        if hasattr(value, "get_params"):
            return self.estimator(value, where)
        raise ValueError(
            f"{where} is a {type(value).__name__}, which reliacal cannot save without pickle"
            + (
                "; pass an int random_state (or None) to save the estimator"
                if "random" in where.rsplit(".", 1)[-1]
                else ""
            )
        )

    def _ndarray(self, array: np.ndarray, where: str) -> dict:
        if not array.dtype.hasobject:
            return {"$array": self._store(array)}
        items = array.ravel().tolist()
        if not all(item is None or isinstance(item, bool | int | float | str) for item in items):
            raise ValueError(f"{where} holds Python objects that cannot be saved without pickle")
        return {
            "$object_array": [self.value(item, where) for item in items],
            "shape": list(array.shape),
        }

    def _named_tuple(self, value: tuple, where: str) -> dict:
        cls = type(value)
        if not cls.__module__.startswith("reliacal."):
            raise ValueError(f"{where} is a {cls.__name__}, which cannot be saved without pickle")
        fields = {
            name: self.value(item, f"{where}.{name}") for name, item in zip(value._fields, value)
        }
        return {"$namedtuple": class_path(cls), "fields": fields}

    def _data_frame(self, frame: Any, where: str) -> dict:
        columns = []
        for name in frame.columns:
            column = frame[name]
            dtype = str(column.dtype)
            if dtype in ("object", "string", "str"):
                values = self.value(column.astype(object).to_numpy(), f"{where}[{name!r}]")
            else:
                # Nullable integers hold NA: as float with NaN, restored by the dtype.
                values = {
                    "$array": self._store(column.to_numpy(dtype=float, na_value=np.nan))
                    if dtype[0].isupper()
                    else self._store(column.to_numpy())
                }
            columns.append({"name": self.value(name, where), "dtype": dtype, "values": values})
        return {"$dataframe": columns}


class Decoder:
    """Rebuilds the values that :class:`Encoder` wrote.

    ``backbone`` is the user's model for the estimators saved with a backbone
    object (``None`` when not given).
    """

    def __init__(self, arrays: dict[str, np.ndarray], backbone: Any = None) -> None:
        self.arrays = arrays
        self.backbone = backbone

    def array(self, key: Any) -> np.ndarray:
        if not isinstance(key, str) or key not in self.arrays:
            raise ValueError(f"the manifest refers to an array {key!r} that arrays.npz lacks")
        return self.arrays[key]

    def estimator(self, data: dict) -> Any:
        from sklearn.base import BaseEstimator

        cls = resolve_class(data["$estimator"], base=BaseEstimator)
        params = {}
        for name, value in data.get("params", {}).items():
            params[name] = self._backbone(value) if name == "backbone" else self.value(value)
        estimator = cls(**params)
        for name, value in data.get("state", {}).items():
            if isinstance(value, dict) and "$backbone_adapter" in value:
                setattr(estimator, name, self._adapter(estimator, value["$backbone_adapter"]))
            else:
                setattr(estimator, name, self.value(value, owner=estimator))
        return estimator

    def _backbone(self, value: Any) -> Any:
        if not (isinstance(value, dict) and "$backbone" in value):
            # A model name: the given backbone, if any, replaces it; None stays None.
            return value if value is None or self.backbone is None else self.model()
        if self.backbone is None:
            raise ValueError(
                f"this model was saved with a backbone object ({value['$backbone']['class']}): "
                "pass it, or a function that builds it, as reliacal.load(path, backbone=...)"
            )
        model = self.model()
        from reliacal.backbones import BackboneAdapter

        given = model.model if isinstance(model, BackboneAdapter) else model
        expected = value["$backbone"]["class"]
        if class_path(type(given)) != expected:
            raise ValueError(
                f"the backbone given is a {class_path(type(given))}, but the model was saved "
                f"with a {expected}: pass the same architecture"
            )
        return model

    def model(self) -> Any:
        """The backbone given to load: the object, or what the factory returns."""
        if callable(self.backbone) and not is_torch_module(self.backbone):
            self.backbone = self.backbone()
        return self.backbone

    def _adapter(self, estimator: Any, fingerprint: str) -> Any:
        from reliacal.backbones import as_backbone

        adapter = as_backbone(estimator.backbone)
        if Encoder.fingerprint(adapter) != fingerprint:
            raise ValueError(
                "the backbone given does not match the one the calibrator was fitted with "
                "(its weights differ); the calibration holds only for the same model"
            )
        return adapter

    def tensor(self, data: dict) -> Any:
        import torch

        tensor = torch.from_numpy(np.array(self.array(data["$tensor"])))
        return tensor.to(torch.bfloat16) if data.get("dtype") == "bfloat16" else tensor

    def value(self, data: Any, owner: Any = None) -> Any:
        if data is None or isinstance(data, bool | int | float | str):
            return data
        if isinstance(data, list):
            return [self.value(item, owner) for item in data]
        if not isinstance(data, dict) or len(data) == 0:
            raise ValueError(f"the manifest holds an unknown value {data!r}")
        if "$float" in data:
            return _FLOAT_NAMES[data["$float"]]
        if "$array" in data:
            return self.array(data["$array"])
        if "$object_array" in data:
            items = [self.value(item) for item in data["$object_array"]]
            array = np.empty(len(items), dtype=object)
            array[:] = items
            return array.reshape(data["shape"])
        if "$tuple" in data:
            return tuple(self.value(item, owner) for item in data["$tuple"])
        if "$dict" in data:
            return {key: self.value(item, owner) for key, item in data["$dict"].items()}
        if "$namedtuple" in data:
            cls = resolve_class(data["$namedtuple"], base=tuple)
            return cls(**{key: self.value(item, owner) for key, item in data["fields"].items()})
        if "$dataframe" in data:
            return self._data_frame(data["$dataframe"])
        if "$estimator" in data:
            return self.estimator(data)
        if "$tensor" in data:
            return self.tensor(data)
        if "$network" in data:
            from reliacal.persistence._networks import decode_network

            return decode_network(self, data, owner)
        raise ValueError(f"the manifest holds an unknown tag {sorted(data)[0]!r}")

    def _data_frame(self, columns: list) -> Any:
        import pandas as pd

        frame = pd.DataFrame(
            {self.value(column["name"]): self.value(column["values"]) for column in columns}
        )
        for column in columns:
            name = self.value(column["name"])
            if str(frame[name].dtype) != column["dtype"]:
                frame[name] = frame[name].astype(column["dtype"])
        return frame
