"""``torch.nn.Module`` forms of the structured scalings and the one-vs-rest maps.

Each module maps float64 logits ``(n, K)`` (what a calibrator's
``_calibrated_logits`` receives: the logs of the probabilities under
``input="probs"``) to the calibrator's ``predict_proba``, with the same
float64 arithmetic, so the two agree to rounding. A calibrator's
``_torch_map()`` builds its module; this module imports torch and is itself
imported only there.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from reliacal.export import one_vs_rest_log_odds, one_vs_rest_probabilities

__all__ = [
    "InterpolationMaps",
    "OneVsRestMap",
    "QuadraticMaps",
    "SplineMaps",
    "StructuredScalingMap",
    "VennAbersMaps",
]


def _tensor(values) -> torch.Tensor:
    return torch.as_tensor(np.array(values, dtype=np.float64))


class StructuredScalingMap(nn.Module):
    """``softmax(W z' + b)`` with ``z' = log((1 - eps) softmax(z / T) + eps / K)``.

    ``coef`` of shape ``(K,)`` is a diagonal ``W`` (structured vector
    scaling), of shape ``(K, K)`` a full one.
    """

    def __init__(self, temperature, mixture_weight, coef, intercept):
        super().__init__()
        coef = np.asarray(coef, dtype=np.float64)
        self.vector = coef.ndim == 1
        self.register_buffer("coef", _tensor(coef))
        self.register_buffer("intercept", _tensor(intercept))
        self.temperature = float(temperature)
        self.log_keep = math.log1p(-float(mixture_weight))
        self.log_uniform = math.log(float(mixture_weight) / coef.shape[0])

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        scaled = torch.log_softmax(logits.to(torch.float64) / self.temperature, dim=1)
        # log(exp(a) + exp(b)) written out: the ONNX exporter has no logaddexp.
        kept = scaled + self.log_keep
        larger = torch.clamp(kept, min=self.log_uniform)
        mixed = larger + torch.log1p(torch.exp(-torch.abs(kept - self.log_uniform)))
        if self.vector:
            calibrated = mixed * self.coef + self.intercept
        else:
            calibrated = mixed @ self.coef.T + self.intercept
        return torch.softmax(calibrated, dim=1)


class OneVsRestMap(nn.Module):
    """One-vs-rest log-odds -> per-class maps -> probabilities, as ``OneVsRestCalibrator``.

    ``maps`` takes the scores ``(n, m)`` (``m = 1`` for two classes: ``z_1 -
    z_0``'s log-odds) and returns probabilities ``(n, m)``; they are clipped
    to ``[0, 1]``, then the binary column becomes ``[1 - p, p]`` and ``K > 2``
    columns are divided by their row sums (a row of zeros becomes uniform).
    """

    def __init__(self, maps: nn.Module, n_classes: int):
        super().__init__()
        self.maps = maps
        self.binary = n_classes == 2

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        scores = one_vs_rest_log_odds(logits.to(torch.float64))
        if self.binary:
            scores = scores[:, 1:]
        return one_vs_rest_probabilities(self.maps(scores), self.binary)


class QuadraticMaps(nn.Module):
    """``sigmoid(a s + c s^2 + b)`` per column."""

    def __init__(self, coef, intercept):
        super().__init__()
        coef = np.asarray(coef, dtype=np.float64)
        self.register_buffer("linear", _tensor(coef[:, 0]))
        self.register_buffer("quadratic", _tensor(coef[:, 1]))
        self.register_buffer("intercept", _tensor(intercept))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(scores * self.linear + scores**2 * self.quadratic + self.intercept)


def _padded(rows, fill: float, width: int | None = None) -> np.ndarray:
    """Stack 1-D arrays into ``(m, width)`` (default: the longest), padded with ``fill``."""
    width = max(len(row) for row in rows) if width is None else width
    out = np.full((len(rows), width), fill, dtype=np.float64)
    for index, row in enumerate(rows):
        out[index, : len(row)] = row
    return out


def _counts(knots: torch.Tensor, scores: torch.Tensor, right: bool) -> torch.Tensor:
    """Per row ``r`` of ``knots`` ``(R, L)`` (sorted, padded with +inf), the number of knots
    at or below (``right``) or strictly below each score of ``scores[r]`` ``(R, n)``.

    ``searchsorted`` where it runs; comparisons under a trace, which is how the ONNX
    exporter reads a module and which has no ``searchsorted``.
    """
    if torch.jit.is_tracing():
        if right:
            below = knots[:, None, :] <= scores[:, :, None]
        else:
            below = knots[:, None, :] < scores[:, :, None]
        return below.to(torch.int64).sum(dim=2)
    return torch.searchsorted(knots, scores.contiguous(), right=right)


class InterpolationMaps(nn.Module):
    """Per column, ``numpy.interp`` between knots (CIR), of the score or its sigmoid.

    Linear between the knots and constant beyond them; the tables are padded to one
    length (knots with +inf, never counted), so every column is one lookup.
    """

    def __init__(self, knots, values, *, probability: bool = False):
        super().__init__()
        self.probability = probability
        self.register_buffer("knots", _tensor(_padded(knots, math.inf)))
        self.register_buffer("values", _tensor(_padded(values, 0.0)))
        self.register_buffer("last", torch.as_tensor([[len(k) - 1] for k in knots]))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        if self.probability:
            scores = torch.sigmoid(scores)
        scores = scores.T  # (m, n)
        count = _counts(self.knots, scores, right=True)
        right = torch.minimum(count, self.last)
        left = torch.minimum(torch.clamp(count - 1, min=0), self.last)
        x0 = torch.gather(self.knots, 1, left)
        x1 = torch.gather(self.knots, 1, right)
        y0 = torch.gather(self.values, 1, left)
        y1 = torch.gather(self.values, 1, right)
        width = x1 - x0
        inside = width > 0
        # numpy's arithmetic: the slope first, then slope * (x - left) + low.
        slope = (y1 - y0) / torch.where(inside, width, torch.ones_like(width))
        return torch.where(inside, slope * (scores - x0) + y0, y0).T


class VennAbersMaps(nn.Module):
    """Per column, the Venn-Abers bounds of each fold, merged to ``p1 / (1 - p0 + p1)``.

    ``p0`` is the lower bound of the gap after the knots at or below the score, ``p1``
    the upper bound of the gap after those strictly below it; with several folds,
    ``p0 = 1 - GM(1 - p0_f)`` and ``p1 = GM(p1_f)``. The tables of all folds and
    columns are padded to one length and looked up at once.
    """

    def __init__(self, knots, lower, upper):
        super().__init__()
        self.n_folds = len(knots)
        self.n_columns = len(knots[0])
        rows = [table for fold in knots for table in fold]
        self.register_buffer("knots", _tensor(_padded(rows, math.inf)))
        # One bound per gap: a table of L knots has L + 1.
        gaps = self.knots.shape[1] + 1
        self.register_buffer("lower", _tensor(_padded([t for f in lower for t in f], 0.0, gaps)))
        self.register_buffer("upper", _tensor(_padded([t for f in upper for t in f], 1.0, gaps)))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        # Row f * m + j of the tables is column j of fold f.
        repeated = scores.T.repeat(self.n_folds, 1)
        p0 = torch.gather(self.lower, 1, _counts(self.knots, repeated, right=True))
        p1 = torch.gather(self.upper, 1, _counts(self.knots, repeated, right=False))
        p0 = p0.reshape(self.n_folds, self.n_columns, -1)
        p1 = p1.reshape(self.n_folds, self.n_columns, -1)
        if self.n_folds == 1:
            low, high = p0[0], p1[0]
        else:
            high = torch.exp(torch.log(p1).mean(dim=0))
            # 1 - exp, not -expm1: the ONNX exporter has no expm1 (the difference is
            # rounding of p0, next to 1 - p0 in the result).
            low = 1.0 - torch.exp(torch.log1p(-p0).mean(dim=0))
        return (high / (1.0 - low + high)).T


class _Column(nn.Module):
    """The tables of one column's map, as buffers."""

    def __init__(self, **tables):
        super().__init__()
        for name, table in tables.items():
            self.register_buffer(name, _tensor(table))


def _natural_spline_basis(x: torch.Tensor, knots: torch.Tensor) -> torch.Tensor:
    last = knots[-1]
    column = x[:, None]
    cubes = (
        torch.clamp(column - knots[:-1], min=0.0) ** 3 - torch.clamp(column - last, min=0.0) ** 3
    )
    d = cubes / (last - knots[:-1])
    return torch.cat([torch.ones_like(column), column, d[:, :-1] - d[:, -1:]], dim=1)


class SplineMaps(nn.Module):
    """Per column, ``sigmoid`` of a natural cubic spline of the score."""

    def __init__(self, knots, coef):
        super().__init__()
        self.columns = nn.ModuleList(
            _Column(knots=k, coef=c) for k, c in zip(knots, coef, strict=True)
        )

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            [
                torch.sigmoid(_natural_spline_basis(scores[:, index], column.knots) @ column.coef)
                for index, column in enumerate(self.columns)
            ],
            dim=1,
        )
