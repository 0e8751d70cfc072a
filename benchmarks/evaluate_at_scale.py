"""Calibration of predictions larger than memory: reliacal streaming parquet vs torchmetrics.

Writes ``--rows`` x ``--classes`` float32 probabilities and int64 labels as one
parquet file (row groups of ``--row-group-rows``; default 100,000,000 x 10, about
4.4 GiB), then, each in a fresh Python process whose peak resident set
(Linux ``VmHWM``) and wall time are measured:

1. ``reliacal evaluate FILE --streamable-only``: the whole file, batch by batch,
   the report's sums-only metrics (constant memory);
2. ``reliacal evaluate FILE`` (the full report, which keeps one confidence and
   one flag per row) on the first ``--torchmetrics-rows`` rows;
3. torchmetrics' ``MulticlassCalibrationError`` (which keeps every confidence and
   correctness flag) fed the same rows in batches of 65,536;
4. reliacal's ``BinnedCalibrationError`` (a torchmetrics ``Metric`` of per-bin
   sums) fed the same batches.

Each child process runs on one thread (the machine is shared). ``RSS after
imports`` is the child's peak before it reads data; ``added`` is the growth.

Run from the repository root::

    .venv/bin/python benchmarks/evaluate_at_scale.py                    # 100M rows
    .venv/bin/python benchmarks/evaluate_at_scale.py --rows 10000000    # 10M rows
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

# reliacal's command on the file (or its first ROWS rows, copied to a smaller file first).
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

# A torchmetrics Metric fed the file's first ROWS rows in batches, as a training loop would.
_METRIC_CHILD = (
    PEAK_BYTES_SOURCE
    + """
import json, sys, time
import numpy as np, pyarrow.parquet as pq, torch
torch.set_num_threads(1)
kind, path, rows, n_classes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if kind == 'torchmetrics':
    from torchmetrics.classification import MulticlassCalibrationError
    metric = MulticlassCalibrationError(num_classes=n_classes, n_bins=15)
else:
    from reliacal.metrics.torchmetrics import BinnedCalibrationError
    metric = BinnedCalibrationError(n_bins=15)
columns = [f'p{k}' for k in range(n_classes)]
before = peak_bytes()
started = time.perf_counter()
seen = 0
handle = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)  # as reliacal reads
for batch in handle.iter_batches(batch_size=1 << 16):
    take = min(batch.num_rows, rows - seen)
    probs = np.column_stack([batch.column(c).to_numpy()[:take] for c in columns])
    labels = batch.column('label').to_numpy()[:take]
    metric.update(torch.from_numpy(probs), torch.from_numpy(labels))
    seen += take
    if seen >= rows:
        break
value = float(metric.compute())
print(json.dumps({'imports': before, 'peak': peak_bytes(),
                  'seconds': time.perf_counter() - started, 'values': {'ece': value}}))
"""
)


def write_parquet(path: Path, rows: int, n_classes: int, row_group_rows: int, seed: int = 0):
    """Dirichlet(0.3) float32 probabilities and labels drawn from them, one row group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [(f"p{k}", pa.float32()) for k in range(n_classes)] + [("label", pa.int64())]
    )
    with pq.ParquetWriter(path, schema) as writer:
        for _, probs, labels in row_groups(seed, rows, n_classes, row_group_rows):
            arrays = [pa.array(probs[:, k]) for k in range(n_classes)] + [pa.array(labels)]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))


def head_file(source: Path, target: Path, rows: int) -> None:
    """The first ``rows`` rows of ``source`` as a parquet file (for the in-memory peers)."""
    import pyarrow.parquet as pq

    handle = pq.ParquetFile(source)
    with pq.ParquetWriter(target, handle.schema_arrow) as writer:
        seen = 0
        for batch in handle.iter_batches(batch_size=1 << 20):
            batch = batch.slice(0, min(batch.num_rows, rows - seen))
            writer.write_batch(batch)
            seen += batch.num_rows
            if seen >= rows:
                break


def run_child(code: str, *arguments) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000_000, help="rows of the file")
    parser.add_argument("--classes", type=int, default=10, help="classes (columns)")
    parser.add_argument(
        "--torchmetrics-rows",
        type=int,
        default=10_000_000,
        help="rows given to the peers that keep every confidence (default 10M, at most --rows)",
    )
    parser.add_argument("--row-group-rows", type=int, default=1_000_000, help="rows per group")
    parser.add_argument("--folder", type=Path, help="where to write the parquet (default: temp)")
    add_output_argument(parser, "evaluate_at_scale.md")
    args = parser.parse_args()
    peer_rows = min(args.torchmetrics_rows, args.rows)
    load_before = load_average()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        path = Path(folder) / "predictions.parquet"
        write_parquet(path, args.rows, args.classes, args.row_group_rows)
        size = path.stat().st_size
        head = path
        if peer_rows < args.rows:
            head = Path(folder) / "head.parquet"
            head_file(path, head, peer_rows)
        runs = {
            f"reliacal evaluate --streamable-only ({args.rows:,} rows)": run_child(
                _CLI_CHILD, path, "--streamable-only"
            ),
            f"reliacal evaluate, full report ({peer_rows:,} rows)": run_child(_CLI_CHILD, head),
            f"torchmetrics MulticlassCalibrationError ({peer_rows:,} rows)": run_child(
                _METRIC_CHILD, "torchmetrics", head, peer_rows, args.classes
            ),
            f"reliacal BinnedCalibrationError ({peer_rows:,} rows)": run_child(
                _METRIC_CHILD, "reliacal", head, peer_rows, args.classes
            ),
        }
    total = time.perf_counter() - started
    lines = header(
        "Evaluating predictions larger than memory: reliacal streaming vs torchmetrics",
        __file__,
        details=f"Total {total / 60:.1f} min.",
        load_before=load_before,
    )
    lines += [
        f"File: {args.rows:,} x {args.classes} float32 probabilities (Dirichlet 0.3) + int64 "
        f"labels, one parquet file of {size / 2**30:.2f} GiB in row groups of "
        f"{args.row_group_rows:,} rows. Each line is a fresh process on one thread; RSS is "
        "its peak resident set (Linux `VmHWM`), `added` its growth after the imports.",
        "",
        "| run | RSS after imports (MiB) | peak RSS (MiB) | added (MiB) | time (s) | rows/s | "
        "ECE |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, run in runs.items():
        rows = args.rows if "streamable-only" in name else peer_rows
        lines.append(
            f"| {name} | {run['imports'] / 2**20:.0f} | {run['peak'] / 2**20:.0f} | "
            f"{(run['peak'] - run['imports']) / 2**20:.0f} | {run['seconds']:.1f} | "
            f"{rows / run['seconds']:,.0f} | {run['values']['ece']:.6f} |"
        )
    streamed = next(iter(runs.values()))["values"]
    lines += ["", f"The streamed report's metrics on all {args.rows:,} rows:", ""]
    lines += ["| metric | value |", "| --- | ---: |"]
    lines += [f"| {name} | {value:.6g} |" for name, value in streamed.items()]
    write_results("\n".join(lines) + "\n", args.output)


if __name__ == "__main__":
    main()
