"""Turn the input forms the estimators accept into torch datasets and loaders.

Every estimator that runs a network accepts the same three forms of raw
input: arrays (numpy or torch, with ``y`` beside them), a torch ``Dataset``
yielding ``(x, y)`` pairs, or a ``DataLoader`` yielding ``(x, y)`` batches.
This module is the one place that validates them and turns each into a
``Dataset`` of ``(x, y)`` pairs, so that the training loop and the backbone
feature extraction see a single form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, TensorDataset
from torch.utils.data._utils.collate import default_collate

__all__ = ["MISSING_LABEL", "as_dataset", "collate_fn_of", "dataset_labels", "make_loader"]

#: Label yielded by :func:`as_dataset` for arrays given without ``y``: every
#: dataset item stays an ``(x, y)`` pair, so consumers never guess whether the
#: second element of a pair is a label or a second input.
MISSING_LABEL = -1


class _ArrayDataset(Dataset):
    """``(x, y)`` pairs over in-memory tensors (or a dict of tensors)."""

    def __init__(self, inputs: torch.Tensor | dict[str, torch.Tensor], y: np.ndarray | None):
        self.inputs = inputs
        self.y = y
        first = next(iter(inputs.values())) if isinstance(inputs, dict) else inputs
        self._length = len(first)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        if isinstance(self.inputs, dict):
            x = {key: value[index] for key, value in self.inputs.items()}
        else:
            x = self.inputs[index]
        label = MISSING_LABEL if self.y is None else self.y[index]
        return x, label


class _CollatedDataset(Dataset):
    """A dataset that remembers the ``collate_fn`` of the loader it came from."""

    def __init__(self, dataset: Dataset, collate_fn):
        self.dataset = dataset
        self.collate_fn = collate_fn

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset[index]


def _to_tensor(values: Any, name: str) -> torch.Tensor:
    """Numeric array-like -> tensor; floats become float32, integers int64."""
    if isinstance(values, torch.Tensor):
        tensor = values.detach()
    else:
        array = np.asarray(values)
        if array.dtype == object or array.dtype.kind in "USV":
            raise ValueError(
                f"{name} must be a numeric array (images or token ids); got dtype {array.dtype}"
            )
        if array.ndim == 0:
            raise ValueError(f"{name} must be an array with one row per sample; got a scalar")
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    if tensor.dtype == torch.bool:
        return tensor.long()
    # Networks hold float32 weights: float64 images would fail inside the first layer.
    if tensor.is_floating_point():
        return tensor.to(torch.get_default_dtype())
    return tensor.long()


def _check_labels(y: Any, n_samples: int) -> np.ndarray:
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D (one label per sample); got shape {y.shape}")
    if len(y) != n_samples:
        raise ValueError(f"X has {n_samples} samples but y has {len(y)}: lengths must match")
    return y


def _dataset_length(dataset: Dataset) -> int | None:
    try:
        return len(dataset)  # type: ignore[arg-type]
    except TypeError:
        return None


def as_dataset(
    X: Any, y: Any = None, *, require_y: bool = False
) -> tuple[Dataset, np.ndarray | None]:
    """Validate raw inputs and return a torch ``Dataset`` of ``(x, y)`` pairs.

    Parameters
    ----------
    X : array-like, torch.Tensor, dict of arrays, Dataset or DataLoader
        - numpy array or tensor of images ``(n, C, H, W)`` or token ids
          ``(n, L)``: floating values become float32, integers int64;
        - a dict of equal-length arrays, e.g. ``{"input_ids": ..., "attention_mask": ...}``
          for text models: each item's ``x`` is then a dict;
        - a ``Dataset`` yielding ``(x, y)`` pairs (``y`` must then be None);
        - a ``DataLoader`` yielding ``(x, y)`` batches (``y`` must then be None);
          its dataset is returned, carrying the loader's ``collate_fn`` so that
          :func:`make_loader` batches it the same way.
    y : array-like of shape (n,), optional
        Labels for array inputs. Without them every item's label is
        :data:`MISSING_LABEL` (-1).
    require_y : bool, default=False
        Raise when array inputs come without labels (``fit`` needs them).

    Returns
    -------
    dataset : torch.utils.data.Dataset
        Yields ``(x, y)`` pairs.
    y : ndarray of shape (n,) or None
        The validated labels of array inputs, as given (strings stay strings);
        None for a ``Dataset`` or ``DataLoader``, whose labels live in its items
        (see :func:`dataset_labels`).

    Raises
    ------
    ValueError
        Empty data, ``len(X) != len(y)``, ``y`` given beside a Dataset or
        DataLoader, missing ``y`` with ``require_y=True``, non-numeric arrays.

    Examples
    --------
    >>> import numpy as np
    >>> dataset, y = as_dataset(np.zeros((4, 3, 8, 8)), [0, 1, 1, 0])
    >>> x, label = dataset[1]
    >>> x.dtype, x.shape, int(label), len(dataset)
    (torch.float32, torch.Size([3, 8, 8]), 1, 4)
    """
    if isinstance(X, DataLoader):
        if y is not None:
            raise ValueError(
                "y must be None when X is a DataLoader: the loader yields (x, y) batches"
            )
        dataset = X.dataset
        if _dataset_length(dataset) == 0:
            raise ValueError("the DataLoader's dataset is empty")
        if X.collate_fn is not default_collate:
            dataset = _CollatedDataset(dataset, X.collate_fn)
        return dataset, None
    if isinstance(X, Dataset):
        if y is not None:
            raise ValueError("y must be None when X is a Dataset: it yields (x, y) pairs")
        if _dataset_length(X) == 0:
            raise ValueError("the Dataset X is empty")
        return X, None
    if X is None:
        raise ValueError("X is None: pass an array, a Dataset or a DataLoader")
    if isinstance(X, Mapping):
        if not X:
            raise ValueError("X is an empty dict: pass at least one input array")
        inputs = {str(key): _to_tensor(value, f"X[{key!r}]") for key, value in X.items()}
        lengths = {key: len(value) if value.ndim else 0 for key, value in inputs.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"the arrays in X must have the same length; got {lengths}")
        n_samples = next(iter(lengths.values()))
    else:
        inputs = _to_tensor(X, "X")
        if inputs.ndim == 0:
            raise ValueError("X must be an array with one row per sample; got a scalar")
        n_samples = len(inputs)
    if n_samples == 0:
        raise ValueError("X is empty: at least one sample is needed")
    if y is None:
        if require_y:
            raise ValueError("y is required when X is an array (or pass a Dataset/DataLoader)")
        return _ArrayDataset(inputs, None), None
    y = _check_labels(y, n_samples)
    return _ArrayDataset(inputs, y), y


def collate_fn_of(dataset: Dataset):
    """The ``collate_fn`` a dataset from :func:`as_dataset` must be batched with, or None.

    Non-None only for the dataset of a DataLoader with a custom ``collate_fn``
    (for example one that pads token sequences), also behind
    ``torch.utils.data.Subset`` wrappers (a validation split). Whoever builds
    a ``DataLoader`` over such a dataset passes this as its ``collate_fn``
    (None means PyTorch's default).

    Examples
    --------
    >>> import numpy as np
    >>> dataset, _ = as_dataset(np.zeros((3, 2)), [0, 1, 0])
    >>> collate_fn_of(dataset) is None
    True
    """
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return dataset.collate_fn if isinstance(dataset, _CollatedDataset) else None


def make_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    shuffle: bool = False,
    num_workers: int = 0,
    drop_last: bool = False,
    sampler=None,
    generator: torch.Generator | None = None,
    pin_memory: bool = False,
) -> DataLoader:
    """Return a ``DataLoader`` over a dataset from :func:`as_dataset`.

    The ``collate_fn`` of a DataLoader given to :func:`as_dataset` is reused.

    Parameters
    ----------
    dataset : torch.utils.data.Dataset
        Yields ``(x, y)`` pairs.
    batch_size : int
        Samples per batch (> 0).
    shuffle : bool, default=False
        Reshuffle every epoch (ignored when ``sampler`` is given).
    num_workers, drop_last, sampler, generator, pin_memory
        Passed to ``torch.utils.data.DataLoader``.

    Returns
    -------
    torch.utils.data.DataLoader

    Examples
    --------
    >>> import numpy as np
    >>> dataset, _ = as_dataset(np.zeros((5, 2)), np.arange(5))
    >>> [len(x) for x, y in make_loader(dataset, batch_size=2)]
    [2, 2, 1]
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size}")
    collate_fn = collate_fn_of(dataset)
    if isinstance(dataset, IterableDataset) or sampler is not None:
        shuffle = False
    return DataLoader(
        dataset,
        batch_size=int(batch_size),
        shuffle=shuffle,
        num_workers=num_workers,
        drop_last=drop_last,
        sampler=sampler,
        generator=generator,
        pin_memory=pin_memory,
        collate_fn=collate_fn,
    )


def _labels_to_numpy(parts: list[Any]) -> np.ndarray:
    if all(isinstance(part, torch.Tensor) for part in parts):
        return torch.cat([part.reshape(-1).cpu() for part in parts]).numpy()
    values: list[Any] = []
    for part in parts:
        values.extend(part.tolist() if hasattr(part, "tolist") else list(part))
    return np.asarray(values)


def dataset_labels(data: Dataset | DataLoader, *, batch_size: int = 256) -> np.ndarray:
    """Return the labels of a dataset (or loader) of ``(x, y)`` pairs, in order.

    Arrays wrapped by :func:`as_dataset`, a ``TensorDataset`` ``(X, y)`` and
    datasets with a ``targets`` attribute (torchvision) answer without loading
    any input; other datasets are iterated once (their inputs are loaded and
    discarded). A DataLoader is iterated as it is (its sampler order).

    Parameters
    ----------
    data : Dataset or DataLoader
        Yields ``(x, y)`` pairs (or batches).
    batch_size : int, default=256
        Batch size used when a Dataset must be iterated.

    Returns
    -------
    ndarray of shape (n,)

    Examples
    --------
    >>> import numpy as np
    >>> dataset, _ = as_dataset(np.zeros((3, 2)), np.array([2, 0, 1]))
    >>> dataset_labels(dataset)
    array([2, 0, 1])
    """
    if collate_fn_of(data) is not None:
        data = make_loader(data, batch_size)
    if isinstance(data, _ArrayDataset):
        if data.y is None:
            raise ValueError("this dataset was built from arrays without labels")
        return np.asarray(data.y)
    if isinstance(data, TensorDataset) and len(data.tensors) == 2:
        return data.tensors[1].detach().cpu().numpy()
    if isinstance(data, Dataset) and not isinstance(data, IterableDataset):
        targets = getattr(data, "targets", None)
        if targets is not None and len(targets) == _dataset_length(data):
            return _labels_to_numpy([torch.as_tensor(np.asarray(targets))])
    loader = data if isinstance(data, DataLoader) else make_loader(data, batch_size)
    parts = []
    for batch in loader:
        if not isinstance(batch, list | tuple) or len(batch) != 2:
            raise ValueError("the data must yield (x, y) pairs to read labels from it")
        parts.append(batch[1])
    if not parts:
        raise ValueError("the data is empty: no labels to read")
    return _labels_to_numpy(parts)
