"""Isotonic calibration: a non-decreasing step map of the log-odds, fitted by PAV."""

from __future__ import annotations

import numpy as np
from scipy.optimize import isotonic_regression

from reliacal.calibrators._base import BaseCalibrator
from reliacal.calibrators._classic import OneVsRestCalibrator

__all__ = ["IsotonicCalibration"]


def _fit_isotonic(scores, targets, weights) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(x, f(x))`` of the weighted isotonic regression of ``targets`` on ``scores``.

    Samples of zero weight are ignored; tied scores become one point carrying
    their summed weight and weighted mean target (scikit-learn's convention),
    then pool-adjacent-violators fits the non-decreasing values.
    """
    keep = weights > 0
    scores, targets, weights = scores[keep], targets[keep], weights[keep]
    order = np.argsort(scores, kind="stable")
    scores, targets, weights = scores[order], targets[order], weights[order]
    knots, first = np.unique(scores, return_index=True)
    summed_weights = np.add.reduceat(weights, first)
    means = np.add.reduceat(weights * targets, first) / summed_weights
    values = isotonic_regression(means, weights=summed_weights, increasing=True).x
    return knots, values


class IsotonicCalibration(OneVsRestCalibrator):
    r"""Isotonic calibration: a non-decreasing map of the log-odds of each class.

    Zadrozny and Elkan, "Transforming Classifier Scores into Accurate
    Multiclass Probability Estimates", KDD 2002. The map is the (weighted)
    isotonic regression of the 0/1 labels on the score, by pool adjacent
    violators; between the calibration scores it interpolates linearly, and
    beyond them it keeps the end values (scikit-learn's
    ``IsotonicRegression(out_of_bounds="clip")``). For two classes one map on
    ``s = z_1 - z_0`` (the 1-D score itself for 1-D input); for ``K > 2``
    classes one map per class on its one-vs-rest log-odds ``s_k = log p_k -
    log(1 - p_k)``, ``p = softmax(z)``, and each row divided by its sum (a
    row of zeros becomes uniform), as in scikit-learn's
    ``CalibratedClassifierCV(method="isotonic")``.

    The maps read the log-odds rather than the probabilities, so logits and
    ``input="probs"`` of the same predictions give the same calibrator;
    scikit-learn interpolates in whatever its classifier outputs. Both agree
    at the calibration scores.

    Parameters
    ----------
    {base_parameters}

    Attributes
    ----------
    knots_ : list of ndarray
        Per map (``m = 1`` for two classes, else ``K``), the distinct
        calibration scores, increasing.
    values_ : list of ndarray
        Per map, the fitted non-decreasing probabilities at ``knots_``.
    {base_attributes}

    See Also
    --------
    HistogramBinning : a step map with equal-mass bins.
    PlattScaling : a parametric (sigmoid) map.

    {classic_notes}

    {isotonic_examples}
    >>> from reliacal.calibrators import IsotonicCalibration
    >>> iso = IsotonicCalibration().fit(scores, y)
    >>> iso.values_[0]
    array([0. , 0.5, 0.5, 1. , 1. , 1. ])
    >>> iso.predict_proba(np.array([-5.0, 0.5]))[:, 1]
    array([0.  , 0.75])
    """

    _parameter_constraints: dict = {**BaseCalibrator._parameter_constraints}

    def __init__(
        self,
        **base_params,
    ):
        super().__init__(**base_params)

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        weights = np.ones(scores.shape[0]) if sample_weight is None else sample_weight
        self.knots_, self.values_ = [], []
        for column in range(scores.shape[1]):
            knots, values = _fit_isotonic(scores[:, column], targets[:, column], weights)
            self.knots_.append(knots)
            self.values_.append(values)

    def _torch_map(self):
        from reliacal.export import OneVsRestMap

        return OneVsRestMap.isotonic(len(self.classes_), self.knots_, self.values_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            self._check_loaded_lookups("knots_", "values_", lambda n_knots: n_knots)

    def _apply_maps(self, scores) -> np.ndarray:
        # np.interp keeps the end values beyond the knots (out_of_bounds="clip").
        return np.column_stack(
            [
                np.interp(scores[:, column], knots, values)
                for column, (knots, values) in enumerate(zip(self.knots_, self.values_))
            ]
        )
