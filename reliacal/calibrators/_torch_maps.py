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

__all__ = [
    "InterpolationMaps",
    "OneVsRestMap",
    "QuadraticMaps",
    "SplineMaps",
    "StructuredScalingMap",
    "VennAbersMaps",
]

# +-log(1 / tiny) of float64: the clip of the numpy one-vs-rest log-odds.
_LOG_ODDS_LIMIT = float(-np.log(np.finfo(np.float64).tiny))


def _tensor(values) -> torch.Tensor:
    return torch.as_tensor(np.array(values, dtype=np.float64))


def one_vs_rest_log_odds(logits: torch.Tensor) -> torch.Tensor:
    """``log p_k - log(1 - p_k)`` of ``softmax(logits)``, computed as the numpy calibrators do.

    >>> one_vs_rest_log_odds(torch.tensor([[0.0, 2.0], [1.0, 1.0]], dtype=torch.float64))
    tensor([[-2.,  2.],
            [ 0.,  0.]], dtype=torch.float64)
    """
    top = torch.argmax(logits, dim=1, keepdim=True)
    columns = torch.arange(logits.shape[1], device=logits.device)[None, :]
    is_top = columns == top
    shifted = logits - torch.gather(logits, 1, top)
    others = torch.where(is_top, torch.zeros_like(shifted), torch.exp(shifted))
    rest = others.sum(dim=1, keepdim=True)
    # The top class's complement is the rest itself (1 - p would round to 0).
    complement = torch.where(is_top, rest.expand_as(others), (1.0 + rest) - others)
    log_odds = shifted - torch.log(complement)
    return torch.clamp(log_odds, -_LOG_ODDS_LIMIT, _LOG_ODDS_LIMIT)


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
        mixed = torch.logaddexp(scaled + self.log_keep, torch.full_like(scaled, self.log_uniform))
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
        mapped = torch.clamp(self.maps(scores), 0.0, 1.0)
        if self.binary:
            return torch.cat([1.0 - mapped, mapped], dim=1)
        totals = mapped.sum(dim=1, keepdim=True)
        empty = totals == 0
        mapped = torch.where(empty, torch.ones_like(mapped), mapped)
        totals = torch.where(empty, torch.full_like(totals, mapped.shape[1]), totals)
        return mapped / totals


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


def _interpolate(x: torch.Tensor, knots: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``numpy.interp(x, knots, values)`` for two knots or more: linear between, ends beyond."""
    index = torch.clamp(torch.searchsorted(knots, x, right=True) - 1, 0, knots.shape[0] - 2)
    left, right = knots[index], knots[index + 1]
    low, high = values[index], values[index + 1]
    # numpy's arithmetic: the slope first, then slope * (x - left) + low.
    inside = (high - low) / (right - left) * (x - left) + low
    result = torch.where(x <= knots[0], values[0].expand_as(x), inside)
    return torch.where(x >= knots[-1], values[-1].expand_as(x), result)


class _Column(nn.Module):
    """The tables of one column's map, as buffers."""

    def __init__(self, **tables):
        super().__init__()
        for name, table in tables.items():
            self.register_buffer(name, _tensor(table))


class InterpolationMaps(nn.Module):
    """Per column, linear interpolation between knots (CIR), of the score or its sigmoid."""

    def __init__(self, knots, values, *, probability: bool = False):
        super().__init__()
        self.probability = probability
        self.columns = nn.ModuleList(
            _Column(knots=k, values=v) for k, v in zip(knots, values, strict=True)
        )
        # A map of one knot is constant; known when built, so no branch on tensors.
        self.constant = [len(k) == 1 for k in knots]

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        if self.probability:
            scores = torch.sigmoid(scores)
        mapped = []
        for index, column in enumerate(self.columns):
            score = scores[:, index].contiguous()
            if self.constant[index]:
                mapped.append(column.values.expand_as(score))
            else:
                mapped.append(_interpolate(score, column.knots, column.values))
        return torch.stack(mapped, dim=1)


class VennAbersMaps(nn.Module):
    """Per column, the Venn-Abers bounds of each fold, merged to ``p1 / (1 - p0 + p1)``."""

    def __init__(self, knots, lower, upper):
        super().__init__()
        self.folds = nn.ModuleList(
            nn.ModuleList(
                _Column(knots=k, lower=p0, upper=p1)
                for k, p0, p1 in zip(fold_knots, fold_lower, fold_upper, strict=True)
            )
            for fold_knots, fold_lower, fold_upper in zip(knots, lower, upper, strict=True)
        )

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        n_folds = len(self.folds)
        lowers, uppers = [], []
        for fold in self.folds:
            p0, p1 = [], []
            for index, column in enumerate(fold):
                score = scores[:, index].contiguous()
                p0.append(column.lower[torch.searchsorted(column.knots, score, right=True)])
                p1.append(column.upper[torch.searchsorted(column.knots, score, right=False)])
            lowers.append(torch.stack(p0, dim=1))
            uppers.append(torch.stack(p1, dim=1))
        if n_folds == 1:
            p0, p1 = lowers[0], uppers[0]
        else:
            p1 = torch.exp(torch.stack([torch.log(u) for u in uppers]).mean(dim=0))
            p0 = -torch.expm1(torch.stack([torch.log1p(-lo) for lo in lowers]).mean(dim=0))
        return p1 / (1.0 - p0 + p1)


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
