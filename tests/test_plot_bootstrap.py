"""Bootstrap band around the smooth reliability curve and the ECE interval in the title."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_rgb

from reliacal.metrics import (
    compare,
    expected_calibration_error,
    smooth_reliability_band,
    smooth_reliability_curve,
)
from reliacal.plot import ReliabilityDisplay


@pytest.fixture
def binary_data():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=600)
    return (rng.uniform(size=600) < p**1.3).astype(int), p


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_band_is_the_percentiles_of_resampled_curves(binary_data):
    y, p = binary_data
    band = smooth_reliability_band(
        y, p, n_bootstraps=20, confidence_level=0.8, random_state=5, mode="positive"
    )
    curve = smooth_reliability_curve(y, p, mode="positive")
    np.testing.assert_array_equal(band.accuracy, curve.accuracy)
    assert band.bandwidth == curve.bandwidth
    # Oracle: the documented resampling, each replicate smoothed at the full-data bandwidth.
    indices = np.random.default_rng(5).integers(0, 600, (20, 600))
    replicates = [
        smooth_reliability_curve(y[i], p[i], mode="positive", bandwidth=curve.bandwidth).accuracy
        for i in indices
    ]
    lower, upper = np.percentile(replicates, [10, 90], axis=0)
    np.testing.assert_allclose(band.lower, lower, rtol=0, atol=1e-12)
    np.testing.assert_allclose(band.upper, upper, rtol=0, atol=1e-12)


def test_band_bad_input(binary_data):
    y, p = binary_data
    with pytest.raises(ValueError, match="n_bootstraps must be an integer >= 1"):
        smooth_reliability_band(y, p, n_bootstraps=0)
    with pytest.raises(ValueError, match="confidence_level"):
        smooth_reliability_band(y, p, confidence_level=0.0)


def test_display_draws_the_band_and_the_ece_interval(binary_data):
    y, p = binary_data
    display = ReliabilityDisplay.from_predictions(
        y, p, mode="positive", kind="smooth", bootstrap=30, random_state=1
    )
    # The same draws, in the same order: the ECE interval first, then the band.
    rng = np.random.default_rng(1)
    row = compare(
        y, {"m": p}, metrics=["ece"], n_bootstraps=30, random_state=rng, mode="positive"
    ).loc[("m", "ece")]
    band = smooth_reliability_band(y, p, n_bootstraps=30, random_state=rng, mode="positive")
    assert display.ece_interval == (row["ci_low"], row["ci_high"])
    np.testing.assert_array_equal(display.smooth_band[0], band.lower)
    np.testing.assert_array_equal(display.smooth_band[1], band.upper)
    assert display.band_ is not None
    assert display.band_ in display.ax_.collections
    ece = expected_calibration_error(y, p, mode="positive")
    title = display.ax_.get_title()
    assert f"ECE = {100 * ece:.2f}%" in title
    assert f"95% CI {100 * row['ci_low']:.2f}-{100 * row['ci_high']:.2f}%" in title
    labels = display.ax_.get_legend_handles_labels()[1]
    assert "95% bootstrap band" in labels


def test_band_is_translucent_and_hidden_where_the_curve_is(binary_data):
    y, p = binary_data
    p = 0.5 + 0.5 * p  # nothing below 0.5: no curve, and no band, far below it
    display = ReliabilityDisplay.from_predictions(
        y, p, mode="positive", kind="smooth", bootstrap=10, random_state=0
    )
    assert 0.0 < display.band_.get_alpha() < 1.0  # the curve shows through its band
    np.testing.assert_allclose(
        display.band_.get_facecolor()[0][:3], to_rgb(display.line_.get_color())
    )
    shown = ~np.isnan(display.line_.get_ydata())
    assert shown.any() and not shown.all()
    grid = display.line_.get_xdata()
    band_x = np.concatenate([path.vertices[:, 0] for path in display.band_.get_paths()])
    assert band_x.min() >= grid[shown].min() - 1e-12
    assert band_x.max() <= grid[shown].max() + 1e-12


def test_bars_get_the_interval_title_without_a_band(binary_data):
    y, p = binary_data
    display = ReliabilityDisplay.from_predictions(
        y, p, mode="positive", strategy="quantile", bootstrap=10, random_state=0
    )
    assert display.smooth_band is None and display.band_ is None
    row = compare(
        y, {"m": p}, metrics=["adaptive_ece"], n_bootstraps=10, random_state=0, mode="positive"
    ).loc[("m", "adaptive_ece")]
    assert display.ece_interval == (row["ci_low"], row["ci_high"])
    assert "CI" in display.ax_.get_title()


def test_no_bootstrap_no_title(binary_data):
    y, p = binary_data
    display = ReliabilityDisplay.from_predictions(y, p, mode="positive", kind="smooth")
    assert display.smooth_band is None and display.ece_interval is None
    assert display.band_ is None
    assert display.ax_.get_title() == ""


@pytest.mark.parametrize("bootstrap", [-1, 2.5, True])
def test_bad_bootstrap(binary_data, bootstrap):
    y, p = binary_data
    with pytest.raises(ValueError, match="bootstrap must be a non-negative integer"):
        ReliabilityDisplay.from_predictions(y, p, mode="positive", bootstrap=bootstrap)
