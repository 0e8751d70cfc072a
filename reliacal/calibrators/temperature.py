"""Temperature scaling (Guo et al., 2017), fitted exactly.

The NLL objective is solved by :mod:`reliacal.calibrators._temperature_nll`
(Taylor steps on ``log(1/T)`` from cumulants of one chunked pass each,
started from a strided subset, float32 then float64 passes). The ECE
objective searches a grid of temperatures around that optimum.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from reliacal._docstrings import ON_DEVICE_DOC, shared_doc
from reliacal._init_arguments import store_init_arguments
from reliacal._validation import is_torch_tensor, to_numpy
from reliacal.calibrators._base import BaseCalibrator, ConvergenceWarning, waive_one_label
from reliacal.calibrators._temperature_nll import fit_nll

__all__ = ["TemperatureScaling"]

# Rows per chunk of the ECE objective's confidence passes: one float64 buffer of
# ~512 KiB, which stays in a core's L2 cache.
_CHUNK_ELEMENTS = 1 << 16
# The grid of the ECE objective (T = 0.1, 0.2, ..., 10.0), as in the seeds' code.
_ECE_GRID = np.arange(1, 101) / 10.0


def _top_label_confidence(logits, temperature, scale_exponent=0):
    """Top-label confidence of ``softmax(z / T)`` per row, in chunks.

    For ``k > 0`` computed as ``softmax(z' / T')`` with ``z' = z / 2**k`` and
    ``T' = T / 2**k``, so that ``z - max z`` cannot overflow.
    """
    n_samples, n_classes = logits.shape
    rows = max(1, _CHUNK_ELEMENTS // n_classes)
    confidence = np.empty(n_samples)
    buffer = np.empty((rows, n_classes))
    scale_exponent = max(scale_exponent, 0)
    temperature = np.ldexp(temperature, -scale_exponent)
    for start in range(0, n_samples, rows):
        stop = min(start + rows, n_samples)
        chunk = logits[start:stop]
        e = buffer[: stop - start]
        if scale_exponent != 0:
            chunk = np.ldexp(chunk, -scale_exponent, out=e)
        np.subtract(chunk, chunk.max(axis=1, keepdims=True), out=e)
        e /= temperature
        np.exp(e, out=e)
        confidence[start:stop] = 1.0 / e.sum(axis=1)
    return confidence


def _check_loaded_temperature(estimator) -> None:
    """Refuse a loaded ``temperature_`` that is not a positive number (``inf`` allowed).

    The load-time check of every calibrator that fits a temperature (this one,
    and those that start from it).
    """
    from reliacal.persistence import check_loaded_number

    # Infinity is a fit's limit for logits that predict no better than uniform.
    check_loaded_number(estimator, "temperature_", positive=True, finite=False)


@shared_doc({"on_device": ON_DEVICE_DOC})
class TemperatureScaling(BaseCalibrator):
    r"""Temperature scaling: ``p = softmax(z / T)`` with one scalar ``T > 0``.

    Guo, Pleiss, Sun and Weinberger, "On Calibration of Modern Neural
    Networks", ICML 2017. The temperature minimises the (weighted) negative
    log-likelihood of held-out labels; dividing every logit by the same
    positive number never changes the predicted class.

    The NLL is convex in ``b = 1/T``; its derivatives are averages of the
    cumulants of ``z`` under ``p = softmax(b z)``:

    .. math::

        \frac{dNLL}{db} = \mathrm{mean}_i(E_{p_i}[z_i] - z_{i,y_i}), \quad
        \frac{d^2NLL}{db^2} = \mathrm{mean}_i \mathrm{Var}_{p_i}[z_i].

    The fitter solves ``dNLL/db = 0`` on ``log b``, one pass over the data
    per step (row chunks that stay in cache, so no ``(n, K)`` temporary;
    sums accumulated in float64), from the solution on a strided subset of
    the rows: a float32 pass yields the gradient and its first four
    derivatives (cumulants of ``b z`` up to the fifth), whose Taylor
    polynomial's root lies within float32 rounding of the optimum; float64
    passes finish it at float64 precision, usually two or three passes in
    all (safeguarded by a bracket and bisection when a start is far off).
    When the optimum lies at ``T -> infinity`` (the
    logits predict no better than uniform), at ``T -> 0`` (every label holds
    its row's top logit) or outside ``[1e-6, 1e6]`` times the largest logit
    range, it warns with :class:`ConvergenceWarning` and returns the nearest
    end of that range: ``T`` is always positive and finite. Logits on any
    scale are fitted alike: when the largest row range lies outside
    ``[2**-20, 2**20]`` the solve runs on the logits divided by a power of two
    (exact), so ``T(c z) = c T(z)`` to float64 rounding from ``c = 1e-300``
    to ``1e300``. Only when the temperature itself lies beyond the float64
    range (logits near ``1e308``) does ``fit`` raise a ``ValueError``.

    {on_device}
    The solver's passes run there (``objective="nll"``; ``"ece"`` reads the
    logits on the host) and ``predict_proba`` returns a tensor on that device,
    of the logits' float dtype; the labels are read on the host.

    Parameters
    ----------
    objective : {"nll", "ece"}, default="nll"
        ``"nll"``: the exact NLL optimum. ``"ece"``: the ``T`` of the grid
        0.1, 0.2, ..., 10.0 with the lowest 15-bin equal-width top-label ECE
        (as the CalAttn and focal-loss papers' code does; ties go to the
        smaller ``T``). When the NLL optimum ``T*`` lies outside that grid
        (logits on another scale) or the lowest ECE is at an end of it, the
        grid ``0.1 T*, 0.2 T*, ..., 10 T*`` is searched too; a lowest ECE at
        an end of all the points searched warns with
        :class:`ConvergenceWarning`. ``sample_weight`` is not supported with
        ``"ece"``.
    tol : float, default=1e-6
        Stop once a float64 step changes ``log T`` by at most ``tol`` (and
        the steps are shrinking). The returned ``T`` includes that step,
        whose error shrinks at least as the cube of its length, so for
        ``tol <= 1e-5`` the result lies within float64 rounding of the
        optimum.
    max_iter : int, default=100
        Maximum number of passes over the data.
    {base_parameters}

    Attributes
    ----------
    temperature_ : float
        The fitted ``T`` (not ``1/T``).
    n_iter_ : int
        Passes over the data (grid points searched for ``objective="ece"``:
        100 or 200).
    n_passes_ : int
        Reads of the whole logit matrix by ``fit``: ``n_iter_`` for
        ``objective="nll"``; the NLL solve's passes plus one per grid point
        for ``"ece"``. Input validation is not counted.
    subset_passes_ : float
        Reads of the strided subsets that give the solve its start, in units
        of the logit matrix's size.
    {base_attributes}

    See Also
    --------
    VectorScaling, MatrixScaling : richer logit-level maps.

    Examples
    --------
    >>> import numpy as np
    >>> from reliacal.calibrators import TemperatureScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(500, 3, scale=1.0, random_state=0)
    >>> logits = 3.0 * logits  # three times too sharp: overconfident
    >>> ts = TemperatureScaling().fit(logits, y)
    >>> round(ts.temperature_, 3)
    2.723
    >>> proba = ts.predict_proba(logits)
    >>> bool(np.all(proba.argmax(axis=1) == logits.argmax(axis=1)))
    True
    """

    _parameter_constraints: dict = {
        **BaseCalibrator._parameter_constraints,
        "objective": [StrOptions({"nll", "ece"})],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        objective: str = "nll",
        *,
        tol: float = 1e-6,
        max_iter: int = 100,
        **base_params,
    ):
        store_init_arguments(self, locals())
        super().__init__(**base_params)

    _device_fit = _device_predict = True

    def _fit_core(self, features, logits, y_index, sample_weight) -> None:
        if self.objective == "ece":
            self._fit_ece(to_numpy(logits, "X"), y_index, sample_weight)
            return
        objective_class = None
        if is_torch_tensor(logits):
            from reliacal.calibrators._temperature_device import TensorTemperatureObjective

            objective_class = TensorTemperatureObjective
        solution, temperature, objective, subset_passes = fit_nll(
            logits,
            y_index,
            sample_weight,
            tol=self.tol,
            max_iter=self.max_iter,
            objective_class=objective_class,
        )
        if solution.status != "converged":
            warnings.warn(solution.message, ConvergenceWarning, stacklevel=3)
        self.temperature_ = temperature
        self.n_iter_ = solution.n_iter
        self.n_passes_ = objective.n_passes
        self.subset_passes_ = subset_passes

    def _fit_ece(self, logits, y_index, sample_weight) -> None:
        from reliacal.metrics import expected_calibration_error

        if sample_weight is not None:
            raise ValueError(
                "sample_weight is not supported with objective='ece' (the binned ECE is "
                "unweighted); use objective='nll'"
            )
        # Top-label ECE of softmax(z / T) equals the positive-class ECE of (confidence,
        # correct): argmax does not depend on T, only the confidences do.
        correct = (np.argmax(logits, axis=1) == y_index).astype(np.int64)

        def errors(grid):
            return [
                expected_calibration_error(
                    correct,
                    _top_label_confidence(logits, t, scale_exponent),
                    n_bins=15,
                    mode="positive",
                )
                for t in grid
            ]

        # The fixed grid suits logits on the usual scale. The same grid shape centred (in
        # log T) on the NLL optimum is searched too when that optimum lies off the fixed
        # grid (logits on another scale, where the fixed grid may hold only a poor local
        # minimum) or when the fixed grid's lowest ECE is at one of its ends.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            _, centre, objective, subset_passes = fit_nll(
                logits, y_index, None, tol=1e-6, max_iter=100
            )
        scale_exponent = objective.scale_exponent
        grid, ece = _ECE_GRID, errors(_ECE_GRID)
        off_grid = not _ECE_GRID[0] <= centre <= _ECE_GRID[-1]
        if off_grid or np.argmin(ece) in (0, len(grid) - 1):
            centred = centre * _ECE_GRID
            order = np.argsort(np.concatenate([grid, centred]), kind="stable")
            grid = np.concatenate([grid, centred])[order]
            ece = np.concatenate([ece, errors(centred)])[order]
        best = int(np.argmin(ece))  # the first, so ties go to the smaller T
        if best in (0, len(grid) - 1):
            warnings.warn(
                f"the top-label ECE is lowest at T = {grid[best]:.6g}, the "
                f"{'smallest' if best == 0 else 'largest'} temperature searched (the grid "
                f"0.1..10 and {_ECE_GRID[0]:g}..{_ECE_GRID[-1]:g} times the NLL optimum "
                f"{centre:.6g}): the optimum may lie beyond it; objective='nll' has no grid",
                ConvergenceWarning,
                stacklevel=3,
            )
        self.temperature_ = float(grid[best])
        self.n_iter_ = len(grid)
        self.n_passes_ = objective.n_passes + len(grid)
        self.subset_passes_ = subset_passes

    def _calibrated_logits(self, features, logits) -> np.ndarray:
        if is_torch_tensor(logits):  # on its device, in float64 as numpy's below
            logits = logits.double()
            calibrated = logits / self.temperature_
            overflowed = not bool(calibrated.isfinite().all())
        else:
            logits = np.asarray(logits, dtype=np.float64)
            with np.errstate(over="ignore"):
                calibrated = logits / self.temperature_
            overflowed = not np.all(np.isfinite(calibrated))
        if overflowed:
            # z / T overflows for large logits on a small T (rows far from the origin):
            # shift each row by its max first, which leaves the softmax unchanged.
            if is_torch_tensor(logits):
                row_max = logits.amax(dim=1, keepdim=True)
            else:
                row_max = logits.max(axis=1, keepdims=True)
            calibrated = (logits - row_max) / self.temperature_
        return calibrated

    def _torch_map(self):
        from reliacal.export import TemperatureMap

        return TemperatureMap(self.temperature_)

    def _check_loaded_state(self) -> None:
        super()._check_loaded_state()
        if hasattr(self, "classes_"):
            _check_loaded_temperature(self)

    def _expected_failed_checks(self) -> dict[str, str]:
        return {**super()._expected_failed_checks(), **waive_one_label("temperature scaling")}
