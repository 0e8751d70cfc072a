"""The metric table: one definition per name serves the report, the stream and the scorers."""

from __future__ import annotations

import re

import numpy as np
import pytest

from reliacal import metrics
from reliacal.metrics import (
    CalibrationState,
    accuracy,
    calibration_report,
    classwise_calibration_error,
    expected_calibration_error,
    make_calibration_scorer,
    score_decomposition,
    softmax,
    spiegelhalter_test,
)
from reliacal.metrics._registry import METRICS, NEED_SAMPLES, REPORT_COLUMNS, STREAMABLE
from reliacal.metrics.modes import MODES
from reliacal.plot import ReliabilityDisplay

# The state's metrics and the scorer names as they were before the table existed
# (test_metrics_report.py pins the report's columns).
HISTORIC_STREAMABLE = ["accuracy", "ece", "classwise_ece", "mce", "nll", "brier", "signed_ece"]
HISTORIC_KEPT = ["adaptive_ece", "debiased_ece", "smooth_ece"]
HISTORIC_SCORERS = [
    "accuracy",
    "brier",
    "classwise_ece",
    "debiased_ece",
    "ece",
    "mce",
    "nll",
    "smooth_ece",
]
# Issue 19's metrics, appended after the historic ones: sums stream, sorted ones need samples.
NEW_STREAMABLE = [
    "overconfidence_error",
    "underconfidence_error",
    "spiegelhalter_z",
    "spiegelhalter_p",
]
NEW_KEPT = ["ks_error", "sweep_ece", "corp_miscalibration"]
NEW_SCORERS = ["ks_error", "overconfidence_error", "sweep_ece", "underconfidence_error"]
ALL_STREAMABLE = HISTORIC_STREAMABLE + NEW_STREAMABLE
ALL_KEPT = HISTORIC_KEPT + NEW_KEPT
ALL_SCORERS = sorted(HISTORIC_SCORERS + NEW_SCORERS)


def _data(dtype, n_classes):
    rng = np.random.default_rng(n_classes)
    probs = softmax(rng.normal(scale=2.0, size=(1500, n_classes))).astype(dtype)
    labels = rng.integers(0, n_classes, size=1500)
    return labels, probs


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n_classes", [2, 5])
def test_each_metric_of_the_table_equals_its_public_function(dtype, n_classes):
    labels, probs = _data(dtype, n_classes)
    # The table's values as users read them: the report's columns and the state's metrics
    # (which add debiased_ece) together cover every metric of the table.
    state = CalibrationState(keep_confidences=True).update(labels, probs)
    from_table = {**state.compute(), **calibration_report(labels, {"m": probs}).loc["m"]}
    independent = {
        # Metrics without a function of their own, against their definitions.
        "adaptive_ece": expected_calibration_error(labels, probs, strategy="quantile"),
        "signed_ece": float(np.mean(probs.max(axis=1), dtype=np.float64))
        - float(np.mean(probs.argmax(axis=1) == labels)),
        "spiegelhalter_z": spiegelhalter_test(labels, probs).statistic,
        "spiegelhalter_p": spiegelhalter_test(labels, probs).pvalue,
        "corp_miscalibration": score_decomposition(labels, probs).miscalibration,
    }
    for metric in METRICS:
        expected = metric.function(labels, probs) if metric.function else independent[metric.name]
        assert from_table[metric.name] == pytest.approx(expected, rel=1e-12, abs=1e-14), metric.name


def test_the_report_the_state_and_the_scorers_list_the_table():
    assert list(STREAMABLE) == ALL_STREAMABLE
    assert list(NEED_SAMPLES) == ALL_KEPT
    labels, probs = _data(np.float64, 3)
    assert list(calibration_report(labels, {"m": probs}).columns) == list(REPORT_COLUMNS)
    state = CalibrationState(keep_confidences=True).update(labels, probs)
    assert list(state.compute()) == ALL_STREAMABLE + ALL_KEPT
    streaming_only = CalibrationState().update(labels, probs)
    assert list(streaming_only.compute()) == ALL_STREAMABLE
    with pytest.raises(ValueError, match=re.escape(f"choose one of {ALL_SCORERS}")):
        make_calibration_scorer("adaptive_ece")
    for name in ALL_SCORERS:
        assert make_calibration_scorer(name)._metric.__name__ != "<lambda>"
    assert make_calibration_scorer("accuracy")._sign == 1
    assert make_calibration_scorer("ece")._sign == -1


def test_the_documented_lists_come_from_the_table():
    for name in REPORT_COLUMNS:
        assert f"``{name}``" in calibration_report.__doc__
    for name in ALL_STREAMABLE + ALL_KEPT:
        assert f"``{name}``" in CalibrationState.__doc__
    for name in ALL_SCORERS:
        assert f"``{name}``" in make_calibration_scorer.__doc__
    assert "{" not in calibration_report.__doc__.split("Examples")[0]


def _diagram(y_true, y_prob, *, mode):
    class_ = 1 if mode == "class" else None
    return ReliabilityDisplay.from_predictions(y_true, y_prob, mode=mode, class_=class_)


ACCEPTED = {
    "binned_statistics": ("top-label", "positive"),
    "smooth_calibration_error": ("top-label", "positive"),
    "smooth_reliability_curve": ("top-label", "positive"),
    "expected_calibration_error": ("top-label", "positive", "classwise"),
    "maximum_calibration_error": ("top-label", "positive", "classwise"),
    "debiased_calibration_error": ("top-label", "positive", "classwise"),
    "ReliabilityDisplay": ("top-label", "positive", "class"),
}
# Each public function by its name, and the diagram through its constructor.
MODE_USERS = {name: getattr(metrics, name) for name in ACCEPTED if name != "ReliabilityDisplay"}
MODE_USERS["ReliabilityDisplay"] = _diagram


@pytest.mark.parametrize("user", sorted(MODE_USERS))
def test_every_mode_comes_from_one_vocabulary(user):
    def call(mode):
        return MODE_USERS[user]([0, 1], [[0.8, 0.2], [0.3, 0.7]], mode=mode)

    for mode in MODES:
        if mode in ACCEPTED[user]:
            call(mode)
        else:
            allowed = ", ".join(repr(option) for option in ACCEPTED[user])
            with pytest.raises(ValueError, match=f"mode must be one of {allowed}; got '{mode}'"):
                call(mode)
    with pytest.raises(ValueError, match="mode must be one of"):
        call("top_label")


def test_classwise_value_of_the_table_equals_the_function_on_string_labels():
    rng = np.random.default_rng(9)
    probs = softmax(rng.normal(size=(400, 3)))
    names = np.array(["cat", "dog", "emu"])
    labels = names[rng.integers(0, 3, size=400)]
    report = calibration_report(labels, {"m": probs}, labels=names)
    assert report.loc["m", "classwise_ece"] == classwise_calibration_error(
        labels, probs, labels=names
    )
    assert report.loc["m", "accuracy"] == accuracy(labels, probs, labels=names)
