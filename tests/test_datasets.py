"""The demo data, the tiny ViT and the split."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from reliacal.datasets import (
    load_digits_images,
    make_tiny_bert,
    make_tiny_vit,
    train_calibration_test_split,
    train_digits_classifier,
)
from reliacal.training import TrainingConfig


@pytest.fixture(scope="module")
def digits():
    return load_digits_images(image_size=16)


def bilinear_matrix(size_in: int, size_out: int) -> np.ndarray:
    """1-D bilinear resampling (half-pixel centres, edges clamped), built by hand."""
    matrix = np.zeros((size_out, size_in))
    for i in range(size_out):
        source = (i + 0.5) * size_in / size_out - 0.5
        source = min(max(source, 0.0), size_in - 1)
        low = int(np.floor(source))
        high = min(low + 1, size_in - 1)
        matrix[i, low] += 1.0 - (source - low)
        matrix[i, high] += source - low
    return matrix


def test_digits_images_are_the_upsampled_digits(digits):
    X, y = digits
    original = load_digits()
    assert X.shape == (1797, 1, 16, 16) and X.dtype == np.float32
    assert y.dtype == np.int64 and np.array_equal(y, original.target)
    assert X.min() >= 0.0 and X.max() <= 1.0
    resample = bilinear_matrix(8, 16)
    expected = resample @ (original.images / 16.0) @ resample.T
    np.testing.assert_allclose(X[:, 0], expected, atol=1e-6)


def test_digits_at_native_size_are_the_scaled_digits():
    X, _ = load_digits_images(image_size=8)
    np.testing.assert_allclose(X[:, 0], load_digits().images / 16.0, atol=1e-7)


@pytest.mark.parametrize("size", [4, 12.5, "16"])
def test_digits_bad_size(size):
    with pytest.raises((ValueError, TypeError)):
        load_digits_images(image_size=size)


def test_tiny_vit_shapes_seed_and_size():
    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    torch.manual_seed(123)
    model = make_tiny_vit(num_classes=10, image_size=16, random_state=0)
    # The seeded initialisation leaves the global generator alone.
    assert torch.equal(torch.rand(3), expected_draw)
    same = make_tiny_vit(num_classes=10, image_size=16, random_state=0)
    for a, b in zip(model.parameters(), same.parameters()):
        assert torch.equal(a, b)
    assert model(torch.zeros(3, 1, 16, 16)).shape == (3, 10)
    assert sum(p.numel() for p in model.parameters()) < 200_000
    assert model.patch_embed.num_patches == 16
    wide = make_tiny_vit(num_classes=3, image_size=32, patch_size=8, in_chans=3, embed_dim=32)
    assert wide(torch.zeros(1, 3, 32, 32)).shape == (1, 3)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        make_tiny_vit(image_size=18)


def test_tiny_bert_is_the_described_bert_seeded_without_touching_the_global_generator():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    torch.manual_seed(123)
    model = make_tiny_bert(num_classes=4, vocab_size=30, random_state=7, initializer_range=0.5)
    assert torch.equal(torch.rand(3), expected_draw)
    # Oracle: the same configuration written out by hand, initialised under the same seed.
    torch.manual_seed(7)
    reference = BertForSequenceClassification(
        BertConfig(
            vocab_size=30,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=16,
            num_labels=4,
            pad_token_id=0,
            initializer_range=0.5,
        )
    )
    assert model.state_dict().keys() == reference.state_dict().keys()
    for name, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    assert model.training
    ids = torch.tensor([[29, 3, 5, 0], [29, 1, 2, 8]])
    with torch.no_grad():
        logits = model.eval()(ids, attention_mask=(ids != 0).long()).logits
    assert logits.shape == (2, 4)


def test_tiny_bert_sizes_and_bad_arguments():
    wide = make_tiny_bert(num_classes=2, max_length=32, hidden_size=48, depth=1, num_heads=3)
    assert wide.config.num_hidden_layers == 1 and wide.config.num_attention_heads == 3
    assert wide.bert.embeddings.position_embeddings.num_embeddings == 32
    assert wide.classifier.out_features == 2
    with pytest.raises(ValueError, match="multiple of num_heads"):
        make_tiny_bert(hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="pad_token_id"):
        make_tiny_bert(vocab_size=10, pad_token_id=10)


def test_split_is_disjoint_stratified_and_seeded(digits):
    X, y = digits
    indices = np.arange(len(y))
    splits = train_calibration_test_split(indices, y, random_state=3)
    parts = [splits.X_train, splits.X_calibration, splits.X_test]
    assert sum(len(part) for part in parts) == len(y)
    assert len(np.unique(np.concatenate(parts))) == len(y)
    assert len(splits.X_test) == 450 and len(splits.X_calibration) == 360
    for part, labels in zip(parts, [splits.y_train, splits.y_calibration, splits.y_test]):
        np.testing.assert_array_equal(y[part], labels)
        share = np.bincount(labels, minlength=10) / len(labels)
        np.testing.assert_allclose(share, np.bincount(y) / len(y), atol=0.01)
    again = train_calibration_test_split(indices, y, random_state=3)
    np.testing.assert_array_equal(again.X_test, splits.X_test)
    other = train_calibration_test_split(indices, y, random_state=4)
    assert not np.array_equal(other.X_test, splits.X_test)
    with pytest.raises(ValueError, match="sum to less than 1"):
        train_calibration_test_split(indices, y, calibration_size=0.5, test_size=0.5)


@pytest.fixture
def one_thread():
    # A tiny model gains nothing from threads, which only contend on a shared CPU.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_train_digits_classifier_lowers_the_loss(digits, one_thread):
    X, y = digits
    config = TrainingConfig(
        max_epochs=4, learning_rate=3e-3, warmup_epochs=0.5, device="cpu", random_state=0
    )
    model, result = train_digits_classifier(X[:600], y[:600], config=config)
    losses = [row["train_loss"] for row in result.history]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert not model.training
    with torch.no_grad():
        probs = model(torch.from_numpy(X[600:700])).softmax(dim=1).numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        train_digits_classifier(X[:10, 0], y[:10], config=config)


# ----------------------------------------------------------------- prediction files
