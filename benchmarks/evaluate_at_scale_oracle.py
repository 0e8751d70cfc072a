"""An independent check of the ECE in ``results/evaluate_at_scale.md``.

Regenerates the benchmark's rows in memory (the same generator, seed and row
groups as ``evaluate_at_scale.write_parquet``, through
``_common.row_groups``, without a file) and computes the top-label ECE
with 15 equal-width bins from per-bin float64 sums in NumPy alone: no
reliacal, no torchmetrics. Interior bin edges go to the lower bin; with
float32 confidences a row on an edge is rare enough not to show in the
printed digits.

    .venv/bin/python benchmarks/evaluate_at_scale_oracle.py --rows 100000000
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import row_groups


def oracle_ece(rows: int, n_classes: int, row_group_rows: int, n_bins: int = 15) -> float:
    counts = np.zeros(n_bins)
    confidence_sums = np.zeros(n_bins)
    correct_sums = np.zeros(n_bins)
    for _, probs, labels in row_groups(0, rows, n_classes, row_group_rows):
        confidence = probs.max(axis=1).astype(np.float64)
        correct = (probs.argmax(axis=1) == labels).astype(np.float64)
        bins = np.clip(np.ceil(confidence * n_bins).astype(int) - 1, 0, n_bins - 1)
        counts += np.bincount(bins, minlength=n_bins)
        confidence_sums += np.bincount(bins, weights=confidence, minlength=n_bins)
        correct_sums += np.bincount(bins, weights=correct, minlength=n_bins)
    return float(np.abs(correct_sums - confidence_sums).sum() / counts.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--row-group-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    ece = oracle_ece(args.rows, args.classes, args.row_group_rows)
    print(f"{args.rows:,} rows x {args.classes}: float64 NumPy ECE {ece:.6f}")


if __name__ == "__main__":
    main()
