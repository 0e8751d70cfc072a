"""Proper scores and accuracy of probabilities, and the softmax helper for logits."""

from __future__ import annotations

import numpy as np

from reliacal._docstrings import shared_doc
from reliacal._validation import array_namespace, is_torch_tensor, to_numpy
from reliacal.metrics import _array_api
from reliacal.metrics._docs import METRIC_DOCS
from reliacal.metrics._inputs import check_predictions
from reliacal.metrics._predictions import scan_matrix

# Samples per chunk of the in-place Brier terms.
_CHUNK = 1 << 16


def clipped_log_loss(
    true_probability: np.ndarray, dtype: np.dtype, *, in_place: bool = False
) -> np.ndarray:
    """``-log p`` with ``p`` clipped to ``[eps, 1 - eps]``, eps of ``dtype`` (as sklearn).

    ``in_place=True`` overwrites the float64 ``true_probability`` (no temporaries).
    """
    eps = float(np.finfo(dtype).eps)
    out = true_probability if in_place else None
    clipped = np.clip(true_probability, eps, 1.0 - eps, out=out)
    logged = np.log(clipped, out=clipped)
    return np.negative(logged, out=logged)


def brier_terms(
    true_probability: np.ndarray, sum_of_squares: np.ndarray, *, in_place: bool = False
) -> np.ndarray:
    """Per-sample ``sum_k (p_k - [y = k])^2 = sum_k p_k^2 - 2 p_y + 1``.

    ``in_place=True`` overwrites ``sum_of_squares`` with the result.
    """
    terms = sum_of_squares if in_place else sum_of_squares.copy()
    for start in range(0, terms.shape[0], _CHUNK):  # chunks: 2 p_y is a temporary
        terms[start : start + _CHUNK] -= 2.0 * true_probability[start : start + _CHUNK]
    terms += 1.0
    return terms


def _true_class_probability(y_index, y_prob) -> np.ndarray:
    if y_prob.ndim == 1:
        positive = y_prob.astype(np.float64)
        return np.where(y_index == 1, positive, 1.0 - positive)
    return scan_matrix(y_prob, y_index, top_label=False, true_class=True).true_probability


@shared_doc(METRIC_DOCS)
def negative_log_likelihood(y_true, y_prob, *, labels=None) -> float:
    r"""Negative log-likelihood (log loss, cross-entropy) of the true labels.

    .. math:: \mathrm{NLL} = -\frac{1}{n}\sum_i \log p_{i, y_i}

    with :math:`p` clipped to :math:`[\epsilon, 1 - \epsilon]`, :math:`\epsilon`
    the machine epsilon of ``y_prob``'s dtype, exactly as
    ``sklearn.metrics.log_loss`` (natural logarithm). 1-D input is the
    positive-class probability of a binary problem.

    {on_device}

    {score_parameters}

    Returns
    -------
    float
        The mean negative log-likelihood (lower is better).

    References
    ----------
    C. M. Bishop. Pattern Recognition and Machine Learning. Springer, 2006, p. 209.

    Examples
    --------
    >>> round(negative_log_likelihood([0, 1], [[0.8, 0.2], [0.4, 0.6]]), 6)
    0.366985
    """
    y_index, y_prob, _ = check_predictions(y_true, y_prob, labels=labels, on_device=True)
    if is_torch_tensor(y_prob):
        return _array_api.device_negative_log_likelihood(y_index, y_prob, array_namespace(y_prob))
    true_probability = _true_class_probability(y_index, y_prob)
    return float(np.mean(clipped_log_loss(true_probability, y_prob.dtype)))


@shared_doc(METRIC_DOCS)
def brier_score(y_true, y_prob, *, labels=None) -> float:
    r"""Brier score: the mean squared error of the probabilities.

    Multiclass ``(n, K)`` input uses the sum over classes (range [0, 2]),

    .. math:: \mathrm{BS} = \frac{1}{n}\sum_i \sum_k (p_{ik} - [y_i = k])^2 ,

    which equals scikit-learn's ``brier_score_loss`` on multiclass input (with
    ``scale_by_half=False`` for two columns). 1-D binary input uses
    :math:`\frac{1}{n}\sum_i (p_i - y_i)^2` (range [0, 1]); two columns therefore
    give twice the 1-D value.

    {on_device}

    {score_parameters}

    Returns
    -------
    float
        The Brier score (lower is better).

    References
    ----------
    G. W. Brier. Verification of forecasts expressed in terms of probability.
    Monthly Weather Review 78(1), 1950.

    Examples
    --------
    >>> round(brier_score([0, 1], [[0.8, 0.2], [0.4, 0.6]]), 6)
    0.2
    >>> round(brier_score([0, 1], [0.2, 0.6]), 6)
    0.1
    """
    y_index, y_prob, _ = check_predictions(y_true, y_prob, labels=labels, on_device=True)
    if is_torch_tensor(y_prob):
        return _array_api.device_brier_score(y_index, y_prob, array_namespace(y_prob))
    if y_prob.ndim == 1:
        positive = y_prob.astype(np.float64)
        return float(np.mean((positive - y_index) ** 2))
    scan = scan_matrix(y_prob, y_index, top_label=False, true_class=True, squares=True)
    return float(np.mean(brier_terms(scan.true_probability, scan.sum_of_squares)))


@shared_doc(METRIC_DOCS)
def accuracy(y_true, y_prob, *, labels=None) -> float:
    r"""Fraction of samples whose most probable class is the true class.

    .. math:: \mathrm{acc} = \frac{1}{n}\sum_i [\arg\max_k p_{ik} = y_i]

    Ties go to the lowest column (as ``numpy.argmax``); 1-D input predicts the
    positive class when ``p > 0.5``.

    {on_device}

    {score_parameters}

    Returns
    -------
    float
        The accuracy, in [0, 1].

    Examples
    --------
    >>> accuracy(["a", "b"], [[0.8, 0.2], [0.6, 0.4]], labels=["a", "b"])
    0.5
    """
    y_index, y_prob, _ = check_predictions(y_true, y_prob, labels=labels, on_device=True)
    if is_torch_tensor(y_prob):
        return _array_api.device_accuracy(y_index, y_prob, array_namespace(y_prob))
    if y_prob.ndim == 1:
        return float(np.mean((y_prob > 0.5) == (y_index == 1)))
    return float(np.mean(np.argmax(y_prob, axis=1) == y_index))


def softmax(logits, *, axis: int = -1) -> np.ndarray:
    r"""Numerically stable softmax: logits to probabilities.

    .. math:: \mathrm{softmax}(z)_k = \frac{e^{z_k - \max_j z_j}}{\sum_l e^{z_l - \max_j z_j}}

    Subtracting the row maximum keeps every exponent at most 0, so nothing
    overflows, also in float32. float32 input gives float32 output (float16 is
    computed in float32); other input gives float64. ``-inf`` logits (masked
    classes) get probability 0; NaN, ``+inf`` or rows without a finite logit raise.
    Torch tensors are accepted (the result is a numpy array).

    Parameters
    ----------
    logits : array-like
        Unnormalised log-probabilities.
    axis : int, default=-1
        The class axis.

    Returns
    -------
    ndarray
        Probabilities, same shape as ``logits``, summing to 1 along ``axis``.

    Examples
    --------
    >>> softmax(np.array([[0.0, np.log(3.0)], [1000.0, 1000.0]]))
    array([[0.25, 0.75],
           [0.5 , 0.5 ]])
    """
    logits = to_numpy(logits, "logits")
    if logits.size == 0:
        raise ValueError(f"logits are empty (shape {logits.shape})")
    if logits.dtype != np.float64 and logits.dtype != np.float32:
        logits = logits.astype(np.float32 if logits.dtype == np.float16 else np.float64)
    row_max = np.max(logits, axis=axis, keepdims=True)
    if not np.all(np.isfinite(row_max)):
        raise ValueError(
            "logits contain NaN or +inf, or a row whose logits are all -inf; "
            "softmax needs a finite maximum in every row"
        )
    probabilities = np.subtract(logits, row_max)
    np.exp(probabilities, out=probabilities)
    probabilities /= np.sum(probabilities, axis=axis, keepdims=True)
    return probabilities
