"""The NLL-optimal temperature in a few passes over the logits.

The NLL of ``softmax(b z)`` is convex in ``b = 1/T``: per sample it is
``A_i(b) - b z_iy`` with ``A_i(b) = log sum_k exp(b z_ik)``, whose
derivatives in ``b`` are the cumulants of ``z_i`` under ``p_i = softmax(b
z_i)``. So the gradient ``g(b) = mean(E_p[z] - z_y)`` rises monotonically
from ``g(0) = mean(mean_k z - z_y)`` to ``g(inf) = mean(max_k z - z_y) >=
0``, and the optimum is its unique root when ``g(0) < 0 < g(inf)``.

The solver finds the root of ``G(u) = g(e^u)`` on ``u = log b``. Since
``d/du = b d/db``, the derivatives of ``G`` are sums of the cumulants of
``t = b (z - max_k z)``, weighted by Stirling numbers of the second kind:
with ``c_j`` the mean over samples of the ``j``-th cumulant of ``t_i``,

    b G = c_1 + b g(inf),  b G' = c_2,  b G'' = c_2 + c_3,
    b G''' = c_2 + 3 c_3 + c_4,  b G'''' = c_2 + 7 c_3 + 6 c_4 + c_5.

One pass over the logits (row chunks that stay in cache; per-row sums of
``e^t t^j`` combined in float64) yields all of them at one ``u``. A fit

1. solves the problem on an evenly strided subset of the rows (itself
   started from a smaller subset), a starting point within the subset's
   sampling error of the root;
2. makes one float32 pass there that also gathers the row extremes and the
   labels' logits, and steps to the root of the degree-4 Taylor polynomial
   of ``G``: from a start a few percent off, that root lies within float32
   rounding of the optimum (the error of a degree-``m`` step shrinks as the
   ``m + 1``-th power of the start's);
3. finishes with float64 passes that compute ``G`` and ``G'`` (only ``G``
   when ``G'`` was computed in float64 within ``1e-3`` of that point), the
   higher derivatives being carried over from the float32 pass. The fit
   ends once a float64 step is below ``tol``; the returned ``u`` includes
   it, which puts it at float64 rounding of the optimum.

A step whose predicted error is large (a start far off: no subset, or one
that misses rows which set the optimum) is followed by one search pass that
evaluates ``G`` and ``G'`` on a grid of the admissible interval; the root of
the cubic Hermite interpolant between the grid points that bracket the root
is the next start. Steps outside the bracket of the root (``g(below) < 0 <
g(above)``) fall back to expansion or bisection.

Logits whose largest row range lies far from 1 are solved as ``z / 2**k``
with that range in ``[1, 2)`` (exact: a power of two), and ``T = 2**k T'``:
the float32 passes would otherwise overflow (``1e38`` logits) or underflow
(``1e-34`` logits), and ``max - min`` overflows near the largest float. The
row extremes are gathered during the first pass, which runs with the
subset's exponent (0 without a subset). When the full data's exponent
differs by a few powers of two, the pass is kept (converted: a power of two
again); when it differs by more (rows outside the subset with a far wider
range), the pass is discarded and a search pass follows.
"""

from __future__ import annotations

import math

import numpy as np

from reliacal._validation import array_namespace
from reliacal.calibrators._blas import single_threaded_blas

# Bytes of one chunk buffer (three of them per pass): they stay in a core's L2 cache,
# which makes a pass several times faster than working on (n, K) temporaries, and caps
# the extra memory whatever n is.
_CHUNK_BYTES = 1 << 19
# A starting point is solved on an evenly strided subset of this many elements (at
# least _SUBSET_ROWS rows, at most 1 / _SUBSET_FRACTION of the rows; none below
# _MIN_SUBSET_ROWS), itself started from its own subset. The subset's root lies within its
# sampling error (a few percent in log T) of the full data's, close enough for one
# degree-4 step.
_SUBSET_ELEMENTS = 1 << 16
_SUBSET_ROWS = 256
_MIN_SUBSET_ROWS = 32
_SUBSET_FRACTION = 8
# Subsets are solved in float32 until the predicted error of a step is below this:
# their sampling error is larger anyway.
_SUBSET_TOL = 1e-3
# Degree of the Taylor step of the float32 passes (they compute the cumulants up to
# the fifth); float64 passes compute G and G' and carry the others over.
_TAYLOR_DEGREE = 4
# Higher derivatives are carried over to points within this distance (in log b) of the
# pass that computed them; a Taylor step longer than _TRUST is a plain Halley step.
_CARRY_RANGE = 0.5
_TRUST = 1.0
# A float64 pass computes only G when G' was computed in float64 within this distance:
# carried over with G'' and G''' (float32), it is then accurate to ~1e-9 relative,
# which changes a step below 1e-6 (as such passes make) by less than float64 rounding.
_REUSE_SLOPE = 1e-3
# float32 passes approach the root until the predicted error of a step is this small
# (float32 rounding limits them to ~1e-7); float64 passes finish from there.
_COARSE_ERROR = 1e-4
_MAX_COARSE_PASSES = 12
# T is searched within [spread / _RANGE, spread * _RANGE], spread being the largest
# logit range of a row: at either end the predictions are saturated (uniform within
# 1e-6, or one-hot unless two logits lie within 1e-4 * spread) so a finite optimum
# beyond them would change no prediction visibly; reaching an end is reported.
_RANGE = 1e6
# Logits whose largest row range lies outside [2**-_SAFE_EXPONENT, 2**_SAFE_EXPONENT]
# are divided by the power of two that brings it into [1, 2) before the solve. Beyond
# that band the float32 passes overflow or underflow (the fifth cumulant grows as
# range**5, 1/T reaches 1e6 / range, and max - min overflows near the largest float).
# Dividing by a power of two is exact, and inside the band nothing is divided, so
# ordinary logits give the same bits as an unscaled solve.
_SAFE_EXPONENT = 20
# A float32 step whose predicted error exceeds _SEARCH_ERROR (a start far off, or one
# on another scale) is followed by one pass that evaluates G and G' on a grid of this
# spacing (in log b) over the admissible interval: its sign change brackets the root,
# and the cubic Hermite interpolant's root there is a start a few 1e-3 off.
_SEARCH_ERROR = 1e-2
_SEARCH_SPACING = 1.0
# float32 steps that no longer shrink once below this are float32 noise.
_STALLED_STEP = 1e-3
# A first pass that ran with a scale exponent within this distance of the logits' own
# (a subset's range a few powers of two off the full data's) is kept.
_KEPT_SHIFT = 8
# Up to this many classes the row extremes are taken column by column.
_FEW_COLUMNS = 8
# Stirling numbers of the second kind S(n, j), j = 1..n: G^(n) = sum_j S(n, j) c_{j+1} / b.
_STIRLING = ((1,), (1, 1), (1, 3, 1), (1, 7, 6, 1))


def _chunk_extremes(chunk: np.ndarray, top: np.ndarray, bottom: np.ndarray) -> None:
    """Write the row maxima and minima of ``chunk`` into ``top`` and ``bottom``."""
    if chunk.shape[1] <= _FEW_COLUMNS:
        # A reduction along a short row costs ~30x more per element than an
        # element-wise maximum over the columns; both are exact.
        top[:] = bottom[:] = chunk[:, 0]
        for column in range(1, chunk.shape[1]):
            np.maximum(top, chunk[:, column], out=top)
            np.minimum(bottom, chunk[:, column], out=bottom)
    else:
        top[:] = chunk.max(axis=1)
        bottom[:] = chunk.min(axis=1)


def _chunk_rows(n_classes: int, dtype) -> int:
    return max(1, _CHUNK_BYTES // (n_classes * np.dtype(dtype).itemsize))


def _scale_exponent(row_max: np.ndarray, row_min: np.ndarray) -> int:
    """``k`` such that the largest row range of ``z / 2**k`` lies in ``[1, 2)``.

    0 when that range already lies in the safe band (see ``_SAFE_EXPONENT``)
    or is zero. numpy arrays or torch tensors (reduced on their device).
    """
    xp = array_namespace(row_max)
    with np.errstate(over="ignore"):
        spread = float(xp.max(row_max - row_min))
    if spread == 0.0:
        return 0
    if np.isfinite(spread):
        exponent = int(np.frexp(spread)[1]) - 1
    else:  # max - min overflowed (logits near the largest float): halve both first
        exponent = int(np.frexp(float(xp.max(0.5 * row_max - 0.5 * row_min)))[1])
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


def _row_cumulants(sums: list[np.ndarray]) -> list[np.ndarray]:
    """Cumulants 1..m of each row's ``t`` from ``sums[j] = sum_k e^t t^j``, j = 0..m."""
    moments = [None] + [s / sums[0] for s in sums[1:]]
    cumulants = [None, moments[1]]
    for order in range(2, len(sums)):
        value = moments[order] + 0.0  # a copy, of a numpy array or a torch tensor
        for j in range(1, order):
            value -= math.comb(order - 1, j - 1) * cumulants[j] * moments[order - j]
        cumulants.append(value)
    return cumulants[1:]


class _TemperatureObjective:
    """``G(u)`` and its derivatives over the logits, one chunked pass per evaluation.

    ``z' = z / 2**scale_exponent`` (see ``_scale_exponent``): every
    statistic, ``b`` and ``spread`` are those of the scaled logits, ``T =
    2**k / b``. Only differences within a row are ever scaled (``z - max_k
    z``, ``max_k z - z_y``), so rows on very different offsets cannot
    overflow either. The first pass gathers the row extremes, the labels'
    logits and the two limits ``g(0)`` and ``g(inf)``. ``n_passes`` counts
    the passes over the logits.
    """

    def __init__(self, logits, y_index, sample_weight, scale_exponent=0):
        self.logits = logits
        self.y_index = y_index
        self.scale_exponent = scale_exponent
        self.n_classes = logits.shape[1]
        if sample_weight is None:
            self.weights = None
        else:
            self.weights = np.asarray(sample_weight, dtype=np.float64) / np.sum(sample_weight)
        self.row_max = self.row_min = self.true_logits = None  # raw, set by the first pass
        self.true_gap = None  # max_k z' - z'_y
        self.spread = np.nan  # largest row range of z'
        self.gradient_at_infinity = np.nan  # g(inf) = mean(max_k z' - z'_y)
        self.gradient_at_zero = None  # g(0) = mean(mean_k z' - z'_y)
        self.n_passes = 0

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

    def _shifted(self, chunk, row_max, out) -> None:
        """``out = (chunk - row_max) / 2**k`` with same-type element-wise loops."""
        if self.scale_exponent != 0:
            self._scaled_difference(chunk, row_max[:, None], out=out)
        elif out.dtype == chunk.dtype:
            # The maxima are values of the chunk, so exact in its type.
            np.subtract(chunk, row_max.astype(out.dtype)[:, None], out=out)
        elif out.dtype.itemsize > chunk.dtype.itemsize:
            # Mixed-type ufuncs go through slow buffered casts; a copy casts fast.
            np.copyto(out, chunk)
            np.subtract(out, row_max[:, None], out=out)
        else:
            np.subtract(chunk, row_max[:, None], out=out, casting="same_kind")

    def _mean(self, values: np.ndarray, start: int, stop: int) -> float:
        if self.weights is None:
            return float(values.sum()) / self.logits.shape[0]
        return float(self.weights[start:stop] @ values)

    def evaluate(self, log_inverse_temperature: float, dtype, order: int):
        """``(u, [G(u), G'(u), ..., G^(order)(u)])`` from one pass; None when rescaled.

        ``dtype`` is the precision of the element-wise work (float32 halves
        the cost of a pass; per-row sums are combined in float64 either
        way); ``u`` is ``log b`` of the ``b`` that precision represents.
        When the first pass finds that the logits' scale exponent differs
        from the one it ran with, the exponent is set to it and ``u`` is
        returned in the new units; the sums are kept when the two differ by
        at most ``_KEPT_SHIFT`` (nothing overflowed: the range of the pass's
        logits was within ``2**±_KEPT_SHIFT`` of ``[1, 2)``), else discarded
        and None is returned.
        """
        inverse_temperature = float(dtype(np.exp(log_inverse_temperature)))
        first = self.row_max is None
        self.n_passes += 1
        # The matrix-vector products are small: a BLAS thread pool woken for each of
        # them costs more than it gains on a busy machine. A first pass may run on the
        # wrong scale, whose overflows are discarded with it; a non-finite G of a later
        # float32 pass switches to float64.
        with single_threaded_blas(), np.errstate(over="ignore", invalid="ignore"):
            sums = self._pass(inverse_temperature, dtype, order)
            shift = 0
            if first:
                exponent = _scale_exponent(self.row_max, self.row_min)
                shift = exponent - self.scale_exponent
                if shift:
                    self.scale_exponent = exponent
                    self._statistics()
                    if abs(shift) > _KEPT_SHIFT or not np.all(np.isfinite(sums[1:])):
                        self.gradient_at_zero = None
                        return None
                    self.gradient_at_zero = float(np.ldexp(self.gradient_at_zero, -shift))
        b = inverse_temperature
        # G and its derivatives in u are logit differences: in the new units when the
        # pass ran with another exponent (a power of two, exact).
        unit = float(np.ldexp(1.0, -shift))
        derivatives = [unit * sums[1] / b + self.gradient_at_infinity]
        for stirling in _STIRLING[:order]:
            derivatives.append(unit * sum(s * c for s, c in zip(stirling, sums[2:])) / b)
        return float(np.log(b)) + shift * np.log(2.0), derivatives

    def search(self, points):
        """``(u, G, G')`` at each of ``points`` (``log b``), float32, from one pass.

        The row extremes must be known (a first pass done).
        """
        inverse_temperatures = np.exp(np.asarray(points, dtype=np.float64)).astype(np.float32)
        self.n_passes += 1
        with single_threaded_blas(), np.errstate(over="ignore", invalid="ignore"):
            first, second = self._search_pass(inverse_temperatures)
        b = inverse_temperatures.astype(np.float64)
        return np.log(b), first / b + self.gradient_at_infinity, second / b

    def _search_pass(self, inverse_temperatures):
        """The mean first two cumulants of ``t`` at each ``b``."""
        logits, n_classes = self.logits, self.n_classes
        n_samples = logits.shape[0]
        if self.true_gap is None:
            self._statistics()
        zero = self.gradient_at_zero is None
        rows = _chunk_rows(n_classes, np.float32)
        shifted = np.empty((rows, n_classes), dtype=np.float32)
        scaled = np.empty_like(shifted)
        exponentials = np.empty_like(shifted)
        ones = np.ones(n_classes, dtype=np.float32)
        first = np.zeros(len(inverse_temperatures))
        second = np.zeros(len(inverse_temperatures))
        zero_sum = 0.0
        for start in range(0, n_samples, rows):
            stop = min(start + rows, n_samples)
            d = shifted[: stop - start]
            t = scaled[: stop - start]
            e = exponentials[: stop - start]
            self._shifted(logits[start:stop], self.row_max[start:stop], d)
            if zero:
                gap = self.true_gap[start:stop]
                zero_sum += self._mean((d @ ones).astype(np.float64) / n_classes + gap, start, stop)
            for j, b in enumerate(inverse_temperatures):
                np.multiply(d, b, out=t)
                np.exp(t, out=e)
                s0 = (e @ ones).astype(np.float64)
                e *= t
                mean = (e @ ones).astype(np.float64) / s0
                variance = np.einsum("ij,ij->i", e, t).astype(np.float64) / s0 - mean * mean
                first[j] += self._mean(mean, start, stop)
                second[j] += self._mean(variance, start, stop)
        if zero:
            self.gradient_at_zero = zero_sum
        return first, second

    def _statistics(self) -> None:
        """``max z' - z'_y``, the spread and ``g(inf)`` from the gathered raw values."""
        self.true_gap = self._scaled_difference(self.row_max, self.true_logits)
        self.spread = float(np.max(self._scaled_difference(self.row_max, self.row_min)))
        self.gradient_at_infinity = (
            float(np.mean(self.true_gap))
            if self.weights is None
            else float(self.weights @ self.true_gap)
        )

    def _pass(self, inverse_temperature, dtype, order) -> list[float]:
        """``[_, c_1, ..., c_{order+1}]``: the mean cumulants of ``t`` at ``b``."""
        logits, n_classes = self.logits, self.n_classes
        n_samples = logits.shape[0]
        first = self.row_max is None
        if first:
            self.row_max, self.row_min = np.empty(n_samples), np.empty(n_samples)
            self.true_logits = np.empty(n_samples)
        elif self.true_gap is None:
            self._statistics()
        zero = self.gradient_at_zero is None
        rows = _chunk_rows(n_classes, dtype)
        shifted = np.empty((rows, n_classes), dtype=dtype)
        exponentials = np.empty((rows, n_classes), dtype=dtype)
        products = np.empty((rows, n_classes), dtype=dtype) if order >= 1 else None
        ones = np.ones(n_classes, dtype=dtype)
        scale = dtype(inverse_temperature)
        cumulant_sums = [0.0] * (order + 2)
        zero_sum = 0.0
        for start in range(0, n_samples, rows):
            stop = min(start + rows, n_samples)
            chunk = logits[start:stop]
            row_max = self.row_max[start:stop]
            if first:
                _chunk_extremes(chunk, row_max, self.row_min[start:stop])
                self.true_logits[start:stop] = chunk[
                    np.arange(stop - start), self.y_index[start:stop]
                ]
            t = shifted[: stop - start]
            e = exponentials[: stop - start]
            # t = z' - max_k z' <= 0, so exp(b t) never overflows and its row sum is >= 1.
            self._shifted(chunk, row_max, t)
            if zero:
                # Only the sign of g(0) is used (the T -> infinity test): a row sum in the
                # pass's precision is enough. mean_k z' - z'_y = mean_k (z' - max z') + gap.
                gap = self._scaled_difference(row_max, self.true_logits[start:stop])
                row_mean = (t @ ones).astype(np.float64) / n_classes
                zero_sum += self._mean(row_mean + gap, start, stop)
            t *= scale
            np.exp(t, out=e)
            row_sums = [(e @ ones).astype(np.float64)]  # sum_k e^t t^j, j = 0, 1, ...
            if order == 0:
                row_sums.append(np.einsum("ij,ij->i", e, t).astype(np.float64))
            else:
                f = np.multiply(e, t, out=products[: stop - start])
                row_sums.append((f @ ones).astype(np.float64))
                for _ in range(order - 1):
                    f *= t
                    row_sums.append((f @ ones).astype(np.float64))
                row_sums.append(np.einsum("ij,ij->i", f, t).astype(np.float64))
            for j, cumulant in enumerate(_row_cumulants(row_sums), start=1):
                cumulant_sums[j] += self._mean(cumulant, start, stop)
        if zero:
            self.gradient_at_zero = zero_sum
        if first and self.true_gap is None:
            self._statistics()
        return cumulant_sums


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


def _carried(model, u: float) -> list[float]:
    """The derivatives of a Taylor model ``(u_0, [G, G', ...])`` moved to ``u``."""
    origin, derivatives = model
    delta = u - origin
    return [
        sum(
            derivatives[i] * delta ** (i - j) / math.factorial(i - j)
            for i in range(j, len(derivatives))
        )
        for j in range(len(derivatives))
    ]


def _taylor_step(derivatives) -> tuple[float, float] | None:
    """Root of the Taylor polynomial of G nearest 0 and an estimate of its error.

    The error estimate is the size of the polynomial's last term at the step
    (over ``G'``); a Newton step alone is credited with no accuracy (its own
    length). None when ``G'`` is not positive.
    """
    gradient, slope = derivatives[0], derivatives[1]
    if not (slope > 0 and np.isfinite(slope) and np.isfinite(gradient)):
        return None
    step = -gradient / slope
    if len(derivatives) < 3 or not np.isfinite(derivatives[2]):
        return step, abs(step)
    denominator = 2.0 * slope * slope - gradient * derivatives[2]
    if denominator > 0 and np.isfinite(denominator):
        step = -2.0 * gradient * slope / denominator  # Halley
    if abs(step) > _TRUST:
        return step, abs(step)
    coefficients = [d / math.factorial(j) for j, d in enumerate(derivatives)]
    halley = step
    for _ in range(12):  # Newton's method on the polynomial, from Halley's step
        value = sum(c * step**j for j, c in enumerate(coefficients))
        derivative = sum(j * c * step ** (j - 1) for j, c in enumerate(coefficients) if j)
        if not derivative > 0:
            return halley, abs(halley)
        correction = value / derivative
        step -= correction
        if abs(correction) <= 1e-15 * (1.0 + abs(step)):
            break
    if not (np.isfinite(step) and abs(step) <= _TRUST):
        return halley, abs(halley)
    return step, abs(coefficients[-1] * step ** (len(coefficients) - 1)) / slope


def _next_point(u, derivatives, below, above, lower, upper) -> tuple[float, float]:
    """Taylor step from u kept inside the bracket and the admissible interval.

    Returns the point and the predicted error there (inf for a fallback).
    """
    taylor = _taylor_step(derivatives)
    candidate, error = (None, np.inf) if taylor is None else (u + taylor[0], taylor[1])
    gradient = derivatives[0]
    if candidate is None or not below < candidate < above:
        error = np.inf
        if gradient < 0 and np.isinf(above):
            # No point with g > 0 yet: move up, at least one unit of log b, at most
            # to the end of the admissible interval.
            candidate = upper if candidate is None else max(candidate, u + 1.0)
        elif gradient > 0 and np.isinf(below):
            candidate = lower if candidate is None else min(candidate, u - 1.0)
        else:
            candidate = 0.5 * (below + above)
    if not lower < candidate < upper:
        error = np.inf
    return float(np.clip(candidate, lower, upper)), error


def _limit_solution(objective: _TemperatureObjective, n_iter: int) -> _Solution | None:
    """The boundary solution when the optimum is T -> infinity or T -> 0, else None."""
    spread = objective.spread
    if spread == 0 or objective.gradient_at_zero >= 0:
        lowest = -np.log(spread * _RANGE) if spread > 0 else 0.0
        return _Solution(
            lowest,
            n_iter,
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
            n_iter,
            "boundary",
            "the NLL is smallest as T -> 0: every label holds its row's largest logit "
            f"(separable data); returning T = {objective.temperature(highest):.6g}, where "
            "predictions are saturated",
        )
    return None


def _hermite_root(left, right) -> float:
    """Root of the cubic Hermite interpolant of G between two points that bracket it.

    ``left`` and ``right`` are ``(u, G, G')`` with ``G`` of opposite signs.
    """
    (u0, g0, d0), (u1, g1, d1) = left, right
    h = u1 - u0

    def value(s):
        s2, s3 = s * s, s * s * s
        return (
            (2 * s3 - 3 * s2 + 1) * g0
            + (s3 - 2 * s2 + s) * h * d0
            + (-2 * s3 + 3 * s2) * g1
            + (s3 - s2) * h * d1
        )

    low, high = 0.0, 1.0
    for _ in range(60):  # bisection on the cubic: cheap, and robust to its wiggles
        middle = 0.5 * (low + high)
        if (value(middle) < 0) == (g0 < 0):
            low = middle
        else:
            high = middle
    return u0 + 0.5 * (low + high) * h


class _Solver:
    """The iteration of ``_solve_nll``: its state between passes."""

    def __init__(self, objective, *, tol, max_iter, start, coarse_tol):
        self.objective = objective
        self.tol, self.max_iter, self.coarse_tol = tol, max_iter, coarse_tol
        self.has_start = start is not None
        self.u = 0.0 if start is None else start
        self.lower = self.upper = None  # the admissible interval, once the spread is known
        self.below, self.above = -np.inf, np.inf  # bracket: g(below) < 0 < g(above)
        self.precision = np.float32
        self.previous_step = self.last_step = np.inf
        self.model = None  # (u, derivatives) of the last pass: carries the higher ones over
        self.slope_point = None  # where the last float64 G' was computed
        self.coarse_passes = 0
        self.search_next = self.searched = False

    def run(self) -> _Solution:
        for n_iter in range(1, self.max_iter + 1):
            outcome = self._search(n_iter) if self.search_next else self._step(n_iter)
            if outcome is not None:
                return outcome
        return _Solution(
            self.u,
            self.max_iter,
            "max_iter",
            f"the temperature did not converge in max_iter={self.max_iter} passes over the "
            f"data (last step in log T: {self.last_step:.3g}, tol={self.tol:g})",
        )

    def _limits(self, n_iter) -> _Solution | None:
        """Once the first pass is done: the boundary solution, or None (and the interval)."""
        if self.lower is not None:
            return None
        boundary = _limit_solution(self.objective, n_iter)
        if boundary is None:
            self.lower = -np.log(self.objective.spread * _RANGE)
            self.upper = np.log(_RANGE / self.objective.spread)
        return boundary

    def _to_float64(self) -> None:
        # float32 signs near the root may be noise: the bracket restarts.
        self.precision, self.below, self.above = np.float64, -np.inf, np.inf
        self.previous_step = np.inf

    def _order(self) -> int:
        if self.precision == np.float32:
            return _TAYLOR_DEGREE
        carried = self.model is not None and abs(self.u - self.model[0]) <= _CARRY_RANGE
        if carried and len(self.model[1]) >= 3:
            reuse = self.slope_point is not None and abs(self.u - self.slope_point) <= _REUSE_SLOPE
            return 0 if reuse else 1
        return 3  # no float32 pass nearby: Halley's derivatives and one more, in float64

    def _step(self, n_iter) -> _Solution | None:
        objective, order = self.objective, self._order()
        exponent = objective.scale_exponent
        evaluated = objective.evaluate(self.u, self.precision, order)
        self.u += (objective.scale_exponent - exponent) * np.log(2.0)
        if evaluated is None:
            # The first pass found the logits on a far other scale than the start's: the
            # start says nothing about the rows that set it, so search.
            self.search_next = True
            return None
        point, derivatives = evaluated
        boundary = self._limits(n_iter)
        if boundary is not None:
            return boundary
        if not self.lower <= self.u <= self.upper:
            self.u = float(np.clip(self.u, self.lower, self.upper))
            return None
        model = self.model
        if model is not None and abs(point - model[0]) <= _CARRY_RANGE:
            derivatives += _carried(model, point)[len(derivatives) :]
        self.model = (point, derivatives)
        if self.precision == np.float64 and order >= 1:
            self.slope_point = point
        gradient = derivatives[0]
        if not np.isfinite(gradient):
            if self.precision == np.float64:
                raise FloatingPointError("the NLL gradient is not finite")  # not expected
            self._to_float64()
            self.model = None
            return None
        if gradient < 0:
            self.below = point
        elif gradient > 0:
            self.above = point
        u, lower, upper = self.u, self.lower, self.upper
        if (u >= upper and gradient < 0) or (u <= lower and gradient > 0):
            if self.precision == np.float32:
                self._to_float64()
                return None
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
        if gradient == 0:
            candidate, error = point, 0.0
        else:
            candidate, error = _next_point(point, derivatives, self.below, self.above, lower, upper)
        step = self.last_step = abs(candidate - point)
        self.u = candidate
        if self.precision == np.float32:
            self.coarse_passes += 1
            threshold = _COARSE_ERROR if self.coarse_tol is None else self.coarse_tol
            # Switch once the steps are accurate, or stop shrinking while small (float32
            # noise); search the interval once when a step is far from accurate.
            stalled = step >= self.previous_step and step <= _STALLED_STEP
            if error <= threshold or stalled or self.coarse_passes >= _MAX_COARSE_PASSES:
                if self.coarse_tol is not None:
                    return _Solution(candidate, n_iter, "converged")
                self._to_float64()
            else:
                self.previous_step = step
                self.search_next = error > _SEARCH_ERROR and not self.searched
            return None
        if step <= self.tol and step <= self.previous_step:
            return _Solution(candidate, n_iter, "converged")
        self.previous_step = step
        return None

    def _search(self, n_iter) -> _Solution | None:
        """One float32 pass over a grid of the admissible interval: a bracket and a start."""
        objective = self.objective
        self.search_next, self.searched = False, True
        lower = -np.log(objective.spread * _RANGE)
        upper = np.log(_RANGE / objective.spread)
        low, high = lower, upper
        if self.model is not None:  # the last pass's sign says on which side the root lies
            point, gradient = self.model[0], self.model[1][0]
            low, high = (max(point, lower), upper) if gradient < 0 else (lower, min(point, upper))
        n_points = int(np.ceil((high - low) / _SEARCH_SPACING)) + 1
        points, gradients, slopes = objective.search(np.linspace(low, high, n_points))
        boundary = self._limits(n_iter)
        if boundary is not None:
            return boundary
        positive = np.flatnonzero(gradients > 0)
        if positive.size == 0:
            self.u, self.below = high, points[-1]
        elif positive[0] == 0:
            self.u, self.above = low, points[0]
        else:
            j = positive[0]
            self.below, self.above = points[j - 1], points[j]
            self.u = _hermite_root(
                (points[j - 1], gradients[j - 1], slopes[j - 1]),
                (points[j], gradients[j], slopes[j]),
            )
        self.model, self.previous_step = None, np.inf
        return None


def _solve_nll(objective, *, tol, max_iter, start=None, coarse_tol=None) -> _Solution:
    """Root of G in ``u = log b`` of the scaled logits; see the module docstring.

    ``start`` is ``u`` for the objective's initial scale exponent (None: no
    information). With ``coarse_tol`` only float32 passes run, until the
    predicted error of a step is below it (a starting point). Boundary
    decisions are taken in float64 only.
    """
    return _Solver(objective, tol=tol, max_iter=max_iter, start=start, coarse_tol=coarse_tol).run()


def subset_rows(n_samples: int, n_classes: int) -> np.ndarray | None:
    """The rows of the strided subset that starts the fit (None: too few rows for one)."""
    n_rows = min(max(_SUBSET_ROWS, _SUBSET_ELEMENTS // n_classes), n_samples // _SUBSET_FRACTION)
    if n_rows < _MIN_SUBSET_ROWS:
        return None
    return np.linspace(0, n_samples - 1, n_rows).round().astype(np.intp)


def _starting_point(logits, y_index, sample_weight, objective_class=_TemperatureObjective):
    """``(u, k, reads)``: ``log b`` solved on a strided subset of the rows, for ``z / 2**k``.

    ``reads`` is the number of logits the subset solves read (the subset's
    copy included). ``u`` is None when there is no subset or no finite
    optimum on it (then ``k`` is the subset's exponent, or 0 without one).
    ``objective_class`` makes the passes (a subclass reads a torch tensor).
    """
    rows = subset_rows(*logits.shape)
    if rows is None:
        return None, 0, 0
    weights = None if sample_weight is None else sample_weight[rows]
    if weights is not None and not weights.sum() > 0:
        return None, 0, 0
    subset, labels = logits[rows], y_index[rows]
    start, exponent, reads = _starting_point(subset, labels, weights, objective_class)
    objective = objective_class(subset, labels, weights, exponent)
    solution = _solve_nll(
        objective, tol=0.0, max_iter=_MAX_COARSE_PASSES, start=start, coarse_tol=_SUBSET_TOL
    )
    reads += math.prod(subset.shape) * (objective.n_passes + 1)  # a tensor's size too
    start = solution.log_inverse_temperature if solution.status == "converged" else None
    return start, objective.scale_exponent, reads


def fit_nll(logits, y_index, sample_weight, *, tol, max_iter, objective_class=None):
    """``(solution, T, objective, subset_passes)``; ValueError when no float64 ``T`` represents it.

    ``objective.n_passes`` counts the passes over the logits;
    ``subset_passes`` is the subset solves' reads in units of the logits'
    size. ``objective_class`` (default ``_TemperatureObjective``) makes the passes.
    """
    objective_class = objective_class or _TemperatureObjective
    start, exponent, reads = _starting_point(logits, y_index, sample_weight, objective_class)
    objective = objective_class(logits, y_index, sample_weight, exponent)
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
            f"{_describe_temperature(solution.log_inverse_temperature, objective.scale_exponent)}, "
            f"{side} float64 number, so no finite T represents it; divide the logits by a "
            "constant c before calibrating (the temperature scales with c)"
        )
    return solution, temperature, objective, reads / math.prod(logits.shape)
