"""What the fine-tuning estimators share: trainer settings, input checks, batched inference.

:class:`~reliacal.finetune.CalAttnFinetuner` and
:class:`~reliacal.finetune.DiffusionReconfigurer` take the same training
settings under the same names, check their inputs the same way and run their
fitted network over a ``Dataset`` the same way; the seed, split and
divergence policy come from :class:`reliacal.training._estimator.NetworkEstimatorMixin`
(shared with AdaptiveTS); the method-specific parts stay in their modules.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate
from tqdm.auto import tqdm

from reliacal._data import (
    DEFAULT_LABEL_KEY,
    as_dataset,
    check_column_indices,
    check_training_loader,
    collate_fn_of,
    dataset_labels,
    prediction_batches,
    split_batch,
)
from reliacal._device import resolve_device, to_device
from reliacal._docstrings import LABEL_KEY_DOC, N_THREADS_DOC, fill_doc
from reliacal._init_arguments import spell_out_init_signature, store_init_arguments
from reliacal.calibrators import BackboneSaveMixin, ClassLabelMixin
from reliacal.training import (
    THREADS_CONSTRAINT,
    TRAINING_CONSTRAINTS,
    NetworkEstimatorMixin,
    TrainingConfig,
    TrainingDivergedError,
    training_config,
)

# Estimator parameters that are TrainingConfig fields of the same name and meaning.
_TRAINING_PARAMETERS = (
    "max_epochs",
    "batch_size",
    "learning_rate",
    "weight_decay",
    "warmup_epochs",
    "selection_metric",
    "n_iter_no_change",
    "mixed_precision",
    "checkpoint_dir",
    "device",
    "verbose",
)

BatchForward = Callable[[nn.Module, Any], tuple[torch.Tensor, ...]]


class FinetuneEstimator(
    BackboneSaveMixin, NetworkEstimatorMixin, ClassLabelMixin, ClassifierMixin, BaseEstimator
):
    """Base of the fine-tuning estimators (private).

    It takes the training parameters whose defaults both estimators share. A
    subclass lists its own parameters (with the training recipe it defaults
    to: ``max_epochs``, ``learning_rate``, ``weight_decay``,
    ``warmup_epochs``, ``selection_metric``) followed by
    ``**training_params``, stores its own with ``store_init_arguments(self,
    locals())`` and passes ``training_params`` to ``super().__init__``. Its
    ``__init__`` is then given the full signature, which scikit-learn's
    ``get_params`` reads.
    """

    def __init__(
        self,
        *,
        batch_size: int = 64,
        validation_fraction: float = 0.1,
        n_iter_no_change: int | None = None,
        mixed_precision: bool | str = "auto",
        checkpoint_dir: str | None = None,
        device: str = "auto",
        random_state: Any = None,
        verbose: int | bool = 1,
        classes: Any = None,
        label_key: str = DEFAULT_LABEL_KEY,
        n_threads: int | None = None,
    ) -> None:
        store_init_arguments(self, locals())

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        spell_out_init_signature(cls, FinetuneEstimator.__init__)
        cls.__doc__ = fill_doc(
            cls.__doc__, {"label_key": LABEL_KEY_DOC, "n_threads": N_THREADS_DOC}
        )

    # A checkpoint folder of this machine: never saved, refused in a file (reliacal.load).
    _machine_local_parameters = ("checkpoint_dir",)

    _parameter_constraints: dict = {
        "backbone": "no_validation",
        **{name: TRAINING_CONSTRAINTS[name] for name in _TRAINING_PARAMETERS},
        "validation_fraction": TRAINING_CONSTRAINTS["validation_fraction"],
        "random_state": TRAINING_CONSTRAINTS["random_state"],
        "classes": ["array-like", None],
        "label_key": [str],
        "n_threads": THREADS_CONSTRAINT,
    }

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_") and not isinstance(getattr(self, "network_", None), nn.Module):
            from reliacal.persistence import loaded_state_error

            raise loaded_state_error(
                self, "network_", getattr(self, "network_", None), "the fitted network"
            )

    def _fit_inputs(self, X: Any, y: Any) -> tuple[Dataset, np.ndarray | None]:
        """``as_dataset(X, y)`` for fit, refusing arrays with NaN or infinite values.

        A DataLoader's dataset is trained on in batches of ``batch_size``
        (see :func:`reliacal._data.check_training_loader`).
        """
        resolve_device(self.device)  # a device name torch does not know fails here, clearly
        dataset, labels = as_dataset(X, y, require_y=True, label_key=self.label_key)
        check_finite_inputs(X)
        check_training_loader(X, int(self.batch_size))
        return dataset, labels

    def _fit_dataset_labels(self, dataset: Dataset, n_classes: int) -> None:
        """Check that a Dataset's labels are column indices and set ``classes_``."""
        labels = dataset_labels(dataset, batch_size=int(self.batch_size))
        check_column_indices(labels, n_classes, "a Dataset or DataLoader given to fit")
        self.classes_ = self._classes_for(n_classes)

    def _scored_labels(self, labels: np.ndarray) -> np.ndarray:
        """The labels of ``classes_`` that a scored Dataset's column indices stand for."""
        n_classes = len(self.classes_)
        check_column_indices(labels, n_classes, "a Dataset or DataLoader given to score")
        return self.classes_[labels]

    @contextlib.contextmanager
    def _explaining_input_errors(self, backbone: nn.Module, dataset: Dataset) -> Iterator[None]:
        """Turn a failure of the backbone on inputs of the wrong form into a clear ValueError.

        Such inputs fail deep inside the model (timm's image-size assertion,
        "not enough values to unpack" for a missing channel axis) at the first
        training step. When the block fails, the backbone is run on one item:
        if that fails too, the inputs are the cause and the error says what
        was expected; otherwise the original error stands. Checking only on
        failure keeps a successful fit free of an extra forward pass.
        """
        try:
            yield
        except TrainingDivergedError:
            raise
        except (AssertionError, RuntimeError, ValueError, TypeError, IndexError):
            self._check_backbone_reads(backbone, dataset)
            raise

    def _check_backbone_reads(self, backbone: nn.Module, dataset: Dataset) -> None:
        """Run the backbone on one item; raise a ValueError saying what it expects if it fails."""
        if not len(dataset):
            return
        item = dataset[0]
        # Mapping items (Hugging Face style) hold the label beside the inputs; a loader's
        # collate_fn (padding, tokenising) makes the batch the model would read.
        x, _ = split_batch(item, self.label_key)
        batch, _ = split_batch((collate_fn_of(dataset) or default_collate)([item]), self.label_key)
        was_training = backbone.training
        device = next(backbone.parameters()).device
        try:
            with torch.no_grad():
                backbone.eval()(to_device(as_input(batch), device))
        except (AssertionError, RuntimeError, ValueError, TypeError, IndexError) as error:
            raise ValueError(
                f"the backbone cannot read the inputs: one item has {_describe(x)}, and "
                f"{type(backbone.model).__name__} fails on a batch of it with "
                f"{type(error).__name__}: {error}. Images must be (n, C, H, W) arrays "
                "with the channels and size the model was built for; text models take "
                "token ids (n, L) or a dict of such arrays"
            ) from error
        finally:
            backbone.train(was_training)

    def _training_config(self, **settings: Any) -> TrainingConfig:
        """The trainer's settings: the shared parameters, plus the method's own ``settings``."""
        return training_config(self, _TRAINING_PARAMETERS, **settings)

    def _run_batches(
        self,
        module: nn.Module,
        data: Any,
        forward: BatchForward,
        device: torch.device,
        *,
        labels: bool = False,
        ordered: bool = True,
    ) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
        """Apply ``forward(module, x)`` to every batch of ``data``, in its order.

        ``data`` is any form ``fit`` accepts; a DataLoader is iterated as
        given (its sampler and batches, see
        :func:`reliacal._data.prediction_batches`), other forms in batches of
        ``batch_size``. The module runs on ``device`` in eval mode without
        gradients and is moved back to the CPU afterwards, failure included,
        because the fitted state lives there (pickles load on machines without
        a GPU). Returns each of ``forward``'s outputs concatenated over the
        batches (numpy), and, with ``labels``, the labels the data yields
        (which it must then hold); ``ordered=False`` accepts a shuffling
        loader (scoring pairs each row with its own label). With ``verbose``
        a progress bar shows the batches.
        """
        batches = prediction_batches(
            data,
            int(self.batch_size),
            label_key=self.label_key,
            ordered=ordered,
            require_labels=labels,
        )
        parts: list[tuple[torch.Tensor, ...]] = []
        label_parts: list[np.ndarray] = []
        # Updated by hand: wrapping the batches would make tqdm open an extra iterator.
        try:
            total = len(batches)
        except TypeError:  # a loader over an IterableDataset without a length
            total = None
        progress = tqdm(total=total, desc="predict", leave=False, disable=not self.verbose)
        try:
            module.to(device).eval()
            with self._threads(module, int(self.batch_size)), torch.no_grad():
                for x, y in batches:
                    progress.update()
                    x = as_input(to_device(x, device))
                    parts.append(tuple(value.cpu() for value in forward(module, x)))
                    if labels:
                        label_parts.append(_labels_array(y))
        finally:
            progress.close()
            module.to("cpu")
        if not parts:
            raise ValueError(
                "the data yielded no rows (a DataLoader whose sampler names no index?): at "
                "least one sample is needed"
            )
        outputs = tuple(torch.cat(values).numpy() for values in zip(*parts))
        return outputs, np.concatenate(label_parts) if labels else None


def _labels_array(y: Any) -> np.ndarray:
    """One batch's labels as a 1-D numpy array (default_collate makes strings a list)."""
    if isinstance(y, torch.Tensor):
        return y.detach().cpu().reshape(-1).numpy()
    return np.asarray(y).reshape(-1)


def check_finite_inputs(X: Any) -> None:
    """Refuse floating arrays or tensors (or dicts of them) holding NaN or infinity.

    Datasets and DataLoaders are not read here: their values reach the NaN
    guard of the training loop and the validation checks instead.
    """
    arrays = X.items() if isinstance(X, dict) else [("X", X)]
    for name, value in arrays:
        label = name if name == "X" else f"X[{name!r}]"
        if isinstance(value, torch.Tensor):
            finite = not value.is_floating_point() or bool(torch.isfinite(value).all())
        elif isinstance(value, Dataset | DataLoader):
            continue
        else:
            array = np.asarray(value)
            finite = array.dtype.kind not in "fc" or bool(np.isfinite(array).all())
        if not finite:
            raise ValueError(
                f"{label} contains NaN or infinity; the network cannot learn from or predict "
                "on such inputs: clean or impute them first"
            )


def as_input(x: Any) -> Any:
    """The collated inputs as a model takes them: ``default_collate`` makes a tuple a list."""
    return tuple(x) if isinstance(x, list) else x


def _describe(x: Any) -> str:
    if isinstance(x, Mapping):
        return "keys " + ", ".join(f"{k} {_shape_of(v)}" for k, v in x.items())
    if isinstance(x, tuple | list):
        return "parts of shapes " + ", ".join(_shape_of(v) for v in x)
    return f"shape {_shape_of(x)}"


def _shape_of(value: Any) -> str:
    """A tensor's shape, else the kind of value (a string field of a dict item)."""
    shape = getattr(value, "shape", None)
    return str(tuple(shape)) if shape is not None else f"({type(value).__name__})"


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters of ``module``, trainable or not."""
    return int(sum(p.numel() for p in module.parameters()))
