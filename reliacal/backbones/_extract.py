"""Run a frozen backbone over a data set once, optionally caching its outputs."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from reliacal._data import (
    DEFAULT_LABEL_KEY,
    _labels_to_numpy,
    as_dataset,
    check_every_row_once,
    check_label_key,
    fingerprint,
    make_loader,
    split_batch,
)
from reliacal._device import resolve_device, to_device
from reliacal._validation import warn_at_caller
from reliacal.backbones._base import BackboneAdapter

__all__ = ["extract_outputs"]


def _cache_key(adapter: BackboneAdapter, X: Any, mixed_precision: bool, label_key: str) -> str:
    return joblib.hash(
        (
            type(adapter).__module__,
            type(adapter).__qualname__,
            repr(adapter.model),
            adapter._cache_config(),
            fingerprint(adapter),  # every weight and buffer, by content
            fingerprint(X),
            bool(mixed_precision),
            # Which entry of a mapping is the label (and so not an input).
            label_key,
        )
    )


def _autocast(device: torch.device, mixed_precision: bool):
    if not (mixed_precision and device.type == "cuda"):
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast(device_type="cuda", dtype=dtype)


def _run_backbone(
    adapter: BackboneAdapter,
    loader: DataLoader,
    device: torch.device,
    mixed_precision: bool,
    verbose: int,
    label_key: str = DEFAULT_LABEL_KEY,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    first_parameter = next(adapter.parameters(), None)
    home = first_parameter.device if first_parameter is not None else torch.device("cpu")
    # Per module: a fresh adapter is in train mode around a model in eval mode, and
    # restoring the adapter's flag alone would switch the model's dropout on.
    modes = [(module, module.training) for module in adapter.modules()]
    pooled_parts, logits_parts, label_parts = [], [], []
    try:
        adapter.eval()
        adapter.to(device)
        progress = tqdm(loader, desc="backbone", disable=not verbose, leave=False)
        with torch.no_grad():
            for batch in progress:
                x, y = split_batch(batch, label_key)
                with _autocast(device, mixed_precision):
                    output = adapter(to_device(x, device))
                pooled_parts.append(output.pooled.float().cpu())
                logits_parts.append(output.logits.float().cpu())
                label_parts.append(y)
    finally:
        # Leave the model where the caller keeps it: an estimator that stores it must
        # unpickle on a CPU-only machine.
        adapter.to(home)
        for module, training in modes:
            module.train(training)
    if not pooled_parts:
        raise ValueError("the data yielded no batches: at least one sample is needed")
    pooled = torch.cat(pooled_parts).numpy()
    logits = torch.cat(logits_parts).numpy()
    return pooled, logits, _labels_to_numpy(label_parts)


def _cached_run(key: str, run: Callable[[], tuple]) -> tuple:
    # What joblib memoises: ``run`` (the pass over the data) is ignored, ``key`` (the
    # adapter's weights and the data, by content) alone decides a hit.
    return run()


def _check_memory(memory: Any) -> joblib.Memory | None:
    if memory is None:
        return None
    if isinstance(memory, str | Path):
        return joblib.Memory(location=memory, verbose=0)
    if hasattr(memory, "cache"):
        return memory
    raise ValueError(f"memory must be None, a path or a joblib.Memory; got {type(memory).__name__}")


def extract_outputs(
    backbone: Any,
    X: Any,
    y: Any = None,
    *,
    batch_size: int = 256,
    device: str | torch.device = "auto",
    mixed_precision: bool = False,
    memory: Any = None,
    verbose: int = 0,
    label_key: str = DEFAULT_LABEL_KEY,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Run a frozen backbone once over the data; return pooled features, logits and labels.

    The backbone runs batched in eval mode under ``torch.no_grad()`` on
    ``device``, one forward pass per batch, each pass giving both the pooled
    pre-logits features and the logits (see :class:`BackboneAdapter`). The
    model is returned to its original device and train/eval mode afterwards.

    Parameters
    ----------
    backbone : BackboneAdapter, model or timm model name
        Anything :func:`as_backbone` accepts.
    X : array-like, dict of arrays, Dataset or DataLoader
        Raw inputs (images or token ids): an array or a dict of arrays of
        ``n`` rows, or a Dataset or DataLoader that yields
        ``(x, y)`` pairs or Hugging Face style mappings
        (``{"input_ids", "attention_mask", "labels"}``,
        ``{"pixel_values", "labels"}``). A DataLoader is iterated as it is
        (its sampler, batch size and order; a ``DistributedSampler`` gives
        this process's shard); ``batch_size`` then has no effect. A loader
        that would drop or repeat rows (``drop_last=True`` with an incomplete
        last batch, sampling with replacement) is refused.
    y : array-like of shape (n,), optional
        Labels of array inputs (a Dataset or DataLoader yields its own).
    batch_size : int, default=256
        Samples per forward pass.
    device : str or torch.device, default="auto"
        Where the backbone runs; ``"auto"`` picks CUDA when available.
    mixed_precision : bool, default=False
        Run under autocast (bfloat16 when supported, else float16) on CUDA;
        ignored on the CPU.
    memory : joblib.Memory, str or path, optional
        Cache the outputs, as scikit-learn's Pipeline does: a second call with
        the same model (architecture and every weight and buffer) and the same
        data returns the stored outputs without running the backbone. Arrays
        are hashed by content; a Dataset or DataLoader by its pickled state,
        which for lazily loaded datasets (files on disk) covers the file list
        and transforms but not the file contents. The device is not part of
        the key. Data that cannot be pickled is run without caching, with a
        warning. The cache is read back with pickle, which can run code: give
        only a folder that you trust and that no one else can write to.
    verbose : int, default=0
        Show a tqdm progress bar over the batches when > 0.
    label_key : str, default="labels"
        Key of the labels in mapping items or batches (not passed to the
        model); a mapping without it has no labels (``y`` is then -1s).

    Returns
    -------
    pooled : ndarray of shape (n, D), float32
        Pre-logits features.
    logits : ndarray of shape (n, K), float32
        The model's logits.
    y : ndarray of shape (n,) or None
        The labels: ``y`` as given for array inputs (None when not given),
        else the labels the data yielded, in the order of the rows above.

    Raises
    ------
    ValueError
        Empty data, ``y`` beside a Dataset or DataLoader, mismatched lengths,
        items that are not ``(x, y)`` pairs, a DataLoader that would drop or
        repeat rows, an unsupported model.

    Examples
    --------
    >>> import torch
    >>> from timm.models.vision_transformer import VisionTransformer
    >>> _ = torch.manual_seed(0)
    >>> vit = VisionTransformer(img_size=16, patch_size=8, embed_dim=16, depth=1,
    ...                         num_heads=2, num_classes=3)
    >>> images = torch.randn(10, 3, 16, 16)
    >>> pooled, logits, y = extract_outputs(vit, images, torch.arange(10) % 3,
    ...                                     batch_size=4, device="cpu")
    >>> pooled.shape, logits.shape, y[:4]
    ((10, 16), (10, 3), array([0, 1, 2, 0]))
    >>> with torch.no_grad():
    ...     bool(torch.allclose(vit.eval()(images), torch.from_numpy(logits), atol=1e-5))
    True
    """
    from reliacal.backbones._resolve import as_backbone

    adapter = as_backbone(backbone)
    if isinstance(X, DataLoader):
        if y is not None:
            raise ValueError(
                "y must be None when X is a DataLoader: the loader yields (x, y) batches"
            )
        as_dataset(X, label_key=label_key)  # validates the loader's form and size
        check_every_row_once(X)  # iterated as given: no row dropped or repeated
        loader, given_y = X, None
    else:
        dataset, given_y = as_dataset(X, y, label_key=label_key)
        loader = make_loader(dataset, batch_size)
    labels_from_data = isinstance(X, Dataset | DataLoader)
    device = resolve_device(device)
    mixed_precision = bool(mixed_precision) and device.type == "cuda"
    memory = _check_memory(memory)
    label_key = check_label_key(label_key)

    run = functools.partial(
        _run_backbone, adapter, loader, device, mixed_precision, verbose, label_key
    )
    key = None
    if memory is not None:
        try:
            key = _cache_key(adapter, X, mixed_precision, label_key)
        except Exception as error:  # joblib raises many kinds of pickling errors
            warn_at_caller(
                f"memory= is ignored: the data could not be hashed for the cache key ({error!r})",
                RuntimeWarning,
            )
    if key is None:
        pooled, logits, labels = run()
    else:
        pooled, logits, labels = memory.cache(_cached_run, ignore=["run"])(key, run)
    return pooled, logits, (labels if labels_from_data else given_y)
