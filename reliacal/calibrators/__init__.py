"""Post-hoc calibrators: scikit-learn estimators on logits or a frozen backbone."""

from ._base import BaseCalibrator, ClassLabelMixin, ConvergenceWarning
from .adaptive import AdaptiveTS as AdaptiveTS
from .scaling import MatrixScaling, VectorScaling
from .temperature import TemperatureScaling

__all__ = [
    "AdaptiveTS",
    "BaseCalibrator",
    "ClassLabelMixin",
    "ConvergenceWarning",
    "MatrixScaling",
    "TemperatureScaling",
    "VectorScaling",
]
