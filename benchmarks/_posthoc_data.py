"""The data that the post-hoc benchmarks share: the CIFAR records, the digits ViT, the splits.

``posthoc_quality.py`` reports on them and ``adaptive_ts_variants.py`` tunes
on other splits of the same data; both import them from here (a benchmark
script imports helper modules, never another script). The measurement floor
(the ECE a perfectly calibrated model with given probabilities measures on
that many rows) is their common reference for the noise.
"""

from __future__ import annotations

from pathlib import Path

import _common
import numpy as np
from sklearn.model_selection import train_test_split

from reliacal.backbones import as_backbone, extract_outputs
from reliacal.datasets import load_digits_images, train_calibration_test_split
from reliacal.metrics import expected_calibration_error

DATA_DIR = Path(__file__).resolve().parents[1] / "tests" / "data"
RECORDS = (
    "lenet-5-cifar-10",
    "wideresnet-16-4-cifar-10",
    "lenet-5-cifar-100",
    "wideresnet-16-4-cifar-100",
)
CALIBRATION_SIZE = 5000
# Calibration images of each digits split (the other 450 held-out images are the test part).
DIGITS_CALIBRATION_SIZE = 360
# Label draws per split for the measurement floor (see measurement_floor).
FLOOR_DRAWS = 20


def log_probabilities(probabilities: np.ndarray) -> np.ndarray:
    """``log(max(p, tiny))`` in float64: the records hold probabilities, some of them 0."""
    probabilities = probabilities.astype(np.float64)
    return np.log(np.maximum(probabilities, np.finfo(np.float64).tiny))


def measurement_floor(probabilities: np.ndarray, rng: np.random.Generator) -> float:
    """Mean ECE % of a perfectly calibrated model with these probabilities, on this many rows.

    Labels are drawn from the probabilities themselves (``FLOOR_DRAWS`` times), so the
    model is calibrated by construction; what ECE still measures is the binning's
    sampling error. A method whose ECE is near it cannot be told apart from a calibrated one.
    """
    cumulative = np.cumsum(probabilities, axis=1)
    values = []
    for _ in range(FLOOR_DRAWS):
        draws = rng.random((len(probabilities), 1))
        labels = np.minimum((cumulative < draws).sum(axis=1), probabilities.shape[1] - 1)
        values.append(100 * expected_calibration_error(labels, probabilities))
    return float(np.mean(values))


def random_splits(n: int, seeds: range) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Seed -> (calibration, test) rows: the first CALIBRATION_SIZE of a seeded permutation."""
    orders = {seed: np.random.default_rng(seed).permutation(n) for seed in seeds}
    return {seed: (o[:CALIBRATION_SIZE], o[CALIBRATION_SIZE:]) for seed, o in orders.items()}


def digits_outputs(quick: bool, log) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Pooled features, logits and labels of the demo's held-out digits, and the train time."""
    X, y = load_digits_images()
    parts = train_calibration_test_split(X, y, random_state=0)
    model, seconds = _common.train_digits_vit(parts.X_train, parts.y_train, 0, quick=quick)
    log(f"digits ViT trained in {seconds:.1f} s")
    held_out = np.concatenate([parts.X_calibration, parts.X_test])
    labels = np.concatenate([parts.y_calibration, parts.y_test])
    pooled, logits, _ = extract_outputs(as_backbone(model), held_out, device="cpu")
    return pooled.astype(np.float64), logits.astype(np.float64), labels, seconds


def digits_splits(y: np.ndarray, n_calibration: int, seeds: range):
    """Seed -> (calibration, test) rows, stratified by class."""
    indices = np.arange(len(y))
    return {
        seed: tuple(
            train_test_split(indices, train_size=n_calibration, random_state=seed, stratify=y)
        )
        for seed in seeds
    }
