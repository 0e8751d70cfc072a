"""Reliability diagrams, following scikit-learn's Display pattern.

:class:`ReliabilityDisplay` keeps the per-bin data of
:func:`reliacal.metrics.binned_statistics` (the same bins as every binned
metric of the package), the ECE, the figure and the axes. It draws the
classic diagram of Guo et al. (2017): one bar per bin whose height is the
observed accuracy, the diagonal of perfect calibration, the gap between the
bar and the bin's mean confidence, and a histogram of how many samples each
bin holds. Optional Wilson or Clopper-Pearson intervals on each bin's
accuracy show which gaps are noise; a kernel-smoothed curve (the smooth-ECE
construction of Blasiok and Nakkiran, 2023) replaces the bars on request.

Nothing here calls ``plt.show()``: every function returns objects, which
Jupyter renders inline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from reliacal._validation import check_option, check_probabilities
from reliacal.metrics import (
    binned_statistics,
    compare,
    expected_calibration_error,
    per_model,
    smooth_calibration_error,
    smooth_reliability_band,
    smooth_reliability_curve,
)
from reliacal.metrics.modes import CLASS, PLOT_MODES, POSITIVE, TOP_LABEL, check_mode

__all__ = ["MIN_SMOOTH_DENSITY", "ReliabilityDisplay", "plot_reliability_diagrams"]

_KINDS = ("bars", "line", "smooth")
_INTERVALS = ("wilson", "clopper-pearson")
_DIAGONAL_ID = "reliacal-diagonal"
# The smoothed curve is hidden where the density of confidences (which integrates to 1
# over [0, 1]) is below this: a tenth of the uniform density.
MIN_SMOOTH_DENSITY = 0.1


def _binomial_interval(
    successes: np.ndarray, trials: np.ndarray, method: str, confidence_level: float
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided interval for a binomial proportion, element-wise (NaN where trials == 0).

    Wilson (1927) score interval: centre ``(k + z^2/2) / (n + z^2)``, half-width
    ``z sqrt(n) / (n + z^2) * sqrt(p (1 - p) + z^2 / (4 n))`` with ``p = k / n``.
    Clopper-Pearson (1934) exact interval: the ``alpha/2`` and ``1 - alpha/2``
    quantiles of ``Beta(k, n - k + 1)`` and ``Beta(k + 1, n - k)``, with the
    bounds 0 at ``k = 0`` and 1 at ``k = n``.
    """
    from scipy.stats import beta, norm

    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    alpha = 1.0 - confidence_level
    lower = np.full(k.shape, np.nan)
    upper = np.full(k.shape, np.nan)
    filled = n > 0
    k, n = k[filled], n[filled]
    if method == "wilson":
        z = norm.ppf(1.0 - alpha / 2.0)
        p = k / n
        centre = (k + z**2 / 2.0) / (n + z**2)
        half_width = z * np.sqrt(n) / (n + z**2) * np.sqrt(p * (1.0 - p) + z**2 / (4.0 * n))
        lower[filled] = np.clip(centre - half_width, 0.0, 1.0)
        upper[filled] = np.clip(centre + half_width, 0.0, 1.0)
    else:
        with np.errstate(invalid="ignore"):  # Beta(0, .) at k = 0 and Beta(., 0) at k = n
            low = beta.ppf(alpha / 2.0, k, n - k + 1.0)
            high = beta.ppf(1.0 - alpha / 2.0, k + 1.0, n - k)
        lower[filled] = np.where(k == 0, 0.0, low)
        upper[filled] = np.where(k == n, 1.0, high)
    return lower, upper


class ReliabilityDisplay:
    """Reliability diagram: observed accuracy per confidence bin against the diagonal.

    Build it with :meth:`from_predictions` or :meth:`from_estimator`; the
    constructor takes data that is already binned. A perfectly calibrated
    model has bars on the diagonal; bars below it mean over-confidence.

    Parameters
    ----------
    binned_statistics : reliacal.metrics.BinnedStatistics
        Per-bin edges, counts, mean confidences and accuracies, from
        :func:`reliacal.metrics.binned_statistics`.
    ece : float
        The expected calibration error shown in the legend (a fraction;
        shown in percent), ``sum_b (n_b / n) |acc_b - conf_b|``.
    name : str or None, default=None
        Name of the model in the legend.
    mode : {"top-label", "positive", "class"}, default="top-label"
        What the bins hold: the top-label confidence against the accuracy,
        the positive-class probability of a binary problem against the
        frequency of the positive class, or the probability of class
        ``class_`` against the frequency of that class.
    class_ : label or None, default=None
        The class of ``mode="class"`` (for the axis label).
    interval : {None, "wilson", "clopper-pearson"}, default=None
        Per-bin interval on the accuracy, from the bin's count and number of
        correct predictions: Wilson's score interval, or the exact
        Clopper-Pearson interval.
    confidence_level : float, default=0.95
        Coverage of the interval.
    smooth_curve : tuple or None, default=None
        ``(grid, smoothed_accuracy, density, bandwidth)`` from
        :func:`reliacal.metrics.smooth_reliability_curve`; needed for
        ``kind="smooth"``.
    smooth_ece : float or None, default=None
        The smooth ECE shown in the legend of ``kind="smooth"``.
    kind : {"bars", "line", "smooth"}, default="bars"
        What :meth:`plot` draws by default: bars per bin, a line through the
        points (mean confidence, accuracy) (clearer when several models share
        one axes), or the smoothed curve. The smoothed curve is drawn only
        where the smoothed density of the confidences is at least
        ``MIN_SMOOTH_DENSITY`` (0.1, a tenth of the uniform density): with
        almost no samples under the kernel the estimate means nothing.
    smooth_band : tuple or None, default=None
        ``(lower, upper)`` on the smooth curve's grid: a bootstrap band drawn
        around the smoothed curve (``from_predictions(..., bootstrap=B)``).
    ece_interval : tuple or None, default=None
        ``(low, high)`` of the ECE, shown with it in the title.

    Attributes
    ----------
    accuracy_interval : tuple of ndarray or None
        ``(lower, upper)`` per bin (NaN for empty bins), when ``interval`` is set.
    ax_ : matplotlib.axes.Axes
        The reliability axes, after :meth:`plot`.
    hist_ax_ : matplotlib.axes.Axes or None
        The axes with the histogram of samples per bin (or the density of
        the smooth curve), or None when none was drawn.
    figure_ : matplotlib.figure.Figure
        The figure holding ``ax_``.
    bars_ : matplotlib.container.BarContainer or None
        The accuracy bars of ``kind="bars"`` (non-empty bins only).
    line_ : matplotlib.lines.Line2D or None
        The curve of ``kind="line"`` or ``"smooth"``.
    gap_ : matplotlib.container.BarContainer or None
        The marked gaps between accuracy and mean confidence.
    band_ : matplotlib.collections.PolyCollection or None
        The bootstrap band around the smoothed curve.
    errorbar_ : matplotlib.container.ErrorbarContainer or None
        The per-bin intervals: black on bars (with a legend entry), in the
        model's colour on a line.

    See Also
    --------
    reliacal.metrics.binned_statistics : The per-bin data.
    reliacal.metrics.calibration_report : The metric table to read beside it.
    plot_reliability_diagrams : Several models side by side or overlaid.

    References
    ----------
    C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger, "On Calibration of Modern
    Neural Networks", ICML 2017. J. Blasiok, P. Nakkiran, "Smooth ECE:
    Principled Reliability Diagrams via Kernel Smoothing", ICLR 2024.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.plot import ReliabilityDisplay
    >>> rng = np.random.default_rng(0)
    >>> probs = rng.dirichlet(np.ones(3) * 0.5, size=500)
    >>> labels = np.array([rng.choice(3, p=row) for row in probs])
    >>> display = ReliabilityDisplay.from_predictions(
    ...     labels, probs, name="model", n_bins=10, interval="wilson"
    ... )
    >>> display.binned_statistics.counts.sum()
    np.int64(500)
    >>> display.ax_.get_ylabel()
    'Accuracy'
    """

    def __init__(
        self,
        binned_statistics: Any,
        *,
        ece: float,
        name: str | None = None,
        mode: str = "top-label",
        class_: Any = None,
        interval: str | None = None,
        confidence_level: float = 0.95,
        smooth_curve: tuple | None = None,
        smooth_ece: float | None = None,
        kind: str = "bars",
        smooth_band: tuple | None = None,
        ece_interval: tuple | None = None,
    ):
        check_mode(mode, PLOT_MODES)
        if interval is not None:
            check_option(interval, "interval", _INTERVALS)
        check_option(kind, "kind", _KINDS)
        if not 0.0 < confidence_level < 1.0:
            raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level}")
        self.binned_statistics = binned_statistics
        self.ece = float(ece)
        self.name = name
        self.mode = mode
        self.class_ = class_
        self.interval = interval
        self.confidence_level = confidence_level
        self.smooth_curve = smooth_curve
        self.smooth_ece = smooth_ece
        self.kind = kind
        self.smooth_band = smooth_band
        self.ece_interval = ece_interval
        self.accuracy_interval = None
        if interval is not None:
            counts = np.asarray(binned_statistics.counts)
            with np.errstate(invalid="ignore"):  # empty bins hold NaN accuracy
                correct = np.rint(np.nan_to_num(binned_statistics.accuracy) * counts)
            self.accuracy_interval = _binomial_interval(correct, counts, interval, confidence_level)

    @classmethod
    def from_predictions(
        cls,
        y_true: Any,
        y_prob: Any,
        *,
        name: str | None = None,
        n_bins: int = 15,
        strategy: str = "uniform",
        mode: str = "top-label",
        class_: Any = None,
        labels: Any = None,
        interval: str | None = None,
        confidence_level: float = 0.95,
        kind: str = "bars",
        bootstrap: int = 0,
        random_state: Any = None,
        ax: Any = None,
        hist_ax: Any = None,
        **plot_kwargs: Any,
    ) -> ReliabilityDisplay:
        """Bin predicted probabilities and draw the reliability diagram.

        Parameters
        ----------
        y_true : array-like of shape (n_samples,)
            True labels.
        y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
            Predicted probabilities; 1-D input is the positive-class
            probability of a binary problem.
        name : str or None, default=None
            Model name for the legend.
        n_bins : int, default=15
            Number of bins.
        strategy : {"uniform", "quantile"}, default="uniform"
            Equal-width bins or equal-mass bins (the conventions of
            :func:`reliacal.metrics.binned_statistics`).
        mode : {"top-label", "positive", "class"}, default="top-label"
            See :class:`ReliabilityDisplay`.
        class_ : label or None, default=None
            The class whose probability ``mode="class"`` bins (required there).
        labels : array-like or None, default=None
            The class of each column of ``y_prob``. Without it, ``y_true``
            must hold column indices ``0..K-1`` (``0``/``1`` for 1-D
            ``y_prob``); string labels need ``labels``.
        interval : {None, "wilson", "clopper-pearson"}, default=None
            Per-bin interval on the accuracy.
        confidence_level : float, default=0.95
            Coverage of the interval.
        kind : {"bars", "line", "smooth"}, default="bars"
            Bars per bin, a line through the bins, or the kernel-smoothed
            curve of :func:`reliacal.metrics.smooth_reliability_curve`.
        bootstrap : int, default=0
            Bootstrap replicates (0: none). With ``B > 0`` the title shows the
            ECE with its ``confidence_level`` percentile interval
            (:func:`reliacal.metrics.compare`), and ``kind="smooth"`` draws a
            pointwise bootstrap band around the curve (same bandwidth in every
            replicate).
        random_state : int, numpy Generator or None, default=None
            Seed of the bootstrap.
        ax, hist_ax : matplotlib Axes or None, default=None
            Where to draw; see :meth:`plot`.
        **plot_kwargs
            Passed to :meth:`plot`.

        Returns
        -------
        ReliabilityDisplay

        Examples
        --------
        >>> import numpy as np
        >>> y_prob = np.array([0.1, 0.3, 0.35, 0.8, 0.9, 0.95])
        >>> y_true = np.array([0, 0, 1, 1, 1, 1])
        >>> display = ReliabilityDisplay.from_predictions(
        ...     y_true, y_prob, mode="positive", n_bins=5, name="toy"
        ... )
        >>> display.binned_statistics.counts  # 0.8 lies on an edge: the lower bin holds it
        array([1, 2, 0, 1, 2])
        >>> round(display.ece, 4)
        0.1333
        """
        display = cls._from_data(
            y_true,
            y_prob,
            name=name,
            n_bins=n_bins,
            strategy=strategy,
            mode=mode,
            class_=class_,
            labels=labels,
            interval=interval,
            confidence_level=confidence_level,
            kind=kind,
            bootstrap=bootstrap,
            random_state=random_state,
        )
        return display.plot(ax=ax, hist_ax=hist_ax, **plot_kwargs)

    @classmethod
    def _from_data(
        cls,
        y_true,
        y_prob,
        *,
        name,
        n_bins,
        strategy,
        mode,
        class_,
        labels,
        interval,
        confidence_level,
        kind,
        bootstrap=0,
        random_state=None,
    ) -> ReliabilityDisplay:
        """Bin the data into a display, without drawing it."""
        check_mode(mode, PLOT_MODES)
        check_option(kind, "kind", _KINDS)
        if mode == CLASS:
            y_true, y_prob = _one_class_problem(y_true, y_prob, class_, labels)
            metric_mode, metric_labels = POSITIVE, [0, 1]
        else:
            if class_ is not None:
                raise ValueError('class_ is only used with mode="class"')
            metric_mode, metric_labels = mode, labels
        binning = {"n_bins": n_bins, "strategy": strategy, "mode": metric_mode}
        statistics = binned_statistics(y_true, y_prob, labels=metric_labels, **binning)
        ece = expected_calibration_error(y_true, y_prob, labels=metric_labels, **binning)
        smooth_curve = smooth_ece = None
        if kind == "smooth":
            smooth_curve = smooth_reliability_curve(
                y_true, y_prob, mode=metric_mode, labels=metric_labels
            )
            smooth_ece = smooth_calibration_error(
                y_true, y_prob, mode=metric_mode, labels=metric_labels
            )
        smooth_band, ece_interval = _bootstrap_extras(
            y_true, y_prob, binning, metric_labels, kind, bootstrap, random_state, confidence_level
        )
        return cls(
            statistics,
            ece=ece,
            name=name,
            mode=mode,
            class_=class_,
            interval=interval,
            confidence_level=confidence_level,
            smooth_curve=smooth_curve,
            smooth_ece=smooth_ece,
            kind=kind,
            smooth_band=smooth_band,
            ece_interval=ece_interval,
        )

    @classmethod
    def from_estimator(
        cls,
        estimator: Any,
        X: Any,
        y: Any,
        *,
        name: str | None = None,
        mode: str = "top-label",
        **kwargs: Any,
    ) -> ReliabilityDisplay:
        """Draw the reliability diagram of a fitted estimator on ``(X, y)``.

        Any fitted classifier with ``predict_proba`` works: reliacal's
        calibrators or scikit-learn's classifiers. Its ``classes_`` (when
        present) maps the labels to the columns of ``predict_proba``.

        Parameters
        ----------
        estimator : fitted classifier
            Has ``predict_proba(X)``.
        X : array-like
            Input of ``predict_proba``.
        y : array-like of shape (n_samples,)
            True labels.
        name : str or None, default=None
            Legend name; default: the estimator's class name.
        mode : {"top-label", "positive", "class"}, default="top-label"
            With ``"positive"``, the probability of ``classes_[1]`` is binned.
        **kwargs
            Passed to :meth:`from_predictions`.

        Returns
        -------
        ReliabilityDisplay

        Examples
        --------
        >>> from sklearn.datasets import make_classification
        >>> from sklearn.linear_model import LogisticRegression
        >>> X, y = make_classification(n_samples=300, n_classes=3, n_informative=4,
        ...                            random_state=0)
        >>> model = LogisticRegression().fit(X, y)
        >>> display = ReliabilityDisplay.from_estimator(model, X, y, n_bins=10)
        >>> display.name
        'LogisticRegression'
        """
        if not hasattr(estimator, "predict_proba"):
            raise ValueError(f"{type(estimator).__name__} has no predict_proba method")
        y_prob = estimator.predict_proba(X)
        kwargs.setdefault("labels", getattr(estimator, "classes_", None))
        return cls.from_predictions(
            y, y_prob, name=name or type(estimator).__name__, mode=mode, **kwargs
        )

    def plot(
        self,
        ax: Any = None,
        *,
        hist_ax: Any = None,
        name: str | None = None,
        kind: str | None = None,
        color: Any = None,
        show_gap: bool = True,
        show_legend: bool = True,
        **kwargs: Any,
    ) -> ReliabilityDisplay:
        """Draw the diagram.

        Parameters
        ----------
        ax : matplotlib Axes or None, default=None
            The axes of the diagram. ``None`` makes a new figure with the
            diagram on top and a histogram axes below (``hist_ax_``). Drawing
            a second display on the same ``ax`` overlays the two models.
        hist_ax : matplotlib Axes, False or None, default=None
            Where the per-bin sample fractions (or the density of the smooth
            curve) go. ``None``: the axes below ``ax`` when this method made
            the figure, otherwise none, and the bars are shaded by their
            share of the samples instead. ``False``: no histogram.
        name : str or None, default=None
            Overrides the legend name; ``""`` shows the ECE alone.
        kind : {"bars", "line", "smooth"} or None, default=None
            Overrides the kind given at construction.
        color : matplotlib color or None, default=None
            The model's colour; default: the axes' next colour.
        show_gap : bool, default=True
            Mark the gap between each bin's accuracy and its mean confidence
            for ``kind="bars"``: a light red, hatched, translucent band between
            the bar's top and the diagonal, above the bar or on it.
        show_legend : bool, default=True
            Draw the legend (with the ECE).
        **kwargs
            Passed to the call that draws the model (``Axes.bar`` or
            ``Axes.plot``).

        Returns
        -------
        ReliabilityDisplay
            ``self``, with ``ax_``, ``hist_ax_`` and ``figure_`` set.

        Examples
        --------
        >>> import matplotlib.pyplot as plt
        >>> y_prob = np.array([0.1, 0.3, 0.35, 0.8, 0.9, 0.95])
        >>> y_true = np.array([0, 0, 1, 1, 1, 1])
        >>> display = ReliabilityDisplay.from_predictions(
        ...     y_true, y_prob, mode="positive", n_bins=5, name="toy"
        ... )
        >>> figure, ax = plt.subplots()
        >>> display.plot(ax=ax, kind="line").line_.get_label()
        'toy (ECE = 13.33%)'
        >>> display.hist_ax_ is None  # an axes of its own: the bins' shares are not drawn
        True
        """
        kind = self.kind if kind is None else kind
        check_option(kind, "kind", _KINDS)
        if kind == "smooth" and self.smooth_curve is None:
            raise ValueError(
                'kind="smooth" needs the smoothed curve: build the display with '
                'from_predictions(..., kind="smooth")'
            )
        ax, hist_ax = _diagram_axes(ax, hist_ax)
        _draw_diagonal(ax)
        name = self.name if name is None else name
        if kind == "smooth":
            label = _legend_label(name, "smECE", self.smooth_ece)
        else:
            label = _legend_label(name, "ECE", self.ece)
        bins = _FilledBins.of(self.binned_statistics)

        self.bars_ = self.line_ = self.gap_ = self.errorbar_ = self.band_ = None
        color = self._draw_model(ax, kind, bins, label, color, show_gap, hist_ax is None, kwargs)
        if self.accuracy_interval is not None and kind != "smooth":
            self.errorbar_ = self._draw_intervals(ax, bins, kind, color)
        if self.ece_interval is not None:
            ax.set_title(self._ece_interval_title())

        x_label, y_label = _axis_labels(self.mode, self.class_)
        _frame_diagram(ax, y_label, square=hist_ax is None)
        if hist_ax is None:
            ax.set_xlabel(x_label)
        else:
            self._draw_histogram(hist_ax, kind, bins, color)
            hist_ax.set_xlabel(x_label)
            ax.tick_params(labelbottom=False)
        if show_legend:
            _axes_legend(ax)
        self.ax_ = ax
        self.hist_ax_ = hist_ax
        self.figure_ = ax.figure
        return self

    def _draw_model(self, ax, kind, bins, label, color, show_gap, shade, kwargs):
        """The model's bars (and gaps), line or smoothed curve (and band); returns its colour."""
        if kind == "bars":
            self.bars_ = _draw_bars(ax, bins, label, color, shade=shade, **kwargs)
            if show_gap:
                self.gap_ = _draw_gaps(ax, bins)
            return self.bars_.patches[0].get_facecolor()[:3]
        if kind == "line":
            (self.line_,) = ax.plot(
                bins.confidence, bins.accuracy, marker="o", ms=4, color=color, label=label, **kwargs
            )
            return self.line_.get_color()
        self.line_ = self._draw_smooth_curve(ax, label, color, **kwargs)
        if self.smooth_band is not None:
            self.band_ = self._draw_band(ax, self.line_.get_color())
        return self.line_.get_color()

    def _draw_histogram(self, hist_ax, kind, bins, color) -> None:
        """What lies under the diagram: the density of the smooth curve, or the bins' shares."""
        if kind == "smooth":
            _draw_density(hist_ax, self.smooth_curve, color)
        else:
            _draw_counts(hist_ax, bins, color, filled=kind == "bars")

    def _draw_smooth_curve(self, ax, label, color, **kwargs):
        """The smoothed accuracy, blank where the density of the confidences is too low."""
        grid_points, smoothed, density, _ = self.smooth_curve
        # Where almost no confidences lie, the kernel estimate is noise: leave a gap.
        shown = np.where(np.asarray(density) >= MIN_SMOOTH_DENSITY, smoothed, np.nan)
        (line,) = ax.plot(grid_points, shown, color=color, label=label, **kwargs)
        return line

    def _draw_band(self, ax, color):
        """The bootstrap band around the smoothed curve, where the curve is drawn."""
        grid_points, _, density, _ = self.smooth_curve
        return ax.fill_between(
            grid_points,
            *self.smooth_band,
            where=np.asarray(density) >= MIN_SMOOTH_DENSITY,
            color=color,
            alpha=0.25,
            label=f"{self.confidence_level:.0%} bootstrap band",
        )

    def _draw_intervals(self, ax, bins, kind, color):
        """Each non-empty bin's accuracy interval: at the bin's centre on bars, at its mean
        confidence on a line."""
        lower, upper = (bound[bins.filled] for bound in self.accuracy_interval)
        on_bars = kind == "bars"
        return ax.errorbar(
            bins.centres if on_bars else bins.confidence,
            bins.accuracy,
            yerr=np.vstack([bins.accuracy - lower, upper - bins.accuracy]),
            fmt="none",
            ecolor="black" if on_bars else color,
            elinewidth=1,
            capsize=2,
            # Coloured like their model on a line plot: one legend entry would mislead.
            label=f"{self.confidence_level:.0%} {_INTERVAL_NAMES[self.interval]}"
            if on_bars
            else "_nolegend_",
        )

    def _ece_interval_title(self) -> str:
        low, high = self.ece_interval
        return (
            f"ECE = {100.0 * self.ece:.2f}% "
            f"({self.confidence_level:.0%} CI {100.0 * low:.2f}-{100.0 * high:.2f}%)"
        )


_INTERVAL_NAMES = {"wilson": "Wilson interval", "clopper-pearson": "Clopper-Pearson interval"}

# The gap between accuracy and mean confidence: a light, hatched band, nearly opaque. Where
# accuracy is above confidence the band lies on the bar: mostly opaque, it reads there as the
# same pink band as above a bar (a fainter one mixed with the bar read as a dark block), and
# the bar still shows through a little.
_GAP_STYLE = {
    "color": (1.0, 0.7, 0.7, 0.85),
    "edgecolor": (0.7, 0.0, 0.0, 0.8),
    "hatch": "//",
    "linewidth": 0.6,
}


class _FilledBins(NamedTuple):
    """The bins of a :class:`~reliacal.metrics.BinnedStatistics`, with the non-empty ones
    picked out (``left`` to ``confidence`` hold the non-empty bins only)."""

    edges: np.ndarray
    counts: np.ndarray
    filled: np.ndarray
    left: np.ndarray
    right: np.ndarray
    accuracy: np.ndarray
    confidence: np.ndarray

    @classmethod
    def of(cls, statistics) -> _FilledBins:
        edges = np.asarray(statistics.edges, dtype=np.float64)
        counts = np.asarray(statistics.counts)
        filled = counts > 0
        return cls(
            edges=edges,
            counts=counts,
            filled=filled,
            left=edges[:-1][filled],
            right=edges[1:][filled],
            accuracy=np.asarray(statistics.accuracy, dtype=np.float64)[filled],
            confidence=np.asarray(statistics.mean_confidence, dtype=np.float64)[filled],
        )

    @property
    def centres(self) -> np.ndarray:
        return (self.left + self.right) / 2.0


def _diagram_axes(ax, hist_ax):
    """``(ax, hist_ax)`` to draw on: a new figure (diagram over histogram) when ``ax`` is None."""
    if ax is None:
        figure = _new_figure((5.0, 6.0))
        grid = figure.add_gridspec(2, 1, height_ratios=(3, 1))
        ax = figure.add_subplot(grid[0])
        if hist_ax is None:
            hist_ax = figure.add_subplot(grid[1], sharex=ax)
    return ax, None if hist_ax is False else hist_ax


def _draw_diagonal(ax) -> None:
    """The diagonal of perfect calibration, once per axes (overlaid displays share it)."""
    if not any(line.get_gid() == _DIAGONAL_ID for line in ax.get_lines()):
        ax.plot(
            [0, 1],
            [0, 1],
            ls="--",
            color="0.4",
            lw=1,
            gid=_DIAGONAL_ID,
            label="Perfect calibration",
        )


def _draw_bars(ax, bins, label, color, *, shade, **kwargs):
    """One bar per non-empty bin, as high as its accuracy; with ``shade`` (no histogram
    beside them), bars of bins with few samples are paler."""
    bars = ax.bar(
        bins.left,
        bins.accuracy,
        width=bins.right - bins.left,
        align="edge",
        color=color,
        edgecolor="black",
        linewidth=0.6,
        label=label,
        **kwargs,
    )
    if shade:
        shares = bins.counts[bins.filled] / bins.counts.max()
        for patch, share in zip(bars.patches, shares):
            patch.set_alpha(0.25 + 0.75 * share)
    return bars


def _draw_gaps(ax, bins):
    """The band between each bar's top (accuracy) and the diagonal (mean confidence), on
    either side of the diagonal: above the bar for over-confidence, on it for under-confidence.
    """
    return ax.bar(
        bins.left,
        bins.confidence - bins.accuracy,
        bottom=bins.accuracy,
        width=bins.right - bins.left,
        align="edge",
        label="Gap",
        **_GAP_STYLE,
    )


def _draw_counts(hist_ax, bins, color, *, filled: bool) -> None:
    """The fraction of the samples in each bin (filled under bars, an outline under a line)."""
    hist_ax.stairs(
        bins.counts / bins.counts.sum(),
        bins.edges,
        fill=filled,
        color=color,
        alpha=0.8 if filled else 1.0,
    )
    hist_ax.set_ylabel("Fraction\nof samples")
    _frame_histogram(hist_ax)


def _draw_density(hist_ax, smooth_curve, color) -> None:
    """The smoothed density of the confidences, under the smoothed curve."""
    grid_points, _, density, _ = smooth_curve
    hist_ax.plot(grid_points, density, color=color)
    hist_ax.fill_between(grid_points, density, color=color, alpha=0.3)
    hist_ax.set_ylabel("Density")
    _frame_histogram(hist_ax)


def _frame_histogram(hist_ax) -> None:
    hist_ax.set_xlim(0.0, 1.0)
    # Autoscaling stays on (the zero baselines are sticky) so that overlaid models fit.
    hist_ax.set_ylim(bottom=0.0, auto=None)


def _frame_diagram(ax, y_label: str, *, square: bool) -> None:
    """The unit square of the diagram (kept square when no histogram shares its x-axis)."""
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_aspect("equal" if square else "auto")
    ax.set_ylabel(y_label)


def _axis_labels(mode: str, class_: Any) -> tuple[str, str]:
    """``(x label, y label)``: what the bins hold in each mode."""
    if mode == TOP_LABEL:
        return "Confidence (top-label probability)", "Accuracy"
    if mode == POSITIVE:
        return "Predicted probability of the positive class", "Observed frequency"
    return f"Predicted probability of class {class_}", "Observed frequency"


def _axes_legend(ax) -> None:
    """The legend of ``ax``, where it hides the least (upper left for an over-confident
    model); overlaid displays each add the diagonal's and the interval's label, shown once."""
    unique: dict[str, Any] = {}
    for handle, label in zip(*ax.get_legend_handles_labels()):
        unique.setdefault(label, handle)
    ax.legend(list(unique.values()), list(unique), loc="best", fontsize="small")


def plot_reliability_diagrams(
    y_true: Any,
    predictions: Mapping[str, Any],
    *,
    overlay: bool = False,
    kind: str | None = None,
    n_bins: int = 15,
    strategy: str = "uniform",
    mode: str = "top-label",
    class_: Any = None,
    labels: Any = None,
    interval: str | None = None,
    confidence_level: float = 0.95,
    panel_size: float = 3.6,
    max_columns: int = 4,
) -> dict[str, ReliabilityDisplay]:
    """Reliability diagrams of several models on the same labels.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels, shared by every model.
    predictions : mapping of str to array-like
        Model name to predicted probabilities (as in
        :func:`reliacal.metrics.calibration_report`).
    overlay : bool, default=False
        False: one panel per model, side by side (wrapping after
        ``max_columns``), each titled with the model's name and ECE, with its
        histogram below and one legend under all panels. True: all models on
        one axes, their histograms overlaid below.
    kind : {"bars", "line", "smooth"} or None, default=None
        Default: ``"bars"`` side by side, ``"line"`` overlaid (overlaid bars
        hide each other).
    n_bins, strategy, mode, class_, labels, interval, confidence_level
        As in :meth:`ReliabilityDisplay.from_predictions`.
    panel_size : float, default=3.6
        Width of one panel in inches.
    max_columns : int, default=4
        Panels per row when side by side.

    Returns
    -------
    dict of str to ReliabilityDisplay
        In the order of ``predictions``; they share one figure
        (``next(iter(result.values())).figure_``).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 2, size=400)
    >>> sharp = np.clip(labels + rng.normal(0, 0.3, size=400), 0.01, 0.99)
    >>> displays = plot_reliability_diagrams(
    ...     labels, {"sharp": sharp, "uninformative": np.full(400, 0.5)}, mode="positive"
    ... )
    >>> list(displays)
    ['sharp', 'uninformative']
    >>> len(displays["sharp"].figure_.axes)
    4
    """
    if not predictions:
        raise ValueError("predictions is empty: give at least one model")
    kind = kind or ("line" if overlay else "bars")
    shared = {
        "n_bins": n_bins,
        "strategy": strategy,
        "mode": mode,
        "class_": class_,
        "labels": labels,
        "interval": interval,
        "confidence_level": confidence_level,
        "kind": kind,
    }
    displays = per_model(
        predictions,
        lambda name, y_prob: ReliabilityDisplay._from_data(y_true, y_prob, name=name, **shared),
    )
    if overlay:
        _overlay(displays, panel_size)
    else:
        _side_by_side(displays, kind, panel_size, max_columns)
    return displays


_MODEL_LABELS = {
    "bars": "Accuracy per bin",
    "line": "Accuracy per bin",
    "smooth": "Smoothed accuracy",
}


def _overlay(displays: dict[str, ReliabilityDisplay], panel_size: float) -> None:
    """Every model on one diagram (one colour each), their histograms overlaid below."""
    figure = _new_figure((panel_size * 1.4, panel_size * 1.7))
    grid = figure.add_gridspec(2, 1, height_ratios=(3, 1))
    ax = figure.add_subplot(grid[0])
    hist_ax = figure.add_subplot(grid[1], sharex=ax)
    for index, display in enumerate(displays.values()):
        display.plot(ax=ax, hist_ax=hist_ax, color=f"C{index}", show_gap=False)


def _side_by_side(
    displays: dict[str, ReliabilityDisplay], kind: str, panel_size: float, max_columns: int
) -> None:
    """One panel per model, titled with its name and ECE, and one legend below them all."""
    n_columns = min(len(displays), max_columns)
    n_rows = -(-len(displays) // n_columns)
    figure = _new_figure((panel_size * n_columns, panel_size * 1.35 * n_rows))
    grid = figure.add_gridspec(2 * n_rows, n_columns, height_ratios=(3, 1) * n_rows)
    first_hist_ax = None
    for index, (name, display) in enumerate(displays.items()):
        row, column = divmod(index, n_columns)
        ax = figure.add_subplot(grid[2 * row, column])
        # Shared histogram scales make the panels' sample shares comparable.
        hist_ax = figure.add_subplot(grid[2 * row + 1, column], sharex=ax, sharey=first_hist_ax)
        if first_hist_ax is None:
            first_hist_ax = hist_ax
        display.plot(ax=ax, hist_ax=hist_ax, color="C0", show_legend=False)
        metric, value = ("smECE", display.smooth_ece) if kind == "smooth" else ("ECE", display.ece)
        ax.set_title(f"{name}\n{metric} = {100.0 * value:.2f}%")
    first = next(iter(displays.values()))
    model_handle = first.bars_ if kind == "bars" else first.line_
    handles, labels = first.ax_.get_legend_handles_labels()
    labels = [
        _MODEL_LABELS[kind] if handle is model_handle else label
        for handle, label in zip(handles, labels)
    ]
    _figure_legend(figure, handles, labels)


def _new_figure(size: tuple[float, float]):
    """A figure whose layout keeps every label inside it.

    The outermost tick labels ("0.0", "1.0") are centred on the axes' ends; the layout's
    default padding (3/72 inch) leaves them touching the figure's edge, so the margin is
    wider.
    """
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=size, layout="constrained")
    figure.get_layout_engine().set(w_pad=_MARGIN, h_pad=_MARGIN)
    return figure


# Inches between the figure's edge and what it holds.
_MARGIN = 0.08


def _figure_legend(figure, handles, labels) -> None:
    """One legend below all panels, where it hides no bar, as wide as fits in the figure.

    One row of four entries is wider than a single panel: rows are added (the same number
    of entries in each row but the last), and the font made smaller, until the legend fits.
    """
    n_entries = len(handles)
    widths = sorted({-(-n_entries // rows) for rows in range(1, n_entries + 1)}, reverse=True)
    for n_columns in widths:
        for fontsize in ("medium", "small"):
            legend = figure.legend(
                handles, labels, loc="outside lower center", ncols=n_columns, fontsize=fontsize
            )
            if legend.get_window_extent().width <= _LEGEND_WIDTH * figure.bbox.width:
                return
            legend.remove()
    figure.legend(handles, labels, loc="outside lower center", ncols=1, fontsize="small")


# The share of the figure's width the legend may take (the rest: the layout's margins).
_LEGEND_WIDTH = 0.96


def _bootstrap_extras(
    y_true, y_prob, binning, labels, kind, bootstrap, random_state, confidence_level
):
    """``(smooth_band, ece_interval)`` from ``bootstrap`` replicates, or Nones."""
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int | np.integer) or bootstrap < 0:
        raise ValueError(f"bootstrap must be a non-negative integer, got {bootstrap!r}")
    if bootstrap == 0:
        return None, None
    rng = np.random.default_rng(random_state)  # one stream for both resamplings
    metric = "ece" if binning["strategy"] == "uniform" else "adaptive_ece"
    row = compare(
        y_true,
        {"model": y_prob},
        metrics=[metric],
        n_bootstraps=bootstrap,
        confidence_level=confidence_level,
        random_state=rng,
        n_bins=binning["n_bins"],
        mode=binning["mode"],
        labels=labels,
    ).loc[("model", metric)]
    band = None
    if kind == "smooth":
        band = smooth_reliability_band(
            y_true,
            y_prob,
            n_bootstraps=bootstrap,
            confidence_level=confidence_level,
            random_state=rng,
            mode=binning["mode"],
            labels=labels,
        )
        band = (band.lower, band.upper)
    return band, (float(row["ci_low"]), float(row["ci_high"]))


def _one_class_problem(y_true, y_prob, class_, labels):
    """The binary problem ``(y == class_, y_prob[:, column of class_])``."""
    if class_ is None:
        raise ValueError('mode="class" needs class_: the class whose probability is binned')
    y_index, y_prob, classes = check_probabilities(y_true, y_prob, labels=labels)
    if y_prob.ndim != 2:
        raise ValueError('mode="class" needs y_prob of shape (n_samples, n_classes)')
    matches = np.flatnonzero(np.asarray(classes) == class_)
    if matches.size == 0:
        raise ValueError(f"class_={class_!r} is not among the classes {list(classes)}")
    column = int(matches[0])
    return (y_index == column).astype(np.int64), y_prob[:, column]


def _legend_label(name: str | None, metric: str, value: float | None) -> str:
    text = f"{metric} = {100.0 * value:.2f}%" if value is not None else ""
    if name:
        return f"{name} ({text})" if text else name
    return text
