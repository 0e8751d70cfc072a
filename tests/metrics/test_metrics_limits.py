"""Hostile sizes and types: a clear ValueError, never a MemoryError or a silent cast."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from reliacal._validation import MAX_CLASSWISE_CELLS, MAX_N_BINS
from reliacal.cli import main
from reliacal.metrics import (
    CalibrationState,
    binned_statistics,
    calibration_report,
    classwise_calibration_error,
    debiased_calibration_error,
    expected_calibration_error,
    make_calibration_scorer,
    maximum_calibration_error,
    negative_log_likelihood,
)
from reliacal.metrics._registry import METRICS as REGISTRY
from reliacal.plot import ReliabilityDisplay, plot_reliability_diagrams

matplotlib.use("Agg")

Y = np.array([0, 1, 1, 0])
P = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])

# ------------------------------------------------------------------- n_bins cap

BINNED = {
    "expected_calibration_error": lambda n: expected_calibration_error(Y, P, n_bins=n),
    "classwise (mode)": lambda n: expected_calibration_error(Y, P, n_bins=n, mode="classwise"),
    "maximum_calibration_error": lambda n: maximum_calibration_error(Y, P, n_bins=n),
    "classwise_calibration_error": lambda n: classwise_calibration_error(Y, P, n_bins=n),
    "debiased_calibration_error": lambda n: debiased_calibration_error(Y, P, n_bins=n),
    "binned_statistics": lambda n: binned_statistics(Y, P, n_bins=n),
    "calibration_report": lambda n: calibration_report(Y, {"m": P}, n_bins=n),
    "CalibrationState": lambda n: CalibrationState(n_bins=n),
    "scorer": lambda n: make_calibration_scorer("ece", n_bins=n)._metric(Y, P, n_bins=n),
    "ReliabilityDisplay": lambda n: ReliabilityDisplay.from_predictions(Y, P, n_bins=n),
    "plot_reliability_diagrams": lambda n: plot_reliability_diagrams(Y, {"m": P}, n_bins=n),
}


@pytest.mark.parametrize("entry", sorted(BINNED))
def test_too_many_bins_is_a_value_error_naming_the_limit(entry):
    with pytest.raises(ValueError, match=f"n_bins must be at most {MAX_N_BINS}, got 100000000"):
        BINNED[entry](10**8)


def test_the_largest_allowed_number_of_bins_works():
    # Four samples in a million bins: each lies alone in its bin, so ECE is the
    # mean |correct - confidence| (hand-computed: |1-.9|, |0-.8|, |1-.7|, |1-.6|).
    expected = (0.1 + 0.8 + 0.3 + 0.4) / 4
    assert expected_calibration_error(Y, P, n_bins=MAX_N_BINS) == pytest.approx(expected)
    assert binned_statistics(Y, P, n_bins=MAX_N_BINS).counts.sum() == 4


def test_classwise_bins_are_capped_by_classes_times_bins():
    n_classes = 1000
    y_prob = np.full((3, n_classes), 1.0 / n_classes)
    y_true = np.array([0, 1, 2])
    n_bins = MAX_CLASSWISE_CELLS // n_classes + 1
    for call in (
        lambda: classwise_calibration_error(y_true, y_prob, n_bins=n_bins),
        lambda: classwise_calibration_error(y_true, y_prob, n_bins=n_bins, strategy="quantile"),
        lambda: debiased_calibration_error(y_true, y_prob, n_bins=n_bins, mode="classwise"),
        lambda: calibration_report(y_true, {"m": y_prob}, n_bins=n_bins),
        lambda: CalibrationState(n_bins=n_bins).update(y_true, y_prob),
    ):
        with pytest.raises(ValueError, match="n_classes \\* n_bins <= 10000000"):
            call()
    # Top-label metrics bin one confidence per sample: the class count does not matter.
    assert expected_calibration_error(y_true, y_prob, n_bins=n_bins) == pytest.approx(
        1 / 3 - 1 / n_classes
    )


def test_command_refuses_too_many_bins_with_the_limit(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "a.npz", "--n-bins", "1000000000"])
    assert exit_info.value.code == 2
    assert f"n_bins must be at most {MAX_N_BINS}" in capsys.readouterr().err


# ------------------------------------------------------------- numeric strings

TEXT = [["0.9", "0.1"], ["0.8", "0.2"], ["0.3", "0.7"], ["0.6", "0.4"]]
# Every public function of the metric table takes (y_true, y_prob).
METRICS = [metric.function for metric in REGISTRY if metric.function is not None]


@pytest.mark.parametrize("metric", METRICS, ids=lambda metric: metric.__name__)
@pytest.mark.parametrize(
    "y_prob",
    [
        TEXT,
        np.array(TEXT, dtype=object),
        np.array([[0.9, "0.1"], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], dtype=object),
        np.array(TEXT, dtype=bytes),
        ["0.9", "0.8", "0.3", "0.6"],
    ],
    ids=["str", "object-str", "object-mixed", "bytes", "1-D str"],
)
def test_numbers_written_as_text_are_refused(metric, y_prob):
    with pytest.raises(ValueError, match="y_prob must be numeric, got text"):
        metric(Y, y_prob)


def test_text_is_refused_by_the_report_the_state_and_the_plot():
    with pytest.raises(ValueError, match="model 'm': y_prob must be numeric, got text"):
        calibration_report(Y, {"m": TEXT})
    with pytest.raises(ValueError, match="must be numeric, got text"):
        CalibrationState().update(Y, TEXT)
    with pytest.raises(ValueError, match="must be numeric, got text"):
        ReliabilityDisplay.from_predictions(Y, TEXT)


def test_numeric_object_arrays_and_integers_are_still_accepted():
    as_objects = np.array(P, dtype=object)
    assert expected_calibration_error(Y, as_objects) == expected_calibration_error(Y, P)
    one_hot = np.array([[1, 0], [0, 1]])
    assert negative_log_likelihood([0, 1], one_hot) == pytest.approx(np.finfo(float).eps)


def test_complex_probabilities_are_refused():
    with pytest.raises(ValueError, match="y_prob must be real numbers, got dtype complex128"):
        expected_calibration_error(Y, P.astype(complex))
