"""Binned calibration errors: top-label, positive-class, classwise, debiased."""

from __future__ import annotations

import numpy as np

from reliacal._docstrings import shared_doc
from reliacal._validation import (
    array_namespace,
    check_classwise_bins,
    check_n_bins,
    check_option,
    is_torch_tensor,
    on_its_device,
)
from reliacal.metrics import _array_api
from reliacal.metrics._binning import STRATEGIES, BinnedStatistics, bin_scores, quantile_sums
from reliacal.metrics._docs import METRIC_DOCS
from reliacal.metrics._inputs import check_prediction_inputs, check_predictions
from reliacal.metrics._predictions import (
    ClasswiseSums,
    binary_columns,
    checked_scores,
    scan_matrix,
    without_negative_zero,
)
from reliacal.metrics.modes import CLASSWISE, ERROR_MODES, check_mode

NORMS = ("l1", "l2", "max")


def norm_of_gaps(counts, sum_confidence, sum_outcome, norm: str) -> np.ndarray:
    """Calibration error of binned sums; the last axis indexes bins.

    l1: ``sum_b (n_b / n) |acc_b - conf_b|``; l2: ``sqrt(sum_b (n_b / n) gap_b^2)``;
    max: the largest gap over non-empty bins. numpy or torch sums (on their device).
    """
    xp = array_namespace(counts, sum_confidence)
    counts = xp.astype(xp.asarray(counts), xp.float64)
    filled = counts > 0
    safe_counts = xp.where(filled, counts, 1.0)
    gap = xp.where(filled, xp.abs(sum_outcome - sum_confidence) / safe_counts, 0.0)
    total = xp.sum(counts, axis=-1)
    if norm == "l1":
        return xp.sum(counts * gap, axis=-1) / total
    if norm == "l2":
        return xp.sqrt(xp.sum(counts * gap**2, axis=-1) / total)
    return xp.max(gap, axis=-1)


def error_from_statistics(stats: BinnedStatistics, norm: str = "l1") -> float:
    """The ``norm`` calibration error of one :class:`BinnedStatistics`."""
    counts = stats.counts
    filled = counts > 0
    sum_confidence = np.where(filled, stats.mean_confidence * counts, 0.0)
    sum_outcome = np.where(filled, stats.accuracy * counts, 0.0)
    return float(norm_of_gaps(counts, sum_confidence, sum_outcome, norm))


def _debiased_squared(counts, sum_confidence, sum_outcome) -> np.ndarray:
    """Kumar et al.'s unbiased estimate of the squared L2 error; last axis = bins.

    numpy or torch sums (on their device).
    """
    xp = array_namespace(counts, sum_confidence)
    counts = xp.astype(xp.asarray(counts), xp.float64)
    enough = counts >= 2
    safe_counts = xp.where(enough, counts, 2.0)
    accuracy = sum_outcome / safe_counts
    gap = accuracy - sum_confidence / safe_counts
    term = xp.where(enough, gap**2 - accuracy * (1.0 - accuracy) / (safe_counts - 1.0), 0.0)
    return xp.sum(counts * term, axis=-1) / xp.sum(counts, axis=-1)


def debiased_error_from_statistics(stats: BinnedStatistics) -> float:
    """Kumar et al.'s debiased L2 error of one :class:`BinnedStatistics`."""
    filled = stats.counts > 0
    squared = _debiased_squared(
        stats.counts,
        np.where(filled, stats.mean_confidence * stats.counts, 0.0),
        np.where(filled, stats.accuracy * stats.counts, 0.0),
    )
    return float(np.sqrt(max(float(squared), 0.0)))


def classwise_sums(
    y_index: np.ndarray, y_prob: np.ndarray, n_bins: int, strategy: str = "uniform", values=None
) -> ClasswiseSums:
    """Per-(class, bin) sums of every binary problem ``(p_k, [y == k])`` (validated input).

    Uniform bins cost one blocked pass over the matrix (see :func:`scan_matrix`),
    which also runs ``values``, the deferred checks of a 2-D ``y_prob``; quantile
    bins sort one column at a time, so memory stays O(n) either way.
    """
    if y_prob.ndim == 1:
        y_prob = binary_columns(y_prob)
        values = None  # checked already, in its 1-D form
    if strategy == "uniform":
        return scan_matrix(
            y_prob, y_index, top_label=False, classwise_bins=n_bins, values=values
        ).classwise
    if values is not None:
        values.check_all()
    n_classes = y_prob.shape[1]
    check_classwise_bins(n_bins, n_classes)
    counts = np.zeros((n_classes, n_bins))
    sum_probability = np.zeros((n_classes, n_bins))
    sum_outcome = np.zeros((n_classes, n_bins))
    for k in range(n_classes):
        column = without_negative_zero(y_prob[:, k].astype(np.float64))
        _, counts[k], sum_probability[k], sum_outcome[k] = quantile_sums(
            column, y_index == k, n_bins
        )
    return ClasswiseSums(counts, sum_probability, sum_outcome)


def combine_classes(per_class: np.ndarray, norm: str) -> float:
    """Kumar et al.'s marginal error: ``(mean_k CE_k^p)^(1/p)``, the max for ``max``."""
    xp = array_namespace(per_class)
    if norm == "l1":
        return float(xp.mean(per_class))
    if norm == "l2":
        return float(xp.sqrt(xp.mean(per_class**2)))
    return float(xp.max(per_class))


def classwise_error(sums: ClasswiseSums, norm: str = "l1") -> float:
    """The classwise calibration error of per-(class, bin) sums."""
    return combine_classes(norm_of_gaps(*sums, norm), norm)


def debiased_classwise_error(sums: ClasswiseSums) -> float:
    """Kumar et al.'s debiased marginal L2 error of per-(class, bin) sums."""
    xp = array_namespace(sums.counts)
    squared = xp.clip(_debiased_squared(*sums), 0.0, None)
    return float(xp.sqrt(xp.mean(squared)))


def _check_common(n_bins, strategy, norm=None):
    n_bins = check_n_bins(n_bins)
    check_option(strategy, "strategy", STRATEGIES)
    if norm is not None:
        check_option(norm, "norm", NORMS)
    return n_bins


@shared_doc(METRIC_DOCS)
def expected_calibration_error(
    y_true,
    y_prob,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    norm: str = "l1",
    mode: str = "top-label",
    labels=None,
) -> float:
    r"""Expected calibration error (ECE) of predicted probabilities.

    Top-label (default): with confidence :math:`c_i = \max_k p_{ik}` and outcome
    :math:`o_i = [\arg\max_k p_{ik} = y_i]`, the samples are binned by confidence
    and

    .. math:: \mathrm{ECE} = \sum_b \frac{n_b}{n} \lvert \bar o_b - \bar c_b \rvert

    where :math:`\bar o_b` (accuracy) and :math:`\bar c_b` (mean confidence) are
    bin means. ``norm="l2"`` gives the RMS calibration error
    :math:`\sqrt{\sum_b (n_b / n)(\bar o_b - \bar c_b)^2}` and ``norm="max"`` the
    maximum calibration error (largest gap over non-empty bins). Empty bins
    contribute nothing. ``strategy="quantile"`` gives the equal-mass ("adaptive")
    ECE. ``mode="positive"`` bins :math:`p(y = 1)` against :math:`[y = 1]` (binary
    problems; what scikit-learn's ``calibration_curve`` and relplot use), and
    ``mode="classwise"`` is :func:`classwise_calibration_error`.

    Binning follows :func:`binned_statistics`: uniform edges ``b / n_bins``,
    right-closed bins ``(lo, hi]`` with 0 in the first bin, quantile bins as
    ``numpy.array_split`` of the sorted confidences.

    {on_device}

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels (column indices, or classes listed in ``labels``).
    y_prob : array-like of shape (n, K) or (n,), or DataFrame
        Predicted probabilities (rows sum to 1); 1-D input is the positive-class
        probability of a binary problem (top-label mode then uses ``[1 - p, p]``).
        A DataFrame's columns are matched to the classes by name (see
        :mod:`reliacal.metrics`).
    {binning}
    norm : {"l1", "l2", "max"}, default="l1"
        How bin gaps are combined.
    {mode_classwise}
    {labels}

    Returns
    -------
    float
        The calibration error, in [0, 1].

    References
    ----------
    M. P. Naeini, G. Cooper, M. Hauskrecht. Obtaining Well Calibrated Probabilities
    Using Bayesian Binning. AAAI 2015.
    C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger. On Calibration of Modern Neural
    Networks. ICML 2017.

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> round(expected_calibration_error([0, 1, 1, 0], y_prob, n_bins=5), 4)
    0.25
    >>> expected_calibration_error([1, 0], [0.95, 1.0], n_bins=10, mode="positive")
    0.475
    """
    check_mode(mode, ERROR_MODES)
    if mode == CLASSWISE:
        return classwise_calibration_error(
            y_true, y_prob, n_bins=n_bins, strategy=strategy, norm=norm, labels=labels
        )
    n_bins = _check_common(n_bins, strategy, norm)
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels, on_device=True)
    if is_torch_tensor(confidence):
        xp = array_namespace(confidence)
        sums = _array_api.device_binned_sums(confidence, outcome, n_bins, strategy, xp)
        return float(norm_of_gaps(*sums, norm))
    return error_from_statistics(bin_scores(confidence, outcome, n_bins, strategy), norm)


@shared_doc(METRIC_DOCS)
def maximum_calibration_error(
    y_true, y_prob, *, n_bins: int = 15, strategy: str = "uniform", mode="top-label", labels=None
) -> float:
    r"""Maximum calibration error (MCE): the largest bin gap.

    .. math:: \mathrm{MCE} = \max_{b:\, n_b > 0} \lvert \bar o_b - \bar c_b \rvert

    Same as :func:`expected_calibration_error` with ``norm="max"``.

    {on_device}

    {binned_classwise_parameters}

    Returns
    -------
    float
        The largest gap between accuracy and mean confidence, in [0, 1].

    References
    ----------
    M. P. Naeini, G. Cooper, M. Hauskrecht. Obtaining Well Calibrated Probabilities
    Using Bayesian Binning. AAAI 2015.

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> round(maximum_calibration_error([0, 1, 1, 0], y_prob, n_bins=5), 4)
    0.4
    """
    return expected_calibration_error(
        y_true, y_prob, n_bins=n_bins, strategy=strategy, norm="max", mode=mode, labels=labels
    )


@shared_doc(METRIC_DOCS)
def classwise_calibration_error(
    y_true, y_prob, *, n_bins: int = 15, strategy: str = "uniform", norm="l1", labels=None
) -> float:
    r"""Classwise ECE: the calibration error of every class's probability, averaged.

    For each class :math:`k` the binary problem :math:`(p_{ik}, [y_i = k])` is
    binned as in :func:`expected_calibration_error` (``mode="positive"``), giving
    :math:`\mathrm{CE}_k`; the result is :math:`\frac{1}{K}\sum_k \mathrm{CE}_k`
    for ``norm="l1"`` (Kull et al.), :math:`\sqrt{\frac{1}{K}\sum_k \mathrm{CE}_k^2}`
    for ``norm="l2"`` (Kumar et al.'s marginal calibration error) and
    :math:`\max_k \mathrm{CE}_k` for ``norm="max"``.

    Uniform bins cost one pass over the matrix: in a row summing to 1 at most
    ``n_bins`` probabilities exceed ``1 / n_bins``, so only those are binned one by
    one. Quantile bins sort every column. Not to be confused with the "ClassECE" of
    the CalAttn code (top-label ECE within each predicted class).

    {on_device}

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels.
    y_prob : array-like of shape (n, K) or (n,)
        Predicted probabilities; 1-D input means ``[1 - p, p]``.
    n_bins : int, default=15
        Number of bins per class.
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width or equal-mass bins (per class).
    norm : {"l1", "l2", "max"}, default="l1"
        How bin gaps, and then classes, are combined.
    {labels}

    Returns
    -------
    float
        The classwise calibration error, in [0, 1].

    References
    ----------
    M. Kull, M. Perello-Nieto, M. Kängsepp, T. Silva Filho, H. Song, P. Flach.
    Beyond temperature scaling: Obtaining well-calibrated multiclass probabilities
    with Dirichlet calibration. NeurIPS 2019.
    A. Kumar, P. Liang, T. Ma. Verified Uncertainty Calibration. NeurIPS 2019.

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> round(classwise_calibration_error([0, 1, 1, 0], y_prob, n_bins=5), 4)
    0.375
    """
    n_bins = _check_common(n_bins, strategy, norm)
    if on_its_device(y_prob):
        y_index, y_prob, _ = check_predictions(y_true, y_prob, labels=labels, on_device=True)
        if is_torch_tensor(y_prob):
            xp = array_namespace(y_prob)
            sums = _array_api.device_classwise_sums(y_index, y_prob, n_bins, strategy, xp)
            return classwise_error(sums, norm)
    y_index, y_prob, _, values = check_prediction_inputs(y_true, y_prob, labels=labels)
    return classwise_error(classwise_sums(y_index, y_prob, n_bins, strategy, values), norm)


@shared_doc(METRIC_DOCS)
def debiased_calibration_error(
    y_true,
    y_prob,
    *,
    n_bins: int = 15,
    strategy: str = "quantile",
    mode: str = "top-label",
    labels=None,
) -> float:
    r"""Debiased L2 calibration error of Kumar, Liang and Ma (2019).

    The plug-in squared error :math:`\sum_b (n_b/n)(\bar o_b - \bar c_b)^2`
    overestimates the true squared error by about the sampling variance of each
    bin's accuracy; the debiased estimate subtracts it,

    .. math:: \widehat{\mathrm{CE}}^2 = \sum_b \frac{n_b}{n}\Big[(\bar o_b - \bar c_b)^2
              - \frac{\bar o_b (1 - \bar o_b)}{n_b - 1}\Big]

    (bins with fewer than two samples count 0), clips it at 0 and returns its
    square root. ``mode="classwise"`` computes it for every class's binary problem
    and returns :math:`\sqrt{\frac{1}{K}\sum_k \widehat{\mathrm{CE}}_k^2}` (Kumar
    et al.'s "marginal" mode). Equal-mass bins by default, as in their package.

    {on_device}

    {prediction_inputs}
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="quantile"
        Equal-width or equal-mass bins.
    {mode_classwise}
    {labels}

    Returns
    -------
    float
        The debiased L2 calibration error, in [0, 1].

    References
    ----------
    A. Kumar, P. Liang, T. Ma. Verified Uncertainty Calibration. NeurIPS 2019.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=20000)
    >>> y = (rng.uniform(size=20000) < p).astype(int)  # perfectly calibrated
    >>> debiased_calibration_error(y, p, mode="positive") < 0.01
    True
    """
    n_bins = _check_common(n_bins, strategy)
    check_mode(mode, ERROR_MODES)
    if mode == CLASSWISE:
        y_index, y_prob, _ = check_predictions(y_true, y_prob, labels=labels, on_device=True)
        if is_torch_tensor(y_prob):
            xp = array_namespace(y_prob)
            sums = _array_api.device_classwise_sums(y_index, y_prob, n_bins, strategy, xp)
            return debiased_classwise_error(sums)
        return debiased_classwise_error(classwise_sums(y_index, y_prob, n_bins, strategy))
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels, on_device=True)
    if is_torch_tensor(confidence):
        xp = array_namespace(confidence)
        squared = _debiased_squared(
            *_array_api.device_binned_sums(confidence, outcome, n_bins, strategy, xp)
        )
        return float(np.sqrt(max(float(squared), 0.0)))
    return debiased_error_from_statistics(bin_scores(confidence, outcome, n_bins, strategy))
