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

import contextlib
import numbers
import warnings

import numpy as np
from scipy.optimize import minimize
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, ParameterGrid, StratifiedKFold
from sklearn.utils._param_validation import Interval

from reliacal._docstrings import shared_doc
from reliacal._init_arguments import store_init_arguments
from reliacal._validation import is_torch_tensor
from reliacal.calibrators._base import BaseCalibrator, ConvergenceWarning
from reliacal.calibrators._blas import single_threaded_blas
from reliacal.calibrators._vector_newton import fit_vector_scaling
from reliacal.metrics import nll_scorer

__all__ = ["MatrixScaling", "VectorScaling", "check_matrix_size", "tuned_scaling"]

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
# Memory of a fit per parameter: SciPy's L-BFGS-B keeps a workspace of
# 2 * maxcor + 5 = 25 float64 vectors of the parameters' length (maxcor = 10, its
# default, which the fit uses), and each loss evaluation makes about six more
# (parameters, gradient, W, its off-diagonal part and their products).
_MAXCOR = 10
_BYTES_PER_PARAMETER = 8 * (2 * _MAXCOR + 5 + 6)
# The largest problem L-BFGS-B can address: its workspace holds
# 2 m n + 5 n + 11 m^2 + 8 m float64 values, indexed with 32-bit integers. Matrix
# scaling with 10^4 classes (10^8 parameters, a 2.5e9-element workspace) crashed the
# interpreter with a segmentation fault inside SciPy.
_LBFGS_MAX_PARAMETERS = (2**31 - 1 - 11 * _MAXCOR**2 - 8 * _MAXCOR) // (2 * _MAXCOR + 5)


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
    row_sums = exponentials @ np.ones(calibrated.shape[1], dtype=calibrated.dtype)
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
      NLL in the calibrated logits;

    and may override ``_bias_weight(K)``, the factor of ``sum_j b_j^2`` (ODIR's
    ``reg_bias / K``), ``_parameter_scale`` (a diagonal preconditioner of the
    solver), ``_lbfgs_memory`` (L-BFGS's stored corrections) and ``_rough_start``
    (a cheaper first pass that gives the solver its starting point).
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

    def _bias_weight(self, n_classes: int) -> float:
        """The factor of ``sum_j b_j^2`` in the loss: ODIR's ``mu / K``."""
        return self.reg_bias / n_classes

    def _loss(self, parameters, logits, y_index, weights):
        n_classes = logits.shape[1]
        coef = parameters[:-n_classes].reshape(self._coef_shape(n_classes))
        bias = parameters[-n_classes:]
        # In the logits' precision (float64 but for a float32 first pass, see _rough_start).
        calibrated = self._apply_coef(coef, logits) + bias.astype(logits.dtype, copy=False)
        nll, gradient = _nll_and_logit_gradient(calibrated, y_index, weights)
        coef_penalty, grad_coef = self._coef_objective(coef, logits, gradient)
        bias_weight = self._bias_weight(n_classes)
        loss = nll + coef_penalty + bias_weight * float(bias @ bias)
        grad_bias = gradient.sum(axis=0) + 2.0 * bias_weight * bias
        return loss, np.concatenate([grad_coef.ravel(), grad_bias])

    def _parameter_scale(self, logits, y_index, weights) -> np.ndarray | None:
        """Scales of the parameters for the solver (a diagonal preconditioner), or None.

        L-BFGS then works on ``parameters / scale``, which changes its path but not
        the optimum.
        """
        return None

    def _lbfgs_memory(self, n_parameters: int) -> int:
        """L-BFGS's number of stored corrections (SciPy's ``maxcor``)."""
        return _MAXCOR

    def _rough_start(self, objective, initial, args) -> np.ndarray:
        """The solver's starting point (in its scaled variables): ``initial`` by default."""
        return initial

    def _fit_core(self, features, logits, y_index, sample_weight, *, loss=None) -> None:
        """The L-BFGS fit; ``loss`` replaces ``self._loss`` (same signature) when given."""
        loss = self._loss if loss is None else loss
        logits = np.asarray(logits, dtype=np.float64)
        n_samples, n_classes = logits.shape
        if sample_weight is None:
            weights = np.full(n_samples, 1.0 / n_samples)
        else:
            weights = sample_weight / sample_weight.sum()
        initial = np.concatenate([self._initial_coef(n_classes).ravel(), np.zeros(n_classes)])
        scale = self._parameter_scale(logits, y_index, weights)
        if scale is None:
            objective = loss
        else:
            initial = initial / scale

            def objective(scaled, *args):
                value, gradient = loss(scale * scaled, *args)
                return value, scale * gradient

        # One BLAS thread unless each product is large (see _THREADED_PRODUCT).
        small = n_samples * initial.size < _THREADED_PRODUCT
        with single_threaded_blas() if small else contextlib.nullcontext():
            initial = self._rough_start(objective, initial, (logits, y_index, weights))
            result = minimize(
                objective,
                initial,
                args=(logits, y_index, weights),
                jac=True,
                method="L-BFGS-B",
                options={
                    "maxiter": self.max_iter,
                    "gtol": self.tol,
                    "ftol": _FTOL,
                    "maxcor": self._lbfgs_memory(initial.size),
                },
            )
        if not result.success:
            warnings.warn(
                f"{type(self).__name__}: L-BFGS did not converge ({result.message}); "
                "raise max_iter or the regularisation",
                ConvergenceWarning,
                stacklevel=3,
            )
        parameters = result.x if scale is None else scale * result.x
        # Own arrays, not two views of one parameter vector.
        self.coef_ = parameters[:-n_classes].reshape(self._coef_shape(n_classes)).copy()
        self.intercept_ = parameters[-n_classes:].copy()
        self.n_iter_ = int(result.nit)

    # The fitted map is small: predict_proba moves it to a tensor's device (fit reads
    # the logits on the host).
    _device_predict = True

    def _calibrated_logits(self, features, logits):
        if is_torch_tensor(logits):  # on its device, in float64 as below
            logits = logits.double()
            coef, intercept = (logits.new_tensor(value) for value in (self.coef_, self.intercept_))
            return self._apply_coef(coef, logits) + intercept
        return self._apply_coef(self.coef_, np.asarray(logits, dtype=np.float64)) + self.intercept_

    def _torch_map(self):
        from reliacal.export import LinearLogitMap

        return LinearLogitMap(self.coef_, self.intercept_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            from reliacal.persistence import check_loaded_array

            n_classes = len(self.classes_)
            check_loaded_array(self, "coef_", self._coef_shape(n_classes))
            check_loaded_array(self, "intercept_", (n_classes,))


#: The docs of what every _LogitScaling subclass shares: the L-BFGS settings and results.
_LBFGS_DOCS = {
    "map_on_device": """\
A torch tensor of logits given to ``predict_proba`` is calibrated on its device
(the fitted map moves there; the result is a tensor of the logits' float dtype);
``fit`` reads it on the host.""",
    "lbfgs_parameters": """\
max_iter : int, default=1000
    Maximum L-BFGS iterations.
tol : float, default=1e-6
    L-BFGS tolerance on the largest gradient component (``gtol``).""",
    "lbfgs_attributes": """\
intercept_ : ndarray of shape (K,)
    The biases ``b``.
n_iter_ : int
    L-BFGS iterations.""",
}


class _DiagonalMap:
    """A weight per class, ``z_k -> w_k z_k``: the map of the vector scalings."""

    def _coef_shape(self, n_classes):
        return (n_classes,)

    def _initial_coef(self, n_classes):
        return np.ones(n_classes)

    def _apply_coef(self, coef, logits):
        return logits * coef


class _FullMap:
    """A K x K weight matrix, ``z -> W z``: the map of the matrix scalings."""

    def _coef_shape(self, n_classes):
        return (n_classes, n_classes)

    def _initial_coef(self, n_classes):
        return np.eye(n_classes)

    def _apply_coef(self, coef, logits):
        return logits @ coef.T


#: The constraints of the parameters that the matrix scalings add: the off-diagonal
#: penalty and the largest number of parameters a fit may allocate.
_FULL_MAP_CONSTRAINTS = {
    "reg_off_diagonal": [Interval(numbers.Real, 0, None, closed="left")],
    "max_parameters": [Interval(numbers.Integral, 1, _LBFGS_MAX_PARAMETERS, closed="both")],
}


@shared_doc(_LBFGS_DOCS)
class VectorScaling(_DiagonalMap, _LogitScaling):
    r"""Vector scaling: ``p = softmax(w * z + b)``, one weight and one bias per class.

    Guo, Pleiss, Sun and Weinberger, "On Calibration of Modern Neural
    Networks", ICML 2017 (the extension of temperature scaling with ``2K``
    parameters). Fitted by Newton-type steps (float64, one pass over the
    logits a step) from the NLL-optimal temperature, ``w = 1 / T, b = 0``, of
    a strided subset of each class's rows (each step minimises that subset's
    loss corrected to the pass's gradient and Hessian; plain Newton steps from
    the temperature of all the rows without a subset), and by
    L-BFGS (scipy) from ``w = 1, b = 0`` where the optimum is not finite, on
    the mean (weighted) NLL plus the intercept part of
    the ODIR penalty of Kull et al. (2019), ``mu / K * sum_j b_j^2`` (the
    off-diagonal part of ODIR is zero for a diagonal map). Unlike
    temperature scaling it can change the predicted class.

    A class absent from the calibration data keeps its column; its
    probability is driven down until L-BFGS stops (``reg_bias`` bounds how
    far).

    {map_on_device}

    Parameters
    ----------
    reg_bias : float, default=0.0
        ``mu`` of the ODIR intercept penalty.
    {lbfgs_parameters}
    {base_parameters}

    Attributes
    ----------
    coef_ : ndarray of shape (K,)
        The weights ``w``; 1 for a column that is zero in the fit data (the
        first of 1-D binary scores), whose weight changes nothing.
    {lbfgs_attributes}
    n_passes_ : int
        Passes over the logits of the fit (Newton's method, and the NLL-optimal
        temperature's passes where it starts from that; L-BFGS's loss
        evaluations where it takes over); ``n_iter_`` then counts Newton steps.
    subset_passes_ : float
        Reads of strided subsets of the rows, in units of the logit matrix's
        size: the subset that gives the Newton steps their start and their
        model, or above 256 classes only the temperature solver's subset.
    {base_attributes}

    See Also
    --------
    TemperatureScaling : one weight shared by the classes and no bias.
    MatrixScaling : a full weight matrix (Dirichlet calibration on probabilities).
    StructuredVectorScaling : this map on preprocessed logits, pulled towards temperature scaling.

    Examples
    --------
    >>> from reliacal.calibrators import VectorScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(600, 3, bias=[2.0, 0.0, 0.0], random_state=0)
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
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _coef_objective(self, coef, logits, logit_gradient):
        # ODIR's off-diagonal part is zero for a diagonal map: no penalty on w.
        return 0.0, np.einsum("ij,ij->j", logit_gradient, logits)

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        # Newton's method reaches L-BFGS's optimum in a few passes over the logits; the
        # shared L-BFGS fit (its passes counted) takes over wherever Newton's method fails.
        fit = fit_vector_scaling(
            logits,
            y_index,
            sample_weight,
            bias_weight=self._bias_weight(logits.shape[1]),
            tol=self.tol,
            max_iter=self.max_iter,
        )
        if fit.solution is not None:
            self.coef_, self.intercept_ = fit.solution.coef, fit.solution.intercept
            self.n_iter_, self.n_passes_ = fit.solution.n_iter, fit.n_passes
            self.subset_passes_ = fit.subset_passes
            # The weight of an all-zero column (the first of 1-D binary scores) changes
            # nothing: keep it at the identity's 1, where L-BFGS (whose gradient in it
            # is zero) leaves it, rather than at Newton's start. The first pass found them.
            zero_columns = fit.zero_columns
            self.coef_[zero_columns] = self._initial_coef(logits.shape[1])[zero_columns]
            return
        evaluations = 0

        def counted_loss(*args):
            nonlocal evaluations
            evaluations += 1
            return self._loss(*args)

        super()._fit_core(features, logits, y_index, sample_weight, loss=counted_loss)
        self.n_passes_ = fit.n_passes + evaluations
        self.subset_passes_ = fit.subset_passes


def check_matrix_size(n_classes: int, max_parameters: int = 10_000_000) -> None:
    """Refuse matrix scaling of ``n_classes`` classes beyond ``max_parameters`` (``K^2 + K``).

    Called by :meth:`MatrixScaling.fit` before anything is allocated, and by
    the command before it searches penalties (whose folds fail in other ways
    when thousands of classes have few rows each).

    Raises
    ------
    ValueError
        Naming the parameter count, the memory a fit would take and the
        alternatives.

    Examples
    --------
    >>> check_matrix_size(100)
    >>> check_matrix_size(10_000)
    Traceback (most recent call last):
    ...
    ValueError: MatrixScaling with K = 10000 classes has 100,010,000 parameters ...
    """
    n_parameters = n_classes * (n_classes + 1)
    if n_parameters > max_parameters:
        raise ValueError(
            f"MatrixScaling with K = {n_classes} classes has {n_parameters:,} parameters "
            f"(K^2 + K), more than max_parameters={max_parameters:,}; the fit would "
            f"need about {n_parameters * _BYTES_PER_PARAMETER / 1e9:.3g} GB. Use "
            "VectorScaling (2K parameters) or TemperatureScaling (one), or raise "
            f"max_parameters if the memory is there (at most {_LBFGS_MAX_PARAMETERS:,}, "
            "what SciPy's L-BFGS-B can address)"
        )


@shared_doc(_LBFGS_DOCS)
class MatrixScaling(_FullMap, _LogitScaling):
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

    {map_on_device}

    Parameters
    ----------
    reg_off_diagonal : float, default=0.0
        ``lambda``, the ODIR penalty on the off-diagonal entries of ``W``.
    reg_bias : float, default=0.0
        ``mu``, the ODIR penalty on the intercepts ``b``.
    {lbfgs_parameters}
    max_parameters : int, default=10_000_000
        Largest ``K^2 + K`` that ``fit`` accepts (``K <= 3161`` by default);
        more classes raise a ``ValueError`` before anything is allocated. A
        fit holds about 250 bytes per parameter (L-BFGS keeps 25 vectors of
        them): 2.5 GB at the default, 25 GB for ``K = 10,000``. At most
        85,899,298: SciPy's L-BFGS-B cannot address more.
    {base_parameters}

    Attributes
    ----------
    coef_ : ndarray of shape (K, K)
        The matrix ``W`` (calibrated logits are ``z @ coef_.T + intercept_``).
    {lbfgs_attributes}
    {base_attributes}

    See Also
    --------
    VectorScaling : the diagonal special case, ``2K`` parameters.
    StructuredMatrixScaling : this map on preprocessed logits, with size-scaled ridge penalties.

    Examples
    --------
    >>> from scipy.special import softmax
    >>> from reliacal.calibrators import MatrixScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(600, 3, random_state=0)
    >>> probs = softmax(logits, axis=1)  # e.g. a model that outputs probabilities
    >>> dirichlet = MatrixScaling(reg_off_diagonal=1e-2, reg_bias=1e-2, input="probs")
    >>> dirichlet.fit(probs, y).coef_.shape
    (3, 3)
    >>> dirichlet.predict_proba(probs[:2]).sum(axis=1)
    array([1., 1.])
    """

    _parameter_constraints: dict = {**_LogitScaling._parameter_constraints, **_FULL_MAP_CONSTRAINTS}

    def __init__(
        self,
        reg_off_diagonal: float = 0.0,
        reg_bias: float = 0.0,
        *,
        max_iter: int = 1000,
        tol: float = 1e-6,
        max_parameters: int = 10_000_000,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _check_fit_inputs(self, features, logits):
        n_samples, n_classes = logits.shape
        check_matrix_size(n_classes, self.max_parameters)
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

    def _coef_objective(self, coef, logits, logit_gradient):
        n_classes = coef.shape[0]
        off_diagonal = coef - np.diag(np.diag(coef))
        off_weight = self.reg_off_diagonal / (n_classes * (n_classes - 1))
        penalty = off_weight * float(np.sum(off_diagonal**2))
        return penalty, logit_gradient.T @ logits + 2.0 * off_weight * off_diagonal


class _PenaltyFolds(StratifiedKFold):
    """The folds of a penalty search: scikit-learn's, with a message that says what is missing."""

    def split(self, X, y, groups=None):
        counts = np.unique(np.asarray(y), return_counts=True)[1]
        if counts.max() < self.n_splits:
            raise ValueError(
                f"choosing the regularisation by {self.n_splits}-fold cross-validated NLL "
                f"needs at least {self.n_splits} samples of some class, got {len(y)} "
                f"sample(s) whose largest class has {counts.max()}: pass more data, or give "
                "the penalties (reg_bias, reg_off_diagonal; --reg-bias, --reg-off-diagonal "
                "in the command)"
            )
        return super().split(X, y, groups)


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
    >>> from reliacal.calibrators.scaling import MatrixScaling, tuned_scaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(300, 3, random_state=0)
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
    if isinstance(cv, numbers.Integral):
        # GridSearchCV's own folds for an integer (unshuffled stratified k-fold), checked first.
        cv = _PenaltyFolds(cv)
    return GridSearchCV(estimator, grid, scoring=nll_scorer, cv=cv)
