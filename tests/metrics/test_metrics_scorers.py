"""scikit-learn scorers: negated metrics of predict_proba, usable in model selection."""

import pickle

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_validate

from reliacal.metrics import (
    CalibrationScorer,
    accuracy,
    brier_score,
    brier_scorer,
    ece_scorer,
    expected_calibration_error,
    make_calibration_scorer,
    negative_log_likelihood,
    nll_scorer,
)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X, y, LogisticRegression(max_iter=500).fit(X, y)


def test_ready_made_scorers_are_negated_metrics(iris):
    X, y, model = iris
    probs = model.predict_proba(X)
    assert ece_scorer(model, X, y) == -expected_calibration_error(y, probs)
    assert nll_scorer(model, X, y) == -negative_log_likelihood(y, probs)
    assert brier_scorer(model, X, y) == -brier_score(y, probs)


def test_factory_with_names_and_keyword_arguments(iris):
    X, y, model = iris
    probs = model.predict_proba(X)
    scorer = make_calibration_scorer("ece", n_bins=5, strategy="quantile")
    assert isinstance(scorer, CalibrationScorer)
    assert scorer(model, X, y) == -expected_calibration_error(
        y, probs, n_bins=5, strategy="quantile"
    )
    assert make_calibration_scorer("accuracy")(model, X, y) == accuracy(y, probs)
    assert make_calibration_scorer(accuracy)(model, X, y) > 0
    assert make_calibration_scorer("nll", greater_is_better=True)(model, X, y) > 0
    assert "n_bins=5" in repr(scorer) and "greater_is_better=False" in repr(scorer)


def test_string_labels_map_through_classes(iris):
    X, y, _ = iris
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    model = LogisticRegression(max_iter=500).fit(X, names)
    expected = -expected_calibration_error(y, model.predict_proba(X))
    assert ece_scorer(model, X, names) == pytest.approx(expected)


def test_custom_metric_without_labels_argument(iris):
    X, y, model = iris

    def mean_top_probability(y_true, y_prob):
        return float(np.max(y_prob, axis=1).mean())

    scorer = make_calibration_scorer(mean_top_probability, greater_is_better=True)
    assert scorer(model, X, y) == pytest.approx(model.predict_proba(X).max(axis=1).mean())


def test_grid_search_and_cross_validate(iris):
    X, y, _ = iris
    search = GridSearchCV(
        LogisticRegression(max_iter=500),
        {"C": [0.001, 1.0]},
        scoring={"ece": ece_scorer, "nll": nll_scorer},
        refit="nll",
        cv=3,
    ).fit(X, y)
    # C=0.001 predicts nearly uniform probabilities: far worse log loss.
    assert search.best_params_ == {"C": 1.0}
    assert np.all(search.cv_results_["mean_test_ece"] <= 0)
    results = cross_validate(LogisticRegression(max_iter=500), X, y, scoring=brier_scorer, cv=3)
    assert np.all(results["test_score"] < 0)


def test_scorers_pickle(iris):
    X, y, model = iris
    restored = pickle.loads(pickle.dumps(ece_scorer))
    assert restored(model, X, y) == ece_scorer(model, X, y)


def test_bad_metric_raises():
    with pytest.raises(ValueError, match="unknown metric"):
        make_calibration_scorer("neg_ece")
    with pytest.raises(ValueError, match="callable"):
        make_calibration_scorer(3)
