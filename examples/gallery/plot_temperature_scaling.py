"""
Temperature scaling on a real network's outputs
===============================================

A WideResNet-16-4 trained on CIFAR-10 is over-confident on its test images.
Temperature scaling, fitted on one half of them, divides its logits by one
number ``T`` and brings the confidence in line with the accuracy on the other
half. The record ships with the repository (``tests/data``).
"""

from pathlib import Path

import numpy as np

from reliacal.calibrators import TemperatureScaling
from reliacal.metrics import calibration_report
from reliacal.plot import plot_reliability_diagrams

here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
record = next(p for p in [*here.parents, here] if (p / "tests" / "data").is_dir())
with np.load(record / "tests" / "data" / "wideresnet-16-4-cifar-10.npz") as data:
    probabilities = data["predictions"]
    labels = data["ground_truth"].astype(int)

order = np.random.default_rng(0).permutation(len(labels))
calibration, test = order[:5000], order[5000:]

# The record holds probabilities: input="probs" scales their logs (logits up to a
# constant per row, which softmax ignores).
ts = TemperatureScaling(input="probs").fit(probabilities[calibration], labels[calibration])
print(f"T = {ts.temperature_:.3f}")

predictions = {
    "uncalibrated": probabilities[test],
    "temperature scaling": ts.predict_proba(probabilities[test]),
}
print(calibration_report(labels[test], predictions)[["accuracy", "ece", "nll", "brier"]])

# %%
# Bars below the diagonal are over-confident bins; after scaling they meet it.
plot_reliability_diagrams(labels[test], predictions)
