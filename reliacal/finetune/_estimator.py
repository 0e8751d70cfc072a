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
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from torch import nn
from torch.utils.data import DataLoader, Dataset

from reliacal._data import DEFAULT_LABEL_KEY, as_dataset, make_loader, split_batch
from reliacal._device import resolve_device, to_device
from reliacal._docstrings import LABEL_KEY_DOC, fill_doc
from reliacal._init_arguments import spell_out_init_signature, store_init_arguments
from reliacal.calibrators import BackboneSaveMixin, ClassLabelMixin
from reliacal.training import (
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
        verbose: int | bool = 0,
        classes: Any = None,
        label_key: str = DEFAULT_LABEL_KEY,
    ) -> None:
        store_init_arguments(self, locals())

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        spell_out_init_signature(cls, FinetuneEstimator.__init__)
        cls.__doc__ = fill_doc(cls.__doc__, {"label_key": LABEL_KEY_DOC})

    # A checkpoint folder of this machine: never saved, refused in a file (reliacal.load).
    _machine_local_parameters = ("checkpoint_dir",)

    _parameter_constraints: dict = {
        "backbone": "no_validation",
        **{name: TRAINING_CONSTRAINTS[name] for name in _TRAINING_PARAMETERS},
        "validation_fraction": TRAINING_CONSTRAINTS["validation_fraction"],
        "random_state": TRAINING_CONSTRAINTS["random_state"],
        "classes": ["array-like", None],
        "label_key": [str],
    }

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_") and not isinstance(getattr(self, "network_", None), nn.Module):
            from reliacal.persistence import loaded_state_error

            raise loaded_state_error(
                self, "network_", getattr(self, "network_", None), "the fitted network"
            )

    def _fit_inputs(self, X: Any, y: Any) -> tuple[Dataset, np.ndarray | None]:
        """``as_dataset(X, y)`` for fit, refusing arrays with NaN or infinite values."""
        resolve_device(self.device)  # a device name torch does not know fails here, clearly
        dataset, labels = as_dataset(X, y, require_y=True, label_key=self.label_key)
        check_finite_inputs(X)
        return dataset, labels

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
        x, _ = dataset[0]
        was_training = backbone.training
        device = next(backbone.parameters()).device
        try:
            with torch.no_grad():
                backbone.eval()(to_device(_one_item_batch(x), device))
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
        dataset: Dataset,
        forward: BatchForward,
        device: torch.device,
        *,
        keep_labels: bool = False,
    ) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
        """Apply ``forward(module, x)`` to every batch of ``dataset``, in order.

        The module runs on ``device`` in eval mode without gradients and is
        moved back to the CPU afterwards, failure included, because the fitted
        state lives there (pickles load on machines without a GPU). Returns
        each of ``forward``'s outputs concatenated over the batches (numpy),
        and, with ``keep_labels``, the labels the data yields.
        """
        loader = make_loader(dataset, int(self.batch_size))
        parts: list[tuple[torch.Tensor, ...]] = []
        labels: list[np.ndarray] = []
        try:
            module.to(device).eval()
            with torch.no_grad():
                for batch in loader:
                    x, y = split_batch(batch)
                    x = to_device(x, device)
                    # default_collate turns a tuple of input tensors into a list; models
                    # expect the tuple.
                    x = tuple(x) if isinstance(x, list) else x
                    parts.append(tuple(value.cpu() for value in forward(module, x)))
                    if keep_labels:
                        labels.append(np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y))
        finally:
            module.to("cpu")
        outputs = tuple(torch.cat(values).numpy() for values in zip(*parts))
        return outputs, np.concatenate(labels) if keep_labels else None


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


def _one_item_batch(x: Any) -> Any:
    if isinstance(x, dict):
        return {key: value[None] for key, value in x.items()}
    if isinstance(x, tuple | list):
        return tuple(value[None] for value in x)
    return x[None]


def _describe(x: Any) -> str:
    if isinstance(x, dict):
        return "keys " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in x.items())
    if isinstance(x, tuple | list):
        return "parts of shapes " + ", ".join(str(tuple(v.shape)) for v in x)
    return f"shape {tuple(x.shape)}"


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters of ``module``, trainable or not."""
    return int(sum(p.numel() for p in module.parameters()))
