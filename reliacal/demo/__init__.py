"""``reliacal demo``: train a tiny Vision Transformer on the digits, calibrate it, report.

The demo trains :func:`reliacal.datasets.make_tiny_vit` with plain
cross-entropy on scikit-learn's digits (fixed seed; stratified train /
calibration / test split), runs every method of :data:`METHODS` on it, and
writes a folder with ``report.md`` and ``report.html`` (the metric table of
:func:`reliacal.metrics.calibration_report` and the reliability diagrams side
by side), the PNG figures, the test predictions of every method
(``predictions.npz``) and the calibration and test logits as prediction files
that ``reliacal calibrate`` reads.

A method is one :class:`DemoMethod` line in :data:`METHODS`: a name and a
function from the :class:`DemoContext` (the trained model, its adapter, the
data splits, the cached logits and pooled features, the training settings,
the seed) to the test probabilities, or to a :class:`MethodOutput` that also
carries extra figures.

:func:`results_file` turns a run's ``summary`` (the headline table and the
claims it supports) into the file ``reliacal demo --results PATH`` writes;
the README quotes that block, and the tests check that it is the demo's.
"""

from __future__ import annotations

from reliacal.demo._run import (
    METHODS,
    DemoContext,
    DemoMethod,
    DemoResult,
    MethodOutput,
    post_hoc,
    run_demo,
)
from reliacal.demo._summary import results_file

__all__ = [
    "DemoContext",
    "DemoMethod",
    "DemoResult",
    "METHODS",
    "MethodOutput",
    "post_hoc",
    "results_file",
    "run_demo",
]
