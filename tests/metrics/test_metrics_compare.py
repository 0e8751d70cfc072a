"""reliacal.metrics.compare: paired bootstrap differences with percentile intervals."""

import numpy as np
import pandas as pd
import pytest

import reliacal.metrics._compare as compare_module
from reliacal.metrics import (
    accuracy,
    brier_score,
    compare,
    debiased_calibration_error,
    expected_calibration_error,
    ks_calibration_error,
    maximum_calibration_error,
    negative_log_likelihood,
    signed_calibration_error,
    softmax,
)
from reliacal.metrics._compare import COMPARE_METRICS, bootstrap_indices


def _calibrated_binary(n_samples, seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=n_samples)
    return (rng.uniform(size=n_samples) < p).astype(int), p


def _multiclass(n_samples, seed, n_classes=3):
    rng = np.random.default_rng(seed)
    # Rounded logits: tied confidences, as in real records.
    logits = np.round(rng.normal(size=(n_samples, n_classes)) * 2)
    return rng.integers(0, n_classes, n_samples), softmax(logits), softmax(logits / 2)


def _by_public_function(metric, y, p):
    """The metric computed by its public function (the oracle)."""
    functions = {
        "accuracy": accuracy,
        "nll": negative_log_likelihood,
        "brier": brier_score,
        "ece": expected_calibration_error,
        "mce": maximum_calibration_error,
        "debiased_ece": debiased_calibration_error,
        "ks_ece": ks_calibration_error,
        "signed_ece": signed_calibration_error,
    }
    if metric == "adaptive_ece":
        return expected_calibration_error(y, p, strategy="quantile")
    return functions[metric](y, p)


def test_identical_methods_have_zero_difference():
    y, p = _calibrated_binary(300, 0)
    table = compare(y, {"a": p, "b": p.copy()}, n_bootstraps=50, random_state=0)
    assert set(table.index.get_level_values("metric")) == {"ece", "debiased_ece", "nll", "brier"}
    for method in ("a", "b"):
        rows = table.loc[method]
        assert (rows["difference"] == 0).all()
        assert (rows["difference_ci_low"] == 0).all()
        assert (rows["difference_ci_high"] == 0).all()
        assert not rows["significant"].any()


def test_clearly_better_calibrator_is_significant():
    y, p = _calibrated_binary(3000, 1)
    table = compare(
        y,
        {"raw": p**3, "calibrated": p},
        metrics=COMPARE_METRICS,
        n_bootstraps=200,
        random_state=0,
        mode="positive",
    )
    for metric in ("ece", "adaptive_ece", "debiased_ece", "ks_ece", "nll", "brier"):
        row = table.loc[("calibrated", metric)]
        assert row["significant"], metric
        assert row["difference_ci_high"] < 0, metric
    # p**3 under-predicts the positive class: its signed error is clearly negative.
    assert table.loc[("raw", "signed_ece"), "ci_high"] < 0


def test_values_are_the_public_functions():
    y, sharp, soft = _multiclass(200, 2)
    table = compare(y, {"sharp": sharp, "soft": soft}, metrics=COMPARE_METRICS, n_bootstraps=40)
    for metric in COMPARE_METRICS:
        for name, p in (("sharp", sharp), ("soft", soft)):
            assert table.loc[(name, metric), "value"] == _by_public_function(metric, y, p)
        expected = _by_public_function(metric, y, soft) - _by_public_function(metric, y, sharp)
        assert table.loc[("soft", metric), "difference"] == expected


@pytest.mark.parametrize("chunk", [None, 7 * 40])
def test_replicates_equal_the_public_functions_on_resampled_rows(monkeypatch, chunk):
    # Oracle: resample by the documented rule, score with the public functions.
    if chunk is not None:  # several chunks of 7 replicates
        monkeypatch.setattr(compare_module, "_CHUNK_INDICES", chunk)
    y, sharp, soft = _multiclass(40, 3)
    n_bootstraps, level = 30, 0.8
    table = compare(
        y,
        {"sharp": sharp, "soft": soft},
        metrics=COMPARE_METRICS,
        n_bootstraps=n_bootstraps,
        confidence_level=level,
        random_state=7,
        n_bins=15,
    )
    indices = np.random.default_rng(7).integers(0, 40, (n_bootstraps, 40))
    for metric in COMPARE_METRICS:
        soft_values = np.array([_by_public_function(metric, y[i], soft[i]) for i in indices])
        sharp_values = np.array([_by_public_function(metric, y[i], sharp[i]) for i in indices])
        low, high = np.percentile(soft_values - sharp_values, [10, 90])
        row = table.loc[("soft", metric)]
        assert row["difference_ci_low"] == pytest.approx(low, abs=1e-12), metric
        assert row["difference_ci_high"] == pytest.approx(high, abs=1e-12), metric
        low, high = np.percentile(soft_values, [10, 90])
        assert row["ci_low"] == pytest.approx(low, abs=1e-12), metric
        assert row["ci_high"] == pytest.approx(high, abs=1e-12), metric


def test_tiny_case_by_hand():
    # Per-row Brier terms: A (0.04, 0.01), B (0.16, 0.16); B - A = (0.12, 0.15).
    assert np.array_equal(
        np.concatenate(list(bootstrap_indices(2, 4, random_state=0))),
        [[1, 1], [1, 0], [0, 0], [0, 0]],
    )
    # Replicate differences 0.15, 0.135, 0.12, 0.12; sorted 0.12, 0.12, 0.135, 0.15:
    # the 25th percentile lies at position 0.75 (0.12), the 75th at 2.25 (0.13875).
    table = compare(
        [0, 1],
        {"A": np.array([0.2, 0.9]), "B": np.array([0.4, 0.6])},
        metrics=["brier"],
        n_bootstraps=4,
        confidence_level=0.5,
        random_state=0,
    )
    row = table.loc[("B", "brier")]
    assert row["difference"] == pytest.approx(0.135, abs=1e-15)
    assert row["difference_ci_low"] == pytest.approx(0.12, abs=1e-15)
    assert row["difference_ci_high"] == pytest.approx(0.13875, abs=1e-15)
    assert row["significant"]


def test_reproducible_with_random_state():
    y, sharp, soft = _multiclass(150, 4)
    predictions = {"sharp": sharp, "soft": soft}
    first = compare(y, predictions, n_bootstraps=40, random_state=3)
    pd.testing.assert_frame_equal(first, compare(y, predictions, n_bootstraps=40, random_state=3))
    other = compare(y, predictions, n_bootstraps=40, random_state=4)
    assert not np.allclose(first["difference_ci_low"], other["difference_ci_low"])
    pd.testing.assert_series_equal(first["value"], other["value"])


def test_reference_and_layout():
    y, sharp, soft = _multiclass(100, 5)
    table = compare(
        y, {"sharp": sharp, "soft": soft}, metrics="nll", reference="soft", n_bootstraps=40
    )
    assert list(table.index) == [("sharp", "nll"), ("soft", "nll")]
    assert table.index.names == ["method", "metric"]
    assert list(table.columns) == [
        "value",
        "ci_low",
        "ci_high",
        "difference",
        "difference_ci_low",
        "difference_ci_high",
        "significant",
    ]
    assert table.loc[("soft", "nll"), "difference"] == 0
    assert table.loc[("sharp", "nll"), "difference"] == pytest.approx(
        negative_log_likelihood(y, sharp) - negative_log_likelihood(y, soft)
    )


def test_interval_covers_the_true_difference():
    # Calibrated p against q = p**2 with p ~ U(0, 1): the expected Brier difference
    # is E[(q - p)^2] = E[p^4 - 2 p^3 + p^2] = 1/5 - 1/2 + 1/3 = 1/30.
    covered = 0
    for seed in range(100):
        y, p = _calibrated_binary(400, 100 + seed)
        table = compare(
            y, {"p": p, "q": p**2}, metrics=["brier"], n_bootstraps=200, random_state=seed
        )
        row = table.loc[("q", "brier")]
        covered += row["difference_ci_low"] <= 1 / 30 <= row["difference_ci_high"]
    assert covered >= 88  # nominal 95; 88 is three binomial standard deviations below


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predictions": {}}, "non-empty mapping"),
        ({"reference": "nope"}, "reference 'nope' is not among"),
        ({"metrics": ["ece", "crps"]}, "each metric must be one of"),
        ({"metrics": []}, "non-empty sequence"),
        ({"metrics": ["ece", "ece"]}, "duplicates"),
        ({"n_bootstraps": 0}, "n_bootstraps must be an integer >= 1"),
        ({"n_bootstraps": 2.5}, "n_bootstraps must be an integer >= 1"),
        ({"confidence_level": 1.5}, r"confidence_level must lie in \(0, 1\)"),
        ({"n_bins": 0}, "n_bins must be an integer >= 1"),
        ({"mode": "classwise"}, "mode must be one of"),
        ({"predictions": {"a": [0.2, 0.4], "b": [0.1]}}, "method 'b': .*length"),
        ({"predictions": {"a": [0.2, 0.4], "b": [0.1, np.nan]}}, "method 'b': .*NaN"),
    ],
)
def test_bad_input(kwargs, message):
    arguments = {"predictions": {"a": [0.2, 0.4], "b": [0.3, 0.6]}, "n_bootstraps": 5}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        compare([0, 1], **arguments)


def test_one_row_is_refused():
    # Every resample of one row is that row: zero-width intervals, whatever the noise.
    with pytest.raises(ValueError, match="at least 2 rows"):
        compare([1], {"a": [0.9], "b": [0.6]}, metrics=["brier"], n_bootstraps=100)


def test_too_few_replicates_call_nothing_significant():
    y, p = _calibrated_binary(3000, 1)
    predictions = {"raw": p**3, "calibrated": p}
    # The same comparison is clearly significant with enough replicates ...
    enough = compare(y, predictions, metrics=["brier"], n_bootstraps=40, random_state=0)
    assert enough.loc[("calibrated", "brier"), "significant"]
    # ... but one replicate is a zero-width "interval", which can exclude the estimate.
    with pytest.warns(UserWarning, match="n_bootstraps=1 is too few .* at least 40"):
        table = compare(y, predictions, metrics=["brier"], n_bootstraps=1, random_state=0)
    row = table.loc[("calibrated", "brier")]
    assert row["difference_ci_low"] == row["difference_ci_high"]
    assert not table["significant"].any()
    assert compare_module.fewest_bootstraps(0.5) == 4
    assert compare_module.fewest_bootstraps(0.99) == 200


def test_one_dimensional_and_two_column_forms_compare_as_equal():
    y, p = _calibrated_binary(500, 6)
    columns = np.column_stack([1 - p, p])
    table = compare(y, {"1-D": p, "columns": columns}, metrics=COMPARE_METRICS, n_bootstraps=50)
    assert (table["difference"] == 0).all()
    assert (table["difference_ci_low"] == 0).all() and (table["difference_ci_high"] == 0).all()
    assert not table["significant"].any()
    # Read as two columns, the Brier score is the two-column one (twice the 1-D value).
    assert table.loc[("1-D", "brier"), "value"] == pytest.approx(2 * brier_score(y, p), rel=1e-12)
    # One form only: each method's value is its function's.
    alone = compare(y, {"a": p, "b": p**2}, metrics=["brier"], n_bootstraps=50)
    assert alone.loc[("a", "brier"), "value"] == brier_score(y, p)


def test_methods_of_different_class_counts_are_refused():
    y, sharp, _ = _multiclass(50, 7)
    with pytest.raises(ValueError, match="different numbers of classes"):
        compare(y % 2, {"binary": sharp[:, 0], "three": sharp}, n_bootstraps=50)
