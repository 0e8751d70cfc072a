"""Tabular classifiers calibrated by reliacal and by scikit-learn, on the same folds.

Four scikit-learn classifiers (histogram gradient boosting, a random forest,
logistic regression and an MLP, the last two after standardisation) on
scikit-learn's bundled data sets (breast cancer, wine, digits) and a larger
synthetic ``make_classification`` problem. Each data set is split once into
70% training / 30% test (stratified, seed 0). On the training part each
classifier is calibrated by

- ``reliacal.CalibratedClassifier(clf, method=m, cv=folds)`` and
- ``sklearn.calibration.CalibratedClassifierCV(clf, method=m, cv=folds)``

for ``m`` in sigmoid, isotonic and temperature, with the same
``StratifiedKFold(3, shuffle=True, random_state=0)`` folds and the default
``ensemble=True`` (one classifier clone and one calibrator per fold, their
probabilities averaged), so both fit the same classifiers on the same rows.
Two rows are reliacal's alone: the uncalibrated classifier fitted on the whole
training part, and ``method=AutoCalibrator()``.

Metrics on the test part: NLL, top-label ECE (15 equal-width bins) and the
Brier score, from ``reliacal.metrics``; ``fit s`` is the CPU time of ``fit``
(process time, one BLAS/torch thread: insensitive to the shared machine's
load, unlike wall time). The ratio columns are reliacal / scikit-learn.

Run from the repository root:

    .venv/bin/python benchmarks/tabular.py [--n-synthetic 5000] [--datasets ...] \\
        [--output benchmarks/results/tabular.md]
"""

from __future__ import annotations

import argparse
import time
import warnings

import _common
import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_breast_cancer, load_digits, load_wine, make_classification
from sklearn.model_selection import StratifiedKFold, train_test_split

from reliacal import CalibratedClassifier
from reliacal.calibrators import AutoCalibrator
from reliacal.metrics import brier_score, expected_calibration_error, negative_log_likelihood

SHARED_METHODS = ("sigmoid", "isotonic", "temperature")
N_FOLDS = 3


def datasets(n_synthetic: int) -> dict:
    """Name -> (X, y) of the bundled data sets and the synthetic one."""
    synthetic = make_classification(
        n_samples=n_synthetic,
        n_features=20,
        n_informative=8,
        n_redundant=4,
        n_classes=3,
        flip_y=0.05,
        random_state=0,
    )
    return {
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "wine": load_wine(return_X_y=True),
        "digits": load_digits(return_X_y=True),
        f"synthetic_{n_synthetic}": synthetic,
    }


def scores(y_test, probabilities) -> dict:
    return {
        "NLL": negative_log_likelihood(y_test, probabilities),
        "ECE %": 100 * expected_calibration_error(y_test, probabilities),
        "Brier": brier_score(y_test, probabilities),
    }


def timed_fit(model, X, y) -> tuple[object, float]:
    start = time.process_time()
    with warnings.catch_warnings():
        # MLP and logistic regression convergence notes, identical on both sides.
        warnings.simplefilter("ignore")
        model.fit(X, y)
    return model, time.process_time() - start


def run_case(estimator, X_train, y_train, X_test, y_test, log) -> list[dict]:
    """The rows of one (data set, classifier): uncalibrated, each shared method, auto."""
    folds = StratifiedKFold(N_FOLDS, shuffle=True, random_state=0)
    rows = []
    model, seconds = timed_fit(_clone(estimator), X_train, y_train)
    uncalibrated = scores(y_test, model.predict_proba(X_test))
    rows.append({"method": "uncalibrated", **uncalibrated, "fit s": seconds})
    for method in SHARED_METHODS:
        ours, ours_s = timed_fit(
            CalibratedClassifier(_clone(estimator), method=method, cv=folds), X_train, y_train
        )
        theirs, theirs_s = timed_fit(
            CalibratedClassifierCV(_clone(estimator), method=method, cv=folds), X_train, y_train
        )
        ours_proba, theirs_proba = ours.predict_proba(X_test), theirs.predict_proba(X_test)
        ours_scores, theirs_scores = scores(y_test, ours_proba), scores(y_test, theirs_proba)
        difference = np.max(np.abs(ours_proba - theirs_proba))
        rows.append(
            {
                "method": method,
                **ours_scores,
                "fit s": ours_s,
                "sklearn": theirs_scores,
                "sklearn fit s": theirs_s,
                "max |dp|": difference,
            }
        )
        log(
            f"    {method:12s} NLL {ours_scores['NLL']:.4f} / {theirs_scores['NLL']:.4f}  "
            f"fit {ours_s:.2f} / {theirs_s:.2f} s  max |dp| {difference:.1e}"
        )
    auto, seconds = timed_fit(
        CalibratedClassifier(_clone(estimator), method=AutoCalibrator(), cv=folds),
        X_train,
        y_train,
    )
    choices = sorted({calibrator.best_name_ for _, calibrator in auto.calibrated_classifiers_})
    rows.append(
        {
            "method": f"auto ({', '.join(choices)})",
            **scores(y_test, auto.predict_proba(X_test)),
            "fit s": seconds,
        }
    )
    return rows


def _clone(estimator):
    from sklearn.base import clone

    return clone(estimator)


def format_rows(rows: list[dict]) -> list[str]:
    lines = _common.table_head(
        ["method", "NLL reliacal", "NLL sklearn", "ECE % reliacal", "ECE % sklearn"]
        + ["Brier reliacal", "Brier sklearn", "max abs diff of p", "fit s reliacal"]
        + ["fit s sklearn", "time ratio"],
        numeric=True,
    )
    for row in rows:
        theirs = row.get("sklearn")
        if theirs is None:
            lines.append(
                f"| {row['method']} (reliacal only) | {row['NLL']:.4f} | | {row['ECE %']:.2f} "
                f"| | {row['Brier']:.4f} | | | {row['fit s']:.3f} | | |"
            )
            continue
        ratio = row["fit s"] / row["sklearn fit s"] if row["sklearn fit s"] > 0 else np.nan
        lines.append(
            f"| {row['method']} | {row['NLL']:.4f} | {theirs['NLL']:.4f} | {row['ECE %']:.2f} "
            f"| {theirs['ECE %']:.2f} | {row['Brier']:.4f} | {theirs['Brier']:.4f} "
            f"| {row['max |dp|']:.1e} | {row['fit s']:.3f} | {row['sklearn fit s']:.3f} "
            f"| {ratio:.2f} |"
        )
    return lines


def summary(all_rows: dict) -> list[str]:
    """The time ratio and the largest probability difference per shared method, overall."""
    lines = []
    for method in SHARED_METHODS:
        ours = sum(
            row["fit s"] for rows in all_rows.values() for row in rows if row["method"] == method
        )
        theirs = sum(
            row["sklearn fit s"]
            for rows in all_rows.values()
            for row in rows
            if row["method"] == method
        )
        worst = max(
            row["max |dp|"] for rows in all_rows.values() for row in rows if row["method"] == method
        )
        lines.append(
            f"- {method}: total fit CPU time {ours:.2f} s (reliacal) vs {theirs:.2f} s "
            f"(scikit-learn), ratio {ours / theirs:.2f}; largest |p_reliacal - p_sklearn| over "
            f"all cases {worst:.1e}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n-synthetic", type=int, default=5000, help="rows of the synthetic data set"
    )
    parser.add_argument("--datasets", nargs="*", default=None, help="subset of the data sets")
    parser.add_argument("--classifiers", nargs="*", default=None, help="subset of the classifiers")
    _common.add_output_argument(parser, "tabular.md")
    args = parser.parse_args(argv)
    _common.limit_threads(1)

    def log(message: str) -> None:
        print(message, flush=True)

    load_before = _common.load_average()
    started = time.perf_counter()
    report_body, all_rows = [], {}
    for data_name, (X, y) in datasets(args.n_synthetic).items():
        if args.datasets and data_name not in args.datasets:
            continue
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=0.3, stratify=y, random_state=0
        )
        for model_name, estimator in _common.tabular_classifiers().items():
            if args.classifiers and model_name not in args.classifiers:
                continue
            log(f"{data_name} / {model_name}")
            rows = run_case(estimator, X_train, y_train, X_test, y_test, log)
            all_rows[(data_name, model_name)] = rows
            report_body += [
                f"## {data_name} ({len(y)} rows, {X.shape[1]} features, "
                f"{len(np.unique(y))} classes), {model_name}",
                "",
                *format_rows(rows),
                "",
            ]
    total = time.perf_counter() - started
    report = [
        *_common.header(
            "Tabular classifiers: reliacal CalibratedClassifier vs CalibratedClassifierCV",
            __file__,
            argv,
            details=f"Total wall time {total:.0f} s.",
            load_before=load_before,
        ),
        f"Same {N_FOLDS} stratified folds (shuffled, seed 0), ensemble=True on both sides; "
        "70/30 stratified train/test split (seed 0); metrics on the test part; `fit s` is "
        "the CPU time of fit (one thread); time ratio = reliacal / scikit-learn. "
        "'max abs diff of p' is the largest difference between the two libraries' test "
        "probabilities. The methods coincide for any number of classes: `method='sigmoid'` "
        "and `'isotonic'` fit one map per column of the classifier's decision_function or "
        "predict_proba, as scikit-learn does, and temperature fits the same temperature.",
        "",
        "## Summary",
        "",
        *summary(all_rows),
        "",
        *report_body,
    ]
    _common.write_results("\n".join(report), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
