"""Histogram binning with equal-mass bins, classwise or top-label."""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._base import BaseCalibrator
from reliacal.calibrators._classic import (
    OneVsRestCalibrator,
    one_vs_rest_log_odds,
    succession_targets,
)

__all__ = ["HistogramBinning"]


def _equal_mass_edges(scores, weights, n_bins: int) -> np.ndarray:
    """Left edges of bins 1.. (bin 0 is everything below the first edge).

    The sorted scores are cut where the cumulative weight reaches ``j /
    n_bins`` of the total; each edge is a calibration score, so every bin
    holds at least one calibration sample, and tied scores share a bin (so
    fewer than ``n_bins`` bins when ties straddle a cut).
    """
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    cumulative = np.cumsum(weights[order])
    cuts = np.arange(1, n_bins) * (cumulative[-1] / n_bins)
    # The first sample whose preceding weight reaches the cut starts the next bin.
    starts = np.searchsorted(cumulative, cuts, side="right")
    starts = starts[starts < len(sorted_scores)]
    edges = np.unique(sorted_scores[starts])
    return edges[edges > sorted_scores[0]]


def _fit_bins(scores, targets, weights, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, values)``: the equal-mass edges and the weighted mean target of each bin."""
    keep = weights > 0
    scores, targets, weights = scores[keep], targets[keep], weights[keep]
    edges = _equal_mass_edges(scores, weights, n_bins)
    bins = np.searchsorted(edges, scores, side="right")
    totals = np.bincount(bins, weights=weights, minlength=len(edges) + 1)
    positives = np.bincount(bins, weights=weights * targets, minlength=len(edges) + 1)
    return edges, positives / totals


def _apply_bins(scores, edges, values) -> np.ndarray:
    return values[np.searchsorted(edges, scores, side="right")]


class HistogramBinning(OneVsRestCalibrator):
    r"""Histogram binning: the probability of a score is the label frequency of its bin.

    Zadrozny and Elkan, "Obtaining calibrated probability estimates from
    decision trees and naive Bayesian classifiers", ICML 2001, with
    equal-mass bins: the calibration scores are cut into ``n_bins`` bins of
    equal (weighted) size, and a score's calibrated probability is the
    (weighted) fraction of positives among the calibration samples of its
    bin. Bins are made on the log-odds ``log p - log(1 - p)``, which orders
    samples as ``p`` does but keeps probabilities that round to 1 apart.

    ``mode="classwise"``: one binning per class on its one-vs-rest log-odds
    (for two classes, one on the positive class and ``p_0 = 1 - p_1``), rows
    then divided by their sums (a row of zeros becomes uniform).

    ``mode="top-label"``: one binning of the confidence (the top class's
    probability), pooled over the predicted classes; the predicted class gets
    its bin's accuracy and the other classes share the rest in proportion to
    their uncalibrated probabilities (equally when those are all 0). The
    predicted class is unchanged unless its bin's accuracy falls below
    another class's share.

    Parameters
    ----------
    n_bins : int, default=15
        Number of equal-mass bins (fewer when tied scores straddle a cut).
    mode : {"classwise", "top-label"}, default="classwise"
        What is binned (see above).
    {base_parameters}

    Attributes
    ----------
    edges_ : list of ndarray
        Per binning (``m = 1`` for two classes or top-label, else ``K``),
        the log-odds at which bins 1, 2, ... start (bin 0 lies below).
    values_ : list of ndarray
        Per binning, the calibrated probability of each bin.
    {base_attributes}

    See Also
    --------
    IsotonicCalibration : a step map whose bins are fitted.

    {classic_notes}
    In top-label mode ``check_classifiers_one_label`` is waived too, since
    the predicted class is mostly kept.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators import HistogramBinning
    >>> scores = np.arange(8.0)
    >>> y = np.array([0, 0, 0, 1, 0, 1, 1, 1])
    >>> hb = HistogramBinning(n_bins=2).fit(scores, y)
    >>> hb.edges_[0], hb.values_[0]
    (array([4.]), array([0.25, 0.75]))
    >>> hb.predict_proba(np.array([-1.0, 3.9, 4.0]))[:, 1]
    array([0.25, 0.25, 0.75])
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "n_bins": [Interval(numbers.Integral, 1, None, closed="left")],
        "mode": [StrOptions({"classwise", "top-label"})],
    }

    def __init__(
        self,
        n_bins: int = 15,
        mode: str = "classwise",
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        weights = np.ones(scores.shape[0]) if sample_weight is None else sample_weight
        self.edges_, self.values_ = [], []
        for column in range(scores.shape[1]):
            edges, values = _fit_bins(scores[:, column], targets[:, column], weights, self.n_bins)
            self.edges_.append(edges)
            self.values_.append(values)

    def _apply_maps(self, scores) -> np.ndarray:
        return np.column_stack(
            [
                _apply_bins(scores[:, column], edges, values)
                for column, (edges, values) in enumerate(zip(self.edges_, self.values_))
            ]
        )

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        if self.mode == "classwise":
            super()._fit_core(features, logits, y_index, sample_weight)
            return
        top = np.argmax(logits, axis=1)
        rows = np.arange(logits.shape[0])
        confidence_log_odds = one_vs_rest_log_odds(logits)[rows, top]
        correct = (top == y_index).astype(np.float64)[:, None]
        correct, constant = succession_targets(correct, sample_weight)
        if constant:
            warnings.warn(
                "HistogramBinning: the top-label predictions of the calibration data are all "
                f"{'right' if correct[0, 0] > 0.5 else 'wrong'}: the bins give Laplace's rule "
                "of succession, (n + 1)/(n + 2) or 1/(n + 2) for n samples, instead of a "
                "certainty that one test sample could refute",
                UserWarning,
                stacklevel=4,
            )
        self._fit_maps(confidence_log_odds[:, None], correct, sample_weight)

    def _calibrated_proba(self, features, logits) -> np.ndarray:
        if self.mode == "classwise":
            return super()._calibrated_proba(features, logits)
        logits = np.asarray(logits, dtype=np.float64)
        rows = np.arange(logits.shape[0])
        top = np.argmax(logits, axis=1)
        confidence = _apply_bins(one_vs_rest_log_odds(logits)[rows, top], *self._binning())
        # Uncalibrated probabilities of the other classes, relative to each other.
        others = np.exp(logits - logits[rows, top][:, None])
        others[rows, top] = 0.0
        totals = others.sum(axis=1, keepdims=True)
        empty = totals[:, 0] == 0
        others[empty] = 1.0
        others[empty, top[empty]] = 0.0
        totals[empty] = logits.shape[1] - 1
        proba = others / totals * (1.0 - confidence)[:, None]
        proba[rows, top] = confidence
        return proba

    def _expected_failed_checks(self) -> dict[str, str]:
        waived = super()._expected_failed_checks()
        if self.mode == "top-label":
            waived["check_classifiers_one_label"] = (
                "top-label binning keeps the predicted class of the logits unless its bin's "
                "accuracy falls below another class's share, so it does not learn to predict "
                "the single class seen in fit"
            )
        return waived

    def _binning(self):
        return self.edges_[0], self.values_[0]

    def _n_maps(self) -> int:
        return 1 if self.mode == "top-label" else super()._n_maps()

    def _torch_map(self):
        from reliacal.export import OneVsRestMap, TopLabelBinningMap

        if self.mode == "top-label":
            return TopLabelBinningMap(*self._binning())
        return OneVsRestMap.binning(len(self.classes_), self.edges_, self.values_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            self._check_loaded_lookups("edges_", "values_", lambda n_edges: n_edges + 1)
