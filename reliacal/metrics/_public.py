"""The public metric functions: each pure NumPy definition, taking Dask collections too.

Every metric function is defined once, on in-memory input, in the module of its
family; none of those modules knows about Dask. Here each is wrapped once, by
:func:`~reliacal.metrics._dask.dask_aware`: a Dask argument is computed from
per-partition :class:`~reliacal.metrics.CalibrationState` objects and the metric
table's entries that equal the function at its defaults (named below); any other
argument goes straight to the definition. :mod:`reliacal.metrics` exports these.
"""

from __future__ import annotations

from reliacal.metrics import _calibration_error, _calibration_tests, _scores, _smooth, _sweep
from reliacal.metrics._dask import dask_aware


def _public(function, *names: str, combine=None):
    wrapped = dask_aware(function, *names, combine=combine)
    # Pickled (by joblib, by Dask) under the name users import it by.
    wrapped.__module__ = "reliacal.metrics"
    return wrapped


accuracy = _public(_scores.accuracy, "accuracy")
brier_score = _public(_scores.brier_score, "brier")
negative_log_likelihood = _public(_scores.negative_log_likelihood, "nll")
expected_calibration_error = _public(_calibration_error.expected_calibration_error, "ece")
maximum_calibration_error = _public(_calibration_error.maximum_calibration_error, "mce")
classwise_calibration_error = _public(
    _calibration_error.classwise_calibration_error, "classwise_ece"
)
debiased_calibration_error = _public(_calibration_error.debiased_calibration_error, "debiased_ece")
smooth_calibration_error = _public(_smooth.smooth_calibration_error, "smooth_ece")
ks_calibration_error = _public(_calibration_tests.ks_calibration_error, "ks_error")
spiegelhalter_test = _public(
    _calibration_tests.spiegelhalter_test,
    "spiegelhalter_z",
    "spiegelhalter_p",
    combine=_calibration_tests.spiegelhalter_from_table,
)
monotonic_sweep_calibration_error = _public(_sweep.monotonic_sweep_calibration_error, "sweep_ece")
overconfidence_error = _public(_sweep.overconfidence_error, "overconfidence_error")
underconfidence_error = _public(_sweep.underconfidence_error, "underconfidence_error")
signed_calibration_error = _public(_sweep.signed_calibration_error, "signed_ece")

__all__ = [
    "accuracy",
    "brier_score",
    "classwise_calibration_error",
    "debiased_calibration_error",
    "expected_calibration_error",
    "ks_calibration_error",
    "maximum_calibration_error",
    "monotonic_sweep_calibration_error",
    "negative_log_likelihood",
    "overconfidence_error",
    "signed_calibration_error",
    "smooth_calibration_error",
    "spiegelhalter_test",
    "underconfidence_error",
]
