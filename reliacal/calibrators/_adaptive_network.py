"""The AdaTS network and its loss (Joy et al., AAAI 2023), apart from the estimator.

:class:`_AdaptiveTemperatureNetwork` is a variational auto-encoder over the
frozen classifier's features whose latent code, compared against one
Gaussian prior per class, drives a temperature head;
:func:`_adaptive_ts_loss` is reconstruction + KL + cross-entropy of the
temperature-scaled logits. :mod:`reliacal.calibrators.adaptive` holds the
estimator around them, :mod:`reliacal.calibrators._adaptive_stack` the
members' networks stacked into one for batched training.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

# Scales and temperatures are floored here, as in the authors' code, so that
# a collapsing softplus can never divide by zero.
_MIN_SCALE = 1e-3
_PUBLISHED_WIDTHS = (1024, 512, 512)
# Columns of confidence_statistics: top log-probability, top-2 margin, entropy.
_N_CONFIDENCE_STATISTICS = 3


def _mlp(sizes: tuple[int, ...], *, final_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for index, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if final_activation or index < len(sizes) - 2:
            layers.append(nn.ELU())
    return nn.Sequential(*layers)


def _positive(raw: torch.Tensor) -> torch.Tensor:
    return F.softplus(raw).clamp_min(_MIN_SCALE)


def confidence_statistics(logits: torch.Tensor) -> torch.Tensor:
    """Top log-probability, its margin over the second and the entropy: (..., K) -> (..., 3)."""
    log_probabilities = torch.log_softmax(logits, dim=-1)
    # The top two as two maxima, the first masked out for the second: topk(2)'s values and,
    # but at exact ties, its gradient; topk is several times slower on the CPU.
    top, index = log_probabilities.max(dim=-1, keepdim=True)
    second = log_probabilities.scatter(-1, index, -math.inf).amax(dim=-1, keepdim=True)
    entropy = -(log_probabilities.exp() * log_probabilities).sum(dim=-1, keepdim=True)
    return torch.cat([top, top - second, entropy], dim=-1)


class _AdaptiveOutput(NamedTuple):
    logits: torch.Tensor  # (B, K) calibrated logits z / T(x)
    temperature: torch.Tensor  # (B,)
    reconstruction_nll: torch.Tensor  # (B,) -log p(h | u), Laplace with unit scale
    posterior_mean: torch.Tensor  # (B, L)
    posterior_scale: torch.Tensor  # (B, L)
    prior_mean: torch.Tensor  # (K, L)
    prior_scale: torch.Tensor  # (K, L)
    sample_weight: torch.Tensor  # (B,) weight of each sample's loss


class _AdaptiveTemperatureNetwork(nn.Module):
    """The AdaTS model: encoder, decoder, class priors and temperature head.

    ``forward((h, z, w))`` takes standardised features ``h`` (B, D), raw
    logits ``z`` (B, K) and loss weights ``w`` (B,) (optional; ones when
    omitted). The weights only ride along into the outputs, because the
    training loop's contract is that the loss comes from the module's outputs
    alone (what DistributedDataParallel needs). In training mode the latent code is sampled with the
    reparameterisation trick (torch's global generator); in evaluation mode it
    is the posterior mean, so predictions are deterministic.
    """

    def __init__(
        self,
        n_features: int,
        n_classes: int,
        latent_dim: int = 16,
        hidden_layer_sizes: tuple[int, ...] = _PUBLISHED_WIDTHS,
        temperature_hidden_sizes: tuple[int, ...] = (128, 128),
        confidence_inputs: bool = False,
    ) -> None:
        super().__init__()
        hidden = tuple(hidden_layer_sizes)
        self.encoder = _mlp((n_features, *hidden), final_activation=True)
        self.posterior_mean_head = nn.Linear(hidden[-1], latent_dim)
        self.posterior_scale_head = nn.Linear(hidden[-1], latent_dim)
        self.decoder = _mlp((latent_dim, *hidden, n_features), final_activation=False)
        self.prior_mean = nn.Parameter(torch.randn(n_classes, latent_dim))
        # softplus(0.5413) = 1: every class prior starts as a unit Gaussian around its mean.
        self.prior_raw_scale = nn.Parameter(torch.full((n_classes, latent_dim), 0.5413))
        self.confidence_inputs = confidence_inputs
        n_head_inputs = n_classes
        if confidence_inputs:
            n_head_inputs += _N_CONFIDENCE_STATISTICS
            # Set from the training rows by set_confidence_reference before training.
            self.register_buffer("reference_temperature", torch.tensor(1.0))
            self.register_buffer("statistics_mean", torch.zeros(_N_CONFIDENCE_STATISTICS))
            self.register_buffer("statistics_scale", torch.ones(_N_CONFIDENCE_STATISTICS))
        self.temperature_head = _mlp(
            (n_head_inputs, *tuple(temperature_hidden_sizes), 1), final_activation=False
        )

    def config(self) -> dict:
        """The sizes that rebuild this network (:meth:`from_config`); the weights are apart."""
        return {
            "n_features": int(self.encoder[0].in_features),
            "n_classes": int(self.prior_mean.shape[0]),
            "latent_dim": int(self.prior_mean.shape[1]),
            "hidden_layer_sizes": _linear_widths(self.encoder),
            "temperature_hidden_sizes": _linear_widths(self.temperature_head)[:-1],
            "confidence_inputs": bool(self.confidence_inputs),
        }

    @classmethod
    def from_config(cls, config: dict) -> _AdaptiveTemperatureNetwork:
        """A new network of the sizes that :meth:`config` gave (randomly initialised)."""
        sizes = ("n_features", "n_classes", "latent_dim")
        widths = ("hidden_layer_sizes", "temperature_hidden_sizes")
        valid = (
            isinstance(config, dict)
            and set(config) == {*sizes, *widths, "confidence_inputs"}
            and all(type(config[key]) is int and config[key] > 0 for key in sizes)
            and all(
                isinstance(config[key], list)
                and all(type(width) is int and width > 0 for width in config[key])
                for key in widths
            )
            and config["hidden_layer_sizes"]
            and type(config["confidence_inputs"]) is bool
        )
        if not valid:
            raise ValueError(f"the saved AdaptiveTS network has a malformed configuration {config}")
        return cls(
            config["n_features"],
            config["n_classes"],
            latent_dim=config["latent_dim"],
            hidden_layer_sizes=tuple(config["hidden_layer_sizes"]),
            temperature_hidden_sizes=tuple(config["temperature_hidden_sizes"]),
            confidence_inputs=config["confidence_inputs"],
        )

    @torch.no_grad()
    def start_at(self, temperature: float) -> None:
        """Make ``T(u)`` the constant ``temperature``: zero last weights, softplus^-1 bias.

        The hidden layers keep their random initialisation, so gradients reach
        them as soon as the last weights move away from zero.
        """
        last = self.temperature_head[-1]
        last.weight.zero_()
        # softplus^-1(t) = t + log(1 - exp(-t)), written with expm1 for small t.
        last.bias.fill_(temperature + math.log(-math.expm1(-temperature)))

    @torch.no_grad()
    def set_confidence_reference(self, logits: torch.Tensor, temperature: float) -> None:
        """Standardise the confidence inputs with these logits scaled by ``1 / temperature``."""
        statistics = confidence_statistics(logits / temperature)
        scale = statistics.std(dim=0)
        self.reference_temperature.fill_(temperature)
        self.statistics_mean.copy_(statistics.mean(dim=0))
        self.statistics_scale.copy_(torch.where(scale > 1e-12, scale, torch.ones_like(scale)))

    def posterior(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and scale of the diagonal Gaussian q(u | h)."""
        hidden = self.encoder(features)
        return self.posterior_mean_head(hidden), _positive(self.posterior_scale_head(hidden))

    def class_log_likelihoods(self, latent: torch.Tensor) -> torch.Tensor:
        """``l[b, k] = log N(u_b; m_k, diag s_k^2)``, shape (B, K)."""
        prior_scale = _positive(self.prior_raw_scale)
        standardised = (latent[:, None, :] - self.prior_mean) / prior_scale
        per_dim = -0.5 * standardised.square() - prior_scale.log() - 0.5 * math.log(2 * math.pi)
        return per_dim.sum(dim=-1)

    def temperature_of(self, latent: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Per-sample temperature ``T >= 1e-3``, shape (B,), from ``u`` (and ``z``)."""
        inputs = self.class_log_likelihoods(latent)
        if self.confidence_inputs:
            statistics = confidence_statistics(logits.to(inputs.dtype) / self.reference_temperature)
            standardised = (statistics - self.statistics_mean) / self.statistics_scale
            inputs = torch.cat([inputs, standardised], dim=-1)
        return _positive(self.temperature_head(inputs)).squeeze(-1)

    def forward(self, inputs: tuple[torch.Tensor, ...]) -> _AdaptiveOutput:
        features, logits = inputs[0], inputs[1]
        weight = inputs[2] if len(inputs) > 2 else torch.ones_like(logits[:, 0])
        mean, scale = self.posterior(features)
        latent = mean + scale * torch.randn_like(scale) if self.training else mean
        return _outputs_at(self, latent, mean, scale, features, logits, weight)

    @torch.no_grad()
    def sampled_probabilities(
        self,
        features: torch.Tensor,
        logits: torch.Tensor,
        n_draws: int,
        generator: torch.Generator,
        head_logits: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Average ``softmax(z / T(u_s))`` over ``n_draws`` draws ``u_s ~ q(u | h)``.

        ``head_logits`` (``logits`` when None) are what the temperature head
        reads with ``confidence_inputs``: the estimator passes them held
        within the calibration data's range. Returns the averaged
        probabilities (B, K) and the mean temperature (B,).
        """
        head_logits = logits if head_logits is None else head_logits
        mean, scale = self.posterior(features)
        probabilities = torch.zeros_like(logits)
        temperatures = torch.zeros_like(logits[:, 0])
        for _ in range(n_draws):
            noise = torch.randn(
                scale.shape, generator=generator, device=generator.device, dtype=scale.dtype
            ).to(scale.device)
            temperature = self.temperature_of(mean + scale * noise, head_logits)
            probabilities += torch.softmax(logits / temperature[:, None], dim=-1)
            temperatures += temperature
        return probabilities / n_draws, temperatures / n_draws


def _outputs_at(network, latent, mean, scale, features, logits, weight) -> _AdaptiveOutput:
    """``network``'s outputs at ``latent``, a code drawn from ``q(u | h) = N(mean, scale^2)``.

    Shared by the single network and the stacked one (whose tensors carry a
    leading member axis): temperature, reconstruction and the terms of the loss.
    """
    temperature = network.temperature_of(latent, logits)
    reconstruction = network.decoder(latent)
    # Laplace(h; h_hat, 1): -log p = |h - h_hat| + log 2 per dimension.
    reconstruction_nll = ((features - reconstruction).abs() + math.log(2.0)).sum(dim=-1)
    return _AdaptiveOutput(
        logits=logits / temperature[..., None],
        temperature=temperature,
        reconstruction_nll=reconstruction_nll,
        posterior_mean=mean,
        posterior_scale=scale,
        prior_mean=network.prior_mean,
        prior_scale=_positive(network.prior_raw_scale),
        sample_weight=weight,
    )


def _linear_widths(sequence: nn.Sequential) -> list[int]:
    return [layer.out_features for layer in sequence if isinstance(layer, nn.Linear)]


def _gaussian_kl(
    mean_q: torch.Tensor, scale_q: torch.Tensor, mean_p: torch.Tensor, scale_p: torch.Tensor
) -> torch.Tensor:
    """Closed-form KL(N(mean_q, scale_q^2) || N(mean_p, scale_p^2)), summed over the last axis."""
    variance_ratio = (scale_q / scale_p).square()
    mean_term = ((mean_q - mean_p) / scale_p).square()
    return 0.5 * (variance_ratio + mean_term - 1.0 - variance_ratio.log()).sum(dim=-1)


def _adaptive_ts_loss(outputs: _AdaptiveOutput, target: torch.Tensor) -> torch.Tensor:
    """Batch mean of ``w * (-log p(h|u) + KL(q(u|h) || p(u|y)) + CE(softmax(z / T), y))``."""
    kl = _gaussian_kl(
        outputs.posterior_mean,
        outputs.posterior_scale,
        outputs.prior_mean[target],
        outputs.prior_scale[target],
    )
    cross_entropy = F.cross_entropy(outputs.logits, target, reduction="none")
    per_sample = outputs.reconstruction_nll + kl + cross_entropy
    return (outputs.sample_weight * per_sample).mean()


def _loss_from_terms(loss):
    """The trainer's ``loss_fn(outputs, target)`` around a user's
    ``loss(logits, y, sample_weight, variational)`` (see ``AdaptiveTS(loss=...)``)."""

    def training_loss(outputs: _AdaptiveOutput, target: torch.Tensor) -> torch.Tensor:
        prior = (outputs.prior_mean[target], outputs.prior_scale[target])
        kl = _gaussian_kl(outputs.posterior_mean, outputs.posterior_scale, *prior)
        variational = outputs.reconstruction_nll + kl
        return loss(outputs.logits, target, outputs.sample_weight, variational)

    return training_loss


def _output_logits(outputs: _AdaptiveOutput) -> torch.Tensor:
    return outputs.logits
