"""Automatic choice of a calibrator by cross-validated proper score."""

from __future__ import annotations

import numbers
import time
import warnings

import numpy as np
import pandas as pd
from scipy.special import log_softmax
from sklearn.base import clone
from sklearn.model_selection import StratifiedKFold
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import has_fit_parameter

from reliacal._init_arguments import store_init_arguments
from reliacal.calibrators._base import BaseCalibrator

__all__ = ["AutoCalibrator"]

#: The name the uncalibrated baseline always has in ``cv_results_``.
IDENTITY = "identity"

# Default candidates that only pay off with enough data or few classes.
_MAX_CLASSES_FOR_MATRIX = 20
_MIN_ROWS_FOR_ADAPTIVE = 5000


class _Identity(BaseCalibrator):
    """The uncalibrated model: the logits unchanged (the baseline of AutoCalibrator)."""

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        return None

    def _calibrated_logits(self, features, logits) -> np.ndarray:
        return logits

    def _torch_map(self):
        from reliacal.export import IdentityMap

        return IdentityMap()


def _default_candidates(n_samples: int, n_classes: int, random_state) -> dict:
    from reliacal.calibrators import (
        EnsembleTemperatureScaling,
        IsotonicCalibration,
        MatrixScaling,
        TemperatureScaling,
        VectorScaling,
    )

    candidates = {
        "temperature": TemperatureScaling(),
        "vector": VectorScaling(),
        "ets": EnsembleTemperatureScaling(),
        "isotonic": IsotonicCalibration(),
    }
    if n_classes <= _MAX_CLASSES_FOR_MATRIX:
        # ODIR (Kull et al. 2019): the off-diagonal and bias penalties keep the K^2
        # parameters from over-fitting a small calibration split.
        candidates["matrix"] = MatrixScaling(reg_off_diagonal=1.0, reg_bias=1.0)
    if n_samples >= _MIN_ROWS_FOR_ADAPTIVE:
        from reliacal.calibrators.adaptive import (
            AdaptiveTS,  # imports torch: only when it is a candidate
        )

        candidates["adaptive"] = AdaptiveTS(n_members=1, random_state=random_state)
    return candidates


def _check_candidates(candidates) -> dict:
    if not isinstance(candidates, dict) or not candidates:
        raise ValueError(
            "candidates must be None or a non-empty dict mapping names to calibrators, "
            f"got {type(candidates).__name__}"
        )
    for name, estimator in candidates.items():
        if not isinstance(name, str):
            raise ValueError(f"candidate names must be strings, got {name!r}")
        if name == IDENTITY:
            raise ValueError(
                f"the candidate name {IDENTITY!r} is reserved for the uncalibrated baseline, "
                "which AutoCalibrator always compares against; rename the candidate"
            )
        if not (hasattr(estimator, "fit") and hasattr(estimator, "predict_proba")):
            raise ValueError(
                f"candidate {name!r} must be an estimator with fit and predict_proba, "
                f"got {type(estimator).__name__}"
            )
        params = estimator.get_params(deep=False) if hasattr(estimator, "get_params") else {}
        # The AutoCalibrator reads X itself: candidates get its logits and column indices.
        for parameter, default in (("input", "logits"), ("classes", None), ("backbone", None)):
            value = params.get(parameter, default)
            if not (value is None if default is None else value == default):
                raise ValueError(
                    f"candidate {name!r} has {parameter}={value!r}; candidates receive the "
                    f"logits and column indices that AutoCalibrator reads from X: set "
                    f"{parameter} on the AutoCalibrator and leave it at its default on the "
                    "candidates"
                )
    return dict(candidates)


def _log_probabilities(estimator, logits: np.ndarray) -> np.ndarray:
    if isinstance(estimator, BaseCalibrator):
        return log_softmax(estimator.decision_function(logits), axis=1)
    probabilities = np.asarray(estimator.predict_proba(logits), dtype=np.float64)
    if probabilities.shape != logits.shape:
        raise ValueError(
            f"{type(estimator).__name__}.predict_proba returned shape {probabilities.shape}, "
            f"expected {logits.shape} (one column per class)"
        )
    return np.log(np.maximum(probabilities, np.finfo(np.float64).tiny))


def _fold_score(scoring, log_probabilities, y_index, sample_weight) -> float:
    """The (weighted) mean proper score of the rows, negated so that higher is better."""
    rows = np.arange(y_index.shape[0])
    if scoring == "neg_log_loss":
        losses = -log_probabilities[rows, y_index]
    else:
        # The multiclass Brier score: squared distance to the one-hot label, summed over classes.
        squared = np.exp(2.0 * log_probabilities).sum(axis=1)
        losses = squared - 2.0 * np.exp(log_probabilities[rows, y_index]) + 1.0
    return -float(np.average(losses, weights=sample_weight))


def _fit(estimator, logits, y_index, sample_weight):
    if sample_weight is None:
        return estimator.fit(logits, y_index)
    return estimator.fit(logits, y_index, sample_weight=sample_weight)


class AutoCalibrator(BaseCalibrator):
    """Choose the calibrator with the best cross-validated proper score; never worse than none.

    Each candidate, and the uncalibrated model (``"identity"``, always
    compared), is fitted on the training folds of a stratified k-fold split
    of the calibration data and scored on the held-out fold. The candidate
    with the best mean held-out score wins, provided it beats the identity's
    strictly; otherwise the identity is kept, so the choice never makes the
    cross-validated score worse. The winner is then refitted on all rows and
    ``predict_proba`` and ``decision_function`` are its own.

    Parameters
    ----------
    candidates : dict of str to estimator, default=None
        Name -> calibrator (cloned before each fit), tried besides the
        identity. Candidates receive the logits that the AutoCalibrator
        reads from ``X`` (the log-probabilities under ``input="probs"``)
        and the labels as column indices, so they keep their own
        ``input``, ``classes`` and ``backbone`` at the defaults. ``None``:
        ``"temperature"`` (:class:`TemperatureScaling`), ``"vector"``
        (:class:`VectorScaling`), ``"ets"``
        (:class:`EnsembleTemperatureScaling`), ``"isotonic"``
        (:class:`IsotonicCalibration`), ``"matrix"`` (ODIR
        :class:`MatrixScaling`, ``reg_off_diagonal=reg_bias=1``) when there
        are at most 20 classes, and ``"adaptive"`` (:class:`AdaptiveTS`,
        one member) from 5000 rows up.
    cv : int or cross-validation splitter, default=5
        Number of stratified folds (shuffled with ``random_state``), or a
        splitter whose ``split(X, y)`` gives the folds.
    scoring : {"neg_log_loss", "neg_brier_score"}, default="neg_log_loss"
        The proper score (higher is better): minus the mean negative
        log-likelihood, or minus the mean multiclass Brier score
        ``sum_k (p_k - 1[y = k])^2``.
    random_state : int, RandomState instance or None, default=0
        Shuffling of the folds, and the seed of the default AdaptiveTS.
    {base_parameters}

    Attributes
    ----------
    best_name_ : str
        Name of the chosen calibrator (``"identity"`` when none beat it).
    best_estimator_ : estimator
        The chosen calibrator, refitted on all rows.
    cv_results_ : pandas.DataFrame
        One row per candidate (the identity first): ``candidate``,
        ``mean_score``, ``std_score``, ``split{i}_score`` for each fold,
        ``mean_fit_time`` (seconds) and ``rank``. A candidate whose fit
        failed on a fold has NaN scores (with a warning) and cannot win.
    reason_ : str
        One sentence on why ``best_name_`` was chosen.
    {base_attributes}

    See Also
    --------
    TemperatureScaling : the usual winner on over-confident networks.

    Examples
    --------
    >>> from reliacal.calibrators import AutoCalibrator, TemperatureScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(600, 3, scale=1.0, random_state=0)
    >>> logits = 5.0 * logits  # five times too sharp: over-confident
    >>> auto = AutoCalibrator(candidates={"temperature": TemperatureScaling()}).fit(logits, y)
    >>> auto.best_name_
    'temperature'
    >>> list(auto.cv_results_["candidate"])
    ['identity', 'temperature']
    >>> auto.predict_proba(logits[:1]).shape
    (1, 3)
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "candidates": [dict, None],
        "cv": [
            Interval(numbers.Integral, 2, None, closed="left"),
            HasMethods(["split", "get_n_splits"]),
        ],
        "scoring": [StrOptions({"neg_log_loss", "neg_brier_score"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        candidates: dict | None = None,
        cv=5,
        scoring: str = "neg_log_loss",
        *,
        random_state=0,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _folds(self, logits, y_index) -> list:
        if isinstance(self.cv, numbers.Integral):
            counts = np.bincount(y_index)
            if counts[counts > 0].max() < self.cv:
                raise ValueError(
                    f"cv={self.cv} folds need at least {self.cv} samples of some class, got "
                    f"{y_index.shape[0]} sample(s) whose largest class has {counts.max()}: "
                    "pass more data or a smaller cv"
                )
            splitter = StratifiedKFold(self.cv, shuffle=True, random_state=self.random_state)
        else:
            splitter = self.cv
        with warnings.catch_warnings():
            # A class rarer than the number of folds is fine here: the columns are the
            # classes, so a training fold without it still has its logit column.
            warnings.filterwarnings(
                "ignore", message="The least populated class", category=UserWarning
            )
            return list(splitter.split(logits, y_index))

    def _cross_validate(self, name, prototype, logits, y_index, sample_weight, folds):
        scores, fit_times = [], []
        for fold, (train, test) in enumerate(folds):
            weights = None if sample_weight is None else sample_weight[train]
            start = time.perf_counter()
            try:
                estimator = _fit(clone(prototype), logits[train], y_index[train], weights)
                fit_times.append(time.perf_counter() - start)
                log_probabilities = _log_probabilities(estimator, logits[test])
            except Exception as error:  # noqa: BLE001 - one failing candidate must not stop the others
                if name == IDENTITY:
                    raise
                warnings.warn(
                    f"AutoCalibrator: candidate {name!r} failed on fold {fold} "
                    f"({type(error).__name__}: {error}); it is left out of the choice",
                    UserWarning,
                    stacklevel=4,
                )
                return [np.nan] * len(folds), np.nan
            test_weights = None if sample_weight is None else sample_weight[test]
            scores.append(_fold_score(self.scoring, log_probabilities, y_index[test], test_weights))
        return scores, float(np.mean(fit_times))

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        n_samples, n_classes = logits.shape
        if self.candidates is None:
            candidates = _default_candidates(n_samples, n_classes, self.random_state)
        else:
            candidates = _check_candidates(self.candidates)
        candidates = {IDENTITY: _Identity(), **candidates}
        if sample_weight is not None:
            # A configuration error, not a failing fit: raise before any fold is fitted.
            for name, estimator in candidates.items():
                if not has_fit_parameter(estimator, "sample_weight"):
                    raise ValueError(
                        f"sample_weight was given but candidate {name!r} "
                        f"({type(estimator).__name__}) does not take it in fit"
                    )
        folds = self._folds(logits, y_index)
        rows = []
        for name, prototype in candidates.items():
            scores, fit_time = self._cross_validate(
                name, prototype, logits, y_index, sample_weight, folds
            )
            rows.append(
                {
                    "candidate": name,
                    "mean_score": float(np.mean(scores)),
                    "std_score": float(np.std(scores)),
                    **{f"split{fold}_score": score for fold, score in enumerate(scores)},
                    "mean_fit_time": fit_time,
                }
            )
        results = pd.DataFrame(rows)
        results["rank"] = results["mean_score"].rank(ascending=False, method="min").astype("Int64")
        self.cv_results_ = results

        baseline = float(results["mean_score"].iloc[0])
        best = int(results["mean_score"].fillna(-np.inf).to_numpy().argmax())
        best_score = float(results["mean_score"].iloc[best])
        # argmax returns the first maximum: a tie with the identity keeps the identity.
        self.best_name_ = str(results["candidate"].iloc[best])
        if self.best_name_ == IDENTITY:
            self.reason_ = (
                f"no candidate beat the uncalibrated model's cross-validated {self.scoring} "
                f"({baseline:.6g} over {len(folds)} folds), so the logits are left unchanged"
            )
        else:
            self.reason_ = (
                f"{self.best_name_!r} had the best cross-validated {self.scoring} "
                f"({best_score:.6g} against {baseline:.6g} uncalibrated, over {len(folds)} "
                "folds)"
            )
        self.best_estimator_ = _fit(
            clone(candidates[self.best_name_]), logits, y_index, sample_weight
        )

    def _expected_failed_checks(self) -> dict[str, str]:
        return {
            **super()._expected_failed_checks(),
            "check_sample_weight_equivalence_on_dense_data": (
                "the folds split rows: the copies of a repeated row can fall in different "
                "folds, which a sample weight cannot reproduce"
            ),
            "check_classifiers_one_label": (
                "the identity, always a candidate, and temperature scaling keep the argmax of "
                "the logits, so the choice may not learn to predict the single class seen in fit"
            ),
        }

    def _torch_map(self):
        torch_map = getattr(self.best_estimator_, "_torch_map", None)
        if torch_map is None:
            raise ValueError(
                f"AutoCalibrator chose {self.best_name_!r}, a "
                f"{type(self.best_estimator_).__name__}, which has no torch module"
            )
        return torch_map()

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            from reliacal.persistence import loaded_state_error

            best = getattr(self, "best_estimator_", None)
            if not hasattr(best, "predict_proba"):
                raise loaded_state_error(self, "best_estimator_", best, "a fitted estimator")
            if not isinstance(getattr(self, "best_name_", None), str):
                raise loaded_state_error(
                    self, "best_name_", getattr(self, "best_name_", None), "a candidate's name"
                )
            inner = getattr(best, "classes_", None)
            if inner is not None and len(inner) != len(self.classes_):
                raise loaded_state_error(
                    self, "best_estimator_", best, f"an estimator of {len(self.classes_)} classes"
                )

    def _calibrated_logits(self, features, logits) -> np.ndarray:
        if isinstance(self.best_estimator_, BaseCalibrator):
            return self.best_estimator_.decision_function(logits)
        return _log_probabilities(self.best_estimator_, logits)
