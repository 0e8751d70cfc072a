"""``head_learning_rate``: the head's parameters get their own rate, the rest keep theirs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from reliacal.training import TrainingConfig, fit_module
from reliacal.training import _optim as optim
from reliacal.training._optim import make_optimizer, parameter_groups


class BodyAndHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.body(x))

    def head_parameters(self):
        return self.head.parameters()


def test_groups_split_body_and_head_at_their_rates():
    module = BodyAndHead()
    config = TrainingConfig(learning_rate=1e-4, head_learning_rate=3e-3)
    optimizer = make_optimizer(module, config)
    body, head = optimizer.param_groups
    assert (body["lr"], head["lr"]) == (1e-4, 3e-3)
    assert {id(p) for p in body["params"]} == {id(p) for p in module.body.parameters()}
    assert {id(p) for p in head["params"]} == {id(p) for p in module.head.parameters()}


def test_without_head_learning_rate_one_group_holds_everything():
    module = BodyAndHead()
    (group,) = make_optimizer(module, TrainingConfig(learning_rate=1e-4)).param_groups
    assert group["lr"] == 1e-4 and len(group["params"]) == 4


def test_a_frozen_head_leaves_one_group():
    module = BodyAndHead()
    module.head.requires_grad_(False)
    groups = parameter_groups(module, TrainingConfig(head_learning_rate=1e-3))
    assert [group["lr"] for group in groups] == [1e-4]


def test_a_module_without_a_head_is_refused_clearly():
    with pytest.raises(ValueError, match=r"head_learning_rate is set but Linear has no head_param"):
        make_optimizer(nn.Linear(2, 2), TrainingConfig(head_learning_rate=1e-3))


@pytest.mark.parametrize("bad", [0.0, -1e-3, float("nan")])
def test_head_learning_rate_must_be_positive(bad):
    with pytest.raises(ValueError, match="head_learning_rate"):
        TrainingConfig(head_learning_rate=bad)


def test_one_sgd_step_moves_each_part_by_its_own_rate(quick, plain_sgd):
    # Plain SGD (no momentum, decay or clipping), one full batch, constant rate:
    # every parameter moves by -rate * gradient, the rate being its group's.
    torch.manual_seed(0)
    module = BodyAndHead()
    x, y = torch.randn(8, 3), torch.arange(8) % 2
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    F.cross_entropy(module(x), y).backward()
    gradients = {name: p.grad.clone() for name, p in module.named_parameters()}
    module.zero_grad()
    body_rate, head_rate = 0.01, 0.5
    config = quick(
        **plain_sgd,
        max_epochs=1,
        batch_size=len(x),
        learning_rate=body_rate,
        head_learning_rate=head_rate,
        validation_fraction=0.0,
    )
    fit_module(module, F.cross_entropy, TensorDataset(x, y), config=config)
    for name, value in module.named_parameters():
        rate = head_rate if name.startswith("head.") else body_rate
        expected = before[name] - rate * gradients[name]
        torch.testing.assert_close(value.detach(), expected, rtol=1e-6, atol=1e-7)


def test_the_schedule_scales_both_rates_alike():
    module = BodyAndHead()
    config = TrainingConfig(
        max_epochs=2, learning_rate=1e-3, head_learning_rate=1e-2, warmup_epochs=1.0
    )
    optimizer = make_optimizer(module, config)
    scheduler = optim.make_scheduler(optimizer, config, steps_per_epoch=4)
    for _ in range(2):  # two of the four warm-up steps done: the factor is 3/4
        optimizer.step()
        scheduler.step()
    np.testing.assert_allclose([g["lr"] for g in optimizer.param_groups], [7.5e-4, 7.5e-3])


def calattn_groups(monkeypatch, **options):
    """The fitted network of a tiny CalAttn fit, and the optimiser groups it got."""
    from timm.models.vision_transformer import VisionTransformer

    from reliacal.finetune import CalAttnFinetuner

    seen = []
    real = optim.parameter_groups

    def spy(module, config):
        groups = real(module, config)
        # Copies: the scheduler rewrites each group's "lr" during the fit.
        seen.append((module, [dict(group) for group in groups]))
        return groups

    monkeypatch.setattr(optim, "parameter_groups", spy)
    vit = VisionTransformer(
        img_size=8, patch_size=4, in_chans=1, num_classes=2, embed_dim=16, depth=1, num_heads=2
    )
    rng = np.random.default_rng(0)
    X, y = rng.random((16, 1, 8, 8), dtype=np.float32), np.arange(16) % 2
    model = CalAttnFinetuner(
        vit,
        max_epochs=1,
        batch_size=8,
        learning_rate=1e-4,
        validation_fraction=0.0,
        device="cpu",
        random_state=0,
        **options,
    ).fit(X, y)
    ((network, groups),) = seen
    assert model.get_params()["head_learning_rate"] == options.get("head_learning_rate")
    return network, groups


@pytest.mark.parametrize("calibration_head", [True, "global"])
def test_calattn_puts_its_scale_in_the_head_group(monkeypatch, calibration_head):
    network, groups = calattn_groups(
        monkeypatch, head_learning_rate=2e-3, calibration_head=calibration_head
    )
    assert [group["lr"] for group in groups] == [1e-4, 2e-3]
    head_ids = {id(p) for p in groups[1]["params"]}
    assert head_ids == {id(p) for p in network.scale_head.parameters()}


@pytest.mark.parametrize(
    "options",
    [{}, {"calibration_head": False, "head_learning_rate": 2e-3}],
    ids=["default", "no head to split off"],
)
def test_calattn_trains_in_one_group_without_a_separate_head(monkeypatch, options):
    network, groups = calattn_groups(monkeypatch, **options)
    (group,) = groups
    assert group["lr"] == 1e-4
    assert len(group["params"]) == len(list(network.parameters()))
