"""CalibratedClassifier side by side with scikit-learn's CalibratedClassifierCV."""

from __future__ import annotations

import warnings

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
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # FrozenEstimator is not deprecated
        frozen = CalibratedClassifier(FrozenEstimator(model), method=method).fit(X[500:], y[500:])
    # cv="prefit" still works, deprecated as scikit-learn deprecated it (1.6) before its removal.
    with pytest.warns(FutureWarning, match=r"cv='prefit' is deprecated.*FrozenEstimator"):
        prefit = CalibratedClassifier(model, method=method, cv="prefit").fit(X[500:], y[500:])
    np.testing.assert_allclose(frozen.predict_proba(X_test), expected, atol=1e-6)
    np.testing.assert_allclose(prefit.predict_proba(X_test), expected, atol=1e-6)
    assert prefit.calibrated_classifiers_[0][0] is model
    assert frozen.calibrated_classifiers_[0][0].estimator is model


def test_a_random_forest_with_zero_probabilities_equals_calibrated_classifier_cv():
    # A forest gives exact zeros; scikit-learn reads them as log(0 + 1e-12), not log(tiny).
    X, y, X_test = _data(3, seed=3)
    forest = RandomForestClassifier(n_estimators=10, random_state=0).fit(X[:500], y[:500])
    assert (forest.predict_proba(X_test) == 0).any()
    reference = CalibratedClassifierCV(FrozenEstimator(forest), method="temperature")
    expected = reference.fit(X[500:], y[500:]).predict_proba(X_test)
    ours = CalibratedClassifier(FrozenEstimator(forest), method="temperature")
    ours.fit(X[500:], y[500:])
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
        CalibratedClassifier(FrozenEstimator(LogisticRegression())).fit(X, y)
    with pytest.raises(ValueError, match="'method' parameter"):
        CalibratedClassifier(LogisticRegression(), method="magic").fit(X, y)
    model = LogisticRegression().fit(X, y)
    with pytest.raises(ValueError, match=r"labels \[7\] are not among the classes"):
        CalibratedClassifier(FrozenEstimator(model)).fit(X, np.where(y == 1, 7, y))
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
    ours = CalibratedClassifier(FrozenEstimator(_torch_twin(model)), method=method, device="cpu")
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
    model = CalibratedClassifier(FrozenEstimator(net), batch_size=16, device="cpu")
    np.testing.assert_allclose(model.fit(images, labels).predict_proba(images), expected, atol=1e-6)
    data = TensorDataset(images, torch.from_numpy(labels))
    from_loader = CalibratedClassifier(FrozenEstimator(net), device="cpu").fit(
        DataLoader(data, batch_size=7)
    )
    np.testing.assert_allclose(
        from_loader.predict_proba(DataLoader(data, batch_size=5)), expected, atol=1e-6
    )
    from_dataset = CalibratedClassifier(FrozenEstimator(net), device="cpu").fit(data)
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
    model = CalibratedClassifier(FrozenEstimator(vit), method=BetaCalibration(), device="cpu")
    np.testing.assert_allclose(model.fit(images, labels).predict_proba(images), expected, atol=1e-6)


def test_torch_models_raise_clear_errors():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    net = torch.nn.Linear(4, 3)
    X, y = torch.randn(30, 4), np.arange(30) % 3
    with pytest.raises(ValueError, match="torch module: CalibratedClassifier cannot clone"):
        CalibratedClassifier(net, device="cpu").fit(X, y)
    frozen = FrozenEstimator(net)
    with pytest.raises(ValueError, match="requires y"):
        CalibratedClassifier(frozen, device="cpu").fit(X)
    with pytest.raises(ValueError, match=r"labels \[3\] are not among the classes") as error:
        CalibratedClassifier(frozen, device="cpu").fit(X, np.where(y == 0, 3, y))
    assert "labels=" not in str(error.value)  # a metrics parameter CalibratedClassifier lacks
    with pytest.raises(ValueError, match=r"returned shape \(30,\).*\(batch, n_classes\)"):
        CalibratedClassifier(FrozenEstimator(torch.nn.Flatten(0)), device="cpu").fit(X[:, :1], y)
    model = CalibratedClassifier(frozen, device="cpu").fit(X, y)
    shuffled = DataLoader(TensorDataset(X, torch.from_numpy(y)), shuffle=True)
    with pytest.raises(ValueError, match="the DataLoader shuffles"):
        model.predict_proba(shuffled)


def test_a_torch_model_given_with_cv_prefit_is_deprecated_but_calibrated_alike():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    X, y = torch.randn(60, 4), np.arange(60) % 3
    frozen = CalibratedClassifier(FrozenEstimator(net), device="cpu").fit(X, y)
    with pytest.warns(FutureWarning, match="FrozenEstimator"):
        prefit = CalibratedClassifier(net, cv="prefit", device="cpu").fit(X, y)
    np.testing.assert_array_equal(prefit.predict_proba(X), frozen.predict_proba(X))
    with pytest.raises(ValueError, match=r"pass FrozenEstimator\(model\)"):
        CalibratedClassifier(net, cv=3, device="cpu").fit(X, y)


# ------------------------------------------------------------------------------------
# Where the methods match CalibratedClassifierCV: "sigmoid", "isotonic" and "temperature",
# for classifiers with and without decision_function, two classes and more.


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer

    return load_breast_cancer(return_X_y=True)


def _digits():
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)


def _three_classes():
    X, y = make_classification(
        n_samples=900, n_features=8, n_informative=5, n_classes=3, random_state=4
    )
    return X, y


_CASES = {
    # predict_proba only, with many exact 0 and 1: scikit-learn's sigmoid reads p itself.
    "forest-breast-cancer": (lambda: RandomForestClassifier(30, random_state=0), _breast_cancer),
    "forest-digits": (lambda: RandomForestClassifier(30, random_state=0), _digits),
    "naive-bayes-breast-cancer": (GaussianNB, _breast_cancer),
    "naive-bayes-three": (GaussianNB, _three_classes),
    # A multiclass decision_function: scikit-learn maps each column, not the log-odds.
    "logistic-three": (lambda: LogisticRegression(max_iter=1000), _three_classes),
}


@pytest.mark.parametrize("ensemble", [True, False])
@pytest.mark.parametrize("method", ["sigmoid", "isotonic", "temperature"])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_the_methods_scikit_learn_has_give_its_fits(case, method, ensemble):
    from sklearn.metrics import log_loss
    from sklearn.model_selection import train_test_split

    make_estimator, load = _CASES[case]
    X, y = load()
    X, X_test, y, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    reference = CalibratedClassifierCV(make_estimator(), method=method, cv=cv, ensemble=ensemble)
    expected = reference.fit(X, y).predict_proba(X_test)
    ours = CalibratedClassifier(make_estimator(), method=method, cv=cv, ensemble=ensemble)
    proba = ours.fit(X, y).predict_proba(X_test)
    # scikit-learn's L-BFGS stops at gtol 1e-6; our fits are exact (Newton, PAV).
    np.testing.assert_allclose(proba, expected, atol=2e-5)
    labels = np.arange(len(ours.classes_))
    assert (
        log_loss(y_test, proba, labels=labels) <= log_loss(y_test, expected, labels=labels) + 1e-6
    )


def test_a_forest_calibrated_by_sigmoid_is_no_worse_than_by_platt_on_its_log_odds():
    from sklearn.metrics import log_loss

    X, y = _breast_cancer()
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    forest = RandomForestClassifier(30, random_state=0).fit(X[:200], y[:200])
    assert np.isin(forest.predict_proba(X[200:]), [0.0, 1.0]).mean() > 0.2  # exact 0 and 1
    nll = {}
    for method in ("sigmoid", "platt"):
        model = CalibratedClassifier(FrozenEstimator(forest), method=method)
        model.fit(X[200:400], y[200:400])
        nll[method] = log_loss(y[400:], model.predict_proba(X[400:]))
    # "platt" reads log(p + 1e-12): +-27.6 for exact 0 and 1, where a sigmoid of p is smooth.
    assert nll["sigmoid"] < nll["platt"]


def test_a_calibrator_instance_reads_the_logits_and_the_name_reads_the_scores():
    from reliacal.calibrators import IsotonicCalibration
    from reliacal.wrap import classifier_scores

    X, y, X_test = _data(3, seed=5)
    model = LogisticRegression(max_iter=1000).fit(X[:500], y[:500])
    by_instance = CalibratedClassifier(FrozenEstimator(model), method=IsotonicCalibration())
    by_instance.fit(X[500:], y[500:])
    expected = (
        IsotonicCalibration()
        .fit(classifier_logits(model, X[500:]), y[500:])
        .predict_proba(classifier_logits(model, X_test))
    )
    np.testing.assert_allclose(by_instance.predict_proba(X_test), expected)
    np.testing.assert_allclose(classifier_scores(model, X_test), model.decision_function(X_test))


@pytest.mark.parametrize("method", ["auto", "adaptive"])
def test_auto_and_adaptive_are_methods_as_in_the_command(method):
    from reliacal.calibrators import make_calibrator

    X, y, X_test = _data(3, seed=6)
    model = LogisticRegression(max_iter=1000).fit(X[:300], y[:300])
    ours = CalibratedClassifier(FrozenEstimator(model), method=method).fit(X[300:600], y[300:600])
    # Oracle: the table's calibrator (seeded) fitted on the classifier's logits.
    direct = make_calibrator(method).fit(classifier_logits(model, X[300:600]), y[300:600])
    expected = direct.predict_proba(classifier_logits(model, X_test))
    np.testing.assert_allclose(ours.predict_proba(X_test), expected, atol=1e-10)


@pytest.mark.parametrize("n_classes", [3, 4])
def test_a_one_vs_one_svm_is_refused_not_read_as_class_scores(n_classes):
    from sklearn.svm import SVC

    X, y, _ = _data(n_classes, seed=7)
    with pytest.raises(ValueError, match="decision_function_shape='ovo'.*one column per pair"):
        CalibratedClassifier(SVC(decision_function_shape="ovo"), cv=3).fit(X, y)
    frozen = FrozenEstimator(SVC(decision_function_shape="ovo").fit(X, y))
    with pytest.raises(ValueError, match="SVC has decision_function_shape=.ovo."):
        CalibratedClassifier(frozen, method="sigmoid").fit(X, y)
    # The default one-vs-rest shape has one column per class.
    model = CalibratedClassifier(SVC(), cv=3).fit(X, y)
    assert model.predict_proba(X[:5]).shape == (5, n_classes)


def test_scores_that_are_not_one_column_per_class_are_refused():
    class _Pairs(LogisticRegression):
        def decision_function(self, X):
            scores = super().decision_function(X)
            return np.hstack([scores, scores])

    X, y, _ = _data(3, seed=8)
    with pytest.raises(ValueError, match=r"decision_function returned shape \(\d+, 6\) for 3"):
        CalibratedClassifier(_Pairs(max_iter=1000), cv=3).fit(X, y)


def test_a_regressor_is_refused_clearly():
    from sklearn.linear_model import LinearRegression

    X, y, _ = _data(2, seed=9)
    with pytest.raises(ValueError, match="LinearRegression is a regressor"):
        CalibratedClassifier(LinearRegression(), cv=3).fit(X, y)
    fitted = LinearRegression().fit(X, y)
    with pytest.raises(ValueError, match="LinearRegression is a regressor"):
        CalibratedClassifier(FrozenEstimator(fitted)).fit(X, y)
    with (
        pytest.warns(FutureWarning),
        pytest.raises(ValueError, match="LinearRegression is a regressor"),
    ):
        CalibratedClassifier(fitted, cv="prefit").fit(X, y)


def test_one_class_is_refused_clearly():
    from sklearn.tree import DecisionTreeClassifier

    X, y, _ = _data(2, seed=10)
    tree = DecisionTreeClassifier().fit(X, np.ones_like(y))
    with pytest.raises(ValueError, match=r"DecisionTreeClassifier was fitted on one class only"):
        CalibratedClassifier(FrozenEstimator(tree)).fit(X, y)
    with pytest.raises(ValueError, match=r"y holds one class only \(\[1\]\)"):
        CalibratedClassifier(DecisionTreeClassifier(), cv=3).fit(X, np.ones_like(y))


def test_a_torch_model_with_one_output_is_refused_clearly():
    torch = pytest.importorskip("torch")
    net = torch.nn.Linear(4, 1)
    X, y = torch.randn(30, 4), np.arange(30) % 2
    with pytest.raises(ValueError, match=r"returns 1 output per sample.*\[0, z\]"):
        CalibratedClassifier(FrozenEstimator(net), device="cpu").fit(X, y)


@pytest.mark.parametrize("method", ["sigmoid", "isotonic", "platt"])
def test_a_class_missing_from_the_calibration_data_keeps_a_positive_probability(method):
    X, y, X_test = _data(3, seed=11)
    model = LogisticRegression(max_iter=1000).fit(X[:500], y[:500])
    calibration = y[500:] != 2
    with pytest.warns(UserWarning, match=r"no calibration sample of class\(es\) \[2\]"):
        calibrated = CalibratedClassifier(FrozenEstimator(model), method=method)
        calibrated.fit(X[500:][calibration], y[500:][calibration])
    proba = calibrated.predict_proba(X_test)
    # Isotonic maps may reach 0 for classes they saw; the unseen class's is never 0.
    assert proba[:, 2].min() > 0.0 and proba.max() < 1.0
    # Laplace's rule of succession for the class never seen among n calibration samples.
    n = int(calibration.sum())
    _, maps = calibrated.calibrated_classifiers_[0]
    if method != "platt":
        absent = maps.maps_[2].predict_proba(np.array([-5.0, 0.0, 5.0]))[:, 1]
        np.testing.assert_allclose(absent, 1.0 / (n + 2))
