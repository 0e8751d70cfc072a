"""Quality of the post-hoc calibrators on the CIFAR records and on the demo's digits model.

For each bundled CIFAR record (LeNet-5 and WideResNet-16-4 on CIFAR-10/100,
10,000 test images; the log-probabilities serve as logits) and each of
``--splits`` random 5,000 / 5,000 calibration / test splits, every method is
fitted on the calibration half and scored on the test half:

- uncalibrated (the record's probabilities);
- ``TemperatureScaling`` (exact NLL optimum);
- ``VectorScaling``;
- the classic calibrators with their defaults: ``PlattScaling``,
  ``IsotonicCalibration``, ``BetaCalibration``, ``HistogramBinning`` and
  ``EnsembleTemperatureScaling`` (one-vs-rest and renormalised where the
  method is binary);
- ``AutoCalibrator`` with its default candidates (5-fold cross-validated
  NLL on the calibration half; ``random_state`` = the split's seed); the
  summary compares its test NLL with the identity's and with the best row
  among its candidates (see ``AUTO_CANDIDATE_ROWS``);
- ``MatrixScaling`` on the log-probabilities, i.e. Dirichlet calibration,
  with the ODIR regularisation ``reg_off_diagonal = reg_bias = lambda``
  chosen per split from ``MS_GRID`` on an inner 80 / 20 split of the
  calibration half (lowest inner-validation NLL), then refitted on all of it
  (on the CIFAR-100 records only with ``--dirichlet-100``: see
  ``DIRICHLET_100_NOTE``);
- ``AdaptiveTS`` with its defaults and the logits as features
  (``random_state`` = the split's seed), predicting at the posterior mean of
  the latent code (its default) and, in a second row, the same fitted
  network averaging its probabilities over ``N_DRAWS`` seeded latent
  samples, and a second fit with another seed (``OTHER_SEED``), whose gap
  to the first is what the seed alone changes; and a fit with
  ``confidence_inputs=True``, alone and with ``n_members=5`` (options
  chosen on the tuning splits of ``adaptive_ts_variants.py``, evaluated here
  on unseen ones).

Under each table, the measurement floor: the ECE that a perfectly calibrated
model with TemperatureScaling's probabilities measures on the test part
(labels drawn from those probabilities): the sampling noise of its ECE
if the labels were drawn afresh. It is a reference, not a bound: the test
labels are fixed by the images, and a method whose confidences are spread
otherwise has a reference of its own (AdaptiveTS with
``confidence_inputs=True, n_members=5`` measures below it on LeNet
CIFAR-10).

On the digits, a tiny timm ViT is trained once on the demo's training split
(:func:`reliacal.datasets.train_digits_classifier`); its pooled pre-logits
features and logits on the held-out images (the demo's calibration and test
parts, 810 images) come from one pass of
:func:`reliacal.backbones.extract_outputs`; they are re-split ``--splits``
times into 360 calibration / 450 test images (stratified). AdaptiveTS runs
on the logits alone and on the pooled features beside the logits
(``n_logits=10``).

Metrics on the test part (``reliacal.metrics``): top-label ECE (15 equal-width
bins), adaptive ECE (15 equal-mass bins), classwise ECE, the debiased L2
calibration error of Kumar et al. (15 equal-mass bins), NLL, Brier score and
accuracy, as mean and standard deviation over the splits; ``fit s`` is the
mean wall-clock fit time (for Dirichlet it includes the choice of lambda).

Run from the repository root (one torch thread by default: the networks are
small and the machine is shared):

    .venv/bin/python benchmarks/posthoc_quality.py \\
        [--quick] [--splits 5] [--first-seed 0] [--records ...] [--no-digits] \\
        [--output benchmarks/results/posthoc_quality.md]

``--quick`` is a sanity run: two splits, one record (LeNet-5 CIFAR-10), 3 epochs for AdaptiveTS
and the digits model, no file written unless ``--output`` is given.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import NamedTuple

import _common
import numpy as np
from _posthoc_data import (
    DATA_DIR,
    DIGITS_CALIBRATION_SIZE,
    FLOOR_DRAWS,
    RECORDS,
    digits_outputs,
    digits_splits,
    log_probabilities,
    measurement_floor,
    random_splits,
)
from sklearn.model_selection import train_test_split

from reliacal.calibrators import (
    AdaptiveTS,
    AutoCalibrator,
    BetaCalibration,
    EnsembleTemperatureScaling,
    HistogramBinning,
    IsotonicCalibration,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from reliacal.metrics import (
    accuracy,
    brier_score,
    classwise_calibration_error,
    debiased_calibration_error,
    expected_calibration_error,
    negative_log_likelihood,
    softmax,
)

MS_GRID = (1e-3, 1e-2, 1e-1, 1.0)
N_DRAWS = 32
# The second AdaptiveTS fit of each split uses random_state = the split's seed + this offset:
# the gap between the two rows is the part of a comparison that is only the seed's.
OTHER_SEED = 100
# The combination chosen on the tuning splits of adaptive_ts_variants.py.
ENSEMBLE = {"confidence_inputs": True, "n_members": 5}
# The rows that are (close to) AutoCalibrator's default candidates: its NLL is compared with
# the best of those present. Dirichlet here tunes lambda, the candidate fixes lambda = 1.
AUTO_CANDIDATE_ROWS = (
    "TemperatureScaling",
    "VectorScaling",
    "EnsembleTemperatureScaling",
    "IsotonicCalibration",
    "Dirichlet (MS + ODIR)",
    "AdaptiveTS (logits)",
)
# The classic calibrators, fitted with their defaults.
CLASSIC = (
    PlattScaling,
    IsotonicCalibration,
    BetaCalibration,
    HistogramBinning,
    EnsembleTemperatureScaling,
)
TUNING_NOTE = (
    "How AdaptiveTS's defaults were chosen (not a held-out selection): on 3 of these same",
    "CIFAR splits, validation_fraction 0.2 beat 0.1 (sklearn's default) on the mean ECE of",
    "all four records; weight_decay 0.01 / 0.1, learning_rate 1e-4 and latent_dim 4 did not",
    "win more records. On the digits, none of weight_decay 0.1 / 1, n_iter_no_change 20,",
    "validation_fraction 0.3 or learning_rate 1e-4 brought both a lower mean ECE than",
    "TemperatureScaling and an NLL within 1% of its NLL. The default start at the",
    "TemperatureScaling temperature (initial_temperature='ts', kept when no epoch beats it on",
    "validation NLL) was chosen on 5 random halves of the demo's digits calibration split",
    "(not on these test splits), where it took AdaptiveTS's NLL from +15% to +0.07% of TS's.",
    "",
    "Alternatives rechecked with a one-off script on 5 other splits (those of `--first-seed",
    "100`), mean ECE % on LeNet C10 / WRN C10 / LeNet C100 / WRN C100 (TemperatureScaling:",
    "1.94 / 0.76 / 1.32 / 4.11): the default 2.07 / 0.79 / 1.44 / 3.03; the published random",
    "start 2.05 / 1.21 / 1.37 / 3.39, but NLL +12.5% of TS's on the digits (features + logits);",
    "a second global temperature fitted on the validation part after training 1.99 / 0.88 /",
    "1.38 / 2.76, digits NLL +8%; the mean of 5 fits with other seeds 2.00 / - / 1.33 / - (not",
    "run on the WRN records). The default with other seeds alone gave 1.83 (LeNet C10) and",
    "1.22 (LeNet C100), both below TS: on the three records where TemperatureScaling is near",
    "the measurement floor, the seed moves AdaptiveTS's mean ECE by more than its gap to TS.",
)
DIRICHLET_100_NOTE = (
    "too slow for this benchmark's budget: one fit on a 5,000 x 100 calibration half took "
    "633 s here at lambda = 0.1 and stopped at 3,000 L-BFGS iterations"
)
METRICS: dict[str, Callable] = {
    "ECE %": lambda y, p: 100 * expected_calibration_error(y, p),
    "adaptive ECE %": lambda y, p: 100 * expected_calibration_error(y, p, strategy="quantile"),
    "classwise ECE %": lambda y, p: 100 * classwise_calibration_error(y, p),
    "debiased ECE %": lambda y, p: 100 * debiased_calibration_error(y, p),
    "NLL": negative_log_likelihood,
    "Brier": brier_score,
    "accuracy %": lambda y, p: 100 * accuracy(y, p),
}


def dirichlet_odir(logits, y, seed):
    """MatrixScaling with the ODIR lambda of lowest NLL on an inner 80 / 20 split."""
    inner_fit, inner_val, y_fit, y_val = train_test_split(
        logits, y, test_size=0.2, random_state=seed
    )
    scores = []
    for reg in MS_GRID:
        model = MatrixScaling(reg_off_diagonal=reg, reg_bias=reg).fit(inner_fit, y_fit)
        scores.append(negative_log_likelihood(y_val, model.predict_proba(inner_val)))
    reg = MS_GRID[int(np.argmin(scores))]
    model = MatrixScaling(reg_off_diagonal=reg, reg_bias=reg).fit(logits, y)
    model.chosen_ = f"lambda={reg:g}"
    return model


class Method(NamedTuple):
    """How to fit one row's model, and what it reads."""

    fit: Callable  # fit(X, y, seed) -> fitted model
    reads_features: bool = False  # X = [features | logits], built with n_logits = K
    sampled_row: bool = False  # also score the fitted AdaptiveTS with n_draws = N_DRAWS


def adaptive_method(
    adaptive_params: dict, *, seed_offset=0, n_logits=None, sampled_row=False
) -> Method:
    def fit(X, y, seed):
        return AdaptiveTS(
            n_logits=n_logits, random_state=seed + seed_offset, **adaptive_params
        ).fit(X, y)

    return Method(fit, reads_features=n_logits is not None, sampled_row=sampled_row)


def classic_method(calibrator_class) -> Method:
    return Method(lambda X, y, seed: calibrator_class().fit(X, y))


def auto_calibrator(X, y, seed):
    model = AutoCalibrator(random_state=seed).fit(X, y)
    model.chosen_ = f"chose {model.best_name_}"
    return model


def make_methods(adaptive_params: dict, *, dirichlet: bool) -> dict[str, Method]:
    methods = {
        "TemperatureScaling": Method(lambda X, y, seed: TemperatureScaling().fit(X, y)),
        "VectorScaling": Method(lambda X, y, seed: VectorScaling().fit(X, y)),
    }
    if dirichlet:
        methods["Dirichlet (MS + ODIR)"] = Method(dirichlet_odir)
    methods.update({cls.__name__: classic_method(cls) for cls in CLASSIC})
    methods["AutoCalibrator"] = Method(auto_calibrator)
    methods["AdaptiveTS (logits)"] = adaptive_method(adaptive_params, sampled_row=True)
    methods[f"AdaptiveTS (logits, seed + {OTHER_SEED})"] = adaptive_method(
        adaptive_params, seed_offset=OTHER_SEED
    )
    methods["AdaptiveTS (logits, confidence_inputs=True)"] = adaptive_method(
        {**adaptive_params, "confidence_inputs": True}
    )
    methods["AdaptiveTS (logits, confidence_inputs=True, n_members=5)"] = adaptive_method(
        {**adaptive_params, **ENSEMBLE}
    )
    return methods


def run_splits(
    logits: np.ndarray,
    y: np.ndarray,
    splits: dict[int, tuple[np.ndarray, np.ndarray]],
    methods: dict[str, Method],
    *,
    features: np.ndarray | None = None,
    log: Callable[[str], None],
) -> tuple[dict[str, dict[str, list[float]]], list[float]]:
    """Scores of every method on every split (``results[method][metric] -> list``) and
    the measurement floor of each split (of TemperatureScaling's test probabilities).
    """
    results: dict[str, dict[str, list[float]]] = {}
    floors: list[float] = []
    floor_rng = np.random.default_rng(0)
    side_by_side = None if features is None else np.hstack([features, logits])

    def record(name, probabilities, y_test, seconds, extra=""):
        row = results.setdefault(name, {})
        for metric, fn in METRICS.items():
            row.setdefault(metric, []).append(float(fn(y_test, probabilities)))
        row.setdefault("fit s", []).append(seconds)
        ece, nll = row["ECE %"][-1], row["NLL"][-1]
        log(f"  {name:40s} ECE {ece:6.3f}%  NLL {nll:.4f}  fit {seconds:6.2f}s {extra}")

    for seed, (calibration, test) in splits.items():
        log(f" split {seed}")
        record("uncalibrated", softmax(logits[test]), y[test], 0.0)
        for name, method in methods.items():
            X = side_by_side if method.reads_features else logits
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # convergence notes of unregularised fits
                model = method.fit(X[calibration], y[calibration], seed)
            seconds = time.perf_counter() - start
            extra = getattr(model, "chosen_", "")
            if isinstance(model, AutoCalibrator):
                results.setdefault(name, {}).setdefault("choices", []).append(model.best_name_)
            if isinstance(model, AdaptiveTS):
                temperature = model.temperature(X[test])
                epochs = ", ".join(
                    f"{len(member.history)} (best {member.best_epoch})" for member in model.members_
                )
                extra = f"epochs {epochs}, T {temperature.mean():.3f} +- {temperature.std():.3f}"
            probabilities = model.predict_proba(X[test])
            record(name, probabilities, y[test], seconds, extra)
            if name == "TemperatureScaling":
                floors.append(measurement_floor(probabilities, floor_rng))
            if method.sampled_row:
                # The same fitted network, predicting with the seeded latent samples.
                model.set_params(n_draws=N_DRAWS)
                sampled = model.predict_proba(X[test])
                record(f"{name[:-1]}, n_draws={N_DRAWS})", sampled, y[test], seconds)
    return results, floors


def feature_methods(adaptive_params: dict, n_logits: int) -> dict[str, Method]:
    """AdaptiveTS on the pooled features beside the logits (``n_logits`` last columns)."""
    return {
        "AdaptiveTS (features + logits)": adaptive_method(
            adaptive_params, n_logits=n_logits, sampled_row=True
        ),
        f"AdaptiveTS (features + logits, seed + {OTHER_SEED})": adaptive_method(
            adaptive_params, n_logits=n_logits, seed_offset=OTHER_SEED
        ),
        "AdaptiveTS (features + logits, confidence_inputs=True)": adaptive_method(
            {**adaptive_params, "confidence_inputs": True}, n_logits=n_logits
        ),
        "AdaptiveTS (features + logits, confidence_inputs=True, n_members=5)": adaptive_method(
            {**adaptive_params, **ENSEMBLE}, n_logits=n_logits
        ),
    }


def format_table(results: dict[str, dict[str, list[float]]]) -> list[str]:
    columns = [*METRICS, "fit s"]  # "choices" (AutoCalibrator's) go to the summary
    lines = [
        "| method | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, row in results.items():
        cells = []
        for column in columns:
            values = np.asarray(row[column])
            digits = 4 if column in ("NLL", "Brier") else 2 if column != "fit s" else 1
            cells.append(f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def verdict(results) -> list[str]:
    """One line per AdaptiveTS row: ECE, debiased ECE and NLL against TemperatureScaling's.

    The ECE difference is paired by split: mean +- its standard error over the splits.
    """
    ts = results["TemperatureScaling"]
    ts_ece, ts_nll = np.mean(ts["ECE %"]), np.mean(ts["NLL"])
    lines = []
    for name in (name for name in results if name.startswith("AdaptiveTS")):
        row = results[name]
        ece, nll = np.mean(row["ECE %"]), np.mean(row["NLL"])
        gaps = np.subtract(row["ECE %"], ts["ECE %"])
        lines.append(
            f"{name} vs TemperatureScaling: mean ECE {ece:.3f}% vs {ts_ece:.3f}% "
            f"({'lower' if ece < ts_ece else 'NOT lower'}; difference {gaps.mean():+.3f} "
            f"± {gaps.std(ddof=1) / np.sqrt(len(gaps)):.3f} pts, lower on "
            f"{int((gaps < 0).sum())} of {len(gaps)} splits), debiased ECE "
            f"{np.mean(row['debiased ECE %']):.3f}% vs {np.mean(ts['debiased ECE %']):.3f}%, "
            f"mean NLL {nll:.4f} vs {ts_nll:.4f} ({100 * (nll / ts_nll - 1):+.2f}%)"
        )
    return lines


def auto_verdict(results, choices: list[str]) -> str:
    """AutoCalibrator's mean test NLL against the identity's and the best candidate row's."""
    auto, identity = (
        np.mean(results["AutoCalibrator"]["NLL"]),
        np.mean(results["uncalibrated"]["NLL"]),
    )
    candidates = {
        name: np.mean(results[name]["NLL"]) for name in AUTO_CANDIDATE_ROWS if name in results
    }
    candidates = {name: value for name, value in candidates.items() if np.isfinite(value)}
    best = min(candidates, key=candidates.get)
    gap = 100 * (auto / candidates[best] - 1)
    noise = np.std(results["uncalibrated"]["NLL"], ddof=1) if len(choices) > 1 else np.nan
    return (
        f"AutoCalibrator: mean NLL {auto:.4f} (chose {', '.join(choices)}); best candidate row "
        f"{best} {candidates[best]:.4f}: {gap:+.2f}% "
        f"({'within' if gap <= 1.0 else 'NOT within'} 1%); identity {identity:.4f} "
        f"({'not worse' if auto <= identity else 'WORSE'}"
        + ("" if np.isnan(noise) else f"; split noise of the identity's NLL {noise:.4f}")
        + ")"
    )


def floor_line(floors: list[float], results) -> str:
    return (
        f"Measurement floor: a perfectly calibrated model with TemperatureScaling's test "
        f"probabilities (labels drawn from them, {FLOOR_DRAWS} draws per split) measures ECE "
        f"{np.mean(floors):.2f} ± {np.std(floors, ddof=1):.2f} %; TemperatureScaling measures "
        f"{np.mean(results['TemperatureScaling']['ECE %']):.2f} %."
    )


def select(methods: dict[str, Method], names: list[str] | None) -> dict[str, Method]:
    """The rows named in ``--methods`` (all when None), TemperatureScaling always."""
    if names is None:
        return methods
    return {name: m for name, m in methods.items() if name in names or name == "TemperatureScaling"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fast sanity run")
    parser.add_argument("--splits", type=int, default=None, help="random splits (default 5)")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seed of the first split (the defaults were tuned on splits seeded from 100)",
    )
    parser.add_argument("--records", nargs="*", default=None, help="subset of the records")
    parser.add_argument("--no-digits", action="store_true", help="skip the digits model")
    parser.add_argument(
        "--methods",
        nargs="*",
        default=None,
        help="only these rows (TemperatureScaling is always run: the floor reads it)",
    )
    parser.add_argument(
        "--dirichlet-100",
        action="store_true",
        help=f"also fit Dirichlet on the CIFAR-100 records ({DIRICHLET_100_NOTE})",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch and BLAS threads")
    _common.add_output_argument(parser, None)
    args = parser.parse_args(argv)

    _common.limit_threads(args.threads)
    n_splits = args.splits or (2 if args.quick else 5)
    seeds = range(args.first_seed, args.first_seed + n_splits)
    records = args.records or (RECORDS[:1] if args.quick else RECORDS)
    adaptive_params = {"max_epochs": 3} if args.quick else {}
    output = args.output
    if output is None and not args.quick:
        output = _common.RESULTS_DIR / "posthoc_quality.md"

    def log(message: str) -> None:
        print(message, flush=True)

    report = [
        *_common.header(
            "Post-hoc calibration quality",
            __file__,
            argv,
            details=f"BLAS on {args.threads} thread(s) too; on a shared machine the fit "
            "times are indicative only.",
        ),
        "Mean ± standard deviation over the splits, measured on the test part of each split;",
        "ECE with 15 equal-width bins, adaptive ECE with 15 equal-mass bins (both top-label),",
        "classwise ECE with 15 equal-width bins, debiased ECE: Kumar et al.'s debiased L2 error",
        "(15 equal-mass bins, clipped at 0: 0 means below what the test part can resolve);",
        "`fit s` is the mean fit time in seconds.",
        "",
        "- Dirichlet: MatrixScaling on the log-probabilities with ODIR lambda = mu chosen per "
        f"split from {list(MS_GRID)} by the NLL of an inner 80/20 split of the calibration "
        "data, then refitted on all of it"
        + (
            ""
            if args.dirichlet_100
            else f"; not run on the CIFAR-100 records ({DIRICHLET_100_NOTE})"
        )
        + ".",
        "- AdaptiveTS: default hyperparameters"
        + (f" except {adaptive_params}" if adaptive_params else "")
        + ", random_state = the split's seed; each `n_draws` row is the fitted network of the row "
        f"above, averaging its probabilities over {N_DRAWS} seeded latent samples instead of "
        "predicting at the posterior mean (the default); each `seed + "
        f"{OTHER_SEED}` row is a second fit with random_state = the split's seed + {OTHER_SEED}; "
        "each `confidence_inputs=True` row is a fit with that option, and each `n_members=5` "
        "row five such networks with their own seeds (both chosen on the tuning splits of "
        "`adaptive_ts_variants.py`, evaluated here).",
        "",
    ]
    summary, auto_summary = [], []
    started = time.perf_counter()
    for name in records:
        log(f"{name}")
        with np.load(DATA_DIR / f"{name}.npz") as data:
            logits = log_probabilities(data["predictions"])
            y = data["ground_truth"].astype(np.int64)
        methods = select(
            make_methods(adaptive_params, dirichlet=logits.shape[1] <= 10 or args.dirichlet_100),
            args.methods,
        )
        results, floors = run_splits(logits, y, random_splits(len(y), seeds), methods, log=log)
        report += [
            f"## {name} ({n_splits} random 5,000 / 5,000 splits)",
            "",
            *format_table(results),
            "",
            floor_line(floors, results),
            "",
        ]
        summary += [f"- {name}: " + line for line in verdict(results)]
        if "AutoCalibrator" in results:
            auto_summary.append(
                f"- {name}: " + auto_verdict(results, results["AutoCalibrator"]["choices"])
            )

    if not args.no_digits:
        log("digits (tiny ViT)")
        pooled, logits, y, train_seconds = digits_outputs(args.quick, log)
        n_calibration = DIGITS_CALIBRATION_SIZE
        methods = select(
            {
                **make_methods(adaptive_params, dirichlet=True),
                **feature_methods(adaptive_params, n_logits=logits.shape[1]),
            },
            args.methods,
        )
        results, floors = run_splits(
            logits, y, digits_splits(y, n_calibration, seeds), methods, features=pooled, log=log
        )
        report += [
            f"## digits, tiny ViT ({pooled.shape[1]}-d pooled features; {n_splits} stratified "
            f"splits of the {len(y)} held-out images into {n_calibration} calibration / "
            f"{len(y) - n_calibration} test; classifier trained once in {train_seconds:.0f} s)",
            "",
            *format_table(results),
            "",
            floor_line(floors, results),
            "",
        ]
        summary += ["- digits: " + line for line in verdict(results)]
        if "AutoCalibrator" in results:
            auto_summary.append(
                "- digits: " + auto_verdict(results, results["AutoCalibrator"]["choices"])
            )

    report += ["## AdaptiveTS against TemperatureScaling", "", *summary, "", *TUNING_NOTE, ""]
    report += [
        "## AutoCalibrator against the identity and its candidates",
        "",
        "Goal (issue 17): test NLL never worse than the identity's by more than the split "
        "noise, and within 1% of the best single candidate's.",
        "",
        *auto_summary,
        "",
    ]
    report += [f"Total time: {time.perf_counter() - started:.0f} s.", ""]
    _common.write_results("\n".join(report), output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
