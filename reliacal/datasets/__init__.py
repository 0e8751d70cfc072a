"""The demo data and the demo's tiny classifier.

Scikit-learn's bundled digits as small images, a tiny timm Vision Transformer
for them, a fixed train / calibration / test split, and the plain
cross-entropy training run (through the shared loop in
:mod:`reliacal.training`). Prediction files written by other tools are read
by :mod:`reliacal.io`; WordNet glosses (a real text task) by
:func:`load_wordnet_glosses`.
"""

from __future__ import annotations

from reliacal.datasets._builtin import (
    DataSplits,
    default_digits_training_config,
    load_digits_images,
    make_logits,
    make_tiny_bert,
    make_tiny_vit,
    train_calibration_test_split,
    train_digits_classifier,
)
from reliacal.datasets._wordnet import load_wordnet_glosses

# Prediction-file reading moved to reliacal.io; these names stay importable from here for
# code written before the move.
from reliacal.io import Predictions, load_prediction_file  # noqa: F401

__all__ = [
    "DataSplits",
    "default_digits_training_config",
    "load_digits_images",
    "load_wordnet_glosses",
    "make_logits",
    "make_tiny_bert",
    "make_tiny_vit",
    "train_calibration_test_split",
    "train_digits_classifier",
]
