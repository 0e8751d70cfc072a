"""Hyperparameter search with scikit-learn: GridSearchCV, Pipeline, joblib and Dask."""

from __future__ import annotations

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from reliacal.calibrators import MatrixScaling, TemperatureScaling
from reliacal.metrics import ece_scorer, expected_calibration_error, make_calibration_scorer

GRID = {"reg_off_diagonal": [0.0, 10.0, 1000.0], "reg_bias": [0.0, 10.0]}


@pytest.fixture(scope="module")
def calibration_split(load_record):
    probabilities, labels = load_record("lenet-5-cifar-10")
    rows = np.random.default_rng(0).permutation(len(labels))[:2000]
    return np.log(probabilities[rows]), labels[rows]


def _search(n_jobs, scoring=ece_scorer):
    return GridSearchCV(
        MatrixScaling(),
        GRID,
        scoring=scoring,
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
        n_jobs=n_jobs,
    )


@pytest.fixture(scope="module")
def sequential_search(calibration_split):
    return _search(n_jobs=1).fit(*calibration_split)


def test_grid_search_over_odir_regularisers_with_two_jobs(calibration_split):
    logits, y = calibration_split
    parallel = _search(n_jobs=2).fit(logits, y)
    # Oracle: the same folds scored by hand with the ECE metric.
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(logits, y))
    manual = []
    for params in parallel.cv_results_["params"]:
        errors = []
        for train, test in folds:
            fitted = MatrixScaling(**params).fit(logits[train], y[train])
            errors.append(expected_calibration_error(y[test], fitted.predict_proba(logits[test])))
        manual.append(-np.mean(errors))
    np.testing.assert_allclose(parallel.cv_results_["mean_test_score"], manual, rtol=1e-9)
    assert parallel.best_params_ == parallel.cv_results_["params"][int(np.argmax(manual))]
    # The refitted best model calibrates better than the raw logits on its own data.
    raw = expected_calibration_error(y, np.exp(logits))
    assert -ece_scorer(parallel.best_estimator_, logits, y) < raw


def test_multi_metric_search_with_probabilities_input(calibration_split):
    logits, y = calibration_split
    search = GridSearchCV(
        MatrixScaling(input="probs"),
        {"reg_off_diagonal": [0.0, 100.0]},
        scoring={"ece": ece_scorer, "nll": make_calibration_scorer("nll")},
        refit="nll",
        cv=3,
    ).fit(np.exp(logits), y)
    assert set(search.best_params_) == {"reg_off_diagonal"}
    assert np.all(search.cv_results_["mean_test_nll"] < 0)


def test_pipeline_and_clone(calibration_split):
    logits, y = calibration_split
    probabilities = np.exp(logits)
    pipeline = make_pipeline(FunctionTransformer(np.log), TemperatureScaling())
    pipeline.fit(probabilities, y)
    direct = TemperatureScaling().fit(np.log(probabilities), y)
    assert pipeline[-1].temperature_ == direct.temperature_
    np.testing.assert_array_equal(
        pipeline.predict_proba(probabilities), direct.predict_proba(np.log(probabilities))
    )
    search = GridSearchCV(
        clone(pipeline),
        {"temperaturescaling__objective": ["nll", "ece"]},
        scoring=ece_scorer,
        cv=3,
    ).fit(probabilities, y)
    assert search.best_params_["temperaturescaling__objective"] in {"nll", "ece"}


@pytest.mark.slow
def test_dask_backend_gives_the_sequential_result(
    calibration_split, sequential_search, local_dask_client
):
    logits, y = calibration_split
    with local_dask_client(processes=True), joblib.parallel_backend("dask"):
        distributed_search = _search(n_jobs=-1).fit(logits, y)
    assert distributed_search.best_params_ == sequential_search.best_params_
    np.testing.assert_allclose(
        distributed_search.cv_results_["mean_test_score"],
        sequential_search.cv_results_["mean_test_score"],
        rtol=1e-9,
    )
