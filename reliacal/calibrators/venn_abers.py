"""Venn-Abers calibration: inductive (IVAP) and cross (CVAP) Venn-Abers predictors.

For a test score ``s`` the inductive Venn-Abers predictor (Vovk, Petej and
Fedorova, NeurIPS 2015) fits isotonic regression twice on the calibration
pairs plus the test pair, once labelled 0 and once labelled 1; the two
fitted values at ``s``, ``p0 <= p1``, bracket the probability of the
positive class. Both depend on ``s`` only through its place among the
distinct calibration scores ``c_1 < ... < c_k``, so they are computed once,
for the ``k + 1`` gaps, at fit time.

The computation uses the cumulative sum diagram: ``P_j = (W_j, S_j)``, the
cumulative weight and label sum through ``c_j`` (``P_0 = (0, 0)``).
Inserting the test pair (weight 1, label ``d``) in gap ``g`` and translating
the diagram, the fitted value at the test pair is the slope of the greatest
convex minorant of ``{P_a - (1, d): a <= g} U {P_b: b >= g}`` over the test
pair's unit of weight, that is the slope of the bridge between the lower
hull of the (translated) prefix and that of the suffix, or in min-max form

    ``f_d(g) = min_{b >= g} max_{a <= g} (S_b - S_a + d) / (W_b - W_a + 1)``.

Moving the test pair one gap to the right only removes terms from the
``min`` and adds terms to the ``max`` (the blocks' contents do not depend on
the order), so ``f_d`` is non-decreasing in ``g``, and so are the bridge's
endpoints ``a*(g)`` and ``b*(g)``. One sweep over the gaps therefore
suffices: the prefix hull is a stack (points are only added on the right),
the suffix hulls are chains of "next vertex" pointers computed in one sweep
from the right, and each bridge endpoint only moves right, so the total
work is linear after the ``O(n log n)`` sort.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.model_selection import StratifiedKFold
from sklearn.utils._param_validation import Interval

from reliacal._docstrings import shared_doc
from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._base import BaseCalibrator, waive_weight_equivalence
from reliacal.calibrators._checks import warn_uninformative
from reliacal.calibrators._classic import CLASSIC_METHOD_DOCS, OneVsRestCalibrator

__all__ = ["VennAbersCalibration", "cumulative_diagram", "venn_abers_bounds"]

_INF = float("inf")


def cumulative_diagram(scores, targets, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct scores and the cumulative sum diagram ``(knots, W, S)``.

    ``W[j]`` and ``S[j]`` are the summed weights and weighted targets of the
    scores up to and including ``knots[j - 1]`` (``W[0] = S[0] = 0``); samples
    of zero weight are dropped.

    Examples
    --------
    >>> knots, W, S = cumulative_diagram(np.array([0.3, 0.1, 0.3]), np.array([1.0, 0.0, 0.0]),
    ...                                  np.ones(3))
    >>> knots, W, S
    (array([0.1, 0.3]), array([0., 1., 3.]), array([0., 0., 1.]))
    """
    keep = weights > 0
    if not keep.all():
        scores, targets, weights = scores[keep], targets[keep], weights[keep]
    order = np.argsort(scores, kind="stable")
    scores = scores[order]
    # The last row of each run of tied scores closes a point of the diagram.
    last = np.flatnonzero(np.append(scores[1:] != scores[:-1], True))
    knots = scores[last]
    cumulative_weights = np.concatenate([[0.0], np.cumsum(weights[order])[last]])
    cumulative_targets = np.concatenate([[0.0], np.cumsum((weights * targets)[order])[last]])
    return knots, cumulative_weights, cumulative_targets


def _suffix_hulls(W: list, S: list) -> tuple[list, list]:
    """For each point ``j``, the next vertex of the lower hull of ``P_j..P_k`` and its slope.

    One sweep from the right with a stack (the hull of the suffix seen so
    far); the pointers keep every suffix's hull, which a destructive stack
    alone would not (removing a suffix's first point can expose others).
    The last point has no successor: index -1, slope ``inf``.
    """
    k = len(W) - 1
    following = [-1] * (k + 1)
    slopes = [_INF] * (k + 1)
    stack = [k]
    for j in range(k - 1, -1, -1):
        x, y = W[j], S[j]
        top = stack[-1]
        slope = (S[top] - y) / (W[top] - x)
        # The top is no vertex when the slope to it is at least its own outgoing slope
        # (the last point's is inf, so the stack never empties).
        while slope >= slopes[top]:
            stack.pop()
            top = stack[-1]
            slope = (S[top] - y) / (W[top] - x)
        following[j] = top
        slopes[j] = slope
        stack.append(j)
    return following, slopes


def venn_abers_bounds(W: np.ndarray, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(p0, p1)`` for each of the ``k + 1`` gaps of a cumulative sum diagram.

    ``p_d[g]`` is the isotonic regression value, at a test pair of weight 1
    and label ``d`` placed after the ``g`` smallest distinct calibration
    scores, of the calibration pairs plus that test pair (see the module
    docstring for the method). Linear in ``k``.

    Examples
    --------
    Calibration labels 0, 1, 0, 1 at increasing scores:

    >>> p0, p1 = venn_abers_bounds(np.arange(5.0), np.array([0.0, 0.0, 1.0, 1.0, 2.0]))
    >>> p0.round(4)
    array([0.    , 0.    , 0.3333, 0.3333, 0.5   ])
    >>> p1.round(4)
    array([0.5   , 0.6667, 0.6667, 1.    , 1.    ])
    """
    W = W.tolist()
    S = S.tolist()
    k = len(W) - 1
    following, right_slopes = _suffix_hulls(W, S)
    lower = [0.0] * (k + 1)
    upper = [0.0] * (k + 1)
    # The prefix hull as a stack of vertex coordinates and its edge slopes
    # (edges[i] joins vertices i and i + 1); it is the same for both labels, whose
    # translations of it do not change its shape.
    hull_x, hull_y, edges = [], [], []
    # Per label (0: p0, 1: p1): the left endpoint's stack position, the right
    # endpoint's point index and the current slope, a lower bound of the answer that
    # never decreases. The two labels' sweeps are written out: this loop is the cost
    # of a fit, and a loop over the labels doubles it.
    position0 = right0 = position1 = right1 = 0
    sigma0 = sigma1 = 0.0
    top = -1  # the stack position of the last vertex
    for g in range(k + 1):
        x = W[g]
        y = S[g]
        while top > 0 and (y - hull_y[top]) / (x - hull_x[top]) <= edges[top - 1]:
            hull_x.pop()
            hull_y.pop()
            edges.pop()
            top -= 1
        if top >= 0:
            edges.append((y - hull_y[top]) / (x - hull_x[top]))
        hull_x.append(x)
        hull_y.append(y)
        top += 1
        # A left endpoint that was popped is replaced by the new point (module docstring).
        if position0 > top:
            position0 = top
        if position1 > top:
            position1 = top
        if right0 < g:
            right0 = g
        if right1 < g:
            right1 = g
        while True:  # label 0
            while position0 < top and edges[position0] <= sigma0:
                position0 += 1
            while right_slopes[right0] <= sigma0:
                right0 = following[right0]
            candidate = (S[right0] - hull_y[position0]) / (W[right0] - hull_x[position0] + 1.0)
            # The next breakpoint of either endpoint's support as the slope grows.
            limit = right_slopes[right0]
            if position0 < top and edges[position0] < limit:
                limit = edges[position0]
            if candidate <= limit:
                if candidate > sigma0:
                    sigma0 = candidate
                break
            sigma0 = limit
        lower[g] = sigma0
        while True:  # label 1
            while position1 < top and edges[position1] <= sigma1:
                position1 += 1
            while right_slopes[right1] <= sigma1:
                right1 = following[right1]
            candidate = (S[right1] - hull_y[position1] + 1.0) / (
                W[right1] - hull_x[position1] + 1.0
            )
            limit = right_slopes[right1]
            if position1 < top and edges[position1] < limit:
                limit = edges[position1]
            if candidate <= limit:
                if candidate > sigma1:
                    sigma1 = candidate
                break
            sigma1 = limit
        upper[g] = sigma1
    return np.array(lower), np.array(upper)


class VennAbersCalibration(OneVsRestCalibrator):
    r"""Venn-Abers calibration: inductive (IVAP) or cross (CVAP) Venn-Abers predictors.

    Vovk, Petej and Fedorova, "Large-scale probabilistic predictors with and
    without guarantees of validity", NeurIPS 2015. For a test score ``s``,
    isotonic regression is fitted on the calibration pairs plus ``(s, 0)``
    and plus ``(s, 1)``; its two values at ``s`` give the multiprobability
    ``[p0, p1]`` (``p0 <= p1``), which is valid (calibrated) under
    exchangeability whatever the model. ``predict_proba`` merges the pair
    into the probability that minimises the worst-case log loss,

    .. math::

        p = \frac{p_1}{1 - p_0 + p_1},

    and ``predict_interval`` returns ``[p0, p1]`` itself. The bounds of all
    test scores are tabulated at fit time in ``O(n log n)`` (a sort, then a
    linear sweep over the convex hulls of the cumulative sum diagram; see
    ``venn_abers_bounds``); a test score equal to a calibration score is
    placed after the tied calibration scores for ``p0`` and before them for
    ``p1``, as the ``venn-abers`` package does.

    ``inductive=False`` gives the cross Venn-Abers predictor: the calibration
    rows are split into ``n_splits`` stratified folds, one IVAP is fitted on
    each fold, and their bounds are merged by geometric means (Vovk et al.,
    Section 4): ``p1 = GM(p1_i)`` and ``1 - p0 = GM(1 - p0_i)``, so the
    merged probability is ``GM(p1_i) / (GM(1 - p0_i) + GM(p1_i))``. On the
    fixed outputs of one model each fold's IVAP sees only its own rows; the
    cross version pays off when each fold's scores come from a model trained
    without that fold, which is beyond a post-hoc calibrator.

    For two classes the scores are ``s = z_1 - z_0`` (the 1-D score itself
    for 1-D input). For ``K > 2`` classes one predictor per class on its
    one-vs-rest log-odds ``s_k = log p_k - log(1 - p_k)``, ``p = softmax(z)``
    (ranks as ``p_k`` does), and the ``K`` merged probabilities divided by
    their sum, as the ``venn-abers`` package's one-vs-all mode does. (Where
    ``p_k`` rounds to 1 in float64 the log-odds still tell the rows apart;
    the package, reading the probabilities, ties them.)
    Sample weights count as repetitions of the rows (the test pair weighs 1).

    Parameters
    ----------
    inductive : bool, default=True
        ``True``: IVAP on all calibration rows (the default: with fixed
        scores it uses every row for the one predictor). ``False``: CVAP
        over ``n_splits`` folds.
    n_splits : int, default=5
        Folds of the cross predictor (ignored when ``inductive``), as in
        ``venn_abers.VennAbersCalibrator``'s examples.
    random_state : int, RandomState instance or None, default=0
        Shuffling of the stratified folds (cross predictor only).
    {base_parameters}

    Attributes
    ----------
    knots_ : list of list of ndarray
        Per fold (one for the inductive predictor) and per map (``m = 1`` for
        two classes, else ``K``), the distinct calibration scores, increasing.
    lower_ : list of list of ndarray
        Per fold and map, ``p0`` of each gap between the knots (length
        ``len(knots) + 1``).
    upper_ : list of list of ndarray
        Per fold and map, ``p1`` of each gap.
    {base_attributes}

    See Also
    --------
    IsotonicCalibration : the single isotonic fit these bounds bracket.

    {classic_notes}

    {isotonic_examples}
    >>> from reliacal.calibrators import VennAbersCalibration
    >>> va = VennAbersCalibration().fit(scores, y)
    >>> va.predict_interval(np.array([-1.5, 2.5])).round(3)  # [p0, p1] per score
    array([[0.   , 0.667],
           [0.667, 1.   ]])
    >>> va.predict_proba(np.array([-1.5, 2.5]))[:, 1].round(3)  # p1 / (1 - p0 + p1)
    array([0.4 , 0.75])
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "inductive": ["boolean"],
        "n_splits": [Interval(numbers.Integral, 2, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, inductive: bool = True, *, n_splits: int = 5, random_state=0, **base_params):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        warn_uninformative(self, logits, y_index, sample_weight)
        if self.inductive:
            self._folds = [np.arange(y_index.shape[0])]
        else:
            counts = np.bincount(y_index)
            if counts.max() < self.n_splits:
                raise ValueError(
                    f"n_splits={self.n_splits} folds need at least {self.n_splits} samples of "
                    f"some class, got {y_index.shape[0]} sample(s) whose largest class has "
                    f"{counts.max()}: pass more data, a smaller n_splits or inductive=True"
                )
            splitter = StratifiedKFold(self.n_splits, shuffle=True, random_state=self.random_state)
            self._folds = [test for _, test in splitter.split(logits, y_index)]
        try:
            super()._fit_core(features, logits, y_index, sample_weight)
        finally:
            # The rows of each fold are fit-time data only, not a fitted attribute.
            del self._folds

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        weights = np.ones(scores.shape[0]) if sample_weight is None else sample_weight
        self.knots_, self.lower_, self.upper_ = [], [], []
        for rows in self._folds:
            knots, lower, upper = [], [], []
            for column in range(scores.shape[1]):
                points, W, S = cumulative_diagram(
                    scores[rows, column], targets[rows, column], weights[rows]
                )
                p0, p1 = venn_abers_bounds(W, S)
                knots.append(points)
                lower.append(p0)
                upper.append(p1)
            self.knots_.append(knots)
            self.lower_.append(lower)
            self.upper_.append(upper)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            self._check_loaded_predictors()

    def _check_loaded_predictors(self) -> None:
        """One predictor per fold, each with a sorted table of knots per map and the
        bounds of its ``len(knots) + 1`` gaps: ``p0`` in ``[0, 1)``, ``p1`` in ``(0, 1]``."""
        from reliacal.persistence import check_loaded_array, loaded_state_error

        n_folds = 1 if self.inductive else self.n_splits
        n_maps = self._n_maps()
        for name in ("knots_", "lower_", "upper_"):
            folds = getattr(self, name, None)
            if not (
                isinstance(folds, list)
                and len(folds) == n_folds
                and all(isinstance(fold, list) and len(fold) == n_maps for fold in folds)
            ):
                raise loaded_state_error(
                    self, name, folds, f"a list of {n_folds} lists of {n_maps} arrays"
                )
        for fold in range(n_folds):
            for m in range(n_maps):
                knots = check_loaded_array(
                    self,
                    f"knots_[{fold}][{m}]",
                    (None,),
                    value=self.knots_[fold][m],
                    increasing=True,
                )
                gaps = (knots.shape[0] + 1,)
                lower = check_loaded_array(
                    self,
                    f"lower_[{fold}][{m}]",
                    gaps,
                    value=self.lower_[fold][m],
                    minimum=0.0,
                    maximum=1.0,
                )
                if lower.max() >= 1.0:
                    raise loaded_state_error(
                        self, f"lower_[{fold}][{m}]", lower, "bounds p0 below 1"
                    )
                check_loaded_array(
                    self,
                    f"upper_[{fold}][{m}]",
                    gaps,
                    value=self.upper_[fold][m],
                    maximum=1.0,
                    positive=True,
                )

    def _fold_bounds(self, fold: int, scores) -> tuple[np.ndarray, np.ndarray]:
        """``(p0, p1)`` of shape ``(n, m)`` from the predictor of one fold."""
        knots, lower, upper = self.knots_[fold], self.lower_[fold], self.upper_[fold]
        p0 = np.empty(scores.shape)
        p1 = np.empty(scores.shape)
        for column in range(scores.shape[1]):
            score = scores[:, column]
            p0[:, column] = lower[column][np.searchsorted(knots[column], score, side="right")]
            p1[:, column] = upper[column][np.searchsorted(knots[column], score, side="left")]
        return p0, p1

    def _bounds(self, scores) -> tuple[np.ndarray, np.ndarray]:
        """Merged ``(p0, p1)`` of shape ``(n, m)``: geometric means over the folds."""
        per_fold = [self._fold_bounds(fold, scores) for fold in range(len(self.knots_))]
        if len(per_fold) == 1:
            return per_fold[0]
        # p1 > 0 and p0 < 1 always (the test pair itself weighs 1), so the logs are finite.
        log_upper = np.mean([np.log(p1) for _, p1 in per_fold], axis=0)
        log_complement = np.mean([np.log1p(-p0) for p0, _ in per_fold], axis=0)
        return -np.expm1(log_complement), np.exp(log_upper)

    def _apply_maps(self, scores) -> np.ndarray:
        p0, p1 = self._bounds(scores)
        return p1 / (1.0 - p0 + p1)

    @shared_doc(CLASSIC_METHOD_DOCS)
    def predict_interval(self, X) -> np.ndarray:
        """Return the Venn-Abers multiprobability ``[p0, p1]`` of each sample.

        {classic_input}

        Returns
        -------
        ndarray of shape (n_samples, 2) or (n_samples, K, 2)
            For two classes, ``[p0, p1]`` of the probability of
            ``classes_[1]``; for ``K > 2``, ``[p0, p1]`` of each class's
            one-vs-rest probability (before the rows are normalised). For
            the cross predictor, the merged bounds ``1 - GM(1 - p0_i)`` and
            ``GM(p1_i)``, whose ``p1 / (1 - p0 + p1)`` is ``predict_proba``'s
            value.
        """
        features, logits, _ = self._transform_inputs(X)
        p0, p1 = self._bounds(self._mapped_scores(logits))
        intervals = np.stack([p0, p1], axis=-1)
        return intervals[:, 0, :] if logits.shape[1] == 2 else intervals

    def _expected_failed_checks(self) -> dict[str, str]:
        waived = super()._expected_failed_checks()
        if not self.inductive:
            waived.update(waive_weight_equivalence("the cross predictor's folds"))
        return waived

    def _torch_map(self):
        """A ``torch.nn.Module``: float64 logits ``(n, K)`` -> ``predict_proba``'s probabilities."""
        from reliacal.calibrators._torch_maps import OneVsRestMap, VennAbersMaps

        return OneVsRestMap(
            VennAbersMaps(self.knots_, self.lower_, self.upper_), len(self.classes_)
        )
