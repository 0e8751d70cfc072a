"""What the classic calibrators share: probability output and one-vs-rest maps.

The classic calibrators (Platt, isotonic, beta, histogram binning, ensemble
temperature scaling) output probabilities rather than a logit map, and were
designed for binary problems. Two classes here adapt them to the
:class:`~reliacal.calibrators.BaseCalibrator` contract:

- :class:`ClassicCalibrator` accepts, as every calibrator does, a 1-D
  ``X`` of ``n`` binary scores (see :class:`BaseCalibrator`). ``predict_proba``
  returns the calibrated probabilities as computed (exact zeros included),
  ``input="probs"`` takes logs in float64 whatever the input dtype,
  ``decision_function`` their logs ``log(max(p, tiny))``, ``tiny`` the
  smallest normal float64.
- :class:`OneVsRestCalibrator` fits a binary map per class on the
  one-vs-rest log-odds ``s_k = log p_k - log(1 - p_k)`` of the uncalibrated
  probabilities ``p = softmax(z)`` (for two classes one map, on ``s_1 = z_1 -
  z_0``, and ``p_0 = 1 - p_1``), then divides each row by its sum (a row
  whose maps all give 0 becomes uniform). A map whose calibration targets
  are all 0 (a class without calibration samples) or all 1 is fitted on
  Laplace's rule of succession instead, ``1 / (n + 2)`` or ``(n + 1) / (n +
  2)`` for ``n`` (weighted) samples, with a warning: a probability of exactly
  0 would give every test sample of that class an infinite log-loss.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.utils._param_validation import Interval

from reliacal._docstrings import fill_doc, shared_doc
from reliacal._validation import warn_at_caller
from reliacal.calibrators._base import BaseCalibrator, ConvergenceWarning
from reliacal.calibrators._logistic import LogisticFit

__all__ = [
    "CLASSIC_METHOD_DOCS",
    "CLASSIC_NOTES_DOC",
    "ISOTONIC_EXAMPLES_DOC",
    "ClassicCalibrator",
    "LogisticMapsCalibrator",
    "OneVsRestCalibrator",
    "one_vs_rest_log_odds",
    "succession_targets",
]

_TINY = np.finfo(np.float64).tiny

#: The Notes section (header included) every classic calibrator's docstring
#: takes at its ``{classic_notes}`` line (true of all of them through
#: ClassicCalibrator); a calibrator may add sentences after the line.
CLASSIC_NOTES_DOC = """\
Notes
-----
Input forms: logits ``(n, K)``; probabilities with ``input="probs"``
(their logs are the logits); or 1-D binary scores ``(n,)``, each the
logit (log-odds) of the positive class ``classes_[1]`` (with
``input="probs"``: its probability). ``decision_function`` returns the
log of the calibrated probabilities (``log`` of the smallest normal
float64 for a probability of 0). The ``check_estimator`` checks waived
by design are those of every logit calibrator
(``_expected_failed_checks()`` lists them with reasons)."""

#: The opening of the Examples section (header included) of the isotonic family
#: (isotonic, centred isotonic and Venn-Abers calibration), taken at an
#: ``{isotonic_examples}`` line: one toy calibration set, so that their outputs compare.
ISOTONIC_EXAMPLES_DOC = """\
Examples
--------
Six calibration scores, whose labels are not monotone in them:

>>> import numpy as np
>>> scores = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0])
>>> y = np.array([0, 1, 0, 1, 1, 1])"""

#: The sections the classic calibrators' prediction methods share: a ``{classic_input}``
#: line is their Parameters section (1-D binary scores included).
CLASSIC_METHOD_DOCS = {
    "classic_input": """\
Parameters
----------
X : array-like of shape (n_samples, K) or (n_samples,), Dataset or DataLoader
    Input in the form given to ``fit``."""
}


def one_vs_rest_log_odds(logits: np.ndarray) -> np.ndarray:
    """Return ``log p_k - log(1 - p_k)`` for ``p = softmax(logits)``, float64 ``(n, K)``.

    Computed without forming ``1 - p_k``, which rounds to 0 for a confident
    top class: with ``e = exp(z - max z)`` (so the top entry is 1) the
    complement of a class other than the top one is ``1 + rest - e_k``,
    ``rest`` the sum of the non-top entries, and that of the top class is
    ``rest`` itself.

    Examples
    --------
    >>> import numpy as np
    >>> np.round(one_vs_rest_log_odds(np.array([[0.0, 2.0], [1.0, 1.0]])), 6)
    array([[-2.,  2.],
           [ 0.,  0.]])
    """
    logits = np.asarray(logits, dtype=np.float64)
    rows = np.arange(logits.shape[0])
    top = np.argmax(logits, axis=1)
    shifted = logits - logits[rows, top][:, None]
    exponentials = np.exp(shifted)
    exponentials[rows, top] = 0.0
    rest = exponentials.sum(axis=1)
    complement = (1.0 + rest)[:, None] - exponentials
    complement[rows, top] = rest
    # rest == 0 (every other class underflowed): the top class's odds are beyond float64.
    with np.errstate(divide="ignore"):
        log_complement = np.log(complement)
    log_odds = shifted - log_complement
    return np.clip(log_odds, -np.log(1 / _TINY), np.log(1 / _TINY))


def succession_targets(targets: np.ndarray, sample_weight: np.ndarray | None) -> tuple:
    """``(targets, constant)``: 0/1 targets whose constant columns follow Laplace's rule.

    A column whose (positive-weight) targets are all 0 becomes ``1 / (n + 2)``,
    one whose targets are all 1 becomes ``(n + 1) / (n + 2)``, ``n`` the sum
    of the weights (the number of samples when unweighted), the posterior
    mean of a uniform prior after ``n`` equal outcomes; the others are kept.
    ``constant`` lists the replaced columns. Platt's smoothed targets give
    the same values for such a column.

    Examples
    --------
    >>> import numpy as np
    >>> targets, constant = succession_targets(np.array([[0.0, 1.0], [0.0, 0.0]]), None)
    >>> targets[:, 0], constant
    (array([0.25, 0.25]), [0])
    """
    weights = np.ones(targets.shape[0]) if sample_weight is None else sample_weight
    kept = targets[weights > 0]
    constant = [
        column
        for column in range(targets.shape[1])
        if kept[:, column].min() == kept[:, column].max()
    ]
    if not constant:
        return targets, constant
    n = float(weights.sum())
    targets = np.array(targets, dtype=np.float64)
    for column in constant:
        positive = kept[0, column] > 0.5
        targets[:, column] = (n + 1.0) / (n + 2.0) if positive else 1.0 / (n + 2.0)
    return targets, constant


class ClassicCalibrator(BaseCalibrator):
    """Base of the probability-output calibrators: their logits are log-probabilities.

    Subclasses implement ``_fit_core`` and ``_calibrated_proba(features,
    logits) -> (n, K)`` probabilities.
    """

    def __init_subclass__(cls, **kwargs):
        # Filled before BaseCalibrator's own markers and waived-checks note.
        fragments = {"classic_notes": CLASSIC_NOTES_DOC, "isotonic_examples": ISOTONIC_EXAMPLES_DOC}
        cls.__doc__ = fill_doc(cls.__doc__, fragments)
        super().__init_subclass__(**kwargs)

    def _calibrated_proba(self, features, logits) -> np.ndarray:
        raise NotImplementedError

    def _calibrated_logits(self, features, logits) -> np.ndarray:
        return np.log(np.maximum(self._calibrated_proba(features, logits), _TINY))

    @shared_doc(CLASSIC_METHOD_DOCS)
    def predict_proba(self, X) -> np.ndarray:
        """Return calibrated probabilities (float64, rows summing to 1).

        {classic_input}

        Returns
        -------
        ndarray of shape (n_samples, K)
            Column ``j`` is the probability of ``classes_[j]``; exact zeros stay
            zeros (``decision_function`` clips them to ``log(tiny)``).
        """
        features, logits, _ = self._transform_inputs(X)
        return np.asarray(self._calibrated_proba(features, logits), dtype=np.float64)

    # float64 logs: the maps read log-odds, and float32 logs of probabilities near 1
    # (relative error ~6e-8) would move a score between close isotonic knots.
    _float64_probability_logs = True


class OneVsRestCalibrator(ClassicCalibrator):
    """A binary map per class on the one-vs-rest log-odds, renormalised.

    Subclasses implement ``_fit_maps(scores, targets, sample_weight)`` (scores
    and 0/1 targets of shape ``(n, m)``, one column per map: ``m = 1`` for a
    binary problem, else ``K``) and ``_apply_maps(scores) -> (n, m)``
    probabilities.
    """

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        raise NotImplementedError

    def _apply_maps(self, scores) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def _mapped_scores(logits) -> np.ndarray:
        scores = one_vs_rest_log_odds(logits)
        return scores[:, 1:] if scores.shape[1] == 2 else scores

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        scores = self._mapped_scores(logits)
        n_classes = logits.shape[1]
        targets = np.eye(n_classes)[y_index]
        if n_classes == 2:
            targets = targets[:, 1:]
        targets, constant = succession_targets(targets, sample_weight)
        if constant:
            weights = np.ones(len(y_index)) if sample_weight is None else sample_weight
            counts = np.bincount(y_index, weights=weights, minlength=n_classes)
            warnings.warn(
                f"{type(self).__name__}: no calibration sample of class(es) "
                f"{self.classes_[counts == 0].tolist()}: their one-vs-rest maps give Laplace's "
                "rule of succession, 1/(n + 2) for n calibration samples, instead of a "
                "probability 0 that no test sample of theirs could survive",
                UserWarning,
                stacklevel=4,
            )
        self._fit_maps(scores, targets, sample_weight)

    def _n_maps(self) -> int:
        """Maps fitted: one per class, or one for a binary problem."""
        return 1 if len(self.classes_) == 2 else len(self.classes_)

    def _check_loaded_coefficients(self, *coef_tail: int) -> None:
        """Check the maps' coefficients read from a file: ``coef_`` of shape
        ``(n_maps, *coef_tail)`` and ``intercept_`` of shape ``(n_maps,)``, finite."""
        from reliacal.persistence import check_loaded_array

        check_loaded_array(self, "coef_", (self._n_maps(), *coef_tail))
        check_loaded_array(self, "intercept_", (self._n_maps(),))

    def _check_loaded_lookups(self, points: str, values: str, n_values) -> None:
        """Check the lookup tables read from a file: one sorted, finite table per map.

        ``points`` names the list of sorted 1-D arrays (knots or edges),
        ``values`` the list of their values in ``[0, 1]``, of
        ``n_values(len(points[m]))`` entries each.
        """
        from reliacal.persistence import check_loaded_array, loaded_state_error

        n_maps = self._n_maps()
        for name in (points, values):
            tables = getattr(self, name, None)
            if not isinstance(tables, list) or len(tables) != n_maps:
                raise loaded_state_error(self, name, tables, f"a list of {n_maps} arrays")
        for m, (table, table_values) in enumerate(
            zip(getattr(self, points), getattr(self, values))
        ):
            table = check_loaded_array(
                self, f"{points}[{m}]", (None,), value=table, increasing=True
            )
            check_loaded_array(
                self,
                f"{values}[{m}]",
                (n_values(len(table)),),
                value=table_values,
                minimum=0.0,
                maximum=1.0,
            )

    def _calibrated_proba(self, features, logits) -> np.ndarray:
        mapped = np.clip(self._apply_maps(self._mapped_scores(logits)), 0.0, 1.0)
        if logits.shape[1] == 2:
            return np.column_stack([1.0 - mapped[:, 0], mapped[:, 0]])
        totals = mapped.sum(axis=1, keepdims=True)
        empty = totals[:, 0] == 0
        mapped[empty] = 1.0
        totals[empty] = mapped.shape[1]
        return mapped / totals


class LogisticMapsCalibrator(OneVsRestCalibrator):
    """A one-vs-rest calibrator whose maps are logistic fits by Newton's method.

    Subclasses have a ``max_iter`` parameter (the most Newton steps per map),
    implement ``_fit_map(score, target, raw_weights, weights) -> LogisticFit``
    (one map: ``raw_weights`` the sample weights, ones when unweighted,
    ``weights`` those scaled to sum to 1) and set ``_failure``, the
    warning for maps that did not converge after the class name (formatted
    with ``maps`` and ``max_iter``). ``_fit_maps`` sets ``coef_`` of shape
    ``(m,) + coef.shape``, ``intercept_`` and ``n_iter_``.
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
    }
    _failure = (
        "the logistic fit of map(s) {maps} did not converge in max_iter={max_iter} Newton steps"
    )

    def _fit_map(self, score, target, raw_weights, weights) -> LogisticFit:
        raise NotImplementedError

    def _fit_maps(self, scores, targets, sample_weight) -> None:
        raw_weights = np.ones(scores.shape[0]) if sample_weight is None else sample_weight
        weights = raw_weights / raw_weights.sum()
        fits = [
            self._fit_map(scores[:, column], targets[:, column], raw_weights, weights)
            for column in range(scores.shape[1])
        ]
        not_converged = [column for column, fit in enumerate(fits) if not fit.converged]
        if not_converged:
            failure = self._failure.format(maps=not_converged[:10], max_iter=self.max_iter)
            warn_at_caller(f"{type(self).__name__}: {failure}", ConvergenceWarning)
        self.coef_ = np.array([fit.coef for fit in fits], dtype=np.float64)
        self.intercept_ = np.array([fit.intercept for fit in fits], dtype=np.float64)
        self.n_iter_ = max(fit.n_iter for fit in fits)
