"""
Comparing calibrators on a CIFAR-10 network
===========================================

Which calibrator to use is a question for held-out data. This example fits
six of them on one half of a WideResNet-16-4's CIFAR-10 test predictions (the
record ships with the repository, ``tests/data``), scores them on the other
half, and asks whether each one's difference to temperature scaling is more
than the noise of a 5,000-row test set (paired bootstrap intervals of
:func:`~reliacal.metrics.compare`). :doc:`../user_guide/choosing` summarises
the benchmarks that ran this comparison on many splits and problems.
"""

from pathlib import Path

import numpy as np

from reliacal.calibrators import (
    CenteredIsotonicCalibration,
    SplineCalibration,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    TemperatureScaling,
    VectorScaling,
)
from reliacal.metrics import calibration_report, compare
from reliacal.plot import plot_reliability_diagrams

here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
record = next(p for p in [*here.parents, here] if (p / "tests" / "data").is_dir())
with np.load(record / "tests" / "data" / "wideresnet-16-4-cifar-10.npz") as data:
    probabilities = data["predictions"]
    labels = data["ground_truth"].astype(int)

# The record holds probabilities; their logs are logits (up to a constant per row).
logits = np.log(np.clip(probabilities, 1e-12, None))
order = np.random.default_rng(1).permutation(len(labels))
calibration, test = order[:5000], order[5000:]

calibrators = {
    "temperature scaling": TemperatureScaling(),
    "vector scaling": VectorScaling(),
    "structured vector scaling": StructuredVectorScaling(),
    "structured matrix scaling": StructuredMatrixScaling(),
    "centred isotonic": CenteredIsotonicCalibration(),
    "spline": SplineCalibration(),
}
predictions = {"uncalibrated": probabilities[test]}
for name, calibrator in calibrators.items():
    calibrator.fit(logits[calibration], labels[calibration])
    predictions[name] = calibrator.predict_proba(logits[test])

print(calibration_report(labels[test], predictions)[["accuracy", "ece", "nll", "brier"]])

# %%
# The differences to temperature scaling, with 95% paired bootstrap intervals
# (the same resampled rows for every method): ``significant`` when the interval
# excludes 0. On this split the NLL of every other map differs from temperature
# scaling's by more than the noise (lower for the logistic maps and the spline,
# higher for centred isotonic), while none of the ECE differences does: 5,000
# test rows cannot tell these ECEs apart.
differences = compare(
    labels[test],
    predictions,
    metrics=("ece", "nll"),
    reference="temperature scaling",
    n_bootstraps=200,
    random_state=0,
)
columns = ["value", "difference", "difference_ci_low", "difference_ci_high", "significant"]
others = differences.index.get_level_values("method") != "temperature scaling"
print(differences.loc[others, columns].round(4).to_string())

# %%
# The reliability diagrams of the same test half. Temperature scaling brings the
# bars of the uncalibrated network to the diagonal, but for the sparse bins of
# low confidence; the richer maps lower the NLL further, which the diagrams, at
# this resolution, hardly show.
plot_reliability_diagrams(labels[test], predictions)
