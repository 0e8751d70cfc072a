"""Smooth ECE (Blasiok and Nakkiran, 2023) and the smoothed reliability curve.

The estimator is relplot's, step for step, so that the values agree: samples are
spread onto a grid of ``m`` points by linear interpolation, convolved with a
Gaussian kernel reflected at 0 and 1, and read off a second, coarser grid by linear
interpolation. relplot re-spreads all ``n`` samples and convolves directly
(``O(m^2)``) for each of the ~11 bandwidths that the bisection tries. Here each
grid is filled once (grids only depend on the bandwidth below 0.01) and the
convolutions use the FFT, so the cost is one ``O(n)`` pass plus ``O(m log m)``
per bandwidth.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import fft

from reliacal._docstrings import shared_doc
from reliacal.metrics._docs import METRIC_DOCS
from reliacal.metrics._predictions import checked_scores

# relplot's defaults: evaluation grid size, bisection steps, smallest bandwidth and
# the constant that keeps the smoothed density away from 0.
_MIN_EVALUATION_POINTS = 200
_BISECTION_STEPS = 10
_MIN_BANDWIDTH = 0.001
_DENSITY_FLOOR = 0.0001
# Samples spread onto a grid at once.
_CHUNK_SAMPLES = 1 << 16


def _kernel_grid_size(bandwidth: float) -> int:
    """Number of points of the grid the samples are spread onto (as relplot)."""
    return max(2000, round(20 / bandwidth)) // 2 + 1


def _evaluation_grid(bandwidth: float) -> np.ndarray:
    return np.linspace(0, 1, max(round(10 / bandwidth), _MIN_EVALUATION_POINTS))


def bisection_grid_sizes() -> tuple[int, tuple[int, ...]]:
    """The spreading grids the default bandwidth search can use: ``(wide, small)``.

    The bisection tries 1 and midpoints of ``[0, 1]``, all multiples of
    ``2**-_BISECTION_STEPS``; every bandwidth of 0.01 or more shares the grid
    ``wide``, and ``small`` lists the grids of the smaller ones it may try (those
    below ``_MIN_BANDWIDTH`` end the search unsmoothed). Summing the samples onto
    these grids is all the search needs of them, and the sums add up across batches.
    """
    wide = _kernel_grid_size(1.0)
    step = 2.0**-_BISECTION_STEPS
    sizes = {
        _kernel_grid_size(k * step)
        for k in range(1, 2**_BISECTION_STEPS)
        if k * step >= _MIN_BANDWIDTH
    }
    return wide, tuple(sorted(sizes - {wide}))


def spread_scores(confidence: np.ndarray, residual: np.ndarray, values: np.ndarray) -> None:
    """Add the spread of ``(residual, 1)`` at float64 ``confidence`` to ``values`` (2, size)."""
    for start in range(0, confidence.shape[0], _CHUNK_SAMPLES):
        stop = start + _CHUNK_SAMPLES
        _SmoothingProblem._spread(confidence[start:stop], residual[start:stop], values)


def _spread_sorted(confidence: np.ndarray, residual: np.ndarray, values: np.ndarray) -> None:
    """:func:`spread_scores` of confidences in increasing order, in chunks.

    Sorted samples come in runs of one grid interval each: per run, sums of the
    upper weight, the residual and their product give both end points' shares (the
    lower weight is one minus the upper), so three sums replace four bincounts.
    """
    size = values.shape[1]
    interior = np.arange(1, size)
    whole = np.empty(min(_CHUNK_SAMPLES, confidence.shape[0]))  # the integer parts
    for start in range(0, confidence.shape[0], _CHUNK_SAMPLES):
        position = confidence[start : start + _CHUNK_SAMPLES] * (size - 1)
        chunk_residual = residual[start : start + _CHUNK_SAMPLES]
        # Run j holds the positions in [j, j + 1); the last, position size - 1 only,
        # has upper weight 0.
        starts = np.zeros(size + 1, dtype=np.intp)
        starts[1:size] = np.searchsorted(position, interior)
        starts[size] = position.shape[0]
        counts = np.diff(starts)
        runs = np.flatnonzero(counts)
        firsts = starts.take(runs)
        # The upper weight: the fractional part, position minus its truncation (exact),
        # in floats: a subtraction of integers would cast them one by one.
        truncated = np.trunc(position, out=whole[: position.shape[0]])
        position -= truncated
        upper = np.add.reduceat(position, firsts)
        run_residual = np.add.reduceat(chunk_residual, firsts)
        position *= chunk_residual
        upper_residual = np.add.reduceat(position, firsts)
        shares = np.zeros((2, size + 1))
        # Runs j and j + 1 share a point: add the lower shares, then the upper ones.
        shares[0, runs] += run_residual - upper_residual
        shares[0, runs + 1] += upper_residual
        shares[1, runs] += counts.take(runs) - upper
        shares[1, runs + 1] += upper
        values += shares[:, :size]


class _SmoothingProblem:
    """Confidences ``f`` and residuals ``f - y``, spread onto grids on demand.

    ``is_sorted``: the confidences are in increasing order (spread run by run).
    """

    def __init__(self, confidence: np.ndarray, outcome: np.ndarray, *, is_sorted=False):
        self.confidence = confidence
        # Boolean outcomes are cast inside the subtraction: no float copy of them.
        self.residual = np.subtract(confidence, outcome, dtype=np.float64)
        self.is_sorted = is_sorted
        self._grids: dict[int, np.ndarray] = {}
        self._spectra: dict[int, tuple[int, np.ndarray]] = {}
        self._values: dict[float, float] = {}

    def grid_values(self, size: int) -> np.ndarray:
        """``(2, size)``: residuals and counts spread linearly onto ``j / (size - 1)``."""
        if size not in self._grids:
            values = np.zeros((2, size))
            # In chunks: the spread costs several 8-byte temporaries per sample.
            spread = _spread_sorted if self.is_sorted else spread_scores
            spread(self.confidence, self.residual, values)
            self._grids[size] = values
        return self._grids[size]

    @staticmethod
    def _spread(confidence, residual, values) -> None:
        """Add the linear spread of ``(residual, 1)`` at ``confidence`` to ``values``."""
        size = values.shape[1]
        position = confidence * (size - 1)
        index = position.astype(np.intp)
        np.clip(index, 0, size - 2, out=index)
        upper = position - index
        lower = 1.0 - upper
        for row, weights in enumerate((residual, None)):
            low = lower if weights is None else lower * weights
            high = upper if weights is None else upper * weights
            values[row] += np.bincount(index, weights=low, minlength=size)
            values[row, 1:] += np.bincount(index, weights=high, minlength=size - 1)[: size - 1]

    def smooth(self, bandwidth: float, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Kernel sums of residuals and of ones at ``points`` (unnormalised)."""
        size = _kernel_grid_size(bandwidth)
        fft_length, spectrum = self._grid_spectrum(size)
        offsets = np.linspace(0, 1, size) - 0.5
        kernel = np.exp(-offsets * offsets / (2 * bandwidth**2)) / (np.sqrt(2 * np.pi) * bandwidth)
        product = spectrum * fft.rfft(kernel, fft_length)
        convolved = fft.irfft(product, fft_length, axis=1)
        # 'valid' part of the convolution starts at size - 1; relplot keeps size of it
        # starting at size // 2.
        start = size - 1 + size // 2
        smoothed = convolved[:, start : start + size]
        return _interpolate(points, smoothed)

    def _grid_spectrum(self, size: int) -> tuple[int, np.ndarray]:
        """``(fft_length, rfft)`` of the reflected grid of ``size`` points.

        Kept per grid: the bandwidths of the bisection that share a grid (all those of
        0.01 or more) convolve the same grid with different kernels.
        """
        if size not in self._spectra:
            values = self.grid_values(size)
            # Reflect the grid about both ends (the end points are not repeated).
            extended = np.concatenate([values[:, :0:-1], values, values[:, -2::-1]], axis=1)
            full_length = extended.shape[1] + size - 1
            fft_length = fft.next_fast_len(full_length, real=True)
            self._spectra[size] = (fft_length, fft.rfft(extended, fft_length, axis=1))
        return self._spectra[size]

    def smooth_ece(self, bandwidth: float) -> float:
        """smECE at a fixed bandwidth (relplot's ``smECE_sigma``)."""
        if bandwidth not in self._values:
            residual_sum, density = self.smooth(bandwidth, _evaluation_grid(bandwidth))
            # sum |r(t)| d(t) / sum d(t) with r = residual_sum / d and d = density + floor
            density = density + _DENSITY_FLOOR
            self._values[bandwidth] = float(np.sum(np.abs(residual_sum)) / np.sum(density))
        return self._values[bandwidth]

    def fixed_point_bandwidth(self) -> float:
        """relplot's bisection for the bandwidth ``s = smECE_s``."""

        def small_enough(bandwidth: float) -> bool:
            return bandwidth < _MIN_BANDWIDTH or bandwidth < self.smooth_ece(bandwidth)

        if small_enough(1.0):
            return 1.0
        high, low = 1.0, 0.0
        for _ in range(_BISECTION_STEPS):
            middle = (high + low) / 2
            if small_enough(middle):
                low = middle
            else:
                high = middle
        return high


class MissingGrid(LookupError):
    """A bandwidth needs a spreading grid that :class:`GridSmoothing` was not given."""


class GridSmoothing(_SmoothingProblem):
    """The smoothing problem of samples known only by their spreads onto grids.

    ``grids`` maps a grid size to the ``(2, size)`` sums of :func:`spread_scores`
    (residuals, then counts); a bandwidth whose grid is missing raises
    :class:`MissingGrid`. The values equal those of the samples themselves up to
    the order of summation.
    """

    def __init__(self, grids: dict[int, np.ndarray]):
        self._grids = dict(grids)
        self._spectra = {}
        self._values = {}

    def grid_values(self, size: int) -> np.ndarray:
        if size not in self._grids:
            raise MissingGrid(size)
        return self._grids[size]


def _interpolate(points: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Linear interpolation of ``values[..., j]`` located at ``j / (m - 1)`` (as relplot)."""
    size = values.shape[-1]
    step = 1 / (size - 1)
    index = (points * (size - 1)).astype(np.intp)
    np.clip(index, 0, size - 2, out=index)
    fraction = (points - index * step) / step
    return values[..., index] * (1 - fraction) + values[..., index + 1] * fraction


def _scores(y_true, y_prob, mode, labels):
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels)
    return confidence, outcome.astype(np.float64)


def _check_bandwidth(bandwidth) -> float | None:
    if bandwidth is None:
        return None
    bandwidth = float(bandwidth)
    if not (np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be a positive number, got {bandwidth!r}")
    return bandwidth


def smooth_ece_of_scores(
    confidence, outcome, bandwidth=None, *, is_sorted=False
) -> tuple[float, float]:
    """``(smECE, bandwidth)`` of validated float64 confidences and 0/1 outcomes.

    ``is_sorted``: the confidences are in increasing order.
    """
    problem = _SmoothingProblem(confidence, np.asarray(outcome), is_sorted=is_sorted)
    if bandwidth is None:
        bandwidth = problem.fixed_point_bandwidth()
    return problem.smooth_ece(bandwidth), bandwidth


@shared_doc(METRIC_DOCS)
def smooth_calibration_error(
    y_true, y_prob, *, mode="top-label", bandwidth=None, labels=None, return_bandwidth=False
):
    r"""Smooth ECE (smECE) of Blasiok and Nakkiran, with automatic bandwidth.

    With confidences :math:`f_i` and outcomes :math:`y_i` (top-label: max
    probability and correctness; positive mode: :math:`p(y=1)` and
    :math:`[y = 1]`), the residual is kernel-smoothed,

    .. math:: r_s(t) = \frac{\sum_i K_s(t, f_i)(y_i - f_i)}{\sum_i K_s(t, f_i)},

    with a Gaussian kernel of width :math:`s` reflected at 0 and 1, and weighted by
    the smoothed density of :math:`f`:
    :math:`\mathrm{smECE}_s = \int_0^1 |r_s(t)|\, \hat\delta_s(t)\, dt`. The
    bandwidth is the fixed point :math:`s^* = \mathrm{smECE}_{s^*}`, found by ten
    bisection steps (smallest width 0.001). Unlike binned ECE, smECE is continuous
    in the predictions and needs no bin count.

    The discretisation is relplot's (Apple's reference implementation): the
    values equal ``relplot.smECE(f, y)`` up to floating-point rounding, and the
    FFT convolutions make it much faster.

    {prediction_inputs}
    {mode}
    bandwidth : float, optional
        Use this kernel width instead of the fixed point (relplot's ``smECE_sigma``).
    {labels}
    return_bandwidth : bool, default=False
        Also return the bandwidth used.

    Returns
    -------
    float or (float, float)
        smECE in [0, 1], and the bandwidth when ``return_bandwidth`` is True.

    {smooth_ece_references}

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=5000)
    >>> y = (rng.uniform(size=5000) < p ** 2).astype(int)  # overconfident
    >>> value, width = smooth_calibration_error(y, p, mode="positive", return_bandwidth=True)
    >>> round(value, 3), round(width, 3)
    (0.162, 0.162)
    """
    bandwidth = _check_bandwidth(bandwidth)
    confidence, outcome = _scores(y_true, y_prob, mode, labels)
    value, used = smooth_ece_of_scores(confidence, outcome, bandwidth)
    return (value, used) if return_bandwidth else value


class SmoothReliabilityCurve(NamedTuple):
    """A smoothed reliability diagram; unpacks as ``(grid, accuracy, density, bandwidth)``.

    Attributes
    ----------
    grid : ndarray of shape (n_points,)
        Evenly spaced confidences in [0, 1].
    accuracy : ndarray of shape (n_points,)
        Smoothed accuracy (frequency of the outcome) at each grid point.
    density : ndarray of shape (n_points,)
        Smoothed density of the confidences (integrates to 1 over [0, 1]).
    bandwidth : float
        Kernel width used.

    Examples
    --------
    >>> curve = smooth_reliability_curve([0, 1, 1, 0], [0.2, 0.7, 0.9, 0.4], mode="positive")
    >>> curve.grid.shape, curve.accuracy.shape
    ((200,), (200,))
    """

    grid: np.ndarray
    accuracy: np.ndarray
    density: np.ndarray
    bandwidth: float


@shared_doc(METRIC_DOCS)
def smooth_reliability_curve(
    y_true, y_prob, *, mode="top-label", bandwidth=None, n_points: int = 200, labels=None
) -> SmoothReliabilityCurve:
    r"""The kernel-smoothed reliability curve behind :func:`smooth_calibration_error`.

    At each grid point :math:`t` it returns the smoothed accuracy
    :math:`t + r_s(t)` (where :math:`r_s` is the smoothed residual ``y - f``, so
    the vertical gap to the diagonal is what smECE integrates) and the smoothed
    density :math:`\hat\delta_s(t)` of the confidences, normalised to integrate to
    1 over [0, 1]. The bandwidth is smECE's fixed point unless given.

    {prediction_inputs}
    {mode}
    bandwidth : float, optional
        Kernel width; default: the smECE fixed point.
    n_points : int, default=200
        Number of evenly spaced grid points in [0, 1].
    {labels}

    Returns
    -------
    SmoothReliabilityCurve
        ``(grid, accuracy, density, bandwidth)``.

    {smooth_ece_references}

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=5000)
    >>> y = (rng.uniform(size=5000) < p).astype(int)
    >>> grid, acc, density, width = smooth_reliability_curve(y, p, mode="positive")
    >>> bool(np.max(np.abs(acc - grid)[20:-20]) < 0.1)
    True
    """
    if isinstance(n_points, bool) or not isinstance(n_points, int | np.integer) or n_points < 2:
        raise ValueError(f"n_points must be an integer >= 2, got {n_points!r}")
    bandwidth = _check_bandwidth(bandwidth)
    confidence, outcome = _scores(y_true, y_prob, mode, labels)
    problem = _SmoothingProblem(confidence, outcome)
    if bandwidth is None:
        bandwidth = problem.fixed_point_bandwidth()
    grid = np.linspace(0, 1, n_points)
    residual_sum, mass = problem.smooth(bandwidth, grid)
    # residual_sum / mass smooths f - y; the curve shows E[y | f = t] ~ t - that.
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = grid - np.where(mass > 0, residual_sum / (mass + _DENSITY_FLOOR), 0.0)
    density = mass / confidence.shape[0]
    return SmoothReliabilityCurve(grid, accuracy, density, float(bandwidth))
