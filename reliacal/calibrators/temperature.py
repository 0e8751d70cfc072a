"""Temperature scaling (Guo et al., 2017), fitted exactly.

The NLL of ``softmax(b z)`` is convex in ``b = 1/T``: per sample it is
``A_i(b) - b z_iy`` with ``A_i(b) = log sum_k exp(b z_ik)``, whose
derivatives are the cumulants of ``z_i`` under ``p_i = softmax(b z_i)``:
``A' = E_p[z]``, ``A'' = Var_p[z]``, ``A''' = E_p[(z - E_p z)^3]``. So the
gradient ``g(b) = mean(E_p[z] - z_y)`` rises monotonically from
``g(0) = mean(mean_k z - z_y)`` to ``g(inf) = mean(max_k z - z_y) >= 0``,
and the optimum is its unique root when ``g(0) < 0 < g(inf)``. The fitter
finds that root with Halley's method on ``u = log b`` (safeguarded by a
bracket and bisection), each iteration one chunked pass over the data that
yields the first three cumulants, accumulated in float64. It starts from the
root on a strided subset of the rows, approaches the full-data root with
float32 element-wise work and finishes with float64 passes, whose last
Halley step is below ``tol``: cubic convergence puts the result at float64
rounding of the optimum.

Logits whose largest row range lies far from 1 are solved as ``z / 2**k``
with that range in ``[1, 2)`` (exact: a power of two), and ``T = 2**k T'``:
the float32 passes would otherwise overflow (``1e38`` logits) or underflow
(``1e-34`` logits), and ``max - min`` overflows near the largest float.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._base import BaseCalibrator, ConvergenceWarning
from reliacal.calibrators._blas import single_threaded_blas

__all__ = ["TemperatureScaling"]

# Rows per chunk are chosen so that one float64 chunk buffer is ~512 KiB: three such
# buffers stay in a core's L2 cache, which makes a pass several times faster than
# working on (n, K) temporaries, and caps the extra memory whatever n is.
_CHUNK_ELEMENTS = 1 << 16
# Larger problems are first solved on an evenly strided subset of this many elements
# (at least 256 rows), whose root is a starting point within a few percent of the
# full-data root; from there two float32 passes and one float64 pass usually finish.
# Measured on synthetic 10k-200k x 10-1000 logits and the CIFAR records: 3 full passes
# with this size, 3 to 6 with 2**20 elements.
_SUBSAMPLE_ELEMENTS = 1 << 16
# T is searched within [spread / _RANGE, spread * _RANGE], spread being the largest
# logit range of a row: at either end the predictions are saturated (uniform within
# 1e-6, or one-hot unless two logits lie within 1e-4 * spread) so a finite optimum
# beyond them would change no prediction visibly; reaching an end is reported.
_RANGE = 1e6
# Logits whose largest row range lies outside [2**-_SAFE_EXPONENT, 2**_SAFE_EXPONENT]
# are divided by the power of two that brings it into [1, 2) before the solve. Beyond
# that band the float32 passes overflow or underflow (the third cumulant grows as
# range**3, 1/T reaches 1e6 / range, and max - min overflows near the largest float).
# Dividing by a power of two is exact, and inside the band nothing is divided, so
# ordinary logits give the same bits as an unscaled solve.
_SAFE_EXPONENT = 20
# float32 passes approach the root until a step in log T is this small (float32
# rounding limits them to ~1e-6); float64 passes finish from there.
_COARSE_STEP = 1e-4
# Up to this many classes the row extremes are taken column by column.
_FEW_COLUMNS = 8
_MAX_COARSE_PASSES = 12
# The grid of the ECE objective (T = 0.1, 0.2, ..., 10.0), as in the seeds' code.
_ECE_GRID = np.arange(1, 101) / 10.0


def _row_extremes(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest and smallest logit of each row (float64), in row chunks."""
    n_samples, n_classes = logits.shape
    rows = max(1, _CHUNK_ELEMENTS // n_classes)
    row_max = np.empty(n_samples)
    row_min = np.empty(n_samples)
    for start in range(0, n_samples, rows):
        chunk = logits[start : start + rows]
        if n_classes <= _FEW_COLUMNS:
            # A reduction along a short row costs ~30x more per element than an
            # element-wise maximum over the columns; both are exact.
            top, bottom = row_max[start : start + rows], row_min[start : start + rows]
            top[:] = bottom[:] = chunk[:, 0]
            for column in range(1, n_classes):
                np.maximum(top, chunk[:, column], out=top)
                np.minimum(bottom, chunk[:, column], out=bottom)
        else:
            row_max[start : start + rows] = chunk.max(axis=1)
            row_min[start : start + rows] = chunk.min(axis=1)
    return row_max, row_min


def _scale_exponent(row_max: np.ndarray, row_min: np.ndarray) -> int:
    """``k`` such that the largest row range of ``z / 2**k`` lies in ``[1, 2)``.

    0 when that range already lies in the safe band (see ``_SAFE_EXPONENT``)
    or is zero.
    """
    with np.errstate(over="ignore"):
        spread = float(np.max(row_max - row_min))
    if spread == 0.0:
        return 0
    if np.isfinite(spread):
        exponent = int(np.frexp(spread)[1]) - 1
    else:  # max - min overflowed (logits near the largest float): halve both first
        exponent = int(np.frexp(float(np.max(0.5 * row_max - 0.5 * row_min)))[1])
    return 0 if -_SAFE_EXPONENT <= exponent < _SAFE_EXPONENT else exponent


def _scaled_temperature(log_inverse_temperature: float, scale_exponent: int) -> float:
    """``T = 2**k / b'`` from ``u' = log b'``; inf or 0 beyond the float64 range."""
    with np.errstate(over="ignore", under="ignore"):
        return float(np.ldexp(np.exp(-log_inverse_temperature), scale_exponent))


def _describe_temperature(log_inverse_temperature: float, scale_exponent: int) -> str:
    """``T`` in decimal, also when it lies beyond the float64 range."""
    log10_t = (-log_inverse_temperature + scale_exponent * np.log(2.0)) / np.log(10.0)
    exponent = int(np.floor(log10_t))
    return f"{10.0 ** (log10_t - exponent):.3g}e{exponent:+d}"


class _TemperatureObjective:
    """The weighted NLL of ``softmax(b z')`` and its derivatives, evaluated in chunks.

    ``z' = z / 2**scale_exponent`` (see ``_scale_exponent``): every statistic,
    ``b`` and ``spread`` are those of the scaled logits, ``T = 2**k / b``. Only
    differences within a row are ever scaled (``z - max_k z``, ``max_k z -
    z_y``), so rows on very different offsets cannot overflow either. The
    first call also records the constants of the two limits ``g(0)`` and
    ``g(inf)``.
    """

    def __init__(self, logits, y_index, sample_weight, row_max, row_min, scale_exponent=0):
        self.logits = logits
        self.scale_exponent = scale_exponent
        n_samples, self.n_classes = logits.shape
        if sample_weight is None:
            self.weights = None
        else:
            self.weights = np.asarray(sample_weight, dtype=np.float64) / np.sum(sample_weight)
        true_logits = logits[np.arange(n_samples), y_index].astype(np.float64)
        # Per-row maxima stabilise every pass (z - max_k z <= 0).
        self.row_max = row_max
        self.true_gap = self._scaled_difference(row_max, true_logits)  # max_k z' - z'_y
        self.spread = float(np.max(self._scaled_difference(row_max, row_min)))
        self.first_pass_done = False
        self.gradient_at_infinity = np.nan  # g(inf) = mean(max_k z' - z'_y)
        self.gradient_at_zero = np.nan  # g(0) = mean(mean_k z' - z'_y)

    def temperature(self, log_inverse_temperature: float) -> float:
        """``T`` of the unscaled logits for ``u = log b`` of the scaled ones."""
        return _scaled_temperature(log_inverse_temperature, self.scale_exponent)

    def unscaled(self, value: float) -> float:
        """A statistic of the scaled logits (a logit difference) in the logits' units."""
        with np.errstate(over="ignore"):
            return float(np.ldexp(value, self.scale_exponent))

    def _scaled_difference(self, larger, smaller, out=None):
        """``(larger - smaller) / 2**k`` (float64 unless ``out``) without overflow.

        Scaled first when ``k > 0`` (the difference itself may overflow), after
        when ``k < 0`` (the scaled operands may overflow).
        """
        k = self.scale_exponent
        if k > 0:
            return np.subtract(
                np.ldexp(larger, -k), np.ldexp(smaller, -k), out=out, casting="same_kind"
            )
        difference = np.subtract(larger, smaller, dtype=np.float64)
        return (
            difference
            if k == 0 and out is None
            else np.ldexp(difference, -k, out=out, casting="same_kind")
        )

    def _mean(self, values: np.ndarray, start: int, stop: int) -> float:
        if self.weights is None:
            return float(values.sum()) / self.logits.shape[0]
        return float(self.weights[start:stop] @ values)

    def _first_pass_statistics(self, shifted, start, stop, ones):
        true_gap = self.true_gap[start:stop]
        # Only the sign of g(0) is used (the T -> infinity test): a row sum in the
        # pass's precision is enough. mean_k z' - z'_y = mean_k (z' - max z') + gap.
        row_mean = (shifted @ ones).astype(np.float64) / self.n_classes
        self.gradient_at_zero += self._mean(row_mean + true_gap, start, stop)
        self.gradient_at_infinity += self._mean(true_gap, start, stop)

    def evaluate(self, inverse_temperature: float, dtype=np.float64):
        """Return ``(nll, g, h, third)``: the NLL and its first three derivatives in b.

        ``dtype`` is the precision of the element-wise work; per-row sums are
        combined in float64 either way. float32 halves the cost of a pass and is
        used for the approach to the root, float64 for the final steps.
        """
        # The matrix-vector products below are small: a BLAS thread pool woken for
        # each of them costs more than it gains on a busy machine.
        with single_threaded_blas():
            return self._evaluate(inverse_temperature, dtype)

    def _evaluate(self, inverse_temperature, dtype):
        logits, n_classes = self.logits, self.n_classes
        n_samples = logits.shape[0]
        first_pass = not self.first_pass_done
        if first_pass:
            self.gradient_at_infinity = self.gradient_at_zero = 0.0
            self.first_pass_done = True
        rows = max(1, _CHUNK_ELEMENTS // n_classes)
        shifted = np.empty((rows, n_classes), dtype=dtype)
        exponentials = np.empty((rows, n_classes), dtype=dtype)
        products = np.empty((rows, n_classes), dtype=dtype)
        ones = np.ones(n_classes, dtype=dtype)
        scale = dtype(inverse_temperature)
        log_partition = mean_shift = variance = third = 0.0
        for start in range(0, n_samples, rows):
            stop = min(start + rows, n_samples)
            d = shifted[: stop - start]
            e = exponentials[: stop - start]
            f = products[: stop - start]
            # d = z' - max_k z' <= 0, so exp(b d) never overflows and its row sum is >= 1.
            chunk = logits[start:stop]
            if self.scale_exponent == 0:
                np.subtract(chunk, self.row_max[start:stop, None], out=d, casting="same_kind")
            else:
                self._scaled_difference(chunk, self.row_max[start:stop, None], out=d)
            if first_pass:
                self._first_pass_statistics(d, start, stop, ones)
            np.multiply(d, scale, out=e)
            np.exp(e, out=e)
            s0 = (e @ ones).astype(np.float64)
            np.multiply(e, d, out=f)
            m1 = (f @ ones).astype(np.float64) / s0
            m2 = np.einsum("ij,ij->i", f, d).astype(np.float64) / s0
            f *= d
            m3 = np.einsum("ij,ij->i", f, d).astype(np.float64) / s0
            log_partition += self._mean(np.log(s0), start, stop)
            mean_shift += self._mean(m1, start, stop)
            variance += self._mean(m2 - m1 * m1, start, stop)
            third += self._mean(m3 - 3.0 * m1 * m2 + 2.0 * m1**3, start, stop)
        # Per row A(b) - b z_y = log s0 + b (max z - z_y) and E_p[z] - z_y = m1 + max z - z_y.
        nll = log_partition + inverse_temperature * self.gradient_at_infinity
        gradient = mean_shift + self.gradient_at_infinity
        return nll, gradient, max(variance, 0.0), third


class _Solution:
    """Outcome of the 1-D solve: ``log_inverse_temperature``, passes, status, message.

    ``log_inverse_temperature`` is ``log b`` of the scaled logits (the
    objective's ``temperature`` turns it into ``T``).
    """

    def __init__(self, log_inverse_temperature, n_iter, status, message=""):
        self.log_inverse_temperature = float(log_inverse_temperature)
        self.n_iter = n_iter
        self.status = status  # "converged" | "boundary" | "max_iter"
        self.message = message


def _halley_step(gradient, inverse_temperature, curvature, third):
    """Step in u = log b towards the root of G(u) = g(e^u); None when unusable."""
    first = inverse_temperature * curvature  # G'(u)
    if not first > 0:
        return None
    second = first + inverse_temperature**2 * third  # G''(u)
    denominator = 2.0 * first * first - gradient * second
    if np.isfinite(denominator) and denominator > 0:
        return -2.0 * gradient * first / denominator
    return -gradient / first


def _solve_nll(objective, *, tol, max_iter, start=0.0, finish=True) -> _Solution:
    """Root of the NLL gradient in ``u = log b`` of the scaled logits; see the module docstring.

    float32 passes approach the root until a step is below ``_COARSE_STEP``;
    float64 passes then finish (skipped when ``finish`` is False, for a
    starting point). Boundary decisions are taken in float64 only.
    """
    u = start
    lower = upper = 0.0  # the admissible interval, set by the first pass
    below, above = -np.inf, np.inf  # bracket: g(below) < 0 < g(above)
    precision = np.float32
    previous_step = np.inf
    for n_iter in range(1, max_iter + 1):
        _, gradient, curvature, third = objective.evaluate(np.exp(u), precision)
        if n_iter == 1:
            boundary = _limit_solution(objective)
            if boundary is not None:
                return boundary
            lower = -np.log(objective.spread * _RANGE)
            upper = np.log(_RANGE / objective.spread)
            if not lower <= u <= upper:
                u = float(np.clip(u, lower, upper))
                continue
        if gradient < 0:
            below = u
        elif gradient > 0:
            above = u
        if (u >= upper and gradient < 0) or (u <= lower and gradient > 0):
            if precision == np.float32:
                precision, below, above = np.float64, -np.inf, np.inf
                continue
            side = "below" if gradient < 0 else "above"
            return _Solution(
                u,
                n_iter,
                "boundary",
                f"the NLL optimum lies {side} the temperatures searched "
                f"([{objective.temperature(upper):.3g}, {objective.temperature(lower):.3g}], "
                "1e-6 to 1e6 times the largest logit range); returning "
                f"T = {objective.temperature(u):.6g}",
            )
        candidate = (
            u
            if gradient == 0
            else _next_point(u, gradient, curvature, third, below, above, lower, upper)
        )
        step = abs(candidate - u)
        u = candidate
        if precision == np.float32:
            # Switch once the steps are small, or stop shrinking (float32 noise).
            if step <= _COARSE_STEP or step >= previous_step or n_iter >= _MAX_COARSE_PASSES:
                if not finish:
                    return _Solution(u, n_iter, "converged")
                precision, below, above, previous_step = np.float64, -np.inf, np.inf, np.inf
            else:
                previous_step = step
            continue
        if step <= tol and step <= previous_step:
            return _Solution(u, n_iter, "converged")
        previous_step = step
    return _Solution(
        u,
        max_iter,
        "max_iter",
        f"the temperature did not converge in max_iter={max_iter} passes over the data "
        f"(last step in log T: {previous_step:.3g}, tol={tol:g})",
    )


def _limit_solution(objective: _TemperatureObjective) -> _Solution | None:
    """The boundary solution when the optimum is T -> infinity or T -> 0, else None."""
    spread = objective.spread
    if spread == 0 or objective.gradient_at_zero >= 0:
        lowest = -np.log(spread * _RANGE) if spread > 0 else 0.0
        return _Solution(
            lowest,
            1,
            "boundary",
            "the NLL is smallest as T -> infinity: these logits predict the labels no better "
            "than a uniform distribution (mean over samples of mean_k z - z_y = "
            f"{objective.unscaled(objective.gradient_at_zero):.3g} >= 0); returning "
            f"T = {objective.temperature(lowest):.6g}, where predictions are uniform within "
            "1e-6",
        )
    if objective.gradient_at_infinity <= 0:
        highest = np.log(_RANGE / spread)
        return _Solution(
            highest,
            1,
            "boundary",
            "the NLL is smallest as T -> 0: every label holds its row's largest logit "
            f"(separable data); returning T = {objective.temperature(highest):.6g}, where "
            "predictions are saturated",
        )
    return None


def _next_point(u, gradient, curvature, third, below, above, lower, upper) -> float:
    """Halley (or Newton) step from u, kept inside the bracket and the admissible interval."""
    step = _halley_step(gradient, np.exp(u), curvature, third)
    candidate = None if step is None else u + step
    if candidate is None or not below < candidate < above:
        if gradient < 0 and np.isinf(above):
            # No point with g > 0 yet: move up, at least one unit of log b, at most
            # to the end of the admissible interval.
            candidate = upper if candidate is None else max(candidate, u + 1.0)
        elif gradient > 0 and np.isinf(below):
            candidate = lower if candidate is None else min(candidate, u - 1.0)
        else:
            candidate = 0.5 * (below + above)
    return float(np.clip(candidate, lower, upper))


def _starting_point(logits, y_index, sample_weight, row_max, row_min, scale_exponent) -> float:
    """``log b`` solved on an evenly strided subset of the rows (0.0 when small)."""
    n_samples, n_classes = logits.shape
    n_rows = max(256, _SUBSAMPLE_ELEMENTS // n_classes)
    if n_samples <= 2 * n_rows:
        return 0.0
    rows = np.linspace(0, n_samples - 1, n_rows).round().astype(np.intp)
    weights = None if sample_weight is None else sample_weight[rows]
    if weights is not None and not weights.sum() > 0:
        return 0.0
    objective = _TemperatureObjective(
        logits[rows], y_index[rows], weights, row_max[rows], row_min[rows], scale_exponent
    )
    solution = _solve_nll(objective, tol=0.0, max_iter=_MAX_COARSE_PASSES, finish=False)
    return solution.log_inverse_temperature if solution.status == "converged" else 0.0


def _top_label_confidence(logits, temperature, scale_exponent=0):
    """Top-label confidence of ``softmax(z / T)`` per row, in chunks.

    For ``k > 0`` computed as ``softmax(z' / T')`` with ``z' = z / 2**k`` and
    ``T' = T / 2**k``, so that ``z - max z`` cannot overflow.
    """
    n_samples, n_classes = logits.shape
    rows = max(1, _CHUNK_ELEMENTS // n_classes)
    confidence = np.empty(n_samples)
    buffer = np.empty((rows, n_classes))
    scale_exponent = max(scale_exponent, 0)
    temperature = np.ldexp(temperature, -scale_exponent)
    for start in range(0, n_samples, rows):
        stop = min(start + rows, n_samples)
        chunk = logits[start:stop]
        e = buffer[: stop - start]
        if scale_exponent != 0:
            chunk = np.ldexp(chunk, -scale_exponent, out=e)
        np.subtract(chunk, chunk.max(axis=1, keepdims=True), out=e)
        e /= temperature
        np.exp(e, out=e)
        confidence[start:stop] = 1.0 / e.sum(axis=1)
    return confidence


def _fit_nll(logits, y_index, sample_weight, *, tol, max_iter) -> tuple[_Solution, float]:
    """The NLL solution and its ``T``; ValueError when no float64 ``T`` represents it."""
    row_max, row_min = _row_extremes(logits)
    scale_exponent = _scale_exponent(row_max, row_min)
    start = _starting_point(logits, y_index, sample_weight, row_max, row_min, scale_exponent)
    objective = _TemperatureObjective(
        logits, y_index, sample_weight, row_max, row_min, scale_exponent
    )
    solution = _solve_nll(objective, tol=tol, max_iter=max_iter, start=start)
    temperature = objective.temperature(solution.log_inverse_temperature)
    if not np.isfinite(temperature) or temperature < np.finfo(np.float64).tiny:
        side = "above the largest" if temperature > 1 else "below the smallest normal"
        found = (
            "the NLL-optimal temperature of these logits"
            if solution.status == "converged"
            else solution.message.split("; returning")[0] + "; the temperature it would return"
        )
        raise ValueError(
            f"TemperatureScaling: {found} is T = "
            f"{_describe_temperature(solution.log_inverse_temperature, scale_exponent)}, "
            f"{side} float64 number, so no finite T represents it; divide the logits by a "
            "constant c before calibrating (the temperature scales with c)"
        )
    return solution, temperature


class TemperatureScaling(BaseCalibrator):
    r"""Temperature scaling: ``p = softmax(z / T)`` with one scalar ``T > 0``.

    Guo, Pleiss, Sun and Weinberger, "On Calibration of Modern Neural
    Networks", ICML 2017. The temperature minimises the (weighted) negative
    log-likelihood of held-out labels; dividing every logit by the same
    positive number never changes the predicted class.

    The NLL is convex in ``b = 1/T``; its derivatives are averages of the
    cumulants of ``z`` under ``p = softmax(b z)``:

    .. math::

        \frac{dNLL}{db} = \mathrm{mean}_i(E_{p_i}[z_i] - z_{i,y_i}), \quad
        \frac{d^2NLL}{db^2} = \mathrm{mean}_i \mathrm{Var}_{p_i}[z_i].

    The fitter solves ``dNLL/db = 0`` by Halley's method on ``log b`` with a
    bisection fallback, one pass over the data per iteration (row chunks of
    ~64k elements, so no ``(n, K)`` temporary; sums accumulated in float64),
    starting from the solution on a strided subset of large inputs; float32
    passes approach the root and float64 passes finish it at float64
    precision, usually three passes in all. When the optimum lies at ``T -> infinity`` (the
    logits predict no better than uniform), at ``T -> 0`` (every label holds
    its row's top logit) or outside ``[1e-6, 1e6]`` times the largest logit
    range, it warns with :class:`ConvergenceWarning` and returns the nearest
    end of that range: ``T`` is always positive and finite. Logits on any
    scale are fitted alike: when the largest row range lies outside
    ``[2**-20, 2**20]`` the solve runs on the logits divided by a power of two
    (exact), so ``T(c z) = c T(z)`` to float64 rounding from ``c = 1e-300``
    to ``1e300``. Only when the temperature itself lies beyond the float64
    range (logits near ``1e308``) does ``fit`` raise a ``ValueError``.

    Parameters
    ----------
    objective : {"nll", "ece"}, default="nll"
        ``"nll"``: the exact NLL optimum. ``"ece"``: the ``T`` of the grid
        0.1, 0.2, ..., 10.0 with the lowest 15-bin equal-width top-label ECE
        (as the CalAttn and focal-loss papers' code does; ties go to the
        smaller ``T``). When the NLL optimum ``T*`` lies outside that grid
        (logits on another scale) or the lowest ECE is at an end of it, the
        grid ``0.1 T*, 0.2 T*, ..., 10 T*`` is searched too; a lowest ECE at
        an end of all the points searched warns with
        :class:`ConvergenceWarning`. ``sample_weight`` is not supported with
        ``"ece"``.
    tol : float, default=1e-6
        Stop once a float64 Halley step changes ``log T`` by at most ``tol``
        (and the steps are shrinking). The returned ``T`` includes that step;
        Halley's method converges cubically, so for ``tol <= 1e-5`` the
        result lies within float64 rounding of the optimum.
    max_iter : int, default=100
        Maximum number of passes over the data.
    {base_parameters}

    Attributes
    ----------
    temperature_ : float
        The fitted ``T`` (not ``1/T``).
    n_iter_ : int
        Passes over the data (grid points searched for ``objective="ece"``:
        100 or 200).
    {base_attributes}

    See Also
    --------
    VectorScaling, MatrixScaling : richer logit-level maps.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators import TemperatureScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(500, 3, scale=1.0, random_state=0)
    >>> logits = 3.0 * logits  # three times too sharp: overconfident
    >>> ts = TemperatureScaling().fit(logits, y)
    >>> round(ts.temperature_, 3)
    2.723
    >>> proba = ts.predict_proba(logits)
    >>> bool(np.all(proba.argmax(axis=1) == logits.argmax(axis=1)))
    True
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "objective": [StrOptions({"nll", "ece"})],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        objective: str = "nll",
        *,
        tol: float = 1e-6,
        max_iter: int = 100,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        if self.objective == "ece":
            self._fit_ece(logits, y_index, sample_weight)
            return
        solution, temperature = _fit_nll(
            logits, y_index, sample_weight, tol=self.tol, max_iter=self.max_iter
        )
        if solution.status != "converged":
            warnings.warn(solution.message, ConvergenceWarning, stacklevel=3)
        self.temperature_ = temperature
        self.n_iter_ = solution.n_iter

    def _fit_ece(self, logits, y_index, sample_weight) -> None:
        from reliacal.metrics import expected_calibration_error

        if sample_weight is not None:
            raise ValueError(
                "sample_weight is not supported with objective='ece' (the binned ECE is "
                "unweighted); use objective='nll'"
            )
        scale_exponent = _scale_exponent(*_row_extremes(logits))
        # Top-label ECE of softmax(z / T) equals the positive-class ECE of (confidence,
        # correct): argmax does not depend on T, only the confidences do.
        correct = (np.argmax(logits, axis=1) == y_index).astype(np.int64)

        def errors(grid):
            return [
                expected_calibration_error(
                    correct,
                    _top_label_confidence(logits, t, scale_exponent),
                    n_bins=15,
                    mode="positive",
                )
                for t in grid
            ]

        # The fixed grid suits logits on the usual scale. The same grid shape centred (in
        # log T) on the NLL optimum is searched too when that optimum lies off the fixed
        # grid (logits on another scale, where the fixed grid may hold only a poor local
        # minimum) or when the fixed grid's lowest ECE is at one of its ends.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            _, centre = _fit_nll(logits, y_index, None, tol=1e-6, max_iter=100)
        grid, ece = _ECE_GRID, errors(_ECE_GRID)
        off_grid = not _ECE_GRID[0] <= centre <= _ECE_GRID[-1]
        if off_grid or np.argmin(ece) in (0, len(grid) - 1):
            centred = centre * _ECE_GRID
            order = np.argsort(np.concatenate([grid, centred]), kind="stable")
            grid = np.concatenate([grid, centred])[order]
            ece = np.concatenate([ece, errors(centred)])[order]
        best = int(np.argmin(ece))  # the first, so ties go to the smaller T
        if best in (0, len(grid) - 1):
            warnings.warn(
                f"the top-label ECE is lowest at T = {grid[best]:.6g}, the "
                f"{'smallest' if best == 0 else 'largest'} temperature searched (the grid "
                f"0.1..10 and {_ECE_GRID[0]:g}..{_ECE_GRID[-1]:g} times the NLL optimum "
                f"{centre:.6g}): the optimum may lie beyond it; objective='nll' has no grid",
                ConvergenceWarning,
                stacklevel=3,
            )
        self.temperature_ = float(grid[best])
        self.n_iter_ = len(grid)

    def _calibrated_logits(self, features, logits) -> np.ndarray:
        logits = np.asarray(logits, dtype=np.float64)
        with np.errstate(over="ignore"):
            calibrated = logits / self.temperature_
        if not np.all(np.isfinite(calibrated)):
            # z / T overflows for large logits on a small T (rows far from the origin):
            # shift each row by its max first, which leaves the softmax unchanged.
            calibrated = (logits - logits.max(axis=1, keepdims=True)) / self.temperature_
        return calibrated

    def _torch_map(self):
        from reliacal.export import TemperatureMap

        return TemperatureMap(self.temperature_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            from reliacal.persistence import check_loaded_number

            # Infinity is a fit's limit for logits that predict no better than uniform.
            check_loaded_number(self, "temperature_", positive=True, finite=False)

    def _expected_failed_checks(self) -> dict[str, str]:
        return {
            **super()._expected_failed_checks(),
            "check_classifiers_one_label": (
                "temperature scaling keeps the argmax of the logits, so it cannot learn to "
                "predict the single class seen in fit"
            ),
        }
