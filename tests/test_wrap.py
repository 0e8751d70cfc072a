"""CalibratedClassifier side by side with scikit-learn's CalibratedClassifierCV."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.naive_bayes import GaussianNB
from sklearn.utils.estimator_checks import parametrize_with_checks

from reliacal import CalibratedClassifier
from reliacal.calibrators import BetaCalibration, TemperatureScaling
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


def test_a_random_forest_with_zero_probabilities_equals_calibrated_classifier_cv():
    # A forest gives exact zeros; scikit-learn reads them as log(0 + 1e-12), not log(tiny).
    X, y, X_test = _data(3, seed=3)
    forest = RandomForestClassifier(n_estimators=10, random_state=0).fit(X[:500], y[:500])
    assert (forest.predict_proba(X_test) == 0).any()
    reference = CalibratedClassifierCV(FrozenEstimator(forest), method="temperature")
    expected = reference.fit(X[500:], y[500:]).predict_proba(X_test)
    ours = CalibratedClassifier(forest, method="temperature", cv="prefit").fit(X[500:], y[500:])
    np.testing.assert_allclose(ours.predict_proba(X_test), expected, atol=1e-6)


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
    expected = np.log(estimator.predict_proba(X_test) + 1e-12)  # scikit-learn's offset
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


# ------------------------------------------------------------------------------------
# Torch models: prefit only, their output (or what their adapter reads) is the logits.


def _torch_twin(model):
    """A torch Linear computing the fitted LogisticRegression's decision function (float32)."""
    torch = pytest.importorskip("torch")
    coef, intercept = model.coef_, model.intercept_
    if coef.shape[0] == 1:  # binary: logits [0, d], whose difference is the decision function
        coef = np.vstack([np.zeros_like(coef), coef])
        intercept = np.concatenate([[0.0], intercept])
    linear = torch.nn.Linear(coef.shape[1], coef.shape[0])
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(coef.astype(np.float32)))
        linear.bias.copy_(torch.from_numpy(intercept.astype(np.float32)))
    return linear


@pytest.mark.parametrize(
    ("n_classes", "method"),
    [(2, "sigmoid"), (2, "isotonic"), (2, "temperature"), (4, "temperature")],
)
def test_a_torch_module_equals_calibrated_classifier_cv_on_its_twin(n_classes, method):
    X, y, X_test = _data(n_classes, seed=3)
    model = LogisticRegression(max_iter=1000).fit(X[:500], y[:500])
    reference = CalibratedClassifierCV(FrozenEstimator(model), method=method)
    expected = reference.fit(X[500:], y[500:]).predict_proba(X_test)
    ours = CalibratedClassifier(_torch_twin(model), method=method, cv="prefit", device="cpu")
    ours.fit(X[500:], y[500:])
    # The module computes in float32: agreement to float32 rounding of the logits.
    np.testing.assert_allclose(ours.predict_proba(X_test), expected, atol=1e-5)
    np.testing.assert_array_equal(ours.classes_, np.arange(n_classes))
    assert not hasattr(ours, "n_features_in_")


def test_a_torch_module_reads_arrays_datasets_and_loaders_alike():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    images = torch.randn(90, 3, 2, 2)
    with torch.no_grad():
        logits = net(images).numpy()
    labels = logits.argmax(axis=1)
    labels[::3] = (labels[::3] + 1) % 3
    # Oracle: temperature scaling fitted on the module's own output.
    expected = TemperatureScaling().fit(logits, labels).predict_proba(logits)
    model = CalibratedClassifier(net, cv="prefit", batch_size=16, device="cpu")
    np.testing.assert_allclose(model.fit(images, labels).predict_proba(images), expected, atol=1e-6)
    data = TensorDataset(images, torch.from_numpy(labels))
    from_loader = CalibratedClassifier(net, cv="prefit", device="cpu").fit(
        DataLoader(data, batch_size=7)
    )
    np.testing.assert_allclose(
        from_loader.predict_proba(DataLoader(data, batch_size=5)), expected, atol=1e-6
    )
    from_dataset = CalibratedClassifier(net, cv="prefit", device="cpu").fit(data)
    np.testing.assert_allclose(from_dataset.predict_proba(images.numpy()), expected, atol=1e-6)
    assert net.training  # left in its mode


def test_a_backbone_the_adapters_know_is_calibrated_on_its_logits():
    torch = pytest.importorskip("torch")
    vision_transformer = pytest.importorskip("timm.models.vision_transformer")
    torch.manual_seed(0)
    vit = vision_transformer.VisionTransformer(
        img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2, num_classes=3
    ).eval()
    images = torch.randn(60, 3, 16, 16)
    with torch.no_grad():
        logits = vit(images).numpy()
    labels = np.arange(60) % 3
    expected = BetaCalibration().fit(logits, labels).predict_proba(logits)
    model = CalibratedClassifier(vit, method=BetaCalibration(), cv="prefit", device="cpu")
    np.testing.assert_allclose(model.fit(images, labels).predict_proba(images), expected, atol=1e-6)


def test_torch_models_raise_clear_errors():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    net = torch.nn.Linear(4, 3)
    X, y = torch.randn(30, 4), np.arange(30) % 3
    with pytest.raises(ValueError, match="torch module: CalibratedClassifier cannot clone"):
        CalibratedClassifier(net, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="requires y"):
        CalibratedClassifier(net, cv="prefit", device="cpu").fit(X)
    with pytest.raises(ValueError, match=r"labels \[3\] are not among the classes") as error:
        CalibratedClassifier(net, cv="prefit", device="cpu").fit(X, np.where(y == 0, 3, y))
    assert "labels=" not in str(error.value)  # a metrics parameter CalibratedClassifier lacks
    with pytest.raises(ValueError, match=r"returned shape \(30,\).*\(batch, n_classes\)"):
        CalibratedClassifier(torch.nn.Flatten(0), cv="prefit", device="cpu").fit(X[:, :1], y)
    model = CalibratedClassifier(net, cv="prefit", device="cpu").fit(X, y)
    shuffled = DataLoader(TensorDataset(X, torch.from_numpy(y)), shuffle=True)
    with pytest.raises(ValueError, match="the DataLoader shuffles"):
        model.predict_proba(shuffled)
