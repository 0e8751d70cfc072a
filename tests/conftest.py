"""Shared fixtures of the whole suite: the bundled CIFAR records and the CUDA skip.

Tests take these as pytest fixtures (never ``from conftest import``); a test
that needs a CUDA device is marked ``@pytest.mark.gpu`` and is skipped here
when none is present.
"""

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


def _load_record(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(probabilities, labels)`` of one bundled CIFAR record."""
    with np.load(DATA_DIR / f"{name}.npz") as record:
        return record["predictions"], record["ground_truth"]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def load_record():
    """The loader of the bundled records: ``load_record(name) -> (probabilities, labels)``."""
    return _load_record


@pytest.fixture(params=RECORD_NAMES)
def record_name(request):
    """Each bundled CIFAR record's name in turn."""
    return request.param


@pytest.fixture
def cifar_record(record_name):
    """Each CIFAR record in turn, as ``(name, probabilities, labels)``."""
    probs, labels = _load_record(record_name)
    return record_name, probs, labels
