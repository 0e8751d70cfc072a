"""What the fine-tuning estimators share: trainer settings and batched inference.

:class:`~reliacal.finetune.CalAttnFinetuner` and
:class:`~reliacal.finetune.DiffusionReconfigurer` take the same training
settings under the same names and run their fitted network over a
``Dataset`` the same way; the method-specific parts stay in their modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from torch import nn
from torch.utils.data import Dataset

from reliacal._data import make_loader, split_batch
from reliacal._device import to_device
from reliacal._torch_estimator import training_config
from reliacal.calibrators import ClassLabelMixin
from reliacal.training import TrainingConfig

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


class FinetuneEstimator(ClassLabelMixin, ClassifierMixin, BaseEstimator):
    """Base of the fine-tuning estimators (private; subclasses define ``__init__``)."""

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


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters of ``module``, trainable or not."""
    return int(sum(p.numel() for p in module.parameters()))
