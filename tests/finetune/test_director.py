"""Tests of DIRECTOR (reliacal.finetune.director and its modules)."""

from __future__ import annotations

import copy
import math
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.base import clone
from timm.models.vision_transformer import VisionTransformer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from reliacal.backbones import as_backbone
from reliacal.datasets import (
    default_digits_training_config,
    load_digits_images,
    make_tiny_bert,
    train_digits_classifier,
)
from reliacal.finetune import director_network
from reliacal.finetune.director import DiffusionReconfigurer, StudentBelowTeacherWarning
from reliacal.finetune.director_network import (
    AdaLNBlock,
    DirectorStudent,
    DirectorTrainingModule,
    NoiseHead,
    ReverseStep,
    TransitionNetwork,
    build_student,
    key_padding_mask,
    sinusoidal_step_embedding,
)
from reliacal.training import TrainingDivergedError

VOCAB, PAD = 30, 0


def tiny_vit(seed: int = 0, depth: int = 3) -> VisionTransformer:
    torch.manual_seed(seed)
    sizes = dict(img_size=16, patch_size=4, in_chans=1, embed_dim=32, num_heads=2)
    return VisionTransformer(**sizes, num_classes=10, depth=depth)


def tiny_bert(seed: int = 0):
    return make_tiny_bert(3, VOCAB, pad_token_id=PAD, random_state=seed).eval()


def noisy_student(teacher, **settings) -> DiffusionReconfigurer:
    """An unfitted student of ``teacher`` with the short run that the students fitted on the
    digits with noise share: batch 32, half an epoch of warm-up, no weight averaging, CPU."""
    return DiffusionReconfigurer(
        teacher,
        batch_size=32,
        warmup_epochs=0.5,
        ema_decay=None,
        device="cpu",
        random_state=0,
        **settings,
    )


def frozen_adapter(model: nn.Module):
    adapter = as_backbone(copy.deepcopy(model)).eval()
    adapter.requires_grad_(False)
    return adapter


def token_data(n: int, length: int = 8, seed: int = 0):
    """Token ids whose label is the count of token 1 among the first 4, capped at 2; padded tails."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(n, length))
    ids[:, 1:5] = np.where(rng.random((n, 4)) < 0.3, 1, ids[:, 1:5])
    lengths = rng.integers(5, length + 1, size=n)
    ids[np.arange(length)[None, :] >= lengths[:, None]] = PAD
    y = np.minimum((ids[:, 1:5] == 1).sum(axis=1), 2)
    return ids, y


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits_images(image_size=16)
    return X[:400], y[:400]


@pytest.fixture(scope="module")
def trained_teacher(digits):
    X, y = digits
    config = default_digits_training_config(quick=True, random_state=0)
    config.max_epochs, config.batch_size, config.learning_rate = 10, 32, 3e-3
    model, _ = train_digits_classifier(X, y, model=tiny_vit(), config=config)
    return model


@pytest.fixture(scope="module")
def fitted_vit(digits, trained_teacher):
    X, y = digits
    # The paper's unanchored student: its matching losses start high and fall.
    estimator = noisy_student(
        trained_teacher, anchor="none", max_epochs=5, learning_rate=3e-3, noise_init=0.3, n_draws=4
    )
    return estimator.fit(X, y)


# The network --------------------------------------------------------------------------------


def test_sinusoidal_step_embedding_matches_the_formula():
    emb = sinusoidal_step_embedding(torch.tensor([1.0, 5.0]), dim=4, max_period=100.0)
    # half = 2: frequencies 100**0 = 1 and 100**(-1/2) = 0.1
    expected = [
        [math.cos(1), math.cos(0.1), math.sin(1), math.sin(0.1)],
        [math.cos(5), math.cos(0.5), math.sin(5), math.sin(0.5)],
    ]
    np.testing.assert_allclose(emb.numpy(), expected, rtol=1e-6)
    assert sinusoidal_step_embedding(torch.arange(3)).shape == (3, 256)
    with pytest.raises(ValueError, match="even"):
        sinusoidal_step_embedding(torch.arange(3), dim=5)


def test_transition_network_is_the_identity_at_initialisation():
    torch.manual_seed(0)
    network = TransitionNetwork(16, depth=2, num_heads=4)
    for block in network.blocks:
        modulation = block.modulation[1]
        assert torch.count_nonzero(modulation.weight) == 0
        assert torch.count_nonzero(modulation.bias) == 0
    h = torch.randn(3, 5, 16)
    steps = torch.tensor([1, 2, 7])
    assert torch.equal(network(h, steps), h)
    # ...and stops being one once the modulation moves (the test can fail).
    nn.init.normal_(network.blocks[0].modulation[1].bias)
    assert not torch.allclose(network(h, steps), h)


def test_adaln_block_ignores_padded_keys():
    torch.manual_seed(0)
    block = AdaLNBlock(8, num_heads=2)
    nn.init.normal_(block.modulation[1].weight)
    nn.init.normal_(block.modulation[1].bias)
    h = torch.randn(2, 5, 8)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    changed = h.clone()
    changed[1, 3:] = torch.randn(2, 8)
    condition = torch.randn(2, 8)
    out, out_changed = block(h, condition, mask), block(changed, condition, mask)
    torch.testing.assert_close(out[1, :3], out_changed[1, :3])
    assert not torch.allclose(block(h, condition), block(changed, condition))


def test_noise_head_starts_at_noise_init_and_stays_positive():
    head = NoiseHead(8, noise_init=0.02)
    g = torch.randn(4, 3, 8)
    with torch.no_grad():
        torch.testing.assert_close(head(g), torch.full((4, 3, 8), 0.02))
        nn.init.normal_(head.projection[1].weight, std=10.0)
        head.offset.fill_(-50.0)
        assert bool((head(g) > 0).all())
    with pytest.raises(ValueError, match="noise_init"):
        NoiseHead(8, noise_init=0.0)


def test_mean_head_starts_as_the_transition_output():
    step = ReverseStep(8, num_heads=2)
    h = torch.randn(2, 3, 8)
    with torch.no_grad():
        mu, _ = step(h, torch.tensor([1, 2]))
    assert torch.equal(mu, h)


def test_key_padding_mask_reads_every_context_form():
    boolean = torch.tensor([[True, True, False]])[:, None, None, :].expand(1, 1, 3, 3)
    additive = torch.where(boolean, 0.0, torch.finfo(torch.float32).min)
    expected = [[True, True, False]]
    assert key_padding_mask(boolean).tolist() == expected
    assert key_padding_mask(additive).tolist() == expected
    assert key_padding_mask(torch.tensor([[1, 1, 0]])).tolist() == expected
    assert key_padding_mask(None) is None
    with pytest.raises(ValueError, match="key mask"):
        key_padding_mask(("not", "a mask"))


# Student and teacher ------------------------------------------------------------------------


def test_path_has_the_teacher_depth_and_k_steps_are_reconfigured():
    teacher = frozen_adapter(tiny_vit(depth=3))
    x = torch.randn(2, 1, 16, 16)
    for k in (3, 1):
        student = build_student(teacher, n_reconfigured=k)
        calls: list[torch.Tensor] = []
        student.step.register_forward_hook(
            lambda module, args, out, calls=calls: calls.append(args[1])
        )
        with torch.no_grad():
            student.sample_logits(x, n_draws=1)
        assert student.depth == len(teacher.blocks) == 3
        assert [int(steps[0]) for steps in calls] == list(range(4 - k, 4))


def test_matching_error_follows_the_teacher_states_from_timm():
    model = tiny_vit(depth=3)
    teacher = frozen_adapter(model)
    torch.manual_seed(1)
    student = build_student(teacher, n_reconfigured=2, noise_init=0.1)
    with torch.no_grad():  # move the step away from the identity so that the errors differ
        for parameter in student.step.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    module = DirectorTrainingModule(teacher, student).eval()
    x = torch.randn(4, 1, 16, 16)
    with torch.no_grad():
        _, mean_error, noise_error, sigma_squared = module(x)
        # Independent record of the block outputs: timm's own forward_intermediates.
        states = model.eval().forward_intermediates(
            x, indices=3, return_prefix_tokens=True, output_fmt="NLC", intermediates_only=True
        )
        states = [torch.cat([prefix, tokens], dim=1) for tokens, prefix in states]
        expected_mean, expected_noise = torch.zeros(4), torch.zeros(4)
        for t in (2, 3):
            mu, sigma = student.step(states[t - 2], torch.full((4,), t))
            expected_mean += ((mu - states[t - 1]) ** 2).mean(dim=(1, 2)) / 2
            expected_noise += (sigma**2).mean(dim=(1, 2)) / 2
    torch.testing.assert_close(mean_error, expected_mean)
    torch.testing.assert_close(noise_error, expected_noise)
    torch.testing.assert_close(sigma_squared, expected_noise)


def test_noise_target_makes_noise_matching_a_gaussian_kl():
    teacher = frozen_adapter(tiny_vit())
    torch.manual_seed(0)
    student = build_student(teacher, n_reconfigured=2, noise_init=0.05)
    x = torch.randn(3, 1, 16, 16)
    with torch.no_grad():
        _, _, kl, sigma_squared = DirectorTrainingModule(teacher, student, noise_target=0.1)(x)
        _, _, at_target, _ = DirectorTrainingModule(teacher, student, noise_target=0.05)(x)
    # sigma starts at exactly 0.05 everywhere; KL(N(m, 0.05^2) || N(m, 0.1^2)) by hand:
    expected = math.log(0.1 / 0.05) + 0.05**2 / (2 * 0.1**2) - 0.5
    torch.testing.assert_close(kl, torch.full((3,), expected))
    torch.testing.assert_close(at_target, torch.zeros(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(sigma_squared, torch.full((3,), 0.05**2))
    with pytest.raises(ValueError, match="noise_target"):
        DirectorTrainingModule(teacher, student, noise_target=-0.1)


def test_noise_target_holds_the_learned_noise_near_the_prior(digits, trained_teacher):
    X, y = digits
    settings = dict(reconfigure=1, max_epochs=3, learning_rate=1e-2, noise_init=0.01, n_draws=2)
    plain = noisy_student(trained_teacher, **settings).fit(X[:200], y[:200])
    prior = noisy_student(trained_teacher, lambda_var=1.0, noise_target=0.2, **settings)
    prior.fit(X[:200], y[:200])
    # Without the prior the cross-entropy barely moves sigma from 0.01; the KL pulls it up.
    assert plain.history_[-1]["train_sigma"] < 0.05
    assert abs(math.log(prior.history_[-1]["train_sigma"] / 0.2)) < math.log(1.5)
    assert prior.history_[-1]["train_noise_matching"] < prior.history_[0]["train_noise_matching"]


def test_student_readout_starts_as_the_teacher_classifier():
    model = tiny_vit()
    teacher = frozen_adapter(model)
    student = build_student(teacher, n_reconfigured=3)
    h = torch.randn(2, 17, 32)
    with torch.no_grad():
        expected = model.eval().forward_head(model.norm(h))
        torch.testing.assert_close(student.eval().readout(h, None), expected)


def test_cross_entropy_reaches_the_noise_head_through_the_sampled_path():
    teacher = frozen_adapter(tiny_vit())
    student = build_student(teacher, n_reconfigured=3)
    module = DirectorTrainingModule(teacher, student).train()
    logits, *_ = module(torch.randn(4, 1, 16, 16))
    nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3])).backward()
    assert student.step.noise_head.offset.grad.abs().sum() > 0
    assert all(p.grad is None for p in teacher.parameters())


# The estimator ------------------------------------------------------------------------------


def test_vit_shapes_rows_and_uncertainty(fitted_vit, digits):
    X, _ = digits
    proba = fitted_vit.predict_proba(X[:20])
    assert proba.shape == (20, 10)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-10)
    np.testing.assert_allclose(
        np.exp(fitted_vit.decision_function(X[:20])), proba, rtol=1e-10, atol=1e-300
    )
    assert fitted_vit.predict(X[:20]).shape == (20,)
    table = fitted_vit.uncertainty(X[:20])
    assert table.shape == (20, 3)
    assert (table.to_numpy() >= 0).all()
    assert table["mutual_information"].max() > 0  # noise_init=0.3: the paths disagree
    np.testing.assert_allclose(
        table["predictive_entropy"], -(proba * np.log(proba)).sum(axis=1), rtol=1e-10
    )
    assert 0.0 <= fitted_vit.score(X[:20], digits[1][:20]) <= 1.0


def test_predict_proba_returns_the_uncertainty_of_the_same_paths(fitted_vit, digits):
    X = digits[0][:20]
    estimator = copy.deepcopy(fitted_vit).set_params(random_state=3, n_draws=4)
    proba, table = estimator.predict_proba(X, return_uncertainty=True)
    np.testing.assert_array_equal(proba, estimator.predict_proba(X))
    pd.testing.assert_frame_equal(table, estimator.uncertainty(X))
    assert table["mutual_information"].max() > 0  # the paths disagree: not a constant table


def test_training_lowers_matching_and_cross_entropy(fitted_vit):
    first, last = fitted_vit.history_[0], fitted_vit.history_[-1]
    assert len(fitted_vit.history_) == 5
    assert last["train_mean_matching"] < 0.8 * first["train_mean_matching"]
    assert last["train_cross_entropy"] < 0.8 * first["train_cross_entropy"]
    assert "val_cross_entropy" in last and "val_ece" in last


def test_parameter_counts_are_exact(fitted_vit):
    teacher = as_backbone(fitted_vit.backbone)
    student = fitted_vit.network_
    assert fitted_vit.teacher_n_parameters_ == sum(p.numel() for p in teacher.parameters())
    replaced = sum(p.numel() for block in teacher.blocks for p in block.parameters())
    added = sum(p.numel() for p in student.step.parameters()) + sum(
        p.numel() for p in student.readout_mlp.parameters()
    )
    assert fitted_vit.n_parameters_ == fitted_vit.teacher_n_parameters_ - replaced + added


def test_sampling_is_reproducible_and_averaging_reduces_variance(fitted_vit, digits):
    X = digits[0][:30]
    again = clone(fitted_vit).set_params(random_state=0)
    assert again.get_params()["noise_init"] == 0.3
    single_path = copy.deepcopy(fitted_vit).set_params(n_draws=1)
    first = single_path.predict_proba(X)
    np.testing.assert_array_equal(first, single_path.predict_proba(X))
    estimator = copy.deepcopy(fitted_vit)

    def spread(n_draws: int) -> float:
        draws = []
        for seed in range(6):
            estimator.set_params(random_state=seed, n_draws=n_draws)
            draws.append(estimator.predict_proba(X))
        return float(np.var(np.stack(draws), axis=0).mean())

    single, averaged = spread(1), spread(16)
    assert single > 0
    assert averaged < single / 4  # independent paths: about 1/16


def test_pickle_round_trip_predicts_identically(fitted_vit, digits):
    X = digits[0][:10]
    restored = pickle.loads(pickle.dumps(fitted_vit))
    np.testing.assert_array_equal(restored.predict_proba(X), fitted_vit.predict_proba(X))
    np.testing.assert_array_equal(restored.classes_, fitted_vit.classes_)


def test_mutual_information_is_zero_without_noise(fitted_vit, digits):
    X = digits[0][:10]
    estimator = copy.deepcopy(fitted_vit)

    class Silent(nn.Module):
        def forward(self, g):
            return torch.zeros_like(g)

    estimator.network_.step.noise_head = Silent()
    table = estimator.set_params(n_draws=5).uncertainty(X)
    assert (table.to_numpy() >= 0).all()
    np.testing.assert_allclose(table["mutual_information"], 0.0, atol=1e-12)
    np.testing.assert_allclose(
        estimator.set_params(random_state=1).predict_proba(X),
        estimator.set_params(random_state=2).predict_proba(X),
        atol=1e-12,
    )


def test_reconfigure_k_leaves_the_front_blocks_untouched_and_frozen(digits):
    X, y = digits
    model = tiny_vit(depth=3)
    original = copy.deepcopy(model.state_dict())
    estimator = DiffusionReconfigurer(
        model,
        reconfigure=1,
        anchor="none",
        max_epochs=1,
        batch_size=64,
        device="cpu",
        random_state=0,
    ).fit(X[:128], y[:128])
    assert estimator.n_reconfigured_ == 1 and estimator.n_blocks_ == 3
    backbone = estimator.network_.backbone
    for index in range(2):
        for name, parameter in backbone.blocks[index].named_parameters():
            assert not parameter.requires_grad
            torch.testing.assert_close(
                parameter, original[f"blocks.{index}.{name}"], rtol=0, atol=0
            )
    # The embedding in front of frozen blocks stays the teacher's too.
    assert not backbone.model.patch_embed.proj.weight.requires_grad
    torch.testing.assert_close(
        backbone.model.patch_embed.proj.weight, original["patch_embed.proj.weight"]
    )
    # The replaced block is gone from the student; the trained classifier moved.
    assert isinstance(backbone.blocks[2], nn.Identity)
    assert not torch.equal(backbone.model.head.weight, original["head.weight"])
    # The user's model is not modified in any way.
    for name, value in model.state_dict().items():
        assert torch.equal(value, original[name])
    assert all(p.requires_grad for p in model.parameters())


def test_bert_teacher_with_padding(digits):
    ids, y = token_data(96)
    estimator = DiffusionReconfigurer(
        tiny_bert(),
        max_epochs=2,
        batch_size=32,
        lambda_mean=0.8,
        lambda_ce=0.2,
        n_draws=3,
        classes=["none", "one", "many"],
        device="cpu",
        random_state=0,
    )
    labels = np.array(["none", "one", "many"])[y]
    estimator.fit(ids, labels)
    proba = estimator.predict_proba(ids[:7])
    assert proba.shape == (7, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-10)
    assert set(estimator.predict(ids[:7])) <= {"none", "one", "many"}
    assert estimator.uncertainty(ids[:7]).shape == (7, 3)
    as_dict = {"input_ids": ids[:7], "attention_mask": (ids[:7] != PAD).astype(np.int64)}
    np.testing.assert_allclose(estimator.predict_proba(as_dict), proba, atol=1e-6)
    assert estimator.n_blocks_ == 2
    # Padding is masked in the student's attention: extra padding changes nothing.
    silent = copy.deepcopy(estimator)
    silent.network_.step.noise_head = type(
        "Silent", (nn.Module,), {"forward": lambda self, g: torch.zeros_like(g)}
    )()
    short = np.where(np.arange(8) < 5, ids[:4], PAD)
    padded = np.concatenate([short, np.full((4, 3), PAD)], axis=1)
    np.testing.assert_allclose(
        silent.set_params(n_draws=1).predict_proba(short),
        silent.predict_proba(padded),
        atol=1e-5,
    )


def test_hugging_face_vit_teacher(digits, tiny_transformer):
    X, y = digits
    teacher = tiny_transformer(
        "hf_vit", image_size=16, patch_size=4, channels=1, width=32, depth=2, heads=2, classes=10
    )
    estimator = DiffusionReconfigurer(
        teacher,
        reconfigure=1,
        max_epochs=1,
        n_draws=2,
        device="cpu",
        random_state=0,
    ).fit(X[:64], y[:64])
    proba = estimator.predict_proba(X[:5])
    assert proba.shape == (5, 10)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-10)
    assert estimator.n_blocks_ == 2 and estimator.n_reconfigured_ == 1


def test_dataset_and_dataloader_inputs(digits):
    X, y = digits
    data = TensorDataset(torch.from_numpy(X[:96]), torch.from_numpy(y[:96]))
    names = [f"digit {k}" for k in range(10)]
    estimator = DiffusionReconfigurer(
        tiny_vit(), max_epochs=1, n_draws=2, classes=names, device="cpu", random_state=0
    ).fit(DataLoader(data, batch_size=32))
    assert estimator.classes_[3] == "digit 3"
    assert estimator.predict(data)[0] in names
    # The loader's batches, which the sampled noise follows, serve both calls.
    accuracy = estimator.score(DataLoader(data, batch_size=50))
    predicted = estimator.predict(DataLoader(data, batch_size=50))
    assert accuracy == pytest.approx(np.mean(predicted == np.asarray(names)[y[:96]]))
    shifted = TensorDataset(torch.from_numpy(X[:8]), torch.from_numpy(y[:8]) + 10)
    with pytest.raises(ValueError, match="column indices"):
        DiffusionReconfigurer(tiny_vit(), max_epochs=1, device="cpu").fit(shifted)


def test_clone_and_get_params():
    estimator = DiffusionReconfigurer(tiny_vit(), depth=2, reconfigure=2, n_draws=7)
    params = clone(estimator).get_params()
    assert params["depth"] == 2 and params["reconfigure"] == 2 and params["n_draws"] == 7
    assert not hasattr(estimator, "network_")


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"reconfigure": 4}, "exceeds"),
        ({"reconfigure": 0}, "reconfigure"),
        ({"reconfigure": "some"}, "reconfigure"),
        ({"depth": 0}, "depth"),
        ({"lambda_mean": -1.0}, "lambda_mean"),
        ({"lambda_mean": 0.0, "lambda_ce": 0.0}, "at least one"),
        ({"noise_init": 0.0}, "noise_init"),
        ({"noise_target": -0.1}, "noise_target"),
        ({"noise_target": 0.1}, "no effect with lambda_var=0"),
        ({"n_draws": 0}, "n_draws"),
        ({"classes": [0, 1]}, "one label per column"),
    ],
)
def test_bad_parameters_raise(params, match, digits):
    X, y = digits
    with pytest.raises(ValueError, match=match):
        DiffusionReconfigurer(tiny_vit(), max_epochs=1, device="cpu", **params).fit(X[:8], y[:8])


def test_bad_inputs_raise(fitted_vit, digits):
    X, y = digits
    with pytest.raises(ValueError, match="not column indices"):
        DiffusionReconfigurer(tiny_vit(), max_epochs=1, device="cpu").fit(X[:8], y[:8] + 20)
    with pytest.raises(ValueError, match="y is required"):
        DiffusionReconfigurer(tiny_vit(), max_epochs=1, device="cpu").fit(X[:8])
    with pytest.raises(ValueError, match="backbone"):
        DiffusionReconfigurer().fit(X[:8], y[:8])
    plain = as_backbone(nn.Sequential(nn.Flatten(), nn.Linear(256, 10)), features="0", head="1")
    with pytest.raises(ValueError, match="reconfiguration"):
        DiffusionReconfigurer(plain, max_epochs=1, device="cpu").fit(X[:8], y[:8])


def test_score_on_a_shuffling_loader_pairs_each_prediction_with_its_label(digits, fitted_vit):
    from torch.utils.data import DataLoader, TensorDataset

    X, y = digits
    data = TensorDataset(torch.as_tensor(X[:64]), torch.as_tensor(y[:64]))

    # What shuffle=True makes, with a generator of its own so that its order can be replayed.
    def sampler():
        return torch.utils.data.RandomSampler(data, generator=torch.Generator().manual_seed(3))

    shuffled = DataLoader(data, batch_size=16, sampler=sampler())
    # The oracle: the same order given as a fixed list of indices, in the same batches
    # (the sampled noise follows the batches), against the labels in that order.
    order = list(sampler())
    assert sorted(order) == list(range(64)) and order != sorted(order)
    predicted = fitted_vit.predict(DataLoader(data, batch_size=16, sampler=order))
    expected = np.mean(predicted == y[:64][order])
    assert fitted_vit.score(shuffled) == pytest.approx(expected)


def test_resumed_fit_keeps_the_history_of_every_epoch(
    digits, trained_teacher, tmp_path, monkeypatch
):
    import reliacal.finetune.director as director_module

    X, y = digits
    settings = dict(
        max_epochs=3,
        batch_size=64,
        ema_decay=None,
        device="cpu",
        random_state=0,
        checkpoint_dir=str(tmp_path / "run"),
    )
    record = director_module._record_components

    def interrupt_after_epoch_2(history, loss, epoch, logs):
        record(history, loss, epoch, logs)
        if epoch == 2:
            raise KeyboardInterrupt  # after the epoch's checkpoint is written

    monkeypatch.setattr(director_module, "_record_components", interrupt_after_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        DiffusionReconfigurer(trained_teacher, **settings).fit(X[:128], y[:128])
    monkeypatch.setattr(director_module, "_record_components", record)
    resumed = DiffusionReconfigurer(trained_teacher, **settings).fit(X[:128], y[:128])
    assert [entry["epoch"] for entry in resumed.history_] == [1, 2, 3]
    assert "train_cross_entropy" in resumed.history_[-1]


def test_nan_inputs_are_refused_at_fit_and_predict(fitted_vit, digits):
    X, y = digits
    poisoned = X[:8].copy()
    poisoned[2, 0, 3, 3] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        DiffusionReconfigurer(tiny_vit(), max_epochs=1, device="cpu").fit(poisoned, y[:8])
    for method in (fitted_vit.predict_proba, fitted_vit.predict, fitted_vit.uncertainty):
        with pytest.raises(ValueError, match="X contains NaN or infinity"):
            method(poisoned)


def test_images_of_the_wrong_size_get_a_value_error_that_says_what_is_expected(digits):
    X, y = digits
    small = X[:8, :, :8, :8]  # the teacher reads 16 x 16 images
    with pytest.raises(ValueError, match=r"backbone cannot read.*shape \(1, 8, 8\)"):
        DiffusionReconfigurer(tiny_vit(), max_epochs=1, device="cpu").fit(small, y[:8])


def test_divergence_leaves_the_estimator_unfitted_and_hands_over_the_student(digits, monkeypatch):

    X, y = digits
    real_loss = director_network.WeightedDirectorLoss.__call__
    training_calls = []

    def nan_on_the_second_training_step(self, outputs, target):
        loss = real_loss(self, outputs, target)
        if torch.is_grad_enabled():
            training_calls.append(1)
            if len(training_calls) == 2:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(
        director_network.WeightedDirectorLoss, "__call__", nan_on_the_second_training_step
    )
    estimator = DiffusionReconfigurer(tiny_vit(), max_epochs=1, batch_size=16, device="cpu")
    with pytest.raises(TrainingDivergedError, match="epoch 1, step 2") as caught:
        estimator.fit(X[:64], y[:64])
    # The policy CalAttn and AdaptiveTS follow too: unfitted, the network on the error.
    assert not hasattr(estimator, "network_") and not hasattr(estimator, "classes_")
    student = caught.value.module
    assert isinstance(student, DirectorStudent)
    assert all(bool(torch.isfinite(p).all()) for p in student.parameters())


# The teacher anchor, the accuracy check and the noise log -----------------------------------


def test_anchored_student_starts_as_its_teacher():
    model = tiny_vit(depth=3).eval()
    teacher = frozen_adapter(model)
    x = torch.randn(4, 1, 16, 16)
    for k in (3, 1):
        student = build_student(teacher, n_reconfigured=k, noise_init=2e-6, anchored=True)
        with torch.no_grad():
            logits = student.eval().sample_logits(x, n_draws=1)[0]
            # The oracle: timm's own forward of the teacher model.
            torch.testing.assert_close(logits, model(x), atol=1e-4, rtol=1e-4)


def test_anchored_student_keeps_the_teacher_blocks_frozen_and_in_eval_mode(digits):
    teacher = frozen_adapter(tiny_bert())
    student = build_student(teacher, n_reconfigured=2, anchored=True).train()
    for block in teacher.blocks:
        assert not block.training  # BERT's dropout stays off on the path
        assert not any(p.requires_grad for p in block.parameters())
    assert all(p.requires_grad for p in student.step.parameters())


def test_warning_fires_when_the_student_falls_below_its_teacher(digits, trained_teacher):
    X, y = digits
    # Crippled on purpose: the unanchored student replaces every block and gets
    # 12 steps, after which its EMA weights are still about the identity map.
    crippled = DiffusionReconfigurer(
        trained_teacher, anchor="none", max_epochs=1, batch_size=32, device="cpu", random_state=0
    )
    with pytest.warns(StudentBelowTeacherWarning, match="below its teacher") as record:
        crippled.fit(X, y)
    # The shared loop may also warn (a chance-level epoch); ours points at the caller's line.
    ours = [w for w in record if issubclass(w.category, StudentBelowTeacherWarning)]
    assert ours and ours[0].filename == __file__
    assert crippled.teacher_val_accuracy_ - crippled.student_val_accuracy_ > 0.02


def test_no_warning_and_equal_accuracies_when_the_student_is_the_teacher(digits, trained_teacher):
    X, y = digits
    # A learning rate of 1e-12 leaves the anchored student as the teacher: both
    # accuracies must then agree, which they do only if scored on the same rows
    # (the teacher's by fit, the student's by the training loop).
    estimator = DiffusionReconfigurer(
        trained_teacher,
        max_epochs=1,
        batch_size=64,
        learning_rate=1e-12,
        noise_init=2e-6,
        validation_fraction=0.25,
        device="cpu",
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", StudentBelowTeacherWarning)
        estimator.fit(X, y)
    assert estimator.teacher_val_accuracy_ == estimator.student_val_accuracy_
    assert estimator.teacher_val_accuracy_ > 0.3  # the teacher is better than chance
    n_val = math.ceil(0.25 * len(X))
    assert (estimator.teacher_val_accuracy_ * n_val) == pytest.approx(
        round(estimator.teacher_val_accuracy_ * n_val)
    )


def test_an_unseeded_refit_in_the_same_checkpoint_dir_holds_out_the_same_rows(
    digits, trained_teacher, tmp_path, monkeypatch
):
    # DIRECTOR makes the loop's validation split itself (to score the teacher on it): an
    # unseeded fit must settle its seed as the loop does, kept in checkpoint_dir, or a
    # resumed fit would hold out other rows than the ones the checkpoint trained beside.
    X, y = digits
    held_out = []
    split = DiffusionReconfigurer._validation_split

    def spy(self, dataset, seed):
        train_part, validation = split(self, dataset, seed)
        held_out.append(list(validation.indices))
        return train_part, validation

    monkeypatch.setattr(DiffusionReconfigurer, "_validation_split", spy)
    for torch_seed in (1, 2):
        torch.manual_seed(torch_seed)
        DiffusionReconfigurer(
            trained_teacher,
            max_epochs=1,
            validation_fraction=0.25,
            checkpoint_dir=str(tmp_path / "run"),
            device="cpu",
            random_state=None,
        ).fit(X[:64], y[:64])
    assert held_out[0] == held_out[1]


def test_a_finished_folder_refuses_another_teacher(digits, trained_teacher, tmp_path):
    X, y = digits
    settings = dict(
        max_epochs=1, checkpoint_dir=str(tmp_path / "run"), device="cpu", random_state=0
    )
    DiffusionReconfigurer(trained_teacher, **settings).fit(X[:64], y[:64])
    # The same architecture with other weights: the old student must not come back.
    with pytest.raises(ValueError, match="started from other weights"):
        DiffusionReconfigurer(tiny_vit(seed=1), **settings).fit(X[:64], y[:64])
    with pytest.raises(ValueError, match="other training data"):
        DiffusionReconfigurer(trained_teacher, **settings).fit(X[64:128], y[64:128])


def test_no_validation_rows_means_no_comparison(digits, trained_teacher):
    X, y = digits
    estimator = DiffusionReconfigurer(
        trained_teacher, max_epochs=1, validation_fraction=0.0, device="cpu", random_state=0
    ).fit(X[:64], y[:64])
    assert math.isnan(estimator.teacher_val_accuracy_)
    assert math.isnan(estimator.student_val_accuracy_)


@pytest.mark.slow
def test_default_student_stays_within_the_margin_of_its_teacher_on_digits():
    X, y = load_digits_images(image_size=16)
    config = default_digits_training_config(quick=True, random_state=0)
    config.max_epochs, config.batch_size, config.learning_rate = 15, 32, 3e-3
    teacher, _ = train_digits_classifier(X[:800], y[:800], model=tiny_vit(depth=2), config=config)
    X_test, y_test = X[1000:], y[1000:]
    with torch.no_grad():
        logits = teacher.eval()(torch.as_tensor(X_test))
    teacher_accuracy = float((logits.argmax(1).numpy() == y_test).mean())
    estimator = DiffusionReconfigurer(
        teacher, max_epochs=3, batch_size=32, device="cpu", random_state=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", StudentBelowTeacherWarning)
        estimator.fit(X[:800], y[:800])
    student_accuracy = float((estimator.predict(X_test) == y_test).mean())
    assert teacher_accuracy > 0.7
    assert student_accuracy >= teacher_accuracy - 0.02


def test_sigma_is_logged_per_step_and_per_epoch(fitted_vit, digits):
    n_train = len(digits[0]) - math.ceil(0.1 * len(digits[0]))
    first, last = fitted_vit.history_[0], fitted_vit.history_[-1]
    assert len(first["train_sigma_steps"]) == math.ceil(n_train / 32)
    # Before the first update every step's sigma is exactly noise_init.
    assert first["train_sigma_steps"][0] == pytest.approx(0.3, rel=1e-5)
    assert last["train_sigma"] == pytest.approx(last["train_noise_matching"] ** 0.5)
    assert last["train_sigma"] == pytest.approx(np.mean(last["train_sigma_steps"]), rel=0.2)
    assert "val_sigma" in last


def test_front_runs_once_per_input_and_the_paths_run_as_one_batch(digits, trained_teacher):
    X, y = digits
    estimator = DiffusionReconfigurer(
        trained_teacher, reconfigure=1, max_epochs=1, device="cpu", random_state=0
    ).fit(X[:64], y[:64])
    backbone = estimator.network_.backbone
    rows = {"front": [], "anchor": []}
    hooks = [
        backbone.blocks[0].register_forward_hook(
            lambda m, args, out: rows["front"].append(args[0].shape[0])
        ),
        backbone.blocks[-1].register_forward_hook(
            lambda m, args, out: rows["anchor"].append(args[0].shape[0])
        ),
    ]
    estimator.set_params(n_draws=10, batch_size=50).predict_proba(X[:100])
    for hook in hooks:
        hook.remove()
    assert rows["front"] == [50, 50]  # once per input
    assert rows["anchor"] == [500, 500]  # ten paths, one batched call per batch
