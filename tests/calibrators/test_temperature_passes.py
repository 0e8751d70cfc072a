"""TemperatureScaling's passes over the logits: counted right, and few.

The counter (``n_passes_``, also read by benchmarks/temperature_speed.py)
is checked against an independent count of the rows the solver slices out
of the logits; the bounds are the fitter's design goals (at most three passes for typical logits, five for logits
whose scale the strided subset does not see), asserted on deterministic
cases together with the exact optimum.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import softmax

from reliacal.calibrators import ConvergenceWarning, TemperatureScaling
from reliacal.calibrators import _temperature_nll as nll
from reliacal.datasets import make_logits


def _brentq_temperature(logits, y):
    """Reference optimum: the root of the float64 gradient in b = 1/T (Brent)."""
    z = np.asarray(logits, dtype=np.float64)
    rows = np.arange(len(y))

    def gradient(b):
        p = softmax(b * z, axis=1)
        return float(np.mean((p * z).sum(axis=1) - z[rows, y]))

    return 1.0 / brentq(gradient, 1e-4, 1e4, xtol=1e-300, rtol=1e-15)


def _overconfident_logits(n_samples, n_classes, seed=0):
    """float32 logits with the true class boosted, made over-confident, 30% of the labels wrong."""
    rng = np.random.default_rng(seed)
    logits, y = make_logits(n_samples, n_classes, scale=4.0, random_state=rng)
    wrong = rng.random(n_samples) < 0.3
    y = np.where(wrong, rng.integers(0, n_classes, size=n_samples), y)
    return (2.5 * logits).astype(np.float32), y


def test_the_pass_counter_counts_the_rows_read(counting_logits):
    logits, y = _overconfident_logits(6000, 50)
    counting = counting_logits(logits)
    solution, temperature, objective, subset_passes = nll.fit_nll(
        counting, y, None, tol=1e-6, max_iter=100
    )
    assert solution.status == "converged"
    # Every pass slices each row exactly once; the subset is gathered once.
    assert counting.counts["sliced"] == objective.n_passes * len(y)
    assert 0 < counting.counts["gathered"] < len(y)
    assert objective.n_passes == solution.n_iter
    assert 0 < subset_passes < 1
    assert temperature == pytest.approx(_brentq_temperature(logits, y), rel=1e-12)


@pytest.mark.parametrize(("n_samples", "n_classes"), [(8_000, 200), (30_000, 10), (4_000, 2)])
def test_typical_logits_are_read_at_most_three_times(n_samples, n_classes):
    logits, y = _overconfident_logits(n_samples, n_classes)
    fitted = TemperatureScaling().fit(logits, y)
    assert fitted.n_passes_ <= 3
    assert fitted.n_passes_ == fitted.n_iter_
    assert fitted.subset_passes_ < 1
    assert fitted.temperature_ == pytest.approx(_brentq_temperature(logits, y), rel=1e-12)


def test_cifar_records_are_read_at_most_three_times(record_name, load_record):
    probabilities, labels = load_record(record_name)
    logits = np.log(probabilities)
    fitted = TemperatureScaling().fit(logits, labels)
    assert fitted.n_passes_ <= 3
    assert fitted.temperature_ == pytest.approx(_brentq_temperature(logits, labels), rel=1e-12)


def _rows_off_the_subset(n_samples, n_classes, count):
    """``count`` rows that the first strided subset (and so every deeper one) skips."""
    subset = nll.subset_rows(n_samples, n_classes)
    outside = np.setdiff1d(np.arange(n_samples), subset)
    return outside[:: len(outside) // count][:count]


# Rows the subset does not see set the optimum: 1e12 changes the scale exponent (the
# first pass is discarded), 1e5 keeps it (the subset's start is far off).
@pytest.mark.parametrize("factor", [1e12, 1e5])
def test_a_scale_hidden_from_the_subset_takes_at_most_five_passes(factor):
    logits, y = _overconfident_logits(10_000, 100)
    logits = logits.astype(np.float64)
    hidden = _rows_off_the_subset(10_000, 100, 5)
    logits[hidden] *= factor
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = TemperatureScaling().fit(logits, y)
    assert fitted.n_passes_ <= 5
    # T(c z) = c T(z): the reference is solved on the logits divided by the factor.
    reference = factor * _brentq_temperature(logits / factor, y)
    assert fitted.temperature_ == pytest.approx(reference, rel=1e-12)
    # The hidden rows dominate: the subset alone would give a temperature far below.
    seen = _brentq_temperature(np.delete(logits, hidden, 0), np.delete(y, hidden))
    assert fitted.temperature_ > 1e3 * seen


@pytest.mark.parametrize("scale", [1e38, 1e-34, 1e-300, 1e300, 1e4, 1e-4])
def test_extreme_scales_take_at_most_five_passes(scale, scale_problem):
    logits, y = scale_problem
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fitted = TemperatureScaling().fit(logits * scale, y)
    assert fitted.n_passes_ <= 5
    assert fitted.temperature_ == pytest.approx(scale * _brentq_temperature(logits, y), rel=1e-12)


def test_the_ece_objective_counts_its_grid_passes():
    logits, y = _overconfident_logits(3000, 10)
    fitted = TemperatureScaling(objective="ece").fit(logits, y)
    nll_passes = TemperatureScaling().fit(logits, y).n_passes_
    assert fitted.n_passes_ == nll_passes + fitted.n_iter_
