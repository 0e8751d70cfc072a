"""What the benchmarks share: the header of a results file, common options, tiny models.

Every benchmark runs as ``.venv/bin/python benchmarks/<name>.py`` from the
repository root. Python then puts ``benchmarks/`` first on the import path, so
``import _common`` finds this file without a package or an install. The other
shared pieces live in ``_``-prefixed modules beside it (``_posthoc_data``,
``_wordnet_task``, ``_timing``), found the same way; a script imports those,
never another script (``tests/test_benchmarks.py``).

The header says how to rerun a result and on what it was measured::

    # <title>

    Command: `.venv/bin/python benchmarks/<name>.py <arguments>`
    Machine: <date UTC>, <arch>, <n> CPUs, <RAM> GiB RAM, load average <before / after>;
    Python <v>, numpy <v>, torch <v> (<n> threads). <what the script adds>

The machine is a shared VM, so the load average (1 min) is part of every
header: times move with it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The interpreter the README's set-up creates (`make install`).
INTERPRETER = ".venv/bin/python"


# Header ----------------------------------------------------------------------------------


# Python source for a measured child process: ``peak_bytes()``, the peak resident set of
# its own process image (Linux VmHWM, KiB in /proc). Not getrusage's ru_maxrss: a child
# started by subprocess (vfork + exec) inherits its parent's peak in that field.
PEAK_BYTES_SOURCE = """
def peak_bytes():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) * 1024
"""


def row_groups(seed: int, rows: int, n_classes: int, group_rows: int):
    """Yield ``(start, probs, labels)`` for ``rows`` synthetic rows, ``group_rows`` at a time.

    Dirichlet(0.3) float32 probabilities and labels drawn from them: the
    predictions of the memory benchmarks (``cli_memory.py``,
    ``evaluate_at_scale.py`` and its oracle), which all draw the same rows
    from the same seed and group size.
    """
    rng = np.random.default_rng(seed)
    for start in range(0, rows, group_rows):
        size = min(group_rows, rows - start)
        probs = rng.dirichlet(np.full(n_classes, 0.3), size=size).astype(np.float32)
        probs /= probs.sum(axis=1, keepdims=True)
        draws = rng.random(size)[:, None] > np.cumsum(probs, axis=1)
        yield start, probs, np.minimum(draws.sum(axis=1), n_classes - 1)


def command_line(script: str, argv: Sequence[str] | None = None) -> str:
    """The command that reruns ``script`` with ``argv`` (default: this process's
    arguments) from the repository root, quoted for a POSIX shell."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    return shlex.join([INTERPRETER, f"benchmarks/{Path(script).name}", *arguments])


def load_average() -> float:
    """The 1-minute load average (NaN where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return float("nan")


def memory_gib() -> float:
    """Physical memory in GiB (NaN where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (AttributeError, OSError, ValueError):
        return float("nan")


def machine_line(load_before: float | None = None) -> str:
    """``Machine: ...``: date, architecture, cores, RAM, load, library versions.

    ``load_before`` is the load average measured before the timed part, when
    the script took it; the load now is reported beside it.
    """
    import torch

    threads = torch.get_num_threads()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = f"{load_average():.1f}"
    if load_before is not None:
        load = f"{load_before:.1f} before / {load} after"
    return (
        f"Machine: {now}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{memory_gib():.0f} GiB RAM, load average {load}; Python "
        f"{platform.python_version()}, numpy {np.__version__}, torch {torch.__version__} "
        f"({threads} thread{'' if threads == 1 else 's'})."
    )


def table_head(titles: Sequence[str], *, numeric: bool = False) -> list[str]:
    """The title row and rule of a Markdown table; ``numeric`` right-aligns every column
    but the first (the row names)."""
    rule = "---:|" if numeric else "---|"
    return ["| " + " | ".join(titles) + " |", "|---|" + rule * (len(titles) - 1)]


def header(
    title: str,
    script: str,
    argv: Sequence[str] | None = None,
    *,
    details: str = "",
    load_before: float | None = None,
) -> list[str]:
    """The first lines of a results file: title, command, machine and ``details``
    (what this run adds: seeds, splits, total time...), then a blank line."""
    machine = machine_line(load_before)
    return [
        f"# {title}",
        "",
        f"Command: `{command_line(script, argv)}`  ",
        f"{machine} {details}".rstrip(),
        "",
    ]


# Options and output ----------------------------------------------------------------------


def add_output_argument(parser: argparse.ArgumentParser, results_file: str | None) -> None:
    """``--output PATH``: where the Markdown goes; by default ``results/<results_file>``,
    or only printed when ``results_file`` is None."""
    default = None if results_file is None else RESULTS_DIR / results_file
    where = "print only" if default is None else f"default benchmarks/results/{results_file}"
    parser.add_argument(
        "--output", type=Path, default=default, help=f"Markdown file to write ({where})"
    )


def add_seeds_argument(parser: argparse.ArgumentParser, default: Sequence[int]) -> None:
    """``--seeds S [S ...]``: the seeds of the repeated runs."""
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=list(default),
        help=f"seeds of the repeated runs (default {' '.join(map(str, default))})",
    )


def limit_threads(n_threads: int = 1) -> None:
    """Run torch and the BLAS libraries on ``n_threads`` threads: tiny networks on a
    shared machine are faster, and their times steadier, without oversubscription."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(n_threads)
    threadpool_limits(n_threads)


def write_results(text: str, output: Path | None) -> None:
    """Print the Markdown and write it to ``output`` (when given)."""
    print(text)
    if output is None:
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}", flush=True)


# Tiny models -----------------------------------------------------------------------------


def tabular_classifiers() -> dict:
    """The four scikit-learn classifiers of the tabular benchmarks, sized to run in minutes."""
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {
        "gradient boosting": HistGradientBoostingClassifier(max_iter=50, random_state=0),
        "random forest": RandomForestClassifier(n_estimators=50, random_state=0),
        "logistic regression": make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
        "MLP": make_pipeline(
            StandardScaler(),
            MLPClassifier(
                hidden_layer_sizes=(32,), max_iter=200, early_stopping=True, random_state=0
            ),
        ),
    }


def train_digits_vit(X, y, seed: int, *, quick: bool = False):
    """The demo's tiny ViT (:func:`reliacal.datasets.make_tiny_vit`) trained on ``(X, y)``
    with the demo's recipe and ``seed`` for everything; returns it and the seconds taken.

    The teacher of ``director_digits.py``, the pre-trained backbone of
    ``calattn_digits.py`` and the classifier of ``posthoc_quality.py``'s digits.
    """
    from reliacal.datasets import default_digits_training_config, train_digits_classifier

    start = time.perf_counter()
    model, _ = train_digits_classifier(
        X,
        y,
        config=default_digits_training_config(quick=quick, random_state=seed),
        random_state=seed,
    )
    return model, time.perf_counter() - start
