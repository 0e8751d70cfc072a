"""pandas DataFrames of probabilities (columns matched to classes by name) and missing labels."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import log_loss

from reliacal import metrics
from reliacal.metrics import (
    CalibrationState,
    calibration_report,
    calibration_states,
    compare,
    expected_calibration_error,
    negative_log_likelihood,
    report_from_states,
    softmax,
)
from reliacal.metrics._report import BLOCK_ROWS


def _data(n_samples=600, n_classes=3, seed=0):
    rng = np.random.default_rng(seed)
    probs = softmax(rng.normal(scale=2.0, size=(n_samples, n_classes)))
    labels = rng.integers(0, n_classes, size=n_samples)
    return labels, probs


def _frame(probs, names, order):
    """``probs`` with column k named ``names[k]``, the columns then put in ``order``."""
    return pd.DataFrame(probs, columns=names)[[names[k] for k in order]]


def test_numbered_columns_in_any_order_are_read_by_their_numbers():
    labels, probs = _data()
    frame = _frame(probs, ["p0", "p1", "p2"], order=(2, 0, 1))
    # Read by position, the columns would give another (wrong) value.
    assert expected_calibration_error(labels, frame.to_numpy()) != pytest.approx(
        expected_calibration_error(labels, probs)
    )
    assert expected_calibration_error(labels, frame) == expected_calibration_error(labels, probs)
    # The oracle reads the columns in class order, as scikit-learn's labels= does.
    assert negative_log_likelihood(labels, frame) == pytest.approx(
        log_loss(labels, frame[["p0", "p1", "p2"]].to_numpy(), labels=[0, 1, 2]), rel=1e-12
    )
    # labels= naming the class numbers puts them in its order.
    assert expected_calibration_error(labels, frame, labels=[0, 1, 2]) == (
        expected_calibration_error(labels, probs)
    )


@pytest.mark.parametrize(
    "names",
    [
        [f"p{k}" for k in range(12)],
        [f"class{k}_prob" for k in range(12)],
        list(range(12)),  # a frame made from an array
    ],
    ids=["prefix", "prefix-suffix", "integers"],
)
def test_lexicographic_and_integer_column_orders(names):
    labels, probs = _data(n_classes=12, seed=1)
    order = sorted(range(12), key=str)  # p0, p1, p10, p11, p2, ... as a sorted dict gives
    frame = _frame(probs, names, order)
    assert metrics.brier_score(labels, frame) == metrics.brier_score(labels, probs)


def test_names_that_are_the_classes():
    labels, probs = _data(n_classes=2, seed=2)
    names = np.array(["cat", "dog"])
    frame = _frame(probs, ["cat", "dog"], order=(1, 0))  # dog, cat
    expected = expected_calibration_error(names[labels], probs, labels=names)
    assert expected_calibration_error(names[labels], frame) == expected
    assert expected_calibration_error(names[labels], frame, labels=["cat", "dog"]) == expected


@pytest.mark.parametrize(
    ("names", "kwargs", "message"),
    [
        (["a", "b", "c"], {"labels": [0, 1, 2]}, r"columns \['a', 'b', 'c'\] do not name"),
        (["a", "b", "c"], {}, r"not among the classes \['a' 'b' 'c'\]"),
        (["p0", "p1", "p1"], {}, "duplicate columns"),
        (["p0", "p1", "p2"], {"labels": ["x", "y", "z"]}, "do not name the classes"),
    ],
)
def test_frames_whose_names_do_not_say_the_classes_are_refused(names, kwargs, message):
    labels, probs = _data()
    frame = pd.DataFrame(probs, columns=names)
    with pytest.raises(ValueError, match=message):
        expected_calibration_error(labels, frame, **kwargs)


def test_the_report_the_state_and_compare_read_frames_by_name():
    labels, probs = _data(seed=3)
    frame = _frame(probs, ["p0", "p1", "p2"], order=(1, 2, 0))
    pd.testing.assert_frame_equal(
        calibration_report(labels, {"m": frame}), calibration_report(labels, {"m": probs})
    )
    state = CalibrationState().update(labels, frame)
    assert state.compute() == CalibrationState().update(labels, probs).compute()
    streamed = report_from_states(calibration_states(labels, {"m": frame}))
    np.testing.assert_allclose(
        streamed.to_numpy(), calibration_report(labels, {"m": probs}).to_numpy(), rtol=1e-12
    )
    table = compare(labels, {"frame": frame, "array": probs}, n_bootstraps=40)
    assert (table["difference"] == 0).all()


@pytest.mark.parametrize(
    "y_true",
    [
        np.array([0.0, 1.0, np.nan, 1.0, np.nan]),
        np.array([0, 1, None, 1, None], dtype=object),
        pd.Series([0, 1, None, 1, None], dtype="Int64"),
        pd.Series(["a", "b", None, "b", None]),
    ],
    ids=["float-nan", "object-none", "pandas-na", "strings"],
)
def test_a_missing_label_is_named_with_its_row(y_true):
    probs = np.full((5, 2), 0.5)
    with pytest.raises(ValueError, match=r"2 missing labels \(NaN or None; first in row 2\)"):
        metrics.accuracy(y_true, probs, labels=["a", "b"] if y_true.dtype == object else None)


def test_streamed_blocks_report_rows_of_the_whole_input():
    n_samples = BLOCK_ROWS + 5000
    labels, probs = _data(n_samples, seed=4)
    # The oracle of the streamed report: the report summarised in one pass.
    streamed = report_from_states(calibration_states(labels, {"m": probs}))
    expected = calibration_report(labels, {"m": probs})
    np.testing.assert_allclose(streamed.to_numpy(), expected.to_numpy(), rtol=1e-10, atol=1e-15)
    streamable = report_from_states(
        calibration_states(labels, {"m": probs}, keep_confidences=False), streamable_only=True
    )
    assert list(streamable.columns) == list(metrics.report_columns(streamable_only=True))
    probs[BLOCK_ROWS + 7, 0] = np.nan  # row 7 of the second block
    with pytest.raises(ValueError, match=rf"model 'm': .*NaN \(first in row {BLOCK_ROWS + 7}\)"):
        calibration_states(labels, {"m": probs})
