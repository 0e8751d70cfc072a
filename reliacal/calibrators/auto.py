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
from reliacal.calibrators._base import BaseCalibrator, waive_weight_equivalence
from reliacal.calibrators._methods import calibration_methods, make_calibrator
from reliacal.metrics import expected_calibration_error

__all__ = ["AutoCalibrator"]

#: The name the uncalibrated baseline always has in ``cv_results_``.
IDENTITY = "identity"


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
    """The table's candidates that apply to ``n_samples`` rows of ``n_classes`` classes."""
    candidates = {}
    for method in calibration_methods().values():
        if method.candidate is None or not method.candidate.applies(n_samples, n_classes):
            continue
        parameters = dict(method.candidate.parameters)
        if method.seeded:
            parameters["random_state"] = random_state
        # make_calibrator imports the class: torch only once AdaptiveTS is a candidate.
        candidates[method.name] = make_calibrator(method.name, **parameters)
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


#: What each scoring option measures, for the reason of the choice.
_SCORE_NAMES = {
    "neg_log_loss": "NLL",
    "neg_brier_score": "Brier score",
    "neg_ece": "ECE",
}


def _fold_score(scoring, log_probabilities, y_index, sample_weight) -> float:
    """The (weighted) mean score of the rows, negated so that higher is better."""
    rows = np.arange(y_index.shape[0])
    if scoring == "neg_ece":
        # fit refuses sample_weight with this scoring: the metric takes none.
        probabilities = np.exp(log_probabilities)
        labels = np.arange(log_probabilities.shape[1])
        return -float(expected_calibration_error(y_index, probabilities, labels=labels))
    if scoring == "neg_log_loss":
        losses = -log_probabilities[rows, y_index]
    else:
        # The multiclass Brier score: squared distance to the one-hot label, summed over classes.
        squared = np.exp(2.0 * log_probabilities).sum(axis=1)
        losses = squared - 2.0 * np.exp(log_probabilities[rows, y_index]) + 1.0
    return -float(np.average(losses, weights=sample_weight))


def _row_groups(logits: np.ndarray) -> np.ndarray | None:
    """The group of each row, rows with equal logits sharing one; None when all rows differ.

    Groups are numbered in the order of their first row. Rows are compared by a
    64-bit hash of their values (pandas), in one pass and without a sorted copy.
    """
    hashes = pd.util.hash_pandas_object(pd.DataFrame(logits), index=False).to_numpy()
    groups, distinct = pd.factorize(hashes)
    return None if len(distinct) == len(groups) else groups


def _fit(estimator, logits, y_index, sample_weight):
    if sample_weight is None:
        return estimator.fit(logits, y_index)
    return estimator.fit(logits, y_index, sample_weight=sample_weight)


class AutoCalibrator(BaseCalibrator):
    """Choose the calibrator with the best cross-validated score; never worse than none.

    Each candidate, and the uncalibrated model (``"identity"``, always
    compared), is fitted on the training folds of a stratified k-fold split
    of the calibration data and scored on the held-out fold. The candidate
    with the best mean held-out score wins, provided it beats the identity's
    strictly; otherwise the identity is kept, so the choice never makes the
    cross-validated score worse. The winner is then refitted on all rows and
    ``predict_proba`` and ``decision_function`` are its own.

    Rows that repeat exactly (equal logits) stay in one fold: with an
    integer ``cv`` the copies of a row join the fold of its first copy
    (every other row keeps its stratified fold), so a held-out score never
    rewards a candidate for memorising a row that its training part holds
    as well. A splitter given as ``cv`` is used as it is, with a warning
    when it separates copies.

    Parameters
    ----------
    candidates : dict of str to estimator, default=None
        Name -> calibrator (cloned before each fit), tried besides the
        identity. Candidates receive the logits that the AutoCalibrator
        reads from ``X`` (the log-probabilities under ``input="probs"``)
        and the labels as column indices, so they keep their own
        ``input``, ``classes`` and ``backbone`` at the defaults. ``None``:
        the candidates of the table of methods
        (:func:`~reliacal.calibrators.calibration_methods`, in its order):
        ``"temperature"`` (:class:`TemperatureScaling`), ``"vector"``
        (:class:`VectorScaling`), ``"matrix"`` (ODIR :class:`MatrixScaling`,
        ``reg_off_diagonal=reg_bias=1``) when there are at most 20
        classes, ``"svs"`` (:class:`StructuredVectorScaling`) and ``"sms"``
        (:class:`StructuredMatrixScaling`) when there are three classes or
        more (on two they are penalised ``"vector"`` and ``"matrix"``),
        ``"isotonic"`` (:class:`IsotonicCalibration`), ``"ets"``
        (:class:`EnsembleTemperatureScaling`) and ``"adaptive"``
        (:class:`AdaptiveTS`, one member, seeded with ``random_state``)
        from 5000 rows up.
    cv : int or cross-validation splitter, default=5
        Number of stratified folds (shuffled with ``random_state``), or a
        splitter whose ``split(X, y)`` gives the folds.
    scoring : {"neg_log_loss", "neg_brier_score", "neg_ece"}, default="neg_log_loss"
        What the choice optimises (higher is better): minus the mean
        negative log-likelihood, minus the mean multiclass Brier score
        ``sum_k (p_k - 1[y = k])^2``, or minus the expected calibration
        error (:func:`reliacal.metrics.expected_calibration_error`: 15
        equal-width bins of the top-label confidence; no ``sample_weight``).
        NLL, the default, and Brier are proper scores: they reward
        calibration and sharpness together and are smallest for the true
        probabilities, so their choice does not trade accuracy for
        calibration. ECE measures calibration alone: its choice may be less
        sharp, or less accurate (a map that predicts every sample's
        confidence as the average accuracy has an ECE near 0), and on small
        folds the binned estimate is noisy and biased upwards. Choose
        ``"neg_ece"`` when the calibration error is what is reported, and
        check the NLL of its choice; the NLL's choice can in turn raise the
        held-out ECE.
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
        "scoring": [StrOptions(set(_SCORE_NAMES))],
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
        groups = _row_groups(logits)
        if not isinstance(self.cv, numbers.Integral):
            folds = self._split(self.cv, logits, y_index)
            if groups is not None and any(
                np.intersect1d(groups[train], groups[test]).size for train, test in folds
            ):
                warnings.warn(
                    "AutoCalibrator: X repeats rows (equal logits) across the training and "
                    "held-out parts of the cv given, so the cross-validated scores reward "
                    "memorising them (a flexible candidate wins by rote); pass an integer cv, "
                    "whose folds keep the copies of a row together",
                    UserWarning,
                    stacklevel=4,
                )
            return folds
        counts = np.bincount(y_index)
        if counts.max() < self.cv:
            raise ValueError(
                f"cv={self.cv} folds need at least {self.cv} samples of some class, got "
                f"{y_index.shape[0]} sample(s) whose largest class has {counts.max()}: "
                "pass more data or a smaller cv"
            )
        splitter = StratifiedKFold(self.cv, shuffle=True, random_state=self.random_state)
        folds = self._split(splitter, logits, y_index)
        if groups is None:
            return folds
        # Copies of a row join the fold of its first copy; every other row keeps its fold.
        fold_of_row = np.empty(y_index.shape[0], dtype=np.int64)
        for fold, (_, test) in enumerate(folds):
            fold_of_row[test] = fold
        first_rows = np.unique(groups, return_index=True)[1]
        fold_of_row = fold_of_row[first_rows][groups]
        sizes = np.bincount(fold_of_row, minlength=self.cv)
        if sizes.min() == 0:
            raise ValueError(
                f"X holds {first_rows.size} distinct rows (the copies of a row are kept in one "
                f"fold), too few for cv={self.cv} folds: pass more data or a smaller cv"
            )
        return [
            (np.flatnonzero(fold_of_row != fold), np.flatnonzero(fold_of_row == fold))
            for fold in range(self.cv)
        ]

    @staticmethod
    def _split(splitter, logits, y_index) -> list:
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
            if self.scoring == "neg_ece":
                raise ValueError(
                    "scoring='neg_ece' takes no sample_weight (the binned ECE is unweighted): "
                    "use scoring='neg_log_loss' or 'neg_brier_score' with weights"
                )
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
        # The reason states the metric itself (the scores are its negation).
        optimised = f"cross-validated {_SCORE_NAMES[self.scoring]} (scoring={self.scoring!r})"
        if self.best_name_ == IDENTITY:
            self.reason_ = (
                f"no candidate beat the uncalibrated model's {optimised}, "
                f"{-baseline:.6g} over {len(folds)} folds, so the logits are left unchanged"
            )
        else:
            self.reason_ = (
                f"{self.best_name_!r} had the best {optimised}: {-best_score:.6g} against "
                f"{-baseline:.6g} uncalibrated, over {len(folds)} folds"
            )
        self.best_estimator_ = _fit(
            clone(candidates[self.best_name_]), logits, y_index, sample_weight
        )

    def _expected_failed_checks(self) -> dict[str, str]:
        return {
            **super()._expected_failed_checks(),
            **waive_weight_equivalence("the folds"),
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
