"""A torchmetrics ``Metric`` of the top-label ECE whose state is the per-bin sums.

:class:`BinnedCalibrationError` keeps three ``(n_bins,)`` float64 tensors (count,
sum of confidences, sum of correct predictions per bin), summed across DDP ranks
(``dist_reduce_fx="sum"``): its memory does not grow with the data, while
torchmetrics' ``CalibrationError`` keeps every confidence and gathers them all
on synchronisation. It uses reliacal's binning, so ``compute()`` equals
:func:`reliacal.metrics.expected_calibration_error` on the same data. A fourth,
scalar state holds the number of classes of the batches: a batch, a merged state
or a rank with another class count raises ``ValueError`` (the bins of a 3-class
and a 10-class problem do not add up to one ECE).

Against torchmetrics' ``MulticlassCalibrationError`` (``norm`` l1, l2 or max, the
top-label ECE) the values agree (to float32 rounding, about 1e-6: torchmetrics
computes in float32) on data with no confidence on a bin edge. They differ where
a confidence lies exactly on an edge:

* an interior edge ``b / n_bins``: reliacal's bins are right-closed, ``(lo, hi]``,
  so the confidence counts in the lower bin (as scikit-learn's
  ``calibration_curve``); torchmetrics' are left-closed, ``[lo, hi)``
  (``torch.bucketize(right=True)`` on ``linspace`` edges in float32), so it
  counts in the upper bin;
* a confidence of exactly 1.0: here it is in the last bin; torchmetrics puts it
  in an extra ``(n_bins + 1)``-th bin of its own;
* torchmetrics applies softmax to a batch with any value outside [0, 1] (so one
  NaN or logit row changes every row's confidence); this metric raises
  ``ValueError`` instead.

torchmetrics is an optional dependency: importing this module without it raises
an ``ImportError`` that says how to install it.
"""

from __future__ import annotations

try:
    import torch
    from torchmetrics import Metric
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "reliacal.metrics.torchmetrics needs torchmetrics (and torch): "
        "pip install torchmetrics, or pip install 'reliacal[torchmetrics]'"
    ) from error

from reliacal._validation import (
    _row_sum_tolerance,
    check_n_bins,
    check_option,
    check_scores_and_target,
)

__all__ = ["BinnedCalibrationError"]

NORMS = ("l1", "l2", "max")


def _one_class_count(counts: torch.Tensor) -> torch.Tensor:
    """Reduce the class counts of several states (0: no data yet); refuse two different ones.

    The ``dist_reduce_fx`` of the ``n_classes`` state: torchmetrics calls it on the
    stacked states of the DDP ranks, of ``merge_state`` and of ``forward``.
    """
    seen = counts[counts > 0]
    if seen.numel() and bool((seen != seen[0]).any()):
        raise ValueError(
            f"cannot merge the bin sums of batches with different numbers of classes "
            f"{sorted(set(seen.tolist()))}: every batch must have the same columns"
        )
    return counts.max()


class BinnedCalibrationError(Metric):
    r"""Top-label calibration error for training loops, with constant-size state.

    ``update(preds, target)`` adds a batch of probabilities ``(n, K)`` and integer
    labels ``(n,)``; ``compute()`` returns

    .. math:: \mathrm{ECE} = \sum_b \frac{n_b}{n} \lvert \bar o_b - \bar c_b \rvert

    (``norm="l1"``; ``"l2"``: the root of the mass-weighted squared gaps;
    ``"max"``: the largest gap of a non-empty bin) over ``n_bins`` uniform bins
    with edges ``b / n_bins``, right-closed, 0 in the first bin. See the module
    documentation for how this differs from torchmetrics' ``CalibrationError``
    at bin edges.

    Parameters
    ----------
    n_bins : int, default=15
        Number of uniform bins.
    norm : {"l1", "l2", "max"}, default="l1"
        ECE, RMS calibration error or maximum calibration error.
    validate_args : bool, default=True
        Check that ``preds`` are probabilities and ``target`` column indices
        (``ValueError`` otherwise). Each check reads a value back from the device.
    **kwargs
        Passed to ``torchmetrics.Metric`` (``dist_sync_on_step``, ``process_group``...).

    Examples
    --------
    >>> metric = BinnedCalibrationError(n_bins=5)
    >>> metric.update(torch.tensor([[0.9, 0.1], [0.3, 0.7]]), torch.tensor([0, 0]))
    >>> metric.update(torch.tensor([[0.6, 0.4]]), torch.tensor([1]))
    >>> round(float(metric.compute()), 4)  # (|1 - 0.9| + |0 - 0.7| + |0 - 0.6|) / 3
    0.4667
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, n_bins: int = 15, norm: str = "l1", *, validate_args: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.n_bins = check_n_bins(n_bins)
        self.norm = check_option(norm, "norm", NORMS)
        self.validate_args = bool(validate_args)
        # Interior edges b / n_bins, each one division in float64 (not linspace).
        interior = torch.arange(1, self.n_bins, dtype=torch.float64) / self.n_bins
        self.register_buffer("interior_edges", interior, persistent=False)
        # The columns of the first batch (0: none yet); first, so that merging states of
        # different class counts fails before any sum is added.
        self.add_state(
            "n_classes", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx=_one_class_count
        )
        # The same count as a Python int, so that update checks it without a device read.
        self._columns = None
        for name in ("counts", "sum_confidence", "sum_correct"):
            self.add_state(
                name, default=torch.zeros(self.n_bins, dtype=torch.float64), dist_reduce_fx="sum"
            )

    def _check(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        check_scores_and_target(preds, target, "preds")
        if not preds.is_floating_point():
            raise ValueError(f"preds must be floating-point probabilities, got {preds.dtype}")
        if target.is_floating_point() or target.is_complex():
            raise ValueError(f"target must hold integer class indices, got {target.dtype}")
        if preds.shape[0] == 0:
            return
        if not bool(torch.isfinite(preds).all()):
            raise ValueError("preds has NaN or infinite values")
        if bool((preds < 0).any()) or bool((preds > 1).any()):
            raise ValueError(
                "preds has values outside [0, 1]: these look like logits; pass preds.softmax(dim=1)"
            )
        # The row-sum tolerance of reliacal's metric functions, by input precision.
        tolerance = _row_sum_tolerance(preds)
        worst = float((preds.sum(dim=1, dtype=torch.float64) - 1).abs().max())
        if worst > tolerance:
            raise ValueError(
                f"rows of preds do not sum to 1 (off by up to {worst:.3g}): pass "
                "probabilities, e.g. preds.softmax(dim=1)"
            )
        if bool((target < 0).any()) or bool((target >= preds.shape[1]).any()):
            raise ValueError(
                f"target must lie in [0, {preds.shape[1]}) for {preds.shape[1]} columns"
            )

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Add a batch: probabilities ``(n, K)`` and class indices ``(n,)``.

        Every batch must have the columns of the first (``ValueError`` otherwise):
        the bins of a 3-class and a 10-class problem do not add up to one ECE.
        """
        if self.validate_args:
            self._check(preds, target)
        elif preds.ndim != 2:
            raise ValueError(f"preds must have shape (n, K), got {tuple(preds.shape)}")
        columns = int(preds.shape[1])
        if self._columns is None:
            # One device read per reset or merge; after it the check is on Python ints.
            self._columns = int(self.n_classes) or columns
            self.n_classes.fill_(self._columns)
        if columns != self._columns:
            raise ValueError(
                f"batch has {columns} classes but the metric has {self._columns}: every "
                "batch must have the same columns (reset() starts a new problem)"
            )
        confidence, predicted = preds.max(dim=1)
        # Compared in float64, as reliacal's bins: float32(0.3) lies above the edge 0.3.
        confidence = confidence.to(torch.float64)
        index = torch.searchsorted(self.interior_edges, confidence, right=False)
        correct = (predicted == target).to(torch.float64)
        self.counts.scatter_add_(0, index, torch.ones_like(confidence))
        self.sum_confidence.scatter_add_(0, index, confidence)
        self.sum_correct.scatter_add_(0, index, correct)

    def reset(self) -> None:
        """Forget every batch (and the class count of the first)."""
        super().reset()
        self._columns = None

    def merge_state(self, incoming_state) -> None:
        """Add another metric's state (``ValueError`` if its class count differs)."""
        super().merge_state(incoming_state)
        self._columns = None  # read again from the merged state

    def compute(self) -> torch.Tensor:
        """The calibration error of every batch seen (on every rank), a float64 scalar."""
        total = self.counts.sum()
        if float(total) == 0:
            raise ValueError("no samples: call update() with data first")
        # The arithmetic of reliacal's binned errors, so that the values are the same.
        filled = self.counts > 0
        counts = self.counts[filled]
        gaps = (self.sum_correct[filled] - self.sum_confidence[filled]).abs() / counts
        if self.norm == "max":
            return gaps.max()
        if self.norm == "l2":
            return ((counts * gaps**2).sum() / total).sqrt()
        return (counts * gaps).sum() / total
