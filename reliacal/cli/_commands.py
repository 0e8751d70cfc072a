"""The commands, their options and their handlers."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from reliacal._version import __version__
from reliacal.calibrators import calibration_methods, describe_methods

__all__ = ["main"]

_FORMATS = ("table", "csv", "json")
_STRATEGIES = ("uniform", "quantile")
# --method: the command's methods of the table (reliacal.calibrators.calibration_methods).
# Reading the table imports no calibrator.
_METHODS = tuple(name for name, method in calibration_methods().items() if method.command)
# ODIR divides the off-diagonal penalty by K (K - 1): the demo's 0.1..10 (K = 10) is far
# too weak for 100 classes, where 3-fold CV on CIFAR-100 picks about 100.
_MATRIX_PENALTIES = (0.1, 1.0, 10.0, 100.0, 1000.0)


class UserError(Exception):
    """A mistake the user can fix; printed as one line without a traceback."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``reliacal`` command and return its exit status.

    Parameters
    ----------
    argv : sequence of str or None, default=None
        The arguments after the program name; ``None`` reads ``sys.argv``.

    Returns
    -------
    int
        0 on success, 1 on a user error (one line on stderr), 2 on a usage
        error (from argparse).

    Examples
    --------
    >>> import contextlib, io, os, tempfile
    >>> import numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "preds.npz")
    >>> rng = np.random.default_rng(0)
    >>> np.savez(path, probs=rng.dirichlet(np.ones(3), size=200),
    ...          labels=rng.integers(0, 3, size=200))
    >>> out, err = io.StringIO(), io.StringIO()
    >>> with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    ...     status = main(["evaluate", path, "--format", "csv"])
    >>> status
    0
    >>> err.getvalue().strip()
    "reliacal: preds.npz: probabilities from key 'probs', labels from key 'labels'"
    >>> main(["evaluate", "missing.npz"])
    1
    """
    from reliacal.cli._progress import Progress, stderr_is_terminal

    parser = _build_parser()
    arguments = parser.parse_args(argv)
    try:
        # The library's warnings (e.g. a calibrator that did not converge) become one line each.
        # The progress line is cleared (its context left) before any of them is printed.
        show_progress = stderr_is_terminal() and not arguments.quiet
        with warnings.catch_warnings(record=True) as caught, Progress(show_progress) as progress:
            arguments.progress = progress
            status = arguments.handler(arguments)
        # A search repeats a fit's warning once per fold and grid point: say it once.
        counts = Counter(str(warning.message) for warning in caught)
        for message, count in counts.items():
            _say(f"warning: {message}" + (f" (x{count})" if count > 1 else ""))
        return status
    except (UserError, ValueError, OSError) as error:
        message = str(error) or type(error).__name__
        _say(f"error: {message}")
        return 1
    except MemoryError:
        _say("error: out of memory; use a smaller --n-bins, or split the file")
        return 1


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reliacal",
        description="Measure, plot and fix the calibration of a classifier's probabilities.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"reliacal {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in _COMMANDS.items():
        subparser = commands.add_parser(name, help=command.summary, description=command.description)
        command.add_options(subparser)
        subparser.set_defaults(handler=command.handler)
    return parser


def _add_evaluate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("predictions", metavar="PRED", help=_EVALUATE_HELP)
    parser.add_argument("--labels", metavar="FILE", help="file with the true labels")
    _add_reading_options(parser, patterns=True)
    _add_report_options(parser)
    parser.add_argument(
        "--name",
        default=None,
        help="model name in the report (default: the file's name; with a --probs-key "
        "pattern, each key names its model)",
    )
    parser.add_argument(
        "--streamable-only",
        action="store_true",
        help="report only the metrics computed from per-bin sums, in one read (no "
        "adaptive_ece, smooth_ece, ks_error or sweep_ece, which sort or smooth every "
        "confidence: for a parquet file or folder the full report keeps a fine histogram "
        "of them and reads the rows again, in constant memory too)",
    )


def _add_calibrate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("calibration", metavar="CAL_FILE", help=_CALIBRATE_HELP)
    parser.add_argument("evaluation", metavar="EVAL_FILE", help=_CALIBRATE_HELP)
    parser.add_argument(
        "--method",
        choices=_METHODS,
        default="temperature",
        help=f"the calibrator (default: temperature): {describe_methods(_METHODS)}; vector "
        "and matrix choose their regularisation by cross-validated NLL unless --reg-bias or "
        "--reg-off-diagonal is given",
    )
    parser.add_argument(
        "--reg-off-diagonal",
        type=_non_negative_float,
        default=None,
        help="matrix: ODIR penalty on the off-diagonal weights (default: chosen with "
        "--reg-bias, tied, by 3-fold cross-validated NLL among 0.1, 1, 10, 100, 1000; 0 when "
        "only --reg-bias is given)",
    )
    parser.add_argument(
        "--reg-bias",
        type=_non_negative_float,
        default=None,
        help="vector, matrix: penalty on the intercepts (default: chosen by 3-fold "
        "cross-validated NLL among 0.1, 1, 10; 0 when only --reg-off-diagonal is given)",
    )
    parser.add_argument("--cal-labels", metavar="FILE", help="labels of CAL_FILE")
    parser.add_argument("--eval-labels", metavar="FILE", help="labels of EVAL_FILE")
    _add_reading_options(parser, patterns=False)
    _add_report_options(parser)
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="write the calibrated probabilities and labels (.npz, .csv or .parquet, by the "
        "extension, in any case); a table keeps EVAL_FILE's column names (p_0, p_cat, ...) "
        "when it holds probabilities, and names the columns by class otherwise",
    )
    parser.add_argument(
        "--save-model",
        metavar="FILE",
        help="save the fitted calibrator as a zip archive without pickle, read back by "
        "reliacal.load(FILE) (its input: probabilities, or logits "
        "when both files hold logits)",
    )


def _add_demo_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="reliacal-demo", help="output folder")
    parser.add_argument("--quick", action="store_true", help="few epochs (a smoke test)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split and training")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="also write the headline table and its claims to this Markdown file (the block "
        "the README quotes; replaced if it exists)",
    )
    _add_quiet_option(parser)


_PREDICTION_FILES = (
    ".npz (keys probs/predictions/logits and labels/ground_truth/y), .npy (labels from a "
    "second file), or .csv/.parquet (a label column and one column per class, named by the "
    "class: p_0, p_1, ... or p_cat, p_dog, ...; logit_0, logit_1, ... hold logits)"
)
_EVALUATE_HELP = (
    f"predictions: {_PREDICTION_FILES}, or a folder of .parquet files; parquet is read "
    "batch by batch"
)
_CALIBRATE_HELP = (
    f"predictions in one file (a folder of parquet files is read by evaluate only): "
    f"{_PREDICTION_FILES}"
)


def _add_quiet_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress display on stderr (shown only when stderr is a terminal)",
    )


def _add_reading_options(parser: argparse.ArgumentParser, *, patterns: bool) -> None:
    key_help = "npz key (or column-name prefix of a table) of the predictions"
    if patterns:
        key_help += (
            "; a pattern such as 'probs_*' reports every matching npz key, one row per key "
            "(quote it for the shell)"
        )
    parser.add_argument("--probs-key", help=key_help)
    parser.add_argument(
        "--classes",
        type=_class_names,
        metavar="A,B,...",
        help="comma-separated label of each prediction column, in column order (needed for "
        "non-numeric labels in .npz/.npy files)",
    )
    parser.add_argument("--labels-key", help="npz key or column name of the labels")
    parser.add_argument(
        "--logits",
        action="store_true",
        help="the predictions are logits (softmax is applied); not needed when the npz key "
        "(logits) or the column names (logit_0, logit_1, ...) say so",
    )


def _reading_options(arguments: argparse.Namespace) -> dict[str, Any]:
    """The options of :func:`_add_reading_options` that every file reader takes as they are."""
    return {
        "probs_key": arguments.probs_key,
        "labels_key": arguments.labels_key,
        "logits": arguments.logits,
    }


def _add_report_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--n-bins", type=_positive_int, default=15, help="bins of the binned metrics"
    )
    parser.add_argument(
        "--strategy",
        choices=_STRATEGIES,
        default="uniform",
        help="bins of the diagram (the table reports both: ece and adaptive_ece)",
    )
    parser.add_argument("--format", choices=_FORMATS, default="table", help="report format")
    parser.add_argument(
        "--plot", metavar="PNG", help="write a reliability diagram (format by the extension)"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace output files that exist already"
    )
    _add_quiet_option(parser)


def _positive_int(text: str) -> int:
    from reliacal._validation import check_n_bins

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    try:
        return check_n_bins(value)
    except ValueError as error:  # too many bins: check_n_bins says the limit
        raise argparse.ArgumentTypeError(str(error)) from None


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def _class_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if len(names) < 2 or any(not name for name in names):
        raise argparse.ArgumentTypeError(
            f"must be at least two non-empty comma-separated names, got {text!r}"
        )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"names must be distinct, got {text!r}")
    return names


def _say(message: str) -> None:
    from reliacal.cli._progress import say

    say(f"reliacal: {' '.join(message.split())}")


def _load(
    path: str,
    labels_path: str | None,
    arguments: argparse.Namespace,
    *,
    probs_key: str | None = None,
):
    """Read a prediction file with the command's options; ``probs_key``: one key of a pattern."""
    from reliacal.io import load_prediction_file

    options = _reading_options(arguments)
    if probs_key is not None:
        options["probs_key"] = probs_key
    predictions = load_prediction_file(
        path, labels_path=labels_path, labels=arguments.classes, **options
    )
    _say(predictions.source)
    return predictions


def _load_models(arguments: argparse.Namespace, name: str):
    """``({model name: probabilities}, predictions)`` of the file to evaluate.

    One model, named ``name``; or, for a ``--probs-key`` pattern (``probs_*``), one model
    per matching npz key, named by its key. ``predictions`` is the last one read (its
    labels and classes are those of every key: one file, one label key).
    """
    from reliacal.io import is_key_pattern, prediction_keys

    if not is_key_pattern(arguments.probs_key):
        predictions = _load(arguments.predictions, arguments.labels, arguments)
        return {name: predictions.probs}, predictions
    keys = prediction_keys(
        arguments.predictions, arguments.probs_key, labels_key=arguments.labels_key
    )
    if arguments.name is not None and len(keys) > 1:
        raise UserError(
            f"--name names one model, but --probs-key {arguments.probs_key!r} matches "
            f"{len(keys)} keys ({', '.join(keys)}); each is named by its key"
        )
    models = {}
    for key in keys:
        predictions = _load(arguments.predictions, arguments.labels, arguments, probs_key=key)
        models[arguments.name or key] = predictions.probs
    return models, predictions


def _evaluate(arguments: argparse.Namespace) -> int:
    from reliacal.io import is_parquet_input
    from reliacal.metrics import calibration_states, report_from_states

    outputs = _check_outputs(arguments, [arguments.predictions, arguments.labels])
    name = arguments.name or Path(arguments.predictions).stem
    streamable_only = arguments.streamable_only
    if is_parquet_input(arguments.predictions):
        if arguments.labels is None and "--plot" not in outputs:
            _print_report(
                arguments,
                report_from_states(_stream(arguments, name), streamable_only=streamable_only),
            )
            return 0
        if Path(arguments.predictions).is_dir():
            raise UserError(
                "a folder of parquet files is read batch by batch: its label column must be "
                "in the files (no --labels) and --plot, which needs every row in memory, is "
                "not available"
            )
    models, predictions = _load_models(arguments, name)
    states = calibration_states(
        predictions.labels,
        models,
        n_bins=arguments.n_bins,
        labels=predictions.classes,
        keep_confidences=not arguments.streamable_only,
    )
    plot = None
    if "--plot" in outputs:
        titled = models if len(models) > 1 else {_plot_title(arguments, name): predictions.probs}
        plot = (outputs["--plot"], predictions.labels, titled, predictions.classes)
    # The states hold all the metrics need: free the matrix before the quantile and smoothed
    # metrics sort and smooth the confidences, so that the peak stays near the input's size.
    del predictions, models
    _print_report(arguments, report_from_states(states, streamable_only=streamable_only))
    if plot is not None:
        _plot(arguments, *plot)
    return 0


def _plot_title(arguments: argparse.Namespace, name: str) -> str:
    """The diagram's title: ``--name``, else the ``--probs-key`` of an .npz file (the key
    that names the model among the file's arrays), else the file's stem (``name``)."""
    if arguments.name is None and arguments.probs_key is not None:
        if Path(arguments.predictions).suffix.lower() == ".npz":
            return arguments.probs_key
    return name


def _stream(arguments: argparse.Namespace, name: str) -> dict:
    """``{name: state}`` of a parquet file or folder read batch by batch."""
    from reliacal.io import stream_parquet

    state, source = stream_parquet(
        arguments.predictions,
        n_bins=arguments.n_bins,
        classes=arguments.classes,
        streamable_only=arguments.streamable_only,
        progress=None if arguments.progress.enabled else False,
        **_reading_options(arguments),
    )
    _say(source)
    return {name: state}


def _calibrate(arguments: argparse.Namespace) -> int:
    inputs = [arguments.calibration, arguments.evaluation]
    outputs = _check_outputs(arguments, inputs + [arguments.cal_labels, arguments.eval_labels])
    for option, path in (("CAL_FILE", arguments.calibration), ("EVAL_FILE", arguments.evaluation)):
        if Path(path).is_dir():
            raise UserError(
                f"{option} {path} is a folder: calibrate reads one prediction file (.npz, .npy, "
                ".csv or .parquet); join the parts first, e.g. "
                "pandas.read_parquet(folder).to_parquet(file)"
            )
    arguments.progress.step(f"reading {Path(arguments.calibration).name}")
    calibration = _load(arguments.calibration, arguments.cal_labels, arguments)
    arguments.progress.step(f"reading {Path(arguments.evaluation).name}")
    evaluation = _load(arguments.evaluation, arguments.eval_labels, arguments)
    if calibration.probs.ndim != 2 or evaluation.probs.ndim != 2:
        raise UserError("calibrate needs one probability column per class in both files")
    n_classes = calibration.probs.shape[1]
    if evaluation.probs.shape[1] != n_classes:
        raise UserError(
            f"the files disagree on the number of classes: {n_classes} in "
            f"{Path(arguments.calibration).name}, {evaluation.probs.shape[1]} in "
            f"{Path(arguments.evaluation).name}"
        )
    classes = _shared_classes(calibration, evaluation, n_classes)
    use_logits = calibration.logits is not None and evaluation.logits is not None
    arguments.progress.step(f"preparing --method {arguments.method}")  # imports torch
    estimator = _make_calibrator(arguments, classes, use_logits)
    if hasattr(estimator, "error_score"):
        # A search would record a failed fit (a calibrator's own check, e.g. too many classes
        # for matrix scaling) as a warning per fold and then fail with all of them; the first
        # error is the one to show.
        estimator.set_params(error_score="raise")
    cal_input = calibration.logits if use_logits else calibration.probs
    eval_input = evaluation.logits if use_logits else evaluation.probs
    arguments.progress.step(f"fitting {type(estimator).__name__}")
    estimator.fit(cal_input, calibration.labels)
    arguments.progress.step("predicting")
    calibrated = estimator.predict_proba(eval_input)
    if hasattr(estimator, "reason_"):
        # AutoCalibrator: the saved model stays the chooser, the report says what it chose.
        _say(f"{type(estimator).__name__}: chose {estimator.best_name_!r}: {estimator.reason_}")
    elif hasattr(estimator, "best_estimator_"):
        chosen = ", ".join(f"{key} = {value:g}" for key, value in estimator.best_params_.items())
        estimator = estimator.best_estimator_
        _say(f"{type(estimator).__name__}: {chosen} (chosen by 3-fold cross-validated NLL)")

    method_name = type(estimator).__name__
    if hasattr(estimator, "temperature_"):
        _say(f"{method_name}: temperature_ = {float(estimator.temperature_):.4f}")
    models = {"uncalibrated": evaluation.probs, method_name: calibrated}
    _report(arguments, evaluation.labels, models, labels=classes)
    if "--plot" in outputs:
        _plot(arguments, outputs["--plot"], evaluation.labels, models, classes)
    if "--out" in outputs:
        from reliacal.cli._outputs import write_predictions

        arguments.progress.step(f"writing {outputs['--out'].name}")
        # Probabilities keep the input's column names (p_0, p_cat); logit_k would say logits.
        columns = evaluation.columns if evaluation.logits is None else None
        written = write_predictions(
            outputs["--out"], calibrated, evaluation.labels, classes, columns=columns
        )
        _say(f"wrote {written}")
    if "--save-model" in outputs:
        from reliacal.cli._outputs import write_atomically
        from reliacal.persistence import save

        arguments.progress.step(f"writing {outputs['--save-model'].name}")
        # reliacal's pickle-free format (manifest.json + arrays.npz), one zip archive.
        written = write_atomically(
            outputs["--save-model"], lambda temporary: save(estimator, temporary, archive=True)
        )
        _say(f"wrote {written}")
    return 0


def _shared_classes(calibration, evaluation, n_classes: int):
    """The class of each probability column.

    Columns named by the files (tables with class-named columns) must agree;
    integer labels name their column directly (a calibration split may miss
    classes); other labels must together be exactly one per column.
    """
    if calibration.classes is not None or evaluation.classes is not None:
        if (
            calibration.classes is None
            or evaluation.classes is None
            or not np.array_equal(calibration.classes, evaluation.classes)
        ):
            raise UserError("the two files name different classes for their columns")
        return calibration.classes
    both = np.concatenate([calibration.labels, evaluation.labels])
    if np.issubdtype(both.dtype, np.integer):
        if both.min() < 0 or both.max() >= n_classes:
            raise UserError(
                f"integer labels must lie in [0, {n_classes}) for {n_classes} probability "
                f"columns, got labels from {both.min()} to {both.max()}"
            )
        return np.arange(n_classes)
    classes = np.unique(both)
    if len(classes) != n_classes:
        raise UserError(
            f"the labels hold {len(classes)} distinct class{'es' if len(classes) != 1 else ''} "
            "but the predictions have "
            f"{n_classes} columns"
        )
    return classes


def _make_calibrator(arguments: argparse.Namespace, classes: np.ndarray, use_logits: bool) -> Any:
    """The calibrator of ``--method``; a cross-validated search when no --reg-* is given."""
    from reliacal.calibrators import MatrixScaling, VectorScaling, make_calibrator
    from reliacal.calibrators.scaling import check_matrix_size, tuned_scaling

    shared = {"input": "logits" if use_logits else "probs", "classes": classes}
    off_diagonal, bias = arguments.reg_off_diagonal, arguments.reg_bias
    if not calibration_methods()[arguments.method].tuned:
        if off_diagonal is not None or bias is not None:
            raise UserError("--reg-off-diagonal and --reg-bias apply to vector and matrix only")
        # AdaptiveTS is seeded by the table (seed 0): the command is repeatable.
        return make_calibrator(arguments.method, **shared)
    if arguments.method == "vector":
        if off_diagonal is not None:
            raise UserError("--reg-off-diagonal applies to matrix only")
        if bias is None:
            return tuned_scaling(VectorScaling(**shared))
        return VectorScaling(reg_bias=bias, **shared)
    try:
        check_matrix_size(len(classes))
    except ValueError as error:
        raise UserError(f"{error}; from the command: --method vector or temperature") from None
    if off_diagonal is None and bias is None:
        return tuned_scaling(MatrixScaling(**shared), values=_MATRIX_PENALTIES)
    return MatrixScaling(reg_off_diagonal=off_diagonal or 0.0, reg_bias=bias or 0.0, **shared)


def _report(
    arguments: argparse.Namespace,
    y_true: np.ndarray,
    predictions: dict[str, np.ndarray],
    labels: Any = None,
) -> None:
    from reliacal.metrics import calibration_states, report_from_states

    arguments.progress.step("computing the report")
    states = calibration_states(y_true, predictions, n_bins=arguments.n_bins, labels=labels)
    _print_report(arguments, report_from_states(states))


def _print_report(arguments: argparse.Namespace, report) -> None:
    if arguments.format == "table":
        print(report.to_string())
    elif arguments.format == "csv":
        print(report.to_csv(), end="")
    else:
        print(report.to_json(orient="index", indent=2))


def _plot(arguments, out: Path, y_true, predictions, labels) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reliacal.plot import plot_reliability_diagrams

    arguments.progress.step(f"drawing {out.name}")
    displays = plot_reliability_diagrams(
        y_true, predictions, n_bins=arguments.n_bins, strategy=arguments.strategy, labels=labels
    )
    figure = next(iter(displays.values())).figure_
    from reliacal.cli._outputs import write_atomically

    try:
        written = write_atomically(out, lambda temporary: figure.savefig(temporary, dpi=120))
    finally:
        plt.close(figure)
    _say(f"wrote {written}")


def _check_outputs(arguments: argparse.Namespace, inputs: list[str | None]) -> dict[str, Path]:
    """Refuse output paths that would fail or clobber a file, before any work is done."""
    from reliacal.cli._outputs import check_outputs

    outputs = {
        f"--{option.replace('_', '-')}": getattr(arguments, option, None)
        for option in ("out", "plot", "save_model")
    }
    return check_outputs(outputs, inputs, force=arguments.force)


def _demo(arguments: argparse.Namespace) -> int:
    from reliacal.demo import run_demo

    result = run_demo(
        arguments.out,
        quick=arguments.quick,
        random_state=arguments.seed,
        verbose=not arguments.quiet,
    )
    _say(f"wrote {result.report_path} and {result.html_path}")
    if arguments.results is not None:
        from reliacal.cli._outputs import write_atomically
        from reliacal.demo import results_file

        command = "reliacal demo" + (" --quick" if arguments.quick else "")
        command += f" --seed {arguments.seed}" if arguments.seed else ""
        text = results_file(result.summary, f"{command} --results {arguments.results}")
        write_atomically(arguments.results, lambda temporary: temporary.write_text(text))
        _say(f"wrote {arguments.results}")
    return 0


class _Command(NamedTuple):
    """One subcommand: its help line, its --help description, its options, its handler."""

    summary: str
    description: str
    add_options: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


# The subcommands in the order of `reliacal --help`; each handler returns the exit status.
_COMMANDS = {
    "evaluate": _Command(
        "print the calibration metrics of a prediction file",
        "Print the calibration report (ECE, NLL, Brier, ...) of a prediction file.",
        _add_evaluate_options,
        _evaluate,
    ),
    "calibrate": _Command(
        "fit a post-hoc calibrator on one file, evaluate it on another",
        "Fit a calibrator on CAL_FILE and report the metrics before and after on "
        "EVAL_FILE. Probabilities are used as log-probabilities (the logits up to a "
        "per-row constant, which temperature scaling ignores); files that hold logits "
        "are used as they are. Without --reg-off-diagonal/--reg-bias, vector and matrix "
        "scaling choose their regularisation by 3-fold cross-validated NLL.",
        _add_calibrate_options,
        _calibrate,
    ),
    "demo": _Command(
        "train a small classifier on the digits and write a calibration report",
        "Train a tiny Vision Transformer on scikit-learn's digits, calibrate it with "
        "every registered method and write report.md, report.html, figures and "
        "predictions.",
        _add_demo_options,
        _demo,
    ),
}

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
