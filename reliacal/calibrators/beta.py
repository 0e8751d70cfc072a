"""Beta calibration (Kull, Silva Filho and Flach, 2017)."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._classic import LogisticMapsCalibrator
from reliacal.calibrators._logistic import LogisticFit, fit_logistic

__all__ = ["BetaCalibration"]


def _beta_features(scores: np.ndarray) -> np.ndarray:
    """``[ln p, -ln(1 - p)]`` for ``p = sigmoid(s)``, computed from ``s`` without rounding p."""
    return np.column_stack([-np.logaddexp(0.0, -scores), np.logaddexp(0.0, scores)])


def _fit_beta_map(features, targets, weights, *, monotonic: bool, max_iter: int):
    """The fit of one beta map: ``coef`` is ``(a, b)``, ``intercept`` is ``c``.

    With ``monotonic``, a negative ``a`` or ``b`` is set to 0 and the other
    parameters refitted (the procedure of Kull et al., which keeps the map
    non-decreasing).
    """
    active = [0, 1]
    n_iter = 0
    while True:
        fit = fit_logistic(features[:, active], targets, weights, max_iter=max_iter)
        n_iter += fit.n_iter
        coef = np.zeros(2)
        coef[active] = fit.coef
        negative = [index for index in active if coef[index] < 0]
        if not monotonic or not negative:
            return LogisticFit(coef, fit.intercept, n_iter, fit.converged)
        # The most negative one is dropped first; the other may turn positive.
        active.remove(min(negative, key=lambda index: coef[index]))


class BetaCalibration(LogisticMapsCalibrator):
    r"""Beta calibration: ``p' = sigmoid(a ln p - b ln(1 - p) + c)``.

    Kull, Silva Filho and Flach, "Beta calibration: a well-founded and easily
    implemented improvement on logistic calibration for binary classifiers",
    AISTATS 2017 (the three-parameter family). ``p`` is the uncalibrated
    probability of the positive class; ``a``, ``b`` and ``c`` maximise the
    (weighted) binary likelihood, a logistic regression on the features
    ``ln p`` and ``-ln(1 - p)`` fitted by Newton's method to float64
    precision. The family contains the identity (``a = b = 1, c = 0``) and
    Platt scaling of the log-odds (``a = b``).

    With ``monotonic=True`` (the paper's recommendation) ``a, b >= 0``: a
    negative estimate is set to 0 and the rest refitted, so the map never
    decreases. For ``K > 2`` classes one map per class on its one-vs-rest
    probability, rows then divided by their sums.

    Parameters
    ----------
    monotonic : bool, default=True
        Constrain ``a`` and ``b`` to be non-negative.
    max_iter : int, default=100
        Maximum Newton steps per fit; separable data stops here with a
        :class:`ConvergenceWarning`.
    {base_parameters}

    Attributes
    ----------
    coef_ : ndarray of shape (m, 2)
        ``(a, b)`` of each map (``m = 1`` for two classes, else ``K``).
    intercept_ : ndarray of shape (m,)
        ``c`` of each map.
    n_iter_ : int
        Most Newton steps taken by a map (refits included).
    {base_attributes}

    See Also
    --------
    PlattScaling : the two-parameter logistic map (``a = b``).

    {classic_notes}
    With ``p = softmax(z)``, ``ln p`` and ``ln(1 - p)`` are computed from the
    log-odds, so probabilities that round to 1 keep their information.

    Examples
    --------
    Probabilities ``p`` whose true probability is ``p**2``:

    >>> import numpy as np
    >>> from reliacal.calibrators import BetaCalibration
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.01, 0.99, size=2000)
    >>> y = (rng.uniform(size=2000) < p**2).astype(int)
    >>> beta = BetaCalibration(input="probs").fit(p, y)
    >>> beta.coef_.round(2), beta.intercept_.round(2)
    (array([[1.43, 1.18]]), array([-1.01]))
    """

    _parameter_constraints: dict = {
        **LogisticMapsCalibrator._parameter_constraints,
        "monotonic": ["boolean"],
    }
    _failure = (
        "the fit of map(s) {maps} did not converge in max_iter={max_iter} Newton steps (the "
        "scores separate the classes, so the parameters grow without bound)"
    )

    def __init__(
        self,
        monotonic: bool = True,
        *,
        max_iter: int = 100,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _fit_map(self, score, target, raw_weights, weights) -> LogisticFit:
        return _fit_beta_map(
            _beta_features(score), target, weights, monotonic=self.monotonic, max_iter=self.max_iter
        )

    def _torch_map(self):
        from reliacal.export import OneVsRestMap

        return OneVsRestMap.beta(len(self.classes_), self.coef_, self.intercept_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            self._check_loaded_coefficients(2)

    def _apply_maps(self, scores) -> np.ndarray:
        maps = [
            expit(_beta_features(scores[:, column]) @ self.coef_[column] + self.intercept_[column])
            for column in range(scores.shape[1])
        ]
        return np.column_stack(maps)
