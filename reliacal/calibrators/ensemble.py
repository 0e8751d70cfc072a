"""Ensemble temperature scaling (Zhang, Kailkhura and Han, 2020)."""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.special import log_softmax, softmax
from sklearn.utils._param_validation import Interval

from ._base import BaseCalibrator
from ._classic import ClassicCalibrator
from .temperature import TemperatureScaling

__all__ = ["EnsembleTemperatureScaling"]

# Newton on the weights stops once the decrement (predicted NLL reduction) is this small.
_DECREMENT = 1e-20
_MAX_NEWTON = 100


def _mixture_nll(weights, components, sample_weight) -> float:
    with np.errstate(divide="ignore"):
        return float(-(sample_weight @ np.log(components @ weights)))


def _interior_newton(components, sample_weight):
    """Newton on ``(w_1, w_2)`` (``w_3 = 1 - w_1 - w_2``) from the centre, kept strictly inside.

    Returns ``(weights, converged)``: converged means a stationary point
    inside the simplex, which is the minimum (the NLL is convex in ``w``).
    """
    # d/dw_j of w . q with w_3 eliminated.
    directions = components[:, :2] - components[:, 2:]
    parameters = np.full(2, 1.0 / 3.0)

    def full(point):
        return np.array([point[0], point[1], 1.0 - point[0] - point[1]])

    loss = _mixture_nll(full(parameters), components, sample_weight)
    for _ in range(_MAX_NEWTON):
        mixture = components @ full(parameters)
        ratio = directions / mixture[:, None]
        gradient = -(sample_weight @ ratio)
        hessian = (ratio * sample_weight[:, None]).T @ ratio
        try:
            step = -np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            return full(parameters), False
        decrement = -float(gradient @ step)
        if not decrement > 0:
            return full(parameters), decrement == 0
        scale = 1.0
        while scale > 1e-12:
            candidate = parameters + scale * step
            point = full(candidate)
            if np.all(point > 0):
                candidate_loss = _mixture_nll(point, components, sample_weight)
                if candidate_loss <= loss - 0.25 * scale * decrement:
                    break
            scale *= 0.5
        else:
            # Blocked by the boundary (or float64 resolution): leave it to the edges.
            return full(parameters), False
        parameters, loss = candidate, candidate_loss
        if decrement <= _DECREMENT and scale == 1.0:
            return full(parameters), True
    return full(parameters), False


def _edge_minimum(components, sample_weight, start: int, end: int) -> np.ndarray:
    """Minimum of the NLL on the edge ``(1 - t) e_start + t e_end`` of the simplex.

    The derivative in ``t`` increases with ``t`` (convexity); its root is
    found by Newton steps kept inside a bisection bracket.
    """
    a, b = components[:, start], components[:, end]
    difference = b - a

    def point(t):
        weights = np.zeros(3)
        weights[start], weights[end] = 1.0 - t, t
        return weights

    def derivatives(t):
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = difference / (a + t * difference)
        return -float(sample_weight @ ratio), float(sample_weight @ ratio**2)

    low, high = 0.0, 1.0
    slope_low, _ = derivatives(low)
    if not slope_low < 0:
        return point(low)
    slope_high, _ = derivatives(high)
    if not slope_high > 0:
        return point(high)
    t = 0.5
    for _ in range(200):
        slope, curvature = derivatives(t)
        if slope < 0:
            low = t
        else:
            high = t
        candidate = t - slope / curvature if curvature > 0 else 0.5 * (low + high)
        if not low < candidate < high:
            candidate = 0.5 * (low + high)
        if abs(candidate - t) <= 1e-15 or high - low <= 1e-15:
            return point(candidate)
        t = candidate
    return point(t)


def fit_mixture_weights(components, sample_weight) -> np.ndarray:
    """Simplex weights ``w`` minimising ``-sum_i v_i log(w . q_i)``; ``q_i`` a row of ``components``.

    The objective is convex in ``w``: a stationary point inside the simplex is
    the minimum; otherwise the minimum lies on an edge, and the best of the
    three edge minima is taken.

    Examples
    --------
    >>> import numpy as np
    >>> q = np.array([[0.9, 0.5, 0.1], [0.8, 0.5, 0.1], [0.2, 0.5, 0.1]])
    >>> fit_mixture_weights(q, np.full(3, 1 / 3)).round(6)
    array([0.631921, 0.368079, 0.      ])
    """
    weights, converged = _interior_newton(components, sample_weight)
    if converged:
        return weights
    candidates = [weights] + [
        _edge_minimum(components, sample_weight, start, end)
        for start, end in ((0, 1), (0, 2), (1, 2))
    ]
    losses = [_mixture_nll(candidate, components, sample_weight) for candidate in candidates]
    return candidates[int(np.nanargmin(losses))]


class EnsembleTemperatureScaling(ClassicCalibrator):
    r"""Ensemble temperature scaling: ``w_1 softmax(z / T) + w_2 softmax(z) + w_3 / K``.

    Zhang, Kailkhura and Han, "Mix-n-Match: Ensemble and Compositional
    Methods for Uncertainty Calibration in Deep Learning", ICML 2020. The
    temperature ``T`` is that of :class:`TemperatureScaling` (the NLL
    optimum); the weights ``w`` (non-negative, summing to 1) then minimise
    the (weighted) NLL of the mixture on the same calibration data. The NLL
    is convex in ``w``, and the fit reaches its minimum on the simplex to
    float64 precision (Newton's method inside, one-dimensional Newton on the
    edges). The paper fits the weights by squared error as well; only the
    NLL is offered here.

    Parameters
    ----------
    tol : float, default=1e-6
        ``tol`` of the :class:`TemperatureScaling` fit.
    max_iter : int, default=100
        ``max_iter`` of the :class:`TemperatureScaling` fit.
    input : {"logits", "probs"}, default="logits"
        ``"probs"``: ``X`` holds probabilities (1-D: of the positive class).
    classes : array-like of shape (K,), default=None
        Label of each column of ``X`` (default ``0..K-1``).
    backbone : model, BackboneAdapter or str, default=None
        Calibrate this frozen classifier; ``X`` then holds its raw inputs.
    batch_size : int, default=256
        Backbone batch size.
    device : str or torch.device, default="auto"
        Backbone device.
    mixed_precision : bool, default=False
        Backbone autocast on CUDA.
    memory : joblib.Memory, str or path, default=None
        Cache of the backbone outputs.
    verbose : int, default=0
        Progress output of the backbone pass.

    Attributes
    ----------
    temperature_ : float
        The temperature ``T`` of the first component.
    weights_ : ndarray of shape (3,)
        ``(w_1, w_2, w_3)``: temperature-scaled, uncalibrated, uniform.
    n_iter_ : int
        Passes over the data of the temperature fit.
    classes_ : ndarray of shape (K,)
        Label of each column.
    n_features_in_ : int
        Number of columns of ``X`` (1 for 1-D binary scores).

    See Also
    --------
    TemperatureScaling : the first component alone.

    Notes
    -----
    Input forms: logits ``(n, K)``; probabilities with ``input="probs"``
    (their logs are the logits); or 1-D binary scores ``(n,)``, each the
    logit (log-odds) of the positive class ``classes_[1]`` (with
    ``input="probs"``: its probability). ``decision_function`` returns the
    log of the calibrated probabilities. The ``check_estimator`` checks
    waived by design are those of every logit calibrator
    (``_expected_failed_checks()`` lists them with reasons), and
    ``check_classifiers_one_label``, since like temperature scaling the
    mixture keeps the predicted class.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators import EnsembleTemperatureScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=500)
    >>> logits = 3.0 * (np.eye(3)[y] + rng.normal(size=(500, 3)))  # overconfident
    >>> ets = EnsembleTemperatureScaling().fit(logits, y)
    >>> round(ets.temperature_, 3), ets.weights_.round(3)
    (2.723, array([1., 0., 0.]))
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        *,
        tol: float = 1e-6,
        max_iter: int = 100,
        input: str = "logits",
        classes=None,
        backbone=None,
        batch_size: int = 256,
        device="auto",
        mixed_precision: bool = False,
        memory=None,
        verbose: int = 0,
    ):
        self.tol = tol
        self.max_iter = max_iter
        self.input = input
        self.classes = classes
        self.backbone = backbone
        self.batch_size = batch_size
        self.device = device
        self.mixed_precision = mixed_precision
        self.memory = memory
        self.verbose = verbose

    def _components(self, logits, y_index=None):
        """Per sample the three components' probabilities: of ``y`` if given, else all."""
        logits = np.asarray(logits, dtype=np.float64)
        if y_index is None:
            return softmax(logits / self.temperature_, axis=1), softmax(logits, axis=1)
        rows = np.arange(logits.shape[0])
        scaled = log_softmax(logits / self.temperature_, axis=1)[rows, y_index]
        plain = log_softmax(logits, axis=1)[rows, y_index]
        uniform = np.full(logits.shape[0], 1.0 / logits.shape[1])
        return np.column_stack([np.exp(scaled), np.exp(plain), uniform])

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        scaling = TemperatureScaling(tol=self.tol, max_iter=self.max_iter)
        with warnings.catch_warnings():
            # This fit has already warned about logits that look like probabilities.
            warnings.filterwarnings("ignore", "look like probabilities", UserWarning)
            scaling.fit(logits, y_index, sample_weight=sample_weight)
        self.temperature_ = scaling.temperature_
        self.n_iter_ = scaling.n_iter_
        weights = np.full(logits.shape[0], 1.0) if sample_weight is None else sample_weight
        components = self._components(logits, y_index)
        self.weights_ = fit_mixture_weights(components, weights / weights.sum())

    def _calibrated_proba(self, features, logits) -> np.ndarray:
        scaled, plain = self._components(logits)
        w_scaled, w_plain, w_uniform = self.weights_
        return w_scaled * scaled + w_plain * plain + w_uniform / logits.shape[1]

    def _expected_failed_checks(self) -> dict[str, str]:
        return {
            **super()._expected_failed_checks(),
            "check_classifiers_one_label": (
                "the mixture keeps the argmax of the logits, so it cannot learn to predict "
                "the single class seen in fit"
            ),
        }
