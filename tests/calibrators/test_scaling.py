"""VectorScaling and MatrixScaling (Dirichlet calibration with input="probs")."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import check_grad
from scipy.special import log_softmax
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedKFold

from reliacal.calibrators import (
    ConvergenceWarning,
    MatrixScaling,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    VectorScaling,
)
from reliacal.calibrators.scaling import tuned_scaling
from reliacal.metrics import negative_log_likelihood


def _torch_reference(lbfgs_minimum, logits, y, kind, reg_off_diagonal=0.0, reg_bias=0.0):
    """The same objective written with autograd and minimised with torch's LBFGS."""
    z = torch.from_numpy(logits).double()
    target = torch.from_numpy(y)
    n_classes = z.shape[1]
    if kind == "vector":
        scale = torch.ones(n_classes, dtype=torch.float64, requires_grad=True)
        parameters = [scale]
    else:
        scale = torch.eye(n_classes, dtype=torch.float64, requires_grad=True)
        parameters = [scale]
    bias = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    parameters.append(bias)
    off_diagonal_mask = 1.0 - torch.eye(n_classes, dtype=torch.float64)

    def objective():
        calibrated = z * scale + bias if kind == "vector" else z @ scale.T + bias
        loss = torch.nn.functional.cross_entropy(calibrated, target)
        if kind == "matrix":
            loss = (
                loss
                + reg_off_diagonal
                / (n_classes * (n_classes - 1))
                * ((scale * off_diagonal_mask) ** 2).sum()
            )
        return loss + reg_bias / n_classes * (bias**2).sum()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: a thread pool only adds overhead
    try:
        tolerances = dict(max_iter=1000, tolerance_grad=1e-10, tolerance_change=1e-15)
        loss = lbfgs_minimum(objective, parameters, **tolerances)
    finally:
        torch.set_num_threads(threads)
    with torch.no_grad():
        calibrated = z * scale + bias if kind == "vector" else z @ scale.T + bias
        return torch.softmax(calibrated, dim=1).numpy(), loss


@pytest.mark.parametrize(
    ("estimator", "kind"),
    [
        (VectorScaling(), "vector"),
        (VectorScaling(reg_bias=2.0), "vector"),
        (MatrixScaling(), "matrix"),
        (MatrixScaling(reg_off_diagonal=5.0, reg_bias=1.0), "matrix"),
    ],
)
def test_matches_an_autograd_reference(estimator, kind, mixed_logits, lbfgs_minimum):
    logits, y = mixed_logits(0)
    fitted = estimator.fit(logits, y)
    reference, reference_loss = _torch_reference(
        lbfgs_minimum,
        logits,
        y,
        kind,
        getattr(estimator, "reg_off_diagonal", 0.0),
        estimator.reg_bias,
    )
    parameters = np.concatenate([fitted.coef_.ravel(), fitted.intercept_])
    weights = np.full(len(y), 1.0 / len(y))
    loss = fitted._loss(parameters, logits, y, weights)[0]
    assert loss <= reference_loss + 1e-9
    np.testing.assert_allclose(fitted.predict_proba(logits), reference, atol=1e-4)


def test_unregularised_matrix_scaling_is_multinomial_logistic_regression(mixed_logits):
    logits, y = mixed_logits(1)
    fitted = MatrixScaling(tol=1e-9).fit(logits, y)
    reference = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(logits, y)
    np.testing.assert_allclose(
        fitted.predict_proba(logits), reference.predict_proba(logits), atol=1e-5
    )


@pytest.mark.parametrize(
    "estimator",
    [
        VectorScaling(reg_bias=0.7),
        MatrixScaling(3.0, 0.7),
        StructuredVectorScaling(reg_bias=0.7, reg_diagonal=1.3),
        StructuredMatrixScaling(reg_bias=0.7, reg_diagonal=1.3),
    ],
    ids=type,
)
def test_analytic_gradient_matches_finite_differences(estimator, mixed_logits):
    logits, y = mixed_logits(2, n=60, n_classes=3)
    # Fitted first: the structured scalings' penalty weights and features come from fit.
    fitted = clone(estimator).fit(logits, y)
    features = fitted._preprocess(logits) if hasattr(fitted, "_preprocess") else logits
    weights = np.random.default_rng(3).random(60)
    weights /= weights.sum()
    parameters = np.random.default_rng(4).normal(size=fitted.coef_.size + 3)

    def loss(theta):
        return fitted._loss(theta, features, y, weights)[0]

    def gradient(theta):
        return fitted._loss(theta, features, y, weights)[1]

    scale = max(1.0, np.abs(gradient(parameters)).max())
    assert check_grad(loss, gradient, parameters) < 1e-6 * scale


def test_odir_penalties_shrink_their_parameters(mixed_logits):
    logits, y = mixed_logits(5)
    free = MatrixScaling().fit(logits, y)
    shrunk = MatrixScaling(reg_off_diagonal=1e5, reg_bias=1e5).fit(logits, y)
    off_diagonal = ~np.eye(4, dtype=bool)
    assert np.abs(free.coef_[off_diagonal]).max() > 0.05
    assert np.abs(shrunk.coef_[off_diagonal]).max() < 1e-3
    assert np.abs(shrunk.intercept_).max() < 1e-3


@pytest.mark.parametrize(
    ("name", "estimator"),
    [
        ("wideresnet-16-4-cifar-10", VectorScaling()),
        ("lenet-5-cifar-100", VectorScaling()),
        ("wideresnet-16-4-cifar-10", MatrixScaling(1e-2, 1e-2)),
        ("lenet-5-cifar-10", MatrixScaling(1e-2, 1e-2)),
    ],
)
def test_reduces_validation_nll_on_cifar_records(name, estimator, load_record):
    probabilities, labels = load_record(name)
    order = np.random.default_rng(0).permutation(len(labels))
    calibration, evaluation = order[:5000], order[5000:]
    fitted = estimator.set_params(input="probs").fit(
        probabilities[calibration], labels[calibration]
    )
    before = negative_log_likelihood(labels[evaluation], probabilities[evaluation])
    after = negative_log_likelihood(
        labels[evaluation], fitted.predict_proba(probabilities[evaluation])
    )
    assert after < before


def test_dirichlet_calibration_is_matrix_scaling_of_log_probabilities(load_record):
    probabilities, labels = load_record("lenet-5-cifar-10")
    probabilities, labels = probabilities[:2000], labels[:2000]
    dirichlet = MatrixScaling(0.1, 0.1, input="probs").fit(probabilities, labels)
    on_logs = MatrixScaling(0.1, 0.1).fit(np.log(probabilities), labels)
    np.testing.assert_allclose(dirichlet.coef_, on_logs.coef_, atol=1e-10)
    np.testing.assert_allclose(
        dirichlet.predict_proba(probabilities[:50]),
        on_logs.predict_proba(np.log(probabilities[:50])),
        atol=1e-12,
    )


@pytest.mark.parametrize("estimator", [VectorScaling(), MatrixScaling(), MatrixScaling(1.0, 1.0)])
def test_calibration_split_missing_classes(estimator, mixed_logits):
    logits, y = mixed_logits(6, n=1200, n_classes=6)
    present = y < 4  # classes 4 and 5 never occur in the calibration split
    fitted = estimator.fit(logits[present], y[present])
    np.testing.assert_array_equal(fitted.classes_, np.arange(6))
    probabilities = fitted.predict_proba(logits)
    assert probabilities.shape == (1200, 6)
    assert np.all(np.isfinite(probabilities))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)
    # Better than the raw logits on the classes it saw.
    raw = negative_log_likelihood(y[present], np.exp(log_softmax(logits[present], axis=1)))
    assert negative_log_likelihood(y[present], probabilities[present]) < raw


def test_string_classes_and_dataframe_input(mixed_logits):
    pandas = pytest.importorskip("pandas")
    logits, y = mixed_logits(7, n_classes=3)
    names = np.array(["cat", "dog", "eel"])
    frame = pandas.DataFrame(logits, columns=list(names))
    fitted = VectorScaling(classes=names).fit(frame, names[y])
    assert fitted.predict(frame).dtype.kind == "U"
    np.testing.assert_array_equal(fitted.feature_names_in_, names)
    assert fitted.score(frame, names[y]) > 0.5


def test_non_convergence_is_reported(mixed_logits):
    logits, y = mixed_logits(8)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        MatrixScaling(max_iter=2).fit(logits, y)


def test_many_class_fit_runs_its_products_on_one_blas_thread(monkeypatch, mixed_logits):
    # A (4000, 100) x (100, 100) product per L-BFGS step: on a thread pool each one
    # took 20 times longer on a busy 2-core machine, which made a 100-class fit take minutes.
    threadpoolctl = pytest.importorskip("threadpoolctl")
    seen = []

    class Stop(Exception):
        pass

    def record_and_stop(self, parameters, logits, y_index, weights):
        infos = threadpoolctl.threadpool_info()
        seen.extend(info["num_threads"] for info in infos if info["user_api"] == "blas")
        raise Stop

    monkeypatch.setattr(MatrixScaling, "_loss", record_and_stop)
    logits, y = mixed_logits(9, n=4000, n_classes=100)
    with pytest.raises(Stop):
        MatrixScaling(reg_off_diagonal=1.0, reg_bias=1.0).fit(logits, y)
    assert seen and max(seen) == 1


def test_unregularised_matrix_scaling_warns_when_over_parameterised(mixed_logits):
    logits, y = mixed_logits(10, n=500, n_classes=10)  # 110 parameters, 500 samples
    with pytest.warns(UserWarning, match=r"110 parameters .* 500 samples.*reg_off_diagonal"):
        MatrixScaling(max_iter=5).fit(logits, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        MatrixScaling(reg_off_diagonal=1.0, max_iter=5).fit(logits, y)
        MatrixScaling(max_iter=5).fit(*mixed_logits(10, n=2000, n_classes=10))


@pytest.mark.parametrize(
    ("estimator", "grid"),
    [
        (VectorScaling(), [{"reg_bias": 0.1}, {"reg_bias": 1.0}, {"reg_bias": 10.0}]),
        (
            MatrixScaling(),
            [{"reg_off_diagonal": v, "reg_bias": v} for v in (0.1, 1.0, 10.0)],
        ),
    ],
)
def test_tuned_scaling_picks_the_lowest_cross_validated_nll(estimator, grid, mixed_logits):
    logits, y = mixed_logits(11, n=300, n_classes=4)
    search = tuned_scaling(estimator).fit(logits, y)
    # Independent oracle: the mean held-out NLL of each grid point on the same folds.
    folds = list(StratifiedKFold(n_splits=3).split(logits, y))
    scores = []
    for params in grid:
        losses = []
        for train, test in folds:
            fitted = clone(estimator).set_params(**params).fit(logits[train], y[train])
            losses.append(log_loss(y[test], fitted.predict_proba(logits[test]), labels=range(4)))
        scores.append(np.mean(losses))
    assert search.best_params_ == grid[int(np.argmin(scores))]
    best = clone(estimator).set_params(**search.best_params_).fit(logits, y)
    np.testing.assert_allclose(search.predict_proba(logits), best.predict_proba(logits))
    # quick: the middle grid point, unfitted, no search.
    quick = tuned_scaling(estimator, quick=True)
    assert type(quick) is type(estimator)
    assert quick.get_params() == clone(estimator).set_params(**grid[1]).get_params()
    with pytest.raises(ValueError, match="no default grid"):
        tuned_scaling(LogisticRegression())


@pytest.mark.parametrize("estimator", [VectorScaling(), MatrixScaling()], ids=["vector", "matrix"])
def test_tuned_scaling_on_too_few_rows_says_what_the_search_needs(estimator, mixed_logits):
    logits, y = mixed_logits(12, n=4, n_classes=3)
    y = np.array([0, 1, 2, 0])
    with pytest.raises(ValueError, match=r"3-fold cross-validated NLL needs at least 3 samples"):
        tuned_scaling(estimator).fit(logits, y)
    # The folds are GridSearchCV's own for an integer: unshuffled stratified k-fold.
    logits, y = mixed_logits(13, n=40, n_classes=3)
    folds = tuned_scaling(estimator, cv=4).cv.split(logits, y)
    for (train, test), (expected_train, expected_test) in zip(
        folds, StratifiedKFold(4).split(logits, y), strict=True
    ):
        np.testing.assert_array_equal(train, expected_train)
        np.testing.assert_array_equal(test, expected_test)


# Issue 16.7: ~10^4 classes crashed SciPy's L-BFGS-B; the guard fires before any fit work.
def _no_fit_work(monkeypatch):
    from reliacal.calibrators import scaling

    def refuse(*args, **kwargs):
        raise AssertionError("the fit started")

    monkeypatch.setattr(scaling, "minimize", refuse)
    monkeypatch.setattr(MatrixScaling, "_initial_coef", refuse)


def test_matrix_scaling_refuses_more_parameters_than_its_budget(monkeypatch, mixed_logits):
    _no_fit_work(monkeypatch)
    logits, y = mixed_logits(12, n=30, n_classes=10)  # 10^2 + 10 = 110 parameters
    with pytest.raises(ValueError, match=r"K = 10 classes has 110 parameters.*VectorScaling"):
        MatrixScaling(max_parameters=109).fit(logits, y)


def test_matrix_scaling_default_budget_stops_thousands_of_classes(monkeypatch):
    _no_fit_work(monkeypatch)
    n_classes = 3162  # 3162^2 + 3162 = 10,001,406 > 10^7
    logits = np.random.default_rng(13).normal(size=(3, n_classes))
    with pytest.raises(ValueError, match=r"10,001,406 parameters .* about 2\.48 GB"):
        MatrixScaling(reg_off_diagonal=1.0).fit(logits, [0, 1, 2])


def test_matrix_scaling_budget_cannot_exceed_what_lbfgsb_addresses(mixed_logits):
    logits, y = mixed_logits(14, n=30, n_classes=3)
    with pytest.raises(ValueError, match="max_parameters"):
        MatrixScaling(max_parameters=10**8).fit(logits, y)
    # Exactly at the limit is accepted (the limit itself is what L-BFGS-B can index).
    MatrixScaling(max_parameters=85_899_298, reg_off_diagonal=1.0).fit(logits, y)
