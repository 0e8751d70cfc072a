"""DIRECTOR's compressing form on MiniLM against the anchored default (issue 32).

``DiffusionReconfigurer``'s default, ``anchor="teacher"``, keeps every teacher
block and adds the shared step to them, so its student is larger than the
teacher. ``anchor="none"`` is the paper's form: the last ``k`` blocks are
replaced by ``k`` applications of one shared transition, which is where the
compression comes from. This script measures both on ``text_wordnet.py``'s
task (MiniLM fine-tuned on WordNet noun glosses, 26 categories), with its
splits, budget and metrics, at 2 and 5 epochs, per seed:

- ``teacher``: the plain fine-tuned MiniLM (``text_wordnet.py``'s baseline,
  same seed, same budget), cached where ``text_wordnet.py`` caches it, and
  its temperature-scaled outputs (TS on the calibration split) as a reference;
- each recipe of ``RECIPES``: DIRECTOR from that teacher with the benchmark's
  settings (``_wordnet_task.fitted_director``) and the recipe's options.

Reported: deployed parameters, accuracy, ECE (15 bins), NLL, Brier on the
noun test split with 10 paths (and with 1 path, the paper's protocol), OOD
AUROC against adjective glosses by 1 - max probability, entropy and mutual
information, fit time, and the student's validation accuracy beside the
teacher's. A recipe *compresses* when its student has fewer parameters than
the teacher, and *keeps the teacher's accuracy* when its mean test accuracy
over seeds is at most ``ACCURACY_SLACK`` points below the teacher's.

Each (recipe, seed) point is saved at once in ``results/director_compression/``
and skipped by a rerun; several workers can run at once (each claims a point
with a claim file; a claim left by a dead process is taken over), and every
worker rewrites the table from all saved points when it ends. Run from the
repository root, one torch thread a worker (each MiniLM fit takes minutes)::

    nohup .venv/bin/python benchmarks/director_compression.py --threads 1 > w1.log &
    nohup .venv/bin/python benchmarks/director_compression.py --threads 1 > w2.log &
    .venv/bin/python benchmarks/director_compression.py --merge      # only the table
    .venv/bin/python benchmarks/director_compression.py --quick      # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import _common
import torch
from _wordnet_task import (
    N_PATHS,
    QUICK,
    RESULTS,
    Budget,
    build_data,
    cached_teacher,
    count,
    director_scores,
    fine_tuned_teacher,
    fitted_director,
    loader,
    minutes_log,
    n_paths_kwargs,
    ood_aurocs,
    point_folder,
    quality,
    teacher_path,
)
from scipy.special import softmax

from reliacal.backbones import extract_outputs
from reliacal.calibrators import TemperatureScaling

POINT_DIR = RESULTS / "director_compression"
OUTPUT = RESULTS / "director_compression.md"
SEEDS = (0, 1, 2)
ACCURACY_SLACK = 1.0
# Each recipe: DiffusionReconfigurer options on top of text_wordnet's DIRECTOR settings
# (the last 2 blocks, warm-up 0.2 epoch, NLL selection, 10 paths). In the order of run:
# the 2-epoch points first (the shared budget), then the 5-epoch ones.
RECIPES = {
    "anchored, last 2, 2 epochs (default)": {},
    "none, all 6, 2 epochs": {"anchor": "none", "reconfigure": "all"},
    "none, last 2, 2 epochs": {"anchor": "none"},
    "none, all 6, 5 epochs": {"anchor": "none", "reconfigure": "all", "max_epochs": 5},
    "anchored, last 2, 5 epochs": {"max_epochs": 5},
    "none, last 2, 5 epochs": {"anchor": "none", "max_epochs": 5},
}
TEACHER = "teacher"
DEFAULT = "anchored, last 2, 2 epochs (default)"


# Points ----------------------------------------------------------------------------------------


def point_path(point_dir: Path, name: str, seed: int) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in name).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return point_dir / f"{slug}-seed{seed}.json"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(path: Path) -> bool:
    """Take the point at ``path`` for this process: a new claim file, or a dead one's."""
    claim_file = path.with_suffix(".claim")
    for _ in range(2):
        try:
            descriptor = os.open(claim_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                owner = int(claim_file.read_text() or 0)
            except (OSError, ValueError):
                return False  # being written by its owner this instant
            if owner and alive(owner):
                return False
            claim_file.unlink(missing_ok=True)  # left by a killed worker: take it over
            continue
        with os.fdopen(descriptor, "w") as handle:
            handle.write(str(os.getpid()))
        return True
    return False


def teacher_point(data: dict, budget: Budget, seed: int, log) -> dict:
    """Fine-tune (or read back) the seed's teacher; its test metrics, raw and with TS."""
    path = teacher_path(seed, budget)
    if path.exists():  # cached by text_wordnet.py or an earlier run of this script
        teacher, cached = cached_teacher(data, budget, seed)
        fit_s = cached["fit_s"]
    else:
        teacher, fit_s, _ = fine_tuned_teacher(data, budget, seed)
    logits = {
        part: extract_outputs(teacher, loader(data, part, 4 * budget.batch_size), device="cpu")[1]
        for part in ("calibration", "test", "ood")
    }
    y_test = data["test"].labels
    scaler = TemperatureScaling().fit(logits["calibration"], data["calibration"].labels)
    row = {"point": TEACHER, "options": {}, "seed": seed, "fit_s": fit_s}
    row["parameters"] = count(teacher)
    proba = {part: softmax(logits[part], axis=1) for part in ("test", "ood")}
    row.update(quality(y_test, proba["test"]))
    row.update(ood_aurocs(proba["test"], proba["ood"]))
    scaled = {part: scaler.predict_proba(logits[part]) for part in ("test", "ood")}
    row["ts"] = {**quality(y_test, scaled["test"]), **ood_aurocs(scaled["test"], scaled["ood"])}
    log(f"seed {seed} teacher: {row['accuracy']:.1f}% ECE {row['ece']:.2f} ({fit_s:.0f} s)")
    return row


def director_point(name: str, data: dict, budget: Budget, seed: int, log) -> dict:
    """DIRECTOR with the recipe's options: test metrics with 10 paths and with 1."""
    director, fit_s, _ = fitted_director(data, budget, seed, **RECIPES[name])
    row = {"point": name, "options": RECIPES[name], "seed": seed, "fit_s": fit_s}
    row["parameters"] = count(director.network_)
    row["teacher_parameters"] = director.teacher_n_parameters_
    y_test = data["test"].labels
    batch = 4 * budget.batch_size
    row.update(director_scores(director, data, "test", "ood", batch)[0])
    director.set_params(**n_paths_kwargs(1))  # the paper's single-path protocol
    row["one_path"] = quality(y_test, director.predict_proba(loader(data, "test", batch)))
    row.update(
        student_val_accuracy=100 * director.student_val_accuracy_,
        teacher_val_accuracy=100 * director.teacher_val_accuracy_,
        best_epoch=director.best_epoch_,
        val_accuracy=[100 * epoch["val_accuracy"] for epoch in director.history_],
        train_sigma=[epoch.get("train_sigma") for epoch in director.history_],
    )
    log(
        f"seed {seed} {name}: {row['accuracy']:.1f}% ECE {row['ece']:.2f} NLL {row['nll']:.3f} "
        f"{row['parameters']:,} parameters ({fit_s:.0f} s, best epoch {director.best_epoch_})"
    )
    return row


# The table -------------------------------------------------------------------------------------


def spread(values, digits: int) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def paired(rows: dict, name: str, reference: str, key: str, seeds) -> list[float]:
    return [rows[name, seed][key] - rows[reference, seed][key] for seed in seeds]


QUALITY_COLUMNS = (("accuracy", 1), ("ece", 2), ("nll", 3), ("brier", 4))
AUROC_COLUMNS = (("auroc_maxprob", 3), ("auroc_entropy", 3), ("auroc_mi", 3))


def column(points: list[dict], key: str, digits: int, part: str | None = None) -> str:
    """Mean ± standard deviation of ``key`` over ``points`` (of their ``part`` sub-dict)."""
    values = [(point[part] if part else point).get(key) for point in points]
    return "" if None in values else spread(values, digits)


def table_rows(name: str, points: list[dict]) -> list[str]:
    """The table's line for one recipe over its seeds (two for the teacher: raw and TS)."""
    seeds, parameters = str(len(points)), points[0]["parameters"]
    if name == TEACHER:
        lines = []
        for label, part, extra in ((TEACHER, None, 0), ("teacher + TS", "ts", 1)):
            cells = [label, seeds, f"{parameters + extra:,}"]
            cells += [column(points, k, d, part) for k, d in QUALITY_COLUMNS]
            cells += ["", "", ""]  # one path: the teacher is deterministic
            cells += [column(points, k, d, part) for k, d in AUROC_COLUMNS]
            cells += ["", column(points, "fit_s", 0) if part is None else ""]
            lines.append("| " + " | ".join(cells) + " |")
        return lines
    cells = [name, seeds, f"{parameters:,}"]
    cells += [column(points, k, d) for k, d in QUALITY_COLUMNS]
    cells += [column(points, k, d, "one_path") for k, d in QUALITY_COLUMNS[:3]]
    cells += [column(points, k, d) for k, d in AUROC_COLUMNS]
    cells.append(
        f"{column(points, 'student_val_accuracy', 1)} ({column(points, 'teacher_val_accuracy', 1)})"
    )
    cells.append(column(points, "fit_s", 0))
    return ["| " + " | ".join(cells) + " |"]


def report(points: list[dict], quick: bool, budget: Budget) -> str:
    rows = {(point["point"], point["seed"]): point for point in points}
    names = [TEACHER, *RECIPES]
    seeds = sorted({seed for name, seed in rows if name == TEACHER})
    command = "python benchmarks/director_compression.py --threads 1" + (
        " --quick" if quick else ""
    )
    lines = [
        '# DIRECTOR\'s compressing form (`anchor="none"`) on MiniLM, against the anchored default',
        "",
        f"Command: `{command}` (the points ran in workers of one torch thread each, at "
        "most two at once and beside other jobs, some as `--seeds S --recipes NAME`; "
        f"`--merge` rewrites this table from the saved points). {_common.machine_line()}",
        "",
    ]
    if quick:
        lines += ["**SMOKE RUN (`--quick`): tiny splits, the numbers mean nothing.**", ""]
    lines += [
        f"Task and splits: `text_wordnet.py`'s (seeds {seeds}; {budget.n_train} train noun "
        f"glosses, 10% of them held out for checkpoint selection, {budget.n_calibration} "
        f"calibration, {budget.n_test} test, {budget.n_ood} adjective glosses as OOD). Teacher: "
        f"`text_wordnet.py`'s baseline (MiniLM fine-tuned {budget.epochs} epochs, plain CE); "
        "*teacher + TS*: temperature scaling fitted on the calibration split. DIRECTOR: "
        "`_wordnet_task.fitted_director` (AdamW lr 1e-3, warm-up "
        f"{budget.warmup_epochs:g} epoch then cosine, EMA 0.995, NLL checkpoint selection, "
        f"batch {budget.batch_size}) with each recipe's options; predictions average "
        f'{N_PATHS} sampled paths, *1-path* columns use one. `anchor="teacher"` keeps the '
        'teacher\'s blocks (frozen) and adds the shared step; `anchor="none"` replaces the last '
        "k blocks by k applications of the shared step (`all 6`: the whole stack, the "
        "embedding then trains too). Mean ± standard deviation over seeds; parameters are "
        "the deployed model's (frozen shared blocks included).",
        "",
        "| recipe | seeds | parameters | acc % | ECE % | NLL | Brier | 1-path acc % "
        "| 1-path ECE % | 1-path NLL | AUROC 1-maxp | AUROC entropy | AUROC MI "
        "| val acc % (teacher's) | fit s |",
        "|" + "---|" * 15,
    ]

    for name in names:
        done = [rows[name, seed] for seed in seeds if (name, seed) in rows]
        if done:
            lines += table_rows(name, done)
    lines += [
        "",
        "Paired by seed (mean ± standard deviation of the per-seed differences, over the "
        "seeds both rows have): each recipe against the teacher and against the anchored "
        "default at 2 epochs.",
        "",
        "| recipe | parameters vs teacher | Δ acc vs teacher | Δ ECE vs teacher "
        "| Δ NLL vs teacher | Δ acc vs default | Δ ECE vs default | Δ NLL vs default "
        "| Δ AUROC 1-maxp vs default | keeps the teacher's accuracy with fewer parameters |",
        "|" + "---|" * 10,
    ]
    verdicts = []
    for name in RECIPES:
        both = [s for s in seeds if (name, s) in rows]
        if not both:
            continue
        ratio = rows[name, both[0]]["parameters"] / rows[TEACHER, both[0]]["parameters"]
        versus_teacher = {
            k: paired(rows, name, TEACHER, k, both) for k in ("accuracy", "ece", "nll")
        }
        with_default = [s for s in both if (DEFAULT, s) in rows]
        versus_default = {
            k: paired(rows, name, DEFAULT, k, with_default) if with_default else []
            for k in ("accuracy", "ece", "nll", "auroc_maxprob")
        }
        keeps = statistics.mean(versus_teacher["accuracy"]) >= -ACCURACY_SLACK
        fewer = ratio < 1
        verdict = "yes" if keeps and fewer else "no"
        if keeps and fewer:
            verdicts.append(
                name
                if len(both) == len(SEEDS)
                else f"{name} (provisional: {len(both)} of {len(SEEDS)} seeds)"
            )
        lines.append(
            f"| {name} | {ratio:.3f} | {spread(versus_teacher['accuracy'], 1)} "
            f"| {spread(versus_teacher['ece'], 2)} | {spread(versus_teacher['nll'], 3)} | "
            + " | ".join(
                spread(versus_default[k], d) if versus_default[k] else ""
                for k, d in (("accuracy", 1), ("ece", 2), ("nll", 3), ("auroc_maxprob", 3))
            )
            + f" | {verdict} ({len(both)} of {len(SEEDS)} seeds) |"
        )
    lines += [
        "",
        f"Rule: fewer parameters than the teacher, and a mean test accuracy at most "
        f"{ACCURACY_SLACK:g} point below the teacher's over the seeds run. Recipes that meet "
        f"it: {', '.join(verdicts) if verdicts else 'none'}.",
        "",
        *missing_lines(rows, quick),
        "Per point, the student's validation accuracy per epoch (EMA weights, 10 paths) and "
        "the kept epoch:",
        "",
    ]
    for name in RECIPES:
        for seed in seeds:
            if (name, seed) in rows:
                row = rows[name, seed]
                history = " -> ".join(f"{value:.1f}" for value in row["val_accuracy"])
                lines.append(f"- {name}, seed {seed}: {history} (kept epoch {row['best_epoch']})")
    return "\n".join(lines) + "\n"


def missing_lines(rows: dict, quick: bool) -> list[str]:
    """What is not saved yet, per recipe, with the command that runs it."""
    lines = []
    for name in [TEACHER, *RECIPES]:
        seeds = [seed for seed in SEEDS if (name, seed) not in rows]
        if seeds:
            command = (
                "python benchmarks/director_compression.py --threads 1"
                + (" --quick" if quick else "")
                + f" --seeds {' '.join(map(str, seeds))}"
                + (f' --recipes "{name}"' if name != TEACHER else "")
            )
            lines.append(f"- {name}: seeds {seeds}: `{command}`")
    if not lines:
        return []
    return [
        "**Not run yet** (each MiniLM point takes 20-80 minutes on this machine); the "
        "command after each completes it, and `--merge` then rewrites this file:",
        "",
        *lines,
        "",
    ]


def write_table(point_dir: Path, output: Path, quick: bool, budget: Budget) -> None:
    points = [json.loads(path.read_text()) for path in sorted(point_dir.glob("*.json"))]
    # A saved point counts only if it was made with today's options.
    points = [p for p in points if p["point"] == TEACHER or RECIPES.get(p["point"]) == p["options"]]
    if not any(p["point"] == TEACHER for p in points):
        print("no teacher points saved yet: no table")
        return
    output.write_text(report(points, quick, budget))
    print(f"wrote {output}", flush=True)


# Worker ----------------------------------------------------------------------------------------


def jobs(seeds) -> list[tuple[str, int]]:
    """Every point, teachers first, then each recipe over the seeds, in ``RECIPES`` order."""
    return [(TEACHER, seed) for seed in seeds] + [
        (name, seed) for name in RECIPES for seed in seeds
    ]


def work(seeds, names, budget: Budget, point_dir: Path, wordnet_dir, log) -> None:
    """Run the unsaved, unclaimed points; wait while only others' points remain."""
    data_of: dict[int, dict] = {}
    wanted = [(name, seed) for name, seed in jobs(seeds) if name == TEACHER or name in names]
    while True:
        pending = [job for job in wanted if not point_path(point_dir, *job).exists()]
        if not pending:
            return
        ran = False
        for name, seed in pending:
            teacher_done = point_path(point_dir, TEACHER, seed).exists()
            if name != TEACHER and not teacher_done:
                continue  # its teacher is still being trained (by another worker)
            path = point_path(point_dir, name, seed)
            if not claim(path):
                continue
            try:
                if path.exists():  # finished by another worker since the listing
                    continue
                if seed not in data_of:
                    data_of[seed] = build_data(budget, seed, wordnet_dir)
                data = data_of[seed]
                if name == TEACHER:
                    row = teacher_point(data, budget, seed, log)
                else:
                    row = director_point(name, data, budget, seed, log)
                row["threads"] = torch.get_num_threads()
                row["load_average"] = os.getloadavg()
                path.write_text(json.dumps(row, indent=1))
                ran = True
            finally:
                path.with_suffix(".claim").unlink(missing_ok=True)
            break  # list again: another worker may have finished points meanwhile
        if not ran:
            time.sleep(30)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--wordnet-dir", default=None)
    parser.add_argument("--merge", action="store_true", help="only rewrite the table")
    parser.add_argument("--quick", action="store_true", help="smoke run on QUICK splits")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    budget = QUICK if args.quick else Budget()
    point_dir, output = point_folder(POINT_DIR, OUTPUT, args.quick)
    log = minutes_log()
    if not args.merge:
        work(args.seeds, args.recipes, budget, point_dir, args.wordnet_dir, log)
    write_table(point_dir, output, args.quick, budget)


if __name__ == "__main__":
    sys.exit(main())
