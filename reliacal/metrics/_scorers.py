"""scikit-learn scorers: calibration metrics for ``GridSearchCV(scoring=...)``.

scikit-learn has no public way to register new scoring names, so
``scoring="neg_ece"`` is not offered; pass the scorer objects instead (alone, in a
dict for multi-metric search, or in ``cross_validate``).
"""

from __future__ import annotations

import inspect

from reliacal.metrics._calibration_error import expected_calibration_error
from reliacal.metrics._registry import FUNCTIONS, GREATER_IS_BETTER, describe
from reliacal.metrics._scores import brier_score, negative_log_likelihood

METRICS = FUNCTIONS


def _accepts_labels(metric) -> bool:
    try:
        parameters = inspect.signature(metric).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "labels" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class CalibrationScorer:
    """Callable ``scorer(estimator, X, y)`` built by :func:`make_calibration_scorer`.

    Calls ``estimator.predict_proba(X)`` and returns ``sign * metric(y, proba)``,
    mapping labels to columns through ``estimator.classes_``.

    Examples
    --------
    A calibrator scored on held-out logits, as ``GridSearchCV`` would:

    >>> from reliacal.calibrators import TemperatureScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(400, 3, random_state=0)
    >>> ece_scorer
    make_calibration_scorer(expected_calibration_error, greater_is_better=False)
    >>> calibrator = TemperatureScaling().fit(logits[:200], y[:200])
    >>> bool(ece_scorer(calibrator, logits[200:], y[200:]) <= 0)
    True
    """

    def __init__(self, metric, sign: int, kwargs: dict):
        self._metric = metric
        self._sign = sign
        self._kwargs = kwargs
        self._pass_labels = "labels" not in kwargs and _accepts_labels(metric)

    def __call__(self, estimator, X, y_true) -> float:
        y_prob = estimator.predict_proba(X)
        kwargs = dict(self._kwargs)
        if self._pass_labels and hasattr(estimator, "classes_"):
            kwargs["labels"] = estimator.classes_
        return self._sign * float(self._metric(y_true, y_prob, **kwargs))

    def __repr__(self) -> str:
        name = getattr(self._metric, "__name__", repr(self._metric))
        arguments = "".join(f", {key}={value!r}" for key, value in self._kwargs.items())
        sign = "" if self._sign > 0 else ", greater_is_better=False"
        return f"make_calibration_scorer({name}{sign}{arguments})"


def make_calibration_scorer(metric, *, greater_is_better: bool | None = None, **kwargs):
    """Make a scikit-learn scorer from a metric on ``(y_true, y_prob)``.

    The scorer calls ``predict_proba`` and passes the estimator's ``classes_`` as
    ``labels=`` (so string labels work). Losses are negated so that greater is
    better, as scikit-learn's ``neg_log_loss``: the best ECE is the largest score.

    Parameters
    ----------
    metric : callable or str
        ``metric(y_true, y_prob, **kwargs) -> float``, or the name of a metric
        of the package's table that has a function:

        {names}
    greater_is_better : bool, optional
        Whether larger metric values are better; default: True for accuracy only
        (every other metric here is a loss and is negated).
    **kwargs
        Passed to the metric (for example ``n_bins=10, strategy="quantile"``).

    Returns
    -------
    CalibrationScorer
        A callable ``scorer(estimator, X, y) -> float``.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.model_selection import GridSearchCV
    >>> X, y = load_iris(return_X_y=True)
    >>> adaptive_ece = make_calibration_scorer("ece", strategy="quantile", n_bins=5)
    >>> search = GridSearchCV(
    ...     LogisticRegression(max_iter=1000),
    ...     {"C": [0.01, 1.0]},
    ...     scoring={"ece": adaptive_ece, "nll": nll_scorer},
    ...     refit="nll",
    ...     cv=3,
    ... )
    >>> search.fit(X, y).best_params_
    {'C': 1.0}
    >>> bool(search.cv_results_["mean_test_ece"].max() <= 0)
    True
    """
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; choose one of {sorted(METRICS)}")
        metric = METRICS[metric]
    if not callable(metric):
        raise ValueError(f"metric must be callable or a metric name, got {metric!r}")
    if greater_is_better is None:
        # The public functions wrap the table's definitions (to take Dask collections).
        greater_is_better = inspect.unwrap(metric) in GREATER_IS_BETTER
    return CalibrationScorer(metric, 1 if greater_is_better else -1, kwargs)


# Ready-made scorers: negated top-label ECE (15 uniform bins), log loss and Brier score.
ece_scorer = make_calibration_scorer(expected_calibration_error)
nll_scorer = make_calibration_scorer(negative_log_likelihood)
brier_scorer = make_calibration_scorer(brier_score)


# The names are written from the metric table, so that they cannot drift from it.
make_calibration_scorer.__doc__ = make_calibration_scorer.__doc__.replace(
    "        {names}", describe(FUNCTIONS, indent=8)
)
