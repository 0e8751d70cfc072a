"""StructuredVectorScaling and StructuredMatrixScaling against an autograd reference,
hand-computed penalty strengths, their limits and probmetrics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, softmax
from sklearn.base import clone
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV

from reliacal.calibrators import (
    MatrixScaling,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    TemperatureScaling,
    VectorScaling,
)
from reliacal.metrics import nll_scorer


def _reference(lbfgs_minimum, logits, y, kind, strengths=(1.0, 1.0, 1.0), rho=1.0, tau=1.0):
    """The paper's objective written independently: T by a scalar search, the map by torch."""
    torch = pytest.importorskip("torch")
    n, n_classes = logits.shape

    def nll_of_temperature(log_t):
        return -np.mean(log_softmax(logits / np.exp(log_t), axis=1)[np.arange(n), y])

    temperature = np.exp(
        minimize_scalar(
            nll_of_temperature, bounds=(-5, 5), method="bounded", options={"xatol": 1e-12}
        ).x
    )
    eps = 1.0 / (n + 1)
    features = np.log((1 - eps) * softmax(logits / temperature, axis=1) + eps / n_classes)
    z = torch.from_numpy(features)
    target = torch.from_numpy(y)
    lam_b, lam_d, lam_o = strengths
    weight_b = lam_b * n_classes**rho / n**tau
    weight_d = lam_d * n_classes**rho / n**tau
    weight_o = lam_o * (n_classes * (n_classes - 1)) ** rho / n**tau
    if kind == "vector":
        delta = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    else:
        delta = torch.zeros((n_classes, n_classes), dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)

    def objective():
        if kind == "vector":
            calibrated = z * (1.0 + delta) + bias
            penalty = weight_d * (delta**2).sum()
        else:
            calibrated = z @ (torch.eye(n_classes, dtype=torch.float64) + delta).T + bias
            diagonal = torch.diagonal(delta)
            penalty = weight_d * (diagonal**2).sum() + weight_o * (
                (delta**2).sum() - (diagonal**2).sum()
            )
        return (
            torch.nn.functional.cross_entropy(calibrated, target)
            + penalty
            + weight_b * (bias**2).sum()
        )

    tolerances = dict(max_iter=2000, tolerance_grad=1e-11, tolerance_change=1e-16, history_size=50)
    return lbfgs_minimum(objective, [delta, bias], **tolerances), temperature


@pytest.mark.parametrize(
    ("estimator", "kind"),
    [
        (StructuredVectorScaling(), "vector"),
        (StructuredVectorScaling(reg_bias=5.0, reg_diagonal=0.2, sample_exponent=0.5), "vector"),
        (StructuredMatrixScaling(), "matrix"),
        (StructuredMatrixScaling(0.5, 2.0, 3.0, class_exponent=0.5), "matrix"),
    ],
)
def test_reaches_the_optimum_of_an_independent_autograd_objective(
    estimator, kind, mixed_logits, lbfgs_minimum
):
    logits, y = mixed_logits(0)
    fitted = clone(estimator).fit(logits, y)
    strengths = (fitted.reg_bias, fitted.reg_diagonal, getattr(fitted, "reg_off_diagonal", 0.0))
    reference_loss, temperature = _reference(
        lbfgs_minimum, logits, y, kind, strengths, fitted.class_exponent, fitted.sample_exponent
    )
    assert fitted.temperature_ == pytest.approx(temperature, rel=1e-6)
    features = fitted._preprocess(logits)
    weights = np.full(len(y), 1.0 / len(y))

    def loss(model):
        parameters = np.concatenate([model.coef_.ravel(), model.intercept_])
        return model._loss(parameters, features, y, weights)[0]

    # The default tolerance stops close to the optimum; a tight one reaches it.
    assert loss(fitted) <= reference_loss + 1e-7
    tight = clone(estimator).set_params(tol=1e-9).fit(logits, y)
    assert loss(tight) <= reference_loss + 1e-10


def test_penalty_strengths_are_lambda_times_counts_over_samples(mixed_logits):
    logits, y = mixed_logits(1, n=600, n_classes=3)
    fitted = StructuredMatrixScaling(reg_bias=2.0, reg_diagonal=3.0, reg_off_diagonal=4.0)
    fitted.fit(logits, y)
    # By hand: K = 3, n = 600, K (K - 1) = 6.
    np.testing.assert_allclose(fitted.penalty_weights_, [2 * 3 / 600, 3 * 3 / 600, 4 * 6 / 600])
    assert fitted.mixture_weight_ == 1 / 601
    fitted = StructuredVectorScaling(class_exponent=2.0, sample_exponent=0.5).fit(logits, y)
    np.testing.assert_allclose(fitted.penalty_weights_, [9 / 600**0.5, 9 / 600**0.5, 0.0])


@pytest.mark.parametrize("estimator", [StructuredVectorScaling(), StructuredMatrixScaling()])
def test_infinite_penalties_leave_temperature_scaling_with_the_mixture(estimator, mixed_logits):
    logits, y = mixed_logits(5)
    strong = {"reg_bias": 1e9, "reg_diagonal": 1e9}
    if isinstance(estimator, StructuredMatrixScaling):
        strong["reg_off_diagonal"] = 1e9
    fitted = clone(estimator).set_params(**strong).fit(logits, y)
    temperature = TemperatureScaling().fit(logits, y).temperature_
    eps = 1 / (len(y) + 1)
    expected = (1 - eps) * softmax(logits / temperature, axis=1) + eps / logits.shape[1]
    np.testing.assert_allclose(fitted.predict_proba(logits), expected, atol=1e-6)


@pytest.mark.parametrize(
    ("estimator", "plain"),
    [
        (StructuredVectorScaling(0.0, 0.0), VectorScaling()),
        (StructuredMatrixScaling(0.0, 0.0, 0.0), MatrixScaling()),
    ],
)
def test_without_penalties_it_is_plain_scaling_of_the_preprocessed_logits(
    estimator, plain, mixed_logits
):
    logits, y = mixed_logits(6, n=2000)
    fitted = clone(estimator).set_params(tol=1e-9).fit(logits, y)
    preprocessed = fitted._preprocess(logits)
    reference = clone(plain).set_params(tol=1e-9).fit(preprocessed, y)
    np.testing.assert_allclose(
        fitted.predict_proba(logits), reference.predict_proba(preprocessed), atol=1e-5
    )


@pytest.mark.parametrize("estimator", [StructuredVectorScaling(), StructuredMatrixScaling()])
def test_integer_sample_weights_equal_repeated_rows(estimator, mixed_logits):
    logits, y = mixed_logits(7, n=300)
    counts = np.random.default_rng(8).integers(0, 4, size=300)
    weighted = clone(estimator).set_params(tol=1e-10).fit(logits, y, sample_weight=counts)
    repeated = (
        clone(estimator)
        .set_params(tol=1e-10)
        .fit(np.repeat(logits, counts, axis=0), np.repeat(y, counts))
    )
    np.testing.assert_allclose(weighted.penalty_weights_, repeated.penalty_weights_)
    np.testing.assert_allclose(
        weighted.predict_proba(logits), repeated.predict_proba(logits), atol=1e-6
    )


@pytest.mark.parametrize("name", ["wideresnet-16-4-cifar-100", "lenet-5-cifar-10"])
def test_sms_beats_temperature_scaling_on_a_cifar_record(name, load_record):
    probabilities, labels = load_record(name)
    order = np.random.default_rng(0).permutation(len(labels))
    calibration, evaluation = order[:5000], order[5000:]
    n_classes = probabilities.shape[1]
    scores = {}
    for key, model in (("ts", TemperatureScaling()), ("sms", StructuredMatrixScaling())):
        model.set_params(input="probs").fit(probabilities[calibration], labels[calibration])
        scores[key] = log_loss(
            labels[evaluation],
            model.predict_proba(probabilities[evaluation]),
            labels=range(n_classes),
        )
    assert scores["sms"] < scores["ts"]


@pytest.mark.parametrize(
    ("ours", "key"), [(StructuredVectorScaling(), "svs"), (StructuredMatrixScaling(), "sms")]
)
def test_equals_probmetrics_on_a_cifar_record(ours, key, load_record):
    calibrators = pytest.importorskip("probmetrics.calibrators")
    torch = pytest.importorskip("torch")
    probabilities, labels = load_record("lenet-5-cifar-10")
    probabilities = probabilities.astype(np.float64)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    order = np.random.default_rng(1).permutation(len(labels))
    calibration, evaluation = order[:3000], order[3000:6000]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        peer = calibrators.get_calibrator(key, **{f"{key}_print_init_info": False})
        peer.fit(probabilities[calibration], labels[calibration])
        expected = peer.predict_proba(probabilities[evaluation])
    finally:
        torch.set_num_threads(threads)
    fitted = (
        clone(ours).set_params(input="probs").fit(probabilities[calibration], labels[calibration])
    )
    # probmetrics works in float32 (its log-probabilities and its BFGS): the same map to
    # about 1e-4, and the same held-out log loss to 1e-4 relative.
    np.testing.assert_allclose(fitted.predict_proba(probabilities[evaluation]), expected, atol=2e-3)
    ours_loss = log_loss(labels[evaluation], fitted.predict_proba(probabilities[evaluation]))
    peer_loss = log_loss(labels[evaluation], expected)
    assert ours_loss == pytest.approx(peer_loss, rel=1e-4)


def test_refuses_more_parameters_than_its_budget(mixed_logits):
    logits, y = mixed_logits(9, n=30, n_classes=10)
    with pytest.raises(ValueError, match=r"K = 10 classes has 110 parameters"):
        StructuredMatrixScaling(max_parameters=109).fit(logits, y)


def test_the_budget_cannot_exceed_what_lbfgsb_addresses(mixed_logits):
    # The bound that the docstring states, as MatrixScaling's.
    logits, y = mixed_logits(14, n=30, n_classes=3)
    with pytest.raises(ValueError, match="'max_parameters' parameter"):
        StructuredMatrixScaling(max_parameters=85_899_299).fit(logits, y)
    StructuredMatrixScaling(max_parameters=85_899_298).fit(logits, y)


def test_invalid_parameters_are_named(mixed_logits):
    logits, y = mixed_logits(10, n=50)
    with pytest.raises(ValueError, match="'reg_off_diagonal' parameter"):
        StructuredMatrixScaling(reg_off_diagonal=-1.0).fit(logits, y)
    with pytest.raises(ValueError, match="'reg_diagonal' parameter"):
        StructuredVectorScaling(reg_diagonal="big").fit(logits, y)


def test_grid_search_tunes_the_off_diagonal_strength(mixed_logits):
    logits, y = mixed_logits(11, n=450, n_classes=3)
    grid = {"reg_off_diagonal": [0.1, 1.0, 10.0]}
    search = GridSearchCV(StructuredMatrixScaling(), grid, scoring=nll_scorer, cv=3)
    search.fit(logits, y)
    assert search.best_params_["reg_off_diagonal"] in grid["reg_off_diagonal"]
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


def test_the_float32_first_pass_leaves_the_float64_optimum(load_record, monkeypatch):
    from reliacal.calibrators import structured

    probabilities, labels = load_record("lenet-5-cifar-100")
    rows = np.random.default_rng(2).permutation(len(labels))[:3000]
    calls = []
    original = StructuredMatrixScaling._loss

    def record(self, parameters, logits, *args):
        calls.append(logits.dtype)
        return original(self, parameters, logits, *args)

    monkeypatch.setattr(StructuredMatrixScaling, "_loss", record)
    model = StructuredMatrixScaling(tol=1e-7, input="probs")
    rough = clone(model).fit(probabilities[rows], labels[rows])
    assert np.float32 in calls and calls[-1] == np.float64
    monkeypatch.setattr(structured, "_ROUGH_PASS_WORK", 10**18)
    calls.clear()
    plain = clone(model).fit(probabilities[rows], labels[rows])
    assert set(calls) == {np.dtype(np.float64)}
    np.testing.assert_allclose(
        rough.predict_proba(probabilities[:500]),
        plain.predict_proba(probabilities[:500]),
        atol=1e-5,
    )
