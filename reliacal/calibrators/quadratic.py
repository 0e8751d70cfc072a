"""Quadratic scaling: a logistic regression on the log-odds and their square."""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import expit

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._base import ConvergenceWarning
from reliacal.calibrators._checks import warn_uninformative
from reliacal.calibrators._classic import LogisticMapsCalibrator
from reliacal.calibrators._logistic import LogisticFit, fit_logistic

__all__ = ["QuadraticScaling"]

# A map whose training log loss is below this predicts every calibration label: the
# likelihood has no finite maximum, and Newton's method stops at float64's floor.
_SEPARATED = 1e-6


def _quadratic_features(scores: np.ndarray) -> np.ndarray:
    return np.column_stack([scores, scores * scores])


class QuadraticScaling(LogisticMapsCalibrator):
    r"""Quadratic scaling: ``p = sigmoid(a s + c s^2 + b)`` on the log-odds ``s``.

    Berta, Holzmüller, Jordan and Bach, "Structured Matrix Scaling for
    Multi-Class Calibration", AISTATS 2026 (arXiv 2511.03685), motivate it as
    the exact recalibration map when the two classes' logits are Gaussian
    with different variances (Platt scaling is the equal-variance case,
    ``c = 0``). ``a``, ``b`` and ``c`` maximise the (weighted) binary
    likelihood, by Newton's method to float64 precision (no penalty, as in
    the paper's binary benchmark). The map need not be monotone: with
    ``c != 0`` it turns back beyond ``s = -a / (2 c)``, which is what lets it
    fix a classifier that is over-confident on one side only.

    For two classes ``s = z_1 - z_0`` (the 1-D score itself for 1-D input).
    For ``K > 2`` classes one map per class on its one-vs-rest log-odds
    ``s_k = log p_k - log(1 - p_k)``, ``p = softmax(z)``, rows then divided by
    their sums, as :class:`PlattScaling` does: the contract of every
    calibrator (``(n, K)`` logits in, ``(n, K)`` probabilities out) holds, and
    the binary map is what the paper defines.

    Parameters
    ----------
    max_iter : int, default=100
        Maximum Newton steps per map; separable data (no finite optimum, e.g.
        labels that the square of the score separates) stops here with a
        :class:`ConvergenceWarning`.
    {base_parameters}

    Attributes
    ----------
    coef_ : ndarray of shape (m, 2)
        ``(a, c)``, the linear and quadratic slopes of each map (``m = 1`` for
        two classes, else ``K``).
    intercept_ : ndarray of shape (m,)
        ``b`` of each map.
    n_iter_ : int
        Most Newton steps taken by a map.
    {base_attributes}

    See Also
    --------
    PlattScaling : the affine map (``c = 0``).
    BetaCalibration : another three-parameter binary map, on ``ln p`` and ``ln(1 - p)``.

    {classic_notes}

    Examples
    --------
    Scores of the positives spread twice as wide as those of the negatives, so
    that the true log-odds are quadratic in the score:

    >>> import numpy as np
    >>> from reliacal.calibrators import QuadraticScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, size=2000)
    >>> scores = np.where(y == 1, rng.normal(1.0, 2.0, 2000), rng.normal(-1.0, 1.0, 2000))
    >>> quadratic = QuadraticScaling().fit(scores, y)
    >>> bool(quadratic.coef_[0, 1] > 0)  # a positive square term
    True
    >>> quadratic.predict_proba(np.array([-6.0, 0.0]))[:, 1].round(2)  # far left: positive again
    array([0.99, 0.45])
    """

    _failure = (
        "the logistic fit of map(s) {maps} did not converge in max_iter={max_iter} Newton "
        "steps; raise max_iter, and if that does not help, the score and its square separate "
        "the classes (the slopes grow without bound)"
    )

    def __init__(self, *, max_iter: int = 100, **base_params):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        warn_uninformative(self, logits, y_index, sample_weight)
        super()._fit_core(features, logits, y_index, sample_weight)

    def _fit_map(self, score, target, raw_weights, weights) -> LogisticFit:
        return fit_logistic(_quadratic_features(score), target, weights, max_iter=self.max_iter)

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        super()._fit_maps(scores, targets, sample_weight)
        self._warn_if_separated(scores, targets, sample_weight)

    def _warn_if_separated(self, scores, targets, sample_weight) -> None:
        """Warn when a map predicts its calibration labels perfectly: no finite optimum."""
        weights = np.ones(scores.shape[0]) if sample_weight is None else sample_weight
        weights = weights / weights.sum()
        eta = scores * self.coef_[:, 0] + scores**2 * self.coef_[:, 1] + self.intercept_
        losses = weights @ (np.logaddexp(0.0, eta) - targets * eta)
        separated = np.flatnonzero(losses < _SEPARATED)
        if separated.size:
            warnings.warn(
                f"QuadraticScaling: the score and its square separate the calibration labels "
                f"of map(s) {separated[:10].tolist()} (training log loss below {_SEPARATED:g}): "
                "the maximum-likelihood map is infinitely steep and its probabilities are 0 "
                "and 1; calibrate on more data, or use a parametric map with fewer "
                "parameters (PlattScaling(target_smoothing=True))",
                ConvergenceWarning,
                stacklevel=4,
            )

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            self._check_loaded_coefficients(2)

    def _apply_maps(self, scores) -> np.ndarray:
        return expit(scores * self.coef_[:, 0] + scores**2 * self.coef_[:, 1] + self.intercept_)

    def _expected_failed_checks(self) -> dict[str, str]:
        return {
            **super()._expected_failed_checks(),
            "check_sample_weight_equivalence_on_dense_data": (
                "the check's 15 rows miss most of its 30 classes, whose maps have no finite "
                "maximum-likelihood fit; weighted and repeated fits stop at different points "
                "of that diverging path (log-probabilities near -380 differ in the sixth digit)"
            ),
        }

    def _torch_map(self):
        """A ``torch.nn.Module``: float64 logits ``(n, K)`` -> ``predict_proba``'s probabilities."""
        from reliacal.calibrators._torch_maps import OneVsRestMap, QuadraticMaps

        return OneVsRestMap(QuadraticMaps(self.coef_, self.intercept_), len(self.classes_))
