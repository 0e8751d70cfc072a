"""Vector and matrix scaling of logits, with the ODIR regulariser of Dirichlet calibration.

Both maps are multinomial logistic regressions on the logits, fitted by
L-BFGS (scipy) from the identity map with analytic gradients in float64:

- vector scaling: ``softmax(w * z + b)``, ``2K`` parameters;
- matrix scaling: ``softmax(W z + b)``, ``K^2 + K`` parameters; on
  log-probabilities (``input="probs"``) this is Dirichlet calibration
  (Kull et al., NeurIPS 2019).

The penalty is ODIR (off-diagonal and intercept regularisation, Kull et
al.): ``lambda / (K (K - 1)) * sum_{i != j} W_ij^2 + mu / K * sum_j b_j^2``,
added to the mean (weighted) negative log-likelihood.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.optimize import minimize
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, ParameterGrid
from sklearn.utils._param_validation import Interval
from threadpoolctl import threadpool_limits

from ..metrics import nll_scorer
from ._base import BaseCalibrator, ConvergenceWarning

__all__ = ["MatrixScaling", "VectorScaling", "tuned_scaling"]

# L-BFGS-B stops by default once an iteration lowers the loss by < 2.2e-9 relative,
# which leaves probabilities ~1e-4 from the optimum along flat directions; stop on
# the gradient (tol) instead, with this only as a floating-point guard.
_FTOL = 64 * np.finfo(np.float64).eps
# Multiply-adds of one (n, K) x (coef) product above which L-BFGS's products run on
# the BLAS thread pool. Below it the pool's start-up and spin-waits cost more than
# they save: on a busy 2-core machine the (5000, 100) x (100, 100) gradient product of
# a 100-class matrix scaling took 13 ms on one thread and 240 ms on two, which made
# that fit take minutes.
_THREADED_PRODUCT = 1 << 31
# Matrix scaling with more parameters than this fraction of the samples overfits
# unless regularised.
_SAMPLES_PER_PARAMETER = 10


def _nll_and_logit_gradient(calibrated, y_index, weights):
    """Mean weighted NLL of ``softmax(calibrated)`` and its gradient in ``calibrated``.

    ``calibrated`` is overwritten (it becomes the gradient). Row sums go through a
    matrix-vector product: numpy's reductions along a short last axis are several
    times slower, and L-BFGS calls this hundreds of times.
    """
    rows = np.arange(calibrated.shape[0])
    row_max = calibrated.max(axis=1)
    true_logits = calibrated[rows, y_index] - row_max
    exponentials = np.subtract(calibrated, row_max[:, None], out=calibrated)
    np.exp(exponentials, out=exponentials)
    row_sums = exponentials @ np.ones(calibrated.shape[1])
    nll = float(weights @ (np.log(row_sums) - true_logits))
    gradient = exponentials
    gradient *= (weights / row_sums)[:, None]
    gradient[rows, y_index] -= weights
    return nll, gradient


class _LogitScaling(BaseCalibrator):
    """One L-BFGS fit for the maps ``softmax(map(coef, z) + b)``; subclasses define the map.

    The parameter vector is ``coef.ravel()`` followed by the ``K`` intercepts, and the
    intercept part of ODIR is the same for every map, so a subclass only supplies:

    - ``_coef_shape(K)``: the shape of ``coef``;
    - ``_initial_coef(K)``: the ``coef`` of the identity map (the starting point);
    - ``_apply_coef(coef, logits)``: ``map(coef, z)`` (also used at predict time);
    - ``_coef_objective(coef, logits, logit_gradient)``: the ``coef`` part of the
      penalty and the gradient of the loss in ``coef``, given the gradient of the
      NLL in the calibrated logits.
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "reg_bias": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
    }

    def _coef_shape(self, n_classes: int) -> tuple[int, ...]:
        raise NotImplementedError

    def _initial_coef(self, n_classes: int) -> np.ndarray:
        raise NotImplementedError

    def _apply_coef(self, coef: np.ndarray, logits: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _coef_objective(self, coef, logits, logit_gradient) -> tuple[float, np.ndarray]:
        raise NotImplementedError

    def _loss(self, parameters, logits, y_index, weights):
        n_classes = logits.shape[1]
        coef = parameters[:-n_classes].reshape(self._coef_shape(n_classes))
        bias = parameters[-n_classes:]
        calibrated = self._apply_coef(coef, logits) + bias
        nll, gradient = _nll_and_logit_gradient(calibrated, y_index, weights)
        coef_penalty, grad_coef = self._coef_objective(coef, logits, gradient)
        bias_weight = self.reg_bias / n_classes
        loss = nll + coef_penalty + bias_weight * float(bias @ bias)
        grad_bias = gradient.sum(axis=0) + 2.0 * bias_weight * bias
        return loss, np.concatenate([grad_coef.ravel(), grad_bias])

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        logits = np.asarray(logits, dtype=np.float64)
        n_samples, n_classes = logits.shape
        if sample_weight is None:
            weights = np.full(n_samples, 1.0 / n_samples)
        else:
            weights = sample_weight / sample_weight.sum()
        initial = np.concatenate([self._initial_coef(n_classes).ravel(), np.zeros(n_classes)])
        # One BLAS thread unless each product is large (see _THREADED_PRODUCT).
        small = n_samples * initial.size < _THREADED_PRODUCT
        with threadpool_limits(limits=1 if small else None, user_api="blas"):
            result = minimize(
                self._loss,
                initial,
                args=(logits, y_index, weights),
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": self.max_iter, "gtol": self.tol, "ftol": _FTOL},
            )
        if not result.success:
            warnings.warn(
                f"{type(self).__name__}: L-BFGS did not converge ({result.message}); "
                "raise max_iter or the regularisation",
                ConvergenceWarning,
                stacklevel=3,
            )
        # Own arrays, not two views of one parameter vector.
        self.coef_ = result.x[:-n_classes].reshape(self._coef_shape(n_classes)).copy()
        self.intercept_ = result.x[-n_classes:].copy()
        self.n_iter_ = int(result.nit)

    def _calibrated_logits(self, features, logits):
        return self._apply_coef(self.coef_, np.asarray(logits, dtype=np.float64)) + self.intercept_


class VectorScaling(_LogitScaling):
    r"""Vector scaling: ``p = softmax(w * z + b)``, one weight and one bias per class.

    Guo, Pleiss, Sun and Weinberger, "On Calibration of Modern Neural
    Networks", ICML 2017 (the extension of temperature scaling with ``2K``
    parameters). Fitted by L-BFGS (scipy, analytic gradient, float64) from
    ``w = 1, b = 0`` on the mean (weighted) NLL plus the intercept part of
    the ODIR penalty of Kull et al. (2019), ``mu / K * sum_j b_j^2`` (the
    off-diagonal part of ODIR is zero for a diagonal map). Unlike
    temperature scaling it can change the predicted class.

    A class absent from the calibration data keeps its column; its
    probability is driven down until L-BFGS stops (``reg_bias`` bounds how
    far).

    Parameters
    ----------
    reg_bias : float, default=0.0
        ``mu`` of the ODIR intercept penalty.
    max_iter : int, default=1000
        Maximum L-BFGS iterations.
    tol : float, default=1e-6
        L-BFGS tolerance on the largest gradient component (``gtol``).
    input : {"logits", "probs"}, default="logits"
        ``"probs"``: ``X`` holds probabilities; their logs are scaled.
    classes : array-like of shape (K,), default=None
        Label of each column of ``X`` (default ``0..K-1``).
    backbone : model, BackboneAdapter or str, default=None
        Calibrate this frozen classifier; ``X`` then holds its raw inputs.
    batch_size : int, default=256
        Backbone batch size.
    device : str or torch.device, default="auto"
        Backbone device.
    mixed_precision : bool, default=False
        Backbone autocast on CUDA.
    memory : joblib.Memory, str or path, default=None
        Cache of the backbone outputs.
    verbose : int, default=0
        Progress output of the backbone pass.
    label_key : str, default="labels"
        Backbone mode: the key of the labels when a Dataset or DataLoader
        yields Hugging Face style mappings (``{"input_ids",
        "attention_mask", "labels"}``, ``{"pixel_values", "labels"}``); the
        other entries go to the model. ``"label"`` suits a ``datasets``
        column read with the default collation.

    Attributes
    ----------
    coef_ : ndarray of shape (K,)
        The weights ``w``.
    intercept_ : ndarray of shape (K,)
        The biases ``b``.
    n_iter_ : int
        L-BFGS iterations.
    classes_ : ndarray of shape (K,)
        Label of each column.
    n_features_in_ : int
        Number of columns of ``X`` (logits mode).

    See Also
    --------
    TemperatureScaling, MatrixScaling

    Notes
    -----
    ``check_estimator`` checks waived by design (listed with their reasons by
    ``_expected_failed_checks()``): ``check_classifiers_train``,
    ``check_estimators_overwrite_params``, ``check_estimators_fit_returns_self``,
    ``check_readonly_memmap_input``, ``check_sample_weights_pandas_series``,
    ``check_sample_weights_not_an_array``, ``check_sample_weights_shape``,
    ``check_sample_weights_not_overwritten`` and
    ``check_classifier_data_not_an_array`` fit on data whose labels are not
    ``0..K-1`` for ``K`` columns, which a calibrator rejects because the
    columns are the classes; ``check_classifiers_classes`` passes string
    labels without ``classes=``, which are never inferred from ``y``;
    ``check_decision_proba_consistency`` expects a 1-D binary decision
    function, while ``decision_function`` returns the ``(n, K)`` calibrated
    logits.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators import VectorScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=600)
    >>> logits = 3.0 * np.eye(3)[y] + rng.normal(size=(600, 3)) + [2.0, 0.0, 0.0]
    >>> vs = VectorScaling().fit(logits, y)
    >>> vs.coef_.shape, vs.intercept_.shape
    ((3,), (3,))
    >>> bool(vs.intercept_[0] < vs.intercept_[1])  # learns to undo the bias of class 0
    True
    """

    def __init__(
        self,
        reg_bias: float = 0.0,
        *,
        max_iter: int = 1000,
        tol: float = 1e-6,
        input: str = "logits",
        classes=None,
        backbone=None,
        batch_size: int = 256,
        device="auto",
        mixed_precision: bool = False,
        memory=None,
        verbose: int = 0,
        label_key: str = "labels",
    ):
        self.reg_bias = reg_bias
        self.max_iter = max_iter
        self.tol = tol
        self.input = input
        self.classes = classes
        self.backbone = backbone
        self.batch_size = batch_size
        self.device = device
        self.mixed_precision = mixed_precision
        self.memory = memory
        self.verbose = verbose
        self.label_key = label_key

    def _coef_shape(self, n_classes):
        return (n_classes,)

    def _initial_coef(self, n_classes):
        return np.ones(n_classes)

    def _apply_coef(self, coef, logits):
        return logits * coef

    def _coef_objective(self, coef, logits, logit_gradient):
        # ODIR's off-diagonal part is zero for a diagonal map: no penalty on w.
        return 0.0, np.einsum("ij,ij->j", logit_gradient, logits)


class MatrixScaling(_LogitScaling):
    r"""Matrix scaling ``p = softmax(W z + b)``; Dirichlet calibration with ``input="probs"``.

    Guo et al. (ICML 2017) fit the full linear map of the logits; Kull,
    Perello-Nieto, Kaengsepp, Silva Filho, Song and Flach ("Beyond
    temperature scaling: obtaining well-calibrated multiclass probabilities
    with Dirichlet calibration", NeurIPS 2019) apply the same map to
    log-probabilities and regularise it with ODIR:

    .. math::

        \mathrm{loss} = \mathrm{NLL} + \frac{\lambda}{K(K-1)} \sum_{i \ne j} W_{ij}^2
        + \frac{\mu}{K} \sum_j b_j^2 .

    Fitted by L-BFGS (scipy, analytic gradients, float64) from ``W = I,
    b = 0``. With ``K^2 + K`` parameters it overfits small calibration sets
    unless regularised: tune ``reg_off_diagonal`` and ``reg_bias`` with
    :func:`tuned_scaling` (a ``GridSearchCV``). Fitting with
    ``reg_off_diagonal=0`` and fewer than ``10 (K^2 + K)`` samples warns
    (``UserWarning``). A class absent from the calibration data keeps its
    column; its probability is driven down until L-BFGS stops.

    Parameters
    ----------
    reg_off_diagonal : float, default=0.0
        ``lambda``, the ODIR penalty on the off-diagonal entries of ``W``.
    reg_bias : float, default=0.0
        ``mu``, the ODIR penalty on the intercepts ``b``.
    max_iter : int, default=1000
        Maximum L-BFGS iterations.
    tol : float, default=1e-6
        L-BFGS tolerance on the largest gradient component (``gtol``).
    input : {"logits", "probs"}, default="logits"
        ``"probs"``: ``X`` holds probabilities; the map acts on their logs
        (Dirichlet calibration).
    classes : array-like of shape (K,), default=None
        Label of each column of ``X`` (default ``0..K-1``).
    backbone : model, BackboneAdapter or str, default=None
        Calibrate this frozen classifier; ``X`` then holds its raw inputs.
    batch_size : int, default=256
        Backbone batch size.
    device : str or torch.device, default="auto"
        Backbone device.
    mixed_precision : bool, default=False
        Backbone autocast on CUDA.
    memory : joblib.Memory, str or path, default=None
        Cache of the backbone outputs.
    verbose : int, default=0
        Progress output of the backbone pass.
    label_key : str, default="labels"
        Backbone mode: the key of the labels when a Dataset or DataLoader
        yields Hugging Face style mappings (``{"input_ids",
        "attention_mask", "labels"}``, ``{"pixel_values", "labels"}``); the
        other entries go to the model. ``"label"`` suits a ``datasets``
        column read with the default collation.

    Attributes
    ----------
    coef_ : ndarray of shape (K, K)
        The matrix ``W`` (calibrated logits are ``z @ coef_.T + intercept_``).
    intercept_ : ndarray of shape (K,)
        The biases ``b``.
    n_iter_ : int
        L-BFGS iterations.
    classes_ : ndarray of shape (K,)
        Label of each column.
    n_features_in_ : int
        Number of columns of ``X`` (logits mode).

    See Also
    --------
    TemperatureScaling, VectorScaling

    Notes
    -----
    ``check_estimator`` checks waived by design (listed with their reasons by
    ``_expected_failed_checks()``): ``check_classifiers_train``,
    ``check_estimators_overwrite_params``, ``check_estimators_fit_returns_self``,
    ``check_readonly_memmap_input``, ``check_sample_weights_pandas_series``,
    ``check_sample_weights_not_an_array``, ``check_sample_weights_shape``,
    ``check_sample_weights_not_overwritten`` and
    ``check_classifier_data_not_an_array`` fit on data whose labels are not
    ``0..K-1`` for ``K`` columns, which a calibrator rejects because the
    columns are the classes; ``check_classifiers_classes`` passes string
    labels without ``classes=``, which are never inferred from ``y``;
    ``check_decision_proba_consistency`` expects a 1-D binary decision
    function, while ``decision_function`` returns the ``(n, K)`` calibrated
    logits.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators import MatrixScaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=600)
    >>> probs = np.full((600, 3), 0.2) + 0.4 * np.eye(3)[y]
    >>> dirichlet = MatrixScaling(reg_off_diagonal=1e-2, reg_bias=1e-2, input="probs")
    >>> dirichlet.fit(probs, y).coef_.shape
    (3, 3)
    >>> dirichlet.predict_proba(probs[:2]).sum(axis=1)
    array([1., 1.])
    """

    _parameter_constraints: dict = {
        **_LogitScaling._parameter_constraints,
        "reg_off_diagonal": [Interval(numbers.Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        reg_off_diagonal: float = 0.0,
        reg_bias: float = 0.0,
        *,
        max_iter: int = 1000,
        tol: float = 1e-6,
        input: str = "logits",
        classes=None,
        backbone=None,
        batch_size: int = 256,
        device="auto",
        mixed_precision: bool = False,
        memory=None,
        verbose: int = 0,
        label_key: str = "labels",
    ):
        self.reg_off_diagonal = reg_off_diagonal
        self.reg_bias = reg_bias
        self.max_iter = max_iter
        self.tol = tol
        self.input = input
        self.classes = classes
        self.backbone = backbone
        self.batch_size = batch_size
        self.device = device
        self.mixed_precision = mixed_precision
        self.memory = memory
        self.verbose = verbose
        self.label_key = label_key

    def _check_fit_inputs(self, features, logits):
        n_samples, n_classes = logits.shape
        n_parameters = n_classes * (n_classes + 1)
        # The K^2 weights are what overfit; the K intercepts alone do not.
        if self.reg_off_diagonal == 0 and n_parameters * _SAMPLES_PER_PARAMETER > n_samples:
            warnings.warn(
                f"MatrixScaling has {n_parameters} parameters (K = {n_classes} classes) for "
                f"{n_samples} samples and no regularisation (reg_off_diagonal=0): it "
                "overfits the calibration set and may not converge; set reg_off_diagonal "
                "and reg_bias, e.g. chosen by tuned_scaling(MatrixScaling()) "
                "(cross-validated NLL)",
                UserWarning,
                stacklevel=4,
            )

    def _coef_shape(self, n_classes):
        return (n_classes, n_classes)

    def _initial_coef(self, n_classes):
        return np.eye(n_classes)

    def _apply_coef(self, coef, logits):
        return logits @ coef.T

    def _coef_objective(self, coef, logits, logit_gradient):
        n_classes = coef.shape[0]
        off_diagonal = coef - np.diag(np.diag(coef))
        off_weight = self.reg_off_diagonal / (n_classes * (n_classes - 1))
        penalty = off_weight * float(np.sum(off_diagonal**2))
        return penalty, logit_gradient.T @ logits + 2.0 * off_weight * off_diagonal


def tuned_scaling(estimator, grid=None, *, values=(0.1, 1.0, 10.0), cv=3, quick=False):
    """Vector or matrix scaling with its regularisation chosen by cross-validated NLL.

    Unregularised vector and matrix scaling overfit a small calibration set
    (a class that the calibration logits separate perfectly gets an unbounded
    weight; matrix scaling has ``K^2 + K`` parameters). This wraps the
    estimator in a ``GridSearchCV`` over its ODIR penalties (Kull et al.,
    NeurIPS 2019), scored by the negative log-likelihood
    (:data:`reliacal.metrics.nll_scorer`) on ``cv`` folds, and refitted on all
    the data with the best values (``best_params_``).

    Parameters
    ----------
    estimator : VectorScaling or MatrixScaling
        The unfitted estimator; its other parameters (``input``, ``classes``,
        ...) are kept.
    grid : dict or list of dict, default=None
        ``GridSearchCV``'s ``param_grid``. ``None``: ``reg_bias`` in
        ``values`` for vector scaling, and ``reg_off_diagonal = reg_bias``
        (tied, as in Kull et al.) in ``values`` for matrix scaling.
    values : sequence of float, default=(0.1, 1.0, 10.0)
        The penalties of the default grid. ODIR divides ``reg_off_diagonal``
        by ``K (K - 1)``, so many classes need larger values (e.g. up to
        ``1000`` for ``K = 100``).
    cv : int or cross-validation generator, default=3
        Folds of the search (stratified for an integer).
    quick : bool, default=False
        Skip the search: return a clone of ``estimator`` set to the middle
        point of the grid (a smoke test).

    Returns
    -------
    GridSearchCV or estimator
        The unfitted search (``quick=False``), or the unfitted estimator with
        the middle grid point (``quick=True``).

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators.scaling import MatrixScaling, tuned_scaling
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=300)
    >>> logits = 3.0 * np.eye(3)[y] + rng.normal(size=(300, 3))
    >>> search = tuned_scaling(MatrixScaling()).fit(logits, y)
    >>> sorted(search.best_params_)
    ['reg_bias', 'reg_off_diagonal']
    >>> search.predict_proba(logits[:2]).shape
    (2, 3)
    >>> tuned_scaling(MatrixScaling(), quick=True).reg_bias
    1.0
    """
    if grid is None:
        if isinstance(estimator, MatrixScaling):
            grid = [{"reg_off_diagonal": [value], "reg_bias": [value]} for value in values]
        elif isinstance(estimator, VectorScaling):
            grid = {"reg_bias": list(values)}
        else:
            raise ValueError(
                f"no default grid for {type(estimator).__name__}; pass grid= "
                "(a GridSearchCV param_grid)"
            )
    if quick:
        candidates = ParameterGrid(grid)
        return clone(estimator).set_params(**candidates[len(candidates) // 2])
    return GridSearchCV(estimator, grid, scoring=nll_scorer, cv=cv)
