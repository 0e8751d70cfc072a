"""Centered isotonic regression (Oron and Flournoy, 2017) as a calibrator."""

from __future__ import annotations

import numpy as np
from scipy.special import expit
from sklearn.utils._param_validation import StrOptions

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._base import BaseCalibrator
from reliacal.calibrators._checks import warn_uninformative
from reliacal.calibrators._classic import OneVsRestCalibrator
from reliacal.calibrators.isotonic import _fit_isotonic

__all__ = ["CenteredIsotonicCalibration", "centered_isotonic_knots"]


def centered_isotonic_knots(
    scores, targets, weights, *, collapse_extremes: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(x, f(x))`` of the centered isotonic regression of ``targets`` on ``scores``.

    The isotonic regression (pool adjacent violators, tied scores pooled) is
    piecewise constant; each flat stretch is replaced by one knot at the
    weighted mean score of its samples, carrying its value, so that linear
    interpolation between the knots rises strictly wherever the data allow.
    Two stretches keep both ends instead: those at value 0 or 1 (unless
    ``collapse_extremes``), which a probability cannot leave, and the ends of
    the first and last stretch, so that the fitted range of scores is kept.

    Examples
    --------
    >>> x, f = centered_isotonic_knots(np.array([1.0, 2.0, 3.0, 4.0]),
    ...                                np.array([0.2, 0.6, 0.4, 0.9]), np.ones(4))
    >>> x, f
    (array([1. , 2.5, 4. ]), array([0.2, 0.5, 0.9]))
    """
    knots, values = _fit_isotonic(scores, targets, weights)
    keep = weights > 0
    # The summed weight of each distinct score, in the order of the knots.
    counts = np.bincount(
        np.searchsorted(knots, scores[keep]), weights=weights[keep], minlength=knots.size
    )
    starts = np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]]))
    ends = np.concatenate([starts[1:], [knots.size]]) - 1
    means = np.add.reduceat(counts * knots, starts) / np.add.reduceat(counts, starts)
    levels = values[starts]
    last = starts.size - 1
    points_x, points_f = [], []
    for stretch, (start, end) in enumerate(zip(starts, ends)):
        level = levels[stretch]
        if not collapse_extremes and level in (0.0, 1.0):
            chosen = [knots[start], knots[end]]
        elif stretch == 0:
            chosen = [knots[start], means[stretch]] + ([knots[end]] if last == 0 else [])
        elif stretch == last:
            chosen = [means[stretch], knots[end]]
        else:
            chosen = [means[stretch]]
        points_x.extend(chosen)
        points_f.extend([level] * len(chosen))
    points_x = np.asarray(points_x)
    points_f = np.asarray(points_f)
    # Coinciding points (a stretch of one score) are kept once.
    unique_x, first = np.unique(points_x, return_index=True)
    return unique_x, points_f[first]


class CenteredIsotonicCalibration(OneVsRestCalibrator):
    r"""Centered isotonic regression (CIR): isotonic calibration without flat stretches.

    Oron and Flournoy, "Centered Isotonic Regression: Point and Interval
    Estimation for Dose-Response Studies", Statistics in Biopharmaceutical
    Research 9(3), 2017. Isotonic regression by pool adjacent violators
    gives a step function; CIR replaces each of its flat stretches by a
    single knot at the stretch's weighted mean score and interpolates
    linearly between knots, so the map is strictly increasing wherever the
    isotonic fit rises at all. Its values at the knots are those of the
    isotonic fit (so it keeps its calibration on the pooled stretches),
    while ties between scores that the data do not order are no longer
    forced. Stretches at probability 0 or 1 keep both ends (the paper's
    rule), and so do the first and last stretch's outer ends, so the map
    covers the calibration range; beyond it the end values are kept.

    For two classes one map on ``s = z_1 - z_0`` (the 1-D score itself for
    1-D input); for ``K > 2`` one map per class on its one-vs-rest log-odds
    ``s_k = log p_k - log(1 - p_k)``, ``p = softmax(z)``, rows divided by
    their sums. By default the maps read log-odds, as
    :class:`IsotonicCalibration`'s do, so the mean scores and the
    interpolation are taken on that scale (the ``cir_model`` package, given
    the same scores, agrees); ``scale="probability"`` takes them on
    ``sigmoid(s)``, the scale of probmetrics' CIR. The ranks, hence the
    isotonic values at the knots, are the same on both.

    Parameters
    ----------
    collapse_extremes : bool, default=False
        Also collapse the stretches at 0 and 1 to one knot; the default
        keeps them whole, since a probability of exactly 0 or 1 cannot be
        interpolated away from without leaving ``[0, 1]`` calibrated data.
    scale : {"log-odds", "probability"}, default="log-odds"
        Where the stretches' mean scores and the interpolation are taken:
        on the log-odds ``s`` (the default: it spreads the confident scores
        that probabilities crowd near 0 and 1), or on ``sigmoid(s)`` (better
        for a classifier whose outputs are exact zeros and ones, whose
        log-odds are only the clipping bound).
    {base_parameters}

    Attributes
    ----------
    knots_ : list of ndarray
        Per map (``m = 1`` for two classes, else ``K``), the scores of the
        knots on ``scale``, increasing.
    values_ : list of ndarray
        Per map, the fitted probabilities at ``knots_`` (non-decreasing).
    {base_attributes}

    See Also
    --------
    IsotonicCalibration : the step function CIR centres.

    {classic_notes}

    {isotonic_examples}
    >>> from reliacal.calibrators import CenteredIsotonicCalibration
    >>> cir = CenteredIsotonicCalibration().fit(scores, y)
    >>> cir.knots_[0], cir.values_[0]  # the stretch at 0.5 becomes one knot at its mean
    (array([-2. , -0.5,  1. ,  3. ]), array([0. , 0.5, 1. , 1. ]))
    >>> cir.predict_proba(np.array([-1.0, 0.5]))[:, 1]
    array([0.33333333, 0.83333333])
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "collapse_extremes": ["boolean"],
        "scale": [StrOptions({"log-odds", "probability"})],
    }

    def __init__(self, collapse_extremes: bool = False, *, scale: str = "log-odds", **base_params):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        warn_uninformative(self, logits, y_index, sample_weight)
        super()._fit_core(features, logits, y_index, sample_weight)

    def _on_scale(self, scores) -> np.ndarray:
        return expit(scores) if self.scale == "probability" else scores

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        scores = self._on_scale(scores)
        weights = np.ones(scores.shape[0]) if sample_weight is None else sample_weight
        self.knots_, self.values_ = [], []
        for column in range(scores.shape[1]):
            knots, values = centered_isotonic_knots(
                scores[:, column],
                targets[:, column],
                weights,
                collapse_extremes=self.collapse_extremes,
            )
            self.knots_.append(knots)
            self.values_.append(values)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            self._check_loaded_lookups("knots_", "values_", lambda n_knots: n_knots)

    def _apply_maps(self, scores) -> np.ndarray:
        scores = self._on_scale(scores)
        # np.interp keeps the end values beyond the knots.
        return np.column_stack(
            [
                np.interp(scores[:, column], knots, values)
                for column, (knots, values) in enumerate(zip(self.knots_, self.values_))
            ]
        )

    def _torch_map(self):
        """A ``torch.nn.Module``: float64 logits ``(n, K)`` -> ``predict_proba``'s probabilities."""
        from reliacal.calibrators._torch_maps import InterpolationMaps, OneVsRestMap

        maps = InterpolationMaps(self.knots_, self.values_, probability=self.scale == "probability")
        return OneVsRestMap(maps, len(self.classes_))
