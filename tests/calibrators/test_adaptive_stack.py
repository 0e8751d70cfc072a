"""Tests of AdaptiveTS members trained as one stacked network (reliacal/calibrators/_adaptive_stack.py).

The oracles: each member's own :class:`_AdaptiveTemperatureNetwork` (the
stacked forward pass and loss) and the same members trained one by one with
:func:`reliacal.training.fit_module` (``member_training="sequential"``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reliacal.calibrators import AdaptiveTS, adaptive
from reliacal.calibrators._adaptive_network import _adaptive_ts_loss, _AdaptiveTemperatureNetwork
from reliacal.calibrators._adaptive_stack import (
    _check_step,
    _StackedAdaptiveNetwork,
    stacked_elbo,
    stacked_loss_from_terms,
)
from reliacal.persistence import load, save
from reliacal.training import TrainingDivergedError

SMALL = dict(
    latent_dim=3,
    hidden_layer_sizes=(16, 8),
    temperature_hidden_sizes=(8,),
    batch_size=32,
    learning_rate=5e-3,
    random_state=0,
)


def _logit_problem(n=300, n_classes=3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    logits = 3.0 * np.eye(n_classes)[y] + rng.normal(scale=1.5, size=(n, n_classes))
    return logits, y


def _networks(n_members, confidence_inputs, n_features=5, n_classes=4):
    networks = []
    for seed in range(n_members):
        torch.manual_seed(seed)
        network = _AdaptiveTemperatureNetwork(
            n_features,
            n_classes,
            latent_dim=3,
            hidden_layer_sizes=(8, 6),
            temperature_hidden_sizes=(7,),
            confidence_inputs=confidence_inputs,
        )
        if confidence_inputs:
            network.set_confidence_reference(torch.randn(50, n_classes) * (seed + 1), 1.5)
        networks.append(network)
    return networks


def _documented_elbo(logits, y, sample_weight, variational):
    cross_entropy = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    return (sample_weight * (variational + cross_entropy)).mean()


@pytest.mark.parametrize("confidence_inputs", [False, True])
def test_the_stacked_forward_and_loss_are_each_members_own(confidence_inputs):
    networks = _networks(3, confidence_inputs)
    stack = _StackedAdaptiveNetwork(networks)
    generator = torch.Generator().manual_seed(1)
    h = torch.randn(3, 10, 5, generator=generator)
    z = 3 * torch.randn(3, 10, 4, generator=generator)
    w = torch.rand(3, 10, generator=generator)
    y = torch.randint(0, 4, (3, 10), generator=generator)
    noise = torch.randn(3, 10, 3, generator=generator)
    outputs = stack((h, z, w), noise)
    losses = stacked_elbo(outputs, y)
    custom = stacked_loss_from_terms(_documented_elbo)(outputs, y)
    for m, network in enumerate(networks):
        network.eval()  # the latent code is set by hand below, from the same noise
        mean, scale = network.posterior(h[m])
        temperature = network.temperature_of(mean + scale * noise[m], z[m])
        torch.testing.assert_close(outputs.temperature[m], temperature, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(outputs.posterior_mean[m], mean, rtol=1e-5, atol=1e-6)
        # The member's own loss, on its own outputs with the latent code of that noise.
        reconstruction = network.decoder(mean + scale * noise[m])
        own = adaptive._AdaptiveOutput(
            logits=z[m] / temperature[:, None],
            temperature=temperature,
            reconstruction_nll=((h[m] - reconstruction).abs() + np.log(2.0)).sum(dim=-1),
            posterior_mean=mean,
            posterior_scale=scale,
            prior_mean=network.prior_mean,
            prior_scale=torch.nn.functional.softplus(network.prior_raw_scale).clamp_min(1e-3),
            sample_weight=w[m],
        )
        torch.testing.assert_close(losses[m], _adaptive_ts_loss(own, y[m]), rtol=1e-5, atol=0)
        torch.testing.assert_close(custom[m], losses[m], rtol=1e-6, atol=0)
    # Each member's loss reaches its own weights only.
    losses[1].backward()
    first_layer = stack.encoder.layers[0].weight.grad
    assert bool((first_layer[0] == 0).all() and (first_layer[2] == 0).all())
    assert bool((first_layer[1] != 0).any())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_stacked_class_log_likelihoods_match_normal_log_prob(dtype):
    # The stack expands the square into two batched products; the oracle is
    # torch.distributions on each member's own priors, in float64.
    networks = _networks(3, False, n_classes=6)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for network in networks:
            # Scales from about 0.05 to 20 and means away from zero, where an expanded
            # square loses most to rounding.
            network.prior_raw_scale.copy_(6 * torch.rand(6, 3, generator=generator) - 3)
            network.prior_mean.mul_(4).add_(2)
    stack = _StackedAdaptiveNetwork(networks).to(dtype)
    latent = (3 * torch.randn(3, 20, 3, generator=generator, dtype=torch.float64) + 2).to(dtype)
    got = stack.class_log_likelihoods(latent)
    assert got.shape == (3, 20, 6) and got.dtype == dtype
    for m, network in enumerate(networks):
        raw_scale = network.prior_raw_scale.detach().double()
        scale = torch.nn.functional.softplus(raw_scale).clamp_min(1e-3)
        prior = torch.distributions.Normal(network.prior_mean.detach().double(), scale)
        expected = prior.log_prob(latent[m].double()[:, None, :]).sum(-1)
        # float32: the rounding of terms as large as the log-likelihood itself.
        tolerance = 1e-10 if dtype == torch.float64 else 1e-4 * float(expected.abs().max())
        torch.testing.assert_close(got[m].double(), expected, rtol=0, atol=tolerance)


@pytest.mark.parametrize("confidence_inputs", [False, True])
def test_member_states_round_trip_and_keep_drops_members(confidence_inputs):
    networks = _networks(3, confidence_inputs)
    stack = _StackedAdaptiveNetwork(networks)
    for m, network in enumerate(networks):
        state = stack.member_state(m)
        assert state.keys() == network.state_dict().keys()
        for name, value in network.state_dict().items():
            assert torch.equal(state[name], value), name
    stack.keep([0, 2])
    assert stack.prior_mean.shape[0] == 2
    for name, value in networks[2].state_dict().items():
        assert torch.equal(stack.member_state(1)[name], value), name


def test_members_of_other_shapes_are_refused():
    wide = _networks(1, False, n_features=5)[0]
    narrow = _networks(1, False, n_features=6)[0]
    with pytest.raises(ValueError, match="one configuration"):
        _StackedAdaptiveNetwork([wide, narrow])


# The batched fit draws the one-by-one fit's mini-batches, latent samples and validation
# splits; only the rounding of the batched float32 products differs (about 1e-7 per
# product), which a few epochs of Adam steps carry to the temperatures at about 1e-7 to
# 1e-6: 1e-5 bounds it with a margin, and an error in the draws (another batch, sample
# or split) moves the temperatures by 1e-3 or more.
@pytest.mark.parametrize("member_stopping", ["each", "first"])
@pytest.mark.parametrize("confidence_inputs", [False, True])
def test_batched_members_are_the_one_by_one_members(confidence_inputs, member_stopping):
    logits, y = _logit_problem()
    # Early stopping after 2 epochs without a better NLL: with "each", members stop at
    # different epochs; with "first", all at the earliest of these, one by one after
    # cutting or retraining the members trained before the earliest.
    params = {**SMALL, "confidence_inputs": confidence_inputs, "n_members": 4}
    params.update(max_epochs=12, n_iter_no_change=2, member_stopping=member_stopping)
    batched = AdaptiveTS(**params).fit(logits, y)
    sequential = AdaptiveTS(**params, member_training="sequential").fit(logits, y)
    epochs = [len(member.history) for member in sequential.members_]
    if member_stopping == "each":
        assert len(set(epochs)) > 1  # some member left the stack before the others
    else:
        assert len(set(epochs)) == 1 and epochs[0] < 12
    for ours, theirs in zip(batched.members_, sequential.members_):
        assert ours.random_state == theirs.random_state
        assert len(ours.history) == len(theirs.history)
        assert (ours.best_epoch, ours.fell_back) == (theirs.best_epoch, theirs.fell_back)
        assert ours.initial_temperature == theirs.initial_temperature
        for key in ("train_loss", "val_nll", "val_ece", "val_accuracy"):
            np.testing.assert_allclose(
                [entry[key] for entry in ours.history],
                [entry[key] for entry in theirs.history],
                rtol=1e-5,
                atol=1e-7,
            )
    np.testing.assert_allclose(
        batched.temperature(logits), sequential.temperature(logits), rtol=1e-5
    )
    np.testing.assert_allclose(
        batched.predict_proba(logits), sequential.predict_proba(logits), rtol=1e-5, atol=1e-9
    )


@pytest.mark.parametrize("member_training", ["batched", "sequential"])
def test_the_first_member_to_stop_ends_the_training_of_all(member_training):
    logits, y = _logit_problem()
    params = {**SMALL, "n_members": 4, "max_epochs": 30, "n_iter_no_change": 2}
    params["member_training"] = member_training
    each = AdaptiveTS(**params, member_stopping="each").fit(logits, y)
    first = AdaptiveTS(**params, member_stopping="first").fit(logits, y)
    epochs = [len(member.history) for member in each.members_]
    bound = min(epochs)
    # The rule binds, and a member trained before the earliest to stop kept an epoch
    # beyond it (so that one by one it is retrained, not only cut).
    assert [epoch > bound for epoch in epochs] == [True, True, True, False]
    assert each.members_[1].best_epoch > bound
    for own, bounded in zip(each.members_, first.members_):
        # The same member, cut at the earliest stop: its history is a prefix of the
        # unbounded one, and the kept epoch the best validation NLL of that prefix.
        assert len(bounded.history) == bound
        prefix = own.history[: len(bounded.history)]
        for key in ("train_loss", "val_nll"):
            np.testing.assert_allclose(
                [entry[key] for entry in bounded.history],
                [entry[key] for entry in prefix],
                rtol=1e-5,
            )
        assert bounded.best_epoch == 1 + int(np.argmin([entry["val_nll"] for entry in prefix]))


def test_batched_members_differ_and_the_ensemble_saves_and_exports(tmp_path):
    logits, y = _logit_problem()
    model = AdaptiveTS(**SMALL, max_epochs=4, n_members=3).fit(logits, y)
    assert len({member.random_state for member in model.members_}) == 3
    temperatures = np.stack(
        [
            member.network.temperature_of(
                member.network.posterior(model._standardised(logits))[0],
                torch.as_tensor(logits, dtype=torch.float64),
            )
            .detach()
            .numpy()
            for member in model.members_
        ]
    )
    assert np.ptp(temperatures, axis=0).max() > 1e-3
    save(model, tmp_path / "ensemble")
    restored = load(tmp_path / "ensemble")
    np.testing.assert_array_equal(restored.predict_proba(logits), model.predict_proba(logits))
    exported = model.to_torch()
    X = torch.as_tensor(logits, dtype=torch.float64)
    np.testing.assert_allclose(
        exported(X).detach().numpy(), model.predict_proba(logits), rtol=1e-6, atol=1e-9
    )


def test_the_batched_custom_loss_is_the_default_one():
    logits, y = _logit_problem(n=240)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    params = {**SMALL, "max_epochs": 3, "n_members": 2}
    default = AdaptiveTS(**params).fit(logits, y, sample_weight=weights)
    custom = AdaptiveTS(**params, loss=_documented_elbo).fit(logits, y, sample_weight=weights)
    np.testing.assert_allclose(custom.temperature(logits), default.temperature(logits), rtol=1e-5)


def _stack_with_gradients(entries):
    """A stack of two members whose gradients are zero but ``entries[m]`` values of 1.5e19.

    The square of 1.5e19 is finite in float32; the sum of two such squares is not.
    """
    networks = _networks(2, False)
    stack = _StackedAdaptiveNetwork(networks)
    optimizer = torch.optim.Adam(stack.parameters())
    for parameter in stack.parameters():
        parameter.grad = torch.zeros_like(parameter)
    first = optimizer.param_groups[0]["params"][0].grad
    for member, count in enumerate(entries):
        first[member].view(-1)[:count] = 1.5e19
    return stack, optimizer, networks


def test_a_gradient_norm_that_overflows_only_in_total_is_no_divergence():
    # Each member's norm (what the single-network loop checks) is finite; their total,
    # the stack's quick test, overflows float32.
    stack, optimizer, networks = _stack_with_gradients([1, 1])
    grads = [parameter.grad for parameter in stack.parameters()]
    assert not bool(torch.isfinite(torch.nn.utils.get_total_norm(grads)))
    _check_step(stack, optimizer, torch.zeros(2), [0, 1], networks, 0, 0)


def test_a_member_whose_finite_gradient_norm_overflows_diverges():
    # As a single network does in reliacal.training: its gradient norm is inf.
    stack, optimizer, networks = _stack_with_gradients([1, 2])
    with pytest.raises(TrainingDivergedError, match=r"gradient norm=inf") as caught:
        _check_step(stack, optimizer, torch.zeros(2), [0, 1], networks, 0, 3)
    assert caught.value.member_index == 1
    assert all(bool(torch.isfinite(p.grad).all()) for p in stack.parameters())


def test_a_batched_member_that_diverges_names_itself_and_leaves_the_estimator_unfitted(
    monkeypatch,
):
    logits, y = _logit_problem()
    calls = {"n": 0}

    def member_two_breaks_on_the_fourth_step(outputs, target):
        calls["n"] += 1
        losses = stacked_elbo(outputs, target)
        if calls["n"] == 4:
            return losses * torch.tensor([1.0, float("nan"), 1.0])
        return losses

    monkeypatch.setattr(adaptive, "stacked_elbo", member_two_breaks_on_the_fourth_step)
    model = AdaptiveTS(**SMALL, max_epochs=3, n_members=3)
    with pytest.raises(TrainingDivergedError, match=r"member 2 of 3.*epoch 1, step 4") as caught:
        model.fit(logits, y)
    assert not hasattr(model, "members_") and not hasattr(model, "classes_")
    network = caught.value.module
    assert isinstance(network, _AdaptiveTemperatureNetwork) and not network.training
    assert all(bool(torch.isfinite(p).all()) for p in network.parameters())
    assert caught.value.members == []
