"""The building blocks of exported calibrators: maps of float64 logits to probabilities.

A calibrator's ``_torch_map`` composes these (or a map of its own) and
:class:`CalibratorModule` adds the input handling. Every map computes in
float64, as the calibrators do in numpy, so that its outputs equal
``predict_proba`` to float64 rounding; it takes logits of shape ``(n, K)``
and returns calibrated probabilities ``(n, K)``. Only operations that
TorchScript and the ONNX exporter both know are used: the lookups of the
binning and isotonic maps count the knots at or below each score (a
comparison and a sum) instead of ``torch.bucketize``, which ONNX lacks.
``torch.jit.script`` compiles every map here; ``torch.jit.trace`` takes
them all.

The one-vs-rest log-odds are computed by torch's ``exp``, ``log`` and sums,
which may differ from numpy's in the last bit: a score that lies on a
histogram bin edge to within that rounding (a calibration row's own score,
since the edges are calibration scores) can land in the neighbouring bin.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


def _constant(values) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, dtype=np.float64))


def _top_mask(logits: torch.Tensor) -> torch.Tensor:
    """1.0 at each row's first largest logit (numpy's argmax), else 0.0."""
    columns = torch.arange(logits.shape[1], device=logits.device)
    top = torch.argmax(logits, dim=1, keepdim=True)
    return (columns[None, :] == top).to(logits.dtype)


def one_vs_rest_log_odds(logits: torch.Tensor) -> torch.Tensor:
    """``log p_k - log(1 - p_k)`` of ``softmax(logits)``, as the one-vs-rest calibrators read them.

    The same computation as the numpy calibrators' (without forming ``1 -
    p_k``, which rounds to 0 for a confident class), clipped to
    ``+-log(1 / tiny)`` of float64.

    Examples
    --------
    >>> import torch
    >>> one_vs_rest_log_odds(torch.tensor([[0.0, 2.0], [1.0, 1.0]], dtype=torch.float64))
    tensor([[-2.,  2.],
            [ 0.,  0.]], dtype=torch.float64)
    """
    mask = _top_mask(logits)
    shifted = logits - logits.max(dim=1, keepdim=True).values
    others = torch.exp(shifted) * (1.0 - mask)
    rest = others.sum(dim=1, keepdim=True)
    # The top class's complement is the rest itself, formed without 1 - p (which rounds to 0).
    complement = mask * rest + (1.0 - mask) * (1.0 + rest - others)
    log_odds = shifted - torch.log(complement)
    # The numpy calibrators clip log-odds to +-log(1 / tiny) of float64 (a literal: TorchScript
    # reads no module globals).
    return torch.clamp(log_odds, -708.3964185322641, 708.3964185322641)


def one_vs_rest_probabilities(mapped: torch.Tensor, binary: bool) -> torch.Tensor:
    """One-vs-rest probabilities ``(n, m)`` as a probability matrix, as ``predict_proba`` forms it.

    Clipped to ``[0, 1]``; with two classes (``m = 1``, the positive class's
    map) the rows are ``[1 - p, p]``; with more, each row is divided by its
    sum, and a row whose maps all give 0 becomes uniform.

    Examples
    --------
    >>> import torch
    >>> one_vs_rest_probabilities(torch.tensor([[0.2, 0.6], [0.0, 0.0]]), binary=False)
    tensor([[0.2500, 0.7500],
            [0.5000, 0.5000]])
    >>> one_vs_rest_probabilities(torch.tensor([[0.25]]), binary=True)
    tensor([[0.7500, 0.2500]])
    """
    mapped = torch.clamp(mapped, 0.0, 1.0)
    if binary:
        return torch.cat([1.0 - mapped, mapped], dim=1)
    totals = mapped.sum(dim=1, keepdim=True)
    empty = totals == 0
    mapped = torch.where(empty, torch.ones_like(mapped), mapped)
    totals = torch.where(empty, torch.full_like(totals, mapped.shape[1]), totals)
    return mapped / totals


def _log1p_exp(values: torch.Tensor) -> torch.Tensor:
    """``log(1 + exp(x))`` without overflow (numpy's ``logaddexp(0, x)``)."""
    return torch.clamp(values, min=0.0) + torch.log1p(torch.exp(-torch.abs(values)))


def _log_probabilities(x: torch.Tensor, float64_logs: bool) -> torch.Tensor:
    """``log(max(p, tiny))`` in the input's precision (float32 or float64), as numpy's rule.

    The calibrators validate X as float32 or float64, so any other dtype
    becomes float64 before the log; ``float64_logs`` forces float64.
    """
    # The smallest normal float64 and float32 are literals: TorchScript reads no globals.
    if float64_logs or (x.dtype != torch.float32 and x.dtype != torch.float64):
        return torch.log(torch.clamp(x.to(torch.float64), min=2.2250738585072014e-308))
    # tiny of x's own dtype, chosen by the data rather than by a dtype branch, which a trace
    # would freeze at the example's dtype: float64's tiny is 0 once rounded to float32.
    probe = torch.zeros_like(x[:1, :1]) + 2.2250738585072014e-308
    tiny = torch.where(probe > 0, probe, probe + 1.1754943508222875e-38)
    return torch.log(torch.maximum(x, tiny))


def _checked_columns(x: torch.Tensor, n_columns: int) -> torch.Tensor:
    """``x``, refused unless it is 2-D with ``n_columns`` columns (as ``predict_proba`` refuses).

    The checks are Python, which a trace does not record; the reshape is a
    no-op for the right shape and fails in a traced or exported graph for
    any other column count.
    """
    if not torch.jit.is_tracing():
        if x.dim() != 2:
            raise ValueError(
                "the module takes a 2-D (n, "
                + str(n_columns)
                + ") tensor, as the calibrator's X; got shape "
                + str(list(x.shape))
                + " (for binary scores pass both columns)"
            )
        if x.shape[1] != n_columns:
            raise ValueError(
                "the module got "
                + str(x.shape[1])
                + " columns, but the calibrator was fitted on "
                + str(n_columns)
            )
    return x.reshape(x.shape[0], n_columns)


class CalibratorModule(nn.Module):
    """A calibrator's input handling around its map of float64 logits to probabilities.

    The input is the calibrator's ``X``, ``(n, n_features + n_classes)``: a
    wrong number of columns or a 1-D tensor is refused (a ``ValueError``,
    as ``predict_proba`` refuses them; a traced or exported graph fails
    with a ``RuntimeError``), and a row holding NaN or an infinity gives
    NaN probabilities (``predict_proba`` refuses such rows). The logit
    block is cast to float64; with ``probabilities`` (``input="probs"``)
    it becomes ``log(max(p, tiny))`` first, in the input's own precision
    unless ``float64_logs``, as the calibrator does at ``predict_proba``.
    ``n_features`` leading feature columns (AdaptiveTS with ``n_logits``)
    pass to the map in float64, in front of the logits.

    Examples
    --------
    A calibrator fitted on probabilities gives a module that takes
    probabilities (float32 here, as a network's softmax outputs them):

    >>> import numpy as np, torch
    >>> from reliacal.calibrators import TemperatureScaling
    >>> from reliacal.datasets import make_logits
    >>> logits, y = make_logits(200, 3, random_state=0)
    >>> probs = torch.softmax(torch.as_tensor(logits, dtype=torch.float32), dim=1)
    >>> ts = TemperatureScaling(input="probs").fit(probs.numpy(), y)
    >>> module = ts.to_torch()
    >>> out = module(probs[:5])
    >>> out.dtype, bool(np.allclose(out.numpy(), ts.predict_proba(probs[:5].numpy()), atol=1e-6))
    (torch.float64, True)
    """

    def __init__(
        self,
        core: nn.Module,
        *,
        n_classes: int,
        n_features: int = 0,
        probabilities: bool = False,
        float64_logs: bool = False,
    ):
        super().__init__()
        self.core = core
        self.n_classes = int(n_classes)
        self.n_features = int(n_features)
        self.probabilities = probabilities
        self.float64_logs = float64_logs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _checked_columns(x, self.n_features + self.n_classes)
        invalid = ~torch.isfinite(x).all(dim=1, keepdim=True)
        logits = x[:, self.n_features :]
        if self.probabilities:
            logits = _log_probabilities(logits, self.float64_logs)
        inputs = logits.to(torch.float64)
        if self.n_features > 0:
            inputs = torch.cat([x[:, : self.n_features].to(torch.float64), inputs], dim=1)
        out = self.core(inputs)
        return torch.where(invalid, torch.full_like(out, float("nan")), out)


class IdentityMap(nn.Module):
    """``softmax(z)``: the uncalibrated model (AutoCalibrator's ``"identity"``).

    Examples
    --------
    >>> import torch
    >>> IdentityMap()(torch.tensor([[0.0, 0.0]], dtype=torch.float64))
    tensor([[0.5000, 0.5000]], dtype=torch.float64)
    """

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits, dim=1)


class TemperatureMap(nn.Module):
    """``softmax(z / T)``, with each row shifted by its maximum (so ``z / T`` cannot overflow)."""

    def __init__(self, temperature: float):
        super().__init__()
        self.register_buffer("temperature", _constant(temperature))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        shifted = logits - logits.max(dim=1, keepdim=True).values
        return torch.softmax(shifted / self.temperature, dim=1)


class LinearLogitMap(nn.Module):
    """``softmax(z * w + b)`` (vector scaling) or ``softmax(z W^T + b)`` (matrix scaling)."""

    def __init__(self, coef, intercept):
        super().__init__()
        coef = np.asarray(coef, dtype=np.float64)
        self.matrix = coef.ndim == 2
        # Stored transposed, so that forward is one product.
        self.register_buffer("coef", _constant(coef.T if self.matrix else coef))
        self.register_buffer("intercept", _constant(intercept))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if self.matrix:
            calibrated = torch.matmul(logits, self.coef)
        else:
            calibrated = logits * self.coef
        return torch.softmax(calibrated + self.intercept, dim=1)


class EnsembleTemperatureMap(nn.Module):
    """``w_0 softmax(z / T) + w_1 softmax(z) + w_2 / K`` (ensemble temperature scaling)."""

    def __init__(self, temperature: float, weights):
        super().__init__()
        self.register_buffer("temperature", _constant(temperature))
        self.register_buffer("weights", _constant(weights))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        scaled = torch.softmax(logits / self.temperature, dim=1)
        plain = torch.softmax(logits, dim=1)
        uniform = self.weights[2] / logits.shape[1]
        return self.weights[0] * scaled + self.weights[1] * plain + uniform


def _padded(rows: list[np.ndarray], fill: float) -> np.ndarray:
    """Stack 1-D arrays of different lengths into ``(m, longest)``, padded with ``fill``."""
    longest = max(1, max(len(row) for row in rows))
    out = np.full((len(rows), longest), fill, dtype=np.float64)
    for index, row in enumerate(rows):
        out[index, : len(row)] = row
    return out


def _isotonic_breakpoints(knots: np.ndarray, values: np.ndarray):
    """The knots that shape ``np.interp(x, knots, values)``: ends of constant runs only.

    Inside a run of equal values the interpolation is that constant, so its
    interior knots can go; the map is unchanged and the lookup much smaller.
    """
    if len(knots) <= 2:
        return knots, values
    keep = np.ones(len(knots), dtype=bool)
    keep[1:-1] = (values[1:-1] != values[:-2]) | (values[1:-1] != values[2:])
    return knots[keep], values[keep]


class OneVsRestMap(nn.Module):
    """A binary map per class on the one-vs-rest log-odds, renormalised (classic calibrators).

    ``kind`` is ``"platt"`` (``sigmoid(a s + b)``), ``"beta"`` (``sigmoid(a
    (-log(1 + e^-s)) + c log(1 + e^s) + b)``), ``"isotonic"`` (linear
    interpolation between knots, constant beyond them) or ``"binning"``
    (the value of the bin: the number of edges at or below the score). With
    two classes one map on the positive class's log-odds gives ``[1 - m,
    m]``; a row whose maps all give 0 becomes uniform. Build one with
    :meth:`platt`, :meth:`beta`, :meth:`isotonic` or :meth:`binning`.

    Examples
    --------
    >>> import numpy as np, torch
    >>> binary = OneVsRestMap.platt(2, coef=np.array([1.0]), intercept=np.array([0.0]))
    >>> binary(torch.tensor([[0.0, 0.0]], dtype=torch.float64))
    tensor([[0.5000, 0.5000]], dtype=torch.float64)
    """

    @classmethod
    def platt(cls, n_classes: int, coef, intercept) -> OneVsRestMap:
        """``sigmoid(coef_m s + intercept_m)`` per map (``coef``, ``intercept``: ``(m,)``)."""
        return cls("platt", n_classes, coef=coef, intercept=intercept)

    @classmethod
    def beta(cls, n_classes: int, coef, intercept) -> OneVsRestMap:
        """Beta calibration per map (``coef``: ``(m, 2)``, ``intercept``: ``(m,)``)."""
        return cls("beta", n_classes, coef=coef, intercept=intercept)

    @classmethod
    def isotonic(cls, n_classes: int, knots, values) -> OneVsRestMap:
        """``np.interp(s, knots_m, values_m)`` per map (lists of 1-D arrays)."""
        pairs = [_isotonic_breakpoints(x, y) for x, y in zip(knots, values)]
        return cls("isotonic", n_classes, knots=pairs)

    @classmethod
    def binning(cls, n_classes: int, edges, values) -> OneVsRestMap:
        """``values_m[number of edges_m at or below s]`` per map (``len(values_m) = len(edges_m) + 1``)."""
        return cls("binning", n_classes, knots=list(zip(edges, values)))

    def __init__(self, kind: str, n_classes: int, *, coef=None, intercept=None, knots=None):
        super().__init__()
        self.kind = kind
        self.binary = n_classes == 2
        # Every kind has every buffer (empty when unused): torch.jit.script compiles all
        # branches of forward, so each attribute must exist.
        empty = np.zeros((0, 0))
        if kind in ("platt", "beta"):
            coef, intercept, xs, ys, sizes = coef, intercept, empty, empty, []
        else:
            # knots: one (x, y) pair of arrays per map; padded x are +inf (never at or below
            # a score), so they never count in a lookup.
            xs = _padded([x for x, _ in knots], math.inf)
            ys = _padded([y for _, y in knots], 0.0)
            coef, intercept, sizes = np.zeros(0), np.zeros(0), [len(x) for x, _ in knots]
        self.register_buffer("coef", _constant(coef))
        self.register_buffer("intercept", _constant(intercept))
        self.register_buffer("knot_x", _constant(xs))
        self.register_buffer("knot_y", _constant(ys))
        self.register_buffer("n_knots", torch.as_tensor(np.array(sizes, dtype=np.int64)))

    def _lookup(self, scores: torch.Tensor) -> torch.Tensor:
        # count[i, m]: knots (or edges) of map m at or below score i (searchsorted "right").
        below = (self.knot_x[None, :, :] <= scores[:, :, None]).to(torch.int64)
        count = below.sum(dim=2)
        if self.kind == "binning":
            return torch.gather(self.knot_y.expand(scores.shape[0], -1, -1), 2, count[:, :, None])[
                :, :, 0
            ]
        last = self.n_knots[None, :] - 1
        right = torch.minimum(count, last)
        left = torch.clamp(count - 1, min=0)
        left = torch.minimum(left, last)
        xs = self.knot_x.expand(scores.shape[0], -1, -1)
        ys = self.knot_y.expand(scores.shape[0], -1, -1)
        x0 = torch.gather(xs, 2, left[:, :, None])[:, :, 0]
        x1 = torch.gather(xs, 2, right[:, :, None])[:, :, 0]
        y0 = torch.gather(ys, 2, left[:, :, None])[:, :, 0]
        y1 = torch.gather(ys, 2, right[:, :, None])[:, :, 0]
        width = x1 - x0
        inside = width > 0
        fraction = (scores - x0) / torch.where(inside, width, torch.ones_like(width))
        return torch.where(inside, y0 + fraction * (y1 - y0), y0)

    def _maps(self, scores: torch.Tensor) -> torch.Tensor:
        if self.kind == "platt":
            return torch.sigmoid(scores * self.coef + self.intercept)
        if self.kind == "beta":
            # coef (m, 2) weighs [-log(1 + e^-s), log(1 + e^s)] of each map's score.
            low = -_log1p_exp(-scores)
            high = _log1p_exp(scores)
            return torch.sigmoid(low * self.coef[:, 0] + high * self.coef[:, 1] + self.intercept)
        return self._lookup(scores)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        scores = one_vs_rest_log_odds(logits)
        if self.binary:
            scores = scores[:, 1:]
        return one_vs_rest_probabilities(self._maps(scores), self.binary)


class TopLabelBinningMap(nn.Module):
    """Top-label histogram binning: the predicted class gets its bin's accuracy.

    The other classes share the rest in proportion to their uncalibrated
    probabilities (uniformly when those all underflow).
    """

    def __init__(self, edges, values):
        super().__init__()
        self.register_buffer("edges", _constant(edges))
        self.register_buffer("values", _constant(values))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        mask = _top_mask(logits)
        top_log_odds = (one_vs_rest_log_odds(logits) * mask).sum(dim=1)
        count = (self.edges[None, :] <= top_log_odds[:, None]).to(torch.int64).sum(dim=1)
        confidence = self.values[count]
        others = torch.exp(logits - logits.max(dim=1, keepdim=True).values) * (1.0 - mask)
        totals = others.sum(dim=1, keepdim=True)
        empty = totals == 0
        others = torch.where(empty, 1.0 - mask, others)
        totals = torch.where(empty, torch.full_like(totals, logits.shape[1] - 1), totals)
        rest = others / totals * (1.0 - confidence)[:, None]
        return rest * (1.0 - mask) + mask * confidence[:, None]
