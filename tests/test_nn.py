"""Tests of reliacal.nn: the methods' modules for a user's own training loop."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.model_selection import train_test_split

from reliacal import nn as rnn
from reliacal.backbones import as_backbone
from reliacal.calibrators import TemperatureScaling
from reliacal.datasets import make_tiny_vit
from reliacal.finetune import (
    CalAttnFinetuner,
    DiffusionReconfigurer,
    calattn_network,
    director,
    director_network,
)
from reliacal.finetune.losses import brier_loss, focal_loss
from reliacal.metrics import negative_log_likelihood
from reliacal.training import TrainingResult

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_CLASSES = 3


def tiny_vit(depth=1, **kwargs):
    return make_tiny_vit(
        num_classes=N_CLASSES,
        image_size=8,
        embed_dim=16,
        depth=depth,
        num_heads=2,
        random_state=0,
        **kwargs,
    )


# The key check: the plain loop and the estimator train the same network bit for bit ---------


def train_in_a_plain_loop(
    vit, X, y, *, random_state, epochs, batch_size, lr, hidden, validation_fraction=0.0
):
    """CalAttn trained through reliacal.nn with torch primitives only.

    The recipe of ``CalAttnFinetuner``, ``TrainingConfig`` and the map of moving parts in
    ``reliacal/_training/loop.py``, written out: the estimator draws its initialisation seed from
    ``RandomState(random_state)``; the training loop splits ``random_state`` with
    ``SeedSequence`` into split / shuffle / host seeds, reshuffles each epoch with
    ``randperm`` seeded ``shuffle_seed + epoch`` (``DistributedSampler``'s rule), seeds the
    global torch generator (dropout) from the host seed mixed with rank 0, and steps AdamW
    with gradient clipping and a per-step warm-up + cosine schedule. With a validation
    fraction, the estimator holds out a stratified split seeded with the initialisation
    seed and keeps the weights of the epoch with the lowest validation NLL.
    Returns the model and the 1-based epoch whose weights it holds.
    """
    init_seed = int(np.random.RandomState(random_state).randint(np.iinfo(np.int32).max))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = rnn.CalAttnModel(copy.deepcopy(vit), hidden=hidden)
    loss_fn = rnn.CalAttnLoss(n_classes=N_CLASSES)  # CE + 0.1 Brier, the estimator's default

    rows = np.arange(len(X))
    validation = None
    if validation_fraction:
        rows, validation = train_test_split(
            rows,
            test_size=math.ceil(validation_fraction * len(X)),
            random_state=init_seed,
            stratify=y.numpy(),
        )
        rows, validation = np.sort(rows), np.sort(validation)
    X_train, y_train = X[rows], y[rows]

    _, shuffle_seed, host_seed = np.random.SeedSequence(random_state).generate_state(3)
    rank0_seed = int(np.random.SeedSequence([int(host_seed), 0]).generate_state(1)[0])
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.05)
    steps_per_epoch = math.ceil(len(X_train) / batch_size)
    # warmup_epochs=0.5, rounded to whole steps (halves to even), as TrainingConfig documents.
    warmup, total = round(0.5 * steps_per_epoch), epochs * steps_per_epoch

    def warmup_cosine(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine)
    best_nll, best_state, best_epoch = math.inf, None, epochs
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(rank0_seed)
        for epoch in range(epochs):
            model.train()
            shuffle = torch.Generator().manual_seed(int(shuffle_seed) + epoch)
            for batch in torch.randperm(len(X_train), generator=shuffle).split(batch_size):
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(X_train[batch]), y_train[batch])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                scheduler.step()
            if validation is not None:
                nll = validation_nll(model, X[validation], y[validation], batch_size)
                if nll < best_nll:
                    best_nll, best_epoch = nll, epoch + 1
                    best_state = copy.deepcopy(model.state_dict())
    if best_state is not None:
        model.load_state_dict(best_state)
    return model.eval(), best_epoch


def validation_nll(model, X, y, batch_size):
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(x).calibrated_logits for x in X.split(batch_size)])
    probabilities = torch.softmax(logits.double(), dim=1).numpy()
    return negative_log_likelihood(y.numpy(), probabilities, labels=np.arange(N_CLASSES))


@pytest.mark.parametrize("validation_fraction", [0.0, 0.25])
def test_plain_loop_and_estimator_train_bit_identical_weights(validation_fraction):
    # Dropout on: the host seed, not only the shuffling, must be reproduced as well.
    vit = tiny_vit(drop_rate=0.1, proj_drop_rate=0.1)
    generator = torch.Generator().manual_seed(1)
    X = torch.randn(40, 1, 8, 8, generator=generator)
    y = torch.arange(40) % N_CLASSES
    settings = dict(random_state=7, epochs=3, batch_size=16, lr=1e-3, hidden=8)
    estimator = CalAttnFinetuner(
        vit,
        hidden=8,
        max_epochs=3,
        batch_size=16,
        learning_rate=1e-3,
        validation_fraction=validation_fraction,  # 0: the last weights are kept
        device="cpu",
        random_state=7,
    ).fit(X.numpy(), y.numpy())
    model, best_epoch = train_in_a_plain_loop(
        vit, X, y, validation_fraction=validation_fraction, **settings
    )
    assert best_epoch == estimator.best_epoch_

    expected = estimator.network_.state_dict()
    trained = model.state_dict()
    assert list(trained) == list(expected)
    different = [name for name in expected if not torch.equal(trained[name], expected[name])]
    assert different == []
    # Training moved the weights: the equality is not that of two untouched copies.
    head = model.scale_head.layers[0].weight
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(np.random.RandomState(7).randint(np.iinfo(np.int32).max)))
        initial = rnn.CalAttnModel(copy.deepcopy(vit), hidden=8).scale_head.layers[0].weight
    assert not torch.equal(head, initial)
    # Predictions agree too, batch for batch (the estimator predicts in batches of 16).
    with torch.no_grad():
        logits = torch.cat([model(rows).calibrated_logits for rows in X.split(16)])
    np.testing.assert_array_equal(estimator.decision_function(X.numpy()), logits.double())


def test_a_different_seed_gives_different_weights():
    # The guard of the check above: the loop is sensitive to the seed it reproduces.
    vit = tiny_vit()
    X = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    y = torch.arange(16) % N_CLASSES
    settings = dict(epochs=1, batch_size=8, lr=1e-3, hidden=8)
    first, _ = train_in_a_plain_loop(vit, X, y, random_state=0, **settings)
    second, _ = train_in_a_plain_loop(vit, X, y, random_state=1, **settings)
    assert not torch.equal(first.scale_head.layers[0].weight, second.scale_head.layers[0].weight)


# CalAttn modules --------------------------------------------------------------------------


def test_calattn_modules_are_the_estimators_classes():
    assert issubclass(rnn.CalAttnModel, calattn_network.CalAttnNetwork)
    assert issubclass(rnn.CalAttnHead, calattn_network.ScaleHead)
    assert issubclass(rnn.CalAttnLoss, calattn_network.CalAttnLoss)
    assert rnn.CalAttnOutput is calattn_network.CalAttnOutput
    # The public head adds a constructor and documentation, no behaviour.
    assert set(vars(rnn.CalAttnHead)) <= {"__init__", "__doc__", "__module__", "__qualname__"}
    assert "forward" not in vars(rnn.CalAttnModel)


def test_head_formula_by_hand():
    head = rnn.CalAttnHead(4, hidden=3)
    h = torch.randn(5, 4)
    first, second = head.layers[0], head.layers[2]
    expected = F.softplus(F.gelu(h @ first.weight.T + first.bias) @ second.weight.T + second.bias)
    torch.testing.assert_close(head(h), expected[:, 0] + 1e-6)


def test_model_divides_the_backbones_logits_by_the_heads_scale():
    vit = tiny_vit()
    model = rnn.CalAttnModel(vit, hidden=8, token="patch_mean").eval()
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        out = model(x)
        logits = vit.eval()(x)  # the wrapped object itself: no copy is made
        tokens = vit.forward_features(x)
        scale = model.scale_head(tokens[:, vit.num_prefix_tokens :].mean(dim=1))
    torch.testing.assert_close(out.logits, logits)
    torch.testing.assert_close(out.scale, scale)
    torch.testing.assert_close(out.calibrated_logits, logits / scale[:, None])
    assert model.backbone.model is vit and isinstance(model.scale_head, rnn.CalAttnHead)


def test_frozen_backbone_trains_only_the_head():
    model = rnn.CalAttnModel(tiny_vit(), hidden=8, freeze_backbone=True).train()
    assert not model.backbone.training
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {name for name in trainable if name.startswith("scale_head.")} != set()


def test_estimator_weights_load_into_the_public_model():
    X = np.random.default_rng(0).random((12, 1, 8, 8), dtype=np.float32)
    y = np.arange(12) % N_CLASSES
    estimator = CalAttnFinetuner(
        tiny_vit(), hidden=8, max_epochs=1, batch_size=6, device="cpu", random_state=0
    ).fit(X, y)
    model = rnn.CalAttnModel(tiny_vit(), hidden=8)
    model.load_state_dict(estimator.network_.state_dict())
    with torch.no_grad():
        logits = model.eval()(torch.from_numpy(X)).calibrated_logits
    np.testing.assert_allclose(estimator.decision_function(X), logits.double(), rtol=1e-6)


def test_loss_is_base_plus_weighted_brier_of_the_calibrated_logits():
    logits = torch.randn(6, 3)
    scale = torch.rand(6) + 0.5
    out = rnn.CalAttnOutput(logits / scale[:, None], scale, logits)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    calibrated = logits / scale[:, None]
    torch.testing.assert_close(
        rnn.CalAttnLoss(3)(out, y),
        F.cross_entropy(calibrated, y) + 0.1 * brier_loss(calibrated, y),
    )
    torch.testing.assert_close(
        rnn.CalAttnLoss(3, base_loss="focal", focal_gamma=2.0, lambda_brier=0.0)(out, y),
        focal_loss(calibrated, y, gamma=2.0),
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(n_classes=1), "n_classes must be an integer >= 2"),
        (dict(n_classes=2.0), "n_classes must be an integer >= 2"),
        (dict(n_classes=3, lambda_brier=-1.0), "lambda_brier must be a number >= 0"),
        (dict(n_classes=3, base_loss="nope"), "base_loss must be one of"),
    ],
)
def test_loss_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rnn.CalAttnLoss(**kwargs)


def test_loss_refuses_labels_out_of_range():
    out = rnn.CalAttnOutput(torch.zeros(2, 3), torch.ones(2), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"column indices 0\.\.2 .*such as \[0, 3\]"):
        rnn.CalAttnLoss(3)(out, torch.tensor([0, 3]))


def test_model_and_head_refuse_bad_settings():
    with pytest.raises(ValueError, match="hidden must be an integer >= 1"):
        rnn.CalAttnHead(4, hidden=0)
    with pytest.raises(ValueError, match="in_features must be an integer >= 1"):
        rnn.CalAttnHead(True)
    with pytest.raises(ValueError, match="token must be one of"):
        rnn.CalAttnModel(tiny_vit(), token="middle")
    with pytest.raises(ValueError, match="freeze_backbone must be a bool"):
        rnn.CalAttnModel(tiny_vit(), freeze_backbone="yes")


# DIRECTOR modules -------------------------------------------------------------------------


def test_director_pieces_are_the_estimators():
    for name in ("DirectorStudent", "DirectorTrainingModule", "ReverseStep", "MeanHead"):
        assert getattr(rnn, name) is getattr(director_network, name)
    assert rnn.build_director_student is director_network.build_student


def test_director_student_from_the_public_pieces_equals_the_estimators(monkeypatch):
    # The estimator seeds its student's initialisation with its fit seed; so do we.
    vit = tiny_vit(depth=2)
    X = np.random.default_rng(0).random((8, 1, 8, 8), dtype=np.float32)
    y = np.arange(8) % N_CLASSES

    def untrained(module, *args, **kwargs):
        # Training skipped: the estimator keeps the student as it was built.
        return TrainingResult(history=[], best_epoch=0, best_score=math.nan, stopped_early=False)

    monkeypatch.setattr(director, "fit_module", untrained)
    estimator = DiffusionReconfigurer(vit, reconfigure=1, device="cpu", random_state=3).fit(X, y)

    teacher = as_backbone(copy.deepcopy(vit)).eval()
    teacher.requires_grad_(False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        # The estimator's default anchor="teacher" keeps the teacher's blocks in the student.
        student = rnn.build_director_student(teacher, n_reconfigured=1, anchored=True)
    expected = estimator.network_.state_dict()
    assert list(student.state_dict()) == list(expected)
    for name, value in student.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_director_loss_weights_its_three_terms():
    logits = torch.randn(4, 3)
    mean_error, noise_error, sigma_squared = torch.rand(4), torch.rand(4), torch.rand(4)
    y = torch.tensor([0, 1, 2, 0])
    loss = rnn.DirectorLoss(lambda_mean=2.0, lambda_var=3.0, lambda_ce=0.5)
    expected = 2.0 * mean_error.mean() + 3.0 * noise_error.mean() + 0.5 * F.cross_entropy(logits, y)
    torch.testing.assert_close(loss((logits, mean_error, noise_error, sigma_squared), y), expected)
    means = loss.epoch_means()
    assert means["train_noise_matching"] == pytest.approx(float(noise_error.mean()))
    # The noise scale is read from the fourth output, not from the loss term.
    assert means["train_sigma"] == pytest.approx(float(sigma_squared.mean()) ** 0.5)
    assert means["train_sigma_steps"] == pytest.approx([float(sigma_squared.mean()) ** 0.5])
    # Three outputs (before the fourth existed): the noise matching was the mean of sigma^2.
    loss((logits, mean_error, noise_error), y)
    assert loss.epoch_means()["train_sigma"] == pytest.approx(float(noise_error.mean()) ** 0.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(lambda_mean=0.0, lambda_var=0.0, lambda_ce=0.0), "at least one of"),
        (dict(lambda_ce=-1.0), "lambda_ce must be a number >= 0"),
        (dict(lambda_var=float("nan")), "lambda_var must be a number >= 0"),
    ],
)
def test_director_loss_refuses_bad_weights(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rnn.DirectorLoss(**kwargs)


# TemperatureScaler ------------------------------------------------------------------------


def test_temperature_scaler_divides_by_exp_of_its_parameter():
    scaler = rnn.TemperatureScaler(4.0)
    assert scaler.log_temperature.item() == pytest.approx(math.log(4.0))
    z = torch.tensor([[4.0, -2.0, 0.0]], dtype=torch.float64)
    out = scaler(z)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor([[1.0, -0.5, 0.0]], dtype=torch.float64))
    out.sum().backward()
    # d/dt sum(z) e^{-t} = -sum(z) / T = -(2 / 4)
    assert scaler.log_temperature.grad.item() == pytest.approx(-0.5)


def test_temperature_scaler_trained_in_a_loop_matches_temperature_scaling(load_record):
    probabilities, labels = load_record("lenet-5-cifar-10")
    logits = np.log(np.clip(probabilities, 1e-12, None))
    expected = TemperatureScaling().fit(logits, labels).temperature_
    scaler = rnn.TemperatureScaler().double()
    z, target = torch.from_numpy(logits), torch.from_numpy(labels).long()
    optimizer = torch.optim.LBFGS(
        scaler.parameters(), lr=1.0, max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-14
    )

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(scaler(z), target)
        loss.backward()
        return loss

    optimizer.step(closure)
    assert scaler.temperature.item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf"), float("nan"), "2", True])
def test_temperature_scaler_refuses_a_bad_temperature(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        rnn.TemperatureScaler(temperature)


def test_temperature_scaler_refuses_bad_logits():
    scaler = rnn.TemperatureScaler()
    with pytest.raises(ValueError, match=r"shape \(\.\.\., K\)"):
        scaler(torch.tensor(1.0))
    with pytest.raises(ValueError, match="floating point"):
        scaler(torch.tensor([[1, 2]]))
