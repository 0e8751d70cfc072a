"""Backbone adapters: every family against the wrapped model's own forward."""

from __future__ import annotations

import pickle

import joblib
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from reliacal.backbones import (
    BackboneAdapter,
    HFBertAdapter,
    HFViTAdapter,
    PlainAdapter,
    ReconfigurationNotSupportedError,
    TimmAdapter,
    TimmDistilledAdapter,
    as_backbone,
    extract_outputs,
)
from reliacal.datasets import make_tiny_bert

N_SAMPLES = 10
N_CLASSES = 3
PAD_ID = 0


def make_timm_vit():
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        img_size=16, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=N_CLASSES
    )


def make_deit_distilled():
    from timm.models.deit import VisionTransformerDistilled

    model = VisionTransformerDistilled(
        img_size=16, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=N_CLASSES
    )
    # Different, non-trivial heads, so that averaging the tokens before one head would differ
    # from the model's average of two heads.
    for linear in (model.head, model.head_dist):
        nn.init.normal_(linear.weight, std=1.0)
        nn.init.normal_(linear.bias, std=1.0)
    return model


def make_swin():
    from timm.models.swin_transformer import SwinTransformer

    return SwinTransformer(
        img_size=16,
        patch_size=4,
        window_size=2,
        embed_dim=8,
        depths=(1, 1),
        num_heads=(1, 2),
        num_classes=N_CLASSES,
    )


def make_hf_vit():
    from transformers import ViTConfig, ViTForImageClassification

    shape = dict(image_size=16, patch_size=8, num_hidden_layers=2, num_labels=N_CLASSES)
    widths = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2)
    return ViTForImageClassification(ViTConfig(**shape, **widths))


def make_hf_bert():
    return make_tiny_bert(
        N_CLASSES,
        40,
        hidden_size=16,
        intermediate_size=32,
        pad_token_id=PAD_ID,
        initializer_range=0.5,  # large weights: padding visibly changes the outputs
    )


class PlainNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.fc = nn.Linear(4, N_CLASSES)

    def forward(self, x):
        return self.fc(self.body(x))


def make_plain():
    return PlainNet()


def images(seed=0, n=N_SAMPLES):
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def token_ids(seed=0, n=N_SAMPLES):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 40, (n, 12), generator=generator)
    lengths = torch.randint(3, 13, (n,), generator=generator)
    ids[torch.arange(12) >= lengths[:, None]] = PAD_ID
    return ids


def reference_logits(name, model, x):
    """The wrapped model's own eval-mode forward: the oracle for the adapters."""
    model.eval()
    with torch.no_grad():
        if name == "hf_vit":
            return model(pixel_values=x).logits
        if name == "hf_bert":
            return model(input_ids=x, attention_mask=(x != PAD_ID).long()).logits
        return model(x)


FAMILIES = {
    # name: (factory, input factory, adapter class, module run once per forward pass)
    "timm_vit": (make_timm_vit, images, TimmAdapter, lambda m: m.patch_embed),
    "deit_distilled": (make_deit_distilled, images, TimmDistilledAdapter, lambda m: m.patch_embed),
    "swin": (make_swin, images, TimmAdapter, lambda m: m.patch_embed),
    "hf_vit": (make_hf_vit, images, HFViTAdapter, lambda m: m.vit.embeddings),
    "hf_bert": (make_hf_bert, token_ids, HFBertAdapter, lambda m: m.bert.embeddings),
}
RECONFIGURABLE = ["timm_vit", "deit_distilled", "hf_vit", "hf_bert"]


def build(name):
    torch.manual_seed(0)
    factory, make_inputs, _, _ = FAMILIES[name]
    return factory(), make_inputs()


class CallCounter:
    """Counts forward calls of a module through a forward hook."""

    def __init__(self, module):
        self.calls = 0
        module.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.calls += 1


@pytest.mark.parametrize("name", list(FAMILIES))
def test_adapter_matches_model_forward(name):
    model, x = build(name)
    adapter = as_backbone(model)
    assert isinstance(adapter, FAMILIES[name][2])
    expected = reference_logits(name, model, x)
    with torch.no_grad():
        out = adapter.eval()(x)
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-6)
    assert out.pooled.shape == (len(x), adapter.num_features)
    assert out.logits.shape == (len(x), adapter.num_classes == N_CLASSES and N_CLASSES)
    # The adapter wraps the model itself: same parameters, nothing added.
    assert {id(p) for p in adapter.parameters()} == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("name", ["timm_vit", "deit_distilled", "swin"])
def test_timm_pooled_is_the_models_pre_logits(name):
    model, x = build(name)
    model.eval()
    with torch.no_grad():
        pre_logits = model.forward_head(model.forward_features(x), pre_logits=True)
        out = as_backbone(model)(x)
    torch.testing.assert_close(out.pooled, pre_logits, rtol=0, atol=1e-6)


def test_deit_distilled_logits_average_two_heads():
    model, x = build("deit_distilled")
    adapter = as_backbone(model).eval()
    with torch.no_grad():
        tokens = model.forward_features(x)
        expected = (model.head(tokens[:, 0]) + model.head_dist(tokens[:, 1])) / 2
        out = adapter(x)
        one_head_on_mean_token = adapter.head(out.pooled)
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(adapter.classify(out.tokens), expected, rtol=0, atol=1e-6)
    # head(pooled) is documented to differ: it cannot see the two tokens separately.
    assert not torch.allclose(one_head_on_mean_token, expected, atol=1e-3)
    assert adapter.num_prefix_tokens == 2 and adapter.has_cls_token
    # In distilled-training mode timm returns a pair; the adapter keeps one tensor of logits.
    model.set_distilled_training(True)
    adapter.train()
    assert adapter(x).logits.shape == (len(x), N_CLASSES)


def test_swin_tokens_are_spatial_and_pooled_by_average():
    model, x = build("swin")
    adapter = as_backbone(model).eval()
    with torch.no_grad():
        out = adapter(x)
    assert out.tokens.ndim == 4 and out.tokens.shape[-1] == adapter.num_features
    torch.testing.assert_close(out.pooled, out.tokens.mean(dim=(1, 2)), rtol=0, atol=1e-6)
    assert not adapter.has_cls_token and not adapter.supports_reconfiguration
    with pytest.raises(ReconfigurationNotSupportedError, match="reconfiguration supports"):
        adapter.embed(x)
    with pytest.raises(ValueError):
        adapter.blocks


def test_hf_bert_pooled_is_the_pooler_output_and_mask_comes_from_padding():
    model, ids = build("hf_bert")
    adapter = as_backbone(model).eval()
    mask = (ids != PAD_ID).long()
    with torch.no_grad():
        reference = model.bert(input_ids=ids, attention_mask=mask)
        unmasked = model(input_ids=ids).logits
        out = adapter(ids)
        from_dict = adapter({"input_ids": ids, "attention_mask": mask})
        from_tuple = adapter((ids, mask))
    torch.testing.assert_close(out.pooled, reference.pooler_output, rtol=0, atol=1e-6)
    torch.testing.assert_close(out.tokens, reference.last_hidden_state, rtol=0, atol=1e-6)
    assert not torch.allclose(out.logits, unmasked, atol=1e-4)  # the padding mask matters
    torch.testing.assert_close(from_dict.logits, out.logits, rtol=0, atol=0)
    torch.testing.assert_close(from_tuple.logits, out.logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match="input_ids"):
        adapter({"pixel_values": ids})


def test_hf_auto_model_for_sequence_classification():
    from transformers import AutoModelForSequenceClassification

    bert = make_hf_bert()
    auto = AutoModelForSequenceClassification.from_config(bert.config)
    assert isinstance(as_backbone(auto), HFBertAdapter)


@pytest.mark.parametrize("name", RECONFIGURABLE)
def test_embed_blocks_finish_reproduce_encode_exactly(name):
    model, x = build(name)
    adapter = as_backbone(model).eval()
    assert adapter.supports_reconfiguration
    with torch.no_grad():
        h, context = adapter.embed(x)
        assert h.shape[0] == len(x) and h.ndim == 3
        assert len(adapter.blocks) == 2
        for index in range(len(adapter.blocks)):
            h = adapter.apply_block(index, h, context)
        tokens = adapter.finish(h, context)
        expected = adapter.encode(x)
    assert torch.equal(tokens, expected)
    # The blocks are the model's own modules, in order.
    model_blocks = {
        "timm_vit": lambda m: list(m.blocks),
        "deit_distilled": lambda m: list(m.blocks),
        "hf_vit": lambda m: list(m.vit.layers),
        "hf_bert": lambda m: list(m.bert.encoder.layer),
    }[name](model)
    assert all(a is b for a, b in zip(adapter.blocks, model_blocks, strict=True))


def probed_readout_names(adapter):
    """Names of the parameters that get a gradient through ``classify(finish(tokens))``.

    One backward pass on dummy tokens: the oracle for ``readout_parameters``.
    """
    tokens = torch.randn(2, adapter.num_prefix_tokens + 2, adapter.num_features)
    adapter.eval().zero_grad(set_to_none=True)
    adapter.classify(adapter.finish(tokens, None)).sum().backward()
    names = [name for name, p in adapter.named_parameters() if p.grad is not None]
    adapter.zero_grad(set_to_none=True)
    return names


def make_timm_vit_pooled(global_pool):
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        img_size=16,
        patch_size=8,
        embed_dim=16,
        depth=2,
        num_heads=2,
        num_classes=N_CLASSES,
        global_pool=global_pool,
    )


READOUT = {
    # name: (model factory, the parameters of the final norm, pooler and classifier(s))
    "timm_vit": (make_timm_vit, ["norm.weight", "norm.bias", "head.weight", "head.bias"]),
    "timm_vit_avg": (
        lambda: make_timm_vit_pooled("avg"),
        ["fc_norm.weight", "fc_norm.bias", "head.weight", "head.bias"],
    ),
    "timm_vit_map": (lambda: make_timm_vit_pooled("map"), None),
    "deit_distilled": (
        make_deit_distilled,
        ["norm.weight", "norm.bias", "head.weight", "head.bias"]
        + ["head_dist.weight", "head_dist.bias"],
    ),
    "hf_vit": (
        make_hf_vit,
        ["vit.layernorm.weight", "vit.layernorm.bias", "classifier.weight", "classifier.bias"],
    ),
    "hf_bert": (
        make_hf_bert,
        ["bert.pooler.dense.weight", "bert.pooler.dense.bias"]
        + ["classifier.weight", "classifier.bias"],
    ),
}


@pytest.mark.parametrize("name", list(READOUT))
def test_readout_parameters_are_what_finish_and_classify_use(name):
    torch.manual_seed(0)
    factory, expected = READOUT[name]
    adapter = as_backbone(factory())
    names = {id(p): name for name, p in adapter.named_parameters()}
    declared = [names[id(p)] for p in adapter.readout_parameters()]
    assert declared == probed_readout_names(adapter)
    if expected is not None:
        assert declared == [f"model.{name}" for name in expected]
    else:  # attention pooling: its latent, attention and MLP come between norm and head
        assert declared[:2] == ["model.norm.weight", "model.norm.bias"]
        assert any(name.startswith("model.attn_pool.") for name in declared)
        assert declared[-2:] == ["model.head.weight", "model.head.bias"]


def make_timm_vit_4_heads():
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=4, num_classes=N_CLASSES
    )


def make_hf_bert_4_heads():
    return make_tiny_bert(N_CLASSES, 40, hidden_size=16, depth=1, num_heads=4, intermediate_size=32)


@pytest.mark.parametrize(
    ("factory", "heads"),
    [
        (make_timm_vit, 2),
        (make_timm_vit_4_heads, 4),
        (make_deit_distilled, 2),
        (make_hf_vit, 2),
        (make_hf_bert, 2),
        (make_hf_bert_4_heads, 4),
        (make_swin, None),  # one count per stage, not one for the stack
    ],
)
def test_num_heads_is_the_blocks_attention_head_count(factory, heads):
    torch.manual_seed(0)
    assert as_backbone(factory()).num_heads == heads


def test_adapters_without_reconfiguration_have_no_readout_or_head_count():
    torch.manual_seed(0)
    plain = as_backbone(make_plain(), features="body", head="fc")
    swin = as_backbone(make_swin())
    assert plain.num_heads is None
    for adapter in (plain, swin):
        with pytest.raises(ReconfigurationNotSupportedError):
            adapter.readout_parameters()


def test_plain_module_with_named_parts_and_callables():
    torch.manual_seed(0)
    model = make_plain()
    x = images()
    expected = reference_logits("plain", model, x)
    by_name = as_backbone(model, features="body", head="fc")
    by_callable = as_backbone(model, features=model.body, head=lambda z: model.fc(z))
    for adapter in (by_name, by_callable):
        assert isinstance(adapter, PlainAdapter)
        with torch.no_grad():
            out = adapter.eval()(x)
        torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(out.pooled, model.body(x), rtol=0, atol=1e-6)
    assert (by_name.num_features, by_name.num_classes) == (4, N_CLASSES)
    assert set(by_name.state_dict()) == {f"model.{key}" for key in model.state_dict()}
    with pytest.raises(ReconfigurationNotSupportedError):
        by_name.blocks
    with pytest.raises(ValueError, match="not a submodule"):
        as_backbone(model, features="trunk", head="fc")
    spatial = as_backbone(model, features="body.0", head="fc")
    with pytest.raises(ValueError, match="pre-logits"):
        spatial(x)


class _FeaturesAndAuxiliary(nn.Module):
    """A feature part that returns its features beside an auxiliary output, in a container."""

    def __init__(self, body, container):
        super().__init__()
        self.body, self.container = body, container

    def forward(self, x):
        features = self.body(x)
        if self.container is dict:
            return {"features": features, "auxiliary": features.detach()}
        return self.container([features, features.detach()])


@pytest.mark.parametrize("container", [tuple, list, dict])
def test_plain_features_that_return_a_container_get_a_clear_error(container):
    torch.manual_seed(0)
    model = make_plain()
    model.body = _FeaturesAndAuxiliary(model.body, container)
    adapter = as_backbone(model, features="body", head="fc")
    expected = rf"features returned a {container.__name__}.*one tensor"
    with pytest.raises(ValueError, match=expected):
        adapter.eval()(images())


def test_timm_name_string_and_pass_through():
    adapter = as_backbone(
        "vit_tiny_patch16_224",
        num_classes=5,
        model_kwargs=dict(img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2),
    )
    assert isinstance(adapter, TimmAdapter) and adapter.num_classes == 5
    assert as_backbone(adapter) is adapter
    deit = as_backbone(
        "deit_tiny_distilled_patch16_224",
        num_classes=4,
        model_kwargs=dict(img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2),
    )
    assert isinstance(deit, TimmDistilledAdapter)


def test_bad_models_raise_clear_errors():
    with pytest.raises(ValueError, match="not a timm model name"):
        as_backbone("no_such_model_xyz")
    with pytest.raises(ValueError, match="features=.*head="):
        as_backbone(nn.Linear(3, 2))
    with pytest.raises(ValueError, match="cannot use"):
        as_backbone(42)
    with pytest.raises(ValueError, match="both"):
        as_backbone(make_plain(), features="body")
    with pytest.raises(ValueError, match="num_classes"):
        as_backbone(make_timm_vit(), num_classes=7)
    with pytest.raises(ValueError, match="timm name"):
        as_backbone(make_timm_vit(), pretrained=True)
    headless = make_timm_vit()
    headless.reset_classifier(0)
    with pytest.raises(ValueError, match="no classifier"):
        as_backbone(headless)


# extract_outputs ------------------------------------------------------------------------


def input_forms(x, y):
    labels = torch.as_tensor(y)
    return {
        "array": (x.numpy(), y),
        "dataset": (TensorDataset(x, labels), None),
        "loader": (DataLoader(TensorDataset(x, labels), batch_size=4), None),
    }


@pytest.mark.parametrize("form", ["array", "dataset", "loader"])
@pytest.mark.parametrize("name", [*FAMILIES, "plain"])
def test_extract_outputs_each_family_and_input_form(name, form):
    if name == "plain":
        torch.manual_seed(0)
        model, x = make_plain(), images()
        backbone = as_backbone(model, features="body", head="fc")
        run_once = model.body
    else:
        model, x = build(name)
        backbone = model
        run_once = FAMILIES[name][3](model)
    y = np.arange(N_SAMPLES) % N_CLASSES
    adapter = as_backbone(backbone)
    adapter_calls, inner_calls = CallCounter(adapter), CallCounter(run_once)
    model.train()
    data, labels = input_forms(x, y)[form]

    pooled, logits, y_out = extract_outputs(adapter, data, labels, batch_size=4, device="cpu")

    n_batches = 3  # 10 samples in batches of 4
    assert adapter_calls.calls == n_batches and inner_calls.calls == n_batches
    assert model.training  # the caller's mode is restored
    assert pooled.dtype == np.float32 and logits.dtype == np.float32
    assert pooled.shape == (N_SAMPLES, adapter.num_features)
    np.testing.assert_array_equal(y_out, y)
    expected = reference_logits(name, model, x).numpy()
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5)


def test_extract_outputs_without_labels_and_with_string_labels():
    torch.manual_seed(0)
    model, x = make_timm_vit(), images()
    _, logits, y_out = extract_outputs(model, x, batch_size=64, device="cpu")
    assert y_out is None and logits.shape == (N_SAMPLES, N_CLASSES)
    # Autocast is for CUDA only: on the CPU the request changes nothing.
    _, logits_mp, _ = extract_outputs(model, x, device="cpu", mixed_precision=True)
    np.testing.assert_array_equal(logits_mp, logits)
    names = np.array(["cat", "dog"] * 5)
    _, _, y_out = extract_outputs(model, x, names, device="cpu")
    np.testing.assert_array_equal(y_out, names)


def test_extract_outputs_dict_inputs_for_text():
    model, ids = build("hf_bert")
    mask = (ids != PAD_ID).long()
    pooled, logits, _ = extract_outputs(
        model, {"input_ids": ids, "attention_mask": mask}, batch_size=3, device="cpu"
    )
    expected = reference_logits("hf_bert", model, ids).numpy()
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5)


def test_memory_caches_outputs_and_keys_on_weights_and_data(tmp_path):
    torch.manual_seed(0)
    adapter = as_backbone(make_timm_vit())
    counter = CallCounter(adapter)
    x, y = images(), np.arange(N_SAMPLES) % N_CLASSES
    first = extract_outputs(adapter, x, y, batch_size=5, device="cpu", memory=tmp_path)
    assert counter.calls == 2
    second = extract_outputs(
        adapter, x.clone(), y, batch_size=5, device="cpu", memory=joblib.Memory(tmp_path)
    )
    assert counter.calls == 2  # served from the cache: no backbone pass
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)

    extract_outputs(adapter, images(seed=1), y, batch_size=5, device="cpu", memory=tmp_path)
    assert counter.calls == 4  # other data: runs again
    with torch.no_grad():
        adapter.model.head.bias.add_(1.0)
    _, logits, _ = extract_outputs(adapter, x, y, batch_size=5, device="cpu", memory=tmp_path)
    assert counter.calls == 6  # other weights: runs again
    np.testing.assert_allclose(logits, first[1] + 1.0, rtol=0, atol=1e-5)


def test_memory_with_dataset_inputs(tmp_path):
    torch.manual_seed(0)
    adapter = as_backbone(make_timm_vit())
    counter = CallCounter(adapter)
    dataset = TensorDataset(images(), torch.arange(N_SAMPLES) % N_CLASSES)
    loader = DataLoader(dataset, batch_size=4)
    for _ in range(2):
        extract_outputs(adapter, dataset, batch_size=4, device="cpu", memory=tmp_path)
        _, _, y_out = extract_outputs(adapter, loader, device="cpu", memory=tmp_path)
    assert counter.calls == 6  # 3 batches for the dataset, 3 for the loader, then cache hits
    np.testing.assert_array_equal(y_out, np.arange(N_SAMPLES) % N_CLASSES)


def test_memory_keys_on_the_rows_a_loaders_sampler_reads(tmp_path):
    torch.manual_seed(0)
    adapter = as_backbone(make_timm_vit())
    dataset = TensorDataset(images(), torch.arange(N_SAMPLES) % N_CLASSES)
    direct = extract_outputs(adapter, dataset, batch_size=4, device="cpu")
    for rows in ([0, 1, 2, 3], [4, 5, 6, 7], [4, 5, 6, 7]):
        loader = DataLoader(dataset, batch_size=4, sampler=rows)
        _, logits, y = extract_outputs(adapter, loader, device="cpu", memory=tmp_path)
        # The rows named, never the outputs cached for other rows.
        np.testing.assert_allclose(logits, direct[1][rows], atol=1e-5)
        np.testing.assert_array_equal(y, direct[2][rows])


def test_memory_warns_at_the_callers_line_when_the_data_cannot_be_hashed(tmp_path):
    from reliacal.calibrators import TemperatureScaling

    class Local(torch.utils.data.Dataset):  # defined in a function: pickle cannot name it
        def __len__(self):
            return N_SAMPLES

        def __getitem__(self, index):
            return images()[index], index % N_CLASSES

    torch.manual_seed(0)
    calibrator = TemperatureScaling(backbone=make_timm_vit(), device="cpu", memory=tmp_path)
    with pytest.warns(RuntimeWarning, match="memory= is ignored") as caught:
        calibrator.fit(Local())
    assert caught[0].filename == __file__


def test_extract_outputs_bad_input():
    model = make_timm_vit()
    x, y = images(), np.arange(N_SAMPLES) % N_CLASSES
    loader = DataLoader(TensorDataset(x, torch.as_tensor(y)), batch_size=4)
    with pytest.raises(ValueError, match="y must be None"):
        extract_outputs(model, loader, y, device="cpu")
    with pytest.raises(ValueError, match="lengths must match"):
        extract_outputs(model, x, y[:-1], device="cpu")
    with pytest.raises(ValueError, match="empty"):
        extract_outputs(model, x[:0], device="cpu")
    with pytest.raises(ValueError, match=r"\(x, y\) pairs"):
        extract_outputs(model, DataLoader(TensorDataset(x), batch_size=4), device="cpu")
    with pytest.raises(ValueError, match="batch_size"):
        extract_outputs(model, x, batch_size=0, device="cpu")
    with pytest.raises(ValueError, match="memory"):
        extract_outputs(model, x, device="cpu", memory=3)


def test_adapter_pickles_with_identical_outputs():
    model, x = build("timm_vit")
    adapter = as_backbone(model).eval()
    restored = pickle.loads(pickle.dumps(adapter))
    with torch.no_grad():
        torch.testing.assert_close(restored(x).logits, adapter(x).logits, rtol=0, atol=0)
    assert isinstance(restored, BackboneAdapter)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_extract_outputs_on_cuda_with_mixed_precision():
    model, x = build("timm_vit")
    pooled, logits, _ = extract_outputs(model, x, device="cuda", mixed_precision=True)
    assert logits.dtype == np.float32
    assert next(model.parameters()).device.type == "cpu"  # returned to where it was
    np.testing.assert_allclose(logits, reference_logits("timm_vit", model, x).numpy(), atol=5e-2)
