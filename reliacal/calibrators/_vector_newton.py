"""Vector scaling's optimum by safeguarded Newton-type steps, one pass over the logits each.

The loss of vector scaling is the mean weighted NLL of ``softmax(a * z + b)``
plus ``mu * sum_k b_k^2``; it is convex in ``theta = (a, b)`` (``2K``
parameters). With ``p_i = softmax(a * z_i + b)`` and ``q_i = (p_i * z_i,
p_i)``, its gradient and Hessian are

    g_a = sum_i w_i (p_i - y_i) * z_i,    g_b = sum_i w_i (p_i - y_i) + 2 mu b,
    H = D - sum_i w_i q_i q_i^T + 2 mu [0, 0; 0, I],

``D`` holding the per-class ``2 x 2`` blocks ``sum_i w_i p_ik [z_ik^2, z_ik;
z_ik, 1]`` on its diagonals. One pass over the logits (row chunks that stay
in cache) computes the loss, ``g`` and ``H`` at one ``theta``; the outer
product is one matrix product per chunk.

A fit

1. takes a subset of the rows, every ``_SUBSET_FRACTION``-th of each class,
   each class reweighted to its total weight, and starts from that subset's
   NLL-optimal temperature (``a = 1 / T``, ``b = 0``), on the logits divided
   by the power of two ``2**k`` that brings the subset's largest row range
   near 1 (the temperature solver's ``k``; 0 for ordinary logits), so that
   extreme scales neither overflow nor underflow; the first pass finds the
   logits' own ``k``, and a ``k`` more than ``_KEPT_SHIFT`` off (rows the
   subset missed set the scale) ends this fit;
2. takes a step per pass to the minimum of a model: the subset's loss plus
   the linear and quadratic terms that give it the whole loss's gradient
   and Hessian at the pass's point (``_SubsetModel``, minimised by Newton
   steps on the subset). The model keeps the softmax's curvature far from
   the point, which a Newton step's quadratic model misses, so from a start
   a few units off the steps approach the optimum faster than Newton's
   (whose step ``H s = -g`` is the model's first and its fallback);
   backtracking on the true loss, which the next pass computes with the
   next ``g`` and ``H``. Steps are shortened to ``_MAX_STEP`` (see
   ``_step_length``; ``H`` is singular along ``b -> b + c`` without a
   penalty, a direction the gradient never has, and is solved with that
   direction's curvature filled in);
3. stops once the largest gradient component is below ``tol`` (the test of
   L-BFGS-B's ``gtol``), and then adds the last Newton step (short there),
   which puts the solution at the optimum within the square of that step.

Without a subset (too few rows, or more than ``_REUSE_HESSIAN_CLASSES``
classes), or when that fit fails, plain Newton steps start from the
NLL-optimal temperature of all the rows (its solver reads them two or three
times).

With many classes (``_REUSE_HESSIAN_CLASSES``) the outer products cost most
of a pass: after a step shorter than ``_REUSE_STEP`` a pass computes only
the loss and ``g``, and the step comes from the last Hessian's factor
updated by BFGS with the gradients seen since (quasi-Newton steps, which
go on below ``tol`` until one is shorter than ``_FINAL_CHORD_STEP``).

``None`` is returned when the steps stop decreasing the loss, when they keep
heading far away or stay long on a flat loss (no finite optimum: a class the
logits separate), or after ``_MAX_PASSES`` passes: the caller falls back to
L-BFGS, which stops where it always did.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from reliacal.calibrators._blas import single_threaded_blas
from reliacal.calibrators._temperature_nll import (
    _KEPT_SHIFT,
    _chunk_extremes,
    _scale_exponent,
    fit_nll,
)

# Bytes of one chunk of the logits in float64: large enough for an efficient matrix
# product per chunk, small enough to stay in cache with its temporaries.
_CHUNK_BYTES = 1 << 20
_MIN_CHUNK_ROWS = 512
# Up to this many classes the outer products are accumulated in float64; above it in
# float32, twice as fast, whose rounding (~1e-7 relative) only slows Newton's
# quadratic convergence to a linear one at that rate.
_FLOAT64_HESSIAN_CLASSES = 256
# Multiply-adds of a fit's outer products above which they run on the BLAS thread pool.
_THREADED_PRODUCT = 1 << 31
# Newton steps longer than this (see _step_length) are shortened: a trust region for
# the first steps, before the line search judges them.
_MAX_STEP = 4.0
# This many shortened steps in a row mean a parameter heads to infinity (a class that
# the logits separate: no finite optimum); the caller's L-BFGS then stops where it did.
_MAX_SHORTENED = 8
# The last Newton step, added to the solution, is at most this long; a longer one where
# the gradient is below tol means a flat direction to infinity (as _MAX_SHORTENED).
_FINAL_STEP = 1e-2
# Armijo's constant, and the halvings of one step before the fit gives up.
_ARMIJO = 1e-4
_MAX_HALVINGS = 30
# Above this many classes a pass after a step shorter than _REUSE_STEP skips the outer
# products: the last Hessian's factor, updated by BFGS, gives the step.
_REUSE_HESSIAN_CLASSES = 256
_REUSE_STEP = 0.5
# Quasi-Newton steps go on below tol until they are this short.
_FINAL_CHORD_STEP = 1e-5
# Passes after which the fit gives up (the caller then runs L-BFGS).
_MAX_PASSES = 100
# The start is the optimum on every _SUBSET_FRACTION-th row of each class, where that
# subset has at least _MIN_SUBSET_ROWS rows and _SUBSET_ROWS_PER_PARAMETER per parameter;
# its temperature is solved to _SUBSET_TOL in log T (a start: larger errors are fine).
_SUBSET_FRACTION = 8
_MIN_SUBSET_ROWS = 256
_SUBSET_ROWS_PER_PARAMETER = 2
_SUBSET_TOL = 1e-4
# Newton steps on a subset model, at most; they stop once shorter than _MODEL_PRECISION
# times the square of the first.
_MODEL_STEPS = 20
_MODEL_PRECISION = 1e-2


@dataclass
class NewtonResult:
    """The fitted ``coef`` (``a``) and ``intercept`` (``b``), and the Newton steps taken."""

    coef: np.ndarray
    intercept: np.ndarray
    n_iter: int


class _VectorObjective:
    """Loss, gradient and Hessian of vector scaling on ``z / 2**k``, one pass each."""

    def __init__(self, logits, y_index, weights, bias_weight, scale_exponent):
        self.logits, self.y_index, self.weights = logits, y_index, weights
        self.bias_weight = bias_weight
        self.inverse_scale = float(np.ldexp(1.0, -scale_exponent))
        self.input_exponent = scale_exponent
        n_samples, n_classes = logits.shape
        self.rows = max(_MIN_CHUNK_ROWS, _CHUNK_BYTES // (8 * n_classes))
        self.hessian_dtype = np.float64 if n_classes <= _FLOAT64_HESSIAN_CLASSES else np.float32
        self.label_gradient = None  # (sum_i w_i y_i z_i, sum_i w_i y_i), from the first pass
        # From the first pass too: the columns that are zero in every row, and the
        # exponent of the logits' own largest row range (the temperature solver's).
        self.zero_columns = self.scale_exponent = None
        self.n_passes = 0

    def _chunk(self, start, stop):
        chunk = np.asarray(self.logits[start:stop], dtype=np.float64)
        if self.inverse_scale != 1.0:
            chunk = chunk * self.inverse_scale  # a power of two: exact
        return chunk

    def evaluate(self, coef, intercept, with_hessian=True):
        """``(loss, gradient, hessian)`` at ``(coef, intercept)`` from one pass.

        ``hessian`` is None unless ``with_hessian``.
        """
        n_samples, n_classes = self.logits.shape
        self.n_passes += 1
        first = self.label_gradient is None
        if first:
            label_a, label_b = np.zeros(n_classes), np.zeros(n_classes)
            nonzero = np.zeros(n_classes, dtype=bool)
            row_max, row_min = np.empty(n_samples), np.empty(n_samples)
        nll = 0.0
        grad_a, grad_b = np.zeros(n_classes), np.zeros(n_classes)
        diag_aa = np.zeros(n_classes)
        size = 2 * n_classes
        outer = np.zeros((size, size), self.hessian_dtype) if with_hessian else None
        ones = np.ones(n_classes)
        for start in range(0, n_samples, self.rows):
            stop = min(start + self.rows, n_samples)
            z = self._chunk(start, stop)
            weights, labels = self.weights[start:stop], self.y_index[start:stop]
            index = np.arange(stop - start)
            calibrated = z * coef
            calibrated += intercept
            top = calibrated.max(axis=1)
            true_logits = calibrated[index, labels] - top
            calibrated -= top[:, None]
            probabilities = np.exp(calibrated, out=calibrated)
            row_sums = probabilities @ ones
            nll += float(weights @ (np.log(row_sums) - true_logits))
            probabilities *= (1.0 / row_sums)[:, None]
            scaled = probabilities * z  # p * z
            grad_b += weights @ probabilities
            grad_a += weights @ scaled
            if first:
                label_a += np.bincount(labels, weights * z[index, labels], n_classes)
                label_b += np.bincount(labels, weights, n_classes)
                nonzero |= np.any(z, axis=0)
                _chunk_extremes(z, row_max[start:stop], row_min[start:stop])
            if not with_hessian:
                continue
            diag_aa += weights @ (scaled * z)
            root = np.sqrt(weights)[:, None]
            stacked = np.empty((stop - start, 2 * n_classes), dtype=self.hessian_dtype)
            np.multiply(scaled, root, out=stacked[:, :n_classes], casting="same_kind")
            np.multiply(probabilities, root, out=stacked[:, n_classes:], casting="same_kind")
            outer += stacked.T @ stacked
        if first:
            self.label_gradient = (label_a, label_b)
            self.zero_columns = ~nonzero
            # z was divided by 2**k: the exponent of the logits' own range is k more.
            self.scale_exponent = _scale_exponent(row_max, row_min) + self.input_exponent
        label_a, label_b = self.label_gradient
        loss = nll + self.bias_weight * float(intercept @ intercept)
        gradient = np.concatenate(
            [grad_a - label_a, grad_b - label_b + 2.0 * self.bias_weight * intercept]
        )
        if not with_hessian:
            return loss, gradient, None
        # D's diagonals (their b-b and a-b parts are the p-weighted sums of the gradient).
        hessian = -outer.astype(np.float64)
        diagonal = np.arange(n_classes)
        hessian[diagonal, diagonal] += diag_aa
        hessian[diagonal, diagonal + n_classes] += grad_a
        hessian[diagonal + n_classes, diagonal] += grad_a
        hessian[diagonal + n_classes, diagonal + n_classes] += grad_b + 2.0 * self.bias_weight
        # The product left its lower and upper triangles equal only to rounding.
        hessian = 0.5 * (hessian + hessian.T)
        return loss, gradient, hessian


def _factor(hessian):
    """Cholesky factor of ``H``, its null direction ``b -> b + c`` filled in; None if none.

    ``-cho_solve(factor, g)`` is then the Newton step.

    The gradient is orthogonal to that direction (the probabilities of a row
    sum to one), so adding its outer product leaves the solution unchanged
    where ``H`` is regular and makes it regular there. Other near-null
    directions (a class whose logits are all zero) get a small ridge.
    """
    size = len(hessian)
    n_classes = size // 2
    shift = np.zeros(size)
    shift[n_classes:] = 1.0 / np.sqrt(n_classes)
    scale = max(float(np.max(np.abs(np.diag(hessian)))), np.finfo(np.float64).tiny)
    regular = hessian + scale * np.outer(shift, shift)
    ridge = 1e-12 * scale
    for _ in range(8):
        try:
            factor = scipy.linalg.cho_factor(
                regular + ridge * np.eye(size), lower=True, check_finite=False
            )
        except np.linalg.LinAlgError:
            ridge *= 100.0
            continue
        if np.all(np.isfinite(factor[0])):
            return factor
        ridge *= 100.0
    return None


def fit_vector_newton(
    logits, y_index, weights, *, bias_weight, tol, max_iter, start, scale_exponent, subset=None
):
    """The optimum of vector scaling from ``theta = start``; None when it fails.

    ``weights`` sum to one; ``start`` is ``(a, b)`` for the logits divided by
    ``2**scale_exponent``; the returned ``coef`` is in the logits' own units.
    Returns ``(solution, objective, model)``: ``objective.n_passes`` counts the
    passes over the logits, ``model`` (None without ``subset``) the subset's.
    The fit fails after its first pass when the logits' own scale exponent
    lies more than ``_KEPT_SHIFT`` from ``scale_exponent`` (rows the start
    did not see set the scale).

    With ``subset`` (``(logits, y_index, weights)`` of a subset of the rows)
    each step minimises the subset's loss corrected to this pass's gradient
    and Hessian (see ``_SubsetModel``); its passes are the model's
    ``objective.n_passes``.
    """
    n_samples, n_classes = logits.shape
    objective = _VectorObjective(logits, y_index, weights, bias_weight, scale_exponent)
    model = None if subset is None else _SubsetModel(subset, bias_weight, scale_exponent)
    theta = np.asarray(start, dtype=np.float64).copy()
    small = n_samples * (2 * n_classes) ** 2 < _THREADED_PRODUCT
    accepted = None  # (theta, loss, gradient, step) of the last accepted point
    fraction = 1.0
    n_iter = shortened = 0
    # Many classes: the outer products cost several times the rest of a pass, so passes
    # after a short step reuse the last factor, corrected by the BFGS updates of the
    # gradients seen since (quasi-Newton steps from the last Hessian).
    reuse = n_classes > _REUSE_HESSIAN_CLASSES
    factor, previous_length, pairs = None, np.inf, []
    with (
        single_threaded_blas() if small else contextlib.nullcontext(),
        np.errstate(over="ignore", under="ignore", invalid="ignore"),
    ):
        while objective.n_passes < min(max_iter, _MAX_PASSES):
            with_hessian = factor is None or not (reuse and previous_length <= _REUSE_STEP)
            loss, gradient, hessian = objective.evaluate(
                theta[:n_classes], theta[n_classes:], with_hessian
            )
            if accepted is not None and not _sufficient_decrease(accepted, fraction, loss):
                fraction *= 0.5  # backtrack along the last step
                if fraction < 0.5**_MAX_HALVINGS:
                    return None, objective, model
                theta = accepted[0] + fraction * accepted[3]
                continue
            if abs(objective.scale_exponent - scale_exponent) > _KEPT_SHIFT:
                return None, objective, model  # the start's scale is not the logits'
            if not (np.isfinite(loss) and np.all(np.isfinite(gradient))):
                return None, objective, model
            n_iter += 1
            if with_hessian:
                factor, pairs = _factor(hessian), []
                if factor is None:
                    return None, objective, model
            else:
                moved, change = theta - accepted[0], gradient - accepted[2]
                if moved @ change > 0:  # the curvature along the move (convex: always)
                    pairs.append((moved, change))
            step = -_quasi_newton_direction(factor, pairs, gradient)
            longest = previous_length = _step_length(step, theta)
            converged = float(np.max(np.abs(gradient))) <= tol
            if converged and not with_hessian and longest > _FINAL_CHORD_STEP:
                # A quasi-Newton step's error is a fraction of its length, not its square.
                converged = False
            if converged:
                if longest > _FINAL_STEP:
                    # A long step on a flat loss: a parameter heads to infinity.
                    return None, objective, model
                return _result(theta + step, scale_exponent, n_iter), objective, model
            shortened = shortened + 1 if longest > _MAX_STEP else 0
            if shortened >= _MAX_SHORTENED:
                return None, objective, model
            if model is not None:
                step = model.step(theta, gradient, hessian, step)
                longest = _step_length(step, theta)
            if longest > _MAX_STEP:
                step *= _MAX_STEP / longest
            accepted, fraction = (theta, loss, gradient, step), 1.0
            theta = theta + step
    return None, objective, model


class _SubsetModel:
    """The loss of a subset of the rows, corrected to a pass's gradient and Hessian.

    At a pass's ``theta_j`` with gradient ``g_j`` and Hessian ``H_j``, the
    model ``m(t) = L_S(t) + c . d + d^T Q d / 2`` (``d = t - theta_j``, ``c
    = g_j - g_S(theta_j)``, ``Q = H_j - H_S(theta_j)``) has the whole loss's
    gradient and Hessian at ``theta_j``, and the subset's higher derivatives:
    the saturation of the softmax far from ``theta_j``, which a Newton step's
    quadratic model misses. Its minimum, found by Newton steps on the subset
    alone, is the next point. A pass without a Hessian keeps the last ``Q``.
    """

    def __init__(self, subset, bias_weight, scale_exponent):
        logits, y_index, weights = subset
        self.objective = _VectorObjective(logits, y_index, weights, bias_weight, scale_exponent)
        self.correction = None

    def _evaluate(self, theta, t, shift):
        n_classes = len(t) // 2
        loss, gradient, hessian = self.objective.evaluate(t[:n_classes], t[n_classes:])
        moved = t - theta
        curved = self.correction @ moved
        model_loss = loss + shift @ moved + 0.5 * float(moved @ curved)
        return model_loss, gradient + shift + curved, hessian + self.correction

    def step(self, theta, gradient, hessian, newton_step):
        """The model's minimum minus ``theta``; ``newton_step`` where the model fails."""
        n_classes = len(theta) // 2
        model_loss, subset_gradient, subset_hessian = self.objective.evaluate(
            theta[:n_classes], theta[n_classes:]
        )
        shift = gradient - subset_gradient
        if hessian is not None:
            self.correction = hessian - subset_hessian
        t, first_length = theta, None
        model_gradient, model_hessian = gradient, subset_hessian + self.correction
        budget = self.objective.n_passes + _SUBSET_FRACTION  # one full read's worth
        for _ in range(_MODEL_STEPS):
            if self.objective.n_passes >= budget:
                break  # a model this slow to solve is not worth more than a pass
            factor = _factor(model_hessian)
            if factor is None:
                return newton_step
            direction = -scipy.linalg.cho_solve(factor, model_gradient, check_finite=False)
            length = _step_length(direction, t)
            if length > _MAX_STEP:
                direction *= _MAX_STEP / length
            first_length = length if first_length is None else first_length
            if length <= max(_MODEL_PRECISION * first_length**2, 1e-12) and t is not theta:
                # The model is accurate to about the square of the first step: solving it
                # further changes nothing the next pass would keep, so this last short
                # step is taken without its check (the model need not be convex: the
                # next pass's Armijo test on the full loss judges the whole step).
                t = t + direction
                break
            fraction = 1.0
            while True:
                trial = t + fraction * direction
                trial_loss, trial_gradient, trial_hessian = self._evaluate(theta, trial, shift)
                last = (t, model_loss, model_gradient, direction)
                if _sufficient_decrease(last, fraction, trial_loss):
                    break
                fraction *= 0.5
                if fraction < 0.5**_MAX_HALVINGS:
                    return newton_step
            t, model_loss = trial, trial_loss
            model_gradient, model_hessian = trial_gradient, trial_hessian
        step = t - theta
        if not (np.all(np.isfinite(step)) and gradient @ step < 0):
            return newton_step
        return step


def _quasi_newton_direction(factor, pairs, gradient):
    """``H^-1 g`` for the BFGS update of the factored ``H`` by ``pairs`` (two-loop recursion).

    ``pairs`` are ``(s, y)``: moves of the parameters and the changes of the
    gradient they made; none gives the Newton direction of the factored ``H``.
    """
    direction, coefficients = gradient.copy(), []
    for moved, change in reversed(pairs):
        rho = 1.0 / float(moved @ change)
        alpha = rho * float(moved @ direction)
        direction -= alpha * change
        coefficients.append((rho, alpha))
    direction = scipy.linalg.cho_solve(factor, direction, check_finite=False)
    for (moved, change), (rho, alpha) in zip(pairs, reversed(coefficients)):
        beta = rho * float(change @ direction)
        direction += (alpha - beta) * moved
    return direction


def _step_length(step, theta) -> float:
    """The step's largest component, a scale's relative to the scales' mean size.

    The biases are logits of the calibrated scale, whose changes matter
    absolutely; the scales matter relative to their size (the logits may lie
    far from unit size inside the band the power of two leaves them in).
    """
    n_classes = len(theta) // 2
    size = max(float(np.mean(np.abs(theta[:n_classes]))), np.finfo(np.float64).tiny)
    return max(
        float(np.max(np.abs(step[:n_classes]))) / size, float(np.max(np.abs(step[n_classes:])))
    )


def _sufficient_decrease(accepted, fraction, loss) -> bool:
    """Armijo's test of ``loss`` at ``theta + fraction * step``, with a rounding allowance."""
    _, previous, gradient, step = accepted
    slack = 16 * np.finfo(np.float64).eps * abs(previous)
    return bool(loss <= previous + _ARMIJO * fraction * float(gradient @ step) + slack)


def _result(theta, scale_exponent, n_iter) -> NewtonResult:
    n_classes = len(theta) // 2
    coef = np.ldexp(theta[:n_classes], -scale_exponent)  # a for the unscaled logits
    return NewtonResult(coef, theta[n_classes:].copy(), n_iter)


@dataclass
class VectorFit:
    """A fit's outcome: the Newton solution (None: L-BFGS must take over) and its reads.

    ``n_passes`` counts the passes over the logits, ``subset_passes`` the
    subset solves' reads in units of the logits' size; ``zero_columns``
    marks the columns that are zero in every row (None without a pass).
    """

    solution: NewtonResult | None
    n_passes: int
    subset_passes: float = 0.0
    zero_columns: np.ndarray | None = None


def fit_vector_scaling(logits, y_index, sample_weight, *, bias_weight, tol, max_iter):
    """Vector scaling by Newton's method, its steps solved on a subset model.

    The subset is every ``_SUBSET_FRACTION``-th row of each class,
    reweighted to the classes' weights; the start is its NLL-optimal
    temperature, and each pass's step minimises the subset's loss corrected
    to that pass's gradient and Hessian (``_SubsetModel``). Where there is
    no such subset, or Newton's method fails from it, plain Newton steps
    start from the NLL-optimal temperature of all the rows.

    ``sample_weight`` may be None. ``solution`` is None when the optimum is
    not finite (a class without samples; or constant logits, separable
    labels, where the temperature's is not: the shared L-BFGS fit then runs
    as it did without this solver) or when Newton's method fails.
    """
    n_samples, n_classes = logits.shape
    if sample_weight is None:
        weights = np.full(n_samples, 1.0 / n_samples)
    else:
        weights = np.asarray(sample_weight, dtype=np.float64) / np.sum(sample_weight)
    class_weights = np.bincount(y_index, weights, n_classes)
    if np.any(class_weights == 0):
        # A class without (weighted) samples has no finite optimum: its probability falls
        # until the stopping test holds, wherever L-BFGS stopped so far.
        return VectorFit(None, 0)
    size = math.prod(logits.shape)

    def newton(coef, scale_exponent, subset=None):
        """Newton's method from the temperature ``1 / coef`` (steps on ``subset``'s model)."""
        theta = np.concatenate([np.full(n_classes, coef), np.zeros(n_classes)])
        return fit_vector_newton(
            logits,
            y_index,
            weights,
            bias_weight=bias_weight,
            tol=tol,
            max_iter=max_iter,
            start=theta,
            scale_exponent=scale_exponent,
            subset=subset,
        )

    subset, start, reads = _subset_start(logits, y_index, weights, class_weights)
    n_passes = 0
    if start is not None:
        coef, scale_exponent = start
        solution, objective, model = newton(coef, scale_exponent, subset)
        n_passes = objective.n_passes
        reads += model.objective.n_passes * math.prod(subset[0].shape)
        if solution is not None:
            return VectorFit(solution, n_passes, reads / size, objective.zero_columns)
    try:
        temperature, _, temperature_objective, temperature_reads = fit_nll(
            logits, y_index, sample_weight, tol=1e-6, max_iter=100
        )
    except ValueError:  # no float64 temperature represents the optimum
        return VectorFit(None, n_passes, reads / size)
    n_passes += temperature_objective.n_passes
    reads += temperature_reads * size
    if temperature.status != "converged":
        return VectorFit(None, n_passes, reads / size)
    scale_exponent = temperature_objective.scale_exponent
    coef = np.exp(temperature.log_inverse_temperature)
    solution, objective, _ = newton(coef, scale_exponent)
    return VectorFit(solution, n_passes + objective.n_passes, reads / size, objective.zero_columns)


def _subset_rows(y_index, n_classes):
    """Every ``_SUBSET_FRACTION``-th row of each class (its first included); None: too few."""
    n_samples = len(y_index)
    least = max(_MIN_SUBSET_ROWS, _SUBSET_ROWS_PER_PARAMETER * 2 * n_classes)
    if n_samples // _SUBSET_FRACTION < least or n_classes > _REUSE_HESSIAN_CLASSES:
        # Beyond _REUSE_HESSIAN_CLASSES the subset's Hessians (one per model step) cost
        # more than the passes they save.
        return None
    order = np.argsort(y_index, kind="stable")
    counts = np.bincount(y_index, minlength=n_classes)
    rank = np.arange(n_samples) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.sort(order[rank % _SUBSET_FRACTION == 0])


def _subset_start(logits, y_index, weights, class_weights):
    """``(subset, start, reads)``: the subset model's rows and its NLL-optimal temperature.

    ``subset`` is ``(logits, y_index, weights)`` of the rows; ``start`` is
    ``(1 / T, k)`` for ``z / 2**k`` (None when there is no subset or no
    finite temperature on it); ``reads`` counts the logits the subset's
    copy and its temperature's solve read.
    """
    n_classes = logits.shape[1]
    rows = _subset_rows(y_index, n_classes)
    if rows is None:
        return None, None, 0
    labels = y_index[rows]
    subset_class_weights = np.bincount(labels, weights[rows], n_classes)
    if np.any(subset_class_weights == 0):
        return None, None, 0
    # Each class keeps its weight: the subset model's biases, which follow the class
    # frequencies, carry no sampling error of those.
    subset_weights = weights[rows] / subset_class_weights[labels] * class_weights[labels]
    subset = (logits[rows], labels, subset_weights)
    subset_size = math.prod(subset[0].shape)
    try:
        temperature, _, objective, temperature_reads = fit_nll(
            *subset, tol=_SUBSET_TOL, max_iter=100
        )
    except ValueError:
        return None, None, subset_size
    reads = subset_size * (1 + objective.n_passes + temperature_reads)
    if temperature.status != "converged":
        return None, None, reads
    start = np.exp(temperature.log_inverse_temperature), objective.scale_exponent
    return subset, start, reads
