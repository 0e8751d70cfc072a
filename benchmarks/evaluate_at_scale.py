"""Calibration of predictions larger than memory: reliacal streaming parquet vs torchmetrics.

Writes ``--rows`` x ``--classes`` float32 probabilities and int64 labels as a
folder of parquet files of ``--file-rows`` rows each (row groups of
``--row-group-rows``; default 100,000,000 x 10 in ten files, about 4.4 GiB), then,
each in a fresh Python process on one thread whose peak resident set (Linux
``VmHWM``) and wall time are measured:

1. ``reliacal evaluate FOLDER --streamable-only``: the whole folder in one read, the
   report's sums-only metrics;
2. ``reliacal evaluate FOLDER``: the full report of the whole folder, in constant
   memory too (a fine histogram of the confidences, and a second read of the rows
   in the few buckets where the sorted metrics need their order);
3. the full report of the first file (the first ``--file-rows`` rows), streamed by
   the command's own code (``reliacal.io.stream_parquet`` and
   ``report_from_states``), whose values the command prints rounded to ten digits;
4. ``calibration_report`` of the same rows held in memory (read as the command reads
   them, float64): the reference of 3, metric by metric;
5. torchmetrics' ``MulticlassCalibrationError`` (which keeps every confidence and
   correctness flag) fed the first file's rows in batches of 65,536;
6. reliacal's ``BinnedCalibrationError`` (a torchmetrics ``Metric`` of per-bin
   sums) fed the same batches.

``RSS after imports`` is the child's peak before it reads data; ``added`` is the
growth. The folder is deleted afterwards.

Run from the repository root::

    .venv/bin/python benchmarks/evaluate_at_scale.py                    # 100M rows
    .venv/bin/python benchmarks/evaluate_at_scale.py --rows 10000000 --file-rows 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    PEAK_BYTES_SOURCE,
    add_output_argument,
    header,
    load_average,
    row_groups,
    write_results,
)

ROOT = Path(__file__).resolve().parent.parent

# reliacal's command on a file or folder.
_CLI_CHILD = (
    PEAK_BYTES_SOURCE
    + """
import contextlib, io, json, sys, time
import pandas, pyarrow.parquet, reliacal.cli, reliacal.metrics, reliacal.io
before = peak_bytes()
out = io.StringIO()
started = time.perf_counter()
with contextlib.redirect_stdout(out):
    status = reliacal.cli.main(['evaluate', *sys.argv[1:], '--format', 'json'])
seconds = time.perf_counter() - started
report = json.loads(out.getvalue())
print(json.dumps({'status': status, 'imports': before, 'peak': peak_bytes(),
                  'seconds': seconds, 'values': next(iter(report.values()))}))
"""
)


def _child(setup: str, measured: str) -> str:
    """Source of a measured child: ``setup`` (imports, arguments), then ``measured``, which
    sets ``values``; it prints the peaks before and after and the seconds of ``measured``."""
    return (
        PEAK_BYTES_SOURCE
        + setup
        + "before = peak_bytes()\nstarted = time.perf_counter()\n"
        + measured.lstrip("\n")
        + """print(json.dumps({'imports': before, 'peak': peak_bytes(),
                  'seconds': time.perf_counter() - started, 'values': values}))
"""
    )


# The command's code on a file: the streamed full report, its values unrounded.
_STREAM_CHILD = _child(
    """
import io, json, sys, time
import pandas, pyarrow.parquet, reliacal.cli, reliacal.metrics, reliacal.io
""",
    """
state, _ = reliacal.io.stream_parquet(sys.argv[1], progress=io.StringIO())
report = reliacal.metrics.report_from_states({'m': state})
values = {name: float(value) for name, value in report.loc['m'].items()}
""",
)

# The in-memory report of one file, its columns read as the command reads them.
_MEMORY_CHILD = _child(
    """
import json, sys, time
import numpy as np, pyarrow.parquet as pq, reliacal.metrics
path, n_classes = sys.argv[1], int(sys.argv[2])
""",
    """
table = pq.read_table(path)
probs = np.column_stack([table.column(f'p{k}').to_numpy().astype(np.float64)
                         for k in range(n_classes)])
labels = table.column('label').to_numpy()
del table
report = reliacal.metrics.calibration_report(labels, {'m': probs})
values = {name: float(value) for name, value in report.loc['m'].items()}
""",
)

# A torchmetrics Metric fed one file's rows in batches, as a training loop would.
_METRIC_CHILD = _child(
    """
import json, sys, time
import numpy as np, pyarrow.parquet as pq, torch
torch.set_num_threads(1)
kind, path, n_classes = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind == 'torchmetrics':
    from torchmetrics.classification import MulticlassCalibrationError
    metric = MulticlassCalibrationError(num_classes=n_classes, n_bins=15)
else:
    from reliacal.metrics.torchmetrics import BinnedCalibrationError
    metric = BinnedCalibrationError(n_bins=15)
columns = [f'p{k}' for k in range(n_classes)]
""",
    """
handle = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)  # as reliacal reads
for batch in handle.iter_batches(batch_size=1 << 16):
    probs = np.column_stack([batch.column(c).to_numpy() for c in columns])
    labels = batch.column('label').to_numpy()
    metric.update(torch.from_numpy(probs), torch.from_numpy(labels))
values = {'ece': float(metric.compute())}
""",
)

# Metrics of the full report that are sums or exact refinements of the histogram; the
# smooth ECE's grids from bucket sums agree up to rounding of the grid positions.
_ROUNDING_ONLY = {"smooth_ece"}
_EXACT_TOLERANCE = 1e-12
# The stated bound of the smooth ECE from bucket sums (docs of CalibrationState).
_ROUNDING_TOLERANCE = 1e-11


def write_folder(folder: Path, rows: int, n_classes: int, file_rows: int, group_rows: int):
    """Dirichlet(0.3) float32 probabilities and labels drawn from them, in parts of
    ``file_rows`` rows (row groups of ``group_rows``), as ``part-00000.parquet``, ..."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [(f"p{k}", pa.float32()) for k in range(n_classes)] + [("label", pa.int64())]
    )
    folder.mkdir()
    writer = None
    for start, probs, labels in row_groups(0, rows, n_classes, group_rows):
        if start % file_rows == 0:
            if writer is not None:
                writer.close()
            writer = pq.ParquetWriter(folder / f"part-{start // file_rows:05d}.parquet", schema)
        arrays = [pa.array(probs[:, k]) for k in range(n_classes)] + [pa.array(labels)]
        writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
    writer.close()


def run_child(code: str, *arguments) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", code, *map(str, arguments)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # -c must not put another checkout first on sys.path
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def _mib(value: float) -> str:
    return f"{value / 2**20:.0f}"


def comparison_lines(streamed: dict, reference: dict) -> tuple[list[str], bool]:
    """The streamed full report of the subset against the in-memory one, metric by metric."""
    lines = [
        "| metric | streamed (constant memory) | in memory | abs. difference | allowed |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    met = True
    for name, expected in reference.items():
        value = streamed[name]
        difference = abs(value - expected)
        allowed = _EXACT_TOLERANCE if name not in _ROUNDING_ONLY else _ROUNDING_TOLERANCE
        met &= difference <= allowed
        lines.append(
            f"| {name} | {value:.15g} | {expected:.15g} | {difference:.1e} | {allowed:.0e} |"
        )
    return lines, met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000_000, help="rows of the folder")
    parser.add_argument("--classes", type=int, default=10, help="classes (columns)")
    parser.add_argument(
        "--file-rows",
        type=int,
        default=10_000_000,
        help="rows per parquet file; the first file is the in-memory subset (default 10M)",
    )
    parser.add_argument("--row-group-rows", type=int, default=1_000_000, help="rows per group")
    parser.add_argument("--folder", type=Path, help="where to write the parquet (default: temp)")
    add_output_argument(parser, "evaluate_at_scale.md")
    args = parser.parse_args()
    subset = min(args.file_rows, args.rows)
    load_before = load_average()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.folder) as temporary:
        folder = Path(temporary) / "predictions"
        write_folder(folder, args.rows, args.classes, args.file_rows, args.row_group_rows)
        size = sum(file.stat().st_size for file in folder.iterdir())
        first = sorted(folder.iterdir())[0]
        loads = [load_average()]
        runs = {}

        def measure(name, code, *arguments):
            runs[name] = run_child(code, *arguments)
            loads.append(load_average())

        streamable = f"reliacal evaluate FOLDER --streamable-only ({args.rows:,} rows)"
        full = f"reliacal evaluate FOLDER, full report ({args.rows:,} rows)"
        measure(streamable, _CLI_CHILD, folder, "--streamable-only")
        measure(full, _CLI_CHILD, folder)
        subset_streamed = f"stream_parquet FIRST_FILE, full report ({subset:,} rows)"
        subset_memory = f"calibration_report in memory ({subset:,} rows, float64)"
        measure(subset_streamed, _STREAM_CHILD, first)
        measure(subset_memory, _MEMORY_CHILD, first, args.classes)
        measure(
            f"torchmetrics MulticlassCalibrationError ({subset:,} rows)",
            _METRIC_CHILD,
            "torchmetrics",
            first,
            args.classes,
        )
        measure(
            f"reliacal BinnedCalibrationError ({subset:,} rows)",
            _METRIC_CHILD,
            "reliacal",
            first,
            args.classes,
        )
    total = time.perf_counter() - started
    lines = header(
        "Evaluating predictions larger than memory: reliacal streaming vs torchmetrics",
        __file__,
        details=f"Total {total / 60:.1f} min.",
        load_before=load_before,
    )
    lines += [
        f"Folder: {args.rows:,} x {args.classes} float32 probabilities (Dirichlet 0.3) + int64 "
        f"labels, {len(list(range(0, args.rows, args.file_rows)))} parquet files of "
        f"{args.file_rows:,} rows ({size / 2**30:.2f} GiB in all) in row groups of "
        f"{args.row_group_rows:,} rows. Each line is a fresh process on one thread; RSS is "
        "its peak resident set (Linux `VmHWM`), `added` its growth after the imports. The "
        "machine is shared: load average (1 min) "
        + ", ".join(f"{load:.1f}" for load in loads)
        + " before each run and after the last.",
        "",
        "| run | RSS after imports (MiB) | peak RSS (MiB) | added (MiB) | time (s) | rows/s | "
        "ECE |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, run in runs.items():
        rows = args.rows if "FOLDER" in name else subset
        lines.append(
            f"| {name} | {_mib(run['imports'])} | {_mib(run['peak'])} | "
            f"{_mib(run['peak'] - run['imports'])} | {run['seconds']:.1f} | "
            f"{rows / run['seconds']:,.0f} | {run['values']['ece']:.6f} |"
        )
    ratio = runs[full]["seconds"] / runs[streamable]["seconds"]
    added = (runs[full]["peak"] - runs[full]["imports"]) / 2**30
    compared, equal = comparison_lines(
        runs[subset_streamed]["values"], runs[subset_memory]["values"]
    )
    lines += [
        "",
        "## Goals",
        "",
        f"- full report / streamable-only time on {args.rows:,} rows: {ratio:.2f}x "
        f"(goal <= 2x): {'met' if ratio <= 2 else 'MISSED'}",
        f"- full report's added memory on {args.rows:,} rows: {added:.2f} GiB (goal < 1 GiB): "
        f"{'met' if added < 1 else 'MISSED'}",
        f"- every metric of the streamed full report equal to the in-memory report on the first "
        f"{subset:,} rows (exact ones within {_EXACT_TOLERANCE:g}, the smooth ECE, whose grids "
        f"come from bucket sums, within {_ROUNDING_TOLERANCE:g}): "
        + ("met" if equal else "MISSED"),
        "",
        f"## The streamed full report against the in-memory report ({subset:,} rows)",
        "",
        *compared,
        "",
        f"## The full report on all {args.rows:,} rows (streamed)",
        "",
        "| metric | value |",
        "| --- | ---: |",
        *[f"| {name} | {value:.6g} |" for name, value in runs[full]["values"].items()],
    ]
    write_results("\n".join(lines) + "\n", args.output)


if __name__ == "__main__":
    main()
