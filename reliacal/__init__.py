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

from reliacal._version import __version__
from reliacal.calibrators import calibration_methods

# Name -> module, imported on first use. Every calibrator of the table of methods (reading
# the table imports no calibrator).
_PUBLIC = {
    **{method.calibrator: "reliacal.calibrators" for method in calibration_methods().values()},
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
