"""Shared test fixtures: the bundled CIFAR records and the CUDA skip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

DATA_DIR = Path(__file__).parent / "data"
RECORD_NAMES = (
    "lenet-5-cifar-10",
    "wideresnet-16-4-cifar-10",
    "lenet-5-cifar-100",
    "wideresnet-16-4-cifar-100",
)


def load_record(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(probabilities, labels)`` of one bundled CIFAR record."""
    with np.load(DATA_DIR / f"{name}.npz") as record:
        return record["predictions"], record["ground_truth"]


@pytest.fixture(params=RECORD_NAMES)
def cifar_record(request):
    """Each CIFAR record in turn, as ``(name, probabilities, labels)``."""
    probs, labels = load_record(request.param)
    return request.param, probs, labels


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
