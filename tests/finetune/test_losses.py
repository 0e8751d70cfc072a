"""Tests of reliacal.finetune.losses against hand-computed values and reference libraries."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.metrics import brier_score_loss

from reliacal.finetune.losses import (
    BASE_LOSSES,
    brier_loss,
    cross_entropy_loss,
    dual_focal_loss,
    flsd53_loss,
    focal_loss,
    get_base_loss,
    mmce_loss,
)


def _logits_for(probabilities) -> torch.Tensor:
    """Logits whose softmax is exactly the given rows."""
    return torch.log(torch.tensor(probabilities, dtype=torch.float64))


def _random_batch(seed=0, n=12, k=5):
    generator = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(n, k, generator=generator, dtype=torch.float64)
    target = torch.randint(0, k, (n,), generator=generator)
    return logits, target


def test_cross_entropy_matches_hand_value():
    logits = _logits_for([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5]])
    target = torch.tensor([0, 2])
    expected = -(math.log(0.7) + math.log(0.5)) / 2
    assert cross_entropy_loss(logits, target).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("smoothing", [0.05, 0.1, 0.3])
def test_label_smoothing_matches_torch_and_hand_value(smoothing):
    logits, target = _random_batch(seed=1)
    ours = cross_entropy_loss(logits, target, label_smoothing=smoothing).item()
    reference = F.cross_entropy(logits, target, label_smoothing=smoothing).item()
    assert ours == pytest.approx(reference, rel=1e-6)

    log_p = F.log_softmax(logits, dim=1).numpy()
    k = logits.shape[1]
    smoothed = np.full(log_p.shape, smoothing / k)
    smoothed[np.arange(len(target)), target.numpy()] += 1.0 - smoothing
    assert ours == pytest.approx(-(smoothed * log_p).sum(axis=1).mean(), rel=1e-6)


def test_brier_matches_sklearn_and_hand_value():
    probabilities = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.2, 0.6]]
    target = torch.tensor([0, 1, 2])
    hand = (0.0 + (0.25 + 0.25) + (0.04 + 0.04 + 0.16)) / 3
    logits = _logits_for(probabilities).clamp(min=-1e4)
    assert brier_loss(logits, target).item() == pytest.approx(hand, abs=1e-7)

    logits, target = _random_batch(seed=2)
    probs = torch.softmax(logits, dim=1).numpy()
    reference = brier_score_loss(target.numpy(), probs, labels=list(range(logits.shape[1])))
    assert brier_loss(logits, target).item() == pytest.approx(reference, rel=1e-6)


def test_focal_loss_hand_values():
    logits = _logits_for([[0.6, 0.4], [0.1, 0.9]])
    target = torch.tensor([0, 0])
    expected = -(0.4**2 * math.log(0.6) + 0.9**2 * math.log(0.1)) / 2
    assert focal_loss(logits, target, gamma=2.0).item() == pytest.approx(expected, rel=1e-6)


def test_focal_loss_with_gamma_zero_is_cross_entropy():
    logits, target = _random_batch(seed=3)
    assert focal_loss(logits, target, gamma=0.0).item() == pytest.approx(
        F.cross_entropy(logits, target).item(), rel=1e-6
    )


def test_flsd53_switches_gamma_at_0_2():
    # p_true = 0.19 uses gamma 5, p_true = 0.21 uses gamma 3.
    logits = _logits_for([[0.19, 0.81], [0.21, 0.79]])
    target = torch.tensor([0, 0])
    below = -(0.81**5) * math.log(0.19)
    above = -(0.79**3) * math.log(0.21)
    assert flsd53_loss(logits[:1], target[:1]).item() == pytest.approx(below, rel=1e-6)
    assert flsd53_loss(logits[1:], target[1:]).item() == pytest.approx(above, rel=1e-6)
    assert flsd53_loss(logits, target).item() == pytest.approx((below + above) / 2, rel=1e-6)


def test_flsd53_gradient_equals_fixed_gamma_gradient_of_its_branch():
    # The schedule picks gamma per sample and carries no gradient of its own.
    logits = _logits_for([[0.1, 0.9], [0.7, 0.3]]).requires_grad_(True)
    target = torch.tensor([0, 0])
    flsd53_loss(logits, target).backward()
    ours = logits.grad.clone()

    reference = logits.detach().clone().requires_grad_(True)
    loss = (
        focal_loss(reference[:1], target[:1], gamma=5.0)
        + focal_loss(reference[1:], target[1:], gamma=3.0)
    ) / 2
    loss.backward()
    torch.testing.assert_close(ours, reference.grad)


def test_dual_focal_hand_value_uses_largest_non_target_probability():
    logits = _logits_for([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]])
    target = torch.tensor([0, 0])
    # Row 1: rival 0.3; row 2: rival 0.6 (the predicted class).
    expected = (
        -((1 - 0.5 + 0.3) ** 2) * math.log(0.5) - ((1 - 0.1 + 0.6) ** 2) * math.log(0.1)
    ) / 2
    assert dual_focal_loss(logits, target, gamma=2.0).item() == pytest.approx(expected, rel=1e-6)


def _mmce_weighted_oracle(logits, target, weight=1.0, width=0.4):
    """The three-sum expansion of Kumar et al.'s MMCE_w, with explicit loops."""
    probs = torch.softmax(logits, dim=1).numpy()
    y = target.numpy()
    confidence = probs.max(axis=1)
    correct = probs.argmax(axis=1) == y
    good = [i for i in range(len(y)) if correct[i]]
    bad = [i for i in range(len(y)) if not correct[i]]

    def k(a, b):
        return math.exp(-abs(confidence[a] - confidence[b]) / width)

    total = 0.0
    if good:
        total += (
            sum((1 - confidence[i]) * (1 - confidence[j]) * k(i, j) for i in good for j in good)
            / len(good) ** 2
        )
    if bad:
        total += (
            sum(confidence[i] * confidence[j] * k(i, j) for i in bad for j in bad) / len(bad) ** 2
        )
    if good and bad:
        total -= (
            2
            * sum((1 - confidence[i]) * confidence[j] * k(i, j) for i in good for j in bad)
            / (len(good) * len(bad))
        )
    nll = -np.log(probs[np.arange(len(y)), y]).mean()
    return nll + weight * math.sqrt(total)


@pytest.mark.parametrize("seed", [0, 4, 5])
def test_mmce_matches_loop_oracle(seed):
    logits, target = _random_batch(seed=seed, n=10, k=4)
    assert mmce_loss(logits, target).item() == pytest.approx(
        _mmce_weighted_oracle(logits, target), rel=1e-6
    )
    assert mmce_loss(logits, target, weight=3.0, bandwidth=0.2).item() == pytest.approx(
        _mmce_weighted_oracle(logits, target, weight=3.0, width=0.2), rel=1e-6
    )


def test_mmce_hand_value_two_samples():
    # One correct sample (r = 0.8) and one wrong one (r = 0.6):
    # MMCE_w^2 = 0.2^2 + 0.6^2 - 2 * 0.2 * 0.6 * exp(-0.2 / 0.4).
    logits = _logits_for([[0.8, 0.2], [0.4, 0.6]])
    target = torch.tensor([0, 0])
    squared = 0.04 + 0.36 - 0.24 * math.exp(-0.5)
    nll = -(math.log(0.8) + math.log(0.4)) / 2
    assert mmce_loss(logits, target).item() == pytest.approx(nll + math.sqrt(squared), rel=1e-6)


def test_mmce_gradient_is_finite_when_penalty_vanishes():
    # Perfect, confident predictions: the penalty is ~0 and sqrt must not blow up.
    logits = torch.tensor([[30.0, 0.0], [0.0, 30.0]], requires_grad=True)
    mmce_loss(logits, torch.tensor([0, 1])).backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize(
    "loss", [cross_entropy_loss, brier_loss, focal_loss, flsd53_loss, dual_focal_loss, mmce_loss]
)
def test_losses_backpropagate_and_accept_float32(loss):
    logits, target = _random_batch(seed=6)
    logits = logits.float().requires_grad_(True)
    value = loss(logits, target)
    assert value.ndim == 0
    value.backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


@settings(max_examples=30, deadline=None)
@given(
    arrays(np.float64, (6, 4), elements=st.floats(-8, 8)),
    arrays(np.int64, (6,), elements=st.integers(0, 3)),
    st.floats(0.0, 5.0),
)
def test_focal_never_exceeds_cross_entropy_and_losses_are_nonnegative(logits, target, gamma):
    logits, target = torch.from_numpy(logits), torch.from_numpy(target)
    ce = cross_entropy_loss(logits, target).item()
    assert 0.0 <= focal_loss(logits, target, gamma=gamma).item() <= ce + 1e-9
    assert 0.0 <= flsd53_loss(logits, target).item() <= ce + 1e-9
    assert 0.0 <= brier_loss(logits, target).item() <= 2.0 + 1e-9
    assert dual_focal_loss(logits, target, gamma=gamma).item() >= 0.0
    assert mmce_loss(logits, target).item() >= ce - 1e-9


def test_get_base_loss_resolves_every_name_and_pickles():
    logits, target = _random_batch(seed=7)
    for name in BASE_LOSSES:
        smoothing = 0.1 if name == "label_smoothing" else 0.0
        loss = get_base_loss(name, label_smoothing=smoothing)
        restored = pickle.loads(pickle.dumps(loss))
        assert restored(logits, target).item() == pytest.approx(loss(logits, target).item())
    smoothed = get_base_loss("label_smoothing", label_smoothing=0.2)(logits, target)
    assert smoothed.item() == pytest.approx(
        F.cross_entropy(logits, target, label_smoothing=0.2).item()
    )
    focal = get_base_loss("focal", focal_gamma=1.5)(logits, target)
    assert focal.item() == pytest.approx(focal_loss(logits, target, gamma=1.5).item())


def test_get_base_loss_passes_callables_through():
    def custom(logits, target):
        return logits.sum() * 0

    assert get_base_loss(custom) is custom


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_loss": "hinge"}, "base_loss must be one of"),
        ({"base_loss": "label_smoothing"}, "needs label_smoothing > 0"),
        ({"base_loss": "focal", "label_smoothing": 0.1}, "applies only to"),
        ({"base_loss": "ce", "label_smoothing": 1.0}, "label_smoothing must be in"),
        ({"base_loss": "focal", "focal_gamma": -1.0}, "focal_gamma must be"),
    ],
)
def test_get_base_loss_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_base_loss(**kwargs)


def test_losses_reject_bad_shapes():
    with pytest.raises(ValueError, match="logits must have shape"):
        focal_loss(torch.zeros(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="target must have shape"):
        brier_loss(torch.zeros(3, 2), torch.zeros(2, dtype=torch.long))
