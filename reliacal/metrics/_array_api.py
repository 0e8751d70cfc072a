"""The metrics' passes over the data, written once for numpy arrays and torch tensors.

Every function takes ``xp``, the namespace of its input
(:func:`reliacal._validation.array_namespace`): numpy, or torch's functions with
numpy's signatures, so a tensor is read where it lies (CPU or CUDA) and only the
per-bin sums, O(n_bins) numbers, become the Python float a metric returns. The
binning conventions are :mod:`reliacal.metrics._binning`'s: right-closed uniform
bins with exact edges ``b / n_bins``, equal-mass bins as ``numpy.array_split`` of
the confidences sorted with ties ordered by outcome.

The numpy metrics keep their blocked scans (:func:`reliacal.metrics._predictions.scan_matrix`);
these bodies are what a tensor takes, and what the tests run on numpy too, against
those scans. Their names start with ``device_``, apart from the numpy functions of the same
stem and other contracts (:func:`reliacal.metrics._binning.quantile_sums` returns
the edges too, :func:`reliacal.metrics._calibration_error.classwise_sums` runs the
blocked scan and its deferred checks, :func:`reliacal.metrics._edges.uniform_bin_index`
takes no ``xp``).
"""

from __future__ import annotations

from reliacal._validation import bincount, check_classwise_bins
from reliacal.metrics._predictions import ClasswiseSums

# Entries of the (rows, K) matrix binned at once by the classwise pass: its
# temporaries (bin indices and float64 copies) stay a few times this.
_CLASSWISE_BLOCK_ENTRIES = 1 << 22


def device_uniform_bin_index(values, n_bins: int, xp):
    """Bin of each float64 value in [0, 1] for right-closed uniform bins (any shape).

    :func:`reliacal.metrics._edges.uniform_bin_index`'s arithmetic: ``ceil(v *
    n_bins) - 1``, repaired by one comparison with the exact edges on either side.
    """
    edges = xp.arange(n_bins + 1, dtype=xp.float64, device=values.device) / n_bins
    index = xp.astype(xp.ceil(values * n_bins), xp.int64) - 1
    index = xp.clip(index, 0, n_bins - 1)
    index = index + xp.astype(values > xp.take(edges, index + 1), xp.int64)
    return index - xp.astype((values <= xp.take(edges, index)) & (index > 0), xp.int64)


def device_uniform_sums(confidence, outcome, n_bins: int, xp):
    """``(counts, sum_confidence, sum_outcome)`` of uniform bins, float64, ``n_bins`` each."""
    index = device_uniform_bin_index(confidence, n_bins, xp)
    return (
        bincount(xp, index, minlength=n_bins),
        bincount(xp, index, weights=confidence, minlength=n_bins),
        bincount(xp, index, weights=xp.astype(outcome, xp.float64), minlength=n_bins),
    )


def device_quantile_sums(confidence, outcome, n_bins: int, xp):
    """``(counts, sum_confidence, sum_outcome)`` of equal-mass bins.

    The confidences sorted with ties ordered by outcome (negatives first) and cut as
    ``numpy.array_split``: the first ``n % n_bins`` groups hold one sample more.
    """
    n_samples = confidence.shape[0]
    by_outcome = xp.argsort(xp.astype(outcome, xp.int64), stable=True)
    order = xp.take(by_outcome, xp.argsort(xp.take(confidence, by_outcome), stable=True))
    size, larger = divmod(n_samples, n_bins)
    boundary = larger * (size + 1)  # where the groups of ``size + 1`` end
    position = xp.arange(n_samples, dtype=xp.int64, device=confidence.device)
    group = xp.where(
        position < boundary,
        position // (size + 1),
        larger + (position - boundary) // max(size, 1),
    )
    return (
        bincount(xp, group, minlength=n_bins),
        bincount(xp, group, weights=xp.take(confidence, order), minlength=n_bins),
        bincount(
            xp, group, weights=xp.astype(xp.take(outcome, order), xp.float64), minlength=n_bins
        ),
    )


def device_binned_sums(confidence, outcome, n_bins: int, strategy: str, xp):
    """:func:`device_uniform_sums` or :func:`device_quantile_sums`, as ``strategy`` says."""
    if strategy == "uniform":
        return device_uniform_sums(confidence, outcome, n_bins, xp)
    return device_quantile_sums(confidence, outcome, n_bins, xp)


def device_classwise_sums(y_index, y_prob, n_bins: int, strategy: str, xp) -> ClasswiseSums:
    """Per-(class, bin) sums of every binary problem ``(p_k, [y == k])``; ``(K, n_bins)`` each.

    Uniform bins: row blocks of the matrix binned at once, one cell index per entry
    (class times ``n_bins`` plus bin); equal-mass bins sort one column at a time.
    """
    if y_prob.ndim == 1:
        positive = xp.astype(y_prob, xp.float64)
        y_prob = xp.stack([1.0 - positive, positive], axis=1)
    n_samples, n_classes = y_prob.shape
    check_classwise_bins(n_bins, n_classes)
    if strategy != "uniform":
        per_class = [
            device_quantile_sums(
                xp.astype(y_prob[:, k], xp.float64) + 0.0, y_index == k, n_bins, xp
            )
            for k in range(n_classes)
        ]
        return ClasswiseSums(*(xp.stack([sums[j] for sums in per_class]) for j in range(3)))
    cells = n_classes * n_bins
    device = y_prob.device
    counts = xp.zeros(cells, dtype=xp.float64, device=device)
    sum_probability = xp.zeros(cells, dtype=xp.float64, device=device)
    sum_outcome = xp.zeros(cells, dtype=xp.float64, device=device)
    offsets = xp.arange(n_classes, dtype=xp.int64, device=device) * n_bins
    rows = max(1, _CLASSWISE_BLOCK_ENTRIES // n_classes)
    for start in range(0, n_samples, rows):
        block = xp.astype(y_prob[start : start + rows], xp.float64) + 0.0
        cell = device_uniform_bin_index(block, n_bins, xp) + offsets
        counts = counts + bincount(xp, xp.reshape(cell, (-1,)), minlength=cells)
        sum_probability = sum_probability + bincount(
            xp, xp.reshape(cell, (-1,)), weights=xp.reshape(block, (-1,)), minlength=cells
        )
        true_cell = xp.take_along_axis(cell, y_index[start : start + rows, None], axis=1)
        sum_outcome = sum_outcome + bincount(xp, true_cell[:, 0], minlength=cells)
    shape = (n_classes, n_bins)
    return ClasswiseSums(
        xp.reshape(counts, shape),
        xp.reshape(sum_probability, shape),
        xp.reshape(sum_outcome, shape),
    )


def device_true_class_probability(y_index, y_prob, xp):
    """``p_{i, y_i}`` in float64; 1-D input is ``[1 - p, p]``."""
    if y_prob.ndim == 1:
        positive = xp.astype(y_prob, xp.float64)
        return xp.where(y_index == 1, positive, 1.0 - positive)
    picked = xp.take_along_axis(y_prob, y_index[:, None], axis=1)[:, 0]
    return xp.astype(picked, xp.float64)


def device_negative_log_likelihood(y_index, y_prob, xp) -> float:
    """Mean ``-log p_{i, y_i}``, ``p`` clipped to ``[eps, 1 - eps]`` (eps of ``y_prob``'s dtype)."""
    eps = float(xp.finfo(y_prob.dtype).eps)
    clipped = xp.clip(device_true_class_probability(y_index, y_prob, xp), eps, 1.0 - eps)
    return float(-xp.mean(xp.log(clipped)))


def device_brier_score(y_index, y_prob, xp) -> float:
    """Mean ``sum_k (p_k - [y = k])^2`` (1-D input: mean ``(p - y)^2``)."""
    if y_prob.ndim == 1:
        positive = xp.astype(y_prob, xp.float64)
        return float(xp.mean((positive - xp.astype(y_index, xp.float64)) ** 2))
    squares = xp.sum(y_prob * y_prob, axis=1, dtype=xp.float64)
    return float(xp.mean(squares - 2.0 * device_true_class_probability(y_index, y_prob, xp) + 1.0))


def device_accuracy(y_index, y_prob, xp) -> float:
    """Fraction of rows whose arg-max is the label (1-D input: ``p > 0.5`` predicts 1)."""
    if y_prob.ndim == 1:
        correct = (y_prob > 0.5) == (y_index == 1)
    else:
        correct = xp.argmax(y_prob, axis=1) == y_index
    return float(xp.mean(xp.astype(correct, xp.float64)))
