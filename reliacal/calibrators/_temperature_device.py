"""The temperature solve's passes over a torch tensor of logits, on its device.

:class:`TensorTemperatureObjective` is :class:`~reliacal.calibrators._temperature_nll._TemperatureObjective`
with the passes (the per-row sums of ``e^t t^j``, the row extremes, the labels'
logits) computed by torch where the tensor lies; the solver around them (the
subset start, the Taylor steps, the float32-then-float64 passes, the bracket, the
boundary and scale-exponent guards) is the numpy one, unchanged, so a tensor gets
the same temperature to float64 rounding and the same warnings. Only scalars (the
mean cumulants of each pass) come to the host.
"""

from __future__ import annotations

import sys

import numpy as np

from reliacal.calibrators._temperature_nll import _row_cumulants, _TemperatureObjective

__all__ = ["TensorTemperatureObjective"]

# Entries of the logits read at once: whole-tensor kernels (a device gains nothing
# from cache-sized chunks) whose temporaries, a few float64 copies, stay small.
_CHUNK_ELEMENTS = 1 << 22


def _ldexp(values, exponent: int):
    """``values * 2**exponent``, exact, in two factors so that neither overflows."""
    half = exponent // 2
    return values * (2.0**half) * (2.0 ** (exponent - half))


class TensorTemperatureObjective(_TemperatureObjective):
    """The objective of the temperature solve, its passes run by torch on the tensor's device.

    ``logits`` is a float tensor (CPU or CUDA); ``y_index`` and ``sample_weight`` are
    numpy arrays (the labels and weights as validated on the host), moved to its
    device once.
    """

    def __init__(self, logits, y_index, sample_weight, scale_exponent=0):
        super().__init__(logits, y_index, sample_weight, scale_exponent)
        torch = sys.modules["torch"]
        self._torch = torch
        self.y_index = torch.as_tensor(np.asarray(y_index), device=logits.device)
        if self.weights is not None:
            self.weights = torch.as_tensor(self.weights, dtype=torch.float64, device=logits.device)

    def _torch_dtype(self, dtype):
        return self._torch.float32 if np.dtype(dtype) == np.float32 else self._torch.float64

    def _scaled_difference(self, larger, smaller, out=None):
        """``(larger - smaller) / 2**k`` in float64, without overflow (as numpy's)."""
        k = self.scale_exponent
        if k > 0:
            return _ldexp(larger.double(), -k) - _ldexp(smaller.double(), -k)
        difference = larger.double() - smaller.double()
        return difference if k == 0 else _ldexp(difference, -k)

    def _mean(self, values, start: int, stop: int):
        """The (weighted) mean's share of rows ``start:stop``, a 0-d tensor on the device."""
        if self.weights is None:
            return values.sum(dtype=self._torch.float64) / self.logits.shape[0]
        return (self.weights[start:stop] * values).sum()

    def _chunks(self):
        n_samples, n_classes = self.logits.shape
        rows = max(1, _CHUNK_ELEMENTS // n_classes)
        for start in range(0, n_samples, rows):
            yield start, min(start + rows, n_samples)

    def _gather_extremes(self, start: int, stop: int) -> None:
        chunk = self.logits[start:stop]
        self.row_max[start:stop] = chunk.amax(dim=1)
        self.row_min[start:stop] = chunk.amin(dim=1)
        true = self._torch.take_along_dim(chunk, self.y_index[start:stop, None], dim=1)
        self.true_logits[start:stop] = true[:, 0]

    def _zero_share(self, shifted, start: int, stop: int):
        """The rows' share of ``g(0) = mean(mean_k z' - z'_y)`` (its sign is what counts)."""
        gap = self._scaled_difference(self.row_max[start:stop], self.true_logits[start:stop])
        row_mean = shifted.sum(dim=1).double() / self.n_classes
        return self._mean(row_mean + gap, start, stop)

    def _statistics(self) -> None:
        self.true_gap = self._scaled_difference(self.row_max, self.true_logits)
        self.spread = float(self._scaled_difference(self.row_max, self.row_min).max())
        if self.weights is None:
            self.gradient_at_infinity = float(self.true_gap.mean())
        else:
            self.gradient_at_infinity = float((self.weights * self.true_gap).sum())

    def _pass(self, inverse_temperature, dtype, order) -> list[float]:
        """``[_, c_1, ..., c_{order+1}]``: the mean cumulants of ``t`` at ``b``."""
        torch, logits = self._torch, self.logits
        n_samples = logits.shape[0]
        first = self.row_max is None
        if first:
            empty = {"dtype": torch.float64, "device": logits.device}
            self.row_max = torch.empty(n_samples, **empty)
            self.row_min = torch.empty(n_samples, **empty)
            self.true_logits = torch.empty(n_samples, **empty)
        elif self.true_gap is None:
            self._statistics()
        zero = self.gradient_at_zero is None
        pass_dtype = self._torch_dtype(dtype)
        scale = float(dtype(inverse_temperature))
        cumulant_sums = [torch.zeros((), dtype=torch.float64, device=logits.device)] * (order + 2)
        zero_sum = 0.0
        for start, stop in self._chunks():
            if first:
                self._gather_extremes(start, stop)
            # t = z' - max_k z' <= 0: exp(b t) never overflows and its row sum is >= 1.
            t = self._scaled_difference(logits[start:stop], self.row_max[start:stop, None])
            t = t.to(pass_dtype)
            if zero:
                zero_sum = zero_sum + self._zero_share(t, start, stop)
            t = t * scale
            e = torch.exp(t)
            row_sums = [e.sum(dim=1).double()]  # sum_k e^t t^j, j = 0, 1, ...
            f = e
            for _ in range(order + 1):
                f = f * t
                row_sums.append(f.sum(dim=1).double())
            for j, cumulant in enumerate(_row_cumulants(row_sums), start=1):
                cumulant_sums[j] = cumulant_sums[j] + self._mean(cumulant, start, stop)
        if zero:
            self.gradient_at_zero = float(zero_sum)
        if first and self.true_gap is None:
            self._statistics()
        return [0.0, *torch.stack(cumulant_sums[1:]).tolist()]

    def _search_pass(self, inverse_temperatures):
        """The mean first two cumulants of ``t`` at each ``b`` (float32, as numpy's)."""
        torch, logits = self._torch, self.logits
        if self.true_gap is None:
            self._statistics()
        zero = self.gradient_at_zero is None
        zero_sum = 0.0
        device = logits.device
        first = torch.zeros(len(inverse_temperatures), dtype=torch.float64, device=device)
        second = torch.zeros_like(first)
        for start, stop in self._chunks():
            d = self._scaled_difference(logits[start:stop], self.row_max[start:stop, None])
            d = d.to(torch.float32)
            if zero:
                zero_sum = zero_sum + self._zero_share(d, start, stop)
            for j, b in enumerate(inverse_temperatures):
                t = d * float(b)
                e = torch.exp(t)
                s0 = e.sum(dim=1).double()
                e = e * t
                mean = e.sum(dim=1).double() / s0
                variance = (e * t).sum(dim=1).double() / s0 - mean * mean
                first[j] += self._mean(mean, start, stop)
                second[j] += self._mean(variance, start, stop)
        if zero:
            self.gradient_at_zero = float(zero_sum)
        return np.array(first.tolist()), np.array(second.tolist())
