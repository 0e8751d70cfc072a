"""Speed and optimum of temperature-scaling fits, side by side with the peers.

For float32 logits of 10,000 x 100 and 50,000 x 1,000 (one run), fits the
temperature with:

- reliacal ``TemperatureScaling`` (Halley on log(1/T), chunked, float64 finish);
- scikit-learn's internal fitter behind ``CalibratedClassifierCV(method="temperature")``
  (``sklearn.calibration._TemperatureScaling``: bounded Brent on log(1/T));
- probmetrics ``get_calibrator("temp-scaling")`` (bisection on the gradient, 30 steps);
- torch-uncertainty ``TemperatureScaler`` (LBFGS, its defaults);
- torch ``LBFGS`` with a strong Wolfe line search on 1/T (float32, as usually written).

Each fit is timed (wall clock, best of ``--repeats``, the fitters interleaved so
that they share the machine's load), and the NLL at each returned T is computed
in float64 by one independent function. Peers that are not installed are
skipped with a note. Writes a Markdown table to ``--output``.

Usage::

    python benchmarks/temperature_speed.py --repeats 3 \\
        --output benchmarks/results/temperature_speed.md

``--cases 4000x2`` times other shapes instead (a binary problem there: the
per-fit overhead, not the passes over the data, dominates).
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
from scipy.special import log_softmax

from reliacal.calibrators import TemperatureScaling

CASES = ((10_000, 100), (50_000, 1_000))


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


def fit_reliacal(logits, y):
    return TemperatureScaling().fit(logits, y).temperature_


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
    for name in fitters:
        rows.append(
            {
                "fitter": name,
                "seconds": times[name],
                "ratio": times[name] / ours,
                "temperature": temperatures[name],
                "nll": nll_at(logits, y, temperatures[name]),
            }
        )
    return rows


def markdown(results, skipped, argv, load_before) -> str:
    lines = [
        *_common.header(
            "Temperature scaling: fit time and optimum",
            __file__,
            argv,
            load_before=load_before,
            details="Times are the best of the repeats, fitters interleaved.",
        ),
        "ratio = fitter time / reliacal time (larger: reliacal is faster). NLL: mean "
        "negative log-likelihood at the returned T, computed in float64 by one function "
        "for all fitters.",
        "",
    ]
    for (n_samples, n_classes), rows in results.items():
        lines += [
            f"## float32 logits {n_samples:,} x {n_classes:,}",
            "",
            "| fitter | time (s) | ratio | T | NLL at T |",
            "|---|---:|---:|---:|---:|",
        ]
        for row in rows:
            lines.append(
                f"| {row['fitter']} | {row['seconds']:.3f} | {row['ratio']:.1f} | "
                f"{row['temperature']:.10f} | {row['nll']:.15f} |"
            )
        lines.append("")
    if skipped:
        lines += ["Skipped:", ""] + [f"- {line}" for line in skipped] + [""]
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
    _common.add_output_argument(parser, None)
    args = parser.parse_args(argv)
    fitters, skipped = available_fitters()
    load_before = _common.load_average()
    results = {}
    for n_samples, n_classes in args.cases:
        results[(n_samples, n_classes)] = rows = run_case(
            n_samples, n_classes, fitters, args.repeats
        )
        print(f"\nfloat32 logits {n_samples} x {n_classes}")
        for row in rows:
            print(
                f"  {row['fitter']:38s} {row['seconds']:8.3f} s  x{row['ratio']:6.1f}  "
                f"T={row['temperature']:.10f}  NLL={row['nll']:.15f}"
            )
    for line in skipped:
        print("skipped:", line)
    text = markdown(results, skipped, argv, load_before)
    if args.output is not None:
        _common.write_results(text, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
