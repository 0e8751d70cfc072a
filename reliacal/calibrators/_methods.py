"""The table of calibration methods: one row per name, read by every part that offers a choice.

The command's ``--method``, :class:`~reliacal.CalibratedClassifier`'s
``method=``, :class:`~reliacal.calibrators.AutoCalibrator`'s default
candidates, the demo's post-hoc rows and the lazy-import tables of
``reliacal`` and ``reliacal.calibrators`` are all built from :data:`_TABLE`.
Adding a calibrator is its own module plus one row here.

The rows name classes by module and class name and import them only in
:func:`make_calibrator`, so reading the table imports nothing (not numpy,
not PyTorch).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

__all__ = [
    "CalibrationMethod",
    "Candidate",
    "calibration_methods",
    "describe_methods",
    "make_calibrator",
]

_NO_PARAMETERS: Mapping[str, Any] = MappingProxyType({})


class Candidate(NamedTuple):
    """How a method takes part in :class:`AutoCalibrator`'s default choice.

    Attributes
    ----------
    parameters : mapping, default={}
        Parameters of the candidate, over the method's own.
    max_classes : int or None, default=None
        Tried only up to this many classes (None: any).
    min_classes : int or None, default=None
        Tried only from this many classes up (None: any).
    min_rows : int or None, default=None
        Tried only from this many calibration rows up (None: any).

    Examples
    --------
    >>> Candidate(max_classes=20).applies(n_samples=100, n_classes=21)
    False
    >>> Candidate(min_classes=3).applies(n_samples=100, n_classes=2)
    False
    """

    parameters: Mapping[str, Any] = _NO_PARAMETERS
    max_classes: int | None = None
    min_rows: int | None = None
    min_classes: int | None = None

    def applies(self, n_samples: int, n_classes: int) -> bool:
        """Whether the candidate is tried on ``n_samples`` rows of ``n_classes`` classes."""
        if self.max_classes is not None and n_classes > self.max_classes:
            return False
        if self.min_classes is not None and n_classes < self.min_classes:
            return False
        return self.min_rows is None or n_samples >= self.min_rows


class CalibrationMethod(NamedTuple):
    """One row of the table of methods.

    Attributes
    ----------
    name : str
        The method's name (``--method``, ``CalibratedClassifier(method=)``).
    calibrator : str
        The class, in ``reliacal.calibrators``.
    module : str
        The submodule of ``reliacal.calibrators`` that defines it.
    description : str
        A phrase for help texts.
    parameters : mapping, default={}
        Parameters the name stands for, over the class defaults.
    seeded : bool, default=False
        The class takes ``random_state``; callers with a seed of their own
        (the demo, AutoCalibrator) pass it.
    reads_features : bool, default=False
        The class can read pooled features beside the logits, ``X =
        [features, logits]`` with ``n_logits=K`` (the demo gives them).
    tuned : bool, default=False
        Its regularisation is chosen by cross-validated NLL
        (:func:`~reliacal.calibrators.tuned_scaling`) unless the user gives it.
    candidate : Candidate or None, default=None
        Its part in AutoCalibrator's default candidates (None: not one).
    demo : str or None, default=None
        Its row name in the demo's report (None: not in the demo).
    command : bool, default=True
        Offered by ``reliacal calibrate --method``.
    classifier_scores : bool, default=False
        A name that scikit-learn's ``CalibratedClassifierCV`` has too, for
        a one-vs-rest map: :class:`~reliacal.CalibratedClassifier` fits it
        as scikit-learn does, one binary map per column of the classifier's
        ``decision_function`` or ``predict_proba``, rather than on its logits.

    Examples
    --------
    >>> method = calibration_methods()["matrix"]
    >>> method.calibrator, method.tuned, method.candidate.max_classes
    ('MatrixScaling', True, 20)
    """

    name: str
    calibrator: str
    module: str
    description: str
    parameters: Mapping[str, Any] = _NO_PARAMETERS
    seeded: bool = False
    reads_features: bool = False
    tuned: bool = False
    candidate: Candidate | None = None
    demo: str | None = None
    command: bool = True
    classifier_scores: bool = False


def _parameters(**values: Any) -> Mapping[str, Any]:
    return MappingProxyType(values)


# One row per method, in the order that the command's help, the demo and the candidates keep.
_TABLE = (
    CalibrationMethod(
        "temperature",
        "TemperatureScaling",
        "temperature",
        "TemperatureScaling: one temperature for all logits",
        candidate=Candidate(),
        demo="TemperatureScaling",
    ),
    CalibrationMethod(
        "vector",
        "VectorScaling",
        "scaling",
        "VectorScaling: a scale and an intercept per class",
        tuned=True,
        candidate=Candidate(),
        demo="VectorScaling",
    ),
    CalibrationMethod(
        "matrix",
        "MatrixScaling",
        "scaling",
        "MatrixScaling: a linear map of the logits; on log-probabilities, Dirichlet calibration",
        tuned=True,
        # ODIR (Kull et al. 2019): the off-diagonal and bias penalties keep the K^2
        # parameters from over-fitting a small calibration split; past 20 classes the
        # candidate costs more than it gains.
        candidate=Candidate(_parameters(reg_off_diagonal=1.0, reg_bias=1.0), max_classes=20),
        demo="MatrixScaling (ODIR)",
    ),
    CalibrationMethod(
        "svs",
        "StructuredVectorScaling",
        "structured",
        "StructuredVectorScaling: temperature scaling, then a scale and an intercept per class "
        "under size-scaled ridge penalties",
        # On two classes a penalised VS, already a candidate: one more near-copy only adds
        # selection noise to the cross-validated choice (benchmarks/results/decisions.md).
        candidate=Candidate(min_classes=3),
        demo="StructuredVectorScaling",
    ),
    CalibrationMethod(
        "sms",
        "StructuredMatrixScaling",
        "structured",
        "StructuredMatrixScaling: temperature scaling, then a linear map of the logits under "
        "size-scaled ridge penalties",
        # On two classes a penalised MS (see svs).
        candidate=Candidate(min_classes=3),
        demo="StructuredMatrixScaling",
    ),
    CalibrationMethod(
        "platt",
        "PlattScaling",
        "platt",
        "PlattScaling: a logistic map of the log-odds of each class, maximum likelihood",
    ),
    CalibrationMethod(
        "sigmoid",
        "PlattScaling",
        "platt",
        "scikit-learn's sigmoid: Platt's smoothed targets",
        parameters=_parameters(target_smoothing=True),
        command=False,
        classifier_scores=True,
    ),
    CalibrationMethod(
        "isotonic",
        "IsotonicCalibration",
        "isotonic",
        "IsotonicCalibration: a non-decreasing step map per class",
        candidate=Candidate(),
        classifier_scores=True,
    ),
    CalibrationMethod(
        "quadratic",
        "QuadraticScaling",
        "quadratic",
        "QuadraticScaling: a logistic map of the log-odds and their square, per class",
    ),
    CalibrationMethod(
        "beta",
        "BetaCalibration",
        "beta",
        "BetaCalibration: a beta map of each class's probability",
    ),
    CalibrationMethod(
        "histogram",
        "HistogramBinning",
        "binning",
        "HistogramBinning: the label frequency of equal-mass bins",
    ),
    CalibrationMethod(
        "cir",
        "CenteredIsotonicCalibration",
        "cir",
        "CenteredIsotonicCalibration: an increasing piecewise-linear map per class",
    ),
    CalibrationMethod(
        "spline",
        "SplineCalibration",
        "spline",
        "SplineCalibration: a penalised cubic spline of the log-odds per class",
        seeded=True,
    ),
    CalibrationMethod(
        "venn-abers",
        "VennAbersCalibration",
        "venn_abers",
        "VennAbersCalibration: inductive Venn-Abers, with the interval [p0, p1]",
        seeded=True,
    ),
    CalibrationMethod(
        "ets",
        "EnsembleTemperatureScaling",
        "ensemble",
        "EnsembleTemperatureScaling: a temperature mixed with the raw and uniform probabilities",
        candidate=Candidate(),
    ),
    CalibrationMethod(
        "adaptive",
        "AdaptiveTS",
        "adaptive",
        "AdaptiveTS: a temperature per sample, seed 0",
        # Seeded by default, so that the command and the wrapper are repeatable.
        parameters=_parameters(random_state=0),
        seeded=True,
        reads_features=True,
        # A network: below 5000 rows it over-fits what temperature scaling does well.
        candidate=Candidate(_parameters(n_members=1), min_rows=5000),
        demo="AdaptiveTS",
    ),
    CalibrationMethod(
        "auto",
        "AutoCalibrator",
        "auto",
        "AutoCalibrator: the best of several by 5-fold cross-validated NLL, the "
        "uncalibrated model unless one beats it",
        seeded=True,
    ),
)

_METHODS: Mapping[str, CalibrationMethod] = MappingProxyType(
    {method.name: method for method in _TABLE}
)


def calibration_methods() -> Mapping[str, CalibrationMethod]:
    """The table of methods: name -> :class:`CalibrationMethod`, in the table's order.

    Returns
    -------
    mapping of str to CalibrationMethod
        Read-only.

    Examples
    --------
    >>> from reliacal.calibrators import calibration_methods
    >>> list(calibration_methods())[:3]
    ['temperature', 'vector', 'matrix']
    >>> calibration_methods()["sigmoid"].parameters["target_smoothing"]
    True
    """
    return _METHODS


def _method(name: str) -> CalibrationMethod:
    try:
        return _METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown calibration method {name!r}; the methods are {', '.join(_METHODS)}"
        ) from None


def make_calibrator(name: str, **params: Any):
    """A new, unfitted calibrator of method ``name``.

    Parameters
    ----------
    name : str
        A name of :func:`calibration_methods`, e.g. ``"temperature"``.
    **params
        Parameters of the calibrator, over those the name stands for (e.g.
        ``input="probs"``).

    Returns
    -------
    estimator
        The method's class, built with its ``parameters`` updated by ``params``
        (the class is imported on this call: PyTorch only for AdaptiveTS).

    Examples
    --------
    >>> from reliacal.calibrators import make_calibrator
    >>> make_calibrator("sigmoid", input="probs")
    PlattScaling(input='probs', target_smoothing=True)
    """
    method = _method(name)
    module = importlib.import_module(f"reliacal.calibrators.{method.module}")
    return getattr(module, method.calibrator)(**{**method.parameters, **params})


def describe_methods(names: Iterable[str] | None = None) -> str:
    """The methods ``names`` (default: all), each with its description, for a help text.

    Examples
    --------
    >>> from reliacal.calibrators import describe_methods
    >>> print(describe_methods(["temperature", "beta"]))
    temperature (TemperatureScaling: one temperature for all logits), beta
    (BetaCalibration: a beta map of each class's probability)
    """
    chosen = list(_METHODS) if names is None else list(names)
    return ", ".join(f"{name} ({_method(name).description})" for name in chosen)
