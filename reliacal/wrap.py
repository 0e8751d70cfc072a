"""Calibrate a scikit-learn classifier (prefit or cross-fitted) or a trained torch model."""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import check_cv
from sklearn.utils import _safe_indexing, get_tags
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _check_sample_weight,
    check_is_fitted,
    column_or_1d,
    has_fit_parameter,
    indexable,
)

from reliacal._init_arguments import store_init_arguments
from reliacal._validation import is_torch_module
from reliacal.calibrators import ClassLabelMixin
from reliacal.persistence import SaveMixin

__all__ = ["CalibratedClassifier", "classifier_logits"]

# scikit-learn's offset (calibration._convert_to_logits): the same logits, and an exact
# zero probability (random forests give many) becomes log(1e-12) ~ -27.6, a logit a
# calibrator can still move, where log(tiny) ~ -708 would dominate every fit.
_PROBABILITY_OFFSET = 1e-12

# method name -> (calibrator class name, parameters)
_METHODS = {
    "temperature": ("TemperatureScaling", {}),
    "vector": ("VectorScaling", {}),
    "matrix": ("MatrixScaling", {}),
    "platt": ("PlattScaling", {}),
    "sigmoid": ("PlattScaling", {"target_smoothing": True}),
    "isotonic": ("IsotonicCalibration", {}),
    "beta": ("BetaCalibration", {}),
    "histogram": ("HistogramBinning", {}),
    "ets": ("EnsembleTemperatureScaling", {}),
}


def classifier_logits(estimator, X) -> np.ndarray:
    """Logits ``(n, K)`` of a fitted scikit-learn classifier.

    ``decision_function`` when the classifier has one (a 1-D binary score
    ``d`` becomes the columns ``[0, d]``), else ``log(p + 1e-12)`` of
    ``predict_proba``, as scikit-learn's ``CalibratedClassifierCV`` does.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> X, y = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([0, 0, 1, 1])
    >>> model = LogisticRegression().fit(X, y)
    >>> logits = classifier_logits(model, X)
    >>> logits.shape, bool(np.allclose(logits[:, 1], model.decision_function(X)))
    ((4, 2), True)
    """
    if hasattr(estimator, "decision_function"):
        scores = np.asarray(estimator.decision_function(X), dtype=np.float64)
        if scores.ndim == 1:
            return np.column_stack([np.zeros_like(scores), scores])
        return scores
    if hasattr(estimator, "predict_proba"):
        probabilities = np.asarray(estimator.predict_proba(X), dtype=np.float64)
        return np.log(probabilities + _PROBABILITY_OFFSET)
    raise ValueError(
        f"{type(estimator).__name__} has neither decision_function nor predict_proba: "
        "its logits cannot be read"
    )


def _calibrator(method):
    if isinstance(method, str):
        from reliacal import calibrators

        name, parameters = _METHODS[method]
        return getattr(calibrators, name)(**parameters)
    return clone(method)


def _fit_estimator(estimator, X, y, sample_weight):
    if sample_weight is not None and has_fit_parameter(estimator, "sample_weight"):
        return estimator.fit(X, y, sample_weight=sample_weight)
    return estimator.fit(X, y)


def _subset(values, indices):
    return None if values is None else _safe_indexing(values, indices)


class CalibratedClassifier(
    SaveMixin, ClassLabelMixin, MetaEstimatorMixin, ClassifierMixin, BaseEstimator
):
    """A classifier calibrated by a reliacal calibrator on its logits.

    The classifier's logits are calibrated by ``method``: a scikit-learn
    classifier's ``decision_function``, or the log of its ``predict_proba``
    (see :func:`classifier_logits`); a torch model's logits (see below).
    Mirrors scikit-learn's ``CalibratedClassifierCV``:

    - ``cv="prefit"``, or ``estimator`` a ``sklearn.frozen.FrozenEstimator``:
      the classifier is used as fitted, and the calibrator is fitted on the
      data given to ``fit`` (which must not be the classifier's training data);
    - otherwise ``cv`` splits the data (an int: stratified k-fold, default 5):
      with ``ensemble=True`` a clone of the classifier is fitted on each
      training part and a calibrator on its held-out part, and the
      probabilities are the mean over the folds; with ``ensemble=False`` the
      out-of-fold logits of all folds fit one calibrator, and the classifier
      is refitted on all the data. Given the same splits, the classifier and
      calibrator fits are those of ``CalibratedClassifierCV``.

    A trained torch model (``torch.nn.Module``) is used as fitted, and needs
    ``cv="prefit"``: training is the user's (a module has no ``fit`` to
    clone and call). Its logits are its output for a plain module (no
    ``features=``/``head=`` needed), or what the backbone adapters read for
    the models they know (timm, Hugging Face ViT and BERT-style classifiers,
    a :class:`~reliacal.backbones.BackboneAdapter`). It runs frozen (eval
    mode, ``no_grad``), in batches of ``batch_size`` on ``device``; ``X`` is
    an array or tensor of its inputs, or a Dataset or DataLoader of ``(x,
    y)`` (then ``y`` is omitted); the labels are the logit column indices
    ``0..K-1``.

    Parameters
    ----------
    estimator : classifier or torch.nn.Module
        A scikit-learn classifier with ``decision_function`` or
        ``predict_proba`` (fitted when ``cv="prefit"``), or a trained torch
        model (with ``cv="prefit"``).
    method : str or calibrator, default="temperature"
        A reliacal calibrator (cloned for each fit), or one of
        ``"temperature"``, ``"vector"``, ``"matrix"``, ``"platt"`` (maximum
        likelihood), ``"sigmoid"`` (Platt with scikit-learn's smoothed
        targets), ``"isotonic"``, ``"beta"``, ``"histogram"``, ``"ets"``.
    cv : int, cross-validation generator, iterable or "prefit", default=None
        How the calibration data is split off (None: 5-fold stratified).
    ensemble : bool or "auto", default="auto"
        Average one (classifier, calibrator) pair per fold (True) or refit
        one classifier on all the data (False); "auto" is True unless the
        classifier is prefit or frozen.
    batch_size : int, default=256
        Samples per forward pass of a torch model (unused otherwise).
    device : str or torch.device, default="auto"
        Where a torch model runs (CUDA when available for "auto"; unused
        otherwise).

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
        The class labels.
    calibrated_classifiers_ : list of (classifier, calibrator) tuples
        One pair per fold (``ensemble=True``), else a single pair.
    n_features_in_ : int
        Number of features of ``X`` (when the classifier records it; never
        for a torch model).

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.ensemble import HistGradientBoostingClassifier
    >>> from reliacal import CalibratedClassifier
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> model = CalibratedClassifier(
    ...     HistGradientBoostingClassifier(max_iter=20), method="isotonic", cv=3
    ... ).fit(X, y)
    >>> len(model.calibrated_classifiers_), model.predict_proba(X[:2]).shape
    (3, (2, 2))

    A trained torch model, prefit:

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    >>> images = torch.randn(40, 3, 2, 2)
    >>> labels = net(images).argmax(dim=1)
    >>> labels[::4] = (labels[::4] + 1) % 3  # a quarter of its predictions are wrong
    >>> model = CalibratedClassifier(net, cv="prefit", device="cpu").fit(images, labels)
    >>> model.classes_, model.predict_proba(images[:2]).shape
    (array([0, 1, 2]), (2, 3))
    """

    _parameter_constraints: dict = {
        "estimator": [HasMethods(["fit"]), HasMethods(["forward"])],
        "method": [StrOptions(set(_METHODS)), HasMethods(["fit", "predict_proba"])],
        "cv": ["cv_object", StrOptions({"prefit"})],
        "ensemble": ["boolean", StrOptions({"auto"})],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "device": "no_validation",
    }

    def __init__(
        self,
        estimator,
        *,
        method="temperature",
        cv=None,
        ensemble="auto",
        batch_size=256,
        device="auto",
    ):
        store_init_arguments(self, locals())

    def _prefit(self) -> bool:
        return self.cv == "prefit" or isinstance(self.estimator, FrozenEstimator)

    def _fit_calibrator(self, estimator, X, y_index, sample_weight):
        calibrator = _calibrator(self.method)
        calibrator.fit(classifier_logits(estimator, X), y_index, sample_weight=sample_weight)
        return calibrator

    def _torch_logits(self, model, X, y=None):
        from reliacal.backbones import torch_logits

        return torch_logits(model, X, y, batch_size=self.batch_size, device=self.device)

    def _fit_torch(self, X, y, sample_weight):
        """The single (model, calibrator) pair of a trained torch model."""
        if self.cv != "prefit":
            raise ValueError(
                f"{type(self.estimator).__name__} is a torch module: CalibratedClassifier "
                "cannot clone and train it on folds, so it calibrates it as trained; pass "
                f"cv='prefit' (got cv={self.cv!r}) and calibration data it was not trained on"
            )
        logits, y = self._torch_logits(self.estimator, X, y)
        if y is None:
            raise ValueError(
                "CalibratedClassifier requires y: pass the labels, or a Dataset/DataLoader "
                "yielding (x, y)"
            )
        y = column_or_1d(np.asarray(y), warn=True)
        check_classification_targets(y)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, y, ensure_non_negative=True)
        # The logit columns are the classes: labels are their indices, as for the calibrators.
        self.classes_ = np.arange(logits.shape[1])
        calibrator = _calibrator(self.method)
        calibrator.fit(logits, self._encode_labels(y), sample_weight=sample_weight)
        return [(self.estimator, calibrator)]

    def _check_columns(self, estimator, where: str) -> None:
        fitted_classes = np.asarray(estimator.classes_)
        if fitted_classes.shape != self.classes_.shape or np.any(fitted_classes != self.classes_):
            raise ValueError(
                f"the classifier fitted {where} knows the classes {fitted_classes.tolist()}, "
                f"but y holds {self.classes_.tolist()}: every class needs samples in every "
                "training part (use fewer folds or a stratified split)"
            )

    def fit(self, X, y=None, sample_weight=None):
        """Fit the classifier (unless prefit) and the calibrator.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), Dataset or DataLoader
            The classifier's input (a Dataset or DataLoader of ``(x, y)``
            for a torch model only).
        y : array-like of shape (n_samples,)
            Labels; omitted when ``X`` is a Dataset or DataLoader.
        sample_weight : array-like of shape (n_samples,), default=None
            Passed to the calibrator, and to the classifier's ``fit`` when it
            accepts them.

        Returns
        -------
        self
        """
        self._validate_params()
        if is_torch_module(self.estimator):
            self.calibrated_classifiers_ = self._fit_torch(X, y, sample_weight)
            return self
        if y is None:
            raise ValueError(
                "CalibratedClassifier requires y to be passed, but the target y is None"
            )
        X, y = indexable(X, y)
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, y, ensure_non_negative=True)
        if self._prefit():
            estimator = self.estimator
            check_is_fitted(estimator, "classes_")
            self.classes_ = np.asarray(estimator.classes_)
            calibrator = self._fit_calibrator(estimator, X, self._encode_labels(y), sample_weight)
            pairs = [(estimator, calibrator)]
        else:
            # One sort gives the classes and every row's column.
            self.classes_, y_index = np.unique(y, return_inverse=True)
            splits = list(check_cv(self.cv, y, classifier=True).split(X, y))
            ensemble = True if self.ensemble == "auto" else self.ensemble
            pairs = (
                self._fit_ensemble(X, y, y_index, sample_weight, splits)
                if ensemble
                else self._fit_single(X, y, y_index, sample_weight, splits)
            )
        self.calibrated_classifiers_ = pairs
        if hasattr(pairs[0][0], "n_features_in_"):
            self.n_features_in_ = pairs[0][0].n_features_in_
        return self

    def _fit_ensemble(self, X, y, y_index, sample_weight, splits):
        pairs = []
        for train, test in splits:
            estimator = _fit_estimator(
                clone(self.estimator), _subset(X, train), y[train], _subset(sample_weight, train)
            )
            self._check_columns(estimator, "on a training part")
            calibrator = self._fit_calibrator(
                estimator, _subset(X, test), y_index[test], _subset(sample_weight, test)
            )
            pairs.append((estimator, calibrator))
        return pairs

    def _fit_single(self, X, y, y_index, sample_weight, splits):
        logits = None
        for train, test in splits:
            estimator = _fit_estimator(
                clone(self.estimator), _subset(X, train), y[train], _subset(sample_weight, train)
            )
            self._check_columns(estimator, "on a training part")
            fold_logits = classifier_logits(estimator, _subset(X, test))
            if logits is None:
                logits = np.empty((len(y), fold_logits.shape[1]))
            logits[test] = fold_logits
        calibrator = _calibrator(self.method).fit(logits, y_index, sample_weight=sample_weight)
        estimator = _fit_estimator(clone(self.estimator), X, y, sample_weight)
        return [(estimator, calibrator)]

    def predict_proba(self, X) -> np.ndarray:
        """Calibrated probabilities, the mean over the (classifier, calibrator) pairs.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, K)
            Column ``j`` is the probability of ``classes_[j]``.
        """
        check_is_fitted(self, "calibrated_classifiers_")
        if is_torch_module(self.estimator):
            from reliacal._data import check_ordered

            # Rows come back in the loader's order: it must be one the caller knows.
            check_ordered(X)
            ((model, calibrator),) = self.calibrated_classifiers_
            return calibrator.predict_proba(self._torch_logits(model, X)[0])
        total = None
        for estimator, calibrator in self.calibrated_classifiers_:
            proba = calibrator.predict_proba(classifier_logits(estimator, X))
            total = proba if total is None else total + proba
        return total / len(self.calibrated_classifiers_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "calibrated_classifiers_"):
            pairs = self.calibrated_classifiers_
            if not (
                isinstance(pairs, list)
                and pairs
                and all(
                    isinstance(pair, tuple) and len(pair) == 2 and hasattr(pair[1], "predict_proba")
                    for pair in pairs
                )
            ):
                from reliacal.persistence import loaded_state_error

                raise loaded_state_error(
                    self, "calibrated_classifiers_", pairs, "a list of (classifier, calibrator)"
                )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        if is_torch_module(self.estimator):
            return tags
        # Sparse input is fine exactly when the wrapped classifier takes it.
        tags.input_tags.sparse = get_tags(self.estimator).input_tags.sparse
        return tags
