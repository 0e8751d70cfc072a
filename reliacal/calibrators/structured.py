"""Structured vector and matrix scaling (Berta, Holzmüller, Jordan and Bach, AISTATS 2026).

Both maps are members of the logit-scaling family of :mod:`.scaling` (one
L-BFGS fit of a multinomial logistic regression on the logits, analytic
gradients in float64) with two changes that the paper calls robust
preprocessing and structured regularisation:

- the logits are first temperature-scaled (:class:`TemperatureScaling`,
  the exact NLL optimum), mixed with the uniform distribution and taken
  back to log-probabilities,
  ``z' = log((1 - eps) softmax(z / T) + eps / K)`` with ``eps = 1 / (n + 1)``,
  which bounds every input logit below by ``log(eps / K)``;
- the map ``softmax(W z' + b)`` starts at the identity ``W = I, b = 0`` and
  its deviation from it is penalised by ridge terms whose strengths grow
  with the number of parameters of each kind and shrink with the number of
  samples ``n``:
  ``lambda_b K^rho / n^tau ||b||^2 + lambda_d K^rho / n^tau ||diag(W) - 1||^2
  + lambda_o (K (K - 1))^rho / n^tau ||W - diag(W)||^2``.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_softmax, softmax
from sklearn.utils._param_validation import Interval

from reliacal._docstrings import shared_doc
from reliacal._init_arguments import store_init_arguments
from reliacal._validation import is_torch_tensor
from reliacal.calibrators._checks import warn_uninformative
from reliacal.calibrators.scaling import (
    _FULL_MAP_CONSTRAINTS,
    _LBFGS_DOCS,
    _DiagonalMap,
    _FullMap,
    _LogitScaling,
    check_matrix_size,
)
from reliacal.calibrators.temperature import TemperatureScaling, _check_loaded_temperature

__all__ = ["StructuredMatrixScaling", "StructuredVectorScaling"]

# Problems with at least this many multiply-adds per product (rows x parameters) get the
# float32 first pass of _rough_start; smaller ones solve fast enough in float64 alone.
_ROUGH_PASS_WORK = 10_000_000
# The tolerance of that pass on the scaled gradient: float32 losses resolve about 1e-7,
# so the pass stops well before its line searches fail.
_ROUGH_TOL = 3e-4

_STRUCTURED_DOCS = {
    **_LBFGS_DOCS,
    "reference": """\
Berta, Holzmüller, Jordan and Bach, "Structured Matrix Scaling for
Multi-Class Calibration", AISTATS 2026 (arXiv 2511.03685).""",
    "structured_parameters": """\
reg_bias : float, default=1.0
    ``lambda_b``, the ridge strength on the intercepts before scaling by
    ``K^rho / n^tau``. The default (1 for every strength, ``rho = tau = 1``)
    is the paper's, kept as a fixed default rather than cross-validated:
    the scaling by ``K`` and ``n`` is what adapts it to each problem.
reg_diagonal : float, default=1.0
    ``lambda_d``, the ridge strength on ``diag(W) - 1``, scaled by
    ``K^rho / n^tau``.""",
    "structured_exponents": """\
class_exponent : float, default=1.0
    ``rho``: each strength is multiplied by its parameter count to this
    power (``K`` for the intercepts and the diagonal, ``K (K - 1)`` for the
    off-diagonal entries), so that more parameters are shrunk harder.
sample_exponent : float, default=1.0
    ``tau``: each strength is divided by ``n^tau``, so that the penalty
    fades as the calibration set grows (``n`` is the sum of the sample
    weights, the number of rows without them).""",
    "structured_lbfgs": """\
max_iter : int, default=1000
    Maximum L-BFGS iterations.
tol : float, default=1e-5
    L-BFGS tolerance on the largest component of the scaled gradient
    (``gtol``; see the solver note above), the tolerance probmetrics'
    solver uses: tighter changes the fitted probabilities by far less than
    the sampling noise of any calibration set.""",
    "solver_note": """\
L-BFGS works on the parameters divided by the inverse square root of the
loss's Hessian diagonal at the identity map (Jacobi preconditioning, which
changes the path and not the optimum), so ``tol`` bounds that scaled
gradient.""",
    "structured_attributes": """\
temperature_ : float
    ``T`` of the temperature-scaling preprocessing.
mixture_weight_ : float
    ``eps = 1 / (n + 1)``, the weight of the uniform distribution in the
    preprocessing.
penalty_weights_ : ndarray of shape (3,)
    The factors of ``||b||^2``, ``||diag(W) - 1||^2`` and
    ``||W - diag(W)||^2`` in the loss (``lambda K^rho / n^tau``).""",
}


class _StructuredScaling(_LogitScaling):
    """The preprocessing and the size-scaled ridge strengths that SVS and SMS share."""

    _parameter_constraints: dict = {
        **_LogitScaling._parameter_constraints,
        "reg_diagonal": [Interval(numbers.Real, 0, None, closed="left")],
        "class_exponent": [Interval(numbers.Real, None, None, closed="neither")],
        "sample_exponent": [Interval(numbers.Real, None, None, closed="neither")],
    }

    def _n_penalised(self, n_classes: int) -> tuple[int, int, int]:
        """Parameter counts of the intercepts, the diagonal and the off-diagonal."""
        raise NotImplementedError

    def _strengths(self) -> tuple[float, float, float]:
        raise NotImplementedError

    def _preprocess(self, logits: np.ndarray) -> np.ndarray:
        """``log((1 - eps) softmax(z / T) + eps / K)``, computed from log-probabilities.

        A torch tensor (``predict_proba``'s) is computed on its device.
        """
        n_classes = logits.shape[1]
        eps = self.mixture_weight_
        if is_torch_tensor(logits):
            scaled = (logits.double() / self.temperature_).log_softmax(dim=1)
            floor = scaled.new_tensor(np.log(eps / n_classes))
            return (np.log1p(-eps) + scaled).logaddexp(floor)
        scaled = log_softmax(np.asarray(logits, dtype=np.float64) / self.temperature_, axis=1)
        return np.logaddexp(np.log1p(-eps) + scaled, np.log(eps / n_classes))

    def _bias_weight(self, n_classes: int) -> float:
        return float(self.penalty_weights_[0])

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            from reliacal.persistence import (
                check_loaded_array,
                check_loaded_number,
                loaded_state_error,
            )

            _check_loaded_temperature(self)
            check_loaded_number(self, "mixture_weight_", positive=True)
            # 1 / (n + 1) for n (weighted) samples: log(1 - eps) must stay finite.
            if self.mixture_weight_ >= 1.0:
                raise loaded_state_error(
                    self, "mixture_weight_", self.mixture_weight_, "a number in (0, 1)"
                )
            check_loaded_array(self, "penalty_weights_", (3,), minimum=0.0)

    def _coef_curvature(self, curvature, logits) -> np.ndarray:
        """The diagonal of the Hessian of the loss in ``coef`` at the identity map."""
        raise NotImplementedError

    def _parameter_scale(self, logits, y_index, weights) -> np.ndarray:
        # Jacobi preconditioning: the solver's variables are the parameters divided by
        # the inverse square root of the Hessian's diagonal at the starting point (the
        # NLL's curvature sum_i w_i p_ik (1 - p_ik) x_ij^2 plus the ridge's). The weakly
        # penalised diagonal and intercepts then no longer make L-BFGS crawl: on the
        # 100-class CIFAR records it needs about a quarter of the iterations.
        probabilities = softmax(logits, axis=1)
        curvature = weights[:, None] * probabilities * (1.0 - probabilities)
        diagonal = np.concatenate(
            [
                self._coef_curvature(curvature, logits).ravel(),
                curvature.sum(axis=0) + 2.0 * self.penalty_weights_[0],
            ]
        )
        floor = np.finfo(np.float64).eps * max(float(diagonal.max()), np.finfo(np.float64).tiny)
        return 1.0 / np.sqrt(np.maximum(diagonal, floor))

    def _rough_start(self, objective, initial, args) -> np.ndarray:
        # Large problems first run L-BFGS on float32 copies of the logits (the two
        # (n, K) x (K, K) products per step, which dominate, take half the time), to a
        # loose tolerance; the float64 solve then finishes from there, so the optimum is
        # the float64 one. On the 100-class CIFAR records this saves a quarter of the fit.
        logits, y_index, weights = args
        if logits.size * initial.size // logits.shape[1] < _ROUGH_PASS_WORK:
            return initial
        rough_args = (logits.astype(np.float32), y_index, weights.astype(np.float32))
        with np.errstate(over="ignore"):
            result = minimize(
                objective,
                initial,
                args=rough_args,
                jac=True,
                method="L-BFGS-B",
                options={
                    "maxiter": self.max_iter,
                    "gtol": max(self.tol, _ROUGH_TOL),
                    "maxcor": self._lbfgs_memory(initial.size),
                },
            )
        return result.x if np.all(np.isfinite(result.x)) else initial

    def _lbfgs_memory(self, n_parameters: int) -> int:
        # More stored corrections than SciPy's 10 roughly halve the iterations of the
        # ill-conditioned small problems; the memory (16 bytes per parameter and
        # correction) is capped near 32 MB.
        return int(np.clip(2_000_000 // n_parameters, 10, 100))

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        warn_uninformative(self, logits, y_index, sample_weight)
        n_classes = logits.shape[1]
        n_samples = logits.shape[0] if sample_weight is None else float(sample_weight.sum())
        scaling = TemperatureScaling()
        with warnings.catch_warnings():
            # This fit has already warned about logits that look like probabilities.
            warnings.filterwarnings("ignore", "look like probabilities", UserWarning)
            scaling.fit(logits, y_index, sample_weight=sample_weight)
        self.temperature_ = scaling.temperature_
        self.mixture_weight_ = 1.0 / (n_samples + 1.0)
        counts = np.array(self._n_penalised(n_classes), dtype=np.float64)
        factors = np.where(counts > 0, counts, 1.0) ** self.class_exponent
        self.penalty_weights_ = (
            np.array(self._strengths(), dtype=np.float64)
            * factors
            / n_samples**self.sample_exponent
        )
        super()._fit_core(features, self._preprocess(logits), y_index, sample_weight)

    def _calibrated_logits(self, features, logits):
        return super()._calibrated_logits(features, self._preprocess(logits))

    def _torch_map(self):
        """A ``torch.nn.Module``: float64 logits ``(n, K)`` -> ``predict_proba``'s probabilities."""
        from reliacal.calibrators._torch_maps import StructuredScalingMap

        return StructuredScalingMap(
            self.temperature_, self.mixture_weight_, self.coef_, self.intercept_
        )


@shared_doc(_STRUCTURED_DOCS)
class StructuredVectorScaling(_DiagonalMap, _StructuredScaling):
    r"""Structured vector scaling (SVS): ``softmax(diag(w) z' + b)`` after temperature scaling.

    {reference}
    The logits are temperature-scaled, mixed with the uniform distribution
    and taken back to log-probabilities,
    ``z' = log((1 - eps) softmax(z / T) + eps / K)``, ``eps = 1 / (n + 1)``;
    then one weight and one bias per class are fitted by minimising

    .. math::

        \mathrm{NLL} + \lambda_b \frac{K^\rho}{n^\tau} \|b\|^2
        + \lambda_d \frac{K^\rho}{n^\tau} \|w - 1\|^2 ,

    by L-BFGS (scipy, analytic gradient, float64) from ``w = 1, b = 0``.
    The penalty pulls the map towards temperature scaling, harder when
    there are many classes and few samples, so that the ``2K`` parameters
    do not overfit a small calibration set (plain :class:`VectorScaling`
    does). Like vector scaling it can change the predicted class.
    {solver_note}

    {map_on_device}

    Parameters
    ----------
    {structured_parameters}
    {structured_exponents}
    {structured_lbfgs}
    {base_parameters}

    Attributes
    ----------
    coef_ : ndarray of shape (K,)
        The weights ``w`` (calibrated logits are ``coef_ * z' + intercept_``).
    {lbfgs_attributes}
    {structured_attributes}
    {base_attributes}

    See Also
    --------
    StructuredMatrixScaling : the same with a penalised full matrix.
    VectorScaling : the unstructured map on the raw logits.

    Examples
    --------
    >>> from reliacal.calibrators import StructuredVectorScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(600, 3, bias=[2.0, 0.0, 0.0], random_state=0)
    >>> svs = StructuredVectorScaling().fit(3.0 * logits, y)  # over-confident and biased
    >>> bool(svs.intercept_[0] < svs.intercept_[1])  # learns to undo the bias of class 0
    True
    >>> plain = StructuredVectorScaling().fit(logits, y)  # the same logits, unscaled:
    >>> round(svs.temperature_ / plain.temperature_, 6)  # the temperature takes the factor 3
    3.0
    >>> svs.coef_.round(3), plain.coef_.round(3)  # and the map on z' is the same
    (array([2.015, 1.418, 1.497]), array([2.015, 1.418, 1.497]))
    """

    def __init__(
        self,
        reg_bias: float = 1.0,
        reg_diagonal: float = 1.0,
        *,
        class_exponent: float = 1.0,
        sample_exponent: float = 1.0,
        max_iter: int = 1000,
        tol: float = 1e-5,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _n_penalised(self, n_classes):
        return n_classes, n_classes, 0

    def _strengths(self):
        return self.reg_bias, self.reg_diagonal, 0.0

    def _coef_curvature(self, curvature, logits):
        return np.einsum("ij,ij->j", curvature, logits**2) + 2.0 * self.penalty_weights_[1]

    def _coef_objective(self, coef, logits, logit_gradient):
        weight = float(self.penalty_weights_[1])
        deviation = coef - 1.0
        penalty = weight * float(deviation @ deviation)
        return penalty, np.einsum("ij,ij->j", logit_gradient, logits) + 2.0 * weight * deviation


@shared_doc(_STRUCTURED_DOCS)
class StructuredMatrixScaling(_FullMap, _StructuredScaling):
    r"""Structured matrix scaling (SMS): ``softmax(W z' + b)`` after temperature scaling.

    {reference}
    The logits are temperature-scaled, mixed with the uniform distribution
    and taken back to log-probabilities,
    ``z' = log((1 - eps) softmax(z / T) + eps / K)``, ``eps = 1 / (n + 1)``
    (which bounds them below, so that one very confident input cannot
    dominate the fit); then a full matrix and a bias are fitted by
    minimising

    .. math::

        \mathrm{NLL} + \lambda_b \frac{K^\rho}{n^\tau} \|b\|^2
        + \lambda_d \frac{K^\rho}{n^\tau} \sum_j (W_{jj} - 1)^2
        + \lambda_o \frac{(K(K-1))^\rho}{n^\tau} \sum_{i \ne j} W_{ij}^2 ,

    by L-BFGS (scipy, analytic gradients, float64) from ``W = I, b = 0``.
    Each group of parameters is shrunk towards temperature scaling in
    proportion to its size: the ``K (K - 1)`` off-diagonal entries, which
    make matrix scaling overfit, hardest. Unlike the ODIR regulariser of
    :class:`MatrixScaling` the default strengths need no tuning: they
    scale with ``K`` and ``n``.
    {solver_note}

    {map_on_device}

    Parameters
    ----------
    {structured_parameters}
    reg_off_diagonal : float, default=1.0
        ``lambda_o``, the ridge strength on the off-diagonal entries of
        ``W``, scaled by ``(K (K - 1))^rho / n^tau``.
    {structured_exponents}
    {structured_lbfgs}
    max_parameters : int, default=10_000_000
        Largest ``K^2 + K`` that ``fit`` accepts, as in :class:`MatrixScaling`
        (about 250 bytes per parameter during the fit).
        At most 85,899,298: SciPy's L-BFGS-B cannot address more.
    {base_parameters}

    Attributes
    ----------
    coef_ : ndarray of shape (K, K)
        The matrix ``W`` (calibrated logits are ``z' @ coef_.T + intercept_``).
    {lbfgs_attributes}
    {structured_attributes}
    {base_attributes}

    See Also
    --------
    StructuredVectorScaling : the diagonal special case.
    MatrixScaling : the full map with the ODIR penalty (Dirichlet calibration).

    Examples
    --------
    >>> from reliacal.calibrators import StructuredMatrixScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(600, 3, random_state=0)
    >>> sms = StructuredMatrixScaling().fit(logits, y)
    >>> sms.coef_.shape
    (3, 3)
    >>> sms.penalty_weights_.round(4)  # lambda K^rho / n^tau for b, diag(W), off-diag(W)
    array([0.005, 0.005, 0.01 ])
    >>> sms.predict_proba(logits[:2]).sum(axis=1)
    array([1., 1.])
    """

    _parameter_constraints: dict = {
        **_StructuredScaling._parameter_constraints,
        **_FULL_MAP_CONSTRAINTS,
    }

    def __init__(
        self,
        reg_bias: float = 1.0,
        reg_diagonal: float = 1.0,
        reg_off_diagonal: float = 1.0,
        *,
        class_exponent: float = 1.0,
        sample_exponent: float = 1.0,
        max_iter: int = 1000,
        tol: float = 1e-5,
        max_parameters: int = 10_000_000,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    def _check_fit_inputs(self, features, logits):
        check_matrix_size(logits.shape[1], self.max_parameters)

    def _n_penalised(self, n_classes):
        return n_classes, n_classes, n_classes * (n_classes - 1)

    def _strengths(self):
        return self.reg_bias, self.reg_diagonal, self.reg_off_diagonal

    def _apply_coef(self, coef, logits):
        if is_torch_tensor(coef):  # predict_proba on a tensor's device: float64 both
            return logits @ coef.T
        # In the logits' precision: float32 for the rough first pass.
        return logits @ coef.T.astype(logits.dtype, copy=False)

    def _coef_curvature(self, curvature, logits):
        _, diagonal_weight, off_weight = (float(value) for value in self.penalty_weights_)
        hessian = curvature.T @ logits**2 + 2.0 * off_weight
        hessian[np.diag_indices_from(hessian)] += 2.0 * (diagonal_weight - off_weight)
        return hessian

    def _coef_objective(self, coef, logits, logit_gradient):
        _, diagonal_weight, off_weight = (float(value) for value in self.penalty_weights_)
        diagonal = np.diag(coef)
        off_diagonal = coef - np.diag(diagonal)
        diagonal_deviation = diagonal - 1.0
        penalty = diagonal_weight * float(diagonal_deviation @ diagonal_deviation)
        penalty += off_weight * float(np.sum(off_diagonal**2))
        gradient = logit_gradient.T @ logits + 2.0 * off_weight * off_diagonal
        gradient[np.diag_indices_from(gradient)] += 2.0 * diagonal_weight * diagonal_deviation
        return penalty, gradient
