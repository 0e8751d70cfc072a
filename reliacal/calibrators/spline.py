"""Spline calibration: a penalised logistic regression on a natural cubic spline of the log-odds."""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.special import expit
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.utils._param_validation import Interval, StrOptions

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._base import BaseCalibrator, ConvergenceWarning, waive_weight_equivalence
from reliacal.calibrators._checks import warn_uninformative
from reliacal.calibrators._classic import OneVsRestCalibrator

__all__ = ["SplineCalibration", "natural_spline_basis"]

#: Knots always added to those placed on the data: the log-odds of 0.1, ..., 0.9.
_FIXED_KNOTS = np.log(np.arange(1, 10) / (10 - np.arange(1, 10)))
# Newton on the penalised likelihood stops once the decrement (the predicted loss
# reduction of the step) is this small: at float64 rounding for the final fit, and
# far below the differences between held-out losses that pick lambda for the search's
# fits (each further Newton step costs a pass that forms the Hessian).
_DECREMENT = 1e-20
_SEARCH_DECREMENT = 1e-9
# Held-out losses within this of the best count as ties, broken towards smoothness.
_TIE = 1e-4


def natural_spline_basis(scores, knots) -> np.ndarray:
    """The natural cubic spline basis ``(n, K)`` of ``K >= 2`` increasing knots.

    Hastie, Tibshirani and Friedman, *The Elements of Statistical Learning*
    (2009), eq. (5.4)-(5.5): ``N_1 = 1``, ``N_2 = x`` and ``N_{k+2} = d_k - d_{K-1}``
    with ``d_k(x) = ((x - xi_k)_+^3 - (x - xi_K)_+^3) / (xi_K - xi_k)``. Every
    combination is a cubic spline with these knots that is linear beyond
    the boundary knots.

    Examples
    --------
    >>> basis = natural_spline_basis(np.array([-1.0, 0.5, 3.0]), np.array([0.0, 1.0, 2.0]))
    >>> basis.round(4)
    array([[ 1.    , -1.    ,  0.    ],
           [ 1.    ,  0.5   ,  0.0625],
           [ 1.    ,  3.    ,  6.    ]])
    """
    scores = np.asarray(scores, dtype=np.float64)[:, None]
    last = knots[-1]
    cubes = np.maximum(scores - knots[:-1], 0.0) ** 3 - np.maximum(scores - last, 0.0) ** 3
    d = cubes / (last - knots[:-1])
    return np.column_stack([np.ones(scores.shape[0]), scores[:, 0], d[:, :-1] - d[:, [-1]]])


def _unity_prior(total_weight: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic pairs on the identity ``P(y = 1 | s) = sigmoid(s)``: scores, targets, weights.

    The grid of probabilities is dense in the middle (0.01, ..., 0.99, weight
    1 each) and log-spaced in the tails (1e-8 to 1e-2 and their complements,
    weight 1/18 each), scaled to ``total_weight`` in all.
    """
    tail = 10.0 ** np.linspace(-8, -2, 19)[:-1]
    probabilities = np.concatenate([tail, np.linspace(0.01, 0.99, 99), (1.0 - tail)[::-1]])
    weights = np.concatenate([np.full(18, 1 / 18), np.ones(99), np.full(18, 1 / 18)])
    weights *= total_weight / weights.sum()
    return np.log(probabilities) - np.log1p(-probabilities), probabilities, weights


def _fit_penalised(design, targets, weights, normaliser, penalty, start, *, max_iter, tolerance):
    """Minimise ``sum_i v_i l_i / N + penalty * ||beta||^2`` by Newton's method.

    ``l_i = log(1 + e^eta_i) - t_i eta_i``, ``eta = design @ beta``: strictly
    convex, so the damped Newton iteration from ``start`` converges.
    Returns ``(beta, converged, n_iter)``.
    """

    def loss(beta):
        eta = design @ beta
        return float(weights @ (np.logaddexp(0.0, eta) - targets * eta)) / normaliser + (
            penalty * float(beta @ beta)
        )

    beta = start.copy()
    value = loss(beta)
    ridge = 2.0 * penalty * np.eye(design.shape[1])
    for n_iter in range(1, max_iter + 1):
        probabilities = expit(design @ beta)
        gradient = design.T @ (weights * (probabilities - targets)) / normaliser
        gradient += 2.0 * penalty * beta
        root = np.sqrt(weights * probabilities * (1.0 - probabilities) / normaliser)
        scaled = design * root[:, None]
        hessian = scaled.T @ scaled + ridge
        try:
            step = -np.linalg.solve(hessian, gradient)
        except np.linalg.LinAlgError:
            step = -np.linalg.lstsq(hessian, gradient, rcond=None)[0]
        decrement = -float(gradient @ step)
        if not np.isfinite(decrement) or decrement <= tolerance:
            return beta, True, n_iter
        scale = 1.0
        while True:
            candidate = beta + scale * step
            candidate_value = loss(candidate)
            if candidate_value <= value - 0.25 * scale * decrement or scale < 1e-10:
                break
            scale *= 0.5
        if candidate_value >= value:
            # No decrease left at float64 resolution: at the optimum.
            return beta, True, n_iter
        beta, value = candidate, candidate_value
        if scale == 1.0 and decrement * decrement <= tolerance:
            # Newton's quadratic phase: the next decrement would be about this one
            # squared, below the tolerance, so the pass that forms it is saved.
            return beta, True, n_iter
    return beta, False, max_iter


def _held_out_log_loss(design, targets, weights, beta) -> float:
    eta = design @ beta
    losses = np.logaddexp(0.0, eta) - targets * eta
    return float(weights @ losses / weights.sum())


class SplineCalibration(OneVsRestCalibrator):
    r"""Spline calibration: ``p = sigmoid(f(s))``, ``f`` a natural cubic spline of the log-odds.

    Lucena, "Spline-Based Probability Calibration", arXiv 1809.07751, 2018
    (the method of the ``splinecalib`` package, which probmetrics wraps).
    ``f`` is a natural cubic spline (linear beyond its boundary knots) in
    the basis of ``natural_spline_basis``, whose coefficients ``beta``
    minimise a ridge-penalised logistic loss,

    .. math::

        \frac{1}{N} \Big( \sum_i w_i \ell(f(s_i), y_i)
        + \sum_j v_j \ell(f(g_j), \sigma(g_j)) \Big)
        + \frac{\lambda}{p} \|\beta\|^2 ,

    where the second sum is a *unity prior*: synthetic pairs on the identity
    map at a grid of log-odds ``g_j`` (total weight ``unity_prior_weight``)
    that pull ``f`` towards ``f(s) = s`` where data are scarce; ``N`` counts
    the data weight plus the grid points and ``p`` the coefficients. The
    knots are ``n_knots`` quantiles of the distinct calibration scores plus
    the log-odds of 0.1, ..., 0.9. ``lambda`` is chosen on a log grid by the
    held-out log loss of stratified folds (``param_search="fast"``: the
    first fold only, as ``splinecalib`` does by default; ``"full"``: all
    folds), ties within ``1e-4`` going to the larger (smoother) ``lambda``;
    then the map is refitted on all rows. Each fit is Newton's method to
    float64 precision, warm-started along the ``lambda`` grid.

    Where it differs from ``splinecalib``: the knots are quantiles instead
    of a random sample; the folds hold the data rows only (the prior rows
    are always in the training part); the final fit uses all rows; and the
    unity prior's grid keeps its exact log-odds instead of clipping them.

    For two classes one map on ``s = z_1 - z_0`` (the 1-D score itself for
    1-D input); for ``K > 2`` one map per class on its one-vs-rest log-odds
    ``s_k = log p_k - log(1 - p_k)``, ``p = softmax(z)``, rows divided by
    their sums (as ``splinecalib`` does on the class probabilities).

    Parameters
    ----------
    n_knots : int, default=30
        Knots placed at quantiles of the distinct scores (``splinecalib``'s
        ``knot_sample_size``); fewer distinct scores use them all.
    reg_param_grid : array-like, default=None
        The ``lambda`` values searched; ``None``: ``logspace(-4, 4, 17)``, the
        ``splinecalib`` default. One value skips the search.
    cv : int, default=5
        Folds of the search, stratified by the map's labels (plain folds
        when a label has fewer rows than folds).
    param_search : {"fast", "full"}, default="fast"
        Score ``lambda`` on the first fold only, or on all folds (``cv``
        times the work).
    unity_prior_weight : float, default=20.0
        Total weight of the synthetic identity pairs; 0 removes the prior.
    random_state : int, RandomState instance or None, default=42
        Shuffling of the folds (42 as in ``splinecalib``).
    max_iter : int, default=100
        Maximum Newton steps per fit.
    {base_parameters}

    Attributes
    ----------
    knots_ : list of ndarray
        Per map (``m = 1`` for two classes, else ``K``), the spline's knots
        on the log-odds scale.
    coef_ : list of ndarray
        Per map, the spline coefficients ``beta``.
    reg_param_ : ndarray of shape (m,)
        The ``lambda`` chosen for each map.
    n_iter_ : int
        Most Newton steps taken by one fit (search fits included).
    {base_attributes}

    See Also
    --------
    PlattScaling : the linear special case (``f(s) = a s + b``).
    IsotonicCalibration : a non-parametric monotone map.

    {classic_notes}

    Examples
    --------
    Scores ``s`` whose true log-odds, ``tanh(s)``, saturate beyond ``|s| > 2``:

    >>> import numpy as np
    >>> from reliacal.calibrators import SplineCalibration
    >>> rng = np.random.default_rng(0)
    >>> scores = rng.normal(0.0, 3.0, size=2000)
    >>> y = (rng.uniform(size=2000) < 1 / (1 + np.exp(-np.tanh(scores)))).astype(int)
    >>> spline = SplineCalibration().fit(scores, y)
    >>> spline.predict_proba(np.array([-6.0, 0.0, 6.0]))[:, 1].round(2)  # truth: .27, .5, .73
    array([0.25, 0.51, 0.7 ])
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "n_knots": [Interval(numbers.Integral, 2, None, closed="left")],
        "reg_param_grid": ["array-like", None],
        "cv": [Interval(numbers.Integral, 2, None, closed="left")],
        "param_search": [StrOptions({"fast", "full"})],
        "unity_prior_weight": [Interval(numbers.Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_knots: int = 30,
        reg_param_grid=None,
        *,
        cv: int = 5,
        param_search: str = "fast",
        unity_prior_weight: float = 20.0,
        random_state=42,
        max_iter: int = 100,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _grid(self) -> np.ndarray:
        if self.reg_param_grid is None:
            return np.logspace(-4, 4, 17)
        grid = np.asarray(self.reg_param_grid, dtype=np.float64).ravel()
        if grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid < 0):
            raise ValueError(
                f"reg_param_grid must hold finite non-negative values, got {self.reg_param_grid!r}"
            )
        return grid

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        warn_uninformative(self, logits, y_index, sample_weight)
        super()._fit_core(features, logits, y_index, sample_weight)

    def _knots(self, scores) -> np.ndarray:
        distinct = np.unique(scores)
        if distinct.size > self.n_knots:
            distinct = np.quantile(distinct, np.linspace(0.0, 1.0, self.n_knots))
        return np.unique(np.concatenate([distinct, _FIXED_KNOTS]))

    def _folds(self, targets, weights) -> list:
        rows = np.flatnonzero(weights > 0)
        labels = targets[rows] > 0.5
        counts = np.bincount(labels.astype(int), minlength=2)
        if counts.min() >= self.cv:
            splitter = StratifiedKFold(self.cv, shuffle=True, random_state=self.random_state)
        elif rows.size >= self.cv:
            splitter = KFold(self.cv, shuffle=True, random_state=self.random_state)
        else:
            return []
        folds = [(rows[train], rows[test]) for train, test in splitter.split(rows, labels)]
        return folds[:1] if self.param_search == "fast" else folds

    def _fit_map(self, score, target, weights, grid):
        knots = self._knots(score[weights > 0])
        prior_scores, prior_targets, prior_weights = _unity_prior(self.unity_prior_weight)
        design = natural_spline_basis(score, knots)
        prior_design = natural_spline_basis(prior_scores, knots)
        n_coef = design.shape[1]
        converged = True
        steps = 0

        def stacked(rows):
            """The design, targets, weights and normaliser of ``rows`` plus the prior."""
            return (
                np.vstack([design[rows], prior_design]),
                np.concatenate([target[rows], prior_targets]),
                np.concatenate([weights[rows], prior_weights]),
                float(weights[rows].sum()) + prior_scores.size,
            )

        def fit(problem, penalty, start, tolerance):
            nonlocal converged, steps
            beta, ok, n_iter = _fit_penalised(
                *problem, penalty / n_coef, start, max_iter=self.max_iter, tolerance=tolerance
            )
            converged &= ok
            steps = max(steps, n_iter)
            return beta

        # Start at the identity f(s) = s, which the prior pulls towards.
        identity = np.zeros(n_coef)
        identity[1] = 1.0
        folds = self._folds(target, weights) if grid.size > 1 else []
        if folds:
            # Largest lambda first: each fit warm-starts the next, less penalised one.
            order = np.argsort(grid)[::-1]
            losses = np.zeros(grid.size)
            for train, test in folds:
                problem = stacked(train)
                beta = identity
                for index in order:
                    beta = fit(problem, grid[index], beta, _SEARCH_DECREMENT)
                    losses[index] += _held_out_log_loss(
                        design[test], target[test], weights[test], beta
                    )
            losses /= len(folds)
            tied = losses <= losses.min() + _TIE
            chosen = float(grid[tied].max())
        else:
            chosen = float(np.median(grid))
        beta = fit(stacked(np.flatnonzero(weights > 0)), chosen, identity, _DECREMENT)
        return knots, beta, chosen, converged, steps

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        weights = np.ones(scores.shape[0]) if sample_weight is None else sample_weight
        grid = self._grid()
        self.knots_, self.coef_, chosen, failed = [], [], [], []
        self.n_iter_ = 0
        for column in range(scores.shape[1]):
            knots, beta, reg_param, converged, steps = self._fit_map(
                scores[:, column], targets[:, column], weights, grid
            )
            self.n_iter_ = max(self.n_iter_, steps)
            self.knots_.append(knots)
            self.coef_.append(beta)
            chosen.append(reg_param)
            if not converged:
                failed.append(column)
        self.reg_param_ = np.array(chosen)
        if failed:
            warnings.warn(
                f"SplineCalibration: the Newton fits of map(s) {failed[:10]} did not converge "
                f"in max_iter={self.max_iter} steps; raise max_iter",
                ConvergenceWarning,
                stacklevel=4,
            )

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            from reliacal.persistence import check_loaded_array, loaded_state_error

            n_maps = self._n_maps()
            for name in ("knots_", "coef_"):
                tables = getattr(self, name, None)
                if not isinstance(tables, list) or len(tables) != n_maps:
                    raise loaded_state_error(self, name, tables, f"a list of {n_maps} arrays")
            for m, (knots, beta) in enumerate(zip(self.knots_, self.coef_)):
                knots = check_loaded_array(self, f"knots_[{m}]", (None,), value=knots)
                # The basis divides by the distances to the last knot: strictly increasing.
                if knots.shape[0] < 2 or not np.all(np.diff(knots) > 0):
                    raise loaded_state_error(
                        self, f"knots_[{m}]", knots, "two or more strictly increasing knots"
                    )
                check_loaded_array(self, f"coef_[{m}]", knots.shape, value=beta)
            check_loaded_array(self, "reg_param_", (n_maps,), minimum=0.0)

    def _apply_maps(self, scores) -> np.ndarray:
        return np.column_stack(
            [
                expit(natural_spline_basis(scores[:, column], knots) @ beta)
                for column, (knots, beta) in enumerate(zip(self.knots_, self.coef_))
            ]
        )

    def _expected_failed_checks(self) -> dict[str, str]:
        folds = "the lambda search's folds (cv is a number of folds, not the check's splits)"
        return {**super()._expected_failed_checks(), **waive_weight_equivalence(folds)}

    def _torch_map(self):
        """A ``torch.nn.Module``: float64 logits ``(n, K)`` -> ``predict_proba``'s probabilities."""
        from reliacal.calibrators._torch_maps import OneVsRestMap, SplineMaps

        return OneVsRestMap(SplineMaps(self.knots_, self.coef_), len(self.classes_))
