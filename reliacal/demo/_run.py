"""The demo's data, methods and run."""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reliacal._docstrings import shared_doc
from reliacal.calibrators import calibration_methods, make_calibrator, tuned_scaling
from reliacal.demo._report import ReportWriter, slug
from reliacal.demo._summary import summary_block, summary_findings
from reliacal.metrics import calibration_report, compare, softmax

__all__ = [
    "METHODS",
    "DemoContext",
    "DemoMethod",
    "DemoResult",
    "MethodOutput",
    "post_hoc",
    "run_demo",
]

# A small training split keeps the network's accuracy below the digits' ceiling, where
# over-confidence shows; a large test split keeps the binned metrics' noise low.
CALIBRATION_SIZE = 0.25
TEST_SIZE = 0.45

# Bins of the binned metrics: calibration_report's default, which the summary states.
N_BINS = inspect.signature(calibration_report).parameters["n_bins"].default

# The report's columns, in the order a reader compares them (all from calibration_report).
REPORT_COLUMNS = (
    "accuracy",
    "ece",
    "adaptive_ece",
    "classwise_ece",
    "smooth_ece",
    "nll",
    "brier",
    "signed_ece",
)


@dataclass
class DemoContext:
    """Everything a demo method may use, computed once before the methods run.

    Attributes
    ----------
    model : torch.nn.Module
        The trained tiny ViT (timm ``VisionTransformer``), in eval mode, on the CPU.
    backbone : reliacal.backbones.BackboneAdapter
        ``as_backbone(model)``: tokens, pooled features and logits in one pass,
        and the blocks for reconfiguration.
    splits : reliacal.datasets.DataSplits
        ``X_train``/``y_train`` (what the model was trained on),
        ``X_calibration``/``y_calibration`` (for calibrators) and
        ``X_test``/``y_test`` (where every reported number is measured).
    training_config : reliacal.training.TrainingConfig
        The settings the model was trained with (a starting point for methods
        that fine-tune it).
    training_result : reliacal.training.TrainingResult
        The model's training history.
    calibration_logits, test_logits : ndarray of shape (n, 10)
        The model's logits on the calibration and test images.
    calibration_features, test_features : ndarray of shape (n, D)
        The pooled pre-logits features of the same pass.
    random_state : int
        The demo's seed; seed every method with it.
    quick : bool
        True in smoke tests: methods that train should train briefly.
    fitted : dict
        Estimators already fitted by earlier rows, so that rows sharing one
        fit (CalAttn with and without post-hoc TS) train once.

    Examples
    --------
    A method reads what it needs from the context:

    >>> def sharpened(context):
    ...     return softmax(2.0 * context.test_logits)
    >>> method = DemoMethod("Sharpened", sharpened)
    """

    model: Any
    backbone: Any
    splits: Any
    training_config: Any
    training_result: Any
    calibration_logits: np.ndarray
    calibration_features: np.ndarray
    test_logits: np.ndarray
    test_features: np.ndarray
    random_state: int
    quick: bool
    fitted: dict[str, Any] = field(default_factory=dict)


@dataclass
class MethodOutput:
    """What a demo method returns.

    Attributes
    ----------
    probs : ndarray of shape (n_test, n_classes)
        Calibrated probabilities on the test split.
    figures : dict of str to matplotlib Figure
        Extra figures (e.g. a histogram of per-sample temperatures), saved
        as PNG and shown in the report under the method's name.
    details : str
        A short note for the report (e.g. the fitted temperature).

    Examples
    --------
    >>> output = MethodOutput(np.full((3, 2), 0.5), details="constant")
    >>> output.probs.shape, output.figures
    ((3, 2), {})
    """

    probs: np.ndarray
    figures: dict[str, Any] = field(default_factory=dict)
    details: str = ""


@dataclass(frozen=True)
class DemoMethod:
    """One row of the demo: a name and a function from the context to test probabilities.

    Attributes
    ----------
    name : str
        Row name in the report (unique).
    run : callable
        ``run(context) -> ndarray | MethodOutput``.
    against : str or None, default=None
        The row this one is read against (one of the bootstrap's references,
        :data:`SIGNIFICANCE_REFERENCES`): the summary spells out their ECE and
        NLL differences and whether they are significant.
    note : str, default=""
        What the row shows, when its name does not say it: a line of the
        report's set-up.

    Examples
    --------
    >>> [method.name for method in METHODS][:2]
    ['Uncalibrated', 'TemperatureScaling']
    """

    name: str
    run: Callable[[DemoContext], np.ndarray | MethodOutput]
    against: str | None = None
    note: str = ""


def post_hoc(
    make_estimator: Callable[[DemoContext], Any], *, features: bool = False
) -> Callable[[DemoContext], MethodOutput]:
    """Turn a post-hoc calibrator into a demo method.

    The returned function builds the estimator with ``make_estimator(context)``,
    fits it on the calibration split and returns its probabilities on the
    test split. Its input is the logits, or with ``features=True`` the pooled
    features and the logits side by side (``[features, logits]``, the form
    that ``AdaptiveTS(n_logits=K)`` reads). The report's note shows the
    fitted ``temperature_`` or, for a search such as ``GridSearchCV``, the
    ``best_params_``; an estimator with a ``temperature(X)`` method (a
    temperature per sample) also gets a histogram of its test temperatures.

    Parameters
    ----------
    make_estimator : callable
        ``make_estimator(context)`` returns an unfitted estimator with
        ``fit(X, y)`` and ``predict_proba(X)``.
    features : bool, default=False
        Put the pooled features before the logits in ``X``.

    Returns
    -------
    callable
        A :attr:`DemoMethod.run` function.

    Examples
    --------
    >>> from reliacal.calibrators import TemperatureScaling
    >>> method = DemoMethod("TS", post_hoc(lambda context: TemperatureScaling()))
    >>> method.name
    'TS'

    A feature-based method is one line as well, e.g.
    ``DemoMethod("AdaptiveTS", post_hoc(lambda c: AdaptiveTS(n_logits=10), features=True))``.
    """

    def inputs(context: DemoContext, split: str) -> np.ndarray:
        logits = getattr(context, f"{split}_logits")
        if not features:
            return logits
        return np.hstack([getattr(context, f"{split}_features"), logits])

    def run(context: DemoContext) -> MethodOutput:
        estimator = make_estimator(context)
        estimator.fit(inputs(context, "calibration"), context.splits.y_calibration)
        X_test = inputs(context, "test")
        output = MethodOutput(estimator.predict_proba(X_test))
        if hasattr(estimator, "temperature_"):
            output.details = f"T = {float(estimator.temperature_):.3f}"
        elif hasattr(estimator, "best_params_"):
            output.details = ", ".join(
                f"{key} = {value:g}" for key, value in estimator.best_params_.items()
            )
        if callable(getattr(estimator, "temperature", None)):
            temperatures = np.asarray(estimator.temperature(X_test))
            output.figures["Temperature per test sample"] = _temperature_histogram(temperatures)
            output.details = (
                f"T from {temperatures.min():.4g} to {temperatures.max():.4g}, "
                f"median {np.median(temperatures):.4g}"
            )
        return output

    return run


def _temperature_histogram(temperatures: np.ndarray):
    """Histogram of the per-sample temperatures, on an axis that spans them.

    The axis fits the temperatures, not ``T = 1``: a spread of a few thousandths next to
    ``T = 1`` would be one bar at the axis' edge. ``T = 1`` (the logits unchanged) is drawn
    when it lies on the axis, and the title says where it is when it does not. When every
    sample has the same temperature, the title gives it.
    """
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(5.0, 3.2), layout="constrained")
    low, high = float(np.min(temperatures)), float(np.max(temperatures))
    notes = []
    # Equal up to rounding: one temperature computed per sample in float32 differs in the
    # last digits.
    if high - low <= 1e-6 * max(abs(high), 1.0):
        width = 0.01 * max(abs(high), 1.0)
        ax.bar([low], [len(temperatures)], width=width, color="C0", edgecolor="white")
        ax.set_xlim(low - 5.0 * width, low + 5.0 * width)
        notes.append(f"all {len(temperatures)} test samples: T = {low:.4g}")
    else:
        ax.hist(temperatures, bins=30, range=(low, high), color="C0", edgecolor="white")
        margin = 0.05 * (high - low)
        ax.set_xlim(low - margin, high + margin)
    shown_low, shown_high = ax.get_xlim()
    if shown_low <= 1.0 <= shown_high:
        ax.axvline(1.0, color="0.4", ls="--", lw=1, label="T = 1 (unchanged logits)")
        ax.legend(fontsize="small")
    else:
        side = "left" if shown_low > 1.0 else "right"
        notes.append(f"T = 1 (unchanged logits) lies off the axis, to the {side}")
    ax.set_title("\n".join(notes), fontsize="medium")
    ax.set_xlabel("temperature T(x)")
    ax.set_ylabel("test samples")
    return figure


def _uncalibrated(context: DemoContext) -> np.ndarray:
    return softmax(context.test_logits)


def _table_method(name: str) -> DemoMethod:
    """The demo row of method ``name`` of the table of methods, fitted post hoc.

    Seeded with the demo's seed; fed the pooled features beside the logits
    when the method reads them; its regularisation chosen by cross-validated
    NLL when the table says so (a quick run takes the middle of the grid
    instead of searching it).
    """
    method = calibration_methods()[name]

    def make(context: DemoContext) -> Any:
        parameters = {}
        if method.seeded:
            parameters["random_state"] = context.random_state
        if method.reads_features:
            parameters["n_logits"] = context.calibration_logits.shape[1]
        estimator = make_calibrator(name, **parameters)
        return tuned_scaling(estimator, quick=context.quick) if method.tuned else estimator

    return DemoMethod(method.demo, post_hoc(make, features=method.reads_features))


def _fine_tuned(
    make_estimator: Callable[[DemoContext], Any],
    predict: Callable[[Any, DemoContext], np.ndarray | MethodOutput] | None = None,
) -> Callable[[DemoContext], MethodOutput]:
    """Turn an estimator that trains the network (CalAttn, DIRECTOR) into a demo method.

    The estimator starts from the trained model and learns on the calibration
    split, the same new data the post-hoc methods get, so the rows compare
    methods, not data. One fit serves every row that builds the same
    estimator (CalAttn with and without a temperature on top): the fitted
    estimator is cached on the context under its parameters.
    ``predict(estimator, context)`` gives the row's test probabilities
    (default: ``predict_proba`` of the test images).
    """

    def run(context: DemoContext) -> MethodOutput:
        estimator = make_estimator(context)
        key = repr(sorted(estimator.get_params(deep=False).items(), key=lambda item: item[0]))
        if key not in context.fitted:
            estimator.fit(context.splits.X_calibration, context.splits.y_calibration)
            context.fitted[key] = estimator
        estimator = context.fitted[key]
        if predict is None:
            return MethodOutput(estimator.predict_proba(context.splits.X_test))
        output = predict(estimator, context)
        return output if isinstance(output, MethodOutput) else MethodOutput(output)

    return run


def _calattn(context: DemoContext) -> Any:
    from reliacal.finetune import CalAttnFinetuner

    # CalAttn's head alone on the frozen trained ViT, fitted on the calibration split: of
    # the recipes tried on a tuning split of the demo's non-test images (whole network
    # trained with CalAttn, or fine-tuned with it), the one with the lowest NLL after TS
    # (benchmarks/results/decisions.md#calattn-the-demos-recipe).
    return CalAttnFinetuner(
        context.model,
        freeze_backbone=True,
        lambda_brier=0.0,
        max_epochs=2 if context.quick else 30,
        learning_rate=1e-3,
        weight_decay=0.0,
        warmup_epochs=1.0,
        validation_fraction=0.0,
        random_state=context.random_state,
        verbose=0,  # the demo says its own steps
    )


def _without_post_hoc(estimator: Any, context: DemoContext) -> np.ndarray:
    """CalAttn's own probabilities, ``softmax(z / s)``, before any temperature."""
    return softmax(estimator.decision_function(context.splits.X_test))


def _with_temperature(estimator: Any, context: DemoContext) -> MethodOutput:
    """CalAttn's logits ``z / s``, then a temperature fitted on the calibration split.

    The head has seen the whole calibration split; the temperature is fitted there
    too, as every post-hoc row's is.
    """
    from reliacal.calibrators import TemperatureScaling

    scaling = TemperatureScaling().fit(
        estimator.decision_function(context.splits.X_calibration), context.splits.y_calibration
    )
    probs = scaling.predict_proba(estimator.decision_function(context.splits.X_test))
    return MethodOutput(probs, details=f"T = {float(scaling.temperature_):.3f}")


_CALATTN_NOTE = (
    "CalAttn rows: CalAttn's head alone, trained on the calibration split on the frozen "
    "model (a temperature per sample; + TS: one temperature on top, fitted on the same "
    "split). The best recipe tried on a tuning split of the non-test images, where it did "
    "not beat plain training + TS "
    "(benchmarks/results/decisions.md#calattn-the-demos-recipe)."
)


def _director(context: DemoContext) -> Any:
    from reliacal.finetune import DiffusionReconfigurer

    return DiffusionReconfigurer(
        context.model,
        max_epochs=2 if context.quick else 30,
        ema_decay=0.98,
        random_state=context.random_state,
        verbose=0,  # the demo says its own steps
    )


# The demo's rows: the post-hoc methods of the table of methods that name a demo row, then
# the methods that train the network. Adding a post-hoc method is a row of the table.
METHODS: list[DemoMethod] = [
    DemoMethod("Uncalibrated", _uncalibrated),
    *(_table_method(name) for name, method in calibration_methods().items() if method.demo),
    DemoMethod(
        "CalAttn",
        _fine_tuned(_calattn, _without_post_hoc),
        against="Uncalibrated",
        note=_CALATTN_NOTE,
    ),
    DemoMethod(
        "CalAttn + TS", _fine_tuned(_calattn, _with_temperature), against="TemperatureScaling"
    ),
    DemoMethod("DIRECTOR (10 paths)", _fine_tuned(_director)),
]


@dataclass
class DemoResult:
    """What :func:`run_demo` wrote.

    Attributes
    ----------
    report : pandas.DataFrame
        The metric table (one row per method) plus ``seconds`` per method.
    probabilities : dict of str to ndarray
        Test probabilities per method.
    output_dir, report_path, html_path : Path
        The folder, ``report.md`` and ``report.html``.
    files : list of Path
        Every file written.
    summary : str
        The headline table and the claims it supports, as Markdown between
        the README's markers (what ``reliacal demo --results PATH`` writes).

    Examples
    --------
    See :func:`run_demo`.
    """

    report: Any
    probabilities: dict[str, np.ndarray]
    output_dir: Path
    report_path: Path
    html_path: Path
    files: list[Path]
    summary: str = ""


def run_demo(
    output_dir: str | Path = "reliacal-demo",
    *,
    quick: bool = False,
    random_state: int = 0,
    methods: Sequence[DemoMethod] | None = None,
    verbose: bool = True,
    num_threads: int | None = 1,
) -> DemoResult:
    """Train the digits ViT, run every method, and write the report folder.

    Parameters
    ----------
    output_dir : str or Path, default="reliacal-demo"
        Folder to write (created; existing files of the same names are replaced).
    quick : bool, default=False
        A few epochs only (a smoke test; the model is then poorly trained).
    random_state : int, default=0
        Seed of the split, the initialisation and the training.
    methods : sequence of DemoMethod or None, default=None
        The rows; ``None`` runs :data:`METHODS`.
    verbose : bool, default=True
        Print progress to stderr.
    num_threads : int or None, default=1
        Torch intra-op threads while the demo runs (restored afterwards). The
        demo's models are so small that one thread is about as fast as
        several on an idle machine, and far faster on a busy one, where
        threads wait on each other; None keeps torch's setting.

    Returns
    -------
    DemoResult

    Examples
    --------
    >>> import tempfile
    >>> result = run_demo(tempfile.mkdtemp(), quick=True, verbose=False, methods=METHODS[:2])
    >>> list(result.report.index)
    ['Uncalibrated', 'TemperatureScaling']
    >>> result.report_path.name, result.html_path.name
    ('report.md', 'report.html')
    """
    import torch

    threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        return _run(Path(output_dir), quick, random_state, methods, _progress(verbose))
    finally:
        torch.set_num_threads(threads)


def _run(output_dir, quick, random_state, methods, say) -> DemoResult:

    from reliacal.backbones import as_backbone, extract_outputs
    from reliacal.datasets import (
        default_digits_training_config,
        load_digits_images,
        train_calibration_test_split,
        train_digits_classifier,
    )
    from reliacal.training import seeded_torch

    methods = list(METHODS if methods is None else methods)
    slugs = _method_slugs(methods)
    output_dir.mkdir(parents=True, exist_ok=True)

    X, y = load_digits_images(image_size=16)
    splits = train_calibration_test_split(
        X, y, calibration_size=CALIBRATION_SIZE, test_size=TEST_SIZE, random_state=random_state
    )
    config = default_digits_training_config(quick=quick, random_state=random_state)
    say(
        f"training a tiny ViT on {len(splits.y_train)} digit images "
        f"({config.max_epochs} epochs, plain cross-entropy)"
    )
    started = time.perf_counter()
    model, training_result = train_digits_classifier(
        splits.X_train, splits.y_train, config=config, random_state=random_state
    )
    training_seconds = time.perf_counter() - started
    say(f"trained in {training_seconds:.1f} s")

    backbone = as_backbone(model).eval()
    calibration_features, calibration_logits, _ = extract_outputs(
        backbone, splits.X_calibration, device=config.device
    )
    test_features, test_logits, _ = extract_outputs(backbone, splits.X_test, device=config.device)
    context = DemoContext(
        model=model,
        backbone=backbone,
        splits=splits,
        training_config=config,
        training_result=training_result,
        calibration_logits=calibration_logits,
        calibration_features=calibration_features,
        test_logits=test_logits,
        test_features=test_features,
        random_state=random_state,
        quick=quick,
    )

    outputs: dict[str, MethodOutput] = {}
    seconds: dict[str, float] = {}
    for method in methods:
        started = time.perf_counter()
        with seeded_torch(random_state):  # each method sees the same generator state
            output = method.run(context)
        seconds[method.name] = time.perf_counter() - started
        outputs[method.name] = output if isinstance(output, MethodOutput) else MethodOutput(output)
        say(f"{method.name}: {seconds[method.name]:.2f} s")

    probabilities = {name: np.asarray(output.probs) for name, output in outputs.items()}
    report = calibration_report(splits.y_test, probabilities, labels=np.arange(10))
    report = report[list(REPORT_COLUMNS)].assign(seconds=list(seconds.values()))
    report["details"] = [output.details for output in outputs.values()]

    writer = ReportWriter(output_dir)
    writer.figures(splits, probabilities, outputs, slugs, training_result)
    writer.arrays(splits, probabilities, slugs, calibration_logits, test_logits)
    setup = _setup_lines(splits, config, training_seconds, quick, random_state)
    setup += [method.note for method in methods if method.note]
    comparisons = paired_comparisons(splits.y_test, probabilities, random_state)
    pairs = [(method.name, method.against) for method in methods if method.against]
    summary = summary_block(
        report,
        comparisons,
        sizes=(len(splits.y_train), len(splits.y_calibration), len(splits.y_test)),
        random_state=random_state,
        n_bins=N_BINS,
        n_bootstraps=N_BOOTSTRAPS,
        pairs=pairs,
        quick=quick,
    )
    report_path, html_path = writer.reports(
        report,
        setup,
        last_key=f"probs_{slugs[methods[-1].name]}",
        significance=_significance_cells(comparisons, list(probabilities)),
        findings=summary_findings(report, comparisons, pairs),
    )
    say(f"wrote {len(writer.files)} files to {output_dir}")
    return DemoResult(
        report, probabilities, output_dir, report_path, html_path, writer.files, summary
    )


#: The references each method's gain is tested against (those the method list holds).
SIGNIFICANCE_REFERENCES = ("Uncalibrated", "TemperatureScaling")
#: Resamples of the paired bootstrap.
N_BOOTSTRAPS = 1000

# The examples' problem: 400 rows whose labels follow the logits divided by 3, so the
# temperature-scaled probabilities ("TS") are calibrated and the raw ones are not.
_EXAMPLE_DOCS = {
    "toy_problem": """\
>>> import numpy as np
>>> from reliacal.metrics import softmax
>>> rng = np.random.default_rng(0)
>>> logits = 3.0 * rng.normal(size=(400, 3))
>>> y = np.array([rng.choice(3, p=p) for p in softmax(logits / 3.0)])"""
}


@shared_doc(_EXAMPLE_DOCS)
def paired_comparisons(
    y_true, probabilities: dict, random_state: int, n_bootstraps: int = N_BOOTSTRAPS
) -> dict[str, pd.DataFrame]:
    """Every method's ECE and NLL against each reference, by a paired bootstrap.

    Returns reference name -> :func:`reliacal.metrics.compare` frame (rows
    ``(method, metric)``), for the references of
    :data:`SIGNIFICANCE_REFERENCES` that ``probabilities`` holds.

    Examples
    --------
    {toy_problem}
    >>> compared = paired_comparisons(
    ...     y, {"Uncalibrated": softmax(logits), "TS": softmax(logits / 3.0)}, 0, 200
    ... )
    >>> bool(compared["Uncalibrated"].loc[("TS", "ece"), "significant"])
    True
    """
    return {
        reference: compare(
            y_true,
            probabilities,
            metrics=("ece", "nll"),
            reference=reference,
            n_bootstraps=n_bootstraps,
            random_state=random_state,
        )
        for reference in SIGNIFICANCE_REFERENCES
        if reference in probabilities
    }


@shared_doc(_EXAMPLE_DOCS)
def significance_table(
    y_true, probabilities: dict, random_state: int, n_bootstraps: int = N_BOOTSTRAPS
):
    """Each method's ECE and NLL difference to each reference, with a paired bootstrap.

    Cells read ``difference [low, high]``, the 95% percentile interval of the
    difference over ``n_bootstraps`` resamples of the test rows
    (:func:`reliacal.metrics.compare`), followed by ``*`` when the interval
    excludes zero. A negative difference is an improvement.

    Examples
    --------
    {toy_problem}
    >>> table = significance_table(
    ...     y, {"Uncalibrated": softmax(logits), "TS": softmax(logits / 3.0)}, 0, 200
    ... )
    >>> table.loc["TS", "ECE vs Uncalibrated"].endswith("*")
    True
    """
    comparisons = paired_comparisons(y_true, probabilities, random_state, n_bootstraps)
    return _significance_cells(comparisons, list(probabilities))


def _significance_cells(comparisons: dict[str, pd.DataFrame], index: list[str]) -> pd.DataFrame:
    """The table of :func:`significance_table` from :func:`paired_comparisons`' frames."""
    columns = {}
    for reference, compared in comparisons.items():
        for metric in ("ece", "nll"):
            rows = compared.xs(metric, level="metric").reindex(index)
            columns[f"{metric.upper()} vs {reference}"] = [
                f"{row.difference:+.4f} [{row.difference_ci_low:+.4f}, "
                f"{row.difference_ci_high:+.4f}]{' *' if row.significant else ''}"
                for row in rows.itertuples()
            ]
    return pd.DataFrame(columns, index=pd.Index(index, name="method"))


def _progress(verbose: bool) -> Callable[[str], None]:
    def say(message: str) -> None:
        if verbose:
            print(f"reliacal demo: {message}", file=sys.stderr, flush=True)

    return say


def _method_slugs(methods: Sequence[DemoMethod]) -> dict[str, str]:
    slugs = {}
    for method in methods:
        name_slug = slug(method.name)
        if method.name in slugs or name_slug in slugs.values():
            raise ValueError(f"demo method names must be distinct, got {method.name!r} twice")
        slugs[method.name] = name_slug
    return slugs


def _setup_lines(splits, config, training_seconds, quick, random_state):
    lines = [
        "Data: scikit-learn's digits (1,797 8x8 images, upsampled to 16x16), stratified split "
        f"with seed {random_state}: {len(splits.y_train)} train, "
        f"{len(splits.y_calibration)} calibration, {len(splits.y_test)} test.",
        "Model: timm VisionTransformer (4x4 patches, width 64, 4 blocks, 4 heads), random "
        f"initialisation, plain cross-entropy, {config.optimizer} (learning rate "
        f"{config.learning_rate:g}, weight decay {config.weight_decay:g}), "
        f"{config.max_epochs} epochs, last weights kept; trained in {training_seconds:.0f} s.",
        "Every number below is measured on the test split; calibrators are fitted on the "
        "calibration split (logits of the trained model).",
    ]
    if quick:
        lines.append("**Quick mode**: a smoke test with very few epochs, not a result.")
    return lines
