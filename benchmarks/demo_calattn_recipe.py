"""The demo's CalAttn recipe, chosen on a tuning split that never touches the demo's test images.

The demo (``reliacal demo``) trains a tiny timm ViT from a random
initialisation on 538 digit images and calibrates it; its CalAttn rows used to
fine-tune that trained network with the recipe of a pre-trained backbone. This
script compares a few CalAttn recipes with the demo's plain model, all on
images the demo's test split does not hold:

- the pool is the demo's training and calibration images (seed-0 split of
  ``reliacal.demo``: 538 + 450 = 988 images; the 809 test images are dropped
  before anything else happens);
- for each tuning seed the pool is split, stratified, into a tuning training
  part of 538 images (as many as the demo trains on), a tuning calibration part
  of 225 and a tuning evaluation part of 225; every number of the tables is
  measured on the evaluation part;
- ``plain`` is the demo's model (:func:`reliacal.datasets.train_digits_classifier`
  with :func:`~reliacal.datasets.default_digits_training_config`), then
  temperature scaling fitted on the calibration part (``+ TS``);
- ``trained`` recipes are CalAttn as the training recipe, end to end from the
  same initialisation (:func:`~reliacal.datasets.make_tiny_vit` with the seed)
  on the same training part with the plain model's budget (epochs, batch size,
  optimiser, learning rate, warm-up, schedule, no validation split, last
  weights kept), then temperature scaling on the calibration part;
- ``fine-tuned`` recipes start from the trained plain model and fine-tune it
  on the calibration part (15% of it held out to pick the epoch and fit the
  post-hoc temperature), as the demo's rows did;
- ``head`` recipes train CalAttn's head alone on the frozen plain model, on
  the calibration part, then fit temperature scaling there too.

The rule, fixed before the first round: the demo takes the recipe with the
lowest mean NLL after temperature scaling over the seeds, over every round;
each results file also says whether its best recipe beats ``plain + TS`` in
mean ECE and NLL. The choice and its reading are in
``benchmarks/results/decisions.md`` (section "CalAttn: the demo's recipe").

Run from the repository root (one thread; rounds 1, 2 and 3 took 18, 12 and 2
minutes on a busy 2-core machine):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/demo_calattn_recipe.py [--round 1|2|3] \
        [--seeds 1 2 3] [--output FILE]

``--quick`` trains for a few epochs (a smoke run of the script, not a result).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import _common
import numpy as np
import torch
from sklearn.model_selection import train_test_split

from reliacal.calibrators import TemperatureScaling
from reliacal.datasets import (
    default_digits_training_config,
    load_digits_images,
    make_tiny_vit,
    train_calibration_test_split,
    train_digits_classifier,
)
from reliacal.finetune import CalAttnFinetuner
from reliacal.metrics import (
    accuracy,
    expected_calibration_error,
    negative_log_likelihood,
    softmax,
)

# The demo's split (reliacal/demo/_run.py: CALIBRATION_SIZE, TEST_SIZE, seed 0), whose
# sizes are checked below so that a change of the demo's split cannot pass unnoticed.
DEMO_CALIBRATION_SIZE = 0.25
DEMO_TEST_SIZE = 0.45
DEMO_SIZES = (538, 450, 809)
TUNING_CALIBRATION = 225
TUNING_EVALUATION = 225

# Round -> recipe name -> (kind, CalAttnFinetuner parameters over the kind's recipe). Round
# 1 was fixed before any run; round 2 was added after it, when every round-1 recipe lost to
# plain + TS (trained end to end without a validation split, CalAttn over-sharpens); round
# 3 after round 2, when no change to end-to-end training helped: the head alone, post hoc.
# The loss settings that round 1 tried end to end and round 3 on the head alone.
LOSS_RECIPES = {
    "Brier 0.1": {"lambda_brier": 0.1},
    "Brier 0": {"lambda_brier": 0.0},
    "Brier 0.1, scale starts at 1": {"lambda_brier": 0.1, "initial_scale": 1.0},
}
ROUNDS = {
    1: {
        **{f"trained, {name}": ("trained", options) for name, options in LOSS_RECIPES.items()},
        "fine-tuned, lr 5e-4, 30 epochs": ("fine-tuned", {"learning_rate": 5e-4}),
        "fine-tuned, lr 1e-4, 30 epochs": ("fine-tuned", {"learning_rate": 1e-4}),
    },
    2: {
        "trained, Brier 0.1, lowest-NLL epoch on 15% held out": (
            "trained",
            {"lambda_brier": 0.1, "validation_fraction": 0.15, "selection_metric": "nll"},
        ),
        "trained, Brier 0.1, weight decay 0.05": (
            "trained",
            {"lambda_brier": 0.1, "weight_decay": 0.05},
        ),
        "trained, Brier 0.1, 30 epochs": ("trained", {"lambda_brier": 0.1, "max_epochs": 30}),
    },
    3: {f"head only, {name}": ("head", options) for name, options in LOSS_RECIPES.items()},
}


def tuning_parts(seed: int):
    """The tuning seed's (train, calibration, evaluation) parts of the demo's non-test pool."""
    X, y = load_digits_images(image_size=16)
    demo = train_calibration_test_split(
        X, y, calibration_size=DEMO_CALIBRATION_SIZE, test_size=DEMO_TEST_SIZE, random_state=0
    )
    sizes = (len(demo.y_train), len(demo.y_calibration), len(demo.y_test))
    if sizes != DEMO_SIZES:
        raise RuntimeError(f"the demo's split changed: {sizes}, this script expects {DEMO_SIZES}")
    X_pool = np.concatenate([demo.X_train, demo.X_calibration])
    y_pool = np.concatenate([demo.y_train, demo.y_calibration])
    X_rest, X_eval, y_rest, y_eval = train_test_split(
        X_pool, y_pool, test_size=TUNING_EVALUATION, random_state=seed, stratify=y_pool
    )
    X_train, X_cal, y_train, y_cal = train_test_split(
        X_rest, y_rest, test_size=TUNING_CALIBRATION, random_state=seed, stratify=y_rest
    )
    return (X_train, y_train), (X_cal, y_cal), (X_eval, y_eval)


def scores(y, before, after) -> dict[str, float]:
    return {
        "accuracy": 100 * accuracy(y, after),
        "ece_before": 100 * expected_calibration_error(y, before),
        "ece_after": 100 * expected_calibration_error(y, after),
        "nll_before": negative_log_likelihood(y, before),
        "nll_after": negative_log_likelihood(y, after),
    }


def logits_of(model, X) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(X)).double().numpy()


def calattn_probabilities(model, X) -> np.ndarray:
    """CalAttn's own probabilities, softmax(z / s), before any post-hoc temperature."""
    return softmax(model.decision_function(X))


def run_seed(seed: int, recipes: dict, quick: bool, log) -> dict[str, dict[str, float]]:
    (X_train, y_train), (X_cal, y_cal), (X_eval, y_eval) = tuning_parts(seed)
    config = default_digits_training_config(quick=quick, random_state=seed)
    results = {}

    started = time.process_time()
    plain, _ = train_digits_classifier(X_train, y_train, config=config, random_state=seed)
    plain_seconds = time.process_time() - started
    ts = TemperatureScaling().fit(logits_of(plain, X_cal), y_cal)
    eval_logits = logits_of(plain, X_eval)
    results["plain"] = scores(y_eval, softmax(eval_logits), ts.predict_proba(eval_logits))
    results["plain"]["cpu_ratio"] = 1.0
    log(f"seed {seed} plain: {results['plain']} ({plain_seconds:.0f} CPU s)")

    for name, (kind, options) in recipes.items():
        started = time.process_time()
        if kind == "trained":
            recipe = {
                "max_epochs": config.max_epochs,
                "batch_size": config.batch_size,
                "optimizer": config.optimizer,
                "learning_rate": config.learning_rate,
                "weight_decay": config.weight_decay,
                "warmup_epochs": config.warmup_epochs,
                "grad_clip_norm": config.grad_clip_norm,
                "validation_fraction": 0.0,
            }
            model = CalAttnFinetuner(
                make_tiny_vit(num_classes=10, image_size=16, random_state=seed),
                device="cpu",
                random_state=seed,
                **{**recipe, **options},
            ).fit(X_train, y_train)
            ts = TemperatureScaling().fit(model.decision_function(X_cal), y_cal)
            after = ts.predict_proba(model.decision_function(X_eval))
        elif kind == "head":
            recipe = {
                "max_epochs": 2 if quick else 30,
                "learning_rate": 1e-3,
                "weight_decay": 0.0,
                "warmup_epochs": 1.0,
                "validation_fraction": 0.0,
            }
            model = CalAttnFinetuner(
                plain,
                freeze_backbone=True,
                device="cpu",
                random_state=seed,
                **{**recipe, **options},
            ).fit(X_cal, y_cal)
            # The head has seen the whole calibration part; the temperature on top of it
            # is fitted there too, as the demo's post-hoc rows are.
            ts = TemperatureScaling().fit(model.decision_function(X_cal), y_cal)
            after = ts.predict_proba(model.decision_function(X_eval))
        else:
            recipe = {
                "max_epochs": 2 if quick else 30,
                "warmup_epochs": 1.0,
                "validation_fraction": 0.15,
            }
            model = CalAttnFinetuner(
                plain,
                post_hoc="temperature",
                device="cpu",
                random_state=seed,
                **{**recipe, **options},
            ).fit(X_cal, y_cal)
            after = model.predict_proba(X_eval)
        seconds = time.process_time() - started
        results[name] = scores(y_eval, calattn_probabilities(model, X_eval), after)
        results[name]["cpu_ratio"] = seconds / plain_seconds
        log(f"seed {seed} {name}: {results[name]} ({seconds:.0f} CPU s)")
    return results


COLUMNS = (
    ("accuracy", "accuracy %"),
    ("ece_before", "ECE % before TS"),
    ("ece_after", "ECE % after TS"),
    ("nll_before", "NLL before TS"),
    ("nll_after", "NLL after TS"),
    ("cpu_ratio", "CPU time / plain training"),
)


def _cell(values: list[float], key: str) -> str:
    digits = 3 if key.startswith("nll") else 2
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def report(per_seed: dict[int, dict], seeds, header_lines) -> str:
    names = list(next(iter(per_seed.values())))
    lines = [*header_lines]
    lines += [
        "## Mean ± standard deviation over the tuning seeds (tuning evaluation part)",
        "",
        "| recipe | " + " | ".join(title for _, title in COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    for name in names:
        cells = [_cell([per_seed[s][name][key] for s in seeds], key) for key, _ in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "`plain`: the demo's model, before / after temperature scaling on the tuning "
        "calibration part. CPU time: of the training (and, for fine-tuned recipes, the "
        "fine-tuning alone), against the plain model's training on the same seed.",
        "",
        "## Against plain + TS, per seed (recipe after TS minus plain after TS)",
        "",
        "| recipe | " + " | ".join(f"seed {s}: ECE % / NLL" for s in seeds) + " | wins |",
        "|---|" + "---:|" * (len(seeds) + 1),
    ]
    for name in names[1:]:
        cells, wins = [], 0
        for s in seeds:
            d_ece = per_seed[s][name]["ece_after"] - per_seed[s]["plain"]["ece_after"]
            d_nll = per_seed[s][name]["nll_after"] - per_seed[s]["plain"]["nll_after"]
            cells.append(f"{d_ece:+.2f} / {d_nll:+.3f}")
            wins += d_ece < 0 and d_nll < 0
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {wins} of {len(seeds)} |")
    lines += ["", "`wins`: seeds on which both the ECE and the NLL after TS are lower.", ""]

    def mean(name, key):
        return statistics.fmean(per_seed[s][name][key] for s in seeds)

    chosen = min(names[1:], key=lambda name: mean(name, "nll_after"))
    beats = [
        f"{label} {mean(chosen, key):.{digits}f} against {mean('plain', key):.{digits}f}"
        for key, label, digits in (("ece_after", "ECE %", 2), ("nll_after", "NLL", 3))
    ]
    verdict = (
        "beats"
        if mean(chosen, "ece_after") < mean("plain", "ece_after")
        and mean(chosen, "nll_after") < mean("plain", "nll_after")
        else "does not beat"
    )
    lines += [
        "## Choice",
        "",
        f"Lowest mean NLL after TS: **{chosen}**. After TS it {verdict} plain + TS on "
        f"both means ({'; '.join(beats)}).",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    _common.add_seeds_argument(parser, (1, 2, 3))
    parser.add_argument(
        "--round", type=int, choices=sorted(ROUNDS), default=1, help="the recipes to try"
    )
    parser.add_argument("--quick", action="store_true", help="few epochs (a smoke run)")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="Markdown file to write (default benchmarks/results/demo_calattn_recipe.md, "
        "demo_calattn_recipe_round_N.md for round N > 1)",
    )
    arguments = parser.parse_args(argv)
    if arguments.output is None:
        suffix = "" if arguments.round == 1 else f"_round_{arguments.round}"
        arguments.output = _common.RESULTS_DIR / f"demo_calattn_recipe{suffix}.md"
    _common.limit_threads(1)
    load_before = _common.load_average()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    recipes = ROUNDS[arguments.round]
    per_seed = {seed: run_seed(seed, recipes, arguments.quick, log) for seed in arguments.seeds}
    minutes = (time.perf_counter() - started) / 60
    header_lines = _common.header(
        f"The demo's CalAttn recipe, round {arguments.round}: on a tuning split of the demo's "
        "training and calibration images",
        __file__,
        argv,
        details=(
            f"Seeds {' '.join(map(str, arguments.seeds))}; per seed {DEMO_SIZES[0]} training, "
            f"{TUNING_CALIBRATION} calibration and {TUNING_EVALUATION} evaluation images drawn "
            f"from the demo's {DEMO_SIZES[0] + DEMO_SIZES[1]} non-test images; "
            f"{minutes:.0f} minutes in all."
            + (" **Quick mode: not a result.**" if arguments.quick else "")
        ),
        load_before=load_before,
    )
    _common.write_results(report(per_seed, arguments.seeds, header_lines), arguments.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
