"""Weighted binary logistic regression on a few features, fitted by Newton's method.

Platt scaling (one feature) and beta calibration (two) are logistic
regressions with soft or hard targets. With so few parameters an exact
Newton step costs one pass over the data, and quadratic convergence takes
the fit to float64 rounding of the optimum in a handful of passes, which a
quasi-Newton method with a gradient tolerance does not.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["LogisticFit", "fit_logistic"]

# Stop once the Newton decrement (the predicted loss reduction of the step just
# taken) is below this: the step after it would change the loss by ~1e-40.
_DECREMENT = 1e-20
# Below this decrement Newton's method is in its quadratic phase (each step squares
# the error) and the steps are taken whole.
_QUADRATIC = 1e-8


class LogisticFit:
    """Result of :func:`fit_logistic`: ``coef``, ``intercept``, ``n_iter``, ``converged``."""

    def __init__(self, coef, intercept, n_iter, converged):
        self.coef = coef
        self.intercept = intercept
        self.n_iter = n_iter
        self.converged = converged


def _loss(parameters, design, targets, weights) -> float:
    eta = design @ parameters
    # log(1 + e^eta) - t eta, the binary cross-entropy of sigmoid(eta) against t.
    return float(weights @ (np.logaddexp(0.0, eta) - targets * eta))


def fit_logistic(features, targets, weights, *, max_iter: int = 100) -> LogisticFit:
    """Minimise ``sum_i w_i [log(1 + exp(eta_i)) - t_i eta_i]``, ``eta = X coef + intercept``.

    Parameters
    ----------
    features : ndarray of shape (n, d)
    targets : ndarray of shape (n,)
        Targets in ``[0, 1]`` (0/1 labels or Platt's smoothed targets).
    weights : ndarray of shape (n,)
        Non-negative weights summing to 1.
    max_iter : int, default=100
        Maximum Newton steps. Separable data (no finite optimum) stops here
        with ``converged=False``.

    Returns
    -------
    LogisticFit

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[-2.0], [-1.0], [0.0], [1.0], [2.0]])
    >>> fit = fit_logistic(x, np.array([0, 1, 0, 1, 1.0]), np.full(5, 0.2))
    >>> fit.converged, bool(fit.coef[0] > 0)
    (True, True)
    """
    n_samples, n_features = features.shape
    design = np.column_stack([features, np.ones(n_samples)])
    # Start at the intercept-only optimum: the weighted log-odds of the mean target.
    mean_target = float(np.clip(weights @ targets, 1e-12, 1 - 1e-12))
    parameters = np.zeros(n_features + 1)
    parameters[-1] = np.log(mean_target / (1.0 - mean_target))
    loss = _loss(parameters, design, targets, weights)
    previous_decrement = np.inf
    for n_iter in range(1, max_iter + 1):
        probabilities = expit(design @ parameters)
        gradient = design.T @ (weights * (probabilities - targets))
        curvature = weights * probabilities * (1.0 - probabilities)
        hessian = (design * curvature[:, None]).T @ design
        try:
            step = -np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            # A constant or duplicated feature: the minimum-norm step.
            step = -np.linalg.lstsq(hessian, gradient, rcond=None)[0]
        decrement = -float(gradient @ step)
        if not np.all(np.isfinite(step)) or decrement <= 0 or decrement >= previous_decrement:
            # At the optimum, or at the floor set by float64 rounding of the gradient.
            return LogisticFit(parameters[:-1], parameters[-1], n_iter, True)
        previous_decrement = decrement if decrement <= _QUADRATIC else np.inf
        if decrement <= _QUADRATIC:
            # The loss is too flat here for a line search to see a decrease (the
            # decrement is below its rounding); the full Newton step is safe.
            parameters = parameters + step
            loss = _loss(parameters, design, targets, weights)
            if decrement <= _DECREMENT:
                return LogisticFit(parameters[:-1], parameters[-1], n_iter, True)
            continue
        # Backtracking (Armijo) while far from the optimum.
        scale = 1.0
        while True:
            candidate = parameters + scale * step
            candidate_loss = _loss(candidate, design, targets, weights)
            if candidate_loss <= loss - 0.25 * scale * decrement or scale < 1e-10:
                break
            scale *= 0.5
        parameters, loss = candidate, candidate_loss
    return LogisticFit(parameters[:-1], parameters[-1], max_iter, False)
