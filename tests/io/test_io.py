"""Reading prediction files: keys, tables, labels, and what the loader refuses."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import softmax as scipy_softmax

from reliacal.io import load_prediction_file


@pytest.fixture(scope="module")
def small_record(load_record):
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
    for probs_key in ("p_", None):  # the prefix is read from the names when not given
        loaded = load_prediction_file(path, probs_key=probs_key)
        assert list(loaded.classes) == ["spam", "ham"]
        assert list(loaded.labels) == ["spam", "ham", "spam"]
        assert loaded.columns == ("p_spam", "p_ham")
    frame.assign(target=["spam", "eggs", "spam"]).to_csv(path, index=False)
    with pytest.raises(ValueError, match="not among"):
        load_prediction_file(path)  # "eggs" has no column


@pytest.mark.parametrize(
    ("names", "labels", "classes"),
    [
        (["p_cat", "p_dog"], ["dog", "cat", "cat"], ["cat", "dog"]),
        (["cat_prob", "dog_prob"], ["dog", "cat", "cat"], ["cat", "dog"]),
        (["prob(cat)", "prob(dog)"], ["dog", "cat", "cat"], ["cat", "dog"]),
        # A split that misses a class: eel has a column but no row.
        (["p_eel", "p_cat", "p_dog"], ["dog", "cat", "cat"], ["eel", "cat", "dog"]),
        # Labels that share letters with the prefix: "p_pig" is p_ + pig, not p_p + ig.
        (["p_pig", "p_pony"], ["pony", "pig", "pig"], ["pig", "pony"]),
        (["cat", "dog"], ["dog", "cat", "cat"], ["cat", "dog"]),
    ],
)
def test_string_labels_are_the_column_names_between_a_prefix_and_suffix(
    tmp_path, names, labels, classes
):
    probs = np.array([[0.2, 0.8], [0.7, 0.3], [0.6, 0.4]])
    if len(names) == 3:
        probs = np.column_stack([np.zeros(3), probs])
    path = tmp_path / "pets.csv"
    pd.DataFrame(probs, columns=names).assign(label=labels).to_csv(path, index=False)
    loaded = load_prediction_file(path)
    assert list(loaded.classes) == classes
    np.testing.assert_array_equal(loaded.probs, probs)
    assert loaded.columns == tuple(names)


def test_table_with_one_probability_column_is_binary(tmp_path):
    path = tmp_path / "binary.csv"
    pd.DataFrame({"y": [1, 0, 1], "score": [0.9, 0.2, 0.6]}).to_csv(path, index=False)
    loaded = load_prediction_file(path)
    assert loaded.probs.shape == (3,) and loaded.classes is None
    assert (
        loaded.source == "binary.csv: probabilities from 1 column (score), labels from column 'y'"
    )


# ------------------------------------------------------------ logits named by their columns


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("prefix", ["logit_", "logits_", "logit", "Logit-"])
def test_logit_columns_are_read_as_logits(tmp_path, suffix, prefix):
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=3.0, size=(40, 3))
    labels = rng.integers(0, 3, size=40)
    # Written as classes 2, 0, 1: the numbers put them back, as for probability columns.
    frame = pd.DataFrame(logits[:, [2, 0, 1]], columns=[f"{prefix}{k}" for k in (2, 0, 1)])
    frame = frame.assign(label=labels)
    path = tmp_path / f"scores{suffix}"
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    loaded = load_prediction_file(path)
    np.testing.assert_allclose(loaded.probs, scipy_softmax(logits, axis=1), rtol=1e-12)
    np.testing.assert_array_equal(loaded.logits, logits)
    assert loaded.source.startswith(f"scores{suffix}: logits from 3 columns ({prefix}0, ")
    assert "(softmax applied)" in loaded.source


def test_logit_columns_of_string_classes_and_names_that_are_not_logits(tmp_path):
    logits = np.array([[2.0, -1.0], [0.5, 1.5], [-2.0, 0.0]])
    path = tmp_path / "pets.csv"
    frame = pd.DataFrame(logits, columns=["logit_cat", "logit_dog"])
    frame.assign(label=["cat", "dog", "dog"]).to_csv(path, index=False)
    loaded = load_prediction_file(path)
    assert list(loaded.classes) == ["cat", "dog"]
    np.testing.assert_allclose(loaded.probs, scipy_softmax(logits, axis=1), rtol=1e-12)
    # "logistic" is not "logit": scores outside [0, 1] under that name are refused as before.
    frame.columns = ["logistic_0", "logistic_1"]
    frame.assign(label=[0, 1, 1]).to_csv(path, index=False)
    with pytest.raises(ValueError, match="looks like logits.*logit_0"):
        load_prediction_file(path)


def test_npz_keys_named_logits_are_logits(tmp_path):
    logits = np.array([[2.0, -1.0], [0.5, 1.5]])
    np.savez(tmp_path / "models.npz", logits_ts=logits, probs=np.full((2, 2), 0.5), y=[0, 1])
    loaded = load_prediction_file(tmp_path / "models.npz", probs_key="logits_ts")
    np.testing.assert_allclose(loaded.probs, scipy_softmax(logits, axis=1), rtol=1e-12)
    assert "logits from key 'logits_ts' (softmax applied)" in loaded.source


def test_probabilities_named_as_logits_are_softmaxed_with_a_warning(tmp_path):
    probs = np.array([[0.9, 0.1], [0.3, 0.7]])
    path = tmp_path / "misnamed.csv"
    pd.DataFrame(probs, columns=["logit_0", "logit_1"]).assign(label=[0, 1]).to_csv(
        path, index=False
    )
    with pytest.warns(UserWarning, match="misnamed.csv: .*named as logits.*sums to 1"):
        loaded = load_prediction_file(path)
    np.testing.assert_allclose(loaded.probs, scipy_softmax(probs, axis=1), rtol=1e-12)


def test_one_logit_column_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "one.csv"
    pd.DataFrame({"logit": [2.0, -1.0], "label": [1, 0]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match="one.csv: logits are read as one column per class"):
        load_prediction_file(path)


# ----------------------------------------------------------- several models in one .npz file


def test_a_key_pattern_selects_npz_keys(tmp_path):
    from reliacal.io import prediction_keys

    probs = np.array([[0.9, 0.1], [0.3, 0.7]])
    path = tmp_path / "predictions.npz"
    np.savez(path, probs_raw=probs, labels=[0, 1], probs_ts=probs[:, ::-1], other=probs)
    assert prediction_keys(path, "probs_*") == ["probs_raw", "probs_ts"]
    assert prediction_keys(path, "*") == ["probs_raw", "probs_ts", "other"]  # never the labels
    with pytest.raises(ValueError, match=r"no key matches 'p\?'; it has: probs_raw, labels"):
        prediction_keys(path, "p?")
    # One match is that key; several are refused by name.
    loaded = load_prediction_file(path, probs_key="probs_t*")
    np.testing.assert_array_equal(loaded.probs, probs[:, ::-1])
    assert "key 'probs_ts'" in loaded.source
    with pytest.raises(ValueError, match=r"2 keys match 'probs_\*' \(probs_raw, probs_ts\)"):
        load_prediction_file(path, probs_key="probs_*")
    # Without a key: the error says how to read them all.
    np.savez(path, probs_raw=probs, probs_ts=probs, labels=[0, 1])
    with pytest.raises(ValueError, match="--probs-key 'probs_\\*'"):
        load_prediction_file(path)
    table = tmp_path / "table.csv"
    pd.DataFrame(probs, columns=["p_0", "p_1"]).assign(label=[0, 1]).to_csv(table, index=False)
    for refuse in (
        lambda: prediction_keys(table, "p_*"),
        lambda: load_prediction_file(table, probs_key="p_*"),
    ):
        with pytest.raises(ValueError, match="--probs-key p_"):
            refuse()


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
    with pytest.raises(ValueError, match="is a folder, not a prediction file"):
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


# ------------------------------------------------ column names carry the classes (issue 16)


def shuffled_table(path, probs, labels, names):
    """Write ``probs`` (columns in class order) as a table whose columns come in name order."""
    frame = pd.DataFrame({name: probs[:, k] for k, name in enumerate(names)})
    frame = frame[sorted(names)].assign(label=labels)
    frame.to_csv(path, index=False)
    return list(frame.columns[:-1])


def test_table_columns_are_put_in_the_order_of_their_class_numbers(tmp_path):
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(12), size=40)
    labels = rng.integers(0, 12, size=40)
    # Sorted as strings: p0, p1, p10, p11, p2, ..., p9 (what a sorted dict writes).
    written = shuffled_table(tmp_path / "twelve.csv", probs, labels, [f"p{k}" for k in range(12)])
    assert written[:4] == ["p0", "p1", "p10", "p11"]
    loaded = load_prediction_file(tmp_path / "twelve.csv")
    np.testing.assert_allclose(loaded.probs, probs, rtol=1e-12)
    assert loaded.classes is None  # the numbers are the column indices 0..11
    assert "put in the order of the class numbers" in loaded.source

    swapped = tmp_path / "swapped.csv"
    pd.DataFrame({"p_1": probs[:, 1], "p_0": 1 - probs[:, 1], "label": labels % 2}).to_csv(
        swapped, index=False
    )
    loaded = load_prediction_file(swapped)
    np.testing.assert_allclose(loaded.probs[:, 1], probs[:, 1], rtol=1e-12)
    assert "2 columns (p_0, p_1) put in the order" in loaded.source


@pytest.mark.parametrize("pattern", ["class_{}", "c{}_prob"])
def test_class_numbers_that_are_not_column_indices_become_the_classes(tmp_path, pattern):
    path = tmp_path / "from_one.csv"
    frame = pd.DataFrame(
        {pattern.format(3): [0.7, 0.2], pattern.format(1): [0.3, 0.8], "y": [1, 3]}
    )
    frame.to_csv(path, index=False)
    loaded = load_prediction_file(path)
    np.testing.assert_array_equal(loaded.classes, [1, 3])
    np.testing.assert_allclose(loaded.probs, [[0.3, 0.7], [0.8, 0.2]])


def test_columns_that_name_one_class_twice_are_refused(tmp_path):
    path = tmp_path / "twice.csv"
    pd.DataFrame({"p_1": [0.5], "p_01": [0.5], "label": [1]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match="twice.csv: columns p_1, p_01 both name class 1"):
        load_prediction_file(path)


def test_given_classes_keep_the_file_order(tmp_path):
    path = tmp_path / "given.csv"
    pd.DataFrame({"p_1": [0.9, 0.2], "p_0": [0.1, 0.8], "label": [5, 7]}).to_csv(path, index=False)
    loaded = load_prediction_file(path, labels=["5", "7"])
    np.testing.assert_allclose(loaded.probs, [[0.9, 0.1], [0.2, 0.8]])
    np.testing.assert_array_equal(loaded.classes, [5, 7])


# ------------------------------------------------------- mistakes get the right advice


def test_pandas_index_column_is_named_as_the_cause(tmp_path):
    path = tmp_path / "indexed.csv"
    pd.DataFrame({"p_0": [0.9, 0.2, 0.5], "p_1": [0.1, 0.8, 0.5], "label": [0, 1, 1]}).to_csv(
        path
    )  # pandas' default: the row index is written as a header-less first column
    with pytest.raises(ValueError, match="'Unnamed: 0'.*index=False") as caught:
        load_prediction_file(path)
    assert "logits" not in str(caught.value)


@pytest.mark.parametrize("position", [0, 2, 3])
def test_an_extra_numeric_column_is_named(tmp_path, position):
    probs = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]])
    frame = pd.DataFrame(probs, columns=["cat", "dog", "eel"])
    frame.insert(position, "weight", [1.0, 2.0, 0.5])  # row sums 2, 3 and 1.5
    frame["label"] = [0, 2, 1]
    frame.to_csv(tmp_path / "extra.csv", index=False)
    with pytest.raises(ValueError, match="column 'weight' is not a class probability") as caught:
        load_prediction_file(tmp_path / "extra.csv")
    assert "logits" not in str(caught.value)
    assert str(caught.value).startswith("extra.csv: ")


def test_a_stray_column_among_numbered_ones_is_named(tmp_path):
    path = tmp_path / "stray.csv"
    frame = pd.DataFrame({"p_0": [0.9, 0.2], "p_1": [0.1, 0.8], "note": [0.0, 0.0]})
    frame.assign(label=[0, 1]).to_csv(path, index=False)
    # The rows still sum to 1, but which class "note" would be is unknown.
    message = r"column 'note' is not named like the class columns p_0, p_1 \(p_<class>\): so"
    with pytest.raises(ValueError, match=message) as caught:
        load_prediction_file(path)
    assert "--probs-key p_," in str(caught.value)
    assert load_prediction_file(path, probs_key="p_").probs.shape == (2, 2)


@pytest.mark.parametrize("key", ["probs", "labels"])
def test_object_arrays_name_the_file_and_key(tmp_path, key):
    arrays = {"probs": np.array([[0.5, 0.5], [0.2, 0.8]]), "labels": np.array([0, 1])}
    arrays[key] = arrays[key].astype(object)
    np.savez(tmp_path / "objects.npz", **arrays)
    with pytest.raises(ValueError, match=f"objects.npz: key '{key}' holds Python objects") as e:
        load_prediction_file(tmp_path / "objects.npz")
    assert "dtype=str" in str(e.value) and "pickle" not in str(e.value)

    np.save(tmp_path / "probs.npy", arrays["probs"])
    np.save(tmp_path / "labels.npy", arrays["labels"])
    with pytest.raises(ValueError, match=r"(probs|labels).npy: the (array|labels) holds Python"):
        load_prediction_file(tmp_path / "probs.npy", labels_path=tmp_path / "labels.npy")


def test_npy_that_is_not_an_array_file(tmp_path):
    (tmp_path / "garbage.npy").write_text("not an array")
    np.save(tmp_path / "labels.npy", np.array([0, 1]))
    with pytest.raises(ValueError, match="garbage.npy is not a valid .npy file") as caught:
        load_prediction_file(tmp_path / "garbage.npy", labels_path=tmp_path / "labels.npy")
    assert "pickle" not in str(caught.value)


def test_a_wrong_number_of_class_names_is_named(tmp_path):
    np.savez(tmp_path / "four.npz", probs=np.full((3, 4), 0.25), labels=np.array([0, 3, 2]))
    with pytest.raises(ValueError, match="2 class names given .* for 4 prediction columns"):
        load_prediction_file(tmp_path / "four.npz", labels=["a", "b"])


def test_the_loader_is_still_importable_from_its_old_module():
    import reliacal.datasets
    import reliacal.io

    assert reliacal.datasets.load_prediction_file is reliacal.io.load_prediction_file
    assert reliacal.datasets.Predictions is reliacal.io.Predictions
