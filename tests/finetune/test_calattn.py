"""Tests of reliacal.finetune.calattn (CalAttnFinetuner).

Run as a script (``python tests/finetune/test_calattn.py OUT_DIR``) this module is also the
worker of the two-process DDP test.
"""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from timm.models.vision_transformer import VisionTransformer
from torch.utils.data import DataLoader, TensorDataset

import reliacal
from reliacal.calibrators import TemperatureScaling
from reliacal.finetune.calattn import CalAttnFinetuner
from reliacal.finetune.losses import brier_loss, focal_loss
from reliacal.training import TrainingDivergedError

N_CLASSES = 3
EMBED_DIM = 16


pytestmark = pytest.mark.usefixtures("one_torch_thread")
# The sizes of every tiny transformer here: 8x8 one-channel images in 4x4 patches, one block.
SIZES = dict(image_size=8, patch_size=4, channels=1, width=EMBED_DIM, depth=1, heads=2)
TIMM_SIZES = dict(img_size=8, patch_size=4, in_chans=1, embed_dim=EMBED_DIM, depth=1, num_heads=2)


def tiny_vit(seed=0, **overrides):
    settings = dict(TIMM_SIZES, num_classes=N_CLASSES)
    settings.update(overrides)
    torch.manual_seed(seed)
    return VisionTransformer(**settings)


def assert_logits_are_the_models_over_the_scale(model, X, input_name=None):
    """The oracle of the logits: the wrapped model's own eval-mode forward over the scale.

    ``input_name`` is the keyword a Hugging Face model takes its images by; its output's
    ``logits`` are then read.
    """
    wrapped = model.network_.backbone.model.eval()
    x = torch.from_numpy(X)
    with torch.no_grad():
        logits = wrapped(x) if input_name is None else wrapped(**{input_name: x}).logits
    np.testing.assert_allclose(
        model.decision_function(X), logits.double().numpy() / model.scale(X)[:, None], rtol=1e-5
    )


def image_data(n=36, seed=0, size=8):
    """Images whose class shows in their mean brightness: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % N_CLASSES
    X = rng.normal(size=(n, 1, size, size)) * 0.5 + y[:, None, None, None]
    return X.astype(np.float32), y


def quick(backbone=None, **overrides):
    settings = dict(
        max_epochs=2,
        batch_size=12,
        learning_rate=5e-3,
        warmup_epochs=0,
        validation_fraction=0.25,
        device="cpu",
        random_state=0,
    )
    settings.update(overrides)
    return CalAttnFinetuner(tiny_vit() if backbone is None else backbone, **settings)


def state_of(module):
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


# The head --------------------------------------------------------------------------------


def test_scale_head_matches_its_formula_and_stays_positive():
    model = quick(max_epochs=1).fit(*image_data())
    head = model.network_.scale_head.layers
    first, second = head[0], head[2]
    assert (first.in_features, first.out_features) == (EMBED_DIM, 128)
    assert (second.in_features, second.out_features) == (128, 1)
    features = torch.randn(7, EMBED_DIM) * 50  # extreme inputs: softplus underflows to 0
    expected = (
        F.softplus(
            F.linear(
                F.gelu(F.linear(features, first.weight, first.bias)), second.weight, second.bias
            )
        )[:, 0]
        + 1e-6
    )
    scale = model.network_.scale_head(features)
    assert scale.shape == (7,)
    torch.testing.assert_close(scale, expected)
    assert (scale > 0).all()
    assert (model.scale(image_data()[0]) > 0).all()


def test_the_chance_warning_names_calattn_and_points_at_the_fit_call():
    # Identical images: every prediction is the same class, at chance on balanced labels.
    X, y = image_data()
    X = np.zeros_like(X)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quick(max_epochs=1).fit(X, y)
    (warning,) = [w for w in caught if "never rose above chance" in str(w.message)]
    assert warning.filename == __file__
    assert "CalAttnFinetuner" in str(warning.message)
    assert "AdaptiveTS" not in str(warning.message)


class _ThreadsSeen:
    """train_transform that records torch's thread count at every training step."""

    def __init__(self):
        self.seen = set()

    def __call__(self, x):
        self.seen.add(torch.get_num_threads())
        return x


@pytest.mark.parametrize(("n_threads", "expected"), [(None, 1), (2, 2)])
def test_a_tiny_network_trains_on_one_thread_unless_told(n_threads, expected):
    previous = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        seen = _ThreadsSeen()
        quick(max_epochs=1, n_threads=n_threads, train_transform=seen).fit(*image_data())
        assert seen.seen == {expected}
        assert torch.get_num_threads() == 3  # the caller's setting, restored
    finally:
        torch.set_num_threads(previous)


def test_default_initialisation_starts_near_softplus_of_zero():
    # Default PyTorch initialisation: the scale starts near softplus(0) = log 2.
    model = quick(max_epochs=1, learning_rate=1e-9).fit(*image_data())
    assert abs(float(np.median(model.scale(image_data()[0]))) - np.log(2)) < 0.3


def test_decision_function_is_backbone_logits_over_scale():
    X, y = image_data()
    model = quick().fit(X, y)
    vit = model.network_.backbone.model
    with torch.no_grad():
        logits = vit.eval()(torch.from_numpy(X)).double().numpy()
    scale = model.scale(X)
    np.testing.assert_allclose(model.decision_function(X), logits / scale[:, None], rtol=1e-5)
    np.testing.assert_allclose(
        model.predict_proba(X), torch.softmax(torch.from_numpy(logits / scale[:, None]), 1)
    )
    np.testing.assert_array_equal(model.predict(X), np.argmax(logits / scale[:, None], axis=1))


def test_one_backbone_pass_per_step():
    calls = []
    vit = tiny_vit()
    # patch_embed runs once per forward_features; the hook survives fit's deep copy.
    vit.patch_embed.register_forward_hook(lambda *args: calls.append(1))
    X, y = image_data(n=40)
    # 30 training samples in batches of 10 (3 steps) and 10 validation samples (1 batch).
    quick(vit, max_epochs=2, batch_size=10).fit(X, y)
    assert len(calls) == 2 * (3 + 1)


def test_gradients_reach_the_backbone_through_the_scale():
    model = quick(max_epochs=1).fit(*image_data())
    network = model.network_.train()
    network.zero_grad()
    output = network(torch.from_numpy(image_data()[0][:6]))
    output.scale.sum().backward()
    grads = [p.grad for p in network.backbone.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)


def test_patch_mean_and_concat_read_the_right_tokens():
    X, y = image_data()
    for token, width in (("patch_mean", EMBED_DIM), ("concat", 2 * EMBED_DIM)):
        model = quick(token=token, max_epochs=1).fit(X, y)
        assert model.network_.scale_head.layers[0].in_features == width
        output = model.network_.backbone(torch.from_numpy(X[:4]))
        patch_mean = output.tokens[:, 1:].mean(dim=1)
        expected = (
            patch_mean if token == "patch_mean" else torch.cat([output.tokens[:, 0], patch_mean], 1)
        )
        torch.testing.assert_close(model.network_.features(output), expected)
        assert model.n_extra_parameters_ == 128 * (width + 2) + 1


@pytest.mark.parametrize(
    ("family", "n_prefix_tokens", "input_name"),
    [
        ("deit_distilled", 2, None),  # the class and the distillation token
        ("hf_vit", 1, "pixel_values"),  # Hugging Face, through its adapter
    ],
)
def test_patch_mean_excludes_the_prefix_tokens_and_keeps_the_logits(
    tiny_transformer, family, n_prefix_tokens, input_name
):
    backbone = tiny_transformer(family, **SIZES, classes=N_CLASSES)
    X, y = image_data()
    model = quick(backbone, token="patch_mean").fit(X, y)
    network = model.network_
    output = network.backbone(torch.from_numpy(X[:4]))
    patch_mean = output.tokens[:, n_prefix_tokens:].mean(dim=1)
    torch.testing.assert_close(network.features(output), patch_mean)
    assert_logits_are_the_models_over_the_scale(model, X, input_name=input_name)
    if family == "deit_distilled":
        cls_model = quick(backbone, token="cls", max_epochs=1).fit(X, y)
        assert cls_model.token_ == "cls"


def test_swin_reads_pooled_features(tiny_transformer):
    swin = tiny_transformer(
        "swin",
        **dict(SIZES, image_size=16, width=8, depth=(1, 1), heads=(1, 2)),
        classes=N_CLASSES,
        window_size=2,
    )
    X, y = image_data(size=16)
    model = quick(swin).fit(X, y)
    assert model.token_ == "pooled"
    D = swin.num_features
    assert model.n_extra_parameters_ == 128 * D + 257
    output = model.network_.backbone(torch.from_numpy(X[:4]))
    assert output.tokens.ndim == 4
    torch.testing.assert_close(model.network_.features(output), output.pooled)
    assert_logits_are_the_models_over_the_scale(model, X)
    # Swin's patch mean is the mean over its spatial map.
    patch = quick(swin, token="patch_mean", max_epochs=1).fit(X, y)
    out = patch.network_.backbone(torch.from_numpy(X[:4]))
    torch.testing.assert_close(patch.network_.features(out), out.tokens.mean(dim=(1, 2)))
    with pytest.raises(ValueError, match="needs a class token"):
        quick(swin, token="concat").fit(X, y)


# Parameter overhead --------------------------------------------------------------------------


@pytest.mark.parametrize("hidden", [128, 5])
def test_extra_parameter_count_is_exact(hidden):
    vit = tiny_vit()
    model = quick(vit, hidden=hidden, max_epochs=1).fit(*image_data())
    # Linear(D -> hidden) + Linear(hidden -> 1): D*hidden + hidden + hidden + 1.
    expected = EMBED_DIM * hidden + hidden + hidden + 1
    assert model.n_extra_parameters_ == expected
    backbone_count = sum(p.numel() for p in vit.parameters())
    assert model.n_backbone_parameters_ == backbone_count
    assert model.parameter_overhead_ == pytest.approx(expected / backbone_count)


def test_paper_parameter_counts_for_vit_b_and_deit_s():
    from reliacal.finetune.calattn_network import ScaleHead

    # methods.md: 98,561 extra parameters for D = 768 and 49,409 for D = 384.
    for width, expected in ((768, 98_561), (384, 49_409)):
        assert sum(p.numel() for p in ScaleHead(width, 128).parameters()) == expected


# Training --------------------------------------------------------------------------------


def test_training_on_digits_lowers_the_loss_and_gives_probabilities():
    from reliacal.datasets import load_digits_images, make_tiny_vit

    X, y = load_digits_images(image_size=8)
    vit = make_tiny_vit(
        num_classes=10, image_size=8, embed_dim=16, depth=1, num_heads=2, random_state=0
    )
    # The estimator's default validation fraction, not quick()'s.
    model = quick(vit, max_epochs=4, batch_size=32, validation_fraction=0.1).fit(X[:240], y[:240])
    losses = [entry["train_loss"] for entry in model.history_]
    assert losses[-1] < losses[0]
    probabilities = model.predict_proba(X[240:300])
    assert probabilities.shape == (60, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)
    assert {"val_ece", "val_nll", "val_accuracy"} <= set(model.history_[0])


def test_loss_is_base_loss_plus_weighted_brier_on_calibrated_logits():
    seen = []

    def recording_loss(logits, target):
        seen.append(logits.detach())
        return F.cross_entropy(logits, target)

    X, y = image_data()
    model = quick(base_loss=recording_loss, lambda_brier=0.3, max_epochs=1, validation_fraction=0.0)
    model.fit(X, y)
    # Check the combined loss on fixed outputs through the estimator's loss object.
    from reliacal.finetune.calattn_network import CalAttnLoss, CalAttnOutput

    logits = torch.randn(5, N_CLASSES)
    scale = torch.rand(5) + 0.5
    target = torch.tensor([0, 1, 2, 0, 1])
    outputs = CalAttnOutput(logits / scale[:, None], scale, logits)
    loss = CalAttnLoss(lambda z, t: focal_loss(z, t, gamma=2.0), 0.3, N_CLASSES)(outputs, target)
    calibrated = logits / scale[:, None]
    expected = focal_loss(calibrated, target, gamma=2.0) + 0.3 * brier_loss(calibrated, target)
    torch.testing.assert_close(loss, expected)
    assert seen and all(batch.shape[1] == N_CLASSES for batch in seen)


@pytest.mark.parametrize("base_loss", ["brier", "focal", "flsd53", "dual_focal", "mmce"])
def test_every_base_loss_trains(base_loss):
    model = quick(base_loss=base_loss, max_epochs=1).fit(*image_data())
    assert np.isfinite(model.history_[0]["train_loss"])


def test_label_smoothing_loss_needs_a_smoothing_value():
    with pytest.raises(ValueError, match="needs label_smoothing > 0"):
        quick(base_loss="label_smoothing").fit(*image_data())
    quick(base_loss="label_smoothing", label_smoothing=0.1, max_epochs=1).fit(*image_data())


def test_frozen_backbone_trains_only_the_head():
    vit = tiny_vit()
    X, y = image_data()
    model = quick(vit, freeze_backbone=True).fit(X, y)
    for name, value in vit.state_dict().items():
        torch.testing.assert_close(model.network_.backbone.model.state_dict()[name], value)
    fresh = quick(vit, freeze_backbone=True, max_epochs=1, learning_rate=1e-12).fit(X, y)
    changed = [
        not torch.allclose(a, b)
        for a, b in zip(
            model.network_.scale_head.parameters(), fresh.network_.scale_head.parameters()
        )
    ]
    assert any(changed)


def test_without_calibration_head_it_is_plain_fine_tuning():
    X, y = image_data()
    model = quick(calibration_head=False).fit(X, y)
    assert model.network_.scale_head is None and model.n_extra_parameters_ == 0
    np.testing.assert_array_equal(model.scale(X), np.ones(len(X)))
    with torch.no_grad():
        logits = model.network_.backbone.model.eval()(torch.from_numpy(X)).double().numpy()
    np.testing.assert_allclose(model.decision_function(X), logits, rtol=1e-6)


@pytest.mark.filterwarnings("ignore:validation accuracy never rose")
def test_step_schedule_lowers_the_rate_at_each_milestone():
    # The paper's recipe (SGD, steps at 150 and 250) in miniature: x0.1 from epochs 1 and 2.
    X, y = image_data()
    model = quick(
        optimizer="sgd", learning_rate=0.01, schedule="step", milestones=(1, 2), max_epochs=3
    ).fit(X, y)
    # The rate of each epoch's last step, by hand: 0.01 * 0.1 ** (milestones reached).
    np.testing.assert_allclose([epoch["lr"] for epoch in model.history_], [1e-2, 1e-3, 1e-4])
    cosine = quick(optimizer="sgd", learning_rate=0.01, max_epochs=3).fit(X, y)
    assert cosine.history_[0]["lr"] < 1e-2  # the default decays within the first epoch


def test_global_scale_learns_one_scale_shared_by_every_sample():
    X, y = image_data()
    untrained = quick(calibration_head="global")._build_network(seed=0).scale_head
    # It starts at 1: with nothing learned it is plain fine-tuning's logits.
    torch.testing.assert_close(untrained(torch.zeros(3, 16)), torch.ones(3), rtol=1e-5, atol=0)
    model = quick(calibration_head="global").fit(X, y)
    assert model.n_extra_parameters_ == 1
    scales = model.scale(X)
    assert np.ptp(scales) == 0 and abs(scales[0] - 1) > 1e-4
    with torch.no_grad():
        logits = model.network_.backbone.model.eval()(torch.from_numpy(X)).double().numpy()
    np.testing.assert_allclose(model.decision_function(X), logits / scales[0], rtol=1e-5)


@pytest.mark.parametrize("initial_scale", [0.25, math.log(2), 3.0])
def test_initial_scale_sets_where_the_scale_starts(initial_scale):
    features = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    global_start = quick(calibration_head="global", initial_scale=initial_scale)
    scale = global_start._build_network(seed=0).scale_head(features)
    torch.testing.assert_close(scale, torch.full((64,), initial_scale), rtol=1e-6, atol=1e-6)
    # The per-sample head starts centred on it: the random W2 spreads it a little.
    head = quick(initial_scale=initial_scale)._build_network(seed=0).scale_head
    with torch.no_grad():
        scales = head(features)
        centre = head.layers[3](head.layers[2].bias)
    torch.testing.assert_close(centre, torch.tensor([initial_scale]), rtol=1e-6, atol=0)
    assert abs(scales.mean().item() - initial_scale) < 0.25 * initial_scale
    assert scales.std().item() > 0


def test_default_head_starts_near_ln_2():
    features = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        scales = quick()._build_network(seed=0).scale_head(features)
    assert abs(scales.mean().item() - math.log(2)) < 0.1


def test_fit_leaves_the_given_backbone_untouched_and_refits_identically():
    vit = tiny_vit()
    before = state_of(vit)
    X, y = image_data()
    first = quick(vit).fit(X, y)
    for name, value in vit.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)
    second = quick(vit).fit(X, y)
    np.testing.assert_array_equal(first.predict_proba(X), second.predict_proba(X))


# Post-hoc temperature --------------------------------------------------------------------


def test_post_hoc_temperature_is_fitted_on_the_held_out_split():
    from reliacal.training._randomness import split_indices

    X, y = image_data(n=48)
    model = quick(post_hoc="temperature", max_epochs=3, validation_fraction=0.25).fit(X, y)
    assert isinstance(model.post_hoc_, TemperatureScaling)
    # The same split, recomputed: a temperature fitted on it independently must agree.
    seed = 0
    _, validation = split_indices(
        len(X),
        0.25,
        int(np.random.RandomState(seed).randint(np.iinfo(np.int32).max)),
        stream="stratified",
        labels=y,
    )
    logits = model.decision_function(X[validation])
    reference = TemperatureScaling().fit(logits, y[validation])
    assert model.post_hoc_.temperature_ == pytest.approx(reference.temperature_, rel=1e-6)
    np.testing.assert_allclose(
        model.predict_proba(X),
        torch.softmax(torch.from_numpy(model.decision_function(X) / reference.temperature_), 1),
        rtol=1e-6,
    )
    # Without post_hoc, the probabilities are CalAttn's own, softmax(z / s).
    own = quick(max_epochs=3, validation_fraction=0.25).fit(X, y)
    assert own.post_hoc_ is None
    np.testing.assert_allclose(
        own.predict_proba(X), torch.softmax(torch.from_numpy(own.decision_function(X)), 1)
    )


def test_post_hoc_needs_a_validation_split():
    with pytest.raises(ValueError, match="validation_fraction > 0"):
        quick(post_hoc="temperature", validation_fraction=0.0).fit(*image_data())


# Inputs, labels, scikit-learn ------------------------------------------------------------


def test_dataset_and_dataloader_inputs_give_the_same_model_as_arrays():
    X, y = image_data()
    arrays = quick().fit(X, y)
    dataset = TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    from_dataset = quick().fit(dataset)
    from_loader = quick().fit(DataLoader(dataset, batch_size=5))
    # Arrays get a stratified split, datasets a random one: compare the two datasets only.
    np.testing.assert_allclose(from_dataset.predict_proba(X), from_loader.predict_proba(X))
    assert from_loader.score(DataLoader(dataset, batch_size=7)) == pytest.approx(
        from_loader.score(X, y)
    )
    assert arrays.predict_proba(dataset).shape == (len(X), N_CLASSES)


def test_string_labels_map_through_classes():
    X, y = image_data()
    names = np.array(["cat", "dog", "emu"])
    model = quick(classes=names).fit(X, names[y])
    assert set(model.predict(X)) <= set(names)
    np.testing.assert_array_equal(model.classes_, names)
    with pytest.raises(ValueError, match="classes="):
        quick().fit(X, names[y])
    with pytest.raises(ValueError, match="one label per column"):
        quick(classes=["a", "b"]).fit(X, y)


def test_grid_search_over_lambda_brier():
    X, y = image_data(n=36)
    search = GridSearchCV(
        quick(max_epochs=1, validation_fraction=0.2), {"lambda_brier": [0.0, 0.1]}, cv=2
    )
    search.fit(X, y)
    assert search.best_params_["lambda_brier"] in (0.0, 0.1)
    assert len(search.cv_results_["mean_test_score"]) == 2


def test_clone_and_params_follow_sklearn_conventions():
    model = quick(token="patch_mean", hidden=7)
    params = model.get_params()
    assert params["token"] == "patch_mean" and params["hidden"] == 7
    cloned = clone(model)
    assert cloned.get_params()["hidden"] == 7
    assert not hasattr(cloned, "network_")
    model.set_params(lambda_brier=0.5)
    assert model.lambda_brier == 0.5


def test_pickle_round_trip_predicts_identically_on_cpu():
    X, y = image_data()
    model = quick(post_hoc="temperature").fit(X, y)
    restored = pickle.loads(pickle.dumps(model))
    assert all(p.device.type == "cpu" for p in restored.network_.parameters())
    np.testing.assert_array_equal(restored.predict_proba(X), model.predict_proba(X))


def test_save_and_load_round_trip_given_the_backbone(tmp_path, no_pickle):
    X, y = image_data()
    model = quick(tiny_vit(), max_epochs=1, post_hoc="temperature").fit(X, y)
    model.save(tmp_path / "calattn.zip")
    # Any weights of the same architecture: the fine-tuned ones come from the file.
    loaded = reliacal.load(tmp_path / "calattn.zip", backbone=tiny_vit(seed=5))
    np.testing.assert_array_equal(model.predict_proba(X), loaded.predict_proba(X))
    np.testing.assert_array_equal(model.predict(X), loaded.predict(X))
    np.testing.assert_array_equal(model.scale(X), loaded.scale(X))
    assert loaded.post_hoc_.temperature_ == model.post_hoc_.temperature_
    with pytest.raises(ValueError, match="does not fit the one rebuilt"):
        reliacal.load(tmp_path / "calattn.zip", backbone=tiny_vit(embed_dim=8))
    with pytest.raises(ValueError, match="saved with a timm"):
        reliacal.load(tmp_path / "calattn.zip", backbone=torch.nn.Linear(2, 2))


@pytest.mark.filterwarnings("ignore:validation accuracy never rose")
def test_save_and_load_keep_the_step_schedule(tmp_path, no_pickle):
    X, y = image_data()
    schedule = {"schedule": "step", "milestones": (1,), "gamma": 0.5}
    model = quick(optimizer="sgd", learning_rate=0.01, **schedule).fit(X, y)
    model.save(tmp_path / "calattn.zip")
    loaded = reliacal.load(tmp_path / "calattn.zip", backbone=tiny_vit(seed=5))
    params = loaded.get_params(deep=False)
    assert {name: params[name] for name in schedule} == schedule
    assert type(params["milestones"]) is tuple
    np.testing.assert_array_equal(model.predict_proba(X), loaded.predict_proba(X))
    # The rates of the two epochs, by hand: 0.01, then 0.01 * 0.5 from milestone 1 on.
    np.testing.assert_allclose([epoch["lr"] for epoch in loaded.history_], [1e-2, 5e-3])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"token": "mean"}, "'token' parameter .* must be a str among"),
        ({"hidden": 0}, "'hidden' parameter .* must be an int in the range \\[1, inf\\)"),
        ({"lambda_brier": -1.0}, "'lambda_brier' parameter .* must be"),
        ({"post_hoc": "vector"}, "'post_hoc' parameter .* must be"),
        ({"base_loss": "hinge"}, "'base_loss' parameter .* must be a str among"),
        ({"freeze_backbone": True, "calibration_head": False}, "nothing to train"),
        ({"initial_scale": 0.0}, "'initial_scale' parameter .* must be"),
        ({"initial_scale": 0.5, "calibration_head": False}, "fixes the scale to 1"),
        ({"optimizer": "lbfgs"}, "'optimizer' parameter .* must be a str among"),
        ({"schedule": "linear"}, "'schedule' parameter .* must be a str among"),
        ({"milestones": (-1,)}, "each of milestones must be an integer >= 0"),
        ({"train_transform": 3}, "'train_transform' parameter .* must be a callable"),
        ({"verbose": -1}, "'verbose' parameter"),
        ({"device": "tpu"}, "device must be 'auto', 'cpu', 'cuda'"),
    ],
)
def test_invalid_settings_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        quick(**overrides).fit(*image_data())


@pytest.mark.parametrize("classes", [None, [f"class {k}" for k in range(26)]])
def test_a_dataset_with_many_classes_fits_without_a_spurious_label_warning(classes):
    # scikit-learn warns "y could represent a regression problem" when over half of 20+
    # labels are distinct: it must not be shown the list of classes as if it were labels.
    X, _ = image_data(n=52)
    y = np.arange(52) % 26
    dataset = TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = quick(tiny_vit(num_classes=26), classes=classes, max_epochs=1).fit(dataset)
    assert not [w for w in caught if "unique classes" in str(w.message)]
    expected = np.arange(26) if classes is None else np.asarray(classes)
    np.testing.assert_array_equal(model.classes_, expected)


def test_duplicate_classes_are_refused_for_a_dataset_too():
    X, y = image_data()
    dataset = TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    with pytest.raises(ValueError, match="classes must not contain duplicates"):
        quick(classes=["cat", "cat", "emu"]).fit(dataset)


def test_out_of_range_dataset_labels_raise():
    X, _ = image_data()
    bad = TensorDataset(torch.from_numpy(X), torch.full((len(X),), N_CLASSES))
    with pytest.raises(ValueError, match=r"column indices 0\.\.2 .*\[3\]"):
        quick(validation_fraction=0.0).fit(bad)


# Robustness: NaN guard, resume, DDP ------------------------------------------------------


class _NaNAtCall:
    """train_transform that poisons the batch of its ``bad``-th call."""

    def __init__(self, bad):
        self.bad, self.calls = bad, 0

    def __call__(self, x):
        self.calls += 1
        return x * float("nan") if self.calls == self.bad else x


def test_nan_loss_stops_with_a_clear_error_and_the_user_model_is_intact():
    vit = tiny_vit()
    before = state_of(vit)
    model = quick(vit, train_transform=_NaNAtCall(bad=2))
    with pytest.raises(TrainingDivergedError, match="diverged at epoch 1, step 2") as caught:
        model.fit(*image_data())
    assert not hasattr(model, "network_") and not hasattr(model, "classes_")
    # The last good weights (after step 1) come back with the error, finite and trained.
    kept = caught.value.module.backbone.model.state_dict()
    assert all(torch.isfinite(value).all() for value in kept.values())
    assert any(not torch.equal(kept[name], before[name]) for name in before)
    for name, value in vit.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)


def test_weights_broken_by_an_update_are_not_handed_back_as_good():
    # Issue 16.3: learning_rate=1e6 makes the first update ruin the network (finite weights,
    # NaN gradients); the error must carry the weights from before that update.
    vit = tiny_vit()
    before = state_of(vit)
    X, y = image_data()
    with pytest.raises(TrainingDivergedError, match="weights from before that step") as caught:
        quick(vit, learning_rate=1e6, warmup_epochs=0).fit(X, y)
    network = caught.value.module.train()
    outputs = network(torch.from_numpy(X))
    F.cross_entropy(outputs.calibrated_logits, torch.from_numpy(y)).backward()
    assert all(torch.isfinite(p.grad).all() for p in network.parameters() if p.grad is not None)
    for name, value in network.backbone.model.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)


def test_nan_inputs_are_refused_at_fit_and_predict():
    X, y = image_data()
    poisoned = X.copy()
    poisoned[3, 0, 2, 2] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        quick().fit(poisoned, y)
    model = quick().fit(X, y)
    for method in (model.predict_proba, model.decision_function, model.scale):
        with pytest.raises(ValueError, match="X contains NaN or infinity"):
            method(poisoned)


def test_a_nan_pixel_in_the_validation_part_is_named_as_an_input_problem():
    from reliacal.training._randomness import split_indices

    X, y = image_data()
    # The estimator's split for random_state=0, recomputed (a Dataset's labels are not
    # read, so it is not stratified): poison one validation image.
    seed = int(np.random.RandomState(0).randint(np.iinfo(np.int32).max))
    _, validation = split_indices(len(X), 0.25, seed, stream="stratified")
    X[validation[0], 0, 0, 0] = np.nan
    dataset = TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    with pytest.raises(ValueError, match="check the validation inputs for NaN") as caught:
        quick(validation_fraction=0.25).fit(dataset)
    assert "y_prob" not in str(caught.value)


@pytest.mark.parametrize(
    ("X", "expected"),
    [
        (np.zeros((12, 1, 16, 16), dtype=np.float32), r"shape \(1, 16, 16\)"),
        (np.zeros((12, 8, 8), dtype=np.float32), r"shape \(8, 8\)"),
    ],
)
def test_inputs_of_the_wrong_form_get_a_value_error_that_says_what_is_expected(X, expected):
    y = np.arange(12) % N_CLASSES
    with pytest.raises(
        ValueError,
        match=f"backbone cannot read the inputs.*{expected}.*"
        r"\(n, C, H, W\)",
    ):
        quick().fit(X, y)


@pytest.mark.parametrize("verbose", [False, True])
def test_verbose_accepts_a_bool_as_scikit_learn_does(verbose):
    model = quick(max_epochs=1, verbose=verbose).fit(*image_data())
    assert model.best_epoch_ == 1


class _InterruptAtCall:
    """train_transform that raises KeyboardInterrupt on its ``at``-th call."""

    def __init__(self, at):
        self.at, self.calls = at, 0

    def __call__(self, x):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return x


def _identity(x):
    return x


def test_resumed_fit_ends_with_the_same_weights(tmp_path):
    X, y = image_data(n=48)
    settings = dict(max_epochs=3, warmup_epochs=1, base_loss="flsd53")
    reference = quick(train_transform=_identity, **settings).fit(X, y)

    checkpoint_dir = str(tmp_path / "run")
    # 36 training samples in batches of 12: the 5th step is the middle of epoch 2.
    interrupted = quick(
        checkpoint_dir=checkpoint_dir, train_transform=_InterruptAtCall(5), **settings
    )
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit(X, y)
    assert (tmp_path / "run" / "checkpoint.pt").exists()

    resumed = quick(checkpoint_dir=checkpoint_dir, train_transform=_identity, **settings).fit(X, y)
    expected = reference.network_.state_dict()
    for name, value in resumed.network_.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=1e-7)
    strip = [{k: v for k, v in e.items() if k != "time"} for e in reference.history_]
    assert [{k: v for k, v in e.items() if k != "time"} for e in resumed.history_] == strip
    np.testing.assert_allclose(resumed.predict_proba(X), reference.predict_proba(X), atol=1e-7)


def test_unseeded_fit_resumes_with_the_interrupted_runs_seed(tmp_path):
    X, y = image_data(n=48)
    settings = dict(max_epochs=2, warmup_epochs=1, random_state=None)
    checkpoint_dir = str(tmp_path / "run")
    interrupted = quick(
        checkpoint_dir=checkpoint_dir, train_transform=_InterruptAtCall(5), **settings
    )
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit(X, y)
    # A fresh unseeded fit would draw another seed; the resumed one must not refuse.
    resumed = quick(checkpoint_dir=checkpoint_dir, train_transform=_identity, **settings)
    resumed.fit(X, y)
    assert len(resumed.history_) == 2
    np.testing.assert_allclose(resumed.predict_proba(X).sum(axis=1), 1.0, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.gpu
def test_cuda_fit_with_mixed_precision_predicts_on_cpu_after_pickling():
    X, y = image_data()
    model = quick(device="cuda", mixed_precision="auto", post_hoc="temperature").fit(X, y)
    assert all(p.device.type == "cpu" for p in model.network_.parameters())
    on_gpu = model.predict_proba(X)
    np.testing.assert_allclose(on_gpu.sum(axis=1), 1.0)
    restored = pickle.loads(pickle.dumps(model)).set_params(device="cpu")
    np.testing.assert_allclose(restored.predict_proba(X), on_gpu, atol=1e-4)


def _ddp_fit(out_dir: Path, rank: int | None) -> None:
    """Fit on the DDP test data; rank None is the single-process reference."""
    X, y = image_data(n=48)
    batch = 12 if rank is None else 6
    model = quick(tiny_vit(), max_epochs=2, batch_size=batch, post_hoc="temperature").fit(X, y)
    if rank in (None, 0):
        name = "single.pt" if rank is None else "ddp.pt"
        torch.save(
            {
                "state": model.network_.state_dict(),
                "proba": torch.from_numpy(model.predict_proba(X)),
                "temperature": model.post_hoc_.temperature_,
            },
            out_dir / name,
        )


def _ddp_worker(rank: int, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=2
    )
    try:
        _ddp_fit(Path(out_dir), rank)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_ddp_equals_single_process(tmp_path):
    subprocess.run([sys.executable, __file__, str(tmp_path)], check=True, timeout=300)
    single = torch.load(tmp_path / "single.pt", weights_only=True)
    distributed = torch.load(tmp_path / "ddp.pt", weights_only=True)
    for name, value in single["state"].items():
        torch.testing.assert_close(distributed["state"][name], value, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(distributed["proba"], single["proba"], rtol=1e-4, atol=1e-5)
    assert distributed["temperature"] == pytest.approx(single["temperature"], rel=1e-4)


if __name__ == "__main__":
    import torch.multiprocessing as mp

    torch.set_num_threads(1)
    output = Path(sys.argv[1])
    _ddp_fit(output, None)
    mp.spawn(_ddp_worker, args=(str(output),), nprocs=2, join=True)
