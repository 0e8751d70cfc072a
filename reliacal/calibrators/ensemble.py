"""Ensemble temperature scaling (Zhang, Kailkhura and Han, 2020)."""

from __future__ import annotations

import numbers
import warnings
from itertools import combinations

import numpy as np
from scipy.special import log_softmax, softmax
from sklearn.utils._param_validation import Interval

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._base import BaseCalibrator, waive_one_label
from reliacal.calibrators._classic import ClassicCalibrator
from reliacal.calibrators.temperature import TemperatureScaling, _check_loaded_temperature

__all__ = ["EnsembleTemperatureScaling"]

# Newton on the weights stops once the decrement (predicted NLL reduction) is this
# small; below _QUADRATIC the steps are taken whole (the quadratic phase, where a
# line search could not see the decrease at float64 resolution).
_DECREMENT = 1e-20
_QUADRATIC = 1e-8
_MAX_NEWTON = 200
# A face minimum whose weights fall below -_FEASIBLE lies outside its face.
_FEASIBLE = 1e-12


def _mixture_nll(weights, components, sample_weight) -> float:
    mixture = components @ weights
    if not np.all(mixture > 0):
        return np.inf
    return float(-(sample_weight @ np.log(mixture)))


def _face_minimum(components, sample_weight, face) -> np.ndarray | None:
    """Minimum of the mixture NLL on the affine hull of a face of the simplex, or None.

    ``face`` lists the weights allowed to be non-zero; the weights are
    ``e_last + sum_j t_j (e_j - e_last)`` over the others ``j``. Damped Newton
    on ``t`` (staying where every mixture probability is positive) finds the
    minimum when it exists; None when the NLL decreases without bound along
    the hull, or Newton does not settle.
    """
    last, free = face[-1], face[:-1]
    directions = components[:, free] - components[:, [last]]

    def weights_at(t):
        weights = np.zeros(components.shape[1])
        weights[free] = t
        weights[last] = 1.0 - t.sum()
        return weights

    t = np.full(len(free), 1.0 / len(face))
    loss = _mixture_nll(weights_at(t), components, sample_weight)
    previous_decrement = np.inf
    for _ in range(_MAX_NEWTON):
        ratio = directions / (components @ weights_at(t))[:, None]
        gradient = -(sample_weight @ ratio)
        hessian = (ratio * sample_weight[:, None]).T @ ratio
        try:
            step = -np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            return None
        decrement = -float(gradient @ step)
        if not np.all(np.isfinite(step)) or np.abs(t).max() > 1e6:
            return None
        if decrement <= 0 or decrement >= previous_decrement:
            return weights_at(t)
        previous_decrement = decrement if decrement <= _QUADRATIC else np.inf
        scale = 1.0
        while scale > 1e-12:
            candidate = t + scale * step
            candidate_loss = _mixture_nll(weights_at(candidate), components, sample_weight)
            quadratic = decrement <= _QUADRATIC and np.isfinite(candidate_loss)
            if quadratic or candidate_loss <= loss - 0.25 * scale * decrement:
                break
            scale *= 0.5
        else:
            return None
        t, loss = candidate, candidate_loss
        if decrement <= _DECREMENT:
            return weights_at(t)
    return None


def fit_mixture_weights(components, sample_weight) -> np.ndarray:
    """Simplex weights ``w`` minimising ``-sum_i v_i log(w . q_i)``; ``q_i`` a row of ``components``.

    The objective is convex in ``w``, so its minimum on the simplex is the
    best of the minima over the faces (the interior, the three edges and the
    three vertices) whose unconstrained minimum on the face's affine hull
    lies inside the face.

    Examples
    --------
    >>> import numpy as np
    >>> q = np.array([[0.9, 0.5, 0.1], [0.8, 0.5, 0.1], [0.2, 0.5, 0.1]])
    >>> fit_mixture_weights(q, np.full(3, 1 / 3)).round(6)
    array([0.631921, 0.368079, 0.      ])
    """
    n_components = components.shape[1]
    candidates = list(np.eye(n_components))
    for size in range(2, n_components + 1):
        for face in combinations(range(n_components), size):
            weights = _face_minimum(components, sample_weight, list(face))
            if weights is not None and weights.min() >= -_FEASIBLE:
                weights = np.maximum(weights, 0.0)
                candidates.append(weights / weights.sum())
    losses = [_mixture_nll(candidate, components, sample_weight) for candidate in candidates]
    return candidates[int(np.argmin(losses))]


class EnsembleTemperatureScaling(ClassicCalibrator):
    r"""Ensemble temperature scaling: ``w_1 softmax(z / T) + w_2 softmax(z) + w_3 / K``.

    Zhang, Kailkhura and Han, "Mix-n-Match: Ensemble and Compositional
    Methods for Uncertainty Calibration in Deep Learning", ICML 2020. The
    temperature ``T`` is that of :class:`TemperatureScaling` (the NLL
    optimum); the weights ``w`` (non-negative, summing to 1) then minimise
    the (weighted) NLL of the mixture on the same calibration data. The NLL
    is convex in ``w``, and the fit reaches its minimum on the simplex to
    float64 precision (Newton's method on each face of the simplex, the best
    feasible face minimum kept). The paper fits the weights by squared error as well; only the
    NLL is offered here.

    Parameters
    ----------
    tol : float, default=1e-6
        ``tol`` of the :class:`TemperatureScaling` fit.
    max_iter : int, default=100
        ``max_iter`` of the :class:`TemperatureScaling` fit.
    {base_parameters}

    Attributes
    ----------
    temperature_ : float
        The temperature ``T`` of the first component.
    weights_ : ndarray of shape (3,)
        ``(w_1, w_2, w_3)``: temperature-scaled, uncalibrated, uniform.
    n_iter_ : int
        Passes over the data of the temperature fit.
    {base_attributes}

    See Also
    --------
    TemperatureScaling : the first component alone.

    {classic_notes}
    ``check_classifiers_one_label`` is waived too, since like temperature
    scaling the mixture keeps the predicted class.

    Examples
    --------
    >>> from reliacal.calibrators import EnsembleTemperatureScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(500, 3, scale=1.0, random_state=0)
    >>> logits = 3.0 * logits  # three times too sharp: overconfident
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
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

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

    def _torch_map(self):
        from reliacal.export import EnsembleTemperatureMap

        return EnsembleTemperatureMap(self.temperature_, self.weights_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            from reliacal.persistence import check_loaded_array, loaded_state_error

            _check_loaded_temperature(self)
            weights = check_loaded_array(self, "weights_", (3,), minimum=0.0, maximum=1.0)
            if abs(weights.sum() - 1.0) > 1e-9:
                raise loaded_state_error(self, "weights_", weights, "weights that sum to 1")

    def _expected_failed_checks(self) -> dict[str, str]:
        return {**super()._expected_failed_checks(), **waive_one_label("the mixture")}
