"""Calibrate a scikit-learn classifier (prefit or cross-fitted) or a trained torch model."""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    MetaEstimatorMixin,
    clone,
    is_regressor,
)
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import check_cv
from sklearn.pipeline import Pipeline
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

from reliacal._docstrings import shared_doc
from reliacal._init_arguments import store_init_arguments
from reliacal._validation import is_torch_module
from reliacal.calibrators import ClassLabelMixin, calibration_methods, make_calibrator
from reliacal.persistence import SaveMixin

__all__ = ["CalibratedClassifier", "classifier_logits", "classifier_scores"]

# scikit-learn's offset (calibration._convert_to_logits): the same logits, and an exact
# zero probability (random forests give many) becomes log(1e-12) ~ -27.6, a logit a
# calibrator can still move, where log(tiny) ~ -708 would dominate every fit.
_PROBABILITY_OFFSET = 1e-12

# The warning of a one-vs-rest calibrator fitted without some class (calibrators/_classic.py):
# the per-class maps below say it once, by the class's label.
_ABSENT_CLASS_MESSAGE = r".*no calibration sample of class"

# The toy problem that the examples of classifier_logits and classifier_scores fit.
_EXAMPLE_DOCS = {
    "toy_problem": """\
>>> import numpy as np
>>> X, y = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([0, 0, 1, 1])"""
}


def _final_estimator(estimator):
    """The classifier that computes ``estimator``'s scores (inside frozen wrappers and pipelines)."""
    while True:
        if isinstance(estimator, FrozenEstimator):
            estimator = estimator.estimator
        elif isinstance(estimator, Pipeline):
            estimator = estimator.steps[-1][1]
        else:
            return estimator


def _response_method(estimator) -> str:
    """``"decision_function"`` if the classifier has one, else ``"predict_proba"``; else refused."""
    for method in ("decision_function", "predict_proba"):
        if hasattr(estimator, method):
            return method
    name = type(_final_estimator(estimator)).__name__
    raise ValueError(
        f"{name} has neither decision_function nor predict_proba: its logits cannot be read"
    )


def _response(estimator, X) -> tuple[np.ndarray, str]:
    """``(values, method)``: ``decision_function(X)`` if the classifier has one, else ``predict_proba(X)``.

    Refuses scores that are not one column per class (one-vs-one decision
    functions) before they can be read as such.
    """
    name = type(_final_estimator(estimator)).__name__
    n_classes = len(estimator.classes_) if hasattr(estimator, "classes_") else None
    method = _response_method(estimator)
    if method == "decision_function":
        shape = getattr(_final_estimator(estimator), "decision_function_shape", None)
        if shape == "ovo" and n_classes is not None and n_classes > 2:
            raise ValueError(
                f"{name} has decision_function_shape='ovo': its decision_function has one "
                f"column per pair of classes ({n_classes * (n_classes - 1) // 2} for "
                f"{n_classes} classes), not one per class, and cannot be calibrated as class "
                "scores; use decision_function_shape='ovr' (the default)"
            )
        values = np.asarray(estimator.decision_function(X), dtype=np.float64)
        if values.ndim == 2 and values.shape[1] == 1:  # a binary score as a column
            values = values[:, 0]
    else:
        values = np.asarray(estimator.predict_proba(X), dtype=np.float64)
    expected = 1 if method == "decision_function" and n_classes == 2 else n_classes
    columns = 1 if values.ndim == 1 else values.shape[1]
    if values.ndim > 2 or (expected is not None and columns != expected):
        raise ValueError(
            f"{name}.{method} returned shape {values.shape} for {n_classes} classes; "
            f"calibration needs one column per class (classes_ = {estimator.classes_.tolist()})"
        )
    return values, method


@shared_doc(_EXAMPLE_DOCS)
def classifier_logits(estimator, X) -> np.ndarray:
    """Logits ``(n, K)`` of a fitted scikit-learn classifier.

    ``decision_function`` when the classifier has one (a 1-D binary score
    ``d`` becomes the columns ``[0, d]``), else ``log(p + 1e-12)`` of
    ``predict_proba``, as scikit-learn's ``CalibratedClassifierCV`` does.
    A decision function with other than one column per class (a one-vs-one
    SVM) is refused.

    Examples
    --------
    {toy_problem}
    >>> from sklearn.linear_model import LogisticRegression
    >>> model = LogisticRegression().fit(X, y)
    >>> logits = classifier_logits(model, X)
    >>> logits.shape, bool(np.allclose(logits[:, 1], model.decision_function(X)))
    ((4, 2), True)
    """
    values, method = _response(estimator, X)
    if method == "predict_proba":
        return np.log(values + _PROBABILITY_OFFSET)
    if values.ndim == 1:
        return np.column_stack([np.zeros_like(values), values])
    return values


@shared_doc(_EXAMPLE_DOCS)
def classifier_scores(estimator, X) -> np.ndarray:
    """The class scores that scikit-learn's ``CalibratedClassifierCV`` calibrates.

    ``decision_function`` when the classifier has one, else ``predict_proba``;
    for two classes the positive class's score alone, 1-D (the decision
    function ``d``, or the probability ``p_1`` itself, not its log).

    Examples
    --------
    {toy_problem}
    >>> from sklearn.naive_bayes import GaussianNB
    >>> model = GaussianNB().fit(X, y)
    >>> bool(np.allclose(classifier_scores(model, X), model.predict_proba(X)[:, 1]))
    True
    """
    values, method = _response(estimator, X)
    if method == "predict_proba" and values.shape[1] == 2:
        return values[:, 1]
    return values


def _logits_to_scores(logits: np.ndarray) -> np.ndarray:
    """A torch model's class scores: its logits, or ``z_1 - z_0`` for two classes."""
    return logits[:, 1] - logits[:, 0] if logits.shape[1] == 2 else logits


class _ClassScoreMaps(SaveMixin, BaseEstimator):
    """scikit-learn's one-vs-rest calibration of a classifier's class scores.

    For two classes one binary ``calibrator`` (a clone) on the positive
    class's 1-D score, and ``p_0 = 1 - p_1``; for ``K > 2`` one per column
    ``k``, fitted on ``(scores[:, k], y == k)``, each row then divided by its
    sum (uniform when all maps give 0), as ``CalibratedClassifierCV`` does.
    ``classes`` (the labels of the columns) name a class without
    calibration samples in the warning.
    """

    def __init__(self, calibrator=None, classes=None):
        self.calibrator = calibrator
        self.classes = classes

    def fit(self, scores, y_index, sample_weight=None):
        scores = np.asarray(scores, dtype=np.float64)
        n_classes = 2 if scores.ndim == 1 else scores.shape[1]
        weights = np.ones(len(y_index)) if sample_weight is None else sample_weight
        counts = np.bincount(y_index, weights=weights, minlength=n_classes)
        absent = np.flatnonzero(counts == 0)
        if absent.size:
            labels = absent if self.classes is None else np.asarray(self.classes)[absent]
            warnings.warn(
                f"CalibratedClassifier: no calibration sample of class(es) {labels.tolist()}: "
                "their one-vs-rest maps give Laplace's rule of succession, 1/(n + 2) for n "
                "calibration samples, instead of a probability 0 that no test sample of "
                "theirs could survive",
                UserWarning,
                stacklevel=4,
            )
        # One binary problem per map: the positive class's score for two classes, else each
        # class's column against the rest.
        problems = (
            [(scores, y_index)]
            if scores.ndim == 1
            else [(scores[:, k], (y_index == k).astype(np.int64)) for k in range(n_classes)]
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_ABSENT_CLASS_MESSAGE, category=UserWarning)
            self.maps_ = [
                clone(self.calibrator).fit(score, target, sample_weight=sample_weight)
                for score, target in problems
            ]
        return self

    def predict_proba(self, scores) -> np.ndarray:
        scores = np.asarray(scores, dtype=np.float64)
        if scores.ndim == 1:
            positive = self.maps_[0].predict_proba(scores)[:, 1]
            return np.column_stack([1.0 - positive, positive])
        proba = np.column_stack(
            [
                fitted.predict_proba(scores[:, column])[:, 1]
                for column, fitted in enumerate(self.maps_)
            ]
        )
        totals = proba.sum(axis=1, keepdims=True)
        empty = totals[:, 0] == 0
        proba[empty] = 1.0
        totals[empty] = proba.shape[1]
        return proba / totals


def _calibrator(method, classes):
    """A new calibrator for ``method``, and whether it reads class scores (not logits)."""
    if isinstance(method, str):
        calibrator = make_calibrator(method)
        if calibration_methods()[method].classifier_scores:
            return _ClassScoreMaps(calibrator, classes=classes), True
        return calibrator, False
    return clone(method), False


def _fit_estimator(estimator, X, y, sample_weight):
    if sample_weight is not None and has_fit_parameter(estimator, "sample_weight"):
        return estimator.fit(X, y, sample_weight=sample_weight)
    return estimator.fit(X, y)


def _subset(values, indices):
    return None if values is None else _safe_indexing(values, indices)


def _check_two_classes(classes: np.ndarray, where: str) -> None:
    if len(classes) < 2:
        raise ValueError(
            f"{where} one class only ({classes.tolist()}): calibration needs at least two classes"
        )


class CalibratedClassifier(
    SaveMixin, ClassLabelMixin, MetaEstimatorMixin, ClassifierMixin, BaseEstimator
):
    """A classifier calibrated by a reliacal calibrator on its logits.

    The classifier's logits are calibrated by ``method``: a scikit-learn
    classifier's ``decision_function``, or the log of its ``predict_proba``
    (see :func:`classifier_logits`); a torch model's logits (see below).
    Mirrors scikit-learn's ``CalibratedClassifierCV``:

    - ``estimator`` a ``sklearn.frozen.FrozenEstimator``: the classifier is
      used as fitted, and the calibrator is fitted on the data given to
      ``fit`` (which must not be the classifier's training data).
      ``cv="prefit"`` does the same with a ``FutureWarning``: it is
      deprecated, as scikit-learn deprecated it in 1.6 and removed it in
      1.8 in favour of ``FrozenEstimator``;
    - otherwise ``cv`` splits the data (an int: stratified k-fold, default 5):
      with ``ensemble=True`` a clone of the classifier is fitted on each
      training part and a calibrator on its held-out part, and the
      probabilities are the mean over the folds; with ``ensemble=False`` the
      out-of-fold logits of all folds fit one calibrator, and the classifier
      is refitted on all the data.

    Given the same splits the classifiers are fitted as by
    ``CalibratedClassifierCV``, and so are the calibrators of the methods
    that it has too (``"sigmoid"``, ``"isotonic"``, ``"temperature"``; see
    Notes for the exceptions).

    A trained torch model (``torch.nn.Module``) is used as fitted: pass it
    as ``FrozenEstimator(model)`` (or with ``cv="prefit"``); training is the
    user's (a module has no ``fit`` to clone and call). Its logits are its
    output for a plain module (no ``features=``/``head=`` needed), or what
    the backbone adapters read for the models they know (timm, Hugging Face
    ViT and BERT-style classifiers, a
    :class:`~reliacal.backbones.BackboneAdapter`). It runs frozen (eval
    mode, ``no_grad``), in batches of ``batch_size`` on ``device``; ``X`` is
    an array or tensor of its inputs, or a Dataset or DataLoader of ``(x,
    y)`` (then ``y`` is omitted); the labels are the logit column indices
    ``0..K-1``. Its logits play the part of a decision function (for two
    logit columns the class score is ``z_1 - z_0``).

    Parameters
    ----------
    estimator : classifier or torch.nn.Module
        A scikit-learn classifier with ``decision_function`` or
        ``predict_proba`` (fitted when frozen or ``cv="prefit"``), or a
        trained torch model (frozen, or with ``cv="prefit"``).
    method : str or calibrator, default="temperature"
        A reliacal calibrator (cloned for each fit), or the name of a method
        of :func:`reliacal.calibrators.calibration_methods`:
        ``"temperature"``, ``"vector"``, ``"matrix"``, ``"platt"`` (maximum
        likelihood), ``"sigmoid"`` (scikit-learn's: Platt's smoothed
        targets), ``"isotonic"``, ``"beta"``, ``"histogram"``, ``"ets"``,
        ``"adaptive"`` (seed 0) or ``"auto"``.
    cv : int, cross-validation generator, iterable or "prefit", default=None
        How the calibration data is split off (None: 5-fold stratified);
        ``"prefit"`` is deprecated (use ``FrozenEstimator``).
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

    Notes
    -----
    What the calibrator reads:

    - ``"sigmoid"`` and ``"isotonic"`` (the one-vs-rest methods that
      ``CalibratedClassifierCV`` has) read the classifier's class scores
      (:func:`classifier_scores`) as scikit-learn does: one binary map per
      column of the ``decision_function``, else of the ``predict_proba``,
      each row then divided by its sum; for two classes one map on the
      positive class's score (a probability itself for a classifier
      without ``decision_function``, such as a random forest, whose exact
      0 and 1 would have log-odds of about -27.6 and 27.6).
    - every other name, and a calibrator instance, reads the logits
      (:func:`classifier_logits`). ``"temperature"`` gives scikit-learn's
      fit; the others have no scikit-learn counterpart, and the
      one-vs-rest calibrators among them map each class's one-vs-rest
      log-odds ``log p_k - log(1 - p_k)`` of ``softmax(logits)``, which
      adding a constant to a row of logits does not change (scikit-learn's
      per-column maps of a multiclass decision function change with it).
      So ``method=IsotonicCalibration()`` and ``method="isotonic"`` differ
      for more than two classes.

    Where it differs from ``CalibratedClassifierCV`` by design:

    - a class without samples in a calibration part: scikit-learn's
      isotonic map gives it probability 0, and so an infinite log-loss to
      any test sample of that class; here its map gives Laplace's rule of
      succession ``1/(n + 2)``, with a warning;
    - ``"temperature"`` where scikit-learn's bounded search stops at its
      bound (logits that carry no information): reliacal's exact solver
      goes on, and warns (see :class:`~reliacal.calibrators.TemperatureScaling`).

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

    A trained torch model, used as fitted:

    >>> import torch
    >>> from sklearn.frozen import FrozenEstimator
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    >>> images = torch.randn(40, 3, 2, 2)
    >>> labels = net(images).argmax(dim=1)
    >>> labels[::4] = (labels[::4] + 1) % 3  # a quarter of its predictions are wrong
    >>> model = CalibratedClassifier(FrozenEstimator(net), device="cpu").fit(images, labels)
    >>> model.classes_, model.predict_proba(images[:2]).shape
    (array([0, 1, 2]), (2, 3))
    """

    _parameter_constraints: dict = {
        "estimator": [HasMethods(["fit"]), HasMethods(["forward"])],
        "method": [
            StrOptions(set(calibration_methods())),
            HasMethods(["fit", "predict_proba"]),
        ],
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

    def _torch_model(self):
        """The torch model to calibrate (inside a FrozenEstimator too), else None."""
        estimator = self.estimator
        if isinstance(estimator, FrozenEstimator):
            estimator = estimator.estimator
        return estimator if is_torch_module(estimator) else None

    def _prefit(self) -> bool:
        return self.cv == "prefit" or isinstance(self.estimator, FrozenEstimator)

    def _inputs(self, estimator, X, reads_scores: bool) -> np.ndarray:
        return classifier_scores(estimator, X) if reads_scores else classifier_logits(estimator, X)

    def _fit_calibrator(self, estimator, X, y_index, sample_weight):
        calibrator, reads_scores = _calibrator(self.method, self.classes_)
        calibrator.fit(
            self._inputs(estimator, X, reads_scores), y_index, sample_weight=sample_weight
        )
        return calibrator

    def _torch_logits(self, model, X, y=None):
        from reliacal.backbones import torch_logits

        return torch_logits(model, X, y, batch_size=self.batch_size, device=self.device)

    def _fit_torch(self, model, X, y, sample_weight):
        """The single (model, calibrator) pair of a trained torch model."""
        if not self._prefit():
            raise ValueError(
                f"{type(model).__name__} is a torch module: CalibratedClassifier cannot clone "
                "and train it on folds, so it calibrates it as trained; pass "
                f"FrozenEstimator(model) (got cv={self.cv!r}) and calibration data it was not "
                "trained on"
            )
        logits, y = self._torch_logits(model, X, y)
        if y is None:
            raise ValueError(
                "CalibratedClassifier requires y: pass the labels, or a Dataset/DataLoader "
                "yielding (x, y)"
            )
        if logits.shape[1] < 2:
            raise ValueError(
                f"{type(model).__name__} returns {logits.shape[1]} output per sample; "
                "CalibratedClassifier reads one logit per class (at least 2): for a binary "
                "model with a single logit z, wrap it to return the two columns [0, z]"
            )
        y = column_or_1d(np.asarray(y), warn=True)
        check_classification_targets(y)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, y, ensure_non_negative=True)
        # The logit columns are the classes: labels are their indices, as for the calibrators.
        self.classes_ = np.arange(logits.shape[1])
        y_index = self._encode_labels(y)
        calibrator, reads_scores = _calibrator(self.method, self.classes_)
        inputs = _logits_to_scores(logits) if reads_scores else logits
        calibrator.fit(inputs, y_index, sample_weight=sample_weight)
        return [(model, calibrator)]

    def _check_classifier(self) -> None:
        """Refuse what cannot give class scores, before anything is fitted."""
        estimator = self.estimator
        name = type(_final_estimator(estimator)).__name__
        if is_regressor(estimator):
            raise ValueError(
                f"{name} is a regressor: CalibratedClassifier calibrates classifiers, which "
                "give a score or probability per class (decision_function or predict_proba)"
            )
        _response_method(estimator)  # refuses one with neither decision_function nor predict_proba

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
        if self.cv == "prefit":
            warnings.warn(
                "CalibratedClassifier: cv='prefit' is deprecated and will be removed in a "
                "future release, as scikit-learn's CalibratedClassifierCV removed it in 1.8: "
                "pass FrozenEstimator(estimator) (from sklearn.frozen), which is used as "
                "fitted in the same way",
                FutureWarning,
                stacklevel=2,
            )
        model = self._torch_model()
        if model is not None:
            self.calibrated_classifiers_ = self._fit_torch(model, X, y, sample_weight)
            return self
        self._check_classifier()
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
            _check_two_classes(
                self.classes_, f"{type(_final_estimator(estimator)).__name__} was fitted on"
            )
            calibrator = self._fit_calibrator(estimator, X, self._encode_labels(y), sample_weight)
            pairs = [(estimator, calibrator)]
        else:
            # One sort gives the classes and every row's column.
            self.classes_, y_index = np.unique(y, return_inverse=True)
            _check_two_classes(self.classes_, "y holds")
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
        calibrator, reads_scores = _calibrator(self.method, self.classes_)
        inputs = None
        for train, test in splits:
            estimator = _fit_estimator(
                clone(self.estimator), _subset(X, train), y[train], _subset(sample_weight, train)
            )
            self._check_columns(estimator, "on a training part")
            fold_inputs = self._inputs(estimator, _subset(X, test), reads_scores)
            if inputs is None:
                inputs = np.empty((len(y),) + fold_inputs.shape[1:])
            inputs[test] = fold_inputs
        calibrator.fit(inputs, y_index, sample_weight=sample_weight)
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
        if self._torch_model() is not None:
            from reliacal._data import check_ordered

            # Rows come back in the loader's order: it must be one the caller knows.
            check_ordered(X)
            ((model, calibrator),) = self.calibrated_classifiers_
            logits = self._torch_logits(model, X)[0]
            reads_scores = isinstance(calibrator, _ClassScoreMaps)
            return calibrator.predict_proba(_logits_to_scores(logits) if reads_scores else logits)
        total = None
        for estimator, calibrator in self.calibrated_classifiers_:
            reads_scores = isinstance(calibrator, _ClassScoreMaps)
            proba = calibrator.predict_proba(self._inputs(estimator, X, reads_scores))
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
        if self._torch_model() is not None:
            return tags
        # Sparse input is fine exactly when the wrapped classifier takes it.
        tags.input_tags.sparse = get_tags(self.estimator).input_tags.sparse
        return tags
