"""AutoCalibrator: the cross-validated choice against an independent recomputation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
from sklearn.utils.estimator_checks import parametrize_with_checks

from reliacal.calibrators import (
    AutoCalibrator,
    TemperatureScaling,
    VectorScaling,
)
from reliacal.calibrators.auto import _default_candidates


def _calibrated_data(n, k, seed, scale=1.0):
    """Logits whose softmax is the true label distribution; ``scale`` > 1 over-confides."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(n, k))
    probabilities = softmax(logits, axis=1)
    labels = np.array([rng.choice(k, p=row) for row in probabilities])
    return scale * logits, labels


@parametrize_with_checks(
    [AutoCalibrator(candidates={"temperature": TemperatureScaling()}, cv=3)],
    expected_failed_checks=lambda e: e._expected_failed_checks(),
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def _folds_keeping_copies_together(splitter, X, y):
    """The splitter's folds, each copy of a row (equal values) moved to its first copy's fold."""
    fold_of_row = np.empty(len(y), dtype=np.int64)
    for fold, (_, test) in enumerate(splitter.split(X, y)):
        fold_of_row[test] = fold
    _, first, copy_of = np.unique(X, axis=0, return_index=True, return_inverse=True)
    fold_of_row = fold_of_row[first[copy_of.ravel()]]
    return [
        (np.flatnonzero(fold_of_row != fold), np.flatnonzero(fold_of_row == fold))
        for fold in range(splitter.get_n_splits())
    ]


def test_out_of_fold_nll_matches_stratified_kfold_recomputation(cifar_record):
    _, probabilities, labels = cifar_record
    auto = AutoCalibrator(
        candidates={"temperature": TemperatureScaling()}, input="probs", random_state=3
    ).fit(probabilities, labels)

    folds = _folds_keeping_copies_together(
        StratifiedKFold(5, shuffle=True, random_state=3), probabilities, labels
    )
    identity_scores, ts_scores = [], []
    k = probabilities.shape[1]
    for train, test in folds:
        # input="probs" reads log(max(p, tiny)); log_loss would clip zeros at eps instead.
        floored = np.maximum(probabilities[test], np.finfo(probabilities.dtype).tiny)
        identity_scores.append(np.mean(np.log(floored[np.arange(len(test)), labels[test]])))
        ts = TemperatureScaling(input="probs").fit(probabilities[train], labels[train])
        predicted = ts.predict_proba(probabilities[test])
        ts_scores.append(-log_loss(labels[test], predicted, labels=range(k)))

    results = auto.cv_results_.set_index("candidate")
    splits = [f"split{i}_score" for i in range(5)]
    np.testing.assert_allclose(results.loc["identity", splits], identity_scores, rtol=1e-6)
    np.testing.assert_allclose(results.loc["temperature", splits], ts_scores, rtol=1e-6)
    expected = "temperature" if np.mean(ts_scores) > np.mean(identity_scores) else "identity"
    assert auto.best_name_ == expected
    chosen = results.loc[auto.best_name_]
    assert chosen["mean_score"] == pytest.approx(max(np.mean(ts_scores), np.mean(identity_scores)))
    assert chosen["std_score"] == pytest.approx(
        np.std(ts_scores if expected != "identity" else identity_scores)
    )


def test_calibrated_logits_keep_the_identity():
    # Seeded: on calibrated data a flexible candidate can still win a draw by split noise.
    logits, labels = _calibrated_data(3000, 3, seed=1)
    auto = AutoCalibrator().fit(logits, labels)
    assert auto.best_name_ == "identity"
    assert "no candidate beat" in auto.reason_
    # The default candidates for 3 classes and fewer than 5000 rows, in the table's order.
    assert list(auto.cv_results_["candidate"]) == [
        "identity",
        "temperature",
        "vector",
        "matrix",
        "svs",
        "sms",
        "isotonic",
        "ets",
    ]
    np.testing.assert_allclose(auto.predict_proba(logits), softmax(logits, axis=1), rtol=1e-10)


@pytest.mark.parametrize("seed", range(4))
def test_the_choice_never_has_a_worse_cross_validated_score(seed):
    scale = [0.5, 1.0, 1.5, 3.0][seed]
    logits, labels = _calibrated_data(600, 4, seed=seed, scale=scale)
    auto = AutoCalibrator(scoring="neg_brier_score").fit(logits, labels)
    results = auto.cv_results_.set_index("candidate")
    assert results.loc[auto.best_name_, "mean_score"] >= results.loc["identity", "mean_score"]
    assert results.loc[auto.best_name_, "mean_score"] == results["mean_score"].max()


def test_over_confident_logits_choose_a_temperature_like_map_and_improve_test_nll():
    logits, labels = _calibrated_data(4000, 5, seed=1, scale=3.0)
    train, test = slice(0, 2000), slice(2000, None)
    auto = AutoCalibrator().fit(logits[train], labels[train])
    assert auto.best_name_ in {"temperature", "vector", "ets", "matrix"}
    assert auto.best_name_ in auto.reason_
    before = log_loss(labels[test], softmax(logits[test], axis=1), labels=range(5))
    after = log_loss(labels[test], auto.predict_proba(logits[test]), labels=range(5))
    ts = TemperatureScaling().fit(logits[train], labels[train])
    ts_nll = log_loss(labels[test], ts.predict_proba(logits[test]), labels=range(5))
    assert after < 0.9 * before
    assert after <= 1.01 * ts_nll
    # Delegation: the winner refitted on all rows gives the predictions.
    np.testing.assert_allclose(
        auto.decision_function(logits[test]),
        auto.best_estimator_.decision_function(logits[test]),
    )


def test_brier_scores_match_a_direct_recomputation():
    logits, labels = _calibrated_data(500, 3, seed=2, scale=2.0)
    auto = AutoCalibrator(
        candidates={"vector": VectorScaling()}, cv=KFold(4), scoring="neg_brier_score"
    ).fit(logits, labels)
    expected = []
    for train, test in KFold(4).split(logits):
        predicted = VectorScaling().fit(logits[train], labels[train]).predict_proba(logits[test])
        one_hot = np.eye(3)[labels[test]]
        expected.append(-np.mean(np.sum((predicted - one_hot) ** 2, axis=1)))
    row = auto.cv_results_.set_index("candidate").loc["vector"]
    np.testing.assert_allclose(row[[f"split{i}_score" for i in range(4)]], expected, rtol=1e-8)


def test_any_classifier_with_predict_proba_is_a_candidate():
    logits, labels = _calibrated_data(800, 3, seed=3, scale=2.5)
    auto = AutoCalibrator(candidates={"logistic": LogisticRegression()}).fit(logits, labels)
    assert set(auto.cv_results_["candidate"]) == {"identity", "logistic"}
    proba = auto.predict_proba(logits[:5])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    if auto.best_name_ == "logistic":
        np.testing.assert_allclose(proba, auto.best_estimator_.predict_proba(logits[:5]))


def test_a_failing_candidate_is_left_out_with_a_warning():
    logits, labels = _calibrated_data(300, 3, seed=4, scale=2.0)
    broken = _Broken()
    with pytest.warns(UserWarning, match="candidate 'broken' failed on fold 0"):
        auto = AutoCalibrator(
            candidates={"broken": broken, "temperature": TemperatureScaling()}
        ).fit(logits, labels)
    results = auto.cv_results_.set_index("candidate")
    assert np.isnan(results.loc["broken", "mean_score"])
    assert auto.best_name_ != "broken"


def test_default_candidates_depend_on_classes_and_rows():
    assert "matrix" not in _default_candidates(100, 21, 0)
    assert "matrix" in _default_candidates(100, 20, 0)
    assert {"svs", "sms"} <= set(_default_candidates(100, 3, 0))
    assert not {"svs", "sms"} & set(_default_candidates(100, 2, 0))
    assert "adaptive" not in _default_candidates(4999, 3, 0)
    adaptive = _default_candidates(5000, 3, 7)["adaptive"]
    assert (adaptive.n_members, adaptive.random_state) == (1, 7)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"candidates": []}, "'candidates' parameter"),
        ({"candidates": {}}, "candidates must be None or a non-empty dict"),
        ({"candidates": {"identity": TemperatureScaling()}}, "reserved"),
        ({"candidates": {"x": object()}}, "fit and predict_proba"),
        ({"candidates": {"x": TemperatureScaling(input="probs")}}, "input='probs'"),
        ({"candidates": {"x": TemperatureScaling(classes=[0, 1, 2])}}, "classes="),
        ({"cv": 50}, "cv=50 folds need at least 50 samples"),
        ({"cv": 1}, "'cv' parameter"),
        ({"scoring": "accuracy"}, "'scoring' parameter"),
    ],
)
def test_bad_parameters_raise_clear_errors(params, match):
    logits, labels = _calibrated_data(60, 3, seed=5)
    with pytest.raises(ValueError, match=match):
        AutoCalibrator(**params).fit(logits, labels)


def test_sample_weight_needs_candidates_that_take_it():
    logits, labels = _calibrated_data(200, 3, seed=6)
    weights = np.ones(200)
    with pytest.raises(ValueError, match="does not take it"):
        AutoCalibrator(candidates={"x": _NoWeights()}).fit(logits, labels, sample_weight=weights)


class _NoWeights(LogisticRegression):
    def fit(self, X, y):
        return super().fit(X, y)


def test_probabilities_input_and_string_classes():
    logits, labels = _calibrated_data(600, 3, seed=8, scale=2.0)
    names = np.array(["a", "b", "c"])
    auto = AutoCalibrator(input="probs", classes=names).fit(softmax(logits, axis=1), names[labels])
    reference = AutoCalibrator().fit(logits, labels)
    # log(softmax(z)) shifts each row of z: the candidates that ignore row shifts
    # (identity, temperature, SVS and SMS, which start from softmax(z / T), ETS,
    # isotonic) score the same on both inputs.
    invariant = ["identity", "temperature", "svs", "sms", "ets", "isotonic"]
    np.testing.assert_allclose(
        auto.cv_results_.set_index("candidate").loc[invariant, "mean_score"],
        reference.cv_results_.set_index("candidate").loc[invariant, "mean_score"],
        rtol=1e-6,
    )
    assert set(auto.predict(softmax(logits[:20], axis=1))) <= set(names)


def test_clone_and_grid_search():
    logits, labels = _calibrated_data(600, 3, seed=9, scale=2.0)
    auto = AutoCalibrator(candidates={"temperature": TemperatureScaling()}, cv=3)
    assert clone(auto).get_params()["cv"] == 3
    search = GridSearchCV(
        auto, {"scoring": ["neg_log_loss", "neg_brier_score"]}, scoring="neg_log_loss", cv=3
    ).fit(logits, labels)
    assert search.best_params_["scoring"] in {"neg_log_loss", "neg_brier_score"}
    assert search.best_estimator_.best_name_ in {"identity", "temperature"}


class _Broken(LogisticRegression):
    def fit(self, X, y, sample_weight=None):
        raise RuntimeError("cannot fit")


def test_ece_scoring_matches_a_direct_recomputation_and_says_what_it_optimised():
    from reliacal.metrics import expected_calibration_error

    logits, labels = _calibrated_data(900, 3, seed=10, scale=2.5)
    auto = AutoCalibrator(
        candidates={"temperature": TemperatureScaling()}, cv=KFold(3), scoring="neg_ece"
    ).fit(logits, labels)
    expected = {"identity": [], "temperature": []}
    for train, test in KFold(3).split(logits):
        fitted = TemperatureScaling().fit(logits[train], labels[train])
        for name, proba in (
            ("identity", softmax(logits[test], axis=1)),
            ("temperature", fitted.predict_proba(logits[test])),
        ):
            expected[name].append(-expected_calibration_error(labels[test], proba))
    results = auto.cv_results_.set_index("candidate")
    for name, scores in expected.items():
        np.testing.assert_allclose(
            results.loc[name, ["split0_score", "split1_score", "split2_score"]], scores, rtol=1e-10
        )
    best = max(expected, key=lambda name: np.mean(expected[name]))
    assert auto.best_name_ == best
    assert "cross-validated ECE (scoring='neg_ece')" in auto.reason_
    # The reason gives the metric itself, not its negation.
    assert f"{-np.mean(expected[best]):.6g}" in auto.reason_


def test_the_reason_names_the_default_score():
    logits, labels = _calibrated_data(600, 3, seed=11, scale=3.0)
    auto = AutoCalibrator(candidates={"temperature": TemperatureScaling()}).fit(logits, labels)
    assert "cross-validated NLL (scoring='neg_log_loss')" in auto.reason_
    nll = -auto.cv_results_.set_index("candidate").loc[auto.best_name_, "mean_score"]
    assert f"{nll:.6g}" in auto.reason_


def test_ece_scoring_refuses_sample_weight():
    logits, labels = _calibrated_data(200, 3, seed=12)
    with pytest.raises(ValueError, match="scoring='neg_ece' takes no sample_weight"):
        AutoCalibrator(scoring="neg_ece").fit(logits, labels, sample_weight=np.ones(200))


def test_copies_of_a_row_stay_in_one_fold():
    # Calibrated logits, each row repeated 10 times: folds that split the copies let a
    # flexible candidate score by rote (it saw each held-out row in training).
    logits, labels = _calibrated_data(200, 3, seed=13)
    repeated, repeated_labels = np.tile(logits, (10, 1)), np.tile(labels, 10)
    auto = AutoCalibrator().fit(repeated, repeated_labels)
    # Oracle: the same stratified folds, every copy moved to its first copy's fold.
    splitter = StratifiedKFold(5, shuffle=True, random_state=0)
    folds = _folds_keeping_copies_together(splitter, repeated, repeated_labels)
    expected = []
    for train, test in folds:
        assert not set(map(tuple, repeated[train])) & set(map(tuple, repeated[test]))
        fitted = VectorScaling().fit(repeated[train], repeated_labels[train])
        predicted = fitted.predict_proba(repeated[test])
        expected.append(-log_loss(repeated_labels[test], predicted, labels=range(3)))
    results = auto.cv_results_.set_index("candidate")
    np.testing.assert_allclose(
        results.loc["vector", [f"split{i}_score" for i in range(5)]], expected, rtol=1e-6
    )
    # On calibrated logits nothing should beat the identity by memorising.
    assert auto.best_name_ in {"identity", "temperature", "ets"}


def test_a_splitter_that_separates_copies_is_used_with_a_warning():
    logits, labels = _calibrated_data(100, 3, seed=14)
    repeated, repeated_labels = np.tile(logits, (3, 1)), np.tile(labels, 3)
    with pytest.warns(UserWarning, match="repeats rows .* reward memorising"):
        AutoCalibrator(
            candidates={"temperature": TemperatureScaling()}, cv=KFold(3, shuffle=True)
        ).fit(repeated, repeated_labels)


def test_rows_without_copies_keep_their_stratified_folds():
    # The grouping changes nothing for distinct rows: the folds are StratifiedKFold's.
    logits, labels = _calibrated_data(300, 3, seed=15, scale=2.0)
    auto = AutoCalibrator(candidates={"vector": VectorScaling()}, random_state=4).fit(
        logits, labels
    )
    splitter = StratifiedKFold(5, shuffle=True, random_state=4)
    expected = [
        -log_loss(
            labels[test],
            VectorScaling().fit(logits[train], labels[train]).predict_proba(logits[test]),
            labels=range(3),
        )
        for train, test in splitter.split(logits, labels)
    ]
    results = auto.cv_results_.set_index("candidate")
    np.testing.assert_allclose(
        results.loc["vector", [f"split{i}_score" for i in range(5)]], expected, rtol=1e-8
    )


def test_too_few_distinct_rows_for_the_folds_are_refused():
    logits, labels = _calibrated_data(3, 3, seed=16)
    with pytest.raises(ValueError, match="3 distinct rows"):
        AutoCalibrator(cv=5).fit(np.tile(logits, (10, 1)), np.tile(labels, 10))
