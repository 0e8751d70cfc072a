"""Turn the input forms the estimators accept into torch datasets and loaders.

Every estimator that runs a network accepts the same three forms of raw
input: arrays (numpy or torch, with ``y`` beside them), a torch ``Dataset``
or a ``DataLoader``. A Dataset's items (a DataLoader's batches) are
``(x, y)`` pairs, or Hugging Face style mappings that hold the inputs and
the labels under one key (``{"input_ids", "attention_mask", "labels"}``,
``{"pixel_values", "labels"}``). This module is the one place that validates
them and turns each into batches of ``(inputs, labels)`` pairs
(:func:`split_batch`), so that the training loop and the backbone feature
extraction see a single form.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import joblib.hashing
import numpy as np
import torch
from torch import nn
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
)
from torch.utils.data._utils.collate import default_collate

from reliacal._validation import DEFAULT_LABEL_KEY, warn_at_caller

__all__ = [
    "ACCEPTED_FORMS",
    "DEFAULT_LABEL_KEY",
    "MISSING_LABEL",
    "as_dataset",
    "check_column_indices",
    "check_every_row_once",
    "check_label_key",
    "check_ordered",
    "check_training_loader",
    "collate_fn_of",
    "dataset_labels",
    "fingerprint",
    "make_loader",
    "prediction_batches",
    "split_batch",
]

#: Label yielded by :func:`as_dataset` for arrays given without ``y``: every
#: dataset item stays an ``(x, y)`` pair, so consumers never guess whether the
#: second element of a pair is a label or a second input.
MISSING_LABEL = -1

#: The item and batch forms a Dataset or DataLoader may yield (for error messages).
ACCEPTED_FORMS = (
    "(x, y) pairs such as ((input_1, input_2), y) or ({'input_ids': ..., ...}, y), or "
    "mappings holding the inputs and the labels under label_key, e.g. {'input_ids', "
    "'attention_mask'[, 'token_type_ids'], 'labels'} or {'pixel_values', 'labels'}"
)


def check_label_key(label_key: Any) -> str:
    """Return ``label_key`` if it is a non-empty string, else raise ``ValueError``."""
    if not isinstance(label_key, str) or not label_key:
        raise ValueError(f"label_key must be a non-empty string; got {label_key!r}")
    return label_key


def _leading_length(inputs: Any) -> int:
    """Rows of the first tensor inside (nested) inputs; 1 for a single item."""
    while isinstance(inputs, Mapping | list | tuple) and len(inputs):
        inputs = next(iter(inputs.values())) if isinstance(inputs, Mapping) else inputs[0]
    shape = getattr(inputs, "shape", None)
    return int(shape[0]) if shape else 1


def split_batch(
    batch: Any, label_key: str = DEFAULT_LABEL_KEY, *, require_labels: bool = False
) -> tuple[Any, Any]:
    """Return ``(inputs, labels)`` of one batch (or one item) in any accepted form.

    The one function every loop over user data calls, so that all estimators
    accept the same forms (:data:`ACCEPTED_FORMS`):

    - a pair ``(x, y)`` (a list or tuple of two elements, which is what
      PyTorch's ``default_collate`` makes of ``(x, y)`` items) is returned
      as it is;
    - a mapping (a dict, or a ``transformers.BatchEncoding``) gives
      ``inputs``, a dict of every entry but ``label_key``, and ``labels``,
      the entry under ``label_key``. A mapping without that key gives
      labels :data:`MISSING_LABEL` (one per row), enough for prediction.

    Parameters
    ----------
    batch : tuple, list or mapping
        What a Dataset item or a DataLoader batch is.
    label_key : str, default="labels"
        Key of the labels in a mapping.
    require_labels : bool, default=False
        Raise when a mapping has no ``label_key`` (fitting needs labels).

    Returns
    -------
    inputs : Any
        What the model reads (a tensor, a tuple of tensors, a dict).
    labels : Any
        Class indices (a tensor for a batch).

    Raises
    ------
    ValueError
        Any other form, a mapping with nothing but the labels, or a missing
        label key with ``require_labels=True``.

    Examples
    --------
    >>> import torch
    >>> batch = {"input_ids": torch.ones(2, 5, dtype=torch.long), "labels": torch.tensor([1, 0])}
    >>> inputs, labels = split_batch(batch)
    >>> sorted(inputs), labels.tolist()
    (['input_ids'], [1, 0])
    >>> split_batch({"pixel_values": torch.zeros(3, 1, 2, 2)})[1].tolist()
    [-1, -1, -1]
    """
    if isinstance(batch, Mapping):
        inputs = {key: value for key, value in batch.items() if key != label_key}
        if not inputs:
            raise ValueError(
                f"the mapping holds only the labels ({label_key!r}): it needs the model inputs "
                "beside them"
            )
        if label_key in batch:
            return inputs, batch[label_key]
        if require_labels:
            raise ValueError(
                f"the data yields mappings without the label key {label_key!r} (keys: "
                f"{sorted(map(str, batch))}); put the labels under {label_key!r} or set "
                "label_key to the key that holds them"
            )
        return inputs, torch.full((_leading_length(inputs),), MISSING_LABEL)
    if isinstance(batch, list | tuple) and len(batch) == 2:
        return batch[0], batch[1]
    raise ValueError(f"the Dataset/DataLoader must yield {ACCEPTED_FORMS}; got {_describe(batch)}")


def _describe(batch: Any) -> str:
    described = f"a {type(batch).__name__}"
    if isinstance(batch, list | tuple):
        described += f" of {len(batch)} elements"
    return described


class _SplittingCollate:
    """A collate function whose batches are ``(inputs, labels)`` pairs.

    A class, not a closure: DataLoader workers and the output cache pickle it.
    """

    def __init__(self, collate_fn, label_key: str):
        self.collate_fn = collate_fn
        self.label_key = label_key

    def __call__(self, items: list[Any]) -> tuple[Any, Any]:
        return split_batch(self.collate_fn(items), self.label_key)


# Samplers whose order the caller cannot know (a shuffling DistributedSampler too).
_SHUFFLING_SAMPLERS = (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)


def _samplers_of(loader: DataLoader) -> list[Any]:
    """The loader's sampler and, when it differs, the one its batch sampler wraps."""
    samplers = [loader.sampler]
    inner = getattr(loader.batch_sampler, "sampler", None)
    if inner is not None and inner is not loader.sampler:
        samplers.append(inner)
    return samplers


def check_ordered(X: Any) -> None:
    """Refuse a shuffling DataLoader where rows are returned in the data's order.

    Predictions follow the order in which the data is read; a loader that
    shuffles gives an order the caller cannot recover, so the rows could not
    be matched with their inputs. Anything that is not a DataLoader passes;
    so does a loader whose sampler is a fixed sequence of indices (a list, a
    ``SequentialSampler``, a ``DistributedSampler`` without shuffling).

    Raises
    ------
    ValueError
        ``X`` is a DataLoader with ``shuffle=True`` (a ``RandomSampler``), a
        ``SubsetRandomSampler``, a ``WeightedRandomSampler`` or a shuffling
        ``DistributedSampler``.

    Examples
    --------
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> data = TensorDataset(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long))
    >>> check_ordered(DataLoader(data, shuffle=False))
    >>> check_ordered(DataLoader(data, shuffle=True))
    Traceback (most recent call last):
    ...
    ValueError: the DataLoader shuffles (RandomSampler): predictions would come in an order ...
    """
    if not isinstance(X, DataLoader):
        return
    for sampler in _samplers_of(X):
        shuffles = isinstance(sampler, _SHUFFLING_SAMPLERS) or (
            isinstance(sampler, DistributedSampler) and sampler.shuffle
        )
        if shuffles:
            raise ValueError(
                f"the DataLoader shuffles ({type(sampler).__name__}): predictions would come in "
                "an order that cannot be matched with the inputs; pass a DataLoader with "
                "shuffle=False (or its dataset)"
            )


def _sized_length(values: Any) -> int | None:
    try:
        return len(values)
    except TypeError:
        return None


def check_every_row_once(X: Any) -> None:
    """Refuse a DataLoader that would not return each row its sampler names exactly once.

    Prediction and scoring iterate a DataLoader as given (its sampler, batch
    size and ``collate_fn``), so that a ``DistributedSampler`` gives this
    process's shard and a list of indices gives those rows. Two settings
    would make the result silently miss or repeat rows: ``drop_last=True``
    when the last batch is incomplete, and sampling with replacement.
    Anything that is not a DataLoader passes.

    Raises
    ------
    ValueError
        ``drop_last=True`` with a last batch that would be dropped (or a
        sampler whose length is unknown), or a ``RandomSampler`` /
        ``WeightedRandomSampler`` with ``replacement=True``.

    Examples
    --------
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> data = TensorDataset(torch.zeros(10, 2), torch.zeros(10, dtype=torch.long))
    >>> check_every_row_once(DataLoader(data, batch_size=5, drop_last=True))  # drops nothing
    >>> check_every_row_once(DataLoader(data, batch_size=4, drop_last=True))
    Traceback (most recent call last):
    ...
    ValueError: the DataLoader has drop_last=True: the last 2 of its 10 rows would get no ...
    """
    if not isinstance(X, DataLoader):
        return
    for sampler in _samplers_of(X):
        if isinstance(sampler, RandomSampler | WeightedRandomSampler) and sampler.replacement:
            raise ValueError(
                f"the DataLoader's sampler ({type(sampler).__name__}) draws rows with "
                "replacement: some rows would be predicted twice and others never; pass a "
                "DataLoader that reads each row once (shuffle=False, or its dataset)"
            )
    batch_sampler = X.batch_sampler
    drop_last = bool(getattr(batch_sampler, "drop_last", X.drop_last))
    if not drop_last:
        return
    batch_size = getattr(batch_sampler, "batch_size", X.batch_size)
    n_rows = _sized_length(getattr(batch_sampler, "sampler", X.sampler))
    if n_rows is None or not batch_size:
        dropped = "its last incomplete batch would be dropped"
    elif n_rows % batch_size:
        dropped = f"the last {n_rows % batch_size} of its {n_rows} rows would get no prediction"
    else:
        return
    raise ValueError(
        f"the DataLoader has drop_last=True: {dropped}; pass a DataLoader with "
        "drop_last=False (or its dataset)"
    )


def check_training_loader(X: Any, batch_size: int) -> None:
    """Check a DataLoader given to a ``fit`` that batches the loader's dataset itself.

    The training loop reads every row of the loader's dataset (through its
    ``collate_fn``) in shuffled batches of the estimator's ``batch_size``,
    split between the processes under DDP. A sampler that selects or weights
    rows would be ignored, so it is refused; a batch size that differs from
    the estimator's is used at prediction only, which a warning says.
    Anything that is not a DataLoader passes.

    Raises
    ------
    ValueError
        The loader's sampler (or batch sampler) does not read each row of
        its dataset once: a ``SubsetRandomSampler``, a
        ``WeightedRandomSampler``, a list of some indices.

    Warns
    -----
    UserWarning
        The loader's ``batch_size`` (or its custom ``batch_sampler``) is not
        the estimator's ``batch_size``.
    """
    if not isinstance(X, DataLoader) or isinstance(X.dataset, IterableDataset):
        return
    samplers = _samplers_of(X)
    if not any(isinstance(sampler, DistributedSampler) for sampler in samplers):
        # A DistributedSampler shards what the loop shards itself; any other sampler must
        # name every row once, in whatever order (the loop shuffles anyway).
        custom_batches = X.batch_size is None
        reader = X.batch_sampler if custom_batches else X.sampler
        if not isinstance(reader, SequentialSampler | RandomSampler) or (
            isinstance(reader, RandomSampler) and reader.replacement
        ):
            n_rows = len(X.dataset)
            # A sampler may draw from torch's generator: reading it here must not shift
            # the caller's random stream.
            with torch.random.fork_rng(devices=[]):
                if custom_batches:
                    rows = np.fromiter((i for batch in reader for i in batch), dtype=np.int64)
                else:
                    rows = np.fromiter(iter(reader), dtype=np.int64)
            counts = np.bincount(rows, minlength=n_rows) if rows.size else np.zeros(n_rows)
            if len(counts) != n_rows or not np.all(counts == 1):
                distinct = int(np.count_nonzero(counts[:n_rows]))
                repeated = ", some more than once" if np.any(counts > 1) else ""
                raise ValueError(
                    f"fit trains on every row of the DataLoader's dataset in batches of its "
                    f"own, but the loader's sampler ({type(reader).__name__}) reads "
                    f"{distinct} of its {n_rows} rows{repeated}: pass the rows to train on as "
                    "a torch.utils.data.Subset of the dataset, in a DataLoader without a "
                    "sampler"
                )
    if X.batch_size is None:
        given = f"its batch_sampler ({type(X.batch_sampler).__name__})"
    elif X.batch_size != batch_size:
        given = f"its batch_size={X.batch_size}"
    else:
        return
    warn_at_caller(
        f"fit batches the DataLoader's dataset itself, in shuffled batches of "
        f"batch_size={batch_size} (the estimator's): the loader's collate_fn is kept, "
        f"{given} is used at prediction only. Set the estimator's batch_size to train at "
        "the loader's batch size",
        UserWarning,
    )


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


def _first_item(dataset: Dataset) -> Any:
    """The first item of a map-style dataset, or None when it cannot be read cheaply."""
    if isinstance(dataset, IterableDataset):
        return None
    try:
        return dataset[0]
    except Exception:  # a dataset indexed otherwise: its batches are checked when read
        return None


def _normalised(
    dataset: Dataset, collate_fn, label_key: str, require_y: bool, what: str
) -> Dataset:
    """``dataset`` made to yield ``(inputs, labels)`` batches through ``make_loader``.

    ``collate_fn`` is the user's (None for PyTorch's default). Data whose
    batches are pairs stays as it is (the dataset keeps its fast label paths
    and the loader's own ``collate_fn``); batches that are mappings, which a
    custom ``collate_fn`` may also build from other items (a tokenising
    collator), go through :func:`split_batch` after collation, with
    ``label_key`` bound.
    """
    if collate_fn is None and collate_fn_of(dataset) is not None:
        return dataset  # normalised already (a split of a dataset from as_dataset)
    item = _first_item(dataset)
    if item is not None:
        # One collated item tells the batches' form (a custom collate_fn may tokenise).
        batch = item if collate_fn is None else collate_fn([item])
        if isinstance(batch, Mapping):
            split_batch(batch, label_key, require_labels=require_y)
        else:
            try:
                split_batch(batch, label_key)
            except ValueError:
                kind = "items" if collate_fn is None else "batches"
                raise ValueError(
                    f"the {what} must yield {ACCEPTED_FORMS}; its {kind} are {_describe(batch)}"
                ) from None
            return dataset if collate_fn is None else _CollatedDataset(dataset, collate_fn)
    return _CollatedDataset(dataset, _SplittingCollate(collate_fn or default_collate, label_key))


def as_dataset(
    X: Any, y: Any = None, *, require_y: bool = False, label_key: str = DEFAULT_LABEL_KEY
) -> tuple[Dataset, np.ndarray | None]:
    """Validate raw inputs and return a torch ``Dataset`` of ``(x, y)`` pairs.

    Parameters
    ----------
    X : array-like, torch.Tensor, dict of arrays, Dataset or DataLoader
        - numpy array or tensor of images ``(n, C, H, W)`` or token ids
          ``(n, L)``: floating values become float32, integers int64;
        - a dict of equal-length arrays, e.g. ``{"input_ids": ..., "attention_mask": ...}``
          for text models: each item's ``x`` is then a dict;
        - a ``Dataset`` yielding ``(x, y)`` pairs or mappings with the labels
          under ``label_key`` (``y`` must then be None);
        - a ``DataLoader`` yielding such batches (``y`` must then be None);
          its dataset is returned, carrying the loader's ``collate_fn`` so that
          :func:`make_loader` batches it the same way.

        Batches of the returned dataset made by :func:`make_loader` are
        ``(inputs, labels)`` pairs whatever the form (see :func:`split_batch`).
    y : array-like of shape (n,), optional
        Labels for array inputs. Without them every item's label is
        :data:`MISSING_LABEL` (-1).
    require_y : bool, default=False
        Raise when array inputs come without labels, or mapping items
        without ``label_key`` (``fit`` needs them).
    label_key : str, default="labels"
        Key of the labels in mapping items and batches.

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
        DataLoader, missing ``y`` with ``require_y=True``, non-numeric arrays,
        items in none of the accepted forms.

    Examples
    --------
    >>> import numpy as np
    >>> dataset, y = as_dataset(np.zeros((4, 3, 8, 8)), [0, 1, 1, 0])
    >>> x, label = dataset[1]
    >>> x.dtype, x.shape, int(label), len(dataset)
    (torch.float32, torch.Size([3, 8, 8]), 1, 4)

    Hugging Face style items come out of :func:`make_loader` as pairs:

    >>> import torch
    >>> class Glosses(torch.utils.data.Dataset):
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, i):
    ...         return {"input_ids": torch.arange(3), "labels": torch.tensor(i)}
    >>> dataset, _ = as_dataset(Glosses())
    >>> inputs, labels = next(iter(make_loader(dataset, batch_size=4)))
    >>> sorted(inputs), tuple(inputs["input_ids"].shape), labels.tolist()
    (['input_ids'], (4, 3), [0, 1, 2, 3])
    """
    label_key = check_label_key(label_key)
    if isinstance(X, DataLoader):
        if y is not None:
            raise ValueError(
                "y must be None when X is a DataLoader: the loader yields (x, y) batches"
            )
        dataset = X.dataset
        if _dataset_length(dataset) == 0:
            raise ValueError("the DataLoader's dataset is empty")
        collate_fn = None if X.collate_fn is default_collate else X.collate_fn
        return _normalised(dataset, collate_fn, label_key, require_y, "DataLoader"), None
    if isinstance(X, Dataset):
        if y is not None:
            raise ValueError("y must be None when X is a Dataset: it yields (x, y) pairs")
        if _dataset_length(X) == 0:
            raise ValueError("the Dataset X is empty")
        return _normalised(X, None, label_key, require_y, "Dataset"), None
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


def prediction_batches(
    X: Any,
    batch_size: int,
    *,
    label_key: str = DEFAULT_LABEL_KEY,
    ordered: bool = True,
    require_labels: bool = False,
) -> Iterable[tuple[Any, Any]]:
    """``(inputs, labels)`` batches to predict on or score, checked before the first batch.

    A DataLoader is iterated as given: its sampler (a ``DistributedSampler``
    gives this process's shard), its batch size and its ``collate_fn``;
    ``batch_size`` then has no effect. Arrays, dicts of arrays and Datasets
    go through :func:`as_dataset` and are read in order, ``batch_size`` rows
    at a time.

    Parameters
    ----------
    X : array-like, dict of arrays, Dataset or DataLoader
        Any form :func:`as_dataset` accepts.
    batch_size : int
        Rows per batch of a form other than a DataLoader.
    label_key : str, default="labels"
        Key of the labels in mapping items and batches.
    ordered : bool, default=True
        Refuse a shuffling loader (:func:`check_ordered`): predictions must
        come in an order the caller knows. Scoring pairs each prediction with
        the label of its own batch and passes False.
    require_labels : bool, default=False
        Refuse mappings without ``label_key`` (scoring needs labels).

    Returns
    -------
    iterable of (inputs, labels)
        ``labels`` are :data:`MISSING_LABEL` where the data has none; its
        length is the loader's (when the loader has one).

    Raises
    ------
    ValueError
        Empty data, items in none of the accepted forms, a loader that
        shuffles (with ``ordered``) or cannot return each of its rows once
        (:func:`check_every_row_once`).

    Examples
    --------
    >>> import numpy as np
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> loader = DataLoader(TensorDataset(torch.arange(6.0), torch.arange(6)), batch_size=4,
    ...                     sampler=[5, 0, 3])
    >>> [labels.tolist() for _, labels in prediction_batches(loader, 64)]
    [[5, 0, 3]]
    >>> [len(x) for x, _ in prediction_batches(np.zeros((5, 2)), 2)]
    [2, 2, 1]
    """
    if isinstance(X, DataLoader):
        if ordered:
            check_ordered(X)
        check_every_row_once(X)
        as_dataset(X, require_y=require_labels, label_key=label_key)  # its form and size
        loader = X
    else:
        dataset, _ = as_dataset(X, require_y=require_labels, label_key=label_key)
        loader = make_loader(dataset, batch_size)
    return _SplitBatches(loader, label_key, require_labels)


class _SplitBatches:
    """A loader's batches as ``(inputs, labels)`` pairs, with the loader's length (for tqdm)."""

    def __init__(self, loader: Any, label_key: str, require_labels: bool) -> None:
        self.loader, self.label_key, self.require_labels = loader, label_key, require_labels

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for batch in self.loader:
            yield split_batch(batch, self.label_key, require_labels=self.require_labels)


def _labels_to_numpy(parts: list[Any]) -> np.ndarray:
    if all(isinstance(part, torch.Tensor) for part in parts):
        return torch.cat([part.reshape(-1).cpu() for part in parts]).numpy()
    values: list[Any] = []
    for part in parts:
        values.extend(part.tolist() if hasattr(part, "tolist") else list(part))
    return np.asarray(values)


def check_column_indices(labels: Any, n_classes: int, where: str) -> None:
    """Refuse labels that are not integer column indices ``0..n_classes - 1``.

    A Dataset or DataLoader yields labels as the model's column indices
    (``classes`` only names the columns); anything else, Hugging Face's
    ignore index -100 among them, would fail deep inside the loss or be
    scored against the wrong column. ``labels`` is an array, a tensor (a
    batch, checked where it lies) or the list ``default_collate`` makes of
    strings; ``where`` names the data in the message.

    Raises
    ------
    ValueError
        Labels that are not integers, or outside ``0..n_classes - 1``.

    Examples
    --------
    >>> import torch
    >>> check_column_indices(torch.tensor([0, 2, 1]), 3, "the training data")
    >>> check_column_indices(torch.tensor([0, -100]), 3, "the training data")
    Traceback (most recent call last):
    ...
    ValueError: the training data must yield labels that are column indices 0..2 of the ...
    """
    if isinstance(labels, torch.Tensor):
        integral = not (labels.is_floating_point() or labels.is_complex())
        if integral and labels.dtype != torch.bool:
            if labels.numel() == 0 or (int(labels.min()) >= 0 and int(labels.max()) < n_classes):
                return
        labels = labels.detach().cpu().numpy()
    labels = np.asarray(labels)
    valid = labels.dtype.kind in "iu" and (
        labels.size == 0 or (labels.min() >= 0 and labels.max() < n_classes)
    )
    if valid:
        return
    try:
        examples = np.unique(labels)[:5].tolist()
    except TypeError:  # labels of mixed types do not sort
        examples = list(dict.fromkeys(labels.tolist()))[:5]
    hint = ""
    if labels.dtype.kind in "iu" and bool(np.any(labels == -100)):
        hint = (
            " (-100 is Hugging Face's index of tokens to ignore, not a class: drop those rows "
            "or give them their class)"
        )
    raise ValueError(
        f"{where} must yield labels that are column indices 0..{n_classes - 1} of the "
        f"model's outputs; got values such as {examples}{hint}"
    )


def dataset_labels(
    data: Dataset | DataLoader, *, batch_size: int = 256, label_key: str = DEFAULT_LABEL_KEY
) -> np.ndarray:
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
    label_key : str, default="labels"
        Key of the labels in the batches of a DataLoader that yields mappings.

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
        parts.append(split_batch(batch, label_key, require_labels=True)[1])
    if not parts:
        raise ValueError("the data is empty: no labels to read")
    return _labels_to_numpy(parts)


# Fingerprints -------------------------------------------------------------------------------


def _tensor_digest(tensor: torch.Tensor) -> tuple[str, tuple[int, ...], str]:
    """``(dtype, shape, digest of the bytes)`` of a tensor, wherever it lies."""
    tensor = tensor.detach().cpu().contiguous()
    digest = hashlib.blake2b(tensor.reshape(-1).view(torch.uint8).numpy(), digest_size=20)
    return str(tensor.dtype), tuple(tensor.shape), digest.hexdigest()


class _ContentHasher(joblib.hashing.NumpyHasher):
    """joblib's hasher (arrays by content; dicts and sets in a stable order), tensors included.

    Pickling a tensor writes the address of its storage, which differs between
    processes; the digest of its content, pickled in its place, does not.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return _tensor_content, _tensor_digest(obj)
        return NotImplemented


def _tensor_content(dtype: str, shape: tuple[int, ...], digest: str) -> None:
    """Stands for a tensor in a fingerprint (never called: nothing is unpickled)."""


def _sampler_description(sampler: Any) -> Any:
    """What a (batch) sampler reads: its kind when it draws at random, else its indices."""
    if isinstance(sampler, SequentialSampler):
        return ("sequential", len(sampler))
    inner = getattr(sampler, "sampler", None)
    drawn = isinstance(sampler, _SHUFFLING_SAMPLERS) or (
        isinstance(sampler, DistributedSampler) and sampler.shuffle
    )
    if drawn or isinstance(inner, _SHUFFLING_SAMPLERS):
        # A new order on every pass: only the kind and the size are fixed.
        return ("drawn", type(sampler).__qualname__, _sized_length(sampler))
    if isinstance(inner, SequentialSampler):
        batch_size = getattr(sampler, "batch_size", None)
        return ("batches", len(inner), batch_size, getattr(sampler, "drop_last", None))
    with torch.random.fork_rng(devices=[]):  # reading it leaves the caller's stream alone
        return ("indices", list(sampler))


def _fingerprinted(value: Any) -> Any:
    """``value`` in the form that is hashed: networks by their weights, loaders by their reads."""
    if isinstance(value, nn.Module):
        kind = (type(value).__module__, type(value).__qualname__)
        return ("module", kind, list(value.state_dict().items()))
    if isinstance(value, DataLoader):
        reads = None
        if not isinstance(value.dataset, IterableDataset):
            reads = _sampler_description(value.batch_sampler)
        return ("loader", value.dataset, reads, value.batch_size, value.collate_fn)
    return value


def fingerprint(value: Any) -> str:
    """A digest of data or a network's weights, equal in any process for equal content.

    Arrays and tensors are hashed by their dtype, shape and bytes; a network
    (``nn.Module``) by its class and every entry of its ``state_dict``; a
    DataLoader by its dataset, the rows its sampler reads (a shuffling one by
    its kind alone) and its ``collate_fn``; anything else (a Dataset, a dict)
    by its pickled state, the tensors and arrays inside it by content. A
    lazily loaded dataset (files on disk) is therefore fingerprinted by its
    file list and transforms, not by the files' contents.

    Used to recognise the data and the network a checkpoint was written for,
    and the backbone outputs that ``memory=`` caches.

    Raises
    ------
    TypeError, pickle.PicklingError, AttributeError
        When ``value`` holds something that cannot be pickled (a lambda, a
        class defined inside a function, an open file).

    Examples
    --------
    >>> import numpy as np
    >>> import torch
    >>> fingerprint(torch.arange(3.0)) == fingerprint(torch.arange(3.0))
    True
    >>> fingerprint(torch.arange(3.0)) == fingerprint(torch.arange(3.0).flip(0))
    False
    >>> dataset, _ = as_dataset(np.zeros((4, 2)), [0, 1, 0, 1])
    >>> fingerprint(dataset) == fingerprint(as_dataset(np.zeros((4, 2)), [1, 0, 0, 1])[0])
    False
    """
    return _ContentHasher(hash_name="sha1").hash(_fingerprinted(value))
