"""Speed and peak memory of reliacal.metrics, side by side with the peers.

On an (n, K) float32 probability matrix (default 1,000,000 x 100) this times every
reliacal metric and the full report, a bare numpy ``max`` + ``argmax`` pass (the
floor for any top-label binned metric), torchmetrics' multiclass ECE, relplot's
smECE (given the top-label confidences, as relplot takes them) and netcal's ECE
when netcal is installed. Contenders run interleaved, ``--repeats`` rounds, so that
load from other users affects all of them alike; the table reports the median and
the minimum. Peak memory is the growth of the process's resident set during one
call (Linux ``VmHWM`` after resetting it), so torch's allocations count too.

With ``--memory-only`` it measures peak memory only, beside the input's size, for
the metrics whose memory grows with the input (issue 16 item 15's goal: at most the
input's size again), and replaces the "Memory at scale" section of the results.

With ``--report-only`` it times the floor, the ECE, the classwise ECE and the full
report only (interleaved, ``--repeats`` rounds; the report and the classwise ECE
read the matrix in one pass), and replaces the "One pass for the report" section;
``--baseline DIR`` also times an older revision extracted in ``DIR`` (``git archive
REV | tar -x -C DIR``) the same way, in a child process with ``DIR`` first on the
path, right after.

Run from the repository root::

    .venv/bin/python benchmarks/metrics_speed.py              # prints, writes results
    .venv/bin/python benchmarks/metrics_speed.py --n 100000   # a quicker look
    .venv/bin/python benchmarks/metrics_speed.py --memory-only --n 10000000 --k 10
    .venv/bin/python benchmarks/metrics_speed.py --report-only --baseline /tmp/base

Results go to ``benchmarks/results/metrics_speed.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import _common
import numpy as np
import relplot
import torch
from torchmetrics.functional.classification import multiclass_calibration_error

import reliacal.metrics as rm


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss_growth_mb(function) -> float | None:
    """Growth of the resident set during ``function()``, in MB (None if unsupported).

    Counts every allocation (numpy, torch, Python). Free heap memory is first handed
    back to the system (glibc ``malloc_trim``), else a call could reuse pages freed
    by an earlier one and seem to need nothing.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current resident set
    except OSError:
        return None
    before = _status_kb("VmRSS")
    function()
    return (_status_kb("VmHWM") - before) / 1024


def traced_peak_mb(function) -> float:
    """Peak of numpy/Python allocations during ``function()`` (tracemalloc), in MB."""
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def make_data(n_samples: int, n_classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((n_samples, n_classes), dtype=np.float32)
    logits *= 3.0
    probs = rm.softmax(logits)
    del logits
    # Labels agree with the arg-max 60% of the time: a miscalibrated model.
    predicted = probs.argmax(axis=1)
    labels = np.where(
        rng.uniform(size=n_samples) < 0.6, predicted, rng.integers(0, n_classes, n_samples)
    )
    return probs, labels


def contenders(probs, labels):
    n_classes = probs.shape[1]
    probs_t, labels_t = torch.from_numpy(probs), torch.from_numpy(labels)
    confidence = probs.max(axis=1).astype(np.float64)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    correct_int = correct.astype(np.int64)

    def on_matrix(metric, **options):
        return lambda: metric(labels, probs, **options)

    runs = {
        "numpy max + argmax (floor)": lambda: (probs.max(axis=1), probs.argmax(axis=1)),
        "reliacal ECE": on_matrix(rm.expected_calibration_error),
        "reliacal ECE l2": on_matrix(rm.expected_calibration_error, norm="l2"),
        "reliacal MCE": on_matrix(rm.maximum_calibration_error),
        "reliacal adaptive ECE": on_matrix(rm.expected_calibration_error, strategy="quantile"),
        "reliacal debiased ECE": on_matrix(rm.debiased_calibration_error),
        "reliacal binned_statistics": on_matrix(rm.binned_statistics),
        "reliacal classwise ECE": on_matrix(rm.classwise_calibration_error),
        "reliacal smooth ECE (matrix)": on_matrix(rm.smooth_calibration_error),
        "reliacal smooth ECE (conf, correct)": lambda: rm.smooth_calibration_error(
            correct_int, confidence, mode="positive"
        ),
        "reliacal NLL": on_matrix(rm.negative_log_likelihood),
        "reliacal Brier": on_matrix(rm.brier_score),
        "reliacal accuracy": on_matrix(rm.accuracy),
        "reliacal calibration_report": lambda: rm.calibration_report(labels, {"m": probs}),
        "torchmetrics ECE": lambda: multiclass_calibration_error(
            probs_t, labels_t, n_classes, n_bins=15, norm="l1"
        ),
        "torchmetrics MCE": lambda: multiclass_calibration_error(
            probs_t, labels_t, n_classes, n_bins=15, norm="max"
        ),
        "relplot smECE (conf, correct)": lambda: relplot.smECE(confidence, correct),
    }
    try:
        from netcal.metrics import ECE as NetcalECE

        runs["netcal ECE"] = lambda: NetcalECE(bins=15).measure(probs, labels)
    except ImportError:
        pass
    return runs


MEMORY_SECTION = "## Memory at scale"


def memory_contenders(probs, labels):
    return {
        "reliacal ECE": lambda: rm.expected_calibration_error(labels, probs),
        "reliacal classwise ECE": lambda: rm.classwise_calibration_error(labels, probs),
        "reliacal classwise ECE (quantile)": lambda: rm.classwise_calibration_error(
            labels, probs, strategy="quantile"
        ),
        "reliacal calibration_report": lambda: rm.calibration_report(labels, {"m": probs}),
    }


def memory_section(args, probs, labels) -> str:
    """Peak memory of the memory-hungry metrics beside the input's size (markdown)."""
    input_mb = probs.nbytes / 2**20
    labels_mb = labels.nbytes / 2**20
    lines = [
        MEMORY_SECTION,
        "",
        f"Command: `.venv/bin/python benchmarks/metrics_speed.py --memory-only --n {args.n} "
        f"--k {args.k}`",
        "",
        f"Run {datetime.datetime.now().isoformat(timespec='minutes')} on {platform.node()}, "
        f"numpy {np.__version__}. Input: {args.n:,} x {args.k} float32 probabilities, "
        f"{input_mb:.0f} MiB (labels: {labels_mb:.0f} MiB more). Goal: each call adds at most "
        "the input's size again.",
        "",
        "| call | RSS growth MiB | tracemalloc MiB | RSS growth / input |",
        "|---|---:|---:|---:|",
    ]
    for name, function in memory_contenders(probs, labels).items():
        function()  # warm-up: imports, first-touch page faults of reused buffers
        rss = rss_growth_mb(function)
        traced = traced_peak_mb(function)
        share = "n/a" if rss is None else f"{rss / input_mb:.2f}"
        rss_text = "n/a" if rss is None else f"{rss:.0f}"
        lines.append(f"| {name} | {rss_text} | {traced:.0f} | {share} |")
    return "\n".join(lines) + "\n"


REPORT_SECTION = "## One pass for the report"
FLOOR = "numpy max + argmax (floor)"


def report_contenders(probs, labels):
    return {
        FLOOR: lambda: (probs.max(axis=1), probs.argmax(axis=1)),
        "reliacal ECE": lambda: rm.expected_calibration_error(labels, probs),
        "reliacal classwise ECE": lambda: rm.classwise_calibration_error(labels, probs),
        "reliacal calibration_report": lambda: rm.calibration_report(labels, {"m": probs}),
    }


def report_ratios(n_samples: int, n_classes: int, repeats: int) -> dict:
    """Median and minimum seconds of the report's contenders, and the load before them."""
    probs, labels = make_data(n_samples, n_classes)
    runs = report_contenders(probs, labels)
    for function in runs.values():
        function()
    load = _common.load_average()
    times, _ = measure(runs, repeats, memory=False)
    return {
        "load": load,
        "median": {name: statistics.median(values) for name, values in times.items()},
        "min": {name: min(values) for name, values in times.items()},
    }


def baseline_ratios(folder: Path, args) -> dict:
    """:func:`report_ratios` of the revision in ``folder``, in a child process."""
    benchmarks = str(Path(__file__).resolve().parent)
    code = (
        f"import json, sys; sys.path.insert(1, {benchmarks!r}); import metrics_speed as m; "
        f"assert m.rm.__file__.startswith({str(Path(folder).resolve())!r}), m.rm.__file__; "
        f"print(json.dumps(m.report_ratios({args.n}, {args.k}, {args.repeats})))"
    )
    # Run in the baseline's folder: -c puts it first on the path, before this checkout.
    env = {**os.environ, "PYTHONPATH": str(folder)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=folder
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def report_section(args, ours: dict, baseline: dict | None) -> str:
    """The one-pass section (markdown): each contender's time over the floor."""
    columns = [("this revision", ours)] + ([("baseline", baseline)] if baseline else [])
    lines = [
        REPORT_SECTION,
        "",
        f"Command: `.venv/bin/python benchmarks/metrics_speed.py --report-only --n {args.n} "
        f"--k {args.k} --repeats {args.repeats}"
        + (f" --baseline {args.baseline}`" if baseline else "`"),
        "",
        f"Run {datetime.datetime.now().isoformat(timespec='minutes')} on {platform.node()}: "
        f"{os.cpu_count()} CPUs, one thread, numpy {np.__version__}. Input: {args.n:,} x "
        f"{args.k} float32 probabilities. Contenders interleaved, {args.repeats} rounds; "
        "the ratio is the median time over the floor's median in the same process (the "
        "minimum's ratio in brackets). Load average (1 min) before: "
        + ", ".join(f"{name} {run['load']:.1f}" for name, run in columns)
        + " (2 shared cores: the times move with the load, the ratios much less).",
        "",
        "| contender | "
        + " | ".join(f"{name} median s | {name} / floor" for name, _ in columns)
        + " |",
        "|---|" + "---:|---:|" * len(columns),
    ]
    for contender in ours["median"]:
        cells = []
        for _, run in columns:
            median, least = run["median"], run["min"]
            cells.append(
                f"{median[contender]:.3f} | {median[contender] / median[FLOOR]:.2f} "
                f"({least[contender] / least[FLOOR]:.2f})"
            )
        lines.append(f"| {contender} | " + " | ".join(cells) + " |")
    median = ours["median"]
    lines += ["", "Targets (this revision):", ""]
    for contender, target in (("reliacal classwise ECE", 1.5), ("reliacal calibration_report", 2)):
        value = median[contender] / median[FLOOR]
        verdict = "met" if value <= target else "MISSED"
        lines.append(f"- {contender} / floor: {value:.2f} (target <= {target}): {verdict}")
    return "\n".join(lines) + "\n"


def replace_section(text: str, section: str, heading: str = MEMORY_SECTION) -> str:
    """``text`` with its ``heading`` section replaced by ``section`` (appended if absent)."""
    start = text.find(heading)
    if start < 0:
        return text.rstrip("\n") + "\n\n" + section
    end = text.find("\n## ", start + len(heading))
    rest = "" if end < 0 else text[end + 1 :]
    return text[:start] + section + ("\n" + rest if rest else "")


def sections_after_checks(path: Path) -> str:
    """The sections an earlier results file has after "## Checks" (memory at scale, the
    command's memory), which this full run does not measure and so must keep."""
    previous = path.read_text() if path.exists() else ""
    start = previous.find("\n## ", max(previous.find("## Checks"), 0) + 1)
    return "" if previous.find("## Checks") < 0 or start < 0 else previous[start:]


def measure(runs, repeats: int, memory: bool = True):
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, function in runs.items():
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    if not memory:
        return times, None
    memory = {
        name: (rss_growth_mb(function), traced_peak_mb(function)) for name, function in runs.items()
    }
    return times, memory


def build_report(args, argv, runs, times, memory, checks, load_before) -> str:
    median = {name: statistics.median(values) for name, values in times.items()}
    best = {name: min(values) for name, values in times.items()}
    floor = "numpy max + argmax (floor)"
    lines = [
        *_common.header(
            "reliacal.metrics speed",
            __file__,
            argv,
            load_before=load_before,
            details=f"Data: {args.n:,} x {args.k} float32 probabilities "
            f"({args.n * args.k * 4 / 1e6:.0f} MB).",
        ),
        "Peak memory: growth of the resident set during one call (all allocations,",
        "torch included) and the tracemalloc peak (numpy and Python allocations only).",
        "",
        "| contender | median s | min s | median / floor | RSS growth MB | tracemalloc MB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in runs:
        rss, traced = memory[name]
        lines.append(
            f"| {name} | {median[name]:.3f} | {best[name]:.3f} | "
            f"{median[name] / median[floor]:.2f} | "
            f"{'n/a' if rss is None else f'{rss:.0f}'} | {traced:.0f} |"
        )

    def ratio(slow: str, fast: str) -> str:
        return f"{median[slow] / median[fast]:.2f}x (median), {best[slow] / best[fast]:.2f}x (min)"

    lines += ["", "## Targets", ""]
    for name in (
        "reliacal ECE",
        "reliacal ECE l2",
        "reliacal MCE",
        "reliacal adaptive ECE",
        "reliacal debiased ECE",
        "reliacal binned_statistics",
    ):
        value = median[name] / median[floor]
        verdict = "met" if value <= 1.5 else "MISSED"
        lines.append(f"- {name} / floor: {value:.2f} (target <= 1.5): {verdict}")
    for name, target in (("reliacal classwise ECE", 1.5), ("reliacal calibration_report", 2)):
        value = median[name] / median[floor]
        verdict = "met" if value <= target else "MISSED"
        lines.append(f"- {name} / floor: {value:.2f} (target <= {target}): {verdict}")
    for name in ("reliacal ECE", "reliacal MCE"):
        peer = name.replace("reliacal", "torchmetrics")
        value = median[peer] / median[name]
        verdict = "met" if value >= 2 else "MISSED"
        lines.append(f"- {peer} / {name}: {ratio(peer, name)} (target >= 2x): {verdict}")
    if "netcal ECE" in median:
        lines.append(f"- netcal ECE / reliacal ECE: {ratio('netcal ECE', 'reliacal ECE')}")
    else:
        lines.append("- netcal: not installed, not measured")
    for name in ("reliacal smooth ECE (conf, correct)", "reliacal smooth ECE (matrix)"):
        value = median["relplot smECE (conf, correct)"] / median[name]
        verdict = "met" if value >= 3 else "MISSED"
        lines.append(
            f"- relplot smECE / {name}: {ratio('relplot smECE (conf, correct)', name)} "
            f"(target >= 3x): {verdict}"
        )
    lines += [
        "",
        "The `(matrix)` smooth ECE includes reliacal's validation and arg-max pass over the",
        "matrix; relplot is handed the confidences, so `(conf, correct)` is the like-for-like",
        "comparison.",
        "",
        "## Checks",
        "",
    ]
    lines += [f"- {check}" for check in checks]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="number of samples")
    parser.add_argument("--k", type=int, default=100, help="number of classes")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    _common.add_output_argument(parser, "metrics_speed.md")
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="measure peak memory only and replace that section of the results",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="time the floor, ECE, classwise ECE and calibration_report only and replace "
        "the 'One pass for the report' section of the results",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="with --report-only: also time the revision extracted in this folder",
    )
    args = parser.parse_args(argv)
    if args.report_only:
        ours = report_ratios(args.n, args.k, args.repeats)
        baseline = None if args.baseline is None else baseline_ratios(args.baseline, args)
        section = report_section(args, ours, baseline)
        print(section)
        previous = args.output.read_text() if args.output.exists() else ""
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(replace_section(previous, section, REPORT_SECTION))
        print(f"written to {args.output}")
        return

    probs, labels = make_data(args.n, args.k)
    if args.memory_only:
        section = memory_section(args, probs, labels)
        print(section)
        previous = args.output.read_text() if args.output.exists() else ""
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(replace_section(previous, section))
        print(f"written to {args.output}")
        return
    runs = contenders(probs, labels)
    for function in runs.values():  # warm-up: imports, first-touch page faults
        function()
    load_before = _common.load_average()
    times, memory = measure(runs, args.repeats)

    confidence = probs.max(axis=1).astype(np.float64)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    ours = rm.smooth_calibration_error(labels, probs)
    theirs = relplot.smECE(confidence, correct)
    ece = rm.expected_calibration_error(labels, probs)
    torch_ece = multiclass_calibration_error(
        torch.from_numpy(probs), torch.from_numpy(labels), args.k, n_bins=15
    ).item()
    checks = [
        f"smooth ECE: reliacal {ours:.6f}, relplot {theirs:.6f}, |difference| "
        f"{abs(ours - theirs):.1e} (required <= 1e-4)",
        f"ECE: reliacal {ece:.6f}, torchmetrics {torch_ece:.6f}, |difference| "
        f"{abs(ece - torch_ece):.1e}",
    ]
    report = build_report(args, argv, runs, times, memory, checks, load_before)
    _common.write_results(report + sections_after_checks(args.output), args.output)


if __name__ == "__main__":
    main()
