"""Fitted calibrators as PyTorch modules, ready for TorchScript and ONNX.

:func:`calibrator_module` (what ``calibrator.to_torch()`` returns) maps
logits, or probabilities for a calibrator fitted with ``input="probs"``, to
calibrated probabilities; :func:`attach` puts a classifier in front of it,
so that one module goes from raw inputs to calibrated probabilities. Both
trace with ``torch.jit.trace`` and export with ``torch.onnx.export``.

Examples
--------
>>> import numpy as np, torch
>>> from reliacal.calibrators import VectorScaling
>>> from reliacal.export import attach
>>> rng = np.random.default_rng(0)
>>> features = rng.normal(size=(300, 4))
>>> classifier = torch.nn.Linear(4, 3).double()
>>> with torch.no_grad():
...     logits = classifier(torch.as_tensor(features)).numpy()
>>> y = logits.argmax(axis=1)
>>> calibrator = VectorScaling().fit(logits, y)
>>> deployed = attach(classifier, calibrator)
>>> with torch.no_grad():
...     out = deployed(torch.as_tensor(features[:4])).numpy()
>>> bool(np.allclose(out, calibrator.predict_proba(logits[:4]), atol=1e-12))
True
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from reliacal.export._modules import (
    AdaptiveTemperatureMap,
    CalibratorModule,
    EnsembleTemperatureMap,
    IdentityMap,
    LinearLogitMap,
    OneVsRestMap,
    TemperatureMap,
    TopLabelBinningMap,
    _isotonic_breakpoints,
)

__all__ = ["AttachedCalibrator", "attach", "calibrator_module"]


def _check_fitted(calibrator) -> None:
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(calibrator, "classes_")


def _one_vs_rest_core(calibrator, n_classes: int) -> nn.Module:
    name = type(calibrator).__name__
    if name == "PlattScaling":
        return OneVsRestMap(
            "platt", n_classes, coef=calibrator.coef_, intercept=calibrator.intercept_
        )
    if name == "BetaCalibration":
        return OneVsRestMap(
            "beta", n_classes, coef=calibrator.coef_, intercept=calibrator.intercept_
        )
    if name == "IsotonicCalibration":
        knots = [_isotonic_breakpoints(x, y) for x, y in zip(calibrator.knots_, calibrator.values_)]
        return OneVsRestMap("isotonic", n_classes, knots=knots)
    if calibrator.mode == "top-label":  # HistogramBinning
        return TopLabelBinningMap(calibrator.edges_[0], calibrator.values_[0])
    return OneVsRestMap(
        "binning", n_classes, knots=list(zip(calibrator.edges_, calibrator.values_))
    )


def _core(calibrator) -> nn.Module:
    """The map of float64 logits to probabilities of a fitted calibrator."""
    name = type(calibrator).__name__
    n_classes = len(calibrator.classes_)
    if name == "_Identity":
        return IdentityMap()
    if name == "TemperatureScaling":
        return TemperatureMap(calibrator.temperature_)
    if name in ("VectorScaling", "MatrixScaling"):
        return LinearLogitMap(calibrator.coef_, calibrator.intercept_)
    if name == "EnsembleTemperatureScaling":
        return EnsembleTemperatureMap(calibrator.temperature_, calibrator.weights_)
    if name in ("PlattScaling", "BetaCalibration", "IsotonicCalibration", "HistogramBinning"):
        return _one_vs_rest_core(calibrator, n_classes)
    if name == "AdaptiveTS":
        return _adaptive_module(calibrator, probabilities=False)
    if name == "AutoCalibrator":
        return _core(calibrator.best_estimator_)
    raise ValueError(
        f"{name} has no torch module: to_torch() covers reliacal's post-hoc calibrators"
    )


def _adaptive_module(calibrator, *, probabilities: bool) -> AdaptiveTemperatureMap:
    if calibrator.n_draws != 1:
        raise ValueError(
            f"AdaptiveTS(n_draws={calibrator.n_draws}) averages random draws of the latent "
            "code at predict time, which a deterministic exported graph cannot reproduce; "
            "set n_draws=1 (the posterior mean) before to_torch()"
        )
    if calibrator.backbone is not None:
        raise ValueError(
            "AdaptiveTS fitted with a backbone reads the backbone's pooled features, which "
            "to_torch() cannot reach; fit it on the features and logits (n_logits=K) instead"
        )
    networks = [copy.deepcopy(member.network).cpu().eval() for member in calibrator.members_]
    return AdaptiveTemperatureMap(
        networks,
        calibrator.feature_mean_,
        calibrator.feature_scale_,
        n_logits=len(calibrator.classes_),
        has_features=calibrator.n_logits is not None,
        probabilities=probabilities,
    )


def calibrator_module(calibrator) -> nn.Module:
    """A fitted calibrator as an ``nn.Module`` (what ``calibrator.to_torch()`` returns).

    The module maps the calibrator's ``X`` (logits ``(n, K)``, or
    probabilities when it was fitted with ``input="probs"``; AdaptiveTS with
    ``n_logits`` takes its features followed by the logits) to calibrated
    probabilities, float64 ``(n, K)``, equal to ``predict_proba`` to float64
    rounding. 1-D binary scores are not taken: pass both columns. The module
    is in eval mode and holds copies of the fitted parameters as buffers.

    Parameters
    ----------
    calibrator : fitted calibrator
        TemperatureScaling, VectorScaling, MatrixScaling (Dirichlet with
        ``input="probs"``), EnsembleTemperatureScaling, AdaptiveTS
        (``n_draws=1``), PlattScaling, BetaCalibration, IsotonicCalibration,
        HistogramBinning or AutoCalibrator.

    Returns
    -------
    torch.nn.Module

    Raises
    ------
    ValueError
        For another estimator, or an AdaptiveTS that samples (``n_draws >
        1``) or reads a backbone's features.
    """
    _check_fitted(calibrator)
    probabilities = calibrator.input == "probs"
    if type(calibrator).__name__ == "AdaptiveTS":
        return _adaptive_module(calibrator, probabilities=probabilities).eval()
    # The classic calibrators take float64 logs of probabilities, the others logs in the
    # input's precision (BaseCalibrator._probabilities_to_logits and its override).
    from reliacal.calibrators._classic import ClassicCalibrator

    float64_logs = isinstance(calibrator, ClassicCalibrator)
    module = CalibratorModule(
        _core(calibrator), probabilities=probabilities, float64_logs=float64_logs
    )
    return module.eval()


def _logits_of(outputs):
    """The logits tensor of a classifier's outputs (a tensor, ``.logits`` or ``["logits"]``)."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, dict):
        return outputs["logits"]
    logits = getattr(outputs, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(outputs, tuple | list):
        return outputs[0]
    raise ValueError(
        f"the model returned {type(outputs).__name__}; attach needs a tensor of logits, "
        "an output with .logits, or a tuple whose first entry is the logits"
    )


class AttachedCalibrator(nn.Module):
    """``calibrator(model(x))``: raw inputs to calibrated probabilities (see :func:`attach`)."""

    def __init__(self, model: nn.Module, calibrator: nn.Module):
        super().__init__()
        self.model = model
        self.calibrator = calibrator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.calibrator(_logits_of(self.model(x)))


def attach(model: nn.Module, calibrator) -> AttachedCalibrator:
    """One module from the classifier's raw inputs to calibrated probabilities.

    Parameters
    ----------
    model : torch.nn.Module
        The classifier whose outputs the calibrator was fitted on: logits
        (a tensor, a Hugging Face output's ``.logits``, or a tuple's first
        entry), or probabilities for ``input="probs"``.
    calibrator : fitted calibrator or torch.nn.Module
        A reliacal calibrator (its :func:`calibrator_module` is used) or a
        module that :func:`calibrator_module` returned.

    Returns
    -------
    AttachedCalibrator
        In eval mode; ``model`` is shared, not copied.

    Raises
    ------
    ValueError
        When ``model`` is not an ``nn.Module``, or the calibrator has no
        torch module (an AdaptiveTS that reads features besides the logits
        cannot sit behind a model that gives only the logits).
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(calibrator, nn.Module):
        if getattr(calibrator, "n_logits", None) is not None:
            raise ValueError(
                "this AdaptiveTS reads features besides the logits (n_logits is set): attach "
                "feeds it only the model's logits; export calibrator.to_torch() and give it "
                "the features and logits side by side"
            )
        calibrator = calibrator_module(calibrator)
    return AttachedCalibrator(model, calibrator).eval()
