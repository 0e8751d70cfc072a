"""Reliability diagrams: the plotted data against independent oracles."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.image
import matplotlib.pyplot as plt
import matplotlib.text
import numpy as np
import pytest
from scipy.stats import binomtest
from sklearn.calibration import calibration_curve
from sklearn.linear_model import LogisticRegression

from reliacal.metrics import (
    binned_statistics,
    expected_calibration_error,
    smooth_reliability_curve,
)
from reliacal.plot import MIN_SMOOTH_DENSITY, ReliabilityDisplay, plot_reliability_diagrams


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def binary_data():
    rng = np.random.default_rng(0)
    y_prob = rng.beta(2.0, 2.0, size=2000)
    y_true = (rng.uniform(size=2000) < y_prob**1.5).astype(int)
    return y_true, y_prob


@pytest.fixture(scope="module")
def record(load_record):
    probs, labels = load_record("wideresnet-16-4-cifar-100")
    return labels[:3000], probs[:3000]


def bar_heights(display):
    return np.array([patch.get_height() for patch in display.bars_.patches])


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_bar_heights_match_scikit_learn_calibration_curve(binary_data, strategy):
    y_true, y_prob = binary_data
    display = ReliabilityDisplay.from_predictions(
        y_true, y_prob, mode="positive", n_bins=10, strategy=strategy
    )
    prob_true, prob_pred = calibration_curve(y_true, y_prob, n_bins=10, strategy=strategy)
    np.testing.assert_allclose(bar_heights(display), prob_true, rtol=1e-12)
    filled = display.binned_statistics.counts > 0
    np.testing.assert_allclose(
        display.binned_statistics.mean_confidence[filled], prob_pred, rtol=1e-12
    )


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_bars_are_the_binned_statistics(record, strategy):
    labels, probs = record
    display = ReliabilityDisplay.from_predictions(labels, probs, n_bins=15, strategy=strategy)
    expected = binned_statistics(labels, probs, n_bins=15, strategy=strategy)
    filled = expected.counts > 0
    np.testing.assert_array_equal(display.binned_statistics.counts, expected.counts)
    np.testing.assert_allclose(bar_heights(display), expected.accuracy[filled])
    lefts = np.array([patch.get_x() for patch in display.bars_.patches])
    widths = np.array([patch.get_width() for patch in display.bars_.patches])
    np.testing.assert_allclose(lefts, expected.edges[:-1][filled])
    np.testing.assert_allclose(lefts + widths, expected.edges[1:][filled])
    # The gap spans accuracy .. mean confidence of each bin.
    gap_bottoms = np.array([patch.get_y() for patch in display.gap_.patches])
    gap_tops = gap_bottoms + np.array([patch.get_height() for patch in display.gap_.patches])
    np.testing.assert_allclose(gap_bottoms, expected.accuracy[filled])
    np.testing.assert_allclose(gap_tops, expected.mean_confidence[filled])


def test_top_label_accuracy_by_hand():
    # Confidences 0.9 (correct), 0.8 (wrong), 0.55 (correct), 0.6 (correct); 5 bins.
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.55, 0.45], [0.4, 0.6]])
    labels = np.array([0, 0, 0, 1])
    display = ReliabilityDisplay.from_predictions(labels, probs, n_bins=5)
    np.testing.assert_array_equal(display.binned_statistics.counts, [0, 0, 2, 1, 1])
    np.testing.assert_allclose(bar_heights(display), [1.0, 0.0, 1.0])
    # ECE = 0.5 * |1 - 0.575| + 0.25 * |0 - 0.8| + 0.25 * |1 - 0.9| = 0.4375
    assert display.ece == pytest.approx(0.4375)
    assert "ECE = 43.75%" in display.bars_.get_label()


def test_histogram_shows_the_fraction_of_samples_per_bin(record):
    labels, probs = record
    display = ReliabilityDisplay.from_predictions(labels, probs, n_bins=15)
    (stairs,) = display.hist_ax_.patches
    counts = display.binned_statistics.counts
    np.testing.assert_allclose(stairs.get_data().values, counts / counts.sum())
    np.testing.assert_allclose(stairs.get_data().edges, display.binned_statistics.edges)


@pytest.mark.parametrize(
    ("interval", "method"), [("clopper-pearson", "exact"), ("wilson", "wilson")]
)
@pytest.mark.parametrize("confidence_level", [0.9, 0.95])
def test_intervals_match_scipy_binomtest_and_contain_the_bar(
    record, interval, method, confidence_level
):
    labels, probs = record
    display = ReliabilityDisplay.from_predictions(
        labels, probs, n_bins=15, interval=interval, confidence_level=confidence_level
    )
    statistics = display.binned_statistics
    lower, upper = display.accuracy_interval
    for b in range(statistics.n_bins):
        n = int(statistics.counts[b])
        if n == 0:
            assert np.isnan(lower[b]) and np.isnan(upper[b])
            continue
        k = int(round(statistics.accuracy[b] * n))
        oracle = binomtest(k, n).proportion_ci(confidence_level, method=method)
        assert lower[b] == pytest.approx(oracle.low, abs=1e-9)
        assert upper[b] == pytest.approx(oracle.high, abs=1e-9)
        assert lower[b] <= statistics.accuracy[b] <= upper[b]
    # The drawn error bars span exactly the interval around each bar.
    segments = display.errorbar_.lines[2][0].get_segments()
    filled = statistics.counts > 0
    np.testing.assert_allclose([s[0][1] for s in segments], lower[filled])
    np.testing.assert_allclose([s[1][1] for s in segments], upper[filled])


def test_intervals_at_the_extremes():
    # All ten positives in the last bin, no positive in the first: the exact interval is
    # [(alpha/2)^(1/n), 1] and [0, 1 - (alpha/2)^(1/n)].
    probs = np.array([0.95] * 10 + [0.05] * 10)
    labels = np.array([1] * 10 + [0] * 10)
    display = ReliabilityDisplay.from_predictions(
        labels, probs, mode="positive", n_bins=10, interval="clopper-pearson"
    )
    lower, upper = display.accuracy_interval
    assert (lower[-1], upper[-1]) == (pytest.approx(0.025**0.1), 1.0)
    assert (lower[0], upper[0]) == (0.0, pytest.approx(1 - 0.025**0.1))


def test_class_mode_is_the_one_vs_rest_problem(record):
    labels, probs = record
    display = ReliabilityDisplay.from_predictions(labels, probs, mode="class", class_=3, n_bins=5)
    prob_true, _ = calibration_curve(labels == 3, probs[:, 3], n_bins=5)
    np.testing.assert_allclose(bar_heights(display), prob_true)
    assert display.hist_ax_.get_xlabel() == "Predicted probability of class 3"
    assert display.ece == pytest.approx(
        expected_calibration_error(
            (labels == 3).astype(int), probs[:, 3], n_bins=5, mode="positive"
        )
    )


def test_from_estimator_uses_the_estimator_classes():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = np.array(["cat", "dog", "eel"])[np.argmax(X[:, :3] + rng.normal(size=(300, 3)), axis=1)]
    model = LogisticRegression().fit(X, y)
    display = ReliabilityDisplay.from_estimator(model, X, y, n_bins=8)
    expected = binned_statistics(y, model.predict_proba(X), n_bins=8, labels=model.classes_)
    np.testing.assert_allclose(display.binned_statistics.accuracy, expected.accuracy)
    assert display.name == "LogisticRegression"
    with pytest.raises(ValueError, match="predict_proba"):
        ReliabilityDisplay.from_estimator(object(), X, y)


def test_several_models_overlaid_on_one_axes(record):
    labels, probs = record
    fig, ax = plt.subplots()
    first = ReliabilityDisplay.from_predictions(labels, probs, name="raw", ax=ax, kind="line")
    sharpened = probs**2 / np.sum(probs**2, axis=1, keepdims=True)
    second = ReliabilityDisplay.from_predictions(
        labels, sharpened, name="sharp", ax=ax, kind="line"
    )
    assert first.ax_ is second.ax_ and second.hist_ax_ is None
    legend_texts = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend_texts[0] == "Perfect calibration"
    assert [t.split(" (")[0] for t in legend_texts[1:]] == ["raw", "sharp"]
    diagonals = [line for line in ax.get_lines() if line.get_gid() == "reliacal-diagonal"]
    assert len(diagonals) == 1
    filled = second.binned_statistics.counts > 0
    np.testing.assert_allclose(
        second.line_.get_xdata(), second.binned_statistics.mean_confidence[filled]
    )
    np.testing.assert_allclose(second.line_.get_ydata(), second.binned_statistics.accuracy[filled])


def test_plot_reliability_diagrams_side_by_side_and_overlay(record, tmp_path):
    labels, probs = record
    predictions = {"raw": probs, "flat": np.full_like(probs, 1.0 / probs.shape[1])}
    displays = plot_reliability_diagrams(labels, predictions, interval="wilson")
    assert list(displays) == ["raw", "flat"]
    figure = displays["raw"].figure_
    assert displays["flat"].figure_ is figure and len(figure.axes) == 4
    assert displays["raw"].ax_ is not displays["flat"].ax_
    (legend,) = figure.legends
    assert [text.get_text() for text in legend.get_texts()] == [
        "Perfect calibration",
        "Accuracy per bin",
        "Gap",
        "95% Wilson interval",
    ]
    ece = expected_calibration_error(labels, probs)
    assert displays["raw"].ax_.get_title() == f"raw\nECE = {100 * ece:.2f}%"
    # A constant 1/K prediction fills exactly one bin, whose accuracy is the label frequency.
    assert bar_heights(displays["flat"]) == pytest.approx([np.mean(labels == 0)])
    path = tmp_path / "side.png"
    figure.savefig(path)
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[1] > image.shape[0]

    overlaid = plot_reliability_diagrams(labels, predictions, overlay=True)
    assert overlaid["raw"].ax_ is overlaid["flat"].ax_
    assert len(overlaid["raw"].figure_.axes) == 2
    with pytest.raises(ValueError, match="empty"):
        plot_reliability_diagrams(labels, {})


def test_plot_reliability_diagrams_names_the_model_with_bad_probabilities():
    y_true = np.array([0, 1, 1, 0])
    good = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]])
    with pytest.raises(ValueError, match="^model 'bad': rows of y_prob"):
        plot_reliability_diagrams(y_true, {"good": good, "bad": np.full((4, 2), 0.6)})


def test_smooth_curve_is_the_metrics_curve(tmp_path):
    rng = np.random.default_rng(2)
    y_prob = rng.uniform(0.5, 1.0, size=1000)  # nothing below 0.5: no curve far below it
    y_true = (rng.uniform(size=1000) < y_prob**2).astype(int)
    display = ReliabilityDisplay.from_predictions(y_true, y_prob, mode="positive", kind="smooth")
    grid, accuracy, density, _ = smooth_reliability_curve(y_true, y_prob, mode="positive")
    np.testing.assert_allclose(display.line_.get_xdata(), grid)
    dense = density >= MIN_SMOOTH_DENSITY
    assert not dense[grid < 0.2].any() and dense[grid > 0.4].all()
    np.testing.assert_allclose(display.line_.get_ydata()[dense], accuracy[dense])
    assert np.all(np.isnan(display.line_.get_ydata()[~dense]))
    np.testing.assert_allclose(display.hist_ax_.get_lines()[0].get_ydata(), density)
    assert "smECE" in display.line_.get_label()
    display.figure_.savefig(tmp_path / "smooth.png")
    assert (tmp_path / "smooth.png").stat().st_size > 1000


def test_saves_a_png_without_calling_show(record, tmp_path, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the library must not call plt.show()")

    monkeypatch.setattr(plt, "show", forbidden)
    labels, probs = record
    display = ReliabilityDisplay.from_predictions(
        labels, probs, name="WRN-16-4", interval="clopper-pearson"
    )
    path = tmp_path / "diagram.png"
    display.figure_.savefig(path)
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert display.ax_.get_xlim() == (0.0, 1.0) and display.ax_.get_ylim() == (0.0, 1.0)
    assert display.ax_.get_ylabel() == "Accuracy"
    assert display.hist_ax_.get_xlabel() == "Confidence (top-label probability)"


def test_replot_on_a_new_axes_keeps_the_data(record):
    labels, probs = record
    display = ReliabilityDisplay.from_predictions(labels, probs, n_bins=10)
    heights = bar_heights(display)
    fig, ax = plt.subplots()
    display.plot(ax=ax, name="again")
    assert display.ax_ is ax and display.hist_ax_ is None
    np.testing.assert_allclose(bar_heights(display), heights)
    assert display.bars_.get_label().startswith("again")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "classwise"}, "mode"),
        ({"kind": "violin"}, "kind"),
        ({"interval": "normal"}, "interval"),
        ({"interval": "wilson", "confidence_level": 1.5}, "confidence_level"),
        ({"mode": "class"}, "class_"),
        ({"mode": "class", "class_": 7}, "not among the classes"),
        ({"class_": 1}, "class_"),
        ({"n_bins": 0}, "n_bins"),
        ({"strategy": "kmeans"}, "strategy"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    probs = np.array([[0.7, 0.3], [0.4, 0.6], [0.2, 0.8]])
    with pytest.raises(ValueError, match=message):
        ReliabilityDisplay.from_predictions([0, 1, 1], probs, **kwargs)


def test_bad_probabilities_raise_value_error():
    with pytest.raises(ValueError):
        ReliabilityDisplay.from_predictions([0, 1], np.array([[np.nan, 1.0], [0.5, 0.5]]))
    with pytest.raises(ValueError):
        ReliabilityDisplay.from_predictions([0, 1], np.array([[3.0, -1.0], [0.5, 0.5]]))


def test_smooth_kind_needs_the_curve(record):
    labels, probs = record
    display = ReliabilityDisplay.from_predictions(labels, probs)
    with pytest.raises(ValueError, match="smooth"):
        display.plot(kind="smooth")


def test_labels_default_to_column_indices_as_documented():
    # The docstring once promised "the sorted unique values of y_true": [3, 5] would
    # then name the two columns. They do not: without labels, y_true holds columns.
    y_prob = [[0.8, 0.2], [0.3, 0.7]]
    with pytest.raises(ValueError, match="not among the classes 0..1"):
        ReliabilityDisplay.from_predictions([3, 5], y_prob)
    named = ReliabilityDisplay.from_predictions([3, 5], y_prob, labels=[3, 5], n_bins=5)
    indexed = ReliabilityDisplay.from_predictions([0, 1], y_prob, n_bins=5)
    assert named.ece == indexed.ece == pytest.approx(0.25)  # |1 - .8| and |1 - .7|, halved


def _texts_outside_the_figure(figure, dpi):
    """The drawn texts (ticks, titles, axis labels, legend entries) not wholly inside the
    figure with a twentieth of an inch to spare (a label touching the edge looks cut)."""
    figure.set_dpi(dpi)
    figure.canvas.draw()
    inside = figure.bbox.padded(-0.05 * dpi)
    outside = []
    for text in figure.findobj(matplotlib.text.Text):
        if not (text.get_visible() and text.get_text() and text.get_figure() is not None):
            continue
        extent = text.get_window_extent()
        if (
            extent.x0 < inside.x0
            or extent.x1 > inside.x1
            or extent.y0 < inside.y0
            or extent.y1 > inside.y1
        ):
            outside.append((text.get_text(), tuple(np.round(extent.extents, 1))))
    return outside


@pytest.mark.parametrize(
    ("n_models", "interval"), [(1, None), (1, "wilson"), (2, None), (6, "wilson")]
)
def test_side_by_side_labels_and_legend_lie_inside_the_figure(record, n_models, interval):
    labels, probs = record
    predictions = {f"model {index}": probs for index in range(n_models)}
    displays = plot_reliability_diagrams(labels, predictions, interval=interval)
    figure = displays["model 0"].figure_
    # The demo saves at 110 dpi, the command at 120: the layout is redone at each.
    for dpi in (110, 120):
        assert _texts_outside_the_figure(figure, dpi) == []
    (legend,) = figure.legends
    assert len(legend.get_texts()) == (4 if interval else 3)
    drawn = {text.get_text() for text in figure.findobj(matplotlib.text.Text)}
    assert {"0.0", "1.0"} <= drawn


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "bars", "interval": "clopper-pearson"},
        {"kind": "line", "interval": "wilson"},
        {"kind": "smooth"},
        {"kind": "smooth", "bootstrap": 20, "random_state": 0},  # band, and the CI in the title
        {"kind": "bars", "mode": "class", "class_": 3},
    ],
)
def test_a_display_of_its_own_keeps_its_labels_inside(record, kwargs):
    labels, probs = record
    display = ReliabilityDisplay.from_predictions(labels, probs, name="WRN-16-4", **kwargs)
    for dpi in (100, 120):
        assert _texts_outside_the_figure(display.figure_, dpi) == []


def test_overlay_keeps_its_labels_inside(record):
    labels, probs = record
    sharpened = probs**2 / np.sum(probs**2, axis=1, keepdims=True)
    displays = plot_reliability_diagrams(labels, {"raw": probs, "sharp": sharpened}, overlay=True)
    assert _texts_outside_the_figure(displays["raw"].figure_, 110) == []


def test_a_single_panel_is_titled_with_the_model_key(record):
    labels, probs = record
    displays = plot_reliability_diagrams(labels, {"HGB": probs})
    ece = expected_calibration_error(labels, probs)
    assert displays["HGB"].ax_.get_title() == f"HGB\nECE = {100 * ece:.2f}%"


def test_the_command_titles_its_diagram_with_the_model_key(record, tmp_path, monkeypatch):
    import reliacal.plot
    from reliacal.cli import main

    drawn = []

    def recording(*args, **kwargs):
        drawn.append(plot_reliability_diagrams(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(reliacal.plot, "plot_reliability_diagrams", recording)
    labels, probs = record
    np.savez(tmp_path / "preds.npz", probs_hgb=probs, probs_raw=probs, labels=labels)
    plot = tmp_path / "eval.png"
    main(["evaluate", str(tmp_path / "preds.npz"), "--probs-key", "probs_hgb", "--plot", str(plot)])
    main(["evaluate", str(tmp_path / "preds.npz"), "--probs-key", "probs_hgb", "--name", "HGB"])
    main(
        ["evaluate", str(tmp_path / "preds.npz"), "--probs-key", "probs_raw", "--name", "HGB"]
        + ["--plot", str(tmp_path / "named.png")]
    )
    assert plot.is_file()
    titles = [next(iter(displays.values())).ax_.get_title() for displays in drawn]
    assert [title.split("\n")[0] for title in titles] == ["probs_hgb", "HGB"]


def _mean_luminance(image, ax, x_range, y_range):
    """Mean luminance of the rendered pixels inside a rectangle given in data coordinates."""
    height = image.shape[0]
    (x0, y0), (x1, y1) = ax.transData.transform(
        [(x_range[0], y_range[0]), (x_range[1], y_range[1])]
    )
    rows = slice(int(height - y1) + 2, int(height - y0) - 2)
    columns = slice(int(x0) + 2, int(x1) - 2)
    pixels = image[rows, columns, :3]
    return float(np.mean(pixels @ np.array([0.2126, 0.7152, 0.0722])))


def test_gap_above_confidence_lies_between_the_diagonal_and_the_bar_top_lighter_than_the_bar():
    # One bin per side: confidence 0.3 with accuracy 0.75 (under-confident), confidence 0.9
    # with accuracy 0.5 (over-confident).
    y_prob = np.array([0.3] * 4 + [0.9] * 4)
    y_true = np.array([1, 1, 1, 0, 1, 1, 0, 0])
    figure, ax = plt.subplots(figsize=(4, 4), dpi=100)
    display = ReliabilityDisplay.from_predictions(
        y_true, y_prob, mode="positive", n_bins=5, ax=ax, hist_ax=False, show_legend=False
    )
    under, over = display.gap_.patches
    for patch, (low, high) in [(under, (0.3, 0.75)), (over, (0.5, 0.9))]:
        y0, y1 = sorted([patch.get_y(), patch.get_y() + patch.get_height()])
        assert (y0, y1) == (pytest.approx(low), pytest.approx(high))
        assert patch.get_facecolor()[3] < 1.0  # translucent: the bar shows through
    assert under.get_x() == pytest.approx(0.2) and over.get_x() == pytest.approx(0.8)
    # Drawn over the bar, the band lightens it (a dark block would be darker than the bar).
    figure.canvas.draw()
    image = np.asarray(figure.canvas.buffer_rgba(), dtype=np.float64) / 255.0
    bar = _mean_luminance(image, ax, (0.2, 0.4), (0.05, 0.25))
    band_on_bar = _mean_luminance(image, ax, (0.2, 0.4), (0.35, 0.7))
    band_above_bar = _mean_luminance(image, ax, (0.8, 1.0), (0.55, 0.85))
    assert bar + 0.1 < band_on_bar < band_above_bar
    # And the band reads as the same band on both sides of the diagonal, not as a block.
    assert band_above_bar - band_on_bar < 0.12
