"""Post-hoc calibrators: scikit-learn estimators on logits or a frozen backbone."""

from ._base import BaseCalibrator, ClassLabelMixin, ConvergenceWarning
from .adaptive import AdaptiveTS, AdaptiveTSMember
from .beta import BetaCalibration
from .binning import HistogramBinning
from .ensemble import EnsembleTemperatureScaling
from .isotonic import IsotonicCalibration
from .platt import PlattScaling
from .scaling import MatrixScaling, VectorScaling, tuned_scaling
from .temperature import TemperatureScaling

__all__ = [
    "AdaptiveTS",
    "AdaptiveTSMember",
    "BaseCalibrator",
    "BetaCalibration",
    "ClassLabelMixin",
    "ConvergenceWarning",
    "EnsembleTemperatureScaling",
    "HistogramBinning",
    "IsotonicCalibration",
    "MatrixScaling",
    "PlattScaling",
    "TemperatureScaling",
    "VectorScaling",
    "tuned_scaling",
]
