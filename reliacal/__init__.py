"""reliacal: trustworthy classifier probabilities.

The public names are loaded on first use, so ``import reliacal`` (and the
``reliacal`` command) stays fast: the estimators pull in PyTorch, timm and
transformers only when one of them is touched.

>>> import reliacal
>>> reliacal.TemperatureScaling().get_params()["objective"]
'nll'
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "TemperatureScaling": "reliacal.calibrators",
    "VectorScaling": "reliacal.calibrators",
    "MatrixScaling": "reliacal.calibrators",
    "AdaptiveTS": "reliacal.calibrators",
    "AutoCalibrator": "reliacal.calibrators",
    "PlattScaling": "reliacal.calibrators",
    "IsotonicCalibration": "reliacal.calibrators",
    "BetaCalibration": "reliacal.calibrators",
    "HistogramBinning": "reliacal.calibrators",
    "EnsembleTemperatureScaling": "reliacal.calibrators",
    "StructuredMatrixScaling": "reliacal.calibrators",
    "StructuredVectorScaling": "reliacal.calibrators",
    "QuadraticScaling": "reliacal.calibrators",
    "VennAbersCalibration": "reliacal.calibrators",
    "CenteredIsotonicCalibration": "reliacal.calibrators",
    "SplineCalibration": "reliacal.calibrators",
    "CalibratedClassifier": "reliacal.wrap",
    "CalAttnFinetuner": "reliacal.finetune",
    "DiffusionReconfigurer": "reliacal.finetune",
    "ReliabilityDisplay": "reliacal.plot",
    "calibration_report": "reliacal.metrics",
    "expected_calibration_error": "reliacal.metrics",
    "as_backbone": "reliacal.backbones",
    "load": "reliacal.persistence",
}

__all__ = [*sorted(_PUBLIC), "__version__"]


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'reliacal' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
