"""Estimators to JSON plus named arrays, and back, without pickle (unless trusted).

Values become JSON; arrays and tensors go to a flat ``{key: ndarray}`` store
and JSON refers to them by key. Tagged JSON objects mark what plain JSON
cannot say; every Python dict is written as ``{"$dict": {...}}`` so that a
tag can never be confused with data:

- ``{"$array": key}``, ``{"$tensor": key}``, ``{"$float": "nan"}``,
  ``{"$tuple": [...]}``, ``{"$dict": {...}}``, ``{"$object_array": [...],
  "shape": [...]}``, ``{"$dataframe": [...]}``: data;
- ``{"$estimator": "reliacal.X", "params": {...}, "state": {...}}`` and
  ``{"$namedtuple": "reliacal.X", "fields": {...}}``: only classes that are
  loadable (see :func:`reliacal.persistence.loadable`) are built;
- ``{"$network": name, "config": ..., "state": {...}}``: a torch network,
  rebuilt by its owner estimator's ``_rebuild_network`` before its state
  dict is loaded;
- ``{"$reference": record}``: a parameter or attribute that the caller of
  ``load`` supplies (the owner's ``_loaded_reference`` restores it);
- ``{"$joblib": key, "class": ...}``: a scikit-learn estimator pickled with
  joblib (its bytes are an array), read only when ``load(...,
  trusted=True)``;
- ``{"$frozen": estimator}``: scikit-learn's ``FrozenEstimator`` around a
  reliacal estimator (its way to say "prefit"), rebuilt around the decoded
  estimator; a frozen scikit-learn estimator is pickled as above.

The codec knows no estimator: each describes itself through the hooks of
:class:`reliacal.persistence.SaveMixin`.
"""

from __future__ import annotations

import importlib
import io
import math
import numbers
import re
from typing import Any

import numpy as np

from reliacal._validation import is_torch_module, is_torch_tensor
from reliacal.persistence._networks import decode_network, encode_network
from reliacal.persistence._registry import class_path, loadable_class

__all__ = ["Decoder", "Encoder", "Given"]

_FLOAT_NAMES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# A fitted attribute, by scikit-learn's convention: a name that ends in one underscore.
_FITTED_ATTRIBUTE = re.compile(r"[A-Za-z](?:[A-Za-z0-9_]*[A-Za-z0-9])?_")
_DOTTED_NAME = re.compile(r"reliacal(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _expect(data: dict, keys: set[str], what: str) -> None:
    """Refuse a tagged object whose keys are not exactly ``keys``."""
    if set(data) != keys:
        raise ValueError(
            f"the manifest holds a malformed {what}: keys {sorted(data)}, expected {sorted(keys)}"
        )


def _as_object(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"the manifest's {what} must be a JSON object, got {_short(value)}")
    return value


def _is_reference(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"$reference"}


def _refuse_class(path: Any) -> ValueError:
    return ValueError(
        f"the saved model names {_short(path)}, which is not a class reliacal saves (its "
        "estimators and the named tuples they hold) or not one this reliacal has"
    )


def _loadable(path: Any, *, estimator: bool) -> type:
    """The loadable class ``path`` names, importing its reliacal module if needed."""
    cls = loadable_class(path, estimator=estimator) if isinstance(path, str) else None
    if cls is None and isinstance(path, str) and _DOTTED_NAME.fullmatch(path):
        module_name = path.rpartition(".")[0]
        # Never a program's entry point: importing one runs it.
        if "__main__" not in module_name.split("."):
            try:
                importlib.import_module(module_name)
            except ImportError:
                pass
            cls = loadable_class(path, estimator=estimator)
    if cls is None:
        raise _refuse_class(path)
    return cls


class Given:
    """The objects passed to ``load`` by name; a factory is called once, when first needed.

    Examples
    --------
    >>> given = Given(backbone=lambda: "built")
    >>> given.get("backbone"), given.get("other")
    ('built', None)
    """

    def __init__(self, **objects: Any) -> None:
        self._objects = objects

    def get(self, name: str) -> Any:
        value = self._objects.get(name)
        if callable(value) and not is_torch_module(value):
            value = self._objects[name] = value()
        return value


def _is_frozen(estimator: Any) -> bool:
    """Whether ``estimator`` is scikit-learn's ``FrozenEstimator`` itself (not a subclass)."""
    cls = type(estimator)
    return cls.__module__.startswith("sklearn.frozen") and cls.__qualname__ == "FrozenEstimator"


def _is_frozen_reliacal(frozen: Any) -> bool:
    inner = type(frozen.estimator)
    return loadable_class(class_path(inner), estimator=True) is inner


class Encoder:
    """Turns values into JSON, collecting arrays into ``arrays``."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        # id -> (key, object) of each estimator pickled, so that one object shared by two
        # places is written once and loads as one object.
        self._pickled: dict[int, tuple[str, Any]] = {}

    def _store(self, array: np.ndarray) -> str:
        key = f"a{len(self.arrays)}"
        self.arrays[key] = np.ascontiguousarray(array)
        return key

    def estimator(self, estimator: Any, where: str) -> dict:
        cls = type(estimator)
        if _is_frozen(estimator) and _is_frozen_reliacal(estimator):
            # scikit-learn's way to say "prefit": a wrapper without state of its own, so a
            # frozen reliacal estimator is stored as data like the estimator itself.
            return {"$frozen": self.estimator(estimator.estimator, f"{where}.estimator")}
        if loadable_class(class_path(cls), estimator=True) is not cls:
            return self._pickled_estimator(estimator, where)
        params = estimator.get_params(deep=False)
        local = set(estimator._machine_local_parameters)
        encoded_params = {
            name: self._member(estimator, name, value, f"{where}.{name}")
            for name, value in params.items()
            # A cache or checkpoint folder belongs to this machine, not to the model.
            if name not in local
        }
        state = {}
        for name, value in vars(estimator).items():
            if name in params:
                continue
            if not _FITTED_ATTRIBUTE.fullmatch(name):
                raise ValueError(
                    f"{where}.{name} cannot be saved: only parameters and fitted attributes "
                    "(names ending in one underscore) are"
                )
            state[name] = self._member(estimator, name, value, f"{where}.{name}")
        return {"$estimator": class_path(cls), "params": encoded_params, "state": state}

    def _member(self, owner: Any, name: str, value: Any, where: str) -> Any:
        record = owner._saved_reference(name, value)
        if record is not None:
            return {"$reference": self.value(record, where)}
        return self.value(value, where, owner)

    def _pickled_estimator(self, estimator: Any, where: str) -> dict:
        entry = self._pickled.get(id(estimator))
        if entry is None:
            import joblib

            buffer = io.BytesIO()
            joblib.dump(estimator, buffer)
            key = self._store(np.frombuffer(buffer.getvalue(), dtype=np.uint8))
            entry = self._pickled[id(estimator)] = (key, estimator)
        return {"$joblib": entry[0], "class": class_path(type(estimator))}

    def tensor(self, tensor: Any) -> dict:
        import torch

        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds it exactly
            return {"$tensor": self._store(tensor.float().numpy()), "dtype": "bfloat16"}
        return {"$tensor": self._store(tensor.numpy())}

    def value(self, value: Any, where: str, owner: Any = None) -> Any:
        """JSON for ``value``; ``owner`` is the estimator that holds it (for its networks)."""
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
            return [self.value(item, f"{where}[{i}]", owner) for i, item in enumerate(value)]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return self._named_tuple(value, where, owner)
        if isinstance(value, tuple):
            return {
                "$tuple": [self.value(item, f"{where}[{i}]", owner) for i, item in enumerate(value)]
            }
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                raise ValueError(f"{where} is a dict with non-string keys, which cannot be saved")
            return {
                "$dict": {
                    key: self.value(item, f"{where}[{key!r}]", owner) for key, item in value.items()
                }
            }
        if type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas"):
            return self._data_frame(value, where)
        if is_torch_module(value):
            return encode_network(self, value, where, owner)
        # A plain tensor only: a Parameter or another subclass would load back as a Tensor.
        if is_torch_tensor(value) and type(value).__name__ == "Tensor":
            return self.tensor(value)
        if hasattr(value, "get_params"):
            return self.estimator(value, where)
        raise ValueError(
            f"{where} is a {type(value).__name__}, which reliacal cannot save"
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

    def _named_tuple(self, value: tuple, where: str, owner: Any) -> dict:
        cls = type(value)
        if loadable_class(class_path(cls), estimator=False) is not cls:
            raise ValueError(f"{where} is a {cls.__name__}, which cannot be saved without pickle")
        fields = {
            name: self.value(item, f"{where}.{name}", owner)
            for name, item in zip(value._fields, value)
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

    ``given`` holds the objects passed to ``load`` (a backbone); ``trusted``
    allows the estimators pickled with joblib.
    """

    def __init__(
        self, arrays: dict[str, np.ndarray], *, given: Given | None = None, trusted: bool = False
    ) -> None:
        self.arrays = arrays
        self.given = given if given is not None else Given()
        self.trusted = trusted
        self.used: set[str] = set()
        self._unpickled: dict[str, Any] = {}

    def array(self, key: Any) -> np.ndarray:
        if not isinstance(key, str) or key not in self.arrays:
            raise ValueError(f"the manifest refers to an array {_short(key)} that arrays.npz lacks")
        self.used.add(key)
        return self.arrays[key]

    def check_all_used(self) -> None:
        """Refuse arrays that nothing in the manifest refers to."""
        unused = sorted(set(self.arrays) - self.used)
        if unused:
            raise ValueError(
                f"arrays.npz holds arrays that the manifest never uses ({', '.join(unused[:5])}); "
                "refusing to load it"
            )

    def estimator(self, data: Any) -> Any:
        data = _as_object(data, "estimator")
        _expect(data, {"$estimator", "params", "state"}, "estimator")
        cls = _loadable(data["$estimator"], estimator=True)
        name = cls.__name__
        params_data = _as_object(data["params"], f"{name} params")
        state_data = _as_object(data["state"], f"{name} state")
        parameters = set(cls._get_param_names())
        plain, references = {}, {}
        for parameter, value in params_data.items():
            if parameter in cls._machine_local_parameters:
                raise ValueError(
                    f"the saved {name} sets {parameter}, a parameter that names a resource of "
                    "the machine that saved it; load never restores such parameters (they are "
                    "not written by save, and one set by hand could make the model read files "
                    "you did not choose)"
                )
            if parameter not in parameters:
                raise ValueError(
                    f"the saved {name} sets {_short(parameter)}, which is not one of its parameters"
                )
            if _is_reference(value):
                references[parameter] = value["$reference"]
            else:
                plain[parameter] = self.value(value)
        # Referenced parameters (a backbone) are restored before __init__, which may require
        # them, by the hook of the instance about to be initialised.
        estimator = cls.__new__(cls)
        for parameter, record in references.items():
            plain[parameter] = estimator._loaded_reference(
                parameter, self.value(record), self.given
            )
        estimator.__init__(**plain)
        for attribute, value in state_data.items():
            if (
                not _FITTED_ATTRIBUTE.fullmatch(attribute)
                or attribute in parameters
                or hasattr(cls, attribute)
            ):
                raise ValueError(
                    f"the saved {name} sets the attribute {_short(attribute)}, which is not a "
                    "fitted attribute (a name of its own ending in one underscore)"
                )
            if _is_reference(value):
                value = estimator._loaded_reference(
                    attribute, self.value(value["$reference"]), self.given
                )
            else:
                value = self.value(value, owner=estimator)
            setattr(estimator, attribute, value)
        estimator._check_loaded_state()
        return estimator

    def tensor(self, data: Any) -> Any:
        import torch

        data = _as_object(data, "tensor")
        plain = set(data) == {"$tensor"}
        if not (plain or (set(data) == {"$tensor", "dtype"} and data["dtype"] == "bfloat16")):
            raise ValueError(f"the manifest holds a malformed tensor {_short(data)}")
        tensor = torch.from_numpy(np.array(self.array(data["$tensor"])))
        return tensor.to(torch.bfloat16) if "dtype" in data else tensor

    def value(self, data: Any, owner: Any = None) -> Any:
        if data is None or isinstance(data, bool | int | float | str):
            return data
        if isinstance(data, list):
            return [self.value(item, owner) for item in data]
        if not isinstance(data, dict) or len(data) == 0:
            raise ValueError(f"the manifest holds an unknown value {_short(data)}")
        tag = next((key for key in data if key.startswith("$")), None)
        handler = _TAGS.get(tag)
        if handler is None:
            raise ValueError(f"the manifest holds an unknown tag {_short(sorted(data)[0])}")
        return handler(self, data, owner)

    # One reader per tag --------------------------------------------------------------------

    def _float(self, data: dict, owner: Any) -> float:
        _expect(data, {"$float"}, "float")
        if data["$float"] not in _FLOAT_NAMES:
            raise ValueError(f"the manifest holds an unknown float {_short(data['$float'])}")
        return _FLOAT_NAMES[data["$float"]]

    def _array(self, data: dict, owner: Any) -> np.ndarray:
        _expect(data, {"$array"}, "array")
        return self.array(data["$array"])

    def _object_array(self, data: dict, owner: Any) -> np.ndarray:
        _expect(data, {"$object_array", "shape"}, "object array")
        items, shape = data["$object_array"], data["shape"]
        if not isinstance(items, list) or not (
            isinstance(shape, list)
            and all(type(size) is int and size >= 0 for size in shape)
            and math.prod(shape) == len(items)
        ):
            raise ValueError("the manifest holds an object array whose shape is not its length")
        values = [self.value(item) for item in items]
        if not all(item is None or isinstance(item, bool | int | float | str) for item in values):
            raise ValueError("the manifest holds an object array of values that are not scalars")
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(shape)

    def _tuple(self, data: dict, owner: Any) -> tuple:
        _expect(data, {"$tuple"}, "tuple")
        if not isinstance(data["$tuple"], list):
            raise ValueError("the manifest holds a tuple that is not a list")
        return tuple(self.value(item, owner) for item in data["$tuple"])

    def _dict(self, data: dict, owner: Any) -> dict:
        _expect(data, {"$dict"}, "dict")
        items = _as_object(data["$dict"], "dict")
        return {key: self.value(item, owner) for key, item in items.items()}

    def _named_tuple(self, data: dict, owner: Any) -> tuple:
        _expect(data, {"$namedtuple", "fields"}, "named tuple")
        cls = _loadable(data["$namedtuple"], estimator=False)
        fields = _as_object(data["fields"], "named tuple fields")
        if set(fields) != set(cls._fields):
            raise ValueError(
                f"the saved {cls.__name__} has the fields {sorted(fields)}, not {sorted(cls._fields)}"
            )
        return cls(**{key: self.value(item, owner) for key, item in fields.items()})

    def _data_frame(self, data: dict, owner: Any) -> Any:
        import pandas as pd

        _expect(data, {"$dataframe"}, "data frame")
        columns = data["$dataframe"]
        if not isinstance(columns, list) or not all(
            isinstance(column, dict)
            and set(column) == {"name", "dtype", "values"}
            and isinstance(column["dtype"], str)
            for column in columns
        ):
            raise ValueError("the manifest holds a malformed data frame")
        frame = pd.DataFrame(
            {self.value(column["name"]): self.value(column["values"]) for column in columns}
        )
        for column in columns:
            name = self.value(column["name"])
            if str(frame[name].dtype) != column["dtype"]:
                frame[name] = frame[name].astype(column["dtype"])
        return frame

    def _estimator(self, data: dict, owner: Any) -> Any:
        return self.estimator(data)

    def _tensor(self, data: dict, owner: Any) -> Any:
        return self.tensor(data)

    def _frozen(self, data: dict, owner: Any) -> Any:
        from sklearn.frozen import FrozenEstimator

        _expect(data, {"$frozen"}, "frozen estimator")
        return FrozenEstimator(self.estimator(data["$frozen"]))

    def _network(self, data: dict, owner: Any) -> Any:
        _expect(data, {"$network", "config", "state"}, "network")
        if owner is None:
            raise ValueError("the manifest holds a network outside an estimator")
        return decode_network(self, data, owner)

    def _joblib(self, data: dict, owner: Any) -> Any:
        _expect(data, {"$joblib", "class"}, "pickled estimator")
        if not self.trusted:
            raise ValueError(
                f"the saved model holds a {_short(data['class'])} stored with joblib (pickle), "
                "which can run any code when it is read; pass trusted=True to "
                "reliacal.load only if you trust the file as you would trust code from its "
                "source"
            )
        key = data["$joblib"]
        if key not in self._unpickled:
            import joblib

            self._unpickled[key] = joblib.load(io.BytesIO(self.array(key).tobytes()))
        return self._unpickled[key]

    def _reference(self, data: dict, owner: Any) -> Any:
        raise ValueError("the manifest holds a reference outside a parameter or an attribute")


_TAGS = {
    "$float": Decoder._float,
    "$array": Decoder._array,
    "$object_array": Decoder._object_array,
    "$tuple": Decoder._tuple,
    "$dict": Decoder._dict,
    "$namedtuple": Decoder._named_tuple,
    "$dataframe": Decoder._data_frame,
    "$estimator": Decoder._estimator,
    "$tensor": Decoder._tensor,
    "$network": Decoder._network,
    "$joblib": Decoder._joblib,
    "$frozen": Decoder._frozen,
    "$reference": Decoder._reference,
}
