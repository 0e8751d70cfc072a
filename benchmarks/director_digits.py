"""DIRECTOR on the digits: teacher vs DIRECTOR (1 and 10 paths) vs teacher + TS.

For each seed: the demo's tiny ViT (``reliacal.datasets``) is trained on the
train split with plain cross-entropy; TemperatureScaling is fitted on the
calibration split; DiffusionReconfigurer distils the teacher on the train split.
Reported on the test split: accuracy, 15-bin top-label ECE, NLL, Brier score,
parameter count, inference time per sample; under shift (rotated, noised
digits): accuracy, ECE and the AUROC of telling shifted from clean test images;
for OOD inputs (uniform-noise images and pixel-scrambled digits): the AUROC of
telling them from the clean test images. Scores: 1 - max probability, predictive
entropy and (DIRECTOR) mutual information; higher = "more likely shifted/OOD".

A text case follows: a tiny BERT-style teacher
(:func:`reliacal.datasets.make_tiny_bert`: transformers'
``BertForSequenceClassification``, hidden 32, 2 layers) on a synthetic rule
(which of the tokens 1, 2, 3 occurs most often in a padded sequence).

Usage::

    .venv/bin/python benchmarks/director_digits.py --seeds 1 2 3   # ~15 min on 2 cores
    .venv/bin/python benchmarks/director_digits.py --quick    # smoke run

The markdown table goes to ``benchmarks/results/director_digits.md`` (``--output``).
"""

from __future__ import annotations

import argparse
import copy
import time

import _common
import numpy as np
import torch
from scipy import ndimage
from sklearn.metrics import roc_auc_score

from reliacal.calibrators import TemperatureScaling
from reliacal.datasets import (
    load_digits_images,
    make_tiny_bert,
    train_calibration_test_split,
)
from reliacal.finetune.director import DiffusionReconfigurer
from reliacal.metrics import (
    accuracy,
    brier_score,
    expected_calibration_error,
    negative_log_likelihood,
)
from reliacal.training import TrainingConfig, fit_module

# Data --------------------------------------------------------------------------------------


def _with_draws(director, n_draws: int):
    """A copy of the fitted DIRECTOR predicting with ``n_draws`` sampled paths."""
    return copy.copy(director).set_params(n_draws=n_draws)


def shifted_sets(X: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Covariate shift of the clean test images: same labels, different look."""
    rng = np.random.default_rng(seed)
    rotated = ndimage.rotate(X, 30.0, axes=(2, 3), reshape=False, order=1, mode="constant")
    noised = X + rng.normal(0.0, 0.3, size=X.shape)
    return {
        "rotated 30 deg": np.clip(rotated, 0, 1).astype(np.float32),
        "noised (sd 0.3)": np.clip(noised, 0, 1).astype(np.float32),
    }


def ood_sets(X: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Inputs of no digit class: uniform noise, and digits with their pixels scrambled."""
    rng = np.random.default_rng(seed + 1000)
    flat = X.reshape(len(X), -1)
    scrambled = np.stack([row[rng.permutation(flat.shape[1])] for row in flat])
    return {
        "uniform noise": rng.random(X.shape, dtype=np.float32),
        "scrambled digits": scrambled.reshape(X.shape).astype(np.float32),
    }


# Models ------------------------------------------------------------------------------------


def teacher_logits(model: torch.nn.Module, X) -> np.ndarray:
    with torch.no_grad():
        return model.eval()(torch.as_tensor(X)).double().numpy()


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    return probs / probs.sum(axis=1, keepdims=True)


def entropy(probs: np.ndarray) -> np.ndarray:
    return -(probs * np.log(np.maximum(probs, 1e-300))).sum(axis=1)


def auroc(in_scores: np.ndarray, out_scores: np.ndarray) -> float:
    labels = np.r_[np.zeros(len(in_scores)), np.ones(len(out_scores))]
    return float(roc_auc_score(labels, np.r_[in_scores, out_scores]))


def quality(y: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    return {
        "accuracy": accuracy(y, probs),
        "ECE": expected_calibration_error(y, probs, n_bins=15),
        "NLL": negative_log_likelihood(y, probs),
        "Brier": brier_score(y, probs),
    }


def timed(function, n: int, repeats: int = 2) -> tuple[object, float]:
    """Result of ``function()`` and its best wall time per sample in milliseconds."""
    best, result = np.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return result, 1e3 * best / n


class Method:
    """Probabilities (and DIRECTOR's mutual information) of one method on an input set."""

    def __init__(self, name, proba, mutual_information=None):
        self.name, self.proba, self.mutual_information = name, proba, mutual_information

    def evaluate(self, X) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        probs = self.proba(X)
        scores = {"1 - max prob": 1.0 - probs.max(axis=1), "entropy": entropy(probs)}
        if self.mutual_information is not None:
            scores["mutual info"] = self.mutual_information(X)
        return probs, scores


#: DIRECTOR settings of the benchmark (the rest are the estimator's defaults). The
#: run is short (30 epochs of 14 steps), so the EMA decay is 0.98 instead of the
#: default 0.995, whose ~200-step horizon would average half the run's weights.
DIRECTOR_SETTINGS = {"max_epochs": 30, "ema_decay": 0.98, "device": "cpu"}
#: The default initial noise (1e-2) and a larger one: the noise head learns from
#: the cross-entropy alone and stays near where it starts, so this sets the spread.
DIRECTOR_VARIANTS = {"DIRECTOR": {}, "DIRECTOR noise 0.1": {"noise_init": 0.1}}


def director_kwargs(seed: int, quick: bool, **extra) -> dict:
    settings = {**DIRECTOR_SETTINGS, **extra, "random_state": seed}
    if quick:
        settings["max_epochs"] = 3
    return settings


def run_digits_seed(seed: int, quick: bool) -> dict:
    X, y = load_digits_images(image_size=16)
    splits = train_calibration_test_split(X, y, random_state=seed)
    X_test, y_test = splits.X_test, splits.y_test
    row: dict = {"quality": {}, "params": {}, "time": {}, "shift": {}, "ood": {}}

    teacher, row["teacher_fit_s"] = _common.train_digits_vit(
        splits.X_train, splits.y_train, seed, quick=quick
    )
    n_teacher = sum(p.numel() for p in teacher.parameters())

    scaler = TemperatureScaling().fit(
        teacher_logits(teacher, splits.X_calibration), splits.y_calibration
    )

    methods = [
        Method("teacher", lambda A: softmax(teacher_logits(teacher, A))),
        Method("teacher + TS", lambda A: scaler.predict_proba(teacher_logits(teacher, A))),
    ]
    params = {"teacher": n_teacher, "teacher + TS": n_teacher + 1}
    row["director_fit_s"], row["director_sigma"] = {}, {}
    for label, extra in DIRECTOR_VARIANTS.items():
        start = time.perf_counter()
        director = DiffusionReconfigurer(teacher, **director_kwargs(seed, quick, **extra))
        director.fit(splits.X_train, splits.y_train)
        row["director_fit_s"][label] = time.perf_counter() - start
        row["director_sigma"][label] = director.history_[-1]["train_sigma"]
        ten_paths = _with_draws(director, 10)
        methods += [
            Method(f"{label}, 1 path", _with_draws(director, 1).predict_proba),
            Method(
                f"{label}, 10 paths",
                ten_paths.predict_proba,
                lambda A, d=ten_paths: d.uncertainty(A)["mutual_information"].to_numpy(),
            ),
        ]
        params[f"{label}, 1 path"] = params[f"{label}, 10 paths"] = director.n_parameters_

    shifts, oods = shifted_sets(X_test, seed), ood_sets(X_test, seed)
    for method in methods:
        _, row["time"][method.name] = timed(lambda m=method: m.proba(X_test), len(X_test))
        probs, clean_scores = method.evaluate(X_test)
        row["quality"][method.name] = quality(y_test, probs)
        row["params"][method.name] = params[method.name]
        for name, X_shift in shifts.items():
            shifted_probs, scores = method.evaluate(X_shift)
            entry = {
                "accuracy": accuracy(y_test, shifted_probs),
                "ECE": expected_calibration_error(y_test, shifted_probs, n_bins=15),
            }
            for score, values in scores.items():
                entry[f"AUROC {score}"] = auroc(clean_scores[score], values)
            row["shift"][(method.name, name)] = entry
        for name, X_ood in oods.items():
            _, scores = method.evaluate(X_ood)
            row["ood"][(method.name, name)] = {
                f"AUROC {score}": auroc(clean_scores[score], values)
                for score, values in scores.items()
            }
    return row


# Text case ---------------------------------------------------------------------------------

VOCAB, PAD, LENGTH = 40, 0, 16


def token_task(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Label = which of the tokens 1, 2, 3 occurs most often (ties: the smallest)."""
    ids = rng.integers(4, VOCAB, size=(n, LENGTH))
    ids[:, 0] = VOCAB - 1  # a fixed first token, read by the pooler as [CLS]
    special = rng.random((n, LENGTH)) < 0.45
    ids = np.where(special, rng.integers(1, 4, size=(n, LENGTH)), ids)
    ids[:, 0] = VOCAB - 1
    lengths = rng.integers(10, LENGTH + 1, size=n)
    ids[np.arange(LENGTH)[None, :] >= lengths[:, None]] = PAD
    counts = np.stack([(ids == token).sum(axis=1) for token in (1, 2, 3)], axis=1)
    return ids.astype(np.int64), counts.argmax(axis=1).astype(np.int64)


def run_text_seed(seed: int, quick: bool) -> dict:
    rng = np.random.default_rng(seed)
    ids, y = token_task(3000, rng)
    train, cal, test = slice(0, 2000), slice(2000, 2500), slice(2500, 3000)
    model = make_tiny_bert(3, VOCAB, max_length=LENGTH, pad_token_id=PAD, random_state=seed)

    def forward_logits(batch):
        return model(batch, attention_mask=(batch != PAD).long()).logits

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, batch):
            return forward_logits(batch)

    start = time.perf_counter()
    fit_module(
        Wrapped(),
        torch.nn.functional.cross_entropy,
        torch.utils.data.TensorDataset(torch.from_numpy(ids[train]), torch.from_numpy(y[train])),
        config=TrainingConfig(
            max_epochs=3 if quick else 40,
            batch_size=64,
            learning_rate=3e-3,
            weight_decay=0.01,
            warmup_epochs=1.0,
            selection_metric="accuracy",
            device="cpu",
            random_state=seed,
        ),
    )
    teacher_s = time.perf_counter() - start
    model.eval()

    def logits(part):
        with torch.no_grad():
            return forward_logits(torch.from_numpy(ids[part])).double().numpy()

    scaler = TemperatureScaling().fit(logits(cal), y[cal])
    start = time.perf_counter()
    director = DiffusionReconfigurer(
        model,
        lambda_mean=0.8,
        lambda_ce=0.2,
        **director_kwargs(seed, quick),
    ).fit(ids[train], y[train])
    director_s = time.perf_counter() - start
    return {
        "quality": {
            "teacher": quality(y[test], softmax(logits(test))),
            "teacher + TS": quality(y[test], scaler.predict_proba(logits(test))),
            "DIRECTOR, 1 path": quality(y[test], _with_draws(director, 1).predict_proba(ids[test])),
            "DIRECTOR, 10 paths": quality(y[test], director.predict_proba(ids[test])),
        },
        "params": {
            "teacher": sum(p.numel() for p in model.parameters()),
            "DIRECTOR": director.n_parameters_,
        },
        "teacher_fit_s": teacher_s,
        "director_fit_s": director_s,
    }


# Report ------------------------------------------------------------------------------------


def mean_std(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.4f} ± {values.std():.4f}" if len(values) > 1 else f"{values[0]:.4f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return _common.table_head(header) + ["| " + " | ".join(row) + " |" for row in rows]


def report(digits: list[dict], text: list[dict], args, argv, elapsed: float) -> str:
    methods = list(digits[0]["quality"])
    lines = [
        *_common.header(
            "DIRECTOR on the digits (and a tiny text task)",
            __file__,
            argv,
            details=f"Total {elapsed / 60:.1f} min.",
        ),
        f"Seeds {args.seeds}; mean ± standard deviation over seeds. Test split: 450 digits "
        "(16x16). DIRECTOR: estimator defaults except "
        + ", ".join(
            f"`{k}={v!r}`" for k, v in director_kwargs(0, args.quick).items() if k != "random_state"
        )
        + "; `DIRECTOR noise 0.1` also sets `noise_init=0.1`. TS is fitted on the calibration "
        "split (359 digits); the teacher and DIRECTOR train on the train split (988 digits, "
        "10% of it held out for checkpoint selection).",
        "",
        "## Clean test split",
        "",
    ]
    rows = []
    for method in methods:
        q = [seed["quality"][method] for seed in digits]
        rows.append(
            [method]
            + [mean_std([entry[key] for entry in q]) for key in ("accuracy", "ECE", "NLL", "Brier")]
            + [
                f"{int(np.mean([seed['params'][method] for seed in digits])):,}",
                f"{np.mean([seed['time'][method] for seed in digits]):.3f}",
            ]
        )
    lines += table(
        ["method", "accuracy", "ECE (15 bins)", "NLL", "Brier", "parameters", "ms / sample"], rows
    )
    lines += [
        "",
        "Fit times (s): teacher "
        + mean_std([seed["teacher_fit_s"] for seed in digits])
        + "; "
        + "; ".join(
            f"{label} "
            + mean_std([seed["director_fit_s"][label] for seed in digits])
            + " (learned RMS sigma "
            + mean_std([seed["director_sigma"][label] for seed in digits])
            + ")"
            for label in DIRECTOR_VARIANTS
        )
        + ".",
        "",
        "## Shift: accuracy, ECE, and AUROC of shifted vs clean test images",
        "",
    ]
    for kind, header_extra in (("shift", ["accuracy", "ECE"]), ("ood", [])):
        if kind == "ood":
            lines += ["", "## OOD: AUROC of OOD vs clean test images", ""]
        names = list(dict.fromkeys(name for _, name in digits[0][kind]))
        scores = ["AUROC 1 - max prob", "AUROC entropy", "AUROC mutual info"]
        rows = []
        for name in names:
            for method in methods:
                entries = [seed[kind][(method, name)] for seed in digits]
                cells = [name, method]
                for key in header_extra + scores:
                    cells.append(mean_std([e[key] for e in entries]) if key in entries[0] else "-")
                rows.append(cells)
        lines += table(["data", "method", *header_extra, *scores], rows)
    if text:
        lines += [
            "",
            f"## Text: tiny BERT teacher on a synthetic token-counting rule (3 classes, seed "
            f"{args.seeds[0]})",
            "",
        ]
        rows = []
        for method in text[0]["quality"]:
            q = [seed["quality"][method] for seed in text]
            rows.append(
                [method]
                + [
                    mean_std([entry[key] for entry in q])
                    for key in ("accuracy", "ECE", "NLL", "Brier")
                ]
            )
        lines += table(["method", "accuracy", "ECE (15 bins)", "NLL", "Brier"], rows)
        lines += [
            "",
            f"Parameters: teacher {text[0]['params']['teacher']:,}, DIRECTOR "
            f"{text[0]['params']['DIRECTOR']:,}. Fit times (s): teacher "
            + mean_std([seed["teacher_fit_s"] for seed in text])
            + ", DIRECTOR "
            + mean_std([seed["director_fit_s"] for seed in text])
            + ".",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _common.add_seeds_argument(parser, [1, 2, 3])
    parser.add_argument("--quick", action="store_true", help="few epochs: a smoke run")
    parser.add_argument("--no-text", action="store_true", help="skip the text case")
    _common.add_output_argument(parser, "director_digits.md")
    args = parser.parse_args(argv)
    _common.limit_threads(1)
    start = time.perf_counter()
    digits, text = [], []
    for seed in args.seeds:
        digits.append(run_digits_seed(seed, args.quick))
        print(f"digits seed {seed}: {digits[-1]['quality']}", flush=True)
    if not args.no_text:
        # One seed: the text case shows that the language path works.
        text.append(run_text_seed(args.seeds[0], args.quick))
        print(f"text seed {args.seeds[0]}: {text[-1]['quality']}", flush=True)
    markdown = report(digits, text, args, argv, time.perf_counter() - start)
    _common.write_results(markdown, args.output)


if __name__ == "__main__":
    main()
