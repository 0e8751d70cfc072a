"""Post-hoc calibrators: scikit-learn estimators on logits or a frozen backbone.

The names are loaded on first use: :class:`AdaptiveTS` trains a network and pulls
in PyTorch, which the other calibrators, fitted on numpy logits, never need.

The table of methods names each calibrator by a short name (``"temperature"``,
``"isotonic"``, ...) for the command, :class:`~reliacal.CalibratedClassifier`,
:class:`AutoCalibrator`'s default candidates and the demo:
:func:`calibration_methods` lists them, :func:`make_calibrator` builds one, and
:func:`describe_methods` words them for a help text.

>>> from reliacal.calibrators import TemperatureScaling, make_calibrator
>>> TemperatureScaling().get_params()["objective"]
'nll'
>>> make_calibrator("isotonic")
IsotonicCalibration()
"""

from __future__ import annotations

import importlib

from reliacal.calibrators._methods import (
    CalibrationMethod,
    Candidate,
    calibration_methods,
    describe_methods,
    make_calibrator,
)

# Name -> module, imported on first use: the calibrators of the table of methods, and the
# parts shared by the calibrators.
_PUBLIC = {
    **{method.calibrator: method.module for method in calibration_methods().values()},
    "AdaptiveTSMember": "adaptive",
    "BackboneSaveMixin": "_backbone_saving",
    "BaseCalibrator": "_base",
    "ClassLabelMixin": "_base",
    "ConvergenceWarning": "_base",
    "tuned_scaling": "scaling",
}
_TABLE_NAMES = {
    "CalibrationMethod": CalibrationMethod,
    "Candidate": Candidate,
    "calibration_methods": calibration_methods,
    "describe_methods": describe_methods,
    "make_calibrator": make_calibrator,
}

__all__ = sorted([*_PUBLIC, *_TABLE_NAMES])


def __getattr__(name: str):
    if name in _PUBLIC:
        module = importlib.import_module(f"{__name__}.{_PUBLIC[name]}")
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
