"""AdaptiveTS members stacked into one network and trained together.

:class:`_StackedAdaptiveNetwork` holds ``M`` networks of one shape as
parameters with a leading member axis (a linear layer's weight is
``(M, in, out)``, applied with ``torch.baddbmm``), so that one forward and
one backward pass serve every member; each member's gradient is that of its
own loss, and Adam works element by element, so the members stay
independent. :func:`fit_stacked` is the epoch loop around it.

It draws what :func:`reliacal.training.fit_module` would draw for each
member trained alone with its seed: the same mini-batches in the same order
(``torch.randperm`` under the loop's shuffling seed plus the epoch), the
same latent samples (a generator per member seeded with the loop's host
seed, advanced as the loop's validation pass advances torch's), the same
validation scores and the same rule for the kept epoch (lowest validation
NLL, never a chance-level epoch while another is above chance) and early
stopping. What differs is rounding (the batched products, the class
log-likelihoods through an expanded square, a fused optimiser step), which
training can amplify, so the members are close to the one-by-one ones, not
equal bit for bit. With ``member_stopping="first"`` (AdaptiveTS's default)
the first member to stop ends the training of all; with ``"each"`` a member
that stops early leaves the stack, so that the others train at the cost of
the members still training.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

from reliacal._device import resolve_device
from reliacal.calibrators._adaptive_network import (
    _AdaptiveOutput,
    _AdaptiveTemperatureNetwork,
    _gaussian_kl,
    _outputs_at,
    _positive,
    confidence_statistics,
)
from reliacal.metrics import accuracy, expected_calibration_error, negative_log_likelihood
from reliacal.training import (
    TrainingConfig,
    TrainingDivergedError,
    TrainingResult,
    chance_accuracy,
    draw_shared_seed,
    improves,
    loop_generator_seeds,
    warn_if_never_above_chance,
)

__all__ = ["fit_stacked"]

# The training loop's validation ECE: 15 equal-width bins.
_N_BINS = 15


class _StackedLinear(nn.Module):
    """``M`` linear layers as one: ``(M, B, in) -> (M, B, out)``."""

    def __init__(self, layers: list[nn.Linear]) -> None:
        super().__init__()
        weights = torch.stack([layer.weight.detach().t() for layer in layers])
        self.weight = nn.Parameter(weights.contiguous())
        biases = torch.stack([layer.bias.detach() for layer in layers])
        self.bias = nn.Parameter(biases[:, None, :].contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)

    def member_state(self, index: int) -> dict[str, torch.Tensor]:
        """Member ``index``'s ``nn.Linear`` state: weight ``(out, in)``, bias ``(out,)``."""
        return {"weight": self.weight[index].t(), "bias": self.bias[index, 0]}


class _StackedMLP(nn.Module):
    """``M`` ELU MLPs of one shape (``nn.Sequential`` of Linear and ELU) as one."""

    def __init__(self, sequences: list[nn.Sequential]) -> None:
        super().__init__()
        first = sequences[0]
        self.positions = [i for i, layer in enumerate(first) if isinstance(layer, nn.Linear)]
        self.layers = nn.ModuleList(
            _StackedLinear([sequence[i] for sequence in sequences]) for i in self.positions
        )
        self.activated = [
            i + 1 < len(first) and isinstance(first[i + 1], nn.ELU) for i in self.positions
        ]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, activated in zip(self.layers, self.activated):
            x = layer(x)
            if activated:
                x = F.elu(x)
        return x

    def member_state(self, index: int, prefix: str) -> dict[str, torch.Tensor]:
        return {
            f"{prefix}.{position}.{name}": value
            for position, layer in zip(self.positions, self.layers)
            for name, value in layer.member_state(index).items()
        }


class _StackedAdaptiveNetwork(nn.Module):
    """``M`` :class:`_AdaptiveTemperatureNetwork` of one configuration, stacked.

    ``forward((h, z, w), noise)`` takes ``(M, B, D)`` features, ``(M, B, K)``
    logits and ``(M, B)`` weights, member ``m`` reading row block ``m``, and
    returns an :class:`_AdaptiveOutput` whose fields have a leading member
    axis. ``noise`` (``(M, B, L)``) draws the latent code ``mean + scale *
    noise``; ``None`` reads the posterior mean (evaluation).
    """

    def __init__(self, networks: list[_AdaptiveTemperatureNetwork]) -> None:
        super().__init__()
        configs = [network.config() for network in networks]
        if any(config != configs[0] for config in configs):
            raise ValueError("stacked AdaptiveTS members must share one configuration")
        self.encoder = _StackedMLP([network.encoder for network in networks])
        self.posterior_mean_head = _StackedLinear([n.posterior_mean_head for n in networks])
        self.posterior_scale_head = _StackedLinear([n.posterior_scale_head for n in networks])
        self.decoder = _StackedMLP([network.decoder for network in networks])
        self.prior_mean = nn.Parameter(torch.stack([n.prior_mean.detach() for n in networks]))
        self.prior_raw_scale = nn.Parameter(
            torch.stack([n.prior_raw_scale.detach() for n in networks])
        )
        self.confidence_inputs = bool(configs[0]["confidence_inputs"])
        if self.confidence_inputs:
            for name in ("reference_temperature", "statistics_mean", "statistics_scale"):
                values = torch.stack([getattr(network, name) for network in networks])
                self.register_buffer(name, values.clone())
        self.temperature_head = _StackedMLP([network.temperature_head for network in networks])

    def posterior(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.encoder(features)
        return self.posterior_mean_head(hidden), _positive(self.posterior_scale_head(hidden))

    def class_log_likelihoods(self, latent: torch.Tensor) -> torch.Tensor:
        """``l[m, b, k] = log N(u_mb; m_mk, diag s_mk^2)``, shape (M, B, K).

        The square is expanded, ``sum_l (u_l - m_kl)^2 / s_kl^2 = u^2 . s_k^-2
        - 2 u . (m_k s_k^-2) + m_k^2 . s_k^-2``, so that two batched products
        replace the ``(M, B, K, L)`` differences and their backward pass.
        """
        prior_scale = _positive(self.prior_raw_scale)
        inverse_variance = prior_scale.square().reciprocal()
        scaled_mean = self.prior_mean * inverse_variance
        constant = (
            -0.5 * (self.prior_mean * scaled_mean).sum(dim=-1)
            - prior_scale.log().sum(dim=-1)
            - 0.5 * latent.shape[-1] * math.log(2 * math.pi)
        )
        linear = torch.baddbmm(constant[:, None, :], latent, scaled_mean.transpose(1, 2))
        return torch.baddbmm(linear, latent.square(), inverse_variance.transpose(1, 2), alpha=-0.5)

    def temperature_of(self, latent: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        inputs = self.class_log_likelihoods(latent)
        if self.confidence_inputs:
            scaled = logits.to(inputs.dtype) / self.reference_temperature[:, None, None]
            standardised = (confidence_statistics(scaled) - self.statistics_mean[:, None]) / (
                self.statistics_scale[:, None]
            )
            inputs = torch.cat([inputs, standardised], dim=-1)
        return _positive(self.temperature_head(inputs)).squeeze(-1)

    def forward(self, inputs, noise: torch.Tensor | None = None) -> _AdaptiveOutput:
        features, logits, weight = inputs
        mean, scale = self.posterior(features)
        latent = mean if noise is None else mean + scale * noise
        return _outputs_at(self, latent, mean, scale, features, logits, weight)

    @torch.no_grad()
    def member_state(self, index: int) -> dict[str, torch.Tensor]:
        """Member ``index``'s state dict, keyed as its network's, as CPU copies."""
        state = {
            **self.encoder.member_state(index, "encoder"),
            **{
                f"posterior_mean_head.{k}": v
                for k, v in self.posterior_mean_head.member_state(index).items()
            },
            **{
                f"posterior_scale_head.{k}": v
                for k, v in self.posterior_scale_head.member_state(index).items()
            },
            **self.decoder.member_state(index, "decoder"),
            "prior_mean": self.prior_mean[index],
            "prior_raw_scale": self.prior_raw_scale[index],
            **self.temperature_head.member_state(index, "temperature_head"),
        }
        if self.confidence_inputs:
            for name in ("reference_temperature", "statistics_mean", "statistics_scale"):
                state[name] = getattr(self, name)[index]
        return {name: value.detach().cpu().clone() for name, value in state.items()}

    @torch.no_grad()
    def keep(self, positions: list[int]) -> None:
        """Keep only the members at ``positions`` (new parameters: rebuild the optimiser)."""
        index = torch.as_tensor(positions, dtype=torch.int64, device=self.prior_mean.device)
        for module in self.modules():
            for name, parameter in list(module.named_parameters(recurse=False)):
                setattr(module, name, nn.Parameter(parameter.detach()[index].clone()))
            for name, buffer in list(module.named_buffers(recurse=False)):
                setattr(module, name, buffer[index].clone())


def _gathered_prior(outputs: _AdaptiveOutput, target: torch.Tensor):
    """Each row's class prior: mean and scale ``(M, B, L)``."""
    index = target[..., None].expand(-1, -1, outputs.prior_mean.shape[-1])
    return outputs.prior_mean.gather(1, index), outputs.prior_scale.gather(1, index)


def stacked_elbo(outputs: _AdaptiveOutput, target: torch.Tensor) -> torch.Tensor:
    """Each member's :func:`_adaptive_ts_loss` on its rows: ``(M,)``."""
    kl = _gaussian_kl(
        outputs.posterior_mean, outputs.posterior_scale, *_gathered_prior(outputs, target)
    )
    n_members, n_rows, n_classes = outputs.logits.shape
    cross_entropy = F.cross_entropy(
        outputs.logits.reshape(-1, n_classes), target.reshape(-1), reduction="none"
    ).reshape(n_members, n_rows)
    per_sample = outputs.reconstruction_nll + kl + cross_entropy
    return (outputs.sample_weight * per_sample).mean(dim=1)


def stacked_loss_from_terms(loss: Callable) -> Callable:
    """Each member's ``loss(logits, y, sample_weight, variational)`` on its rows: ``(M,)``."""

    def per_member(outputs: _AdaptiveOutput, target: torch.Tensor) -> torch.Tensor:
        kl = _gaussian_kl(
            outputs.posterior_mean, outputs.posterior_scale, *_gathered_prior(outputs, target)
        )
        variational = outputs.reconstruction_nll + kl
        values = []
        for m in range(target.shape[0]):
            value = loss(outputs.logits[m], target[m], outputs.sample_weight[m], variational[m])
            if not (isinstance(value, torch.Tensor) and value.ndim == 0):
                raise ValueError("loss_fn must return a scalar tensor (the mean loss of the batch)")
            values.append(value)
        return torch.stack(values)

    return per_member


class _MemberRecord:
    """One member's bookkeeping: the loop's history, kept epoch and early-stopping count."""

    def __init__(self, validation_labels: np.ndarray | None, n_classes: int) -> None:
        self.history: list[dict] = []
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_epoch, self.best_score = 0, math.nan
        self.epochs_without_improvement = 0
        self.chance = (
            None if validation_labels is None else chance_accuracy(validation_labels, n_classes)
        )
        self.stopped_early = False


def fit_stacked(
    networks: list[_AdaptiveTemperatureNetwork],
    data,
    splits: list[tuple[np.ndarray, np.ndarray]],
    seeds: list[int | None],
    *,
    config: TrainingConfig,
    loss_fn: Callable,
    chance_advice: str | None,
    threads: Callable,
    member_stopping: str = "first",
) -> list[TrainingResult]:
    """Train ``networks`` together, member ``m`` on ``splits[m]`` with seed ``seeds[m]``.

    Parameters
    ----------
    networks : list of _AdaptiveTemperatureNetwork
        Initialised members of one configuration; each ends with its kept
        weights, on the CPU, in eval mode.
    data : _CalibrationData
        Features, logits, weights and class indices of every row.
    splits : list of (ndarray, ndarray)
        Each member's training and validation rows (validation may be empty;
        every member has as many training rows).
    seeds : list of int or None
        Each member's run seed; ``None`` draws one from torch's generator.
    config : TrainingConfig
        ``max_epochs``, ``batch_size``, ``learning_rate``, ``weight_decay``
        (AdamW, constant rate, no clipping, float32), ``n_iter_no_change``,
        ``device`` and ``verbose`` are read.
    loss_fn : callable
        ``loss_fn(outputs, target) -> (M,)`` each member's mean batch loss.
    chance_advice : str or None
        Ends the warning of a member never above chance.
    threads : callable
        ``threads(module, rows)``: the context of the CPU threads.
    member_stopping : {"first", "each"}
        ``"each"``: every member stops early on its own and leaves the
        stack; ``"first"``: the first member to stop ends the training of
        all (each keeps its own best epoch so far).

    Returns
    -------
    list of TrainingResult
        Each member's history, kept epoch and score, as ``fit_module`` reports.

    Raises
    ------
    TrainingDivergedError
        On a non-finite loss or gradient of a member; its ``module`` is that
        member's network with the weights that met the failing batch, its
        ``member_index`` the member's position.
    """
    device = resolve_device(config.device)
    n_members = len(networks)
    n_train = {len(train) for train, _ in splits}
    if len(n_train) != 1:
        raise ValueError("stacked AdaptiveTS members need as many training rows each")
    n_train = n_train.pop()
    has_validation = all(len(validation) for _, validation in splits)
    run_seeds = [int(draw_shared_seed()) if seed is None else int(seed) for seed in seeds]
    shuffle_seeds, generators = [], []
    for seed in run_seeds:
        shuffle_seed, host_seed = loop_generator_seeds(seed)
        shuffle_seeds.append(shuffle_seed)
        generators.append(torch.Generator(device=device).manual_seed(host_seed))
    features, logits, weights, targets = (
        values.to(device) for values in (data.features, data.logits, data.weights, data.targets)
    )
    train_rows = torch.as_tensor(np.stack([train for train, _ in splits]), device=device)
    validation_rows = (
        torch.as_tensor(np.stack([validation for _, validation in splits]), device=device)
        if has_validation
        else None
    )
    n_classes = logits.shape[1]
    records = [
        _MemberRecord(
            data.targets[torch.as_tensor(validation)].numpy() if has_validation else None,
            n_classes,
        )
        for _, validation in splits
    ]
    stack = _StackedAdaptiveNetwork(networks).to(device)
    latent_dim = stack.prior_mean.shape[-1]
    batch_size = int(config.batch_size)

    def new_optimizer(state=None):
        # fused: one pass over each stacked tensor for the whole update, the same formula
        # as one by one up to rounding.
        optimizer = torch.optim.AdamW(
            stack.parameters(),
            lr=config.learning_rate,
            weight_decay=config.weight_decay,
            fused=True,
        )
        if state is not None:
            optimizer.load_state_dict(state)
        return optimizer

    optimizer = new_optimizer()
    active = list(range(n_members))
    epochs = tqdm(range(config.max_epochs), desc="epochs", disable=not config.verbose)
    with threads(stack, batch_size):
        for epoch in epochs:
            start = time.perf_counter()
            stack.train()
            orders = torch.stack(
                [
                    torch.randperm(
                        n_train, generator=torch.Generator().manual_seed(shuffle_seeds[m] + epoch)
                    )
                    for m in active
                ]
            ).to(device)
            rows_all = train_rows[active].gather(1, orders)
            loss_sum = torch.zeros(len(active), dtype=torch.float64, device=device)
            for step, begin in enumerate(range(0, n_train, batch_size)):
                rows = rows_all[:, begin : begin + batch_size]
                noise = torch.stack(
                    [
                        torch.randn(
                            (rows.shape[1], latent_dim), generator=generators[m], device=device
                        )
                        for m in active
                    ]
                )
                optimizer.zero_grad(set_to_none=True)
                outputs = stack((features[rows], logits[rows], weights[rows]), noise)
                losses = loss_fn(outputs, targets[rows])
                losses.sum().backward()
                _check_step(stack, optimizer, losses, active, networks, epoch, step)
                optimizer.step()
                loss_sum += losses.detach().double() * rows.shape[1]
            train_loss = (loss_sum / n_train).tolist()
            scores = (
                _validate(
                    stack,
                    loss_fn,
                    active,
                    validation_rows,
                    features,
                    logits,
                    weights,
                    targets,
                    batch_size,
                )
                if has_validation
                else None
            )
            elapsed = time.perf_counter() - start
            finished = []
            for position, m in enumerate(active):
                record = records[m]
                logs = {
                    "epoch": epoch + 1,
                    "train_loss": train_loss[position],
                    "lr": config.learning_rate,
                }
                if scores is not None:
                    if generators[m].device.type == "cpu":
                        # What fit_module's validation loader draws from torch's CPU generator.
                        torch.empty((), dtype=torch.int64).random_(generator=generators[m])
                    logs.update({f"val_{name}": value[position] for name, value in scores.items()})
                    best = (
                        None if record.best_state is None else record.history[record.best_epoch - 1]
                    )
                    if improves(logs, best, metric="nll", chance=record.chance):
                        record.best_state = stack.member_state(position)
                        record.best_epoch, record.best_score = epoch + 1, logs["val_nll"]
                        record.epochs_without_improvement = 0
                    else:
                        record.epochs_without_improvement += 1
                logs["time"] = elapsed
                record.history.append(logs)
                patience = config.n_iter_no_change
                if patience is not None and record.epochs_without_improvement >= patience:
                    finished.append(position)
            if member_stopping == "first" and finished:
                finished = list(range(len(active)))
            for position in finished:
                records[active[position]].stopped_early = epoch + 1 < config.max_epochs
            if epoch + 1 == config.max_epochs:
                for position, m in enumerate(active):
                    if records[m].best_state is None:
                        records[m].best_state = stack.member_state(position)
                        records[m].best_epoch = epoch + 1
                break
            if finished:
                keep = [position for position in range(len(active)) if position not in finished]
                active = [active[position] for position in keep]
                if not active:
                    break
                state = optimizer.state_dict()
                stack.keep(keep)
                state["state"] = {
                    key: {
                        name: value[keep] if torch.is_tensor(value) and value.ndim > 0 else value
                        for name, value in entry.items()
                    }
                    for key, entry in state["state"].items()
                }
                optimizer = new_optimizer(state)
            epochs.set_postfix({"members": len(active)})
    epochs.close()
    results = []
    for network, record in zip(networks, records):
        network.load_state_dict(record.best_state)
        network.to("cpu").eval()
        if record.chance is not None:
            warn_if_never_above_chance(
                record.history, record.chance, record.best_epoch, chance_advice
            )
        results.append(
            TrainingResult(
                history=record.history,
                best_epoch=record.best_epoch,
                best_score=record.best_score,
                stopped_early=record.stopped_early,
            )
        )
    return results


def _check_step(stack, optimizer, losses, active, networks, epoch, step) -> None:
    """Raise TrainingDivergedError for the first member whose loss or gradient norm is not finite.

    Checked before the optimiser's step: the live weights are those that met the batch.
    """
    with torch.no_grad():
        # The optimiser's list of the parameters: walking the module tree each step costs more.
        grads = [p.grad for p in optimizer.param_groups[0]["params"] if p.grad is not None]
        # One norm over every gradient: finite on almost every step, then nothing to find.
        if bool(torch.isfinite(losses.sum() + torch.nn.utils.get_total_norm(grads))):
            return
        # Each member's own gradient norm, as the single-network loop (reliacal.training)
        # computes it: an overflow of that norm is a divergence there too. The total can
        # overflow where no member's does (several members, or a loss sum): no divergence.
        norms = torch.zeros(len(losses), device=losses.device)
        if grads:
            per_tensor = [torch.linalg.vector_norm(grad.flatten(1), dim=1) for grad in grads]
            norms = torch.linalg.vector_norm(torch.stack(per_tensor, 1), dim=1)
        bad = ~torch.isfinite(losses.detach().double()) | ~torch.isfinite(norms)
        if not bool(bad.any()):
            return
    position = int(torch.nonzero(bad)[0])
    member = active[position]
    network = networks[member]
    network.load_state_dict(stack.member_state(position))
    network.to("cpu").eval()
    error = TrainingDivergedError(
        f"training diverged at epoch {epoch + 1}, step {step + 1}: "
        f"loss={float(losses[position].detach())}, gradient norm={float(norms[position])}; "
        "the weights from before this step were kept. "
        "Lower learning_rate, or check the inputs and loss for NaN/inf."
    )
    error.module, error.member_index = network, member
    raise error


@torch.no_grad()
def _validate(
    stack, loss_fn, active, validation_rows, features, logits, weights, targets, batch_size
):
    """Each active member's validation loss, ECE, NLL and accuracy, as fit_module scores them."""
    stack.eval()
    rows_all = validation_rows[active]
    n_validation = rows_all.shape[1]
    loss_sum = torch.zeros(len(active), dtype=torch.float64)
    calibrated = []
    for begin in range(0, n_validation, batch_size):
        rows = rows_all[:, begin : begin + batch_size]
        outputs = stack((features[rows], logits[rows], weights[rows]))
        loss_sum += loss_fn(outputs, targets[rows]).double().cpu() * rows.shape[1]
        calibrated.append(outputs.logits.float().cpu())
    stack.train()
    calibrated = torch.cat(calibrated, dim=1)
    if not bool(torch.isfinite(calibrated).all()):
        raise ValueError(
            "the network's outputs on validation samples are NaN or infinite: check the "
            "validation inputs for NaN or infinite values"
        )
    labels = np.arange(calibrated.shape[-1])
    scores: dict[str, list[float]] = {"loss": [], "ece": [], "nll": [], "accuracy": []}
    for position in range(len(active)):
        probabilities = torch.softmax(calibrated[position].double(), dim=1).numpy()
        y_true = targets[rows_all[position]].cpu().numpy()
        scores["loss"].append(float(loss_sum[position] / n_validation))
        scores["ece"].append(
            expected_calibration_error(y_true, probabilities, n_bins=_N_BINS, labels=labels)
        )
        scores["nll"].append(negative_log_likelihood(y_true, probabilities, labels=labels))
        scores["accuracy"].append(accuracy(y_true, probabilities, labels=labels))
    return scores
