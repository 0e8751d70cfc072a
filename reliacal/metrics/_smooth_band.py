"""A pointwise bootstrap band around the smoothed reliability curve."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from reliacal._docstrings import shared_doc
from reliacal.metrics._compare import bootstrap_indices, check_bootstrap_settings
from reliacal.metrics._docs import METRIC_DOCS
from reliacal.metrics._inputs import check_predictions
from reliacal.metrics._smooth import smooth_reliability_curve
from reliacal.metrics.modes import SCORE_MODES, check_mode


class SmoothReliabilityBand(NamedTuple):
    """The smoothed curve on all rows and its pointwise bootstrap percentile band."""

    grid: np.ndarray
    accuracy: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    bandwidth: float


@shared_doc(METRIC_DOCS)
def smooth_reliability_band(
    y_true,
    y_prob,
    *,
    n_bootstraps: int = 200,
    confidence_level: float = 0.95,
    random_state=None,
    mode: str = "top-label",
    labels=None,
    n_points: int = 200,
) -> SmoothReliabilityBand:
    r"""Bootstrap band of :func:`smooth_reliability_curve`.

    The curve is computed on all rows, which fixes the bandwidth (smECE's fixed
    point); each replicate resamples the rows (indices as in
    :func:`reliacal.metrics.compare`) and smooths them with that same bandwidth,
    so the band shows the sampling noise of the curve, not of the bandwidth
    choice. ``lower`` and ``upper`` are the pointwise :math:`\alpha/2` and
    :math:`1 - \alpha/2` percentiles of the replicate curves.

    {prediction_inputs}
    n_bootstraps : int, default=200
        Number of replicates.
    confidence_level : float, default=0.95
        Pointwise coverage of the band.
    random_state : int, numpy Generator or None
        Seed of the resampling.
    {mode_labels}
    n_points : int, default=200
        Grid points in [0, 1].

    Returns
    -------
    SmoothReliabilityBand
        ``(grid, accuracy, lower, upper, bandwidth)``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=2000)
    >>> y = (rng.uniform(size=2000) < p).astype(int)
    >>> band = smooth_reliability_band(y, p, n_bootstraps=50, random_state=0, mode="positive")
    >>> bool(np.all(band.lower[20:-20] <= band.upper[20:-20]))
    True
    """
    check_bootstrap_settings(n_bootstraps, confidence_level)
    check_mode(mode, SCORE_MODES)
    y_index, y_prob, _ = check_predictions(y_true, y_prob, labels=labels)
    # y_index holds column indices: the default label mapping of every call below.
    curve = smooth_reliability_curve(y_index, y_prob, n_points=n_points, mode=mode)
    replicates = np.empty((n_bootstraps, curve.grid.shape[0]))
    row = 0
    for chunk in bootstrap_indices(y_index.shape[0], n_bootstraps, random_state):
        for indices in chunk:
            replicates[row] = smooth_reliability_curve(
                y_index[indices],
                y_prob[indices],
                bandwidth=curve.bandwidth,
                n_points=n_points,
                mode=mode,
            ).accuracy
            row += 1
    tail = 100 * (1 - confidence_level) / 2
    lower, upper = np.percentile(replicates, [tail, 100 - tail], axis=0)
    return SmoothReliabilityBand(curve.grid, curve.accuracy, lower, upper, curve.bandwidth)
