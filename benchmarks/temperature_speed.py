"""Speed, optimum and passes over the logits of temperature-scaling fits, beside the peers.

For float32 logits of 10,000 x 100 and 50,000 x 1,000 (one run), fits the
temperature with:

- reliacal ``TemperatureScaling`` (Taylor steps on log(1/T) from a strided
  subset's start, chunked float32 then float64 passes);
- scikit-learn's internal fitter behind ``CalibratedClassifierCV(method="temperature")``
  (``sklearn.calibration._TemperatureScaling``: bounded Brent on log(1/T));
- probmetrics ``get_calibrator("temp-scaling")`` (bisection on the gradient, 30 steps);
- torch-uncertainty ``TemperatureScaler`` (LBFGS, its defaults);
- torch ``LBFGS`` with a strong Wolfe line search on 1/T (float32, as usually written).

Each fit is timed (wall clock, best of ``--repeats``, the fitters interleaved so
that they share the machine's load), and the NLL at each returned T is computed
in float64 by one independent function. Peers that are not installed are
skipped with a note. reliacal's passes over the logits are read from its
counters (``n_passes_``: full reads of the logits; ``subset_passes_``: the
subset solves' reads in units of the logits' size).

A second section fits reliacal alone on the four CIFAR records (log of
``predictions`` as logits, all 10,000 rows) and on logits on extreme scales or
with rows outside the strided subset on a far wider scale ("hidden" scales),
with the relative error of T against Brent's root of the float64 gradient
(solved on the logits divided by the scale: ``T(c z) = c T(z)``). Writes
Markdown to ``--output``.

Usage::

    python benchmarks/temperature_speed.py --repeats 3 \\
        --output benchmarks/results/temperature_speed.md

``--cases 4000x2`` times other shapes instead (a binary problem there: the
per-fit overhead, not the passes over the data, dominates).

``--vector`` times ``VectorScaling`` instead (its own results file), on the
50,000 x 1,000 logits and the four CIFAR records: its Newton fit (started from
the temperature's optimum; ``n_passes_`` counts its passes over the logits)
beside the L-BFGS fit it had before (``_LogitScaling._fit_core``, one pass per
loss evaluation), with the loss (mean NLL, float64, one function) and its
largest gradient component at both solutions::

    python benchmarks/temperature_speed.py --vector --repeats 3 \\
        --output benchmarks/results/vector_scaling_speed.md
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable

import _common
import numpy as np
import torch
from _posthoc_data import DATA_DIR, RECORDS
from scipy.optimize import brentq
from scipy.special import log_softmax, softmax

from reliacal.calibrators import TemperatureScaling, VectorScaling, _temperature_nll
from reliacal.calibrators.scaling import _LogitScaling

CASES = ((10_000, 100), (50_000, 1_000))
# The goals of the fit (issue 31): time ratios to these peers at 50,000 x 1,000, and
# passes over the logits.
RATIO_GOAL = 15.0
RATIO_PEERS = ("scikit-learn _TemperatureScaling", "probmetrics temp-scaling")
TYPICAL_PASSES, WORST_PASSES = 3, 5


def make_logits(n_samples: int, n_classes: int, seed: int = 0):
    """Overconfident float32 logits: true class boosted, 30% of the labels wrong."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n_samples)
    logits = rng.normal(size=(n_samples, n_classes)).astype(np.float32)
    logits[np.arange(n_samples), y] += 4.0
    logits *= 2.5
    wrong = rng.random(n_samples) < 0.3
    y = np.where(wrong, rng.integers(0, n_classes, size=n_samples), y)
    return logits, y


def nll_at(logits: np.ndarray, y: np.ndarray, temperature: float) -> float:
    """Mean NLL of softmax(z / T) in float64, in row chunks (the reference for every fitter)."""
    total = 0.0
    for start in range(0, len(y), 2048):
        chunk = logits[start : start + 2048].astype(np.float64) / temperature
        log_p = log_softmax(chunk, axis=1)
        total -= log_p[np.arange(len(chunk)), y[start : start + 2048]].sum()
    return total / len(y)


def brent_temperature(logits, y, scale: float = 1.0) -> float:
    """Reference: ``scale`` times Brent's root in b = 1/T of the float64 NLL gradient of
    ``logits / scale``, mean(E_p[z] - z_y), in row chunks."""
    z = np.asarray(logits, dtype=np.float64) / scale

    def gradient(b):
        total = 0.0
        for start in range(0, len(y), 2048):
            chunk = z[start : start + 2048]
            p = softmax(b * chunk, axis=1)
            rows = np.arange(len(chunk))
            total += ((p * chunk).sum(axis=1) - chunk[rows, y[start : start + 2048]]).sum()
        return total / len(y)

    return scale / brentq(gradient, 1e-4, 1e4, xtol=1e-300, rtol=1e-15)


# The last reliacal estimator fitted, for its pass counters.
LAST_FIT: dict[str, TemperatureScaling] = {}


def fit_reliacal(logits, y):
    LAST_FIT["reliacal"] = fitted = TemperatureScaling().fit(logits, y)
    return fitted.temperature_


def passes_of(fitted: TemperatureScaling) -> str:
    return f"{fitted.n_passes_} (+{fitted.subset_passes_:.3f})"


def fit_sklearn(logits, y):
    from sklearn.calibration import _TemperatureScaling

    return float(1.0 / _TemperatureScaling().fit(logits, y).beta_)


def fit_probmetrics(logits, y):
    from probmetrics.calibrators import get_calibrator
    from probmetrics.distributions import CategoricalLogits

    calibrator = get_calibrator("temp-scaling")
    calibrator.fit_torch(CategoricalLogits(torch.from_numpy(logits)), torch.from_numpy(y))
    return float(1.0 / calibrator.invtemp_)


def fit_torch_uncertainty(logits, y):
    import logging

    from torch.utils.data import DataLoader, TensorDataset
    from torch_uncertainty.post_processing import TemperatureScaler

    logging.getLogger().setLevel(logging.ERROR)
    scaler = TemperatureScaler(device="cpu")
    data = TensorDataset(torch.from_numpy(logits), torch.from_numpy(y))
    scaler.fit(DataLoader(data, batch_size=len(y)), progress=False)
    return float(scaler.temperature[0].item())


def fit_torch_lbfgs(logits, y):
    z, target = torch.from_numpy(logits), torch.from_numpy(y)
    inverse_temperature = torch.ones(1, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [inverse_temperature], lr=1.0, max_iter=100, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(z * inverse_temperature, target)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(1.0 / inverse_temperature.item())


FITTERS: dict[str, tuple[Callable, str]] = {
    "reliacal TemperatureScaling": (fit_reliacal, "reliacal"),
    "scikit-learn _TemperatureScaling": (fit_sklearn, "sklearn"),
    "probmetrics temp-scaling": (fit_probmetrics, "probmetrics"),
    "torch-uncertainty TemperatureScaler": (fit_torch_uncertainty, "torch_uncertainty"),
    "torch LBFGS (strong Wolfe)": (fit_torch_lbfgs, "torch"),
}


def available_fitters() -> tuple[dict[str, Callable], list[str]]:
    fitters, skipped = {}, []
    for name, (fit, module) in FITTERS.items():
        try:
            __import__(module)
        except ImportError as error:
            skipped.append(f"{name}: not installed ({error})")
            continue
        fitters[name] = fit
    return fitters, skipped


def run_case(n_samples, n_classes, fitters, repeats):
    logits, y = make_logits(n_samples, n_classes)
    times = {name: np.inf for name in fitters}
    temperatures = {}
    for _ in range(repeats):
        for name, fit in fitters.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                temperatures[name] = fit(logits, y)
                times[name] = min(times[name], time.perf_counter() - start)
    rows = []
    ours = times["reliacal TemperatureScaling"]
    passes = passes_of(LAST_FIT["reliacal"])
    for name in fitters:
        rows.append(
            {
                "fitter": name,
                "seconds": times[name],
                "ratio": times[name] / ours,
                "passes": passes if name.startswith("reliacal") else "",
                "temperature": temperatures[name],
                "nll": nll_at(logits, y, temperatures[name]),
            }
        )
    return rows


def _random_problem(seed, n_samples, n_classes, dtype=np.float64):
    """Gaussian logits with the true class boosted and 10% of the labels moved (as the
    tests' extreme-scale cases)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n_samples)
    scale, signal = rng.uniform(0.3, 5.0), rng.uniform(1.0, 6.0)
    logits = scale * rng.normal(size=(n_samples, n_classes)) + signal * np.eye(n_classes)[y]
    y = np.where(rng.random(n_samples) < 0.1, (y + 1) % n_classes, y)
    return logits.astype(dtype), y


def _rows_off_the_subset(n_samples, n_classes, count):
    """``count`` rows that the fitter's first strided subset (so every deeper one) skips."""
    subset = _temperature_nll.subset_rows(n_samples, n_classes)
    outside = np.setdiff1d(np.arange(n_samples), subset)
    return outside[:: len(outside) // count][:count]


def scale_cases():
    """``(group, name, logits, y, reference T)`` of the CIFAR, extreme and hidden cases."""
    for name in RECORDS:
        with np.load(DATA_DIR / f"{name}.npz") as record:
            logits, y = np.log(record["predictions"]), record["ground_truth"]
        yield "CIFAR record", name, logits, y, brent_temperature(logits, y)
    base, y = _random_problem(15, 400, 4)
    reference = brent_temperature(base, y)
    for scale in (1e38, 3e37, 1e-34, 1e-300, 1e300, 2.0**-1000, 1e4, 1e-4):
        yield "extreme scale", f"z x {scale:.3g}", base * scale, y, scale * reference
    base32, y32 = _random_problem(16, 400, 5, np.float32)
    reference = brent_temperature(base32, y32)
    for exponent in (120, -110):
        scale = np.float32(2.0**exponent)
        yield (
            "extreme scale",
            f"float32 z x 2^{exponent}",
            base32 * scale,
            y32,
            float(scale) * reference,
        )
    tiny, y_tiny = _random_problem(18, 300, 3)
    stacked = np.vstack([tiny * 1e-30, np.full((100, 3), 1e300)])
    labels = np.concatenate([y_tiny, np.arange(100) % 3])
    yield (
        "extreme scale",
        "z x 1e-30 beside 100 rows of 1e300",
        stacked,
        labels,
        1e-30 * brent_temperature(tiny, y_tiny),
    )
    logits, y = make_logits(20_000, 100)
    hidden = _rows_off_the_subset(20_000, 100, 5)
    for factor in (1e12, 1e5):
        wide = logits.astype(np.float64)
        wide[hidden] *= factor
        yield (
            "hidden scale",
            f"5 rows off the subset x {factor:g}",
            wide,
            y,
            brent_temperature(wide, y, scale=factor),
        )


def run_scale_cases(repeats):
    rows = []
    for group, name, logits, y, reference in scale_cases():
        best = np.inf
        for _ in range(repeats):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                fitted = TemperatureScaling().fit(logits, y)
                best = min(best, time.perf_counter() - start)
        rows.append(
            {
                "group": group,
                "case": name,
                "shape": f"{logits.shape[0]:,} x {logits.shape[1]:,} {logits.dtype}",
                "passes": fitted.n_passes_,
                "subset": fitted.subset_passes_,
                "seconds": best,
                "temperature": fitted.temperature_,
                "error": abs(fitted.temperature_ / reference - 1.0),
            }
        )
    return rows


def verdicts(results, scale_rows) -> list[str]:
    """The goals, met or not, from the measured numbers."""
    lines = []
    largest = max(results, key=lambda shape: shape[0] * shape[1])
    by_name = {row["fitter"]: row for row in results[largest]}
    for peer in RATIO_PEERS:
        if peer in by_name:
            ratio = by_name[peer]["ratio"]
            met = "met" if ratio >= RATIO_GOAL else "NOT met"
            lines.append(
                f"- {largest[0]:,} x {largest[1]:,}: reliacal is {ratio:.1f}x faster than "
                f"{peer} (goal >= {RATIO_GOAL:g}x: {met})."
            )
    typical = [LAST_PASSES[shape] for shape in results]
    worst = max([row["passes"] for row in scale_rows], default=0)
    lines.append(
        f"- Passes over the logits: {', '.join(str(p) for p in typical)} on the synthetic "
        f"cases above (goal <= {TYPICAL_PASSES}: "
        f"{'met' if max(typical) <= TYPICAL_PASSES else 'NOT met'}); at most {worst} on the "
        f"CIFAR, extreme- and hidden-scale cases below (goal <= {WORST_PASSES}: "
        f"{'met' if worst <= WORST_PASSES else 'NOT met'})."
    )
    return lines


# Full passes of reliacal's last fit in each synthetic case.
LAST_PASSES: dict[tuple[int, int], int] = {}


def markdown(results, scale_rows, skipped, argv, load_before) -> str:
    lines = [
        *_common.header(
            "Temperature scaling: fit time, optimum and passes over the logits",
            __file__,
            argv,
            load_before=load_before,
            details="Times are the best of the repeats, fitters interleaved.",
        ),
        "ratio = fitter time / reliacal time (larger: reliacal is faster). NLL: mean "
        "negative log-likelihood at the returned T, computed in float64 by one function "
        "for all fitters. passes (reliacal only): full reads of the logits, and in "
        "brackets the subset solves' reads in units of the logits' size.",
        "",
        *verdicts(results, scale_rows),
        "",
    ]
    for (n_samples, n_classes), rows in results.items():
        lines += [
            f"## float32 logits {n_samples:,} x {n_classes:,}",
            "",
            "| fitter | time (s) | ratio | passes | T | NLL at T |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            lines.append(
                f"| {row['fitter']} | {row['seconds']:.3f} | {row['ratio']:.1f} | "
                f"{row['passes']} | {row['temperature']:.10f} | {row['nll']:.15f} |"
            )
        lines.append("")
    lines += [
        "## reliacal on the CIFAR records and on extreme and hidden scales",
        "",
        "CIFAR records: log of `predictions` as logits, all 10,000 rows. Extreme scales: "
        "the tests' 400 x 4 (and 400 x 5 float32) problems times c, and 300 tiny rows beside "
        "100 constant rows of 1e300. Hidden scales: make_logits(20,000, 100) with 5 rows "
        "that the strided subset skips multiplied by the factor (1e12 changes the scale "
        "exponent, 1e5 does not; either way those rows set T). error: |T / T_ref - 1| with "
        "T_ref from Brent's method on the float64 gradient of the logits divided by the "
        "scale, times the scale. time: best of the repeats (wall clock).",
        "",
        "| case | logits | passes | subset passes | time (ms) | T | error |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in scale_rows:
        lines.append(
            f"| {row['group']}: {row['case']} | {row['shape']} | {row['passes']} | "
            f"{row['subset']:.3f} | {1e3 * row['seconds']:.1f} | {row['temperature']:.10g} | "
            f"{row['error']:.1e} |"
        )
    lines.append("")
    if skipped:
        lines += ["Skipped:", ""] + [f"- {line}" for line in skipped] + [""]
    return "\n".join(lines)


class LbfgsVectorScaling(VectorScaling):
    """VectorScaling fitted by the shared L-BFGS code, as before its Newton solver;
    ``n_passes_`` counts the loss evaluations (one pass over the logits each)."""

    def _fit_core(self, features, logits, y_index, sample_weight):
        self.n_passes_ = 0
        _LogitScaling._fit_core(self, features, logits, y_index, sample_weight)

    def _loss(self, parameters, logits, y_index, weights):
        self.n_passes_ += 1
        return super()._loss(parameters, logits, y_index, weights)


def vector_cases():
    """``(name, logits, y)``: the synthetic 50,000 x 1,000 logits and the CIFAR records."""
    yield "float32 logits 50,000 x 1,000", *make_logits(50_000, 1_000)
    for name in RECORDS:
        with np.load(DATA_DIR / f"{name}.npz") as record:
            yield f"CIFAR record: {name}", np.log(record["predictions"]), record["ground_truth"]


def loss_and_gradient(fitted, logits, y):
    """The loss of vector scaling (float64) and its largest gradient component."""
    parameters = np.concatenate([fitted.coef_, fitted.intercept_])
    weights = np.full(len(y), 1.0 / len(y))
    loss, gradient = fitted._loss(parameters, logits.astype(np.float64), y, weights)
    return loss, float(np.abs(gradient).max())


def run_vector_cases(repeats):
    rows = []
    for name, logits, y in vector_cases():
        fits, times = {}, {"newton": np.inf, "lbfgs": np.inf}
        # The L-BFGS fit takes minutes at 50,000 x 1,000: timed once there.
        lbfgs_repeats = 1 if logits.size > 10**7 else repeats
        for _ in range(repeats):
            for kind, estimator in (("newton", VectorScaling), ("lbfgs", LbfgsVectorScaling)):
                if kind == "lbfgs" and fits.get(kind) and lbfgs_repeats == 1:
                    continue
                start = time.perf_counter()
                fits[kind] = estimator().fit(logits, y)
                times[kind] = min(times[kind], time.perf_counter() - start)
        newton, lbfgs = fits["newton"], fits["lbfgs"]
        loss, gradient = loss_and_gradient(newton, logits, y)
        lbfgs_loss, lbfgs_gradient = loss_and_gradient(lbfgs, logits, y)
        rows.append(
            {
                "case": name,
                "shape": f"{logits.shape[0]:,} x {logits.shape[1]:,} {logits.dtype}",
                "newton": times["newton"],
                "lbfgs": times["lbfgs"],
                "passes": newton.n_passes_,
                "subset": newton.subset_passes_,
                "steps": newton.n_iter_,
                "lbfgs passes": lbfgs.n_passes_,
                "loss": loss,
                "relative": (loss - lbfgs_loss) / lbfgs_loss,
                "gradient": gradient,
                "lbfgs gradient": lbfgs_gradient,
                "coef": max(
                    np.abs(newton.coef_ - lbfgs.coef_).max(),
                    np.abs(newton.intercept_ - lbfgs.intercept_).max(),
                ),
            }
        )
        print(
            f"  {name:42s} Newton {rows[-1]['newton']:8.3f} s ({newton.n_passes_} passes "
            f"+{newton.subset_passes_:.2f})  "
            f"L-BFGS {rows[-1]['lbfgs']:8.3f} s ({lbfgs.n_passes_} passes)  "
            f"loss {loss:.15f} ({rows[-1]['relative']:+.1e})",
            flush=True,
        )
    return rows


def vector_markdown(rows, argv, load_before) -> str:
    lines = [
        *_common.header(
            "Vector scaling: Newton's fit against L-BFGS, time and passes over the logits",
            __file__,
            argv,
            load_before=load_before,
            details="Times are the best of the repeats (L-BFGS at 50,000 x 1,000: one fit).",
        ),
        "Newton: `VectorScaling` (up to 256 classes: steps to the minimum of a strided "
        "subset's loss corrected to each pass's gradient and Hessian, from the subset's "
        "temperature; beyond: Newton steps from the NLL-optimal temperature). passes: full "
        "reads of the logits, the temperature's included (+ the subset's reads in units of "
        "the logits' size); steps: passes that took a step. L-BFGS: the same objective "
        "fitted by the shared L-BFGS code (`_LogitScaling._fit_core`, the fit before; a pass "
        "per loss evaluation). ratio = L-BFGS time / Newton time. loss: mean NLL at the "
        "Newton solution (float64); rel. to L-BFGS: (loss - L-BFGS loss) / L-BFGS loss "
        "(negative: lower). |grad|: largest gradient component (L-BFGS stops below 1e-6). "
        "|coef diff|: largest difference of the parameters (w, b).",
        "",
        "| case | logits | Newton (s) | passes | steps | L-BFGS (s) | L-BFGS passes | ratio "
        "| loss | rel. to L-BFGS | \\|grad\\| | L-BFGS \\|grad\\| | \\|coef diff\\| |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['case']} | {row['shape']} | {row['newton']:.3f} | {row['passes']} "
            f"(+{row['subset']:.2f}) | "
            f"{row['steps']} | {row['lbfgs']:.3f} | {row['lbfgs passes']} | "
            f"{row['lbfgs'] / row['newton']:.1f} | {row['loss']:.12f} | {row['relative']:.1e} | "
            f"{row['gradient']:.1e} | {row['lbfgs gradient']:.1e} | {row['coef']:.1e} |"
        )
    lines.append("")
    return "\n".join(lines)


def _case(text: str) -> tuple[int, int]:
    try:
        n_samples, n_classes = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N x K such as 4000x2, got {text!r}") from None
    return n_samples, n_classes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--cases",
        nargs="+",
        type=_case,
        default=list(CASES),
        help="shapes N x K to time (default: 10000x100 50000x1000)",
    )
    parser.add_argument(
        "--vector",
        action="store_true",
        help="time VectorScaling's Newton fit against its L-BFGS fit instead",
    )
    _common.add_output_argument(parser, None)
    args = parser.parse_args(argv)
    if args.vector:
        load_before = _common.load_average()
        print("VectorScaling: Newton against L-BFGS")
        rows = run_vector_cases(args.repeats)
        if args.output is not None:
            _common.write_results(vector_markdown(rows, argv, load_before), args.output)
        return 0
    fitters, skipped = available_fitters()
    load_before = _common.load_average()
    results = {}
    for n_samples, n_classes in args.cases:
        results[(n_samples, n_classes)] = rows = run_case(
            n_samples, n_classes, fitters, args.repeats
        )
        LAST_PASSES[(n_samples, n_classes)] = LAST_FIT["reliacal"].n_passes_
        print(f"\nfloat32 logits {n_samples} x {n_classes}")
        for row in rows:
            print(
                f"  {row['fitter']:38s} {row['seconds']:8.3f} s  x{row['ratio']:6.1f}  "
                f"{row['passes']:>12s}  T={row['temperature']:.10f}  NLL={row['nll']:.15f}"
            )
    scale_rows = run_scale_cases(args.repeats)
    print("\nreliacal on the CIFAR records and on extreme and hidden scales")
    for row in scale_rows:
        print(
            f"  {row['group'] + ': ' + row['case']:55s} passes={row['passes']} "
            f"(+{row['subset']:.3f})  {1e3 * row['seconds']:7.1f} ms  "
            f"T={row['temperature']:.10g}  error={row['error']:.1e}"
        )
    for line in skipped:
        print("skipped:", line)
    text = markdown(results, scale_rows, skipped, argv, load_before)
    if args.output is not None:
        _common.write_results(text, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
