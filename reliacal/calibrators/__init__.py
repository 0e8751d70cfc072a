"""Post-hoc calibrators: scikit-learn estimators on logits or a frozen backbone.

The names are loaded on first use: :class:`AdaptiveTS` trains a network and pulls
in PyTorch, which the other calibrators, fitted on numpy logits, never need.

>>> from reliacal.calibrators import TemperatureScaling
>>> TemperatureScaling().get_params()["objective"]
'nll'
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "AdaptiveTS": "adaptive",
    "AdaptiveTSMember": "adaptive",
    "AutoCalibrator": "auto",
    "BaseCalibrator": "_base",
    "BetaCalibration": "beta",
    "CenteredIsotonicCalibration": "cir",
    "ClassLabelMixin": "_base",
    "ConvergenceWarning": "_base",
    "EnsembleTemperatureScaling": "ensemble",
    "HistogramBinning": "binning",
    "IsotonicCalibration": "isotonic",
    "MatrixScaling": "scaling",
    "PlattScaling": "platt",
    "QuadraticScaling": "quadratic",
    "SplineCalibration": "spline",
    "StructuredMatrixScaling": "structured",
    "StructuredVectorScaling": "structured",
    "TemperatureScaling": "temperature",
    "VectorScaling": "scaling",
    "VennAbersCalibration": "venn_abers",
    "tuned_scaling": "scaling",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        module = importlib.import_module(f"{__name__}.{_PUBLIC[name]}")
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
