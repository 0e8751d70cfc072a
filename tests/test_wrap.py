"""CalibratedClassifier side by side with scikit-learn's CalibratedClassifierCV."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import make_classification
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.naive_bayes import GaussianNB
from sklearn.utils.estimator_checks import parametrize_with_checks

from reliacal import CalibratedClassifier
from reliacal.calibrators import BetaCalibration
from reliacal.wrap import classifier_logits


@parametrize_with_checks(
    [
        CalibratedClassifier(LogisticRegression(), method="temperature", cv=3),
        CalibratedClassifier(LogisticRegression(), method="isotonic", cv=3, ensemble=False),
    ]
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def _data(n_classes, seed=0):
    X, y = make_classification(
        n_samples=1500, n_features=8, n_informative=5, n_classes=n_classes, random_state=seed
    )
    return X[:1000], y[:1000], X[1000:]


@pytest.mark.parametrize("ensemble", [True, False])
@pytest.mark.parametrize(
    ("n_classes", "method"),
    [(2, "sigmoid"), (2, "isotonic"), (2, "temperature"), (4, "temperature")],
)
def test_equals_calibrated_classifier_cv_on_the_same_folds(n_classes, method, ensemble):
    X, y, X_test = _data(n_classes)
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    estimator = LogisticRegression(max_iter=1000)
    reference = CalibratedClassifierCV(estimator, method=method, cv=cv, ensemble=ensemble)
    ours = CalibratedClassifier(estimator, method=method, cv=cv, ensemble=ensemble)
    expected = reference.fit(X, y).predict_proba(X_test)
    np.testing.assert_allclose(ours.fit(X, y).predict_proba(X_test), expected, atol=1e-6)
    assert len(ours.calibrated_classifiers_) == (3 if ensemble else 1)
    np.testing.assert_array_equal(ours.predict(X_test), reference.predict(X_test))


@pytest.mark.parametrize("method", ["sigmoid", "isotonic", "temperature"])
def test_prefit_and_frozen_equal_calibrated_classifier_cv(method):
    X, y, X_test = _data(2, seed=1)
    model = LogisticRegression().fit(X[:500], y[:500])
    reference = CalibratedClassifierCV(FrozenEstimator(model), method=method).fit(X[500:], y[500:])
    expected = reference.predict_proba(X_test)
    frozen = CalibratedClassifier(FrozenEstimator(model), method=method).fit(X[500:], y[500:])
    prefit = CalibratedClassifier(model, method=method, cv="prefit").fit(X[500:], y[500:])
    np.testing.assert_allclose(frozen.predict_proba(X_test), expected, atol=1e-6)
    np.testing.assert_allclose(prefit.predict_proba(X_test), expected, atol=1e-6)
    assert prefit.calibrated_classifiers_[0][0] is model


def test_a_calibrator_instance_is_cloned_and_string_labels_work():
    X, y, X_test = _data(3, seed=2)
    labels = np.array(["cat", "dog", "eel"])[y]
    method = BetaCalibration()
    model = CalibratedClassifier(GaussianNB(), method=method, cv=3).fit(X, labels)
    assert not hasattr(method, "classes_")
    np.testing.assert_array_equal(model.classes_, ["cat", "dog", "eel"])
    proba = model.predict_proba(X_test)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(model.predict(X_test)) <= {"cat", "dog", "eel"}
    # Each pair's calibrator read the log of GaussianNB's predict_proba (no decision_function).
    estimator, calibrator = model.calibrated_classifiers_[0]
    expected = np.log(np.maximum(estimator.predict_proba(X_test), np.finfo(float).tiny))
    np.testing.assert_allclose(classifier_logits(estimator, X_test), expected)


class _LabelsOnly(ClassifierMixin, BaseEstimator):
    def fit(self, X, y):
        self.classes_ = np.unique(y)
        return self

    def predict(self, X):
        return np.full(len(X), self.classes_[0])


def test_bad_inputs_raise_clear_errors():
    X, y, _ = _data(2)
    with pytest.raises(ValueError, match="neither decision_function nor predict_proba"):
        CalibratedClassifier(_LabelsOnly(), cv=2).fit(X, y)
    with pytest.raises(NotFittedError):
        CalibratedClassifier(LogisticRegression(), cv="prefit").fit(X, y)
    with pytest.raises(ValueError, match="'method' parameter"):
        CalibratedClassifier(LogisticRegression(), method="magic").fit(X, y)
    model = LogisticRegression().fit(X, y)
    with pytest.raises(ValueError, match=r"labels \[7\] are not among the classes"):
        CalibratedClassifier(model, cv="prefit").fit(X, np.where(y == 1, 7, y))
    # Unshuffled folds of sorted labels: each training part misses one of three classes.
    X, y, _ = _data(3)
    order = np.argsort(y, kind="stable")
    with pytest.raises(ValueError, match="every class needs samples in every training part"):
        CalibratedClassifier(GaussianNB(), cv=KFold(3)).fit(X[order], y[order])
