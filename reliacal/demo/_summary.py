"""The demo's headline numbers and the claims they support, written from the run itself.

The README quotes the demo; so that it cannot quote stale numbers, the block it
holds is this module's text, written by ``reliacal demo --results PATH`` (the
committed copy is ``benchmarks/results/demo.md``), and the tests compare the
two. Every number and every comparison in the block (which method has the
lowest ECE and NLL, which differences the paired bootstrap finds significant)
is computed here from the run's metric table and its bootstrap comparisons.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "END_MARKER",
    "START_MARKER",
    "extract_block",
    "results_file",
    "summary_block",
    "summary_findings",
]

#: The lines around the generated block, in the results file and in the README.
START_MARKER = "<!-- demo-results:start: written by `reliacal demo --results`; do not edit -->"
END_MARKER = "<!-- demo-results:end -->"

# The table's columns (from the report) and their headings.
_COLUMNS = {"accuracy": "accuracy", "ece": "ECE", "smooth_ece": "smooth ECE", "nll": "NLL"}
_DIGITS = 4


def _fixed(value: float) -> str:
    return f"{value:.{_DIGITS}f}"


def _signed(value: float) -> str:
    return f"{value:+.{_DIGITS}f}"


def _names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``; "none" for none."""
    names = list(names)
    if not names:
        return "none"
    if len(names) == 1:
        return names[0]
    return f"{', '.join(names[:-1])} and {names[-1]}"


def _lowest(report: pd.DataFrame, column: str) -> str:
    """The methods with the lowest value of ``column`` as printed (ties at 4 digits kept)."""
    printed = report[column].map(_fixed)
    best = min(printed, key=float)
    names = [name for name, value in printed.items() if value == best]
    return f"{_names(names)} ({best})"


def _interval(row) -> str:
    return (
        f"{_signed(row.difference)} [{_signed(row.difference_ci_low)}, "
        f"{_signed(row.difference_ci_high)}]"
    )


def summary_findings(
    report: pd.DataFrame,
    comparisons: Mapping[str, pd.DataFrame],
    pairs: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """The claims of the demo's numbers, one Markdown line each.

    Parameters
    ----------
    report : pandas.DataFrame
        One row per method with at least ``ece`` and ``nll`` columns.
    comparisons : mapping of str to pandas.DataFrame
        Reference name -> :func:`reliacal.metrics.compare` of every method
        against it (metrics ``ece`` and ``nll``).
    pairs : sequence of (str, str)
        ``(method, reference)`` rows to read against each other, with their
        difference and its interval spelled out; the reference must be one of
        ``comparisons``.

    Returns
    -------
    list of str
        The lowest ECE and NLL, then for each reference the methods whose ECE
        or NLL is significantly lower or higher than its own, then the pairs.

    Examples
    --------
    >>> import pandas as pd
    >>> report = pd.DataFrame({"ece": [0.05, 0.02], "nll": [0.4, 0.3]}, index=["raw", "TS"])
    >>> rows = pd.MultiIndex.from_product([["raw", "TS"], ["ece", "nll"]],
    ...                                   names=["method", "metric"])
    >>> compared = pd.DataFrame({"difference": [0, 0, -0.03, -0.1],
    ...                          "difference_ci_low": [0, 0, -0.05, -0.2],
    ...                          "difference_ci_high": [0, 0, -0.01, 0.01],
    ...                          "significant": [False, False, True, False]}, index=rows)
    >>> for line in summary_findings(report, {"raw": compared}, [("TS", "raw")]):
    ...     print(line)
    Lowest ECE: TS (0.0200). Lowest NLL: TS (0.3000).
    - Against raw, significantly lower ECE: TS; higher ECE: none; lower NLL: none; higher NLL: none.
    - TS against raw: ECE -0.0300 [-0.0500, -0.0100], NLL -0.1000 [-0.2000, +0.0100]; significant: ECE.
    """
    lines = [f"Lowest ECE: {_lowest(report, 'ece')}. Lowest NLL: {_lowest(report, 'nll')}."]
    for reference, compared in comparisons.items():
        parts = []
        for metric in ("ece", "nll"):
            rows = compared.xs(metric, level="metric")
            rows = rows[(rows.index != reference) & rows["significant"].astype(bool)]
            lower = [name for name, row in rows.iterrows() if row["difference"] < 0]
            higher = [name for name, row in rows.iterrows() if row["difference"] > 0]
            parts.append(f"lower {metric.upper()}: {_names(lower)}")
            parts.append(f"higher {metric.upper()}: {_names(higher)}")
        lines.append(f"- Against {reference}, significantly {'; '.join(parts)}.")
    for method, reference in pairs:
        if method not in report.index or reference not in comparisons:
            continue
        cells, significant = [], []
        for metric in ("ece", "nll"):
            row = comparisons[reference].loc[(method, metric)]
            cells.append(f"{metric.upper()} {_interval(row)}")
            if bool(row["significant"]):
                significant.append(metric.upper())
        verdict = f"significant: {_names(significant)}" if significant else "neither is significant"
        lines.append(f"- {method} against {reference}: {', '.join(cells)}; {verdict}.")
    return lines


def summary_block(
    report: pd.DataFrame,
    comparisons: Mapping[str, pd.DataFrame],
    *,
    sizes: tuple[int, int, int],
    random_state: int,
    n_bins: int,
    n_bootstraps: int,
    pairs: Sequence[tuple[str, str]] = (),
    quick: bool = False,
) -> str:
    """The block that the README holds: how it was measured, the table, the claims.

    Parameters
    ----------
    report : pandas.DataFrame
        The demo's metric table (``accuracy``, ``ece``, ``smooth_ece``, ``nll``
        columns at least), one row per method.
    comparisons, pairs
        As in :func:`summary_findings`.
    sizes : (int, int, int)
        Training, calibration and test images.
    random_state : int
        The demo's seed.
    n_bins : int
        Bins of the ECE.
    n_bootstraps : int
        Resamples of the paired bootstrap.
    quick : bool, default=False
        The run was a smoke test (``--quick``): the block says so.

    Returns
    -------
    str
        Markdown, between :data:`START_MARKER` and :data:`END_MARKER`.

    Examples
    --------
    >>> import pandas as pd
    >>> report = pd.DataFrame({"accuracy": [0.9], "ece": [0.05], "smooth_ece": [0.04],
    ...                        "nll": [0.4]}, index=["raw"])
    >>> print(summary_block(report, {}, sizes=(5, 3, 2), random_state=0, n_bins=15,
    ...                     n_bootstraps=10).splitlines()[2])
    Measured by `reliacal demo` (seed 0) on its test split of 2 images (the model trained on 5, the calibrators fitted on 3); ECE with 15 equal-width bins.
    """
    n_train, n_calibration, n_test = sizes
    lines = [
        START_MARKER,
        "",
        f"Measured by `reliacal demo` (seed {random_state}) on its test split of {n_test:,} "
        f"images (the model trained on {n_train:,}, the calibrators fitted on "
        f"{n_calibration:,}); ECE with {n_bins} equal-width bins."
        + (" **Quick mode**: a smoke test with very few epochs, not a result." if quick else ""),
        "",
        "| method | " + " | ".join(_COLUMNS.values()) + " |",
        "| --- |" + " ---: |" * len(_COLUMNS),
    ]
    for name, row in report.iterrows():
        lines.append(f"| {name} | " + " | ".join(_fixed(row[c]) for c in _COLUMNS) + " |")
    findings = summary_findings(report, comparisons, pairs)
    lines += ["", findings[0]]
    if len(findings) > 1:
        lines += [
            "",
            f"Paired bootstrap over the {n_test:,} test images ({n_bootstraps:,} resamples, "
            "95% intervals; a difference is significant when its interval excludes zero):",
            "",
            *findings[1:],
        ]
    lines += ["", END_MARKER]
    return "\n".join(lines)


def results_file(block: str, command: str) -> str:
    """The results file: a title, the command and the software that ran it, the block.

    Only the block is compared with the README and with a rerun; the lines
    above it say how to rerun it.

    Examples
    --------
    >>> text = results_file(f"{START_MARKER}\\nnumbers\\n{END_MARKER}", "reliacal demo")
    >>> text.splitlines()[2]
    'Command: `reliacal demo`  '
    """
    import torch

    software = (
        f"Software: Python {platform.python_version()}, numpy {np.__version__}, torch "
        f"{torch.__version__} on the CPU ({platform.machine()}), one thread. The demo is "
        "deterministic there: a rerun gives this block digit for digit."
    )
    lines = ["# The demo's numbers", "", f"Command: `{command}`  ", software, "", block, ""]
    return "\n".join(lines)


def extract_block(text: str) -> str:
    """The block between the markers in ``text`` (markers included).

    Examples
    --------
    >>> extract_block(f"intro\\n{START_MARKER}\\nnumbers\\n{END_MARKER}\\nmore").splitlines()[1]
    'numbers'
    """
    start = text.index(START_MARKER)
    end = text.index(END_MARKER, start) + len(END_MARKER)
    return text[start:end]
