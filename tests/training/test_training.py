"""Tests of reliacal.training, the shared training loop."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from reliacal.training import TrainingConfig, TrainingDivergedError, fit_module
from reliacal.training._optim import lr_factor, make_scheduler

WORKER = Path(__file__).with_name("_ddp_worker.py")


def params_of(module):
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


class Snapshots:
    """Callback that records the module's weights after every epoch."""

    def __init__(self, module):
        self.module, self.weights = module, {}

    def __call__(self, epoch, logs):
        self.weights[epoch] = params_of(self.module)


def fit_with_snapshots(model, data, config, **kwargs):
    """Train ``model`` on cross-entropy; return the result and its weights after each epoch."""
    snapshots = Snapshots(model)
    result = fit_module(
        model, F.cross_entropy, data, config=config, callbacks=[snapshots], **kwargs
    )
    return result, snapshots


def test_loss_decreases_on_separable_problem(blobs, quick):
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    result = fit_module(model, F.cross_entropy, blobs(), config=quick(max_epochs=8))
    losses = [entry["train_loss"] for entry in result.history]
    assert losses[-1] < 0.5 * losses[0]
    assert result.history[-1]["val_accuracy"] == 1.0
    assert not model.training
    assert next(model.parameters()).device.type == "cpu"
    assert [entry["epoch"] for entry in result.history] == list(range(1, 9))


def test_warmup_cosine_learning_rates_at_known_steps():
    # 4 steps per epoch, 3 epochs, warm-up 0.5 epoch = 2 steps, base lr 1.
    config = TrainingConfig(max_epochs=3, learning_rate=1.0, warmup_epochs=0.5)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = make_scheduler(optimizer, config, steps_per_epoch=4)
    used = []
    for _ in range(12):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    # Hand-computed: warm-up 1/2, 2/2; cosine over the 10 remaining steps,
    # (1 + cos(pi * k / 10)) / 2 for k = 0..9.
    expected = [0.5, 1.0] + [(1 + math.cos(math.pi * k / 10)) / 2 for k in range(10)]
    np.testing.assert_allclose(used, expected, rtol=1e-12)
    assert used[7] == pytest.approx(0.5)
    assert used[11] == pytest.approx(0.0244717418524, rel=1e-9)


def test_step_and_constant_schedules():
    common = dict(steps_per_epoch=4, total_steps=12, warmup_steps=0)
    step = [
        lr_factor(s, schedule="step", milestones=(1, 2), gamma=0.1, **common) for s in range(12)
    ]
    np.testing.assert_allclose(step, [1.0] * 4 + [0.1] * 4 + [0.01] * 4, rtol=1e-12)
    assert lr_factor(5, schedule="constant", **common) == 1.0
    floor = lr_factor(11, schedule="cosine", floor=0.1, **common)
    assert floor == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi * 11 / 12)) / 2)


def test_history_lr_is_the_last_step_of_each_epoch(blobs, quick):
    model = nn.Linear(2, 2)
    # 48 training samples / 16 = 3 steps per epoch; warm-up 1 epoch, 3 epochs.
    result = fit_module(
        model, F.cross_entropy, blobs(), config=quick(learning_rate=1.0, warmup_epochs=1)
    )
    lrs = [entry["lr"] for entry in result.history]
    # Last step of epoch 1: warm-up 3/3; epoch 2 ends at cosine step 2 of 6, epoch 3 at 5 of 6.
    expected = [1.0, (1 + math.cos(math.pi * 2 / 6)) / 2, (1 + math.cos(math.pi * 5 / 6)) / 2]
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)


@pytest.mark.parametrize("metric", ["loss", "accuracy", "ece", "nll"])
def test_best_checkpoint_weights_are_restored(metric, blobs, quick):
    # Validation labels are the opposite of the training labels: every epoch of
    # training makes the validation score worse, so epoch 1 is the best one.
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    result, snapshots = fit_with_snapshots(
        model,
        blobs(seed=1),
        quick(max_epochs=4, selection_metric=metric, learning_rate=0.02),
        validation_data=blobs(seed=2, flip=True),
    )
    scores = [entry[f"val_{metric}"] for entry in result.history]
    pick = np.argmax if metric == "accuracy" else np.argmin
    best = int(pick(scores)) + 1
    assert result.best_epoch == best
    assert result.best_score == scores[best - 1]
    assert best != len(scores)  # the case must differ from "keep the last weights"
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, snapshots.weights[best][name], rtol=0, atol=0)


def test_validation_ece_matches_torchmetrics(quick):
    from torchmetrics.functional.classification import multiclass_calibration_error

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3))
    x = torch.randn(90, 2)
    y = torch.randint(0, 3, (90,))
    validation = TensorDataset(torch.randn(45, 2), torch.randint(0, 3, (45,)))
    result = fit_module(
        model,
        F.cross_entropy,
        TensorDataset(x, y),
        validation_data=validation,
        config=quick(max_epochs=2),
    )
    with torch.no_grad():
        logits = model(validation.tensors[0])
    expected_ece = multiclass_calibration_error(
        logits.softmax(1), validation.tensors[1], num_classes=3, n_bins=15, norm="l1"
    )
    expected_nll = F.cross_entropy(logits, validation.tensors[1])
    best = result.history[result.best_epoch - 1]
    assert best["val_ece"] == pytest.approx(float(expected_ece), abs=1e-6)
    assert result.best_score == best["val_ece"]
    assert best["val_nll"] == pytest.approx(float(expected_nll), rel=1e-5)
    assert best["val_loss"] == pytest.approx(float(expected_nll), rel=1e-5)


def test_early_stopping_stops_after_patience(blobs, quick):
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    result = fit_module(
        model,
        F.cross_entropy,
        blobs(seed=1),
        validation_data=blobs(seed=2, flip=True),
        config=quick(max_epochs=30, selection_metric="loss", n_iter_no_change=2),
    )
    # Best at epoch 1, then two epochs without improvement.
    assert result.best_epoch == 1
    assert len(result.history) == 3
    assert result.stopped_early


def test_no_early_stop_flag_when_max_epochs_reached(blobs, quick):
    result = fit_module(nn.Linear(2, 2), F.cross_entropy, blobs(), config=quick(max_epochs=2))
    assert not result.stopped_early and len(result.history) == 2


def test_ema_matches_hand_computed_two_step_average(quick, plain_sgd):
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    initial = params_of(model)
    seen = []

    def record(x):
        seen.append(x.clone())
        return x

    data = TensorDataset(torch.tensor([[1.0, -2.0], [0.5, 3.0]]), torch.tensor([0, 1]))
    decay, lr = 0.9, 0.5
    config = quick(**plain_sgd, max_epochs=1, batch_size=1, learning_rate=lr, ema_decay=decay)
    fit_module(
        model, F.cross_entropy, data, validation_data=data, config=config, train_transform=record
    )
    # Replay the two SGD steps by hand in the order the loop drew the samples.
    weight, bias = initial["weight"].clone(), initial["bias"].clone()
    ema_w, ema_b = weight.clone(), bias.clone()
    labels = {tuple(data.tensors[0][i].tolist()): data.tensors[1][i] for i in range(2)}
    for x in seen:
        w, b = weight.requires_grad_(), bias.requires_grad_()
        loss = F.cross_entropy(x @ w.T + b, labels[tuple(x[0].tolist())].view(1))
        gw, gb = torch.autograd.grad(loss, (w, b))
        weight, bias = (w - lr * gw).detach(), (b - lr * gb).detach()
        ema_w = decay * ema_w + (1 - decay) * weight
        ema_b = decay * ema_b + (1 - decay) * bias
    assert len(seen) == 2
    torch.testing.assert_close(model.weight.detach(), ema_w, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(model.bias.detach(), ema_b, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(model.weight.detach(), weight)  # EMA, not the raw weights


class TiedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encode = nn.Linear(2, 2, bias=False)
        self.decode = nn.Linear(2, 2, bias=False)
        self.decode.weight = self.encode.weight

    def forward(self, x):
        return self.decode(torch.tanh(self.encode(x)))


def test_ema_with_tied_weights_returns_the_average_under_every_name(blobs, quick):
    torch.manual_seed(0)
    model = TiedNet()
    _, snapshots = fit_with_snapshots(
        model, blobs(), quick(max_epochs=2, ema_decay=0.9, validation_fraction=0)
    )
    assert model.decode.weight is model.encode.weight
    # The EMA after 6 steps stays close to the start, unlike the raw weights.
    assert not torch.equal(model.encode.weight.detach(), snapshots.weights[2]["encode.weight"])


def test_frozen_parameters_stay_unchanged(blobs, quick):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))
    model[0].requires_grad_(False)
    before = params_of(model)
    fit_module(model, F.cross_entropy, blobs(), config=quick(weight_decay=0.5, ema_decay=0.5))
    after = params_of(model)
    assert torch.equal(before["0.weight"], after["0.weight"])
    assert torch.equal(before["0.bias"], after["0.bias"])
    assert not torch.equal(before["2.weight"], after["2.weight"])
    assert not model[0].weight.requires_grad


class NaNAtStep:
    """Cross-entropy that returns NaN on its ``bad``-th call in training mode."""

    def __init__(self, model, bad):
        self.model, self.bad, self.calls, self.before = model, bad, 0, None

    def __call__(self, outputs, y):
        loss = F.cross_entropy(outputs, y)
        if not self.model.training:
            return loss
        self.calls += 1
        if self.calls == self.bad:
            return loss * float("nan")
        return loss


def test_nan_loss_raises_and_restores_last_good_weights(blobs, quick):
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    before_step = {}

    def remember(x):
        before_step[len(before_step)] = params_of(model)
        return x

    loss_fn = NaNAtStep(model, bad=5)  # 3 steps per epoch: epoch 2, step 2
    with pytest.raises(TrainingDivergedError, match=r"epoch 2, step 2: loss=nan") as info:
        fit_module(model, loss_fn, blobs(), config=quick(), train_transform=remember)
    assert isinstance(info.value, ValueError)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before_step[4][name])
    assert next(model.parameters()).device.type == "cpu"


class _BreaksAboveNorm(nn.Module):
    """A linear map whose outputs turn NaN once its weights grow too large: finite
    weights that an update can break, as a huge learning rate does to a transformer."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x):
        broken = self.linear.weight.abs().max() > 50
        return self.linear(x) * torch.where(broken, float("nan"), 1.0)


def test_weights_broken_by_the_previous_update_are_replaced_by_the_ones_before_it(blobs, quick):
    torch.manual_seed(0)
    model = _BreaksAboveNorm()
    before_step = []

    def remember(x):
        before_step.append(params_of(model))
        return x

    config = quick(optimizer="sgd", learning_rate=1e4, nesterov=False, schedule="constant")
    with pytest.raises(TrainingDivergedError, match="step 2.*from before that step") as info:
        fit_module(model, F.cross_entropy, blobs(), config=config, train_transform=remember)
    # Step 1's update broke the weights, which step 2 met: the weights from before step 1
    # (the initial ones) are the last known good, and they give finite outputs.
    assert len(before_step) == 2
    for name, value in model.state_dict().items():
        assert torch.equal(value, before_step[0][name])
    assert info.value.module is model
    assert torch.isfinite(model(torch.randn(4, 2))).all()


def test_non_finite_gradient_and_corrupted_buffers_are_caught(quick):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    x = torch.randn(32, 2)
    x[20] = float("inf")  # poisons BatchNorm's running statistics when it is drawn
    data = TensorDataset(x, torch.arange(32) % 2)
    before_step = []

    def remember(batch):
        before_step.append(params_of(model))
        return batch

    with pytest.raises(TrainingDivergedError, match="epoch 1"):
        fit_module(
            model,
            F.cross_entropy,
            data,
            config=quick(validation_fraction=0, batch_size=8),
            train_transform=remember,
        )
    restored = params_of(model)
    assert all(torch.isfinite(value.float()).all() for value in restored.values())
    for name, value in restored.items():
        assert torch.equal(value, before_step[-1][name])


def test_infinite_gradient_with_finite_loss_is_caught(blobs, quick):
    model = nn.Linear(2, 2)

    def sqrt_loss(outputs, y):
        return torch.sqrt((outputs * 0).sum())  # loss 0, gradient 0 * inf = nan

    with pytest.raises(TrainingDivergedError, match="gradient norm=nan"):
        fit_module(model, sqrt_loss, blobs(), config=quick())


class DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))

    def forward(self, x):
        return self.layers(x)


class InterruptAfter:
    def __init__(self, epoch):
        self.epoch = epoch

    def __call__(self, epoch, logs):
        if epoch == self.epoch:
            raise KeyboardInterrupt


def test_resumed_run_ends_with_the_same_weights(tmp_path, blobs, quick):
    config = quick(
        max_epochs=4,
        batch_size=8,
        warmup_epochs=1,
        ema_decay=0.8,
        selection_metric="nll",
        n_iter_no_change=3,
        checkpoint_dir=str(tmp_path / "run"),
    )
    torch.manual_seed(0)
    reference = DropoutNet()
    expected = fit_module(
        reference,
        F.cross_entropy,
        blobs(),
        config=quick(**{**vars(config), "checkpoint_dir": None}),
    )

    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        fit_module(
            DropoutNet(), F.cross_entropy, blobs(), config=config, callbacks=[InterruptAfter(2)]
        )
    assert (tmp_path / "run" / "checkpoint.pt").exists()
    assert not list((tmp_path / "run").glob("*.tmp"))

    torch.manual_seed(123)  # a different initialisation: the checkpoint must win
    resumed_model = DropoutNet()
    epochs_seen = []
    resumed = fit_module(
        resumed_model,
        F.cross_entropy,
        blobs(),
        config=config,
        callbacks=[lambda epoch, logs: epochs_seen.append(epoch)],
    )
    assert epochs_seen == [3, 4]
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(resumed_model.state_dict()[name], value, rtol=0, atol=1e-7)
    strip = [{k: v for k, v in entry.items() if k != "time"} for entry in expected.history]
    assert [{k: v for k, v in e.items() if k != "time"} for e in resumed.history] == strip
    assert resumed.best_epoch == expected.best_epoch

    # A finished run resumes to its end at once.
    again = DropoutNet()
    result = fit_module(again, F.cross_entropy, blobs(), config=config)
    assert len(result.history) == 4
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], value, rtol=0, atol=1e-7)


def test_checkpoint_from_another_configuration_is_refused(tmp_path, blobs, quick):
    config = quick(max_epochs=1, checkpoint_dir=str(tmp_path))
    fit_module(nn.Linear(2, 2), F.cross_entropy, blobs(), config=config)
    other = quick(max_epochs=1, learning_rate=0.5, checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="learning_rate"):
        fit_module(nn.Linear(2, 2), F.cross_entropy, blobs(), config=other)
    with pytest.raises(ValueError, match="64 training samples, train_data has 48"):
        fit_module(nn.Linear(2, 2), F.cross_entropy, blobs(n=48), config=config)


class Recorder(nn.Module):
    """Linear model that records whether each input it sees was transformed."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.calls = []

    def forward(self, x):
        self.calls.append((self.training, bool((x.abs() > 500).all())))
        return self.linear(x - 1000.0 * (x.abs() > 500).float())


def test_train_transform_applies_in_training_only(blobs, quick):
    model = Recorder()
    fit_module(
        model,
        F.cross_entropy,
        blobs(),
        config=quick(max_epochs=2),
        train_transform=lambda x: x + 1000.0,
    )
    training = [marked for is_training, marked in model.calls if is_training]
    validation = [marked for is_training, marked in model.calls if not is_training]
    assert len(training) == 6 and all(training)
    assert len(validation) == 2 and not any(validation)


class PairDataset(Dataset):
    def __init__(self, n=48):
        generator = torch.Generator().manual_seed(0)
        self.a = torch.randn(n, 2, generator=generator)
        self.b = torch.randn(n, 3, generator=generator)
        self.y = (self.a[:, 0] + self.b[:, 0] > 0).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, index):
        return (self.a[index], self.b[index]), self.y[index]


class PairNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(5, 2)

    def forward(self, x):
        a, b = x
        return self.linear(torch.cat([a, b], dim=1))


class DictPairNet(PairNet):
    def forward(self, x):
        return {"logits": super().forward(x)}


def test_tuple_inputs_and_logits_fn(quick):
    torch.manual_seed(0)
    seen = []

    def transform(x):
        seen.append(type(x))
        return x

    result = fit_module(
        DictPairNet(),
        lambda outputs, y: F.cross_entropy(outputs["logits"], y),
        PairDataset(),
        config=quick(max_epochs=2),
        logits_fn=lambda outputs: outputs["logits"],
        train_transform=transform,
    )
    assert set(seen) == {tuple}
    assert 0.0 <= result.history[-1]["val_ece"] <= 1.0


def test_outputs_that_are_not_logits_need_logits_fn_or_loss_selection(blobs, quick):
    class DictNet(nn.Linear):
        def forward(self, x):
            return {"logits": super().forward(x)}

    def loss(outputs, y):
        return F.cross_entropy(outputs["logits"], y)

    with pytest.raises(ValueError, match="logits_fn"):
        fit_module(DictNet(2, 2), loss, blobs(), config=quick(max_epochs=1))
    result = fit_module(
        DictNet(2, 2), loss, blobs(), config=quick(max_epochs=1, selection_metric="loss")
    )
    assert "val_loss" in result.history[0] and "val_ece" not in result.history[0]


def test_without_validation_the_last_weights_are_kept(blobs, quick):
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    result, snapshots = fit_with_snapshots(model, blobs(), quick(validation_fraction=0))
    assert result.best_epoch == 3 and math.isnan(result.best_score)
    assert not any(key.startswith("val_") for key in result.history[0])
    for name, value in model.state_dict().items():
        assert torch.equal(value, snapshots.weights[3][name])


def test_verbose_progress_and_logging(caplog, capsys, blobs, quick):
    with caplog.at_level("INFO", logger="reliacal"):
        fit_module(nn.Linear(2, 2), F.cross_entropy, blobs(), config=quick(max_epochs=2, verbose=2))
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith("epoch 2/2 ") and "val_ece=" in m for m in messages)
    assert "epochs" in capsys.readouterr().err


def test_verbose_1_shows_the_batches_of_each_epoch_and_2_writes_each_epochs_scores(
    capsys, blobs, quick
):
    # 64 rows, a quarter held out: 48 training rows in batches of 16, 3 steps an epoch.
    config = quick(max_epochs=2, batch_size=16)
    fit_module(nn.Linear(2, 2), F.cross_entropy, blobs(), config=config)
    assert capsys.readouterr().err == ""  # verbose=0: silent
    config.verbose = 1
    fit_module(nn.Linear(2, 2), F.cross_entropy, blobs(), config=config)
    shown = capsys.readouterr().err
    assert "epochs" in shown and "0/2" in shown  # the bar over the epochs
    assert "epoch 1" in shown and "0/3" in shown  # and over the steps of one
    assert "validation" in shown
    config.verbose = 2
    fit_module(nn.Linear(2, 2), F.cross_entropy, blobs(), config=config)
    shown = capsys.readouterr().err
    assert "epoch 1/2 train_loss=" in shown and "val_ece=" in shown


@pytest.mark.parametrize("progress", [False, True])
def test_the_validation_bar_draws_nothing_from_torchs_generator(blobs, progress):
    # A pass over a DataLoader draws its workers' seed from torch's generator, the stream
    # of dropout; a progress bar that opened a second iterator (tqdm.auto does, around an
    # iterable) would draw again and change every later mask, so the trained weights.
    from torch.utils.data import DataLoader

    from reliacal.training._evaluation import evaluate

    loader, model = DataLoader(blobs(), batch_size=16), nn.Linear(2, 2)
    torch.manual_seed(0)
    for _ in loader:
        pass
    expected = torch.get_rng_state()
    torch.manual_seed(0)
    evaluate(
        model,
        loader,
        F.cross_entropy,
        logits_fn=None,
        device=torch.device("cpu"),
        autocast=contextlib.nullcontext,
        progress=progress,
    )
    assert torch.equal(torch.get_rng_state(), expected)


def test_callback_can_stop_training(blobs, quick):
    result = fit_module(
        nn.Linear(2, 2),
        F.cross_entropy,
        blobs(),
        config=quick(max_epochs=10),
        callbacks=[lambda epoch, logs: epoch == 2],
    )
    assert len(result.history) == 2 and result.stopped_early


def test_random_state_makes_fits_reproducible_and_leaves_global_rng_alone(blobs, quick):
    def run(random_state):
        torch.manual_seed(0)
        model = DropoutNet()
        fit_module(model, F.cross_entropy, blobs(), config=quick(random_state=random_state))
        return params_of(model)

    first, second, other = run(7), run(7), run(8)
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert not all(torch.equal(first[name], other[name]) for name in first)

    model = DropoutNet()
    torch.manual_seed(0)
    expected_next = torch.rand(3)
    torch.manual_seed(0)
    fit_module(model, F.cross_entropy, blobs(), config=quick(random_state=7))
    assert torch.equal(torch.rand(3), expected_next)


def test_mixed_precision_is_a_no_op_on_cpu(blobs, quick):
    def run(mixed_precision):
        torch.manual_seed(0)
        model = nn.Linear(2, 2)
        fit_module(model, F.cross_entropy, blobs(), config=quick(mixed_precision=mixed_precision))
        return params_of(model)

    plain, mixed = run(False), run(True)
    for name in plain:
        assert torch.equal(plain[name], mixed[name])


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"optimizer": "rmsprop"}, "optimizer"),
        ({"schedule": "linear"}, "schedule"),
        ({"selection_metric": "brier"}, "selection_metric"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"max_epochs": 0}, "max_epochs"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"ema_decay": 1.0}, "ema_decay"),
        ({"mixed_precision": "fp8"}, "mixed_precision"),
        ({"optimizer": "sgd", "momentum": 0.0}, "nesterov"),
        ({"milestones": (1, -2)}, "milestones"),
    ],
)
def test_invalid_config_raises(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(**overrides)


def test_invalid_inputs_raise(blobs, quick):
    with pytest.raises(ValueError, match="requires_grad"):
        fit_module(nn.Linear(2, 2).requires_grad_(False), F.cross_entropy, blobs(), config=quick())
    with pytest.raises(ValueError, match="n_iter_no_change"):
        fit_module(
            nn.Linear(2, 2),
            F.cross_entropy,
            blobs(),
            config=quick(validation_fraction=0, n_iter_no_change=2),
        )
    with pytest.raises(ValueError, match="map-style"):
        fit_module(nn.Linear(2, 2), F.cross_entropy, [1, 2, 3][0], config=quick())
    with pytest.raises(ValueError, match="scalar"):
        fit_module(
            nn.Linear(2, 2),
            lambda outputs, y: F.cross_entropy(outputs, y, reduction="none"),
            blobs(),
            config=quick(),
        )
    with pytest.raises(ValueError, match="no training data"):
        fit_module(
            nn.Linear(2, 2), F.cross_entropy, blobs(n=2), config=quick(validation_fraction=0.9)
        )


def run_worker(args, timeout):
    """Run ``python WORKER *args`` in its own process group; fail showing its output.

    On a timeout the whole group (the worker and the processes it spawned) is killed,
    so that no orphan keeps a core busy or a port open.
    """
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, str(WORKER), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"the DDP worker ran past {timeout} s; its output:\n{output[-6000:]}")
    if process.returncode != 0:
        pytest.fail(
            f"the DDP worker exited with {process.returncode}; its output:\n{output[-6000:]}"
        )


@pytest.mark.slow
def test_two_process_ddp_equals_single_process(tmp_path):
    # Single process with batch 8 against two gloo processes with batch 4 each and
    # the same seeded data order: DDP averages the two half-batch gradients.
    run_worker([tmp_path], timeout=900)
    single = torch.load(tmp_path / "single.pt", weights_only=True)
    distributed = torch.load(tmp_path / "ddp.pt", weights_only=True)
    assert single["history_len"] == distributed["history_len"] == 3
    assert not torch.equal(single["state"]["2.weight"], single["initial"]["2.weight"])
    for name, value in single["state"].items():
        torch.testing.assert_close(distributed["state"][name], value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(distributed["val_ece"], single["val_ece"], atol=1e-6)
    assert (tmp_path / "checkpoints" / "checkpoint.pt").exists()


@pytest.mark.gpu
@pytest.mark.gpu
@pytest.mark.parametrize("mixed_precision", ["auto", "fp16", False])
def test_cuda_training_with_mixed_precision(mixed_precision, blobs, quick):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))
    config = quick(max_epochs=6, device="cuda", mixed_precision=mixed_precision, ema_decay=0.5)
    result = fit_module(model, F.cross_entropy, blobs(), config=config)
    losses = [entry["train_loss"] for entry in result.history]
    assert losses[-1] < losses[0]
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())
    assert result.history[-1]["val_accuracy"] > 0.9


@pytest.mark.gpu
@pytest.mark.gpu
def test_cuda_nan_guard_and_resume(tmp_path, blobs, quick):
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    with pytest.raises(TrainingDivergedError):
        fit_module(model, NaNAtStep(model, bad=2), blobs(), config=quick(device="cuda"))
    assert next(model.parameters()).device.type == "cpu"
    config = quick(device="cuda", mixed_precision="fp16", checkpoint_dir=str(tmp_path))
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        fit_module(
            DropoutNet(), F.cross_entropy, blobs(), config=config, callbacks=[InterruptAfter(1)]
        )
    resumed = DropoutNet()
    result = fit_module(resumed, F.cross_entropy, blobs(), config=config)
    assert len(result.history) == 3


def test_thread_count_is_one_for_small_work_and_the_callers_otherwise():
    from reliacal.training import thread_count

    assert thread_count(None, nn.Linear(8, 8), rows=128) == 1
    assert thread_count(None, nn.Linear(4096, 4096), rows=64) is None  # torch's own setting
    assert thread_count(3, nn.Linear(8, 8), rows=128) == 3  # what the caller asks for


def test_torch_threads_restores_the_setting_even_on_failure():
    from reliacal.training import torch_threads

    previous = torch.get_num_threads()
    with pytest.raises(KeyboardInterrupt):
        with torch_threads(1):
            assert torch.get_num_threads() == 1
            raise KeyboardInterrupt
    assert torch.get_num_threads() == previous
    with torch_threads(None):
        assert torch.get_num_threads() == previous
