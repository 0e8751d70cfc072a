"""Post-hoc calibrators: scikit-learn estimators on logits or a frozen backbone."""

from ._base import BaseCalibrator, ClassLabelMixin, ConvergenceWarning
from .adaptive import AdaptiveTS, AdaptiveTSMember
from .scaling import MatrixScaling, VectorScaling, tuned_scaling
from .temperature import TemperatureScaling

__all__ = [
    "AdaptiveTS",
    "AdaptiveTSMember",
    "BaseCalibrator",
    "ClassLabelMixin",
    "ConvergenceWarning",
    "MatrixScaling",
    "TemperatureScaling",
    "VectorScaling",
    "tuned_scaling",
]
