"""Input checks shared by the whole package: one place, clear ``ValueError`` messages.

Probabilities are validated without building any temporary of the size of the
``(n, K)`` matrix: one row-sum reduction and a global minimum and maximum (which
also catch NaN and infinity) are enough on the good path; the slower diagnosis that
names the offending row runs only once something is known to be wrong.
"""

from __future__ import annotations

import numbers
import os
import re
import sys
import warnings
from collections.abc import Sequence

import numpy as np

#: Key of the labels in mapping items and batches: what Hugging Face models and
#: ``transformers.DataCollatorWithPadding`` use. Defined here, away from torch, because
#: the numpy-only calibrators take it as a parameter default.
DEFAULT_LABEL_KEY = "labels"

__all__ = [
    "NUMBERED_NAME",
    "ProbabilityValues",
    "array_namespace",
    "bincount",
    "check_probabilities",
    "check_probability_inputs",
    "check_tensor_probabilities",
    "check_logits",
    "check_tensor_logits",
    "encode_labels",
    "check_n_bins",
    "check_classwise_bins",
    "check_option",
    "check_scores_and_target",
    "to_numpy",
    "warn_at_caller",
]

#: A column name that carries a class number, as probability frames and prediction
#: files name their columns: the last number in the name, with the text before and
#: after it ("p10" is prefix "p" and number 10: the prefix is lazy).
NUMBERED_NAME = re.compile(r"^(.*?)(\d+)(\D*)$")

# Rows of a probability matrix must sum to 1 within this tolerance. float32 softmax
# outputs are off by ~1e-7 and float16 ones by ~1e-3; float64 input is often a cast
# float32 record, so its tolerance stays well above float32 rounding.
_ROW_SUM_TOLERANCE = {2: 1e-2, 4: 1e-3, 8: 1e-4}
_SOFTMAX_HINT = "convert logits to probabilities with reliacal.metrics.softmax(logits)"

# Binned metrics hold a few float64 arrays of n_bins entries (classwise ones:
# n_classes * n_bins). These caps keep each under 8 MB (80 MB classwise), far more
# bins than any sample fills, and turn a hostile n_bins into a ValueError instead of
# a MemoryError or the kernel's OOM killer.
MAX_N_BINS = 10**6
MAX_CLASSWISE_CELLS = 10**7

# Frames that warn_at_caller looks past: this package, and the wrappers between a
# user's call and our code (scikit-learn's _fit_context in sklearn/base.py; contextlib's
# generator context managers).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_WRAPPER_FILES = (os.path.join("sklearn", "base.py"), "contextlib.py")


def _is_internal(filename: str) -> bool:
    return filename.startswith(_PACKAGE_DIR) or filename.endswith(_WRAPPER_FILES)


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first frame outside reliacal: the user's call.

    A fixed ``stacklevel`` points at the right line from one call path only;
    the training loop warns from different depths (``fit_module`` called
    directly, or through an estimator's ``fit`` and scikit-learn's
    ``_fit_context`` wrapper). Walking the stack finds the caller's line
    whatever the path, so a filter on the module and the printed location
    name the user's code, not ``reliacal/training/_loop.py``.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_at_caller("careful")
    >>> caught[0].filename.endswith("_validation.py")
    False
    """
    frame = sys._getframe(1)
    # stacklevel 1 is this function; 2 its caller, the frame in hand.
    level = 2
    while frame.f_back is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def is_torch_module(value: object) -> bool:
    """Whether ``value`` is a ``torch.nn.Module``, without importing torch.

    A module can exist only once torch has been imported, so a numpy-only
    process never pays torch's import for this check.
    """
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def is_torch_tensor(value: object) -> bool:
    """Whether ``value`` is a ``torch.Tensor``, without importing torch (as above)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


# Whether tensors on the CPU take the device paths too. They do not: a CPU tensor is
# read as a numpy array without a copy (``Tensor.numpy`` shares its memory) and
# numpy's blocked passes are faster than torch's kernels there. Private, for the
# tests only: their ``device_paths_on_cpu`` fixture monkeypatches it to run the
# device paths on CPU tensors.
_DEVICE_PATHS_ON_CPU = False


def on_its_device(value: object) -> bool:
    """Whether ``value`` is a torch tensor to compute on where it lies (see above)."""
    return is_torch_tensor(value) and (_DEVICE_PATHS_ON_CPU or value.device.type != "cpu")


def to_numpy(values, name: str) -> np.ndarray:
    """Return ``values`` as a numpy array, without copying numpy input.

    Torch tensors are detached and moved to the CPU (bfloat16, which numpy lacks,
    becomes float32); torch is not imported for that.

    Parameters
    ----------
    values : array-like or torch.Tensor
        The data.
    name : str
        Its name in error messages.

    Returns
    -------
    ndarray

    Examples
    --------
    >>> to_numpy([[1, 2]], "X").shape
    (1, 2)
    """
    if is_torch_tensor(values):
        tensor = values.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        return tensor.numpy()
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} cannot be converted to an array: {error}") from None


class _TorchNamespace:
    """The few array-API functions the metrics use, with numpy's signatures, over torch.

    :func:`array_namespace` hands this out for a torch tensor, numpy itself for
    anything else (numpy 2 has these functions under the same names), so one function
    body computes on either, the tensor on its own device.
    """

    def __init__(self, torch):
        self._torch = torch
        self.float32 = torch.float32
        self.float64 = torch.float64
        self.int64 = torch.int64
        self.bool = torch.bool
        for name in ("abs", "sqrt", "log", "ceil", "maximum", "minimum", "where", "isfinite"):
            setattr(self, name, getattr(torch, name))

    def astype(self, x, dtype):
        return x.to(dtype)

    def asarray(self, x, dtype=None, device=None):
        return self._torch.as_tensor(x, dtype=dtype, device=device)

    def zeros(self, shape, dtype=None, device=None):
        return self._torch.zeros(shape, dtype=dtype or self.float64, device=device)

    def arange(self, stop, dtype=None, device=None):
        return self._torch.arange(stop, dtype=dtype or self.int64, device=device)

    def finfo(self, dtype):
        return self._torch.finfo(dtype)

    def clip(self, x, low, high):
        return self._torch.clamp(x, low, high)

    def sum(self, x, axis=None, dtype=None):
        return x.sum(dtype=dtype) if axis is None else x.sum(dim=axis, dtype=dtype)

    def mean(self, x, axis=None):
        return x.mean() if axis is None else x.mean(dim=axis)

    def max(self, x, axis=None):
        return x.max() if axis is None else x.amax(dim=axis)

    def min(self, x, axis=None):
        return x.min() if axis is None else x.amin(dim=axis)

    def argmax(self, x, axis=None):
        return x.argmax(dim=axis)

    def argsort(self, x, stable=True):
        return self._torch.argsort(x, stable=stable)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def stack(self, arrays, axis=0):
        return self._torch.stack(list(arrays), dim=axis)

    def take(self, x, indices):
        return x[indices]

    def take_along_axis(self, x, indices, axis):
        return self._torch.take_along_dim(x, indices, dim=axis)

    def bincount(self, x, weights=None, minlength=0):
        # torch sums the weights in their dtype: float64 sums, as numpy's.
        if weights is not None:
            weights = weights.to(self.float64)
        counts = self._torch.bincount(x, weights=weights, minlength=minlength)
        return counts if weights is not None else counts.to(self.float64)


def array_namespace(*values):
    """The namespace whose functions compute on ``values``: numpy, or torch's on a tensor.

    A torch tensor among ``values`` selects :class:`_TorchNamespace` (its results stay
    on the tensor's device); anything else selects numpy. torch is not imported for
    that.

    Examples
    --------
    >>> array_namespace(np.zeros(2)) is np
    True
    """
    torch = sys.modules.get("torch")
    if torch is not None and any(isinstance(value, torch.Tensor) for value in values):
        return _TorchNamespace(torch)
    return np


def bincount(xp, x, weights=None, minlength: int = 0):
    """``bincount`` in namespace ``xp``; float64 counts and sums, as numpy's weighted one."""
    if xp is np:
        counts = np.bincount(x, weights=weights, minlength=minlength)
        return counts if weights is not None else counts.astype(np.float64)
    return xp.bincount(x, weights=weights, minlength=minlength)


def _as_float_array(values: np.ndarray, name: str) -> np.ndarray:
    """Keep float32/float64 as they are (no copy); convert other real numeric types.

    Text is refused even where it would parse (``"0.9"``): numbers stored as
    strings mean a broken pipeline upstream (a CSV read without types), and
    ``astype(float)`` would hide it. Complex, datetime and other types are refused.
    """
    if values.dtype in (np.float32, np.float64):
        return values
    if values.dtype == np.float16:
        return values.astype(np.float32)
    kind = values.dtype.kind
    if kind in "US" or (
        kind == "O" and any(isinstance(value, str | bytes) for value in values.flat)
    ):
        raise ValueError(
            f"{name} must be numeric, got text (dtype {values.dtype}); convert the "
            "strings to numbers where the data is read"
        )
    if kind not in "biufO":
        raise ValueError(f"{name} must be real numbers, got dtype {values.dtype}")
    try:
        return values.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric, got dtype {values.dtype}") from None


def check_n_bins(n_bins) -> int:
    """Validate a number of bins: an integer from 1 to ``MAX_N_BINS`` (10**6).

    The cap is the same for every strategy: more bins than samples is legal (the
    extra bins stay empty), but per-bin arrays beyond 10**6 entries only cost
    memory.

    Parameters
    ----------
    n_bins : int
        The requested number of bins.

    Returns
    -------
    int
        ``n_bins`` as a Python int.

    Examples
    --------
    >>> check_n_bins(15)
    15
    >>> check_n_bins(0)
    Traceback (most recent call last):
    ...
    ValueError: n_bins must be an integer >= 1, got 0
    >>> check_n_bins(10**8)
    Traceback (most recent call last):
    ...
    ValueError: n_bins must be at most 1000000, got 100000000: ...
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, numbers.Integral) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
    if n_bins > MAX_N_BINS:
        raise ValueError(
            f"n_bins must be at most {MAX_N_BINS}, got {n_bins!r}: more bins only cost "
            "memory (15 to 100 bins are usual; more bins than samples stay empty)"
        )
    return int(n_bins)


def check_classwise_bins(n_bins: int, n_classes: int) -> None:
    """Refuse classwise binning whose ``n_classes * n_bins`` sums would not fit.

    Classwise metrics keep counts and sums for every (class, bin) pair; their
    number is capped at ``MAX_CLASSWISE_CELLS`` (10**7, 80 MB per float64 array).

    Examples
    --------
    >>> check_classwise_bins(15, 1000)
    >>> check_classwise_bins(10**5, 1000)
    Traceback (most recent call last):
    ...
    ValueError: classwise binning needs n_classes * n_bins <= 10000000 ...
    """
    if n_bins * n_classes > MAX_CLASSWISE_CELLS:
        raise ValueError(
            f"classwise binning needs n_classes * n_bins <= {MAX_CLASSWISE_CELLS} per-bin "
            f"sums, got {n_classes} classes * {n_bins} bins = {n_classes * n_bins}; "
            f"use at most {max(1, MAX_CLASSWISE_CELLS // n_classes)} bins"
        )


def check_option(value, name: str, allowed: Sequence[str]) -> str:
    """Validate a string option against its allowed values.

    Parameters
    ----------
    value : str
        The value given by the user.
    name : str
        The parameter name, used in the error message.
    allowed : sequence of str
        The accepted values.

    Returns
    -------
    str
        ``value`` unchanged.

    Examples
    --------
    >>> check_option("l1", "norm", ("l1", "l2", "max"))
    'l1'
    >>> check_option("l3", "norm", ("l1", "l2", "max"))
    Traceback (most recent call last):
    ...
    ValueError: norm must be one of 'l1', 'l2', 'max'; got 'l3'
    """
    if not isinstance(value, str) or value not in allowed:
        choices = ", ".join(repr(option) for option in allowed)
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    return value


def check_scores_and_target(scores, target, name: str) -> None:
    """Check the shapes of a batch: ``scores`` (n, K) with K >= 2, ``target`` (n,).

    Only ``ndim`` and ``shape`` are read, so torch tensors are checked where they
    are (no copy to the host, no torch import here): the training losses and the
    torchmetrics metric share this check.

    Parameters
    ----------
    scores : array or tensor
        One row of per-class scores (logits or probabilities) per sample.
    target : array or tensor
        One class index per sample.
    name : str
        The name of ``scores`` in the error messages.

    Examples
    --------
    >>> check_scores_and_target(np.zeros((4, 3)), np.zeros(4), "logits")
    >>> check_scores_and_target(np.zeros((4, 3)), np.zeros(5), "logits")
    Traceback (most recent call last):
    ...
    ValueError: target must have shape (4,) to match logits, got (5,)
    """
    if scores.ndim != 2 or scores.shape[1] < 2:
        raise ValueError(f"{name} must have shape (n, K) with K >= 2, got {tuple(scores.shape)}")
    if target.ndim != 1 or target.shape[0] != scores.shape[0]:
        raise ValueError(
            f"target must have shape ({scores.shape[0]},) to match {name}, "
            f"got {tuple(target.shape)}"
        )


def encode_labels(y, classes, hint: str = "") -> np.ndarray:
    """Map labels to their column indices in ``classes``.

    Parameters
    ----------
    y : array-like of shape (n,)
        Labels (integers, strings, ...).
    classes : array-like of shape (K,)
        The class of each column, in column order; no duplicates.
    hint : str, default=""
        Advice appended to the unknown-label error, naming the caller's own way
        to map labels to columns (each caller has a different parameter).

    Returns
    -------
    ndarray of int64, shape (n,)
        ``classes[result[i]] == y[i]`` for every ``i``.

    Raises
    ------
    ValueError
        If a label is not among ``classes``, or ``classes`` has duplicates.

    Examples
    --------
    >>> encode_labels(["dog", "cat", "dog"], ["cat", "dog"])
    array([1, 0, 1])
    >>> encode_labels(["cat", "cow"], ["cat", "dog"])
    Traceback (most recent call last):
    ...
    ValueError: labels ['cow'] are not among the classes ['cat' 'dog'] ...
    """
    y = to_numpy(y, "y")
    classes = to_numpy(classes, "classes")
    if classes.ndim != 1 or classes.size == 0:
        raise ValueError(f"classes must be a non-empty 1-D sequence, got shape {classes.shape}")
    n_classes = classes.shape[0]
    if (
        classes.dtype.kind in "iu"
        and y.dtype.kind in "iub"
        and np.array_equal(classes, np.arange(n_classes))
    ):
        # Fast path for the common case "labels are column indices": no search needed.
        if y.size and (y.min() < 0 or y.max() >= n_classes):
            outside = np.unique(y[(y < 0) | (y >= n_classes)])
            raise ValueError(
                f"labels {outside[:10]} are not among the classes 0..{n_classes - 1} "
                f"(one per column){hint}"
            )
        return y.astype(np.int64)
    try:
        sorter = np.argsort(classes, kind="stable")
        sorted_classes = classes[sorter]
        if np.any(sorted_classes[1:] == sorted_classes[:-1]):
            raise ValueError(f"classes must not contain duplicates, got {classes}")
        position = np.searchsorted(sorted_classes, y)
        position = np.minimum(position, n_classes - 1)
        found = sorted_classes[position] == y
    except TypeError:
        raise ValueError(
            f"labels of dtype {y.dtype} cannot be compared with classes of dtype {classes.dtype}"
        ) from None
    if not np.all(found):
        missing = np.unique(y[~np.asarray(found, dtype=bool)])
        raise ValueError(
            f"labels {missing[:10]} are not among the classes {classes[:20]} "
            f"(one per column of the probabilities){hint}"
        )
    return sorter[position].astype(np.int64)


def _check_labels_vector(y_true, n_samples: int | None) -> np.ndarray:
    y_true = to_numpy(y_true, "y_true")
    if y_true.ndim != 1:
        raise ValueError(f"y_true must be 1-D, got shape {y_true.shape}")
    if y_true.shape[0] == 0:
        raise ValueError("y_true is empty: need at least one sample")
    if n_samples is not None and y_true.shape[0] != n_samples:
        raise ValueError(
            f"y_true and y_prob have different lengths: {y_true.shape[0]} labels "
            f"for {n_samples} rows of probabilities"
        )
    return y_true


def _index_labels(y_true: np.ndarray, n_classes: int, labels) -> tuple[np.ndarray, np.ndarray]:
    """Map ``y_true`` to column indices; return ``(y_index, classes)``."""
    if labels is not None:
        classes = to_numpy(labels, "labels")
        if classes.ndim != 1 or classes.shape[0] != n_classes:
            raise ValueError(
                f"labels must list one class per column ({n_classes}), got shape {classes.shape}"
            )
        return encode_labels(y_true, classes), classes
    kind = y_true.dtype.kind
    if kind in "OSUT":
        raise ValueError(
            f"y_true holds non-numeric labels (dtype {y_true.dtype}); pass labels=[...] "
            "with the class of each column of y_prob, in column order"
        )
    if kind == "f":
        if not np.all(np.isfinite(y_true)) or np.any(y_true != np.round(y_true)):
            raise ValueError("y_true holds non-integer values; labels must be class labels")
        y_true = y_true.astype(np.int64)
    elif kind not in "iub":
        raise ValueError(f"y_true has unsupported dtype {y_true.dtype}")
    classes = np.arange(n_classes)
    hint = "; pass labels= to map other labels to columns"
    return encode_labels(y_true, classes, hint=hint), classes


def _row_sum_tolerance(values) -> float:
    """Tolerance for the row sums of ``values`` (before any conversion)."""
    if is_torch_tensor(values):
        itemsize = values.element_size() if values.is_floating_point() else 8
    else:
        try:
            dtype = np.dtype(getattr(values, "dtype", np.float64))
        except TypeError:  # e.g. a pandas extension dtype
            dtype = np.dtype(np.float64)
        itemsize = dtype.itemsize if dtype.kind == "f" else 8
    return _ROW_SUM_TOLERANCE.get(itemsize, 1e-4)


def _describe_bad_values(y_prob: np.ndarray) -> str:
    """Explain what is wrong with probabilities that failed the fast checks."""
    # Runs on the error path only, so full-size temporaries are acceptable here.
    if np.isnan(y_prob).any():
        row = int(np.flatnonzero(np.isnan(y_prob).reshape(y_prob.shape[0], -1).any(axis=1))[0])
        return f"y_prob contains NaN (first in row {row}); probabilities must be finite"
    if np.isinf(y_prob).any():
        row = int(np.flatnonzero(np.isinf(y_prob).reshape(y_prob.shape[0], -1).any(axis=1))[0])
        return f"y_prob contains infinite values (first in row {row}); probabilities must be finite"
    low, high = float(y_prob.min()), float(y_prob.max())
    return (
        f"y_prob has values outside [0, 1] (min {low:.6g}, max {high:.6g}); this looks like "
        f"logits or scores, not probabilities: {_SOFTMAX_HINT}"
    )


def _check_probability_values(y_prob: np.ndarray, tolerance: float) -> None:
    """Raise unless ``y_prob`` holds finite values in [0, 1] with rows summing to 1."""
    low = y_prob.min()
    high = y_prob.max()
    # min/max propagate NaN and reach +-inf, so these two comparisons cover finiteness too.
    if not (low >= 0 and high <= 1):
        raise ValueError(_describe_bad_values(y_prob))
    if y_prob.ndim == 2:
        row_sums = y_prob.sum(axis=1)
        deviation = np.abs(row_sums - 1)
        worst = int(np.argmax(deviation))
        if deviation[worst] > tolerance:
            raise ValueError(
                f"rows of y_prob must sum to 1 (tolerance {tolerance:g} for {y_prob.dtype}); "
                f"row {worst} sums to {float(row_sums[worst]):.6g}. If these are logits or "
                f"unnormalised scores, {_SOFTMAX_HINT}"
            )


def check_probabilities(y_true, y_prob, *, labels=None):
    """Validate labels and predicted probabilities and map the labels to columns.

    ``y_prob`` is either an ``(n, K)`` matrix whose rows sum to 1 (within 1e-4 for
    float64, 1e-3 for float32 and 1e-2 for float16/bfloat16 input), or a 1-D array of positive-class
    probabilities of a binary problem (then the classes are ``[negative, positive]``).
    Nothing is renormalised, clipped or dropped: input that is not a probability
    raises ``ValueError``.

    Without ``labels``, ``y_true`` must hold integer column indices ``0..K-1``
    (``0``/``1`` for 1-D input). This equals scikit-learn's sorted-unique mapping
    whenever every class occurs, and stays right when some class is missing from
    ``y_true`` (a split holding one class only is legal). Other labels (strings,
    integers that are not column indices) need ``labels=``, the class of each column.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels.
    y_prob : array-like of shape (n, K) or (n,)
        Predicted probabilities (numpy array, torch tensor or nested sequence).
    labels : array-like of shape (K,), optional
        The class of each column of ``y_prob`` (for 1-D ``y_prob``: ``[negative,
        positive]``).

    Returns
    -------
    y_index : ndarray of int64, shape (n,)
        Column index of each true label.
    y_prob : ndarray of shape (n, K) or (n,)
        The probabilities; float32 and float64 input is returned without a copy.
    classes : ndarray of shape (K,) (``(2,)`` for 1-D input)
        The class of each column.

    Raises
    ------
    ValueError
        On NaN or infinite values, values outside [0, 1], rows not summing to 1
        (suggesting :func:`reliacal.metrics.softmax` for logits), labels not among
        the columns, non-numeric labels without ``labels=``, length mismatches,
        empty input or a wrong shape.

    Examples
    --------
    >>> y_index, y_prob, classes = check_probabilities(
    ...     ["b", "a"], [[0.3, 0.7], [0.9, 0.1]], labels=["a", "b"]
    ... )
    >>> y_index
    array([1, 0])
    >>> check_probabilities([0, 1], [[2.0, -1.0], [0.5, 0.5]])
    Traceback (most recent call last):
    ...
    ValueError: y_prob has values outside [0, 1] ... reliacal.metrics.softmax(logits)
    """
    y_index, y_prob, classes, values = check_probability_inputs(y_true, y_prob, labels=labels)
    values.check_all()
    return y_index, y_prob, classes


class ProbabilityValues:
    """The value checks of :func:`check_probabilities`, deferred to a pass that reads the matrix.

    A scan over a 2-D matrix calls :meth:`check_block` on each row block it reads
    (the block's minimum, maximum and row sums, while the block is in cache);
    any doubt (a value outside [0, 1], NaN, a row sum near or beyond the
    tolerance) runs :meth:`check_all`, the check of the whole matrix, so that the
    error (or its absence) is exactly :func:`check_probabilities`'. Calling
    :meth:`check_all` once instead is that function's own check.

    Examples
    --------
    >>> values = ProbabilityValues(np.array([[0.5, 0.5], [0.9, 0.3]]), 1e-4)
    >>> values.check_block(values.y_prob[:1])
    >>> values.check_block(values.y_prob[1:])
    Traceback (most recent call last):
    ...
    ValueError: rows of y_prob must sum to 1 (tolerance 0.0001 for float64); row 1 sums to 1.2. ...
    """

    def __init__(self, y_prob: np.ndarray, tolerance: float):
        self.y_prob = y_prob
        self.tolerance = tolerance
        self.checked = False
        # Row sums by a BLAS product differ from numpy's pairwise sums by rounding, at
        # most about K units in the last place: rows within that of the tolerance are
        # left to the exact check.
        n_columns = y_prob.shape[1] if y_prob.ndim == 2 else 1
        self._margin = 4 * n_columns * float(np.finfo(y_prob.dtype).eps)
        self._ones = None

    def check_high(self, high) -> None:
        """The check that no value exceeds 1, given the largest of some blocks."""
        if not self.checked and not high <= 1:
            self.check_all()

    def check_all(self) -> None:
        """Check the whole matrix (raise ``ValueError`` as :func:`check_probabilities`)."""
        if not self.checked:
            _check_probability_values(self.y_prob, self.tolerance)
            self.checked = True

    def check_block(self, block: np.ndarray) -> None:
        """Check one row block of a 2-D matrix; doubt runs :meth:`check_all`.

        A pass may instead check the parts itself: the block's minimum (NaN
        propagates into it), then :meth:`check_row_sums` of its rows (a BLAS product
        with ones) and :meth:`check_high` of its largest value, for several blocks at
        once.
        """
        if self.checked:
            return
        if not (block.min() >= 0 and block.max() <= 1):
            self.check_all()
            return
        if self._ones is None:
            # A column of ones, not a vector: numpy hands a matrix times a vector to
            # a BLAS routine several times slower on short rows.
            self._ones = np.ones((block.shape[1], 1), dtype=block.dtype)
        self.check_row_sums((block @ self._ones)[:, 0])

    def check_row_sums(self, row_sums: np.ndarray) -> None:
        """The row-sum check, given the sums of some rows (infinity and NaN fail it)."""
        if not self.checked and row_sums.shape[0]:
            deviation = max(float(row_sums.max()) - 1, 1 - float(row_sums.min()))
            if not deviation <= self.tolerance - self._margin:
                self.check_all()


def check_probability_inputs(y_true, y_prob, *, labels=None):
    """:func:`check_probabilities` without the value checks, which it returns to be run.

    Returns
    -------
    y_index, y_prob, classes
        As :func:`check_probabilities`.
    values : ProbabilityValues
        The deferred value checks: :meth:`ProbabilityValues.check_block` on every row
        block of a 2-D ``y_prob`` (in any order), or :meth:`ProbabilityValues.check_all`.
        1-D input is checked already. Errors about the labels come after those about
        the values, as in :func:`check_probabilities`.
    """
    tolerance = _row_sum_tolerance(y_prob)
    y_prob = to_numpy(y_prob, "y_prob")
    if y_prob.ndim not in (1, 2):
        raise ValueError(f"y_prob must be 1-D or 2-D, got shape {y_prob.shape}")
    if y_prob.shape[0] == 0:
        raise ValueError("y_prob is empty: need at least one sample")
    if y_prob.ndim == 2 and y_prob.shape[1] < 2:
        raise ValueError(
            f"y_prob must have at least 2 columns, got shape {y_prob.shape}; pass a 1-D array "
            "for the positive-class probabilities of a binary problem"
        )
    y_true = _check_labels_vector(y_true, y_prob.shape[0])
    y_prob = _as_float_array(y_prob, "y_prob")
    values = ProbabilityValues(y_prob, tolerance)
    if y_prob.ndim == 1 or values._margin >= tolerance:
        values.check_all()  # nothing to defer (or no room for the fast check)
    n_classes = 2 if y_prob.ndim == 1 else y_prob.shape[1]
    try:
        y_index, classes = _index_labels(y_true, n_classes, labels)
    except ValueError:
        values.check_all()  # a bad value is reported before a bad label
        raise
    return y_index, y_prob, classes, values


def _has_float64(tensor) -> bool:
    """Whether ``tensor``'s device computes in float64, as the device paths do (MPS does not)."""
    return tensor.device.type != "mps"


def _mappable_on_device(labels) -> bool:
    """Whether the tensor ``labels`` can be mapped on its device (float, bool, int, uint8).

    torch's reductions and sorted search lack complex dtypes and unsigned ones wider
    than uint8 on some devices.
    """
    torch = sys.modules["torch"]
    integers = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    return labels.is_floating_point() or labels.dtype in integers


def _tensor_labels(y_true, n_samples: int, n_classes: int, labels, device):
    """Column indices of ``y_true`` on ``device``, or None where the host check must speak.

    A tensor of labels is mapped where it lies (column indices, or numeric classes
    found by a sorted search); other labels are mapped on the host (they are there)
    and moved to ``device``.
    """
    torch = sys.modules["torch"]
    classes = None if labels is None else to_numpy(labels, "labels")
    if not is_torch_tensor(y_true):
        y_true = _check_labels_vector(y_true, n_samples)
        y_index, classes = _index_labels(y_true, n_classes, labels)
        return torch.as_tensor(y_index, device=device), classes
    if y_true.ndim != 1 or y_true.shape[0] != n_samples:
        return None
    if not _mappable_on_device(y_true):
        return None  # the host maps them
    y_true = y_true.detach().to(device)
    if y_true.dtype == torch.bool:
        y_true = y_true.to(torch.int64)
    if classes is None or (
        classes.ndim == 1
        and classes.dtype.kind in "iu"
        and np.array_equal(classes, np.arange(n_classes))
    ):
        if y_true.is_floating_point():
            # One reduction: a NaN, an infinity or a fraction makes the difference nonzero.
            if not float((y_true - torch.round(y_true)).abs().sum()) == 0:
                return None
        low, high = (int(v) for v in torch.stack([y_true.min(), y_true.max()]).tolist())
        if low < 0 or high >= n_classes:
            return None
        return y_true.to(torch.int64), np.arange(n_classes) if classes is None else classes
    if classes.ndim != 1 or classes.shape[0] != n_classes or classes.dtype.kind not in "iuf":
        return None
    order = np.argsort(classes, kind="stable")
    ordered = classes[order]
    if np.any(ordered[1:] == ordered[:-1]):
        return None
    sorted_classes = torch.as_tensor(ordered).to(y_true.dtype)
    if sorted_classes.tolist() != ordered.tolist():
        return None  # a class that the labels' dtype cannot hold
    sorted_classes = sorted_classes.to(device)
    position = torch.searchsorted(sorted_classes, y_true).clamp(max=n_classes - 1)
    if not bool((sorted_classes[position] == y_true).all()):
        return None
    return torch.as_tensor(order, device=device)[position], classes


def _row_sums_pass(y_prob, tolerance: float) -> bool:
    """The host's row-sum check of a 2-D tensor, on its device: rows summed in its dtype.

    For the rows whose float64 sums lie within rounding of the tolerance (all rows,
    at many classes in float32): the sums are formed in ``y_prob``'s dtype and the
    largest deviation is compared with the tolerance in that dtype, as
    :func:`_check_probability_values` does; only the order of the additions differs.
    """
    worst = float((y_prob.sum(dim=1) - 1).abs().max())
    dtype = np.float32 if y_prob.dtype == sys.modules["torch"].float32 else np.float64
    return bool(dtype(worst) <= tolerance)


def check_tensor_probabilities(y_true, y_prob, *, labels=None):
    """:func:`check_probabilities` of a torch tensor ``y_prob``, computed on its device.

    The good path reads the tensor where it lies (a minimum, a maximum and the
    largest deviation of the row sums, fetched as three numbers; rows within
    rounding of the tolerance are summed again as the host sums them, by
    :func:`_row_sums_pass`); the labels are mapped as :func:`_tensor_labels` does.
    Any doubt returns None, and the caller runs :func:`check_probabilities` on a
    host copy, which names the problem in its own words (the error path only).

    Returns
    -------
    (y_index, y_prob, classes) or None
        Tensors on ``y_prob``'s device (float16 and bfloat16 probabilities as float32,
        other non-float ones as float64), ``classes`` a numpy array; None when the host
        check must decide.
    """
    torch = sys.modules["torch"]
    if y_prob.ndim not in (1, 2) or y_prob.shape[0] == 0 or not _has_float64(y_prob):
        return None
    if y_prob.ndim == 2 and y_prob.shape[1] < 2:
        return None
    if y_prob.is_complex():
        return None
    tolerance = _row_sum_tolerance(y_prob)
    y_prob = y_prob.detach()
    if y_prob.dtype in (torch.float16, torch.bfloat16):
        y_prob = y_prob.float()
    elif not y_prob.is_floating_point():
        y_prob = y_prob.double()
    n_classes = 2 if y_prob.ndim == 1 else y_prob.shape[1]
    try:
        mapped = _tensor_labels(y_true, y_prob.shape[0], n_classes, labels, y_prob.device)
    except ValueError:
        # Labels mapped on the host and refused: the host check reports the values'
        # errors before this one, so it must speak.
        return None
    if mapped is None:
        return None
    summary = [y_prob.min(), y_prob.max()]
    if y_prob.ndim == 2:
        # Row sums accumulated in float64: they differ from numpy's, formed in y_prob's
        # dtype, by the rounding of those sums, less than this margin.
        deviation = (y_prob.sum(dim=1, dtype=torch.float64) - 1).abs().max()
        summary.append(deviation.to(y_prob.dtype))
    low, high, *rest = torch.stack(summary).tolist()
    if not (low >= 0 and high <= 1):
        return None
    margin = 4 * n_classes * float(torch.finfo(y_prob.dtype).eps)
    if rest and not rest[0] <= tolerance - margin and not _row_sums_pass(y_prob, tolerance):
        return None
    y_index, classes = mapped
    return y_index, y_prob, classes


def check_logits(X, *, name: str = "X") -> np.ndarray:
    """Validate a logit matrix: 2-D, non-empty, finite.

    Parameters
    ----------
    X : array-like of shape (n, K)
        Logits (numpy array, torch tensor or nested sequence).
    name : str, default="X"
        The name used in error messages.

    Returns
    -------
    ndarray of shape (n, K)
        float32 and float64 input is returned without a copy; other numeric types
        become float64 (float16 becomes float32).

    Examples
    --------
    >>> check_logits([[1.0, -2.0], [0.5, 3.0]]).shape
    (2, 2)
    >>> check_logits([[1.0, float("nan")]])
    Traceback (most recent call last):
    ...
    ValueError: X contains NaN or infinite values
    """
    X = to_numpy(X, name)
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_classes), got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {X.shape})")
    X = _as_float_array(X, name)
    # min/max instead of isfinite(X).all(): no (n, K) boolean temporary.
    if not (np.isfinite(X.min()) and np.isfinite(X.max())):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


def check_tensor_logits(X, *, min_columns: int = 1):
    """:func:`check_logits` of a torch tensor, on its device; None where the host must check.

    A 2-D floating tensor of at least ``min_columns`` columns whose minimum and maximum
    are finite is returned detached where it lies (float16 and bfloat16 as float32);
    anything else is None, and the caller's host check names the problem.

    Examples
    --------
    >>> import torch
    >>> check_tensor_logits(torch.zeros(2, 3)).shape
    torch.Size([2, 3])
    >>> check_tensor_logits(torch.tensor([[0.0, float("nan")]])) is None
    True
    """
    torch = sys.modules["torch"]
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] < max(min_columns, 1):
        return None
    if not _has_float64(X):
        return None
    if not X.is_floating_point():
        return None
    X = X.detach()
    if X.dtype in (torch.float16, torch.bfloat16):
        X = X.float()
    low, high = torch.stack([X.min(), X.max()]).tolist()
    return X if np.isfinite(low) and np.isfinite(high) else None
