"""The student network of DIRECTOR: the shared reverse step and its parts.

These modules know nothing of the teacher's library; ``director.py`` wires them
to a backbone adapter. Shapes: tokens ``h`` are ``(B, N, D)``; step indices
``t`` are ``(B,)`` integers (one per row, so teacher-forced steps of several
depths can share one batch); masks are boolean ``(B, N)`` with ``True`` for
real tokens.

Reference: Dao et al., "Diffusion-Inspired Reconfiguration of Transformers for
Uncertainty Calibration", arXiv 2602.08920; the block follows DiT (Peebles and
Xie, ICCV 2023), adaptive LayerNorm with zero-initialised modulation.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

STEP_FREQUENCY_DIM = 256
STEP_MAX_PERIOD = 1e4
SIGMA_FLOOR = 1e-6


def _zero_linear(n_in: int, n_out: int) -> nn.Linear:
    # Built as an ordinary Linear first, so that it draws from the RNG as one
    # would and the modules created after it get the same initialisation.
    linear = nn.Linear(n_in, n_out)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


def sinusoidal_step_embedding(
    steps: Tensor, dim: int = STEP_FREQUENCY_DIM, max_period: float = STEP_MAX_PERIOD
) -> Tensor:
    """Sinusoidal features of integer step indices, as in transformer positions.

    ``emb[:, i] = cos(t * f_i)`` and ``emb[:, half + i] = sin(t * f_i)`` with
    ``f_i = max_period ** (-i / half)``, ``half = dim // 2`` (Vaswani et al.,
    2017; the DiT timestep embedding).

    Parameters
    ----------
    steps : Tensor of shape (B,)
        Step indices (any numeric dtype).
    dim : int, default=256
        Output width; must be even.
    max_period : float, default=1e4
        Longest period of the features.

    Returns
    -------
    Tensor of shape (B, dim), float32.

    Examples
    --------
    >>> emb = sinusoidal_step_embedding(torch.tensor([0, 3]), dim=4)
    >>> emb[0].tolist()
    [1.0, 1.0, 0.0, 0.0]
    """
    if dim % 2:
        raise ValueError(f"dim must be even, got {dim}")
    half = dim // 2
    exponents = torch.arange(half, dtype=torch.float32, device=steps.device) / half
    frequencies = torch.exp(-math.log(max_period) * exponents)
    angles = steps.float()[:, None] * frequencies[None, :]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class StepEmbedding(nn.Module):
    """Step index -> conditioning vector: sinusoidal(256) -> Linear -> SiLU -> Linear.

    Parameters
    ----------
    width : int
        Token width ``D`` of the transition network.

    Examples
    --------
    >>> StepEmbedding(8)(torch.tensor([1, 2, 3])).shape
    torch.Size([3, 8])
    """

    def __init__(self, width: int):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(STEP_FREQUENCY_DIM, width), nn.SiLU(), nn.Linear(width, width)
        )

    def forward(self, steps: Tensor) -> Tensor:
        return self.mlp(sinusoidal_step_embedding(steps).to(self.mlp[0].weight.dtype))


class AdaLNBlock(nn.Module):
    """A DiT block: self-attention and MLP halves under adaptive LayerNorm.

    For each half, ``x = LN(h) * (1 + scale) + shift`` (LayerNorm without
    affine parameters) and ``h <- h + gate * F(x)``; ``shift, scale, gate`` of
    both halves come from the conditioning vector through
    ``SiLU -> Linear(D, 6 D)``. That Linear starts at zero, so every gate is 0
    and the block is the identity map at initialisation.

    Parameters
    ----------
    width : int
        Token width ``D``.
    num_heads : int
        Attention heads; must divide ``width``.
    mlp_ratio : float, default=4.0
        Hidden width of the MLP half, as a multiple of ``width``.

    Examples
    --------
    >>> block = AdaLNBlock(8, num_heads=2)
    >>> h = torch.randn(2, 5, 8)
    >>> torch.equal(block(h, torch.randn(2, 8)), h)
    True
    """

    def __init__(self, width: int, num_heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        if width % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide the width {width}")
        self.num_heads = num_heads
        hidden = int(round(width * mlp_ratio))
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(width, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, width)
        )
        self.modulation = nn.Sequential(nn.SiLU(), _zero_linear(width, 6 * width))

    def _attend(self, x: Tensor, mask: Tensor | None) -> Tensor:
        batch, tokens, width = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, width // self.num_heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4)
        attn_mask = None if mask is None else mask[:, None, None, :]
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask)
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, width))

    def forward(self, h: Tensor, condition: Tensor, mask: Tensor | None = None) -> Tensor:
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = (
            self.modulation(condition).unsqueeze(1).chunk(6, dim=-1)
        )
        h = h + gate_a * self._attend(self.norm1(h) * (1 + scale_a) + shift_a, mask)
        return h + gate_m * self.mlp(self.norm2(h) * (1 + scale_m) + shift_m)


class TransitionNetwork(nn.Module):
    """The shared, step-conditioned network ``g = Net(h_{t-1}, t)``.

    Parameters
    ----------
    width : int
        Token width ``D``.
    depth : int, default=1
        Number of adaptive-layer-norm blocks in sequence.
    num_heads : int, default=1
        Attention heads per block.

    Examples
    --------
    >>> net = TransitionNetwork(8, depth=2, num_heads=2)
    >>> h = torch.randn(3, 4, 8)
    >>> torch.equal(net(h, torch.tensor([1, 2, 3])), h)  # identity at initialisation
    True
    """

    def __init__(self, width: int, depth: int = 1, num_heads: int = 1):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.step_embedding = StepEmbedding(width)
        self.blocks = nn.ModuleList(AdaLNBlock(width, num_heads) for _ in range(depth))

    def forward(self, h: Tensor, steps: Tensor, mask: Tensor | None = None) -> Tensor:
        condition = self.step_embedding(steps)
        for block in self.blocks:
            h = block(h, condition, mask)
        return h


def _projection_head(width: int, dropout: float) -> nn.Sequential:
    # Zero start: the head's output is exactly GELU(0) = 0, so the step begins
    # as the transition network alone (the identity), yet gradients reach the
    # weights because GELU'(0) = 1/2.
    linear = _zero_linear(width, width)
    layers = [nn.LayerNorm(width), linear, nn.GELU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


class MeanHead(nn.Module):
    """Step mean ``mu = g + Dropout(GELU(Linear(LN(g))))``; starts as ``mu = g``.

    Parameters
    ----------
    width : int
        Token width ``D``.
    dropout : float, default=0.1
        Dropout after the GELU (active in training mode only).

    Examples
    --------
    >>> g = torch.randn(2, 3, 8)
    >>> torch.equal(MeanHead(8)(g), g)
    True
    """

    def __init__(self, width: int, dropout: float = 0.1):
        super().__init__()
        self.residual = _projection_head(width, dropout)

    def forward(self, g: Tensor) -> Tensor:
        return g + self.residual(g)


def inverse_softplus(value: float) -> float:
    """``x`` with ``softplus(x) = log(1 + exp(x)) = value`` (``value > 0``).

    Examples
    --------
    >>> round(float(F.softplus(torch.tensor(inverse_softplus(0.01)))), 6)
    0.01
    """
    if value <= 0:
        raise ValueError(f"softplus only reaches positive values, got {value}")
    return value + math.log(-math.expm1(-value))


class NoiseHead(nn.Module):
    """Step noise level ``sigma = softplus(GELU(Linear(LN(g))) + b) + 1e-6``.

    GELU is bounded below by about -0.17, so ``softplus`` of it alone could not
    go below 0.61; the learned per-channel offset ``b`` (started at
    ``softplus^{-1}(noise_init - 1e-6)``, with the Linear at zero) lets
    ``sigma`` start at exactly ``noise_init`` and go lower or higher in training.

    Parameters
    ----------
    width : int
        Token width ``D``.
    noise_init : float, default=1e-2
        ``sigma`` at initialisation; must exceed 1e-6.

    Examples
    --------
    >>> sigma = NoiseHead(8, noise_init=0.05)(torch.randn(2, 3, 8))
    >>> bool(torch.allclose(sigma, torch.full_like(sigma, 0.05)))
    True
    """

    def __init__(self, width: int, noise_init: float = 1e-2):
        super().__init__()
        if not noise_init > SIGMA_FLOOR:
            raise ValueError(f"noise_init must be greater than {SIGMA_FLOOR}, got {noise_init}")
        self.projection = _projection_head(width, dropout=0.0)
        self.offset = nn.Parameter(torch.full((width,), inverse_softplus(noise_init - SIGMA_FLOOR)))

    def forward(self, g: Tensor) -> Tensor:
        return F.softplus(self.projection(g) + self.offset) + SIGMA_FLOOR


class ReverseStep(nn.Module):
    """One reverse step: ``g = Net(h, t)``, returns ``(mu(g), sigma(g))``.

    The sampled next state is ``h_t = mu + sigma * eps`` with ``eps ~ N(0, I)``.
    The same module (the same weights) serves every step ``t``.

    Parameters
    ----------
    width : int
        Token width ``D``.
    depth : int, default=1
        Adaptive-LayerNorm blocks in the transition network.
    num_heads : int, default=1
        Attention heads per block.
    noise_init : float, default=1e-2
        Initial noise level.

    Examples
    --------
    >>> step = ReverseStep(8, num_heads=2, noise_init=0.1)
    >>> h = torch.randn(2, 3, 8)
    >>> with torch.no_grad():
    ...     mu, sigma = step(h, torch.tensor([1, 1]))
    >>> torch.equal(mu, h), round(sigma.mean().item(), 4)
    (True, 0.1)
    """

    def __init__(self, width: int, depth: int = 1, num_heads: int = 1, noise_init: float = 1e-2):
        super().__init__()
        self.transition = TransitionNetwork(width, depth=depth, num_heads=num_heads)
        self.mean_head = MeanHead(width)
        self.noise_head = NoiseHead(width, noise_init=noise_init)

    def forward(
        self, h: Tensor, steps: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        g = self.transition(h, steps, mask)
        return self.mean_head(g), self.noise_head(g)


class ResidualMLP(nn.Module):
    """Token-wise ``h + Linear(GELU(Linear(LN(h))))``; starts as the identity.

    The second Linear starts at zero so that, at initialisation, the student's
    read-out equals the teacher's final norm, pooling and classifier.

    Parameters
    ----------
    width : int
        Token width ``D`` (also the hidden width).

    Examples
    --------
    >>> h = torch.randn(2, 3, 8)
    >>> torch.equal(ResidualMLP(8)(h), h)
    True
    """

    def __init__(self, width: int):
        super().__init__()
        # Created before the first Linear, as it always was: the order fixes the RNG draws.
        out = _zero_linear(width, width)
        self.residual = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(), out)

    def forward(self, h: Tensor) -> Tensor:
        return h + self.residual(h)


def key_padding_mask(context: object) -> Tensor | None:
    """Boolean ``(B, N)`` mask of the keys a block may attend to, from an adapter context.

    Adapters pass the teacher's blocks an opaque ``context`` (None for images;
    for text, the attention mask in the form the blocks expect). The student's
    own attention needs only which tokens are real: a boolean ``(B, 1, Q, N)``
    mask (``True`` = attend), an additive float ``(B, 1, Q, N)`` mask (0 =
    attend) or a ``(B, N)`` 0/1 mask. Encoder masks are the same for every
    query row, so the first row is read.

    Examples
    --------
    >>> mask = torch.tensor([[1, 1, 0]]).bool()[:, None, None, :]
    >>> key_padding_mask(mask).tolist()
    [[True, True, False]]
    >>> key_padding_mask(None) is None
    True
    """
    if context is None:
        return None
    if isinstance(context, Tensor):
        if context.ndim == 4:
            row = context[:, 0, 0, :]
            return row if row.dtype == torch.bool else row == 0
        if context.ndim == 2:
            return context.bool()
    raise ValueError(
        "cannot read a key mask from the adapter's block context of type "
        f"{type(context).__name__}{getattr(context, 'shape', '')}: expected None, a (B, N) "
        "mask or a (B, 1, Q, N) boolean or additive mask"
    )


def teacher_num_heads(teacher: nn.Module, width: int) -> int:
    """The student's attention head count: the teacher adapter's, or 1 if unknown.

    Also 1 when the teacher's count does not divide ``width``.

    Examples
    --------
    >>> from reliacal.backbones import as_backbone
    >>> plain = as_backbone(nn.Sequential(nn.Flatten(), nn.Linear(8, 3)), features="0", head="1")
    >>> teacher_num_heads(plain, 8)
    1
    >>> vit = as_backbone("vit_tiny_patch16_224", num_classes=3,
    ...                   model_kwargs=dict(img_size=16, patch_size=8, embed_dim=8, depth=1,
    ...                                     num_heads=2))
    >>> teacher_num_heads(vit, 8)
    2
    """
    heads = teacher.num_heads
    if heads is None or width % heads:
        return 1
    return heads


class DirectorStudent(nn.Module):
    """The reconfigured network: embedding, shared reverse step, read-out.

    ``backbone`` is a copy of the teacher's adapter that shares the teacher's
    first ``L - k`` blocks (frozen). Without an anchor it holds no later block
    (they are replaced by ``nn.Identity`` and never called); anchored, it
    shares the last ``k`` blocks too (frozen), and step ``t`` reads
    ``Net(block_t(h_{t-1}), t)`` instead of ``Net(h_{t-1}, t)``: the shared
    network then learns a correction of the teacher's step (and the noise),
    and the student starts as the teacher itself. Its embedding, final norm,
    pooling and classifier are its own copies, initialised from the teacher's.
    With ``k == L`` the embedding trains; with ``k < L`` it stays frozen, as
    do the shared front blocks. States are the plain block boundaries:
    ``h_t`` is the output of teacher block ``t``.

    Built by :func:`reliacal.nn.build_director_student`; see ``DiffusionReconfigurer`` for use.
    """

    def __init__(
        self,
        backbone: nn.Module,
        step: ReverseStep,
        depth: int,
        n_reconfigured: int,
        anchored: bool = False,
    ):
        super().__init__()
        self.backbone = backbone
        self.step = step
        self.readout_mlp = ResidualMLP(step.noise_head.offset.numel())
        self.depth = depth
        self.n_reconfigured = n_reconfigured
        self.anchored = anchored

    def train(self, mode: bool = True) -> DirectorStudent:
        super().train(mode)
        # The teacher's blocks it calls are frozen: their dropout must stay off, or
        # the path would carry dropout noise that the noise head does not model.
        blocks = self.backbone.blocks
        n_shared = self.depth if self.anchored else self.depth - self.n_reconfigured
        for block in blocks[:n_shared]:
            block.eval()
        return self

    def step_input(self, index: int, h: Tensor, context: object) -> Tensor:
        """What the shared step reads at step ``index + 1``: ``h``, or ``block_index(h)`` anchored."""
        if not self.anchored:
            return h
        return self.backbone.apply_block(index, h, context)

    @property
    def first_step(self) -> int:
        """Index ``t`` of the first reconfigured step (steps run ``first_step..depth``)."""
        return self.depth - self.n_reconfigured + 1

    def start(self, x: object) -> tuple[Tensor, object]:
        """Return ``(h_{L-k}, context)``: the embedding followed by the frozen front blocks."""
        h, context = self.backbone.embed(x)
        for index in range(self.depth - self.n_reconfigured):
            h = self.backbone.apply_block(index, h, context)
        return h, context

    def rollout(
        self,
        h: Tensor,
        context: object,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Sample ``h_t = mu(h_{t-1}, t) + sigma(h_{t-1}, t) * eps`` for the reconfigured steps."""
        mask = key_padding_mask(context)
        for t in range(self.first_step, self.depth + 1):
            steps = torch.full((h.shape[0],), t, device=h.device)
            mu, sigma = self.step(self.step_input(t - 1, h, context), steps, mask)
            if generator is None:
                noise = torch.randn_like(mu)
            else:
                noise = torch.randn(mu.shape, generator=generator, device=mu.device).to(mu.dtype)
            h = mu + sigma * noise
        return h

    def readout(self, h: Tensor, context: object) -> Tensor:
        """Logits ``(B, K)`` from the last state: residual MLP, final norm, pooling, classifier."""
        return self.backbone.classify(self.backbone.finish(self.readout_mlp(h), context))

    def sample_logits(
        self, x: object, n_draws: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """Logits of ``n_draws`` sampled paths per input, shape ``(n_draws, B, K)``.

        The embedding and frozen front run once; the paths run as one batch.
        """
        h, context = self.start(x)
        return self.sample_from_state(h, context, n_draws, generator)

    def sample_from_state(
        self,
        h: Tensor,
        context: object,
        n_draws: int,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """:meth:`sample_logits` from a given start state ``h_{L-k}``."""
        batch = h.shape[0]
        h = h.repeat(n_draws, *([1] * (h.ndim - 1)))
        if isinstance(context, Tensor):
            context = context.repeat(n_draws, *([1] * (context.ndim - 1)))
        logits = self.readout(self.rollout(h, context, generator), context)
        return logits.reshape(n_draws, batch, -1)


def build_student(
    teacher: nn.Module,
    *,
    n_reconfigured: int,
    depth: int = 1,
    noise_init: float = 1e-2,
    anchored: bool = False,
) -> DirectorStudent:
    """Build a :class:`DirectorStudent` for a frozen teacher adapter.

    Parameters
    ----------
    teacher : BackboneAdapter
        Supports reconfiguration; its parameters should already be frozen.
    n_reconfigured : int
        ``k``, the number of last teacher blocks the shared step replaces.
    depth : int, default=1
        Adaptive-LayerNorm blocks in the transition network.
    noise_init : float, default=1e-2
        Initial noise level of every step.
    anchored : bool, default=False
        Keep the last ``k`` teacher blocks (shared, frozen) and feed the shared
        step their output (see :class:`DirectorStudent`).

    Returns
    -------
    DirectorStudent
    """
    blocks = teacher.blocks
    n_frozen = len(blocks) - n_reconfigured
    n_shared = len(blocks) if anchored else n_frozen
    # deepcopy's memo decides what is copied: the front blocks (and anchors) are
    # shared (not duplicated) and the replaced blocks become placeholders, so only
    # the embedding and read-out parts of the teacher are copied.
    memo: dict[int, object] = {id(block): block for block in blocks[:n_shared]}
    memo.update({id(block): nn.Identity() for block in blocks[n_shared:]})
    backbone = copy.deepcopy(teacher, memo)
    shared = {id(p) for block in blocks[:n_shared] for p in block.parameters()}
    readout = {id(parameter) for parameter in backbone.readout_parameters()}
    for parameter in backbone.parameters():
        if id(parameter) in shared:
            parameter.requires_grad_(False)
        else:
            # Without front blocks to feed, the embedding is the start of the path
            # and trains; behind frozen blocks it must stay the teacher's.
            parameter.requires_grad_(id(parameter) in readout or n_frozen == 0)
    width = teacher.num_features
    step = ReverseStep(
        width,
        depth=depth,
        num_heads=teacher_num_heads(teacher, width),
        noise_init=noise_init,
    )
    return DirectorStudent(
        backbone, step, depth=len(blocks), n_reconfigured=n_reconfigured, anchored=anchored
    )


class DirectorTrainingModule(nn.Module):
    """Frozen teacher and trainable student together, for the shared training loop.

    ``forward(x)`` returns ``(logits, mean_error, noise_error, sigma_squared)``,
    each with one row per sample, so that the loss can be computed from the
    outputs alone (as DDP requires). Averages run over the reconfigured steps
    ``t``, the real tokens (padding excluded) and the channels:

    - ``mean_error[b] = mean ||mu(h^q_{t-1}, t) - h^q_t||^2``, teacher-forced
      on the teacher's recorded states;
    - ``noise_error[b]``: how far the noise is from ``sigma^q = noise_target``.
      With ``noise_target=0`` (a softmax-attention teacher is deterministic)
      it is ``mean sigma^2``, the squared error to 0. With ``noise_target > 0``
      it is the Gaussian KL with equal means,
      ``mean [log(s / sigma) + sigma^2 / (2 s^2) - 1/2]``, ``s = noise_target``:
      zero at ``sigma = s``, and a squared error would barely pull a
      ``sigma`` of 0.01 towards an ``s`` of 0.1 while this pulls on the log scale;
    - ``sigma_squared[b] = mean sigma^2``, whose root is the RMS noise scale;
    - ``logits``: in training mode from one path sampled by the student's own
      rollout (reparameterised, so the cross-entropy trains the noise head);
      in evaluation mode ``log`` of the mean of ``n_eval_draws`` sampled
      softmaxes, the quantity ``predict_proba`` reports.

    The teacher stays in evaluation mode whatever ``train()`` is asked.
    """

    def __init__(
        self,
        teacher: nn.Module,
        student: DirectorStudent,
        n_eval_draws: int = 1,
        noise_target: float = 0.0,
    ):
        super().__init__()
        if noise_target < 0:
            raise ValueError(f"noise_target must be >= 0, got {noise_target}")
        self.teacher = teacher
        self.student = student
        self.n_eval_draws = n_eval_draws
        self.noise_target = noise_target

    def train(self, mode: bool = True) -> DirectorTrainingModule:
        super().train(mode)
        self.teacher.eval()
        return self

    def forward(self, x: object) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        student = self.student
        n_frozen = student.depth - student.n_reconfigured
        with torch.no_grad():
            h, context = self.teacher.embed(x)
            for index in range(n_frozen):
                h = self.teacher.apply_block(index, h, context)
            states = [h]
            for index in range(n_frozen, student.depth):
                states.append(self.teacher.apply_block(index, states[-1], context))
        mask = key_padding_mask(context)
        batch, k = states[0].shape[0], student.n_reconfigured
        # Anchored, the step reads block_t(h^q_{t-1}), which is h^q_t itself (the
        # teacher's blocks are deterministic in eval mode): no block runs twice.
        previous = torch.cat(states[1:] if student.anchored else states[:-1])
        steps = torch.arange(student.first_step, student.depth + 1, device=previous.device)
        mu, sigma = student.step(
            previous, steps.repeat_interleave(batch), None if mask is None else mask.repeat(k, 1)
        )
        target = torch.cat(states[1:])
        weights = torch.ones(previous.shape[:2], device=previous.device, dtype=mu.dtype)
        if mask is not None:
            weights = mask.repeat(k, 1).to(mu.dtype)
        per_token = weights / weights.sum(dim=1, keepdim=True) / mu.shape[-1]

        def per_sample(values: Tensor) -> Tensor:
            error = (values.float().sum(dim=-1) * per_token.float()).sum(dim=1)
            return error.reshape(k, batch).mean(dim=0)

        mean_error = per_sample((mu - target) ** 2)
        sigma_squared = per_sample(sigma**2)
        if self.noise_target:
            ratio = sigma.float() / self.noise_target
            noise_error = per_sample(0.5 * ratio**2 - torch.log(ratio) - 0.5)
        else:
            noise_error = sigma_squared

        if n_frozen:
            start, start_context = states[0], context
        else:
            start, start_context = student.backbone.embed(x)
        if self.training:
            logits = student.sample_from_state(start, start_context, 1)[0]
        else:
            sampled = student.sample_from_state(start, start_context, self.n_eval_draws)
            log_probs = torch.log_softmax(sampled.float(), dim=-1)
            logits = torch.logsumexp(log_probs, dim=0) - math.log(self.n_eval_draws)
        return logits, mean_error, noise_error, sigma_squared


# What is summed per phase: the three loss terms, then the mean of sigma^2 (not a loss
# term: the noise scale is read from it).
_SUMMED = ("mean_matching", "noise_matching", "cross_entropy", "sigma_squared")


class WeightedDirectorLoss:
    """``lam_mean * mean_matching + lam_var * noise_matching + lam_ce * CE``.

    It also sums each term, and the mean of ``sigma^2`` (the fourth output of
    :class:`DirectorTrainingModule`), detached, per phase (training steps run
    with gradients enabled, validation under ``no_grad``), so that the
    estimator can report per-epoch component and noise-scale histories. A
    3-tuple of outputs (from before the fourth existed) reads its noise
    matching as the mean of ``sigma^2``, which it was then.
    """

    def __init__(self, lambda_mean: float, lambda_var: float, lambda_ce: float):
        self.weights = (lambda_mean, lambda_var, lambda_ce)
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, dict[str, Any]] = {
            phase: dict.fromkeys(_SUMMED, 0.0) for phase in ("train", "val")
        }
        self.counts = {"train": 0, "val": 0}
        # Root mean square of sigma over one training batch, per optimiser step.
        self.step_sigmas: list[torch.Tensor] = []

    def __call__(self, outputs: tuple[torch.Tensor, ...], y: torch.Tensor) -> torch.Tensor:
        logits, mean_error, noise_error, *rest = outputs
        sigma_squared = rest[0] if rest else noise_error
        terms = (mean_error.mean(), noise_error.mean(), F.cross_entropy(logits.float(), y))
        phase = "train" if torch.is_grad_enabled() else "val"
        n = int(y.shape[0])
        statistics = (*terms, sigma_squared.mean())
        for name, value in zip(_SUMMED, statistics):
            # Kept as tensors: reading them every step would synchronise a GPU.
            self.sums[phase][name] = self.sums[phase][name] + value.detach().double() * n
        self.counts[phase] += n
        if phase == "train":
            self.step_sigmas.append(statistics[3].detach().sqrt())
        return sum(weight * term for weight, term in zip(self.weights, terms))

    def epoch_means(self) -> dict[str, float]:
        means = {
            f"{phase}_{name}": float(total) / self.counts[phase]
            for phase, totals in self.sums.items()
            if self.counts[phase]
            for name, total in totals.items()
        }
        for phase in ("train", "val"):
            if f"{phase}_sigma_squared" in means:
                means[f"{phase}_sigma"] = means.pop(f"{phase}_sigma_squared") ** 0.5
        if self.step_sigmas:
            # One device-to-host copy, not one sync per step.
            means["train_sigma_steps"] = torch.stack(self.step_sigmas).tolist()
        self.reset()
        return means
