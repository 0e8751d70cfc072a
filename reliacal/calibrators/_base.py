"""The estimator contract shared by every post-hoc calibrator.

:class:`BaseCalibrator` turns whatever the user passes (logits, probabilities
with ``input="probs"``, or raw inputs with a ``backbone``) into validated
numpy arrays, maps labels to columns, and hands the numbers to two methods a
subclass implements. :class:`ClassLabelMixin` holds the label handling alone
(``classes`` -> ``classes_``, labels -> column indices, ``predict``,
``score``) so that estimators with their own ``fit`` (the fine-tuning
estimators) reuse it.

Subclass hooks
--------------
A calibrator subclasses ``BaseCalibrator``, lists its own parameters in
``__init__`` followed by ``**base_params``, stores them with
``store_init_arguments(self, locals())`` (:mod:`reliacal._init_arguments`),
passes ``base_params`` to ``super().__init__`` (the base parameters
``input``, ``classes``, ``backbone``, ``batch_size``, ``device``,
``mixed_precision``, ``memory``, ``verbose``; the subclass's ``__init__`` is given the full signature, which
scikit-learn's ``get_params`` reads, see :mod:`._parameters`), writes a line
``{base_parameters}`` in its docstring's Parameters section for their
documentation, merges ``BaseCalibrator._parameter_constraints`` into its own,
and implements:

``_fit_core(self, features, logits, y_index, sample_weight) -> None``
    Learn the map and set fitted attributes (names ending in ``_``).
    ``logits`` is a finite float32 or float64 ndarray ``(n, K)``, ``K >= 2``
    (the clipped log-probabilities under ``input="probs"``; float32 stays
    float32 so that large matrices are not copied); ``features`` is a finite
    ndarray ``(n, D)`` or ``None``; ``y_index`` is int64 ``(n,)`` in
    ``[0, K)``; ``sample_weight`` is float64 ``(n,)`` (non-negative, positive
    sum) or ``None``. ``classes_`` and ``n_features_in_`` are set before the
    call.
``_calibrated_logits(self, features, logits) -> ndarray (n, K)``
    Calibrated logits for validated inputs of the same forms; the base turns
    them into ``decision_function`` (as float64), ``predict_proba``
    (softmax) and ``predict``.

and may override:

``_split_columns(self, X) -> (features | None, logits)``
    Logits mode only: split the validated 2-D ``X`` (``n_features_in_``
    columns) into features and logits, e.g. for an estimator that reads
    features and logits side by side with a parameter naming the logit
    columns. The default is ``(None, X)``. Runs before the ``input="probs"``
    conversion, which applies to the logit block only. In backbone mode the
    features are the backbone's pooled pre-logits outputs instead.
``_check_fit_inputs(self, features, logits) -> None``
    Extra validation at fit time (e.g. "features are required").
``_torch_map(self) -> nn.Module``
    The fitted map for :meth:`BaseCalibrator.to_torch` (see its docstring),
    built from the blocks of :mod:`reliacal.export`, torch imported inside.
``_check_loaded_state(self) -> None``
    Refuse a fitted state read from a file that no fit gives (see
    :class:`reliacal.persistence.SaveMixin`, whose other hooks a calibrator
    holding a network or an outside object also implements).

``fit`` runs the backbone (if any) exactly once per call, ``predict_proba``,
``decision_function``, ``predict`` and ``score`` once each.
"""

from __future__ import annotations

import copy
import numbers
import os
import re
import sys
import textwrap
import warnings
from typing import Any

import numpy as np
from scipy.special import log_softmax, softmax
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning as _SklearnConvergenceWarning
from sklearn.metrics import accuracy_score
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _check_sample_weight,
    check_consistent_length,
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from reliacal._docstrings import shared_doc
from reliacal._init_arguments import spell_out_init_signature, store_init_arguments
from reliacal._validation import (
    DEFAULT_LABEL_KEY,
    check_logits,
    check_probabilities,
    check_tensor_logits,
    encode_labels,
    is_torch_tensor,
    on_its_device,
    to_numpy,
)
from reliacal.calibrators._backbone_saving import BackboneSaveMixin
from reliacal.calibrators._parameters import with_base_parameters_doc

__all__ = ["BaseCalibrator", "ClassLabelMixin", "ConvergenceWarning"]


# The section shared by the methods that read the input of a fitted calibrator.
_METHOD_DOCS = {
    "fitted_input": """\
Parameters
----------
X : array-like of shape (n_samples, K), Dataset or DataLoader
    Input in the form given to ``fit``."""
}


class ConvergenceWarning(_SklearnConvergenceWarning):
    """A calibrator's fit stopped at a boundary or before converging.

    Subclasses scikit-learn's ``ConvergenceWarning``, so filters written for
    scikit-learn estimators apply too.

    Examples
    --------
    >>> from sklearn.exceptions import ConvergenceWarning as SklearnWarning
    >>> issubclass(ConvergenceWarning, SklearnWarning)
    True
    """


def _as_tensor_like(values: np.ndarray, tensor):
    """Float64 ``values`` as a tensor on ``tensor``'s device: float64 (float32 on MPS)."""
    torch = sys.modules["torch"]
    # MPS has no float64: there the values come back in float32, its widest float.
    dtype = torch.float32 if tensor.device.type == "mps" else torch.float64
    return torch.from_numpy(values).to(device=tensor.device, dtype=dtype)


def _unchanged(values):
    return values


def _predicted_columns(probabilities) -> np.ndarray:
    """The arg-max column of each row; of a tensor on its device, only the result copied."""
    if is_torch_tensor(probabilities):
        return to_numpy(probabilities.argmax(dim=1), "predictions")
    return np.argmax(probabilities, axis=1)


def _labels_to_numpy(y: Any) -> np.ndarray:
    if is_torch_tensor(y):
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        # A column vector is accepted with scikit-learn's DataConversionWarning.
        return column_or_1d(y, warn=True)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D (one label per sample), got shape {y.shape}")
    return y


class ClassLabelMixin:
    """Label handling shared by every reliacal classifier.

    Column ``j`` of the model's output belongs to class ``classes_[j]``. The
    number of columns comes from the model (the logits), never from ``y``, so
    a calibration split that misses some classes keeps every column. The
    ``classes`` parameter (if the estimator has one) names the label of each
    column, in column order; without it the labels are the column indices
    ``0..K-1``.

    Provides ``_fit_labels`` (sets ``classes_``, returns column indices),
    ``_encode_labels`` (after fitting), ``predict`` (the class of the most
    probable column of ``predict_proba``) and ``score`` (accuracy). An
    estimator whose ``score`` input carries its own labels (a ``DataLoader``)
    overrides ``_predict_proba_with_labels``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.base import BaseEstimator, ClassifierMixin
    >>> class Identity(ClassLabelMixin, ClassifierMixin, BaseEstimator):
    ...     def __init__(self, classes=None):
    ...         self.classes = classes
    ...     def fit(self, X, y):
    ...         self._fit_labels(y, n_columns=np.shape(X)[1])
    ...         return self
    ...     def predict_proba(self, X):
    ...         return np.asarray(X)
    >>> model = Identity(classes=["cat", "dog"]).fit([[0.9, 0.1]], ["cat"])
    >>> model.predict([[0.2, 0.8], [0.6, 0.4]])
    array(['dog', 'cat'], dtype='<U3')
    >>> model.score([[0.2, 0.8], [0.6, 0.4]], ["dog", "dog"])
    0.5
    """

    def _classes_for(self, n_columns: int) -> np.ndarray:
        """The label of each of ``n_columns`` columns: ``classes``, or the column indices."""
        given = getattr(self, "classes", None)
        if given is None:
            return np.arange(n_columns)
        classes = np.asarray(given)
        if classes.ndim != 1 or classes.shape[0] != n_columns:
            raise ValueError(
                f"classes must name one label per column ({n_columns} columns), "
                f"got {classes.shape[0] if classes.ndim == 1 else classes.shape} labels"
            )
        if np.unique(classes).shape[0] != n_columns:
            raise ValueError(f"classes must not contain duplicates, got {classes}")
        return classes

    def _fit_labels(self, y: Any, n_columns: int) -> np.ndarray:
        """Set ``classes_`` for ``n_columns`` columns; return ``y`` as column indices."""
        y = _labels_to_numpy(y)
        check_classification_targets(y)
        if getattr(self, "classes", None) is None:
            if y.dtype.kind in "OUST":
                raise ValueError(
                    f"y holds labels such as {y[0]!r}, but without classes= the labels are the "
                    f"column indices 0..{n_columns - 1}; pass classes=[...], the label of each "
                    "column in column order"
                )
            outside = (y < 0) | (y >= n_columns)
            if y.dtype.kind == "f":
                outside |= y != np.round(y)
            if np.any(outside):
                raise ValueError(
                    f"labels {np.unique(y[outside])[:10]} are not column indices of X, which "
                    f"has {n_columns} columns (classes 0..{n_columns - 1}); pass classes=[...] "
                    "to name the label of each column"
                )
        classes = self._classes_for(n_columns)
        y_index = encode_labels(y, classes)
        self.classes_ = classes
        return y_index

    def _encode_labels(self, y: Any) -> np.ndarray:
        """Column indices of ``y`` under the fitted ``classes_``."""
        return encode_labels(_labels_to_numpy(y), self.classes_)

    def _check_loaded_state(self) -> None:
        """Refuse ``classes_`` read from a file unless it names 2 or more distinct labels."""
        if hasattr(self, "classes_"):
            classes = self.classes_
            if not (
                isinstance(classes, np.ndarray)
                and classes.ndim == 1
                and classes.shape[0] >= 2
                and np.unique(classes).shape[0] == classes.shape[0]
            ):
                from reliacal.persistence import loaded_state_error

                raise loaded_state_error(
                    self, "classes_", classes, "a 1-D array of two or more distinct labels"
                )
        parent = getattr(super(), "_check_loaded_state", None)
        if parent is not None:
            parent()

    def _predict_proba_with_labels(self, X: Any, y: Any) -> tuple[np.ndarray, Any]:
        if y is None:
            raise ValueError("y is required to score array inputs")
        return self.predict_proba(X), y

    def predict(self, X: Any) -> np.ndarray:
        """Predict the class of each sample: ``classes_[argmax_k predict_proba(X)[:, k]]``.

        Parameters
        ----------
        X : array-like
            Input in the form ``predict_proba`` accepts.

        Returns
        -------
        ndarray of shape (n_samples,)
            Predicted labels.
        """
        columns = _predicted_columns(self.predict_proba(X))  # checks the fit first
        return self.classes_[columns]

    def score(self, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """Return the (weighted) accuracy of ``predict(X)`` against ``y``.

        Parameters
        ----------
        X : array-like, Dataset or DataLoader
            Input in the form ``predict_proba`` accepts.
        y : array-like of shape (n_samples,), optional
            True labels; omitted when ``X`` yields its own ``(x, y)`` pairs.
        sample_weight : array-like of shape (n_samples,), optional
            Sample weights.

        Returns
        -------
        float
            Fraction (weighted) of samples whose predicted label equals ``y``.
        """
        probabilities, y = self._predict_proba_with_labels(X, y)
        predicted = self.classes_[_predicted_columns(probabilities)]
        return float(accuracy_score(_labels_to_numpy(y), predicted, sample_weight=sample_weight))


_COLUMNS_ARE_CLASSES = (
    "the columns of X are the classes (logits), and this check fits on data whose labels "
    "are not 0..K-1 for K columns (sklearn's blobs: 2 columns, 3 classes, or labels {1, 2}); "
    "the calibrator rejects such labels by design"
)

#: check_estimator checks that a logit calibrator fails by design, with the reason.
LOGIT_CALIBRATOR_WAIVED_CHECKS = {
    "check_estimators_overwrite_params": _COLUMNS_ARE_CLASSES,
    "check_estimators_fit_returns_self": _COLUMNS_ARE_CLASSES,
    "check_readonly_memmap_input": _COLUMNS_ARE_CLASSES,
    "check_sample_weights_pandas_series": _COLUMNS_ARE_CLASSES,
    "check_sample_weights_not_an_array": _COLUMNS_ARE_CLASSES,
    "check_sample_weights_shape": _COLUMNS_ARE_CLASSES,
    "check_sample_weights_not_overwritten": _COLUMNS_ARE_CLASSES,
    "check_classifier_data_not_an_array": _COLUMNS_ARE_CLASSES,
    "check_classifiers_train": _COLUMNS_ARE_CLASSES,
    "check_classifiers_classes": (
        "string labels name columns only through the classes= parameter, never inferred "
        "from y (a calibration split may miss classes); the check passes none"
    ),
    "check_decision_proba_consistency": (
        "decision_function returns the calibrated logits, shape (n, K) also for K = 2, "
        "not sklearn's 1-D binary score that the check ranks"
    ),
}


def waive_one_label(what: str) -> dict[str, str]:
    """The waiver of ``check_classifiers_one_label`` for ``what``, a map that keeps the argmax.

    >>> waive_one_label("the map")["check_classifiers_one_label"][:30]
    'the map keeps the argmax of th'
    """
    return {
        "check_classifiers_one_label": (
            f"{what} keeps the argmax of the logits, so it cannot learn to predict the single "
            "class seen in fit"
        )
    }


def waive_weight_equivalence(folds: str) -> dict[str, str]:
    """The waiver of the repeated-rows check for a fit whose ``folds`` split its rows.

    >>> print(waive_weight_equivalence("the folds")["check_sample_weight_equivalence_on_dense_data"])
    the folds split rows: the copies of a repeated row can fall in different folds, which a sample weight cannot reproduce
    """
    return {
        "check_sample_weight_equivalence_on_dense_data": (
            f"{folds} split rows: the copies of a repeated row can fall in different folds, "
            "which a sample weight cannot reproduce"
        )
    }


def _waived_checks_note(waived: dict[str, str], indent: str = "") -> str:
    """The Notes paragraph that lists waived ``check_estimator`` checks, grouped by reason.

    Calibrators get it appended to their docstring's Notes section
    automatically (see ``BaseCalibrator.__init_subclass__``), so the text
    always matches ``_expected_failed_checks()``.

    Examples
    --------
    >>> print(_waived_checks_note({"check_a": "why a", "check_b": "why a", "check_c": "why c"}))
    ``check_estimator`` checks waived by design (``_expected_failed_checks()``
    returns them with these reasons, for ``parametrize_with_checks``):
    <BLANKLINE>
    - ``check_a``, ``check_b``: why a.
    - ``check_c``: why c.
    """
    by_reason: dict[str, list[str]] = {}
    for check, reason in waived.items():
        by_reason.setdefault(reason, []).append(check)
    lines = [
        "``check_estimator`` checks waived by design (``_expected_failed_checks()``",
        "returns them with these reasons, for ``parametrize_with_checks``):",
        "",
    ]
    for reason, checks in by_reason.items():
        item = ", ".join(f"``{check}``" for check in checks) + f": {reason.rstrip('.')}."
        lines += textwrap.wrap(
            item,
            width=76 - len(indent),
            initial_indent="- ",
            subsequent_indent="  ",
            break_on_hyphens=False,
            break_long_words=False,
        )
    return "\n".join(indent + line if line else line for line in lines)


def _with_waived_checks_note(docstring: str, waived: dict[str, str]) -> str:
    """``docstring`` with the waived-check note at the end of its Notes section.

    A Notes section is created (before References or Examples, as numpydoc
    orders them) when there is none.
    """
    header = re.compile(r"^([ \t]*)(\w[\w ]*)\n\1-{3,}[ \t]*$", re.MULTILINE)
    sections = list(header.finditer(docstring))
    indent = sections[0].group(1) if sections else ""
    note = _waived_checks_note(waived, indent)
    names = [match.group(2) for match in sections]
    if "Notes" in names:
        following = sections[names.index("Notes") + 1 :]
        end = following[0].start() if following else len(docstring)
        rest = docstring[end:] if following else "\n" + indent
        return f"{docstring[:end].rstrip()}\n\n{note}\n\n{rest.lstrip(chr(10))}"
    section = f"{indent}Notes\n{indent}-----\n{note}\n\n"
    later = [match for match in sections if match.group(2) in ("References", "Examples")]
    if later:
        start = later[0].start()
        return docstring[:start] + section + docstring[start:]
    return f"{docstring.rstrip()}\n\n{section}{indent}"


def _looks_like_probabilities(logits: np.ndarray) -> bool:
    """Whether every value lies in [0, 1] and every row sums to 1 (within 1e-3)."""
    if logits.shape[1] < 2 or logits.min() < 0.0 or logits.max() > 1.0:
        return False
    if is_torch_tensor(logits):  # summed on its device
        row_sums = logits.sum(dim=1)
    else:
        row_sums = logits @ np.ones(logits.shape[1], dtype=logits.dtype)
    return bool((abs(row_sums - 1.0) <= 1e-3).all())


def _on_accelerator(value: Any) -> bool:
    # Without torch loaded nothing can be a tensor: pickling a numpy-only
    # calibrator must not import it.
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if isinstance(value, torch.Tensor):
        return value.device.type != "cpu"
    if isinstance(value, torch.nn.Module):
        return any(t.device.type != "cpu" for t in (*value.parameters(), *value.buffers()))
    return False


class BaseCalibrator(BackboneSaveMixin, ClassLabelMixin, ClassifierMixin, BaseEstimator):
    """Base class of the post-hoc calibrators: input modes, labels, persistence.

    Not used directly: subclasses implement ``_fit_core`` and
    ``_calibrated_logits`` (see the module docstring for the exact hooks).

    Input modes, chosen by the parameters and never guessed from the data:

    - logits (default): ``X`` is an ``(n, K)`` numpy array, torch tensor or
      DataFrame of logits; ``K`` (the number of columns) is the number of
      classes. Logits that look like probabilities (every value in
      ``[0, 1]``, every row summing to 1 within ``1e-3``) are used as given,
      with a ``UserWarning`` at fit and predict that suggests
      ``input="probs"``;
    - binary scores: a 1-D ``X`` of ``n`` values, each the logit (log-odds,
      or any score that grows with it) of the positive class ``classes_[1]``,
      read as the two logit columns ``[0, s]`` (with ``input="probs"``: the
      probability of the positive class, read as ``[1 - p, p]``). A
      calibrator fitted on 1-D input predicts on 1-D input
      (``n_features_in_ == 1``);
    - ``input="probs"``: ``X`` holds probabilities (rows summing to 1); the
      calibrator works on ``log(max(p, tiny))``, ``tiny`` the smallest
      normal number of the dtype (so ``MatrixScaling(input="probs")`` is
      Dirichlet calibration);
    - ``backbone=model``: ``X`` holds raw inputs (an array or tensor of
      images or token ids, a torch ``Dataset`` of ``(x, y)`` pairs, or a
      ``DataLoader`` of ``(x, y)`` batches, then ``y`` is omitted). The model
      is wrapped by :func:`reliacal.backbones.as_backbone` at fit and run
      frozen, batched, under ``no_grad``, once per call, by
      :func:`reliacal.backbones.extract_outputs`; its logits (and pooled
      features) feed the calibrator.

    Parameters
    ----------
    input : {"logits", "probs"}, default="logits"
        What the columns of ``X`` (or the backbone outputs) are.
    classes : array-like of shape (K,), default=None
        Label of each column, in column order. ``None`` means ``0..K-1``.
    backbone : model, BackboneAdapter or str, default=None
        A classifier whose outputs are calibrated (anything
        :func:`reliacal.backbones.as_backbone` accepts).
    batch_size : int, default=256
        Samples per backbone forward pass.
    device : str or torch.device, default="auto"
        Where the backbone runs (CUDA when available for ``"auto"``).
    mixed_precision : bool, default=False
        Run the backbone under autocast on CUDA.
    memory : joblib.Memory, str or path, default=None
        Cache of the backbone outputs: refitting on the same data (a grid
        search) skips the forward passes. The cache is read back with pickle,
        which can run code: give only a folder that you trust and that no one
        else can write to.
    verbose : int, default=0
        Show progress when > 0.
    label_key : str, default="labels"
        Backbone mode: the key of the labels when a Dataset or DataLoader
        yields Hugging Face style mappings (``{"input_ids",
        "attention_mask", "labels"}``, ``{"pixel_values", "labels"}``); the
        other entries go to the model. ``"label"`` suits a ``datasets``
        column read with the default collation.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
        Label of each column.
    n_features_in_ : int
        Columns of ``X`` seen at fit (logits mode only).
    backbone_ : BackboneAdapter
        The wrapped backbone (backbone mode only).

    Notes
    -----
    Pickling keeps everything on the CPU: any module or tensor held on an
    accelerator (a backbone kept on CUDA) is pickled as a CPU copy, so a
    calibrator fitted on a GPU machine loads and predicts on a CPU-only one;
    the live estimator is left where it is.
    """

    def __init__(
        self,
        *,
        input: str = "logits",
        classes=None,
        backbone=None,
        batch_size: int = 256,
        device="auto",
        mixed_precision: bool = False,
        memory=None,
        verbose: int = 0,
        label_key: str = DEFAULT_LABEL_KEY,
    ):
        store_init_arguments(self, locals())

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A subclass __init__ taking **base_params shows the base parameters by name
        # (scikit-learn's get_params and clone read the signature).
        spell_out_init_signature(cls, BaseCalibrator.__init__)
        if cls.__doc__:
            cls.__doc__ = with_base_parameters_doc(cls.__doc__)
        # Public calibrators document their waived checks from the one source of them:
        # those of the default configuration (a parameter may waive more, e.g.
        # HistogramBinning(mode="top-label"); its docstring says so).
        if cls.__doc__ and not cls.__name__.startswith("_"):
            waived = cls()._expected_failed_checks()
            cls.__doc__ = _with_waived_checks_note(cls.__doc__, waived)

    _parameter_constraints: dict = {
        "input": [StrOptions({"logits", "probs"})],
        "classes": ["array-like", None],
        "backbone": "no_validation",
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "device": "no_validation",
        "mixed_precision": ["boolean"],
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        "verbose": ["verbose"],
        "label_key": [str],
    }

    # Subclasses written before label_key existed do not take it: they read mapping
    # batches with the default key.
    label_key = DEFAULT_LABEL_KEY

    # A cache folder of this machine: never saved, refused in a file (reliacal.load).
    _machine_local_parameters = ("memory",)

    #: Whether ``input="probs"`` takes the logs in float64 whatever the input's dtype
    #: (else in the input's own precision); the exported module follows the same rule.
    _float64_probability_logs = False

    #: Whether a torch tensor of logits stays a tensor, on its device, through ``fit``
    #: (``_fit_core`` then takes a tensor) and through ``predict_proba``
    #: (``_calibrated_logits`` then takes one); else it is read as a numpy array.
    _device_fit = False
    _device_predict = False

    # ---------------------------------------------------------------- hooks
    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        raise NotImplementedError

    def _calibrated_logits(self, features, logits) -> np.ndarray:
        raise NotImplementedError

    def _split_columns(self, X: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        return None, X

    def _check_fit_inputs(self, features, logits) -> None:
        return None

    # ------------------------------------------------------- input handling
    def _probabilities_to_logits(self, probabilities: np.ndarray) -> np.ndarray:
        if self._float64_probability_logs:
            probabilities = np.asarray(probabilities, dtype=np.float64)
        try:
            check_probabilities(np.zeros(probabilities.shape[0], dtype=np.int64), probabilities)
        except ValueError as error:
            raise ValueError(f"input='probs' but X does not hold probabilities: {error}") from None
        tiny = np.finfo(probabilities.dtype).tiny
        return np.log(np.maximum(probabilities, tiny))

    def _device_logits(self, X: Any, reset: bool):
        """The logits tensor ``X`` validated where it lies, or None (the host path).

        Only for the calibrators that compute on a tensor's device (``_device_fit``,
        ``_device_predict``), in logits mode; doubt (a shape, a value, a column count
        that differs from fit) goes to the host path, which names it.
        """
        on_device = self._device_fit if reset else self._returns_tensor(X)
        if not (on_device and on_its_device(X) and self.input == "logits"):
            return None
        logits = check_tensor_logits(X, min_columns=2 if reset else 1)
        if logits is None:
            return None
        if reset:
            # As validate_data(reset=True): the column count, and no feature names.
            self.n_features_in_ = logits.shape[1]
            self.__dict__.pop("feature_names_in_", None)
        elif logits.shape[1] != getattr(self, "n_features_in_", None):
            return None
        return logits

    def _returns_tensor(self, X: Any) -> bool:
        """Whether ``predict_proba(X)`` is a tensor: a logits tensor, for ``_device_predict``."""
        return (
            self._device_predict
            and self.backbone is None
            and self.input == "logits"
            and is_torch_tensor(X)
        )

    def _logits_mode_inputs(self, X: Any, reset: bool):
        device_logits = self._device_logits(X, reset)
        if device_logits is not None:
            return self._split_columns(device_logits)
        from_torch = is_torch_tensor(X)
        values = to_numpy(X, "X") if from_torch else X
        fitted_on_columns = not reset and getattr(self, "n_features_in_", 1) != 1
        if np.ndim(values) == 1 and not fitted_on_columns:
            return self._split_columns(self._binary_scores_to_columns(values, reset))
        if from_torch:  # the tensor is already on the host: check the copy, not a second one
            X = check_logits(values)
        # sklearn's conventions first (feature names, n_features_in_, sparse and complex
        # input, and the "Reshape your data" hint for 1-D input to a calibrator fitted on
        # columns), then the logit checks.
        X = validate_data(
            self,
            X,
            reset=reset,
            dtype=(np.float64, np.float32),
            ensure_all_finite=False,
            # At predict time the n_features_in_ check speaks first.
            ensure_min_features=2 if reset else 1,
        )
        return self._split_columns(check_logits(X))

    def _binary_scores_to_columns(self, values: Any, reset: bool) -> np.ndarray:
        """The two logit columns of 1-D binary scores: ``[0, s]``, or ``[1 - p, p]`` for probs."""
        # pandas Series and lists too: one score per sample, as a single column.
        column = np.asarray(values).reshape(-1, 1)
        column = validate_data(
            self, column, reset=reset, dtype=(np.float64, np.float32), ensure_all_finite=False
        )
        scores = check_logits(column)[:, 0]
        if self.input == "probs":
            # _validated_inputs checks that these are probabilities and takes their logs.
            return np.column_stack([1.0 - scores, scores])
        return np.column_stack([np.zeros_like(scores), scores])

    def _backbone_outputs(self, X: Any, y: Any):
        from reliacal.backbones import extract_outputs

        pooled, logits, y = extract_outputs(
            self.backbone_,
            X,
            y,
            batch_size=self.batch_size,
            device=self.device,
            mixed_precision=self.mixed_precision,
            memory=self.memory,
            verbose=self.verbose,
            label_key=self.label_key,
        )
        return pooled, check_logits(logits, name="backbone logits"), y

    def _validated_inputs(self, X: Any, y: Any, *, reset: bool):
        """``(features, logits, y)`` in the input mode of the parameters.

        ``reset`` is True at fit only: the backbone is wrapped anew and
        ``n_features_in_`` is set rather than checked.
        """
        if self.backbone is not None:
            if reset:
                from torch.utils.data import DataLoader, Dataset

                from reliacal._data import as_dataset
                from reliacal.backbones import as_backbone

                self.backbone_ = as_backbone(self.backbone)
                if isinstance(X, Dataset | DataLoader):
                    # Fitting needs labels: mapping items must hold label_key.
                    as_dataset(X, require_y=True, label_key=self.label_key)
            features, logits, y = self._backbone_outputs(X, y)
        else:
            features, logits = self._logits_mode_inputs(X, reset=reset)
        # In logits mode after _split_columns: only the logit block holds probabilities.
        if self.input == "probs":
            logits = self._probabilities_to_logits(logits)
        elif _looks_like_probabilities(logits):
            warnings.warn(
                f"{type(self).__name__}: the logits passed to "
                f"{'fit' if reset else 'predict'} look like probabilities (every value in "
                "[0, 1], every row summing to 1); calibrating them as logits gives wrong "
                "results: pass input='probs' for probabilities",
                UserWarning,
                stacklevel=4,
            )
        return features, logits, y

    def _transform_inputs(self, X: Any, y: Any = None):
        """Validated ``(features, logits, y)`` of a fitted calibrator."""
        check_is_fitted(self, "classes_")
        if self.backbone is not None:
            from reliacal._data import check_ordered  # backbone mode only: it imports torch

            # Rows come back in the loader's order: it must be one the caller knows.
            check_ordered(X)
        features, logits, y = self._validated_inputs(X, y, reset=False)
        if logits.shape[1] != self.classes_.shape[0]:
            raise ValueError(
                f"X has {logits.shape[1]} logit columns, but {type(self).__name__} was fitted "
                f"with {self.classes_.shape[0]}"
            )
        return features, logits, y

    # ---------------------------------------------------------- public API
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any = None, sample_weight: Any = None):
        """Fit the calibrator on held-out logits (or raw inputs with a backbone).

        Parameters
        ----------
        X : array-like of shape (n_samples, K), Dataset or DataLoader
            Logits (numpy, torch or DataFrame), probabilities with
            ``input="probs"``, or raw inputs with ``backbone``.
        y : array-like of shape (n_samples,)
            Labels; omitted when ``X`` is a Dataset or DataLoader.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights of the samples.

        Returns
        -------
        self
            The fitted calibrator.
        """
        features, logits, y = self._validated_inputs(X, y, reset=True)
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None: "
                "pass the labels, or a Dataset/DataLoader yielding (x, y) with a backbone"
            )
        if logits.shape[1] < 2:
            raise ValueError(
                f"X has 1 feature(s) as logits (shape {logits.shape}); calibration needs at "
                "least 2 logit columns (for a binary problem pass both columns)"
            )
        y = _labels_to_numpy(y)
        check_consistent_length(logits, y)
        try:
            y_index = self._fit_labels(y, n_columns=logits.shape[1])
        except ValueError as error:
            if self.backbone is None and self.n_features_in_ == 1:
                raise ValueError(
                    f"X is 1-D: binary scores of the positive class, read as 2 logit columns; "
                    f"{error}. For more than 2 classes pass the (n, K) logits"
                ) from None
            raise
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, logits, dtype=np.float64, ensure_non_negative=True
            )
            # scikit-learn 1.6 and 1.7 (within the declared floor) do not check this.
            if not sample_weight.sum() > 0:
                raise ValueError(
                    "sample_weight must contain at least one non-zero (positive) value: "
                    "the weighted loss of all-zero weights is undefined"
                )
        self._check_fit_inputs(features, logits)
        self._fit_core(features, logits, y_index, sample_weight)
        return self

    def _calibrated_output(self, X: Any, on_device, on_host):
        """``on_device`` or ``on_host`` of the calibrated logits of ``X``.

        A tensor for which :meth:`_returns_tensor` holds comes back as a float64
        tensor on its device (computed there, or through numpy for a CPU or an MPS
        tensor; float32 on MPS, which has no float64); anything else as a float64
        ndarray, as the NumPy path returns.
        """
        features, logits, _ = self._transform_inputs(X)
        calibrated = self._calibrated_logits(features, logits)
        if is_torch_tensor(calibrated):  # computed on the input tensor's device, in float64
            return on_device(calibrated)
        values = on_host(np.asarray(calibrated, dtype=np.float64))
        if self._returns_tensor(X):
            # Computed through numpy (a CPU or an MPS tensor): a tensor back, as from any device.
            return _as_tensor_like(values, X)
        return values

    @shared_doc(_METHOD_DOCS)
    def decision_function(self, X: Any) -> np.ndarray:
        """Return the calibrated logits (float64, shape (n_samples, K)).

        {fitted_input}

        Returns
        -------
        ndarray of shape (n_samples, K)
            Calibrated logits; ``softmax`` of them is ``predict_proba(X)``. A tensor
            where ``predict_proba`` returns one.
        """
        return self._calibrated_output(X, _unchanged, _unchanged)

    @shared_doc(_METHOD_DOCS)
    def predict_proba(self, X: Any) -> np.ndarray:
        """Return calibrated probabilities (float64, rows summing to 1).

        {fitted_input}

        Returns
        -------
        ndarray of shape (n_samples, K)
            Column ``j`` is the probability of ``classes_[j]``. For a logits tensor
            given to a calibrator that computes on its device (temperature, vector,
            matrix and structured scalings), a float64 tensor on ``X``'s device
            (float32 on MPS, which has no float64).
        """
        return self._calibrated_output(
            X, lambda logits: logits.softmax(dim=1), lambda logits: softmax(logits, axis=1)
        )

    @shared_doc(_METHOD_DOCS)
    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Return the log of the calibrated probabilities.

        {fitted_input}

        Returns
        -------
        ndarray of shape (n_samples, K)
            ``log(predict_proba(X))``, computed stably from the logits; a tensor
            where ``predict_proba`` returns one.
        """
        return self._calibrated_output(
            X,
            lambda logits: logits.log_softmax(dim=1),
            lambda logits: log_softmax(logits, axis=1),
        )

    def _predict_proba_with_labels(self, X: Any, y: Any):
        if self.backbone is None:
            return super()._predict_proba_with_labels(X, y)
        features, logits, y = self._transform_inputs(X, y)
        if y is None:
            raise ValueError("y is required to score array inputs")
        calibrated = np.asarray(self._calibrated_logits(features, logits), dtype=np.float64)
        return softmax(calibrated, axis=1), y

    def to_torch(self):
        """Return the fitted map as a ``torch.nn.Module`` (input of ``fit`` -> probabilities).

        See :func:`reliacal.export.calibrator_module`; the module traces
        with TorchScript and exports to ONNX.

        Returns
        -------
        torch.nn.Module
            Maps ``X`` (logits, or probabilities with ``input="probs"``) of
            shape ``(n, K)`` to float64 calibrated probabilities equal to
            ``predict_proba(X)``.

        Examples
        --------
        >>> import numpy as np, torch
        >>> from reliacal.calibrators import IsotonicCalibration
        >>> from reliacal.datasets import make_logits
        >>> logits, y = make_logits(300, 3, random_state=0)
        >>> model = IsotonicCalibration().fit(logits, y)
        >>> module = model.to_torch()  # ready for torch.jit.script or torch.onnx.export
        >>> out = module(torch.as_tensor(logits[:4])).numpy()
        >>> bool(np.allclose(out, model.predict_proba(logits[:4]), atol=1e-12))
        True
        """
        from reliacal.export import calibrator_module

        return calibrator_module(self)

    def _torch_map(self):
        """The fitted map as an ``nn.Module``: float64 ``(n, D + K)`` -> probabilities ``(n, K)``.

        Its input is the calibrator's ``X`` in float64, the logit block
        already converted from probabilities under ``input="probs"``: the
        ``D = n_features_in_ - K`` feature columns (none for a calibrator
        that reads logits only), then the ``K`` logits. A calibrator that can
        be exported implements it (importing torch inside, so that the
        calibrator imports without torch), composing the building blocks of
        :mod:`reliacal.export`; :func:`reliacal.export.calibrator_module`
        adds the input handling.
        """
        raise ValueError(
            f"{type(self).__name__} has no torch module: it does not describe its map "
            "(to_torch() covers reliacal's post-hoc calibrators)"
        )

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "n_features_in_"):
            from reliacal.persistence import check_loaded_number

            check_loaded_number(self, "n_features_in_", minimum=1, integer=True)

    def _expected_failed_checks(self) -> dict[str, str]:
        """The ``check_estimator`` checks this estimator fails by design, with reasons.

        Pass it to ``parametrize_with_checks(..., expected_failed_checks=...)``.
        """
        return dict(LOGIT_CALIBRATOR_WAIVED_CHECKS)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # The accuracy is the backbone's (or the given logits'): a post-hoc calibrator
        # cannot score well on arbitrary features, by design.
        tags.classifier_tags.poor_score = True
        tags.input_tags.allow_nan = False
        return tags

    def __getstate__(self):
        state = super().__getstate__()
        on_accelerator = {key: value for key, value in state.items() if _on_accelerator(value)}
        if on_accelerator:
            # One deepcopy of all of them keeps shared submodules shared (the adapter
            # wraps the user's backbone), then the copies move to the CPU.
            copies = copy.deepcopy(on_accelerator)
            for key, value in copies.items():
                copies[key] = value.to("cpu")
            state = {**state, **copies}
        return state
