"""Peak memory of ``reliacal evaluate`` on a large prediction file, beside the file's size.

Writes an ``.npz`` of ``--n`` x ``--k`` float32 probabilities and int64 labels
(default 10,000,000 x 10: 480 MB, 458 MiB), then runs ``reliacal evaluate FILE --format
csv`` in a fresh Python process and reads that process's peak resident set
(Linux ``VmHWM``) after its imports and after the command. ``added`` is the
growth: the goal of issue 16 is at most twice the file (the file read once,
and at most its size again). With ``--baseline DIR`` the same command runs
a second time with ``DIR`` (an extracted older revision, e.g. ``git archive
941aae1 | tar -x -C /tmp/base``) first on ``sys.path``.

Run from the repository root::

    .venv/bin/python benchmarks/cli_memory.py                      # prints a markdown section
    .venv/bin/python benchmarks/cli_memory.py --baseline /tmp/base --n 2000000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import PEAK_BYTES_SOURCE, row_groups

ROOT = Path(__file__).resolve().parent.parent

# Runs in the measured process: imports first (they are not the command's data), then
# the command with stdout discarded.
_CHILD = (
    PEAK_BYTES_SOURCE
    + """
import contextlib, io, sys
import pandas, scipy.special, reliacal.cli, reliacal.metrics
before = peak_bytes()
with contextlib.redirect_stdout(io.StringIO()):
    status = reliacal.cli.main(['evaluate', sys.argv[1], '--format', 'csv'])
print(status, before, peak_bytes())
"""
)


def write_file(path: Path, n: int, k: int, seed: int = 0) -> None:
    """Dirichlet probabilities in float32 and labels drawn from them, written in blocks."""
    probs = np.empty((n, k), dtype=np.float32)
    labels = np.empty(n, dtype=np.int64)
    for start, part, part_labels in row_groups(seed, n, k, 1_000_000):
        probs[start : start + len(part)] = part
        labels[start : start + len(part)] = part_labels
    np.savez(path, probs=probs, labels=labels)


def measure(path: Path, tree: Path) -> dict[str, float]:
    """Run the command with ``tree`` first on the path; sizes in MiB, time in seconds."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),  # so that -c does not put this checkout first on sys.path
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    seconds = time.perf_counter() - started
    status, before, after = map(int, result.stdout.split())
    if status != 0:
        raise RuntimeError(result.stderr)
    return {"imports": before / 2**20, "peak": after / 2**20, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="rows")
    parser.add_argument("--k", type=int, default=10, help="classes")
    parser.add_argument("--baseline", type=Path, help="an older revision's tree to compare")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "predictions.npz"
        write_file(path, args.n, args.k)
        size = path.stat().st_size / 2**20
        trees = {"this tree": ROOT}
        if args.baseline is not None:
            trees = {f"baseline ({args.baseline})": args.baseline, **trees}
        rows = {name: measure(path, tree) for name, tree in trees.items()}
    print(
        f"File: {args.n:,} x {args.k} float32 probabilities + int64 labels, "
        f"{size:.0f} MiB ({size * 2**20 / 1e6:.0f} MB)."
    )
    print(f"Load average: {', '.join(f'{value:.1f}' for value in os.getloadavg())}.\n")
    print(
        "| code | RSS after imports (MiB) | peak RSS (MiB) | added (MiB) | added / file | time (s) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, row in rows.items():
        added = row["peak"] - row["imports"]
        print(
            f"| {name} | {row['imports']:.0f} | {row['peak']:.0f} | {added:.0f} | "
            f"{added / size:.2f} | {row['seconds']:.1f} |"
        )


if __name__ == "__main__":
    main()
