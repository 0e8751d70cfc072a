"""Fit time of an AdaptiveTS ensemble trained batched against one by one, on the CIFAR records.

On each record and split (5,000 calibration rows, the rest the test part, the
splits of ``posthoc_quality.py``), ``AdaptiveTS(confidence_inputs=True)`` is
fitted four ways with ``random_state`` = the split's seed: one member; five
members stacked into one network (``member_training="batched"``, the
default) that stop when the first of them stops early
(``member_stopping="first"``, the default); the same with every member
training until its own early stop (``"each"``); and five members one after
another (``"sequential"``, ``"first"``). Reported: the CPU seconds of each
fit (this process, one thread: on a shared machine the wall clock also
counts other jobs), their ratios, the epochs each member ran, the test ECE /
NLL of each, and how far the batched ensemble's temperatures are from the
sequential one's (the same members up to rounding).

Usage::

    .venv/bin/python benchmarks/adaptive_ensemble_speed.py [--seeds 0] [--records ...]
"""

from __future__ import annotations

import argparse
import time
import warnings

import _common
import numpy as np
from _posthoc_data import DATA_DIR, RECORDS, log_probabilities, random_splits

from reliacal.calibrators import AdaptiveTS
from reliacal.metrics import expected_calibration_error, negative_log_likelihood

N_MEMBERS = 5
FITS = {
    "1 member": {"n_members": 1},
    f"{N_MEMBERS} batched": {"n_members": N_MEMBERS, "member_training": "batched"},
    f"{N_MEMBERS} batched (each)": {"n_members": N_MEMBERS, "member_stopping": "each"},
    f"{N_MEMBERS} sequential": {"n_members": N_MEMBERS, "member_training": "sequential"},
}


def fit_all(logits, y, calibration, test, seed, log):
    """CPU seconds, epochs, test ECE % / NLL and test temperatures of each of FITS."""
    rows = {}
    for name, params in FITS.items():
        start = time.process_time()
        model = AdaptiveTS(confidence_inputs=True, random_state=seed, **params)
        model.fit(logits[calibration], y[calibration])
        seconds = time.process_time() - start
        probabilities = model.predict_proba(logits[test])
        rows[name] = {
            "seconds": seconds,
            "epochs": [len(member.history) for member in model.members_],
            "ece": 100 * expected_calibration_error(y[test], probabilities),
            "nll": negative_log_likelihood(y[test], probabilities),
            "temperature": model.temperature(logits[test]),
        }
        log(
            f"  {name:14s} {seconds:7.2f} CPU s  epochs {rows[name]['epochs']}  "
            f"ECE {rows[name]['ece']:.3f}%  NLL {rows[name]['nll']:.4f}"
        )
    return rows


def warm_up() -> None:
    """Fit each of FITS once on a tiny problem, untimed: the first fit of a process also
    pays for imports and first-call set-up, which would land on the first one timed."""
    rng = np.random.default_rng(0)
    logits = 3 * rng.normal(size=(400, 10))
    y = logits.argmax(axis=1)
    for params in FITS.values():
        with warnings.catch_warnings():
            # One epoch on a toy problem may warn (chance level); it is not measured.
            warnings.simplefilter("ignore")
            AdaptiveTS(confidence_inputs=True, max_epochs=1, random_state=0, **params).fit(
                logits, y
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4], help="split seeds")
    parser.add_argument("--records", nargs="*", default=list(RECORDS), help="CIFAR records")
    _common.add_output_argument(parser, "adaptive_ensemble_speed.md")
    args = parser.parse_args(argv)
    _common.limit_threads(1)
    load_before = _common.load_average()
    warm_up()

    def log(message: str) -> None:
        print(message, flush=True)

    one, batched, each, sequential = FITS
    table = [
        f"| record | split | CPU s: {one} | {batched} | {each} | {sequential} "
        f"| {batched} / {one} | {each} / {one} | {batched} / {sequential} "
        f"| epochs: {one} | {batched} (= {sequential}) | {each} "
        f"| ECE %: {' / '.join(FITS)} | NLL: {' / '.join(FITS)} "
        "| max relative T gap, batched vs sequential |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- "
        "| --- | --- | ---: |",
    ]
    results: dict = {}
    todo = [(record, seed) for record in args.records for seed in args.seeds]
    done: set = set()
    for record in args.records:
        with np.load(DATA_DIR / f"{record}.npz") as data:
            logits = log_probabilities(data["predictions"])
            y = data["ground_truth"].astype(np.int64)
        for seed, (calibration, test) in random_splits(len(y), args.seeds).items():
            log(f"{record}, split {seed}")
            rows = fit_all(logits, y, calibration, test, seed, log)
            results.setdefault(record, []).append(rows)
            gap = np.abs(rows[batched]["temperature"] / rows[sequential]["temperature"] - 1).max()
            same_epochs = rows[batched]["epochs"] == rows[sequential]["epochs"]
            table.append(
                f"| {record} | {seed} | "
                + " | ".join(f"{rows[name]['seconds']:.1f}" for name in FITS)
                + f" | {rows[batched]['seconds'] / rows[one]['seconds']:.2f}"
                + f" | {rows[each]['seconds'] / rows[one]['seconds']:.2f}"
                + f" | {rows[batched]['seconds'] / rows[sequential]['seconds']:.2f}"
                + f" | {rows[one]['epochs'][0]} | {rows[batched]['epochs']}"
                + ("" if same_epochs else f" (sequential {rows[sequential]['epochs']})")
                + f" | {rows[each]['epochs']} | "
                + " / ".join(f"{rows[name]['ece']:.3f}" for name in FITS)
                + " | "
                + " / ".join(f"{rows[name]['nll']:.4f}" for name in FITS)
                + f" | {gap:.1e} |"
            )
            done.add((record, seed))
            pending = [f"{name} split {s}" for name, s in todo if (name, s) not in done]
            write_report(argv, load_before, table, results, pending, args.output)
    return 0


def _spread(values, digits):
    sd = np.std(values, ddof=1) if len(values) > 1 else 0.0
    return f"{np.mean(values):.{digits}f} ± {sd:.{digits}f}"


def summary(results: dict) -> list[str]:
    """Per record, over the splits: mean fit-time ratios to one member, mean ± sd ECE and NLL."""
    one, batched, each, _ = FITS
    lines = [
        f"| record | splits | {batched} / {one} (mean, max) | {each} / {one} (mean, max) "
        + "".join(f"| ECE %: {name} " for name in (one, batched, each))
        + "".join(f"| NLL: {name} " for name in (one, batched, each))
        + "|",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for record, splits in results.items():
        cells = [record, str(len(splits))]
        for name in (batched, each):
            ratios = [rows[name]["seconds"] / rows[one]["seconds"] for rows in splits]
            cells.append(f"{np.mean(ratios):.2f}, {np.max(ratios):.2f}")
        for key, digits in (("ece", 2), ("nll", 4)):
            for name in (one, batched, each):
                cells.append(_spread([rows[name][key] for rows in splits], digits))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(argv, load_before, table, results, pending, output) -> None:
    """The results so far: rewritten after every split, so a stopped run keeps its rows."""
    one, batched, each, sequential = FITS
    splits = [rows for record in results.values() for rows in record]
    to_one = [rows[batched]["seconds"] / rows[one]["seconds"] for rows in splits]
    to_sequential = [rows[batched]["seconds"] / rows[sequential]["seconds"] for rows in splits]
    report = [
        *_common.header(
            "AdaptiveTS ensemble: batched against one-by-one training",
            __file__,
            argv,
            details="CPU seconds of this process on one torch / BLAS thread.",
            load_before=load_before,
        ),
        f"`AdaptiveTS(confidence_inputs=True, random_state=seed)` with {', '.join(FITS)}; "
        "5,000 calibration rows per split (`posthoc_quality.py`'s splits), test on the rest. "
        "A member stops early on its own validation NLL (`n_iter_no_change=10`); with "
        f'`member_stopping="first"` ({batched}, {sequential}) the first member to stop ends '
        f'the training of all, with `"each"` ({each}) the fit lasts as long as its slowest '
        "member, at the cost of the members still training. Each way is fitted once on a tiny "
        "problem first, untimed (imports, first calls).",
        "",
        *summary(results),
        "",
        f"Batched {N_MEMBERS} members: {np.min(to_one):.2f}-{np.max(to_one):.2f}x the fit time "
        f"of one member, {np.min(to_sequential):.2f}-{np.max(to_sequential):.2f}x the time of "
        "training them one by one.",
        "",
        "Each split:",
        "",
        *table,
        "",
    ]
    if pending:
        report += [f"Not measured (the run stopped before them): {', '.join(pending)}.", ""]
    _common.write_results("\n".join(report), output)


if __name__ == "__main__":
    raise SystemExit(main())
