"""Fitted calibrators as PyTorch modules, ready for TorchScript and ONNX.

:func:`calibrator_module` (what ``calibrator.to_torch()`` returns) maps
logits, or probabilities for a calibrator fitted with ``input="probs"``, to
calibrated probabilities; :func:`attach` puts a classifier in front of it,
so that one module goes from raw inputs to calibrated probabilities. Both
trace with ``torch.jit.trace`` and export with ``torch.onnx.export``.

Each calibrator describes its own map (its ``_torch_map`` method, built
from the blocks here: :class:`TemperatureMap`, :class:`LinearLogitMap`,
:class:`EnsembleTemperatureMap`, :class:`OneVsRestMap`,
:class:`TopLabelBinningMap`, :class:`IdentityMap`); this package adds only
what every calibrator shares, the input handling of
:class:`CalibratorModule`.

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

from typing import Any

import torch
from torch import nn

from reliacal.export._modules import (
    CalibratorModule,
    EnsembleTemperatureMap,
    IdentityMap,
    LinearLogitMap,
    OneVsRestMap,
    TemperatureMap,
    TopLabelBinningMap,
    one_vs_rest_log_odds,
    one_vs_rest_probabilities,
)

__all__ = [
    "AttachedCalibrator",
    "CalibratorModule",
    "EnsembleTemperatureMap",
    "IdentityMap",
    "LinearLogitMap",
    "OneVsRestMap",
    "TemperatureMap",
    "TopLabelBinningMap",
    "attach",
    "calibrator_module",
    "one_vs_rest_log_odds",
    "one_vs_rest_probabilities",
]


def calibrator_module(calibrator) -> CalibratorModule:
    """A fitted calibrator as an ``nn.Module`` (what ``calibrator.to_torch()`` returns).

    The module maps the calibrator's ``X`` (logits ``(n, K)``, or
    probabilities when it was fitted with ``input="probs"``; AdaptiveTS with
    ``n_logits`` takes its features followed by the logits) to calibrated
    probabilities, float64 ``(n, K)``, equal to ``predict_proba`` to float64
    rounding. 1-D binary scores are not taken: pass both columns. Inputs
    that ``predict_proba`` refuses are refused too (another number of
    columns), or give NaN rows (a row holding NaN or an infinity). The
    module is in eval mode and holds copies of the fitted parameters as
    buffers.

    The map is the calibrator's own (its ``_torch_map()``); the rule for the
    logs of probabilities is its ``_float64_probability_logs`` attribute.

    Parameters
    ----------
    calibrator : fitted calibrator
        TemperatureScaling, VectorScaling, MatrixScaling (Dirichlet with
        ``input="probs"``), EnsembleTemperatureScaling, AdaptiveTS
        (``n_draws=1``), PlattScaling, BetaCalibration, IsotonicCalibration,
        HistogramBinning, AutoCalibrator, or any estimator with a
        ``_torch_map`` method.

    Returns
    -------
    CalibratorModule

    Raises
    ------
    ValueError
        For an estimator without a torch map, or an AdaptiveTS that samples
        (``n_draws > 1``) or reads a backbone's features.
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(calibrator, "classes_")
    torch_map = getattr(calibrator, "_torch_map", None)
    if torch_map is None:
        raise ValueError(
            f"{type(calibrator).__name__} has no torch module: to_torch() covers estimators "
            "that describe their map (_torch_map), as reliacal's post-hoc calibrators do"
        )
    n_classes = len(calibrator.classes_)
    # Columns of X beyond the logits (before them) are features: AdaptiveTS with n_logits.
    # A calibrator fitted on 1-D binary scores (n_features_in_ = 1) takes both columns.
    n_columns = max(int(getattr(calibrator, "n_features_in_", n_classes)), n_classes)
    module = CalibratorModule(
        torch_map(),
        n_classes=n_classes,
        n_features=n_columns - n_classes,
        probabilities=getattr(calibrator, "input", "logits") == "probs",
        float64_logs=bool(getattr(calibrator, "_float64_probability_logs", False)),
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


def _adapter_for(model: nn.Module, calibrator: Any) -> nn.Module | None:
    """The backbone adapter that reads ``model``'s logits as the calibrator saw them, if any.

    The calibrator's own fitted adapter when it wraps ``model``; else the
    adapter of a family the adapters know (timm, Hugging Face: a text model's
    attention mask comes from its pad token there, not from ``model(ids)``);
    None for a plain module, whose output is its logits.
    """
    from reliacal.backbones import BackboneAdapter, as_backbone

    fitted = getattr(calibrator, "backbone_", None)
    if isinstance(fitted, BackboneAdapter) and fitted.model is model:
        return fitted
    if isinstance(model, BackboneAdapter):
        return model
    try:
        return as_backbone(model)
    except ValueError:  # a plain module, or a transformers model the adapters do not know
        return None


class AttachedCalibrator(nn.Module):
    """``calibrator(logits(model, x))``: raw inputs to calibrated probabilities (see :func:`attach`).

    The logits are what ``adapter`` reads when one is given (the model's
    backbone adapter), else the model's output.
    """

    def __init__(self, model: nn.Module, calibrator: nn.Module, adapter: nn.Module | None = None):
        super().__init__()
        self.model = model
        self.calibrator = calibrator
        # The adapter wraps `model` itself: kept out of the registered submodules, so that
        # the state dict holds the model's tensors once.
        object.__setattr__(self, "adapter", adapter)

    def train(self, mode: bool = True) -> AttachedCalibrator:
        super().train(mode)
        if self.adapter is not None:
            self.adapter.train(mode)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.adapter is not None:
            return self.calibrator(self.adapter(x).logits)
        return self.calibrator(_logits_of(self.model(x)))


def attach(model: nn.Module, calibrator) -> AttachedCalibrator:
    """One module from the classifier's raw inputs to calibrated probabilities.

    The model's logits are read as the calibrator read them: through its
    fitted backbone adapter (``backbone=``), or the adapter of the model's
    family (timm, Hugging Face: a text model's padding is masked as the
    adapter masks it), else as the model's output.

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
        torch module, or reads feature columns besides the logits (which a
        model that gives only the logits cannot feed).
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    module = calibrator if isinstance(calibrator, nn.Module) else calibrator_module(calibrator)
    n_features = getattr(module, "n_features", 0)
    if n_features:
        raise ValueError(
            f"this calibrator reads {n_features} feature columns besides the logits (X holds "
            "features and logits side by side): attach feeds it only the model's logits; "
            "export calibrator.to_torch() and give it the features and logits together"
        )
    adapter = _adapter_for(model, None if isinstance(calibrator, nn.Module) else calibrator)
    return AttachedCalibrator(model, module, adapter).eval()
