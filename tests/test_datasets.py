"""The demo data, the tiny ViT, the split, and the prediction-file loader."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import load_record
from scipy.special import softmax as scipy_softmax
from sklearn.datasets import load_digits

from reliacal.datasets import (
    load_digits_images,
    load_prediction_file,
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


@pytest.fixture(scope="module")
def small_record():
    probs, labels = load_record("wideresnet-16-4-cifar-10")
    return probs[:500], labels[:500]


@pytest.mark.parametrize(
    ("probs_key", "labels_key"),
    [("predictions", "ground_truth"), ("probs", "labels"), ("probabilities", "y")],
)
def test_npz_keys_are_found_and_reported(tmp_path, small_record, probs_key, labels_key):
    probs, labels = small_record
    path = tmp_path / "record.npz"
    np.savez(path, **{probs_key: probs, labels_key: labels})
    loaded = load_prediction_file(path)
    np.testing.assert_array_equal(loaded.probs, probs)
    np.testing.assert_array_equal(loaded.labels, labels)
    assert loaded.logits is None
    assert loaded.source == (
        f"record.npz: probabilities from key {probs_key!r}, labels from key {labels_key!r}"
    )


def test_npz_named_keys(tmp_path, small_record):
    probs, labels = small_record
    path = tmp_path / "named.npz"
    np.savez(path, model_a=probs, model_b=probs[:, ::-1], truth=labels)
    loaded = load_prediction_file(path, probs_key="model_b", labels_key="truth")
    np.testing.assert_array_equal(loaded.probs, probs[:, ::-1])
    with pytest.raises(ValueError, match="no prediction key 'model_c'.*model_a, model_b, truth"):
        load_prediction_file(path, probs_key="model_c", labels_key="truth")
    with pytest.raises(ValueError, match="no prediction key"):
        load_prediction_file(path)


def test_logits_only_when_named(tmp_path):
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(50, 4))
    labels = rng.integers(0, 4, size=50)
    by_key = tmp_path / "logits.npz"
    np.savez(by_key, logits=logits, labels=labels)
    loaded = load_prediction_file(by_key)
    np.testing.assert_allclose(loaded.probs, scipy_softmax(logits, axis=1), rtol=1e-12)
    np.testing.assert_array_equal(loaded.logits, logits)
    assert "logits from key 'logits' (softmax applied)" in loaded.source

    unnamed = tmp_path / "scores.npz"
    np.savez(unnamed, probs=logits, labels=labels)
    with pytest.raises(ValueError, match="--logits"):
        load_prediction_file(unnamed)
    loaded = load_prediction_file(unnamed, logits=True)
    np.testing.assert_allclose(loaded.probs, scipy_softmax(logits, axis=1), rtol=1e-12)


def test_npy_pair(tmp_path, small_record):
    probs, labels = small_record
    np.save(tmp_path / "probs.npy", probs)
    np.save(tmp_path / "labels.npy", labels)
    loaded = load_prediction_file(tmp_path / "probs.npy", labels_path=tmp_path / "labels.npy")
    np.testing.assert_array_equal(loaded.probs, probs)
    np.testing.assert_array_equal(loaded.labels, labels)
    assert loaded.source == "probs.npy: probabilities from the array, labels from labels.npy"
    with pytest.raises(ValueError, match="--labels"):
        load_prediction_file(tmp_path / "probs.npy")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_tables(tmp_path, small_record, suffix):
    probs, labels = small_record
    frame = pd.DataFrame(probs.astype(np.float64), columns=[f"p_{k}" for k in range(10)])
    frame.insert(0, "label", labels)
    frame["comment"] = 1.0  # an extra numeric column, excluded by the prefix below
    path = tmp_path / f"table{suffix}"
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    loaded = load_prediction_file(path, probs_key="p_")
    np.testing.assert_allclose(loaded.probs, probs, rtol=1e-6)
    np.testing.assert_array_equal(loaded.labels, labels)
    assert "10 columns (p_0, p_1, p_2, ...)" in loaded.source
    assert "labels from column 'label'" in loaded.source
    with pytest.raises(ValueError, match="do not sum to 1|sum"):
        load_prediction_file(path)  # the extra column breaks the row sums


def test_table_with_string_labels_names_the_columns(tmp_path):
    frame = pd.DataFrame(
        {"target": ["spam", "ham", "spam"], "p_spam": [0.9, 0.2, 0.6], "p_ham": [0.1, 0.8, 0.4]}
    )
    path = tmp_path / "mail.csv"
    frame.to_csv(path, index=False)
    loaded = load_prediction_file(path, probs_key="p_")
    assert list(loaded.classes) == ["spam", "ham"]
    assert list(loaded.labels) == ["spam", "ham", "spam"]
    with pytest.raises(ValueError, match="not among"):
        load_prediction_file(path)  # columns "p_spam", "p_ham" are not the labels


def test_table_with_one_probability_column_is_binary(tmp_path):
    path = tmp_path / "binary.csv"
    pd.DataFrame({"y": [1, 0, 1], "score": [0.9, 0.2, 0.6]}).to_csv(path, index=False)
    loaded = load_prediction_file(path)
    assert loaded.probs.shape == (3,) and loaded.classes is None


@pytest.mark.parametrize(
    ("name", "content", "error", "message"),
    [
        ("absent.npz", None, FileNotFoundError, "no such file"),
        ("notes.txt", "1", ValueError, "unknown prediction file type '.txt'"),
        ("broken.npz", "not a zip archive", ValueError, r"^broken.npz is not a valid .npz file"),
        ("broken.parquet", "not parquet", ValueError, "cannot be read as a table"),
    ],
)
def test_unreadable_files(tmp_path, name, content, error, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(error, match=message):
        load_prediction_file(path)
    with pytest.raises(ValueError, match="not a file"):
        load_prediction_file(tmp_path)


def test_labels_name_the_columns_of_npz_and_npy_files(tmp_path, small_record):
    probs, labels = small_record
    names = np.array(["cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay", "kea", "lynx"])
    k = probs.shape[1]
    np.savez(tmp_path / "strings.npz", probs=probs, labels=names[:k][labels])
    with pytest.raises(ValueError, match=r"non-numeric labels.*--classes"):
        load_prediction_file(tmp_path / "strings.npz")
    loaded = load_prediction_file(tmp_path / "strings.npz", labels=list(names[:k]))
    np.testing.assert_array_equal(loaded.classes, names[:k])
    np.testing.assert_array_equal(loaded.labels, names[:k][labels])
    # A label outside the given names, or a name list of the wrong length, is refused.
    with pytest.raises(ValueError, match="strings.npz"):
        load_prediction_file(tmp_path / "strings.npz", labels=list(names[1 : k + 1]))
    with pytest.raises(ValueError, match="strings.npz"):
        load_prediction_file(tmp_path / "strings.npz", labels=list(names[: k - 1]))
    # Numeric labels: names given as strings become numbers.
    np.save(tmp_path / "probs.npy", probs)
    np.save(tmp_path / "labels.npy", labels)
    numeric = load_prediction_file(
        tmp_path / "probs.npy",
        labels_path=tmp_path / "labels.npy",
        labels=[str(k) for k in range(k)],
    )
    np.testing.assert_array_equal(numeric.classes, np.arange(k))
    with pytest.raises(ValueError, match="not numbers"):
        load_prediction_file(
            tmp_path / "probs.npy", labels_path=tmp_path / "labels.npy", labels=list(names[:k])
        )


def test_invalid_contents(tmp_path, small_record):
    probs, labels = small_record
    cases = {
        "nolabels.npz": {"probs": probs},
        "short.npz": {"probs": probs, "labels": labels[:-1]},
        "nan.npz": {"probs": np.where(np.arange(10) == 3, np.nan, probs), "labels": labels},
        "labels2d.npz": {"probs": probs, "labels": labels[:, None]},
        "notsum.npz": {"probs": probs * 0.5, "labels": labels},
    }
    messages = {
        "nolabels.npz": "no labels",
        "short.npz": "nolabels|length|samples|499|500",
        "nan.npz": "NaN|nan|finite",
        "labels2d.npz": "one-dimensional",
        "notsum.npz": "sum",
    }
    for name, content in cases.items():
        np.savez(tmp_path / name, **content)
        with pytest.raises(ValueError, match=messages[name]) as caught:
            load_prediction_file(tmp_path / name)
        assert name in str(caught.value)
        if name == "nan.npz":
            assert "--logits" not in str(caught.value)


def test_non_numeric_column(tmp_path):
    path = tmp_path / "text.csv"
    pd.DataFrame({"label": [0, 1], "p0": ["a", "b"], "p1": [0.5, 0.5]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match="not numeric"):
        load_prediction_file(path)
