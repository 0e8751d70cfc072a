"""Platt scaling: a logistic regression on the classifier's log-odds."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._classic import LogisticMapsCalibrator
from reliacal.calibrators._logistic import LogisticFit, fit_logistic

__all__ = ["PlattScaling"]


def _smoothed_targets(targets: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Platt's targets: ``(N+ + 1) / (N+ + 2)`` for positives, ``1 / (N- + 2)`` for negatives.

    ``N+`` and ``N-`` are the (weighted) numbers of positives and negatives;
    ``weights`` are the raw sample weights (ones when unweighted).
    """
    positive = targets > 0.5
    n_positive = float(weights[positive].sum())
    n_negative = float(weights[~positive].sum())
    return np.where(positive, (n_positive + 1.0) / (n_positive + 2.0), 1.0 / (n_negative + 2.0))


class PlattScaling(LogisticMapsCalibrator):
    r"""Platt scaling: ``p = sigmoid(a s + b)`` on the log-odds ``s`` of the positive class.

    Platt, "Probabilistic Outputs for Support Vector Machines and Comparisons
    to Regularized Likelihood Methods", 1999. For two classes ``s = z_1 -
    z_0`` (the 1-D score itself for 1-D input); for ``K > 2`` classes one map
    per class on its one-vs-rest log-odds ``s_k = log p_k - log(1 - p_k)``,
    ``p = softmax(z)``, and each row divided by its sum (as scikit-learn's
    ``CalibratedClassifierCV(method="sigmoid")`` does with its one-vs-rest
    maps).

    ``a`` and ``b`` minimise the (weighted) binary cross-entropy, by Newton's
    method to float64 precision. By default the targets are the 0/1 labels
    (the maximum-likelihood logistic fit); ``target_smoothing=True`` uses
    Platt's targets ``(N+ + 1) / (N+ + 2)`` and ``1 / (N- + 2)``, which is
    what scikit-learn's sigmoid calibration fits (it then agrees with
    ``CalibratedClassifierCV(method="sigmoid")`` on the same scores up to
    that estimator's optimiser tolerance).

    Parameters
    ----------
    target_smoothing : bool, default=False
        Fit Platt's smoothed targets instead of the 0/1 labels.
    max_iter : int, default=100
        Maximum Newton steps per map; separable data (no finite optimum)
        stops here with a :class:`ConvergenceWarning`.
    {base_parameters}

    Attributes
    ----------
    coef_ : ndarray of shape (m,)
        The slopes ``a``, one per map (``m = 1`` for two classes, else ``K``).
    intercept_ : ndarray of shape (m,)
        The intercepts ``b``.
    n_iter_ : int
        Most Newton steps taken by a map.
    {base_attributes}

    See Also
    --------
    BetaCalibration : a richer binary map on log-probabilities.
    TemperatureScaling : one multiclass parameter.

    {classic_notes}

    Examples
    --------
    Over-confident binary scores ``s``, whose true log-odds are ``s / 2``:

    >>> import numpy as np
    >>> from reliacal.calibrators import PlattScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, size=1000)
    >>> scores = 4.0 * (2 * y - 1 + rng.normal(size=1000))
    >>> platt = PlattScaling().fit(scores, y)
    >>> round(float(platt.coef_[0]), 3), round(float(platt.intercept_[0]), 3)
    (0.561, 0.086)
    >>> platt.predict_proba(np.array([0.0, 4.0])).round(3)
    array([[0.479, 0.521],
           [0.089, 0.911]])
    """

    _parameter_constraints: dict = {
        **LogisticMapsCalibrator._parameter_constraints,
        "target_smoothing": ["boolean"],
    }
    _failure = (
        "the logistic fit of map(s) {maps} did not converge in max_iter={max_iter} Newton "
        "steps (the scores separate the classes, so the slope grows without bound); use "
        "target_smoothing=True"
    )

    def __init__(
        self,
        target_smoothing: bool = False,
        *,
        max_iter: int = 100,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _fit_map(self, score, target, raw_weights, weights) -> LogisticFit:
        if self.target_smoothing:
            target = _smoothed_targets(target, raw_weights)
        return fit_logistic(score[:, None], target, weights, max_iter=self.max_iter)

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        super()._fit_maps(scores, targets, sample_weight)
        self.coef_ = self.coef_[:, 0]  # one slope per map

    def _apply_maps(self, scores) -> np.ndarray:
        return expit(scores * self.coef_ + self.intercept_)

    def _torch_map(self):
        from reliacal.export import OneVsRestMap

        return OneVsRestMap.platt(len(self.classes_), self.coef_, self.intercept_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            self._check_loaded_coefficients()
