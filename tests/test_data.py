"""Input forms -> datasets of (x, y) pairs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from reliacal._data import MISSING_LABEL, as_dataset, collate_fn_of, dataset_labels, make_loader


class PairDataset(Dataset):
    """A map-style dataset that is not a TensorDataset, with torchvision-style targets."""

    def __init__(self, n):
        self.targets = [i % 3 for i in range(n)]

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        return torch.full((2,), float(index)), self.targets[index]


def test_arrays_with_labels():
    X = np.arange(12, dtype=np.float64).reshape(6, 2)
    y = np.array([0, 1, 2, 0, 1, 2])
    dataset, y_out = as_dataset(X, y)
    assert len(dataset) == 6
    x, label = dataset[4]
    assert x.dtype == torch.float32  # float64 arrays become the weights' dtype
    np.testing.assert_array_equal(x.numpy(), X[4])
    assert label == 1
    np.testing.assert_array_equal(y_out, y)
    xs, ys = next(iter(make_loader(dataset, batch_size=6)))
    np.testing.assert_array_equal(xs.numpy(), X)
    np.testing.assert_array_equal(ys.numpy(), y)


def test_torch_inputs_and_token_ids():
    ids = torch.randint(0, 10, (5, 7), dtype=torch.int32)
    dataset, y_out = as_dataset(ids, torch.arange(5))
    assert dataset[0][0].dtype == torch.int64
    assert isinstance(y_out, np.ndarray) and y_out.tolist() == [0, 1, 2, 3, 4]


def test_arrays_without_labels_yield_the_missing_label():
    dataset, y_out = as_dataset(np.zeros((3, 2)))
    assert y_out is None
    assert [int(label) for _, label in dataset] == [MISSING_LABEL] * 3
    with pytest.raises(ValueError, match="y is required"):
        as_dataset(np.zeros((3, 2)), require_y=True)


def test_string_labels_are_kept():
    dataset, y_out = as_dataset(np.zeros((2, 2)), ["cat", "dog"])
    assert y_out.tolist() == ["cat", "dog"]
    _, labels = next(iter(make_loader(dataset, batch_size=2)))
    assert list(labels) == ["cat", "dog"]


def test_dict_of_arrays():
    ids = np.arange(12).reshape(4, 3)
    mask = np.ones((4, 3), dtype=np.int64)
    dataset, _ = as_dataset({"input_ids": ids, "attention_mask": mask}, [0, 1, 0, 1])
    x, y = next(iter(make_loader(dataset, batch_size=4)))
    assert set(x) == {"input_ids", "attention_mask"}
    np.testing.assert_array_equal(x["input_ids"].numpy(), ids)
    with pytest.raises(ValueError, match="same length"):
        as_dataset({"input_ids": ids, "attention_mask": mask[:3]})


def test_dataset_and_loader_pass_through():
    tensors = TensorDataset(torch.zeros(4, 2), torch.tensor([1, 0, 1, 1]))
    dataset, y_out = as_dataset(tensors)
    assert dataset is tensors and y_out is None
    loader = DataLoader(tensors, batch_size=3)
    dataset, y_out = as_dataset(loader)
    assert dataset is tensors and y_out is None


def test_loader_collate_fn_is_kept():
    def collate(items):
        xs, ys = zip(*items, strict=True)
        return torch.stack(xs) * 10, torch.tensor(ys)

    loader = DataLoader(TensorDataset(torch.ones(4, 2), torch.arange(4)), collate_fn=collate)
    dataset, _ = as_dataset(loader)
    x, y = next(iter(make_loader(dataset, batch_size=4)))
    assert torch.equal(x, torch.full((4, 2), 10.0))
    np.testing.assert_array_equal(dataset_labels(dataset), [0, 1, 2, 3])


def test_dataset_labels_for_each_kind():
    arrays, _ = as_dataset(np.zeros((3, 2)), [2, 0, 1])
    np.testing.assert_array_equal(dataset_labels(arrays), [2, 0, 1])
    tensors = TensorDataset(torch.zeros(3, 2), torch.tensor([1, 1, 0]))
    np.testing.assert_array_equal(dataset_labels(tensors), [1, 1, 0])
    np.testing.assert_array_equal(dataset_labels(PairDataset(5)), [0, 1, 2, 0, 1])
    loader = DataLoader(PairDataset(5), batch_size=2)
    np.testing.assert_array_equal(dataset_labels(loader), [0, 1, 2, 0, 1])
    unlabelled, _ = as_dataset(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="without labels"):
        dataset_labels(unlabelled)


@pytest.mark.parametrize(
    ("X", "y", "message"),
    [
        (np.zeros((0, 3)), None, "empty"),
        (np.zeros((4, 3)), [0, 1, 2], "lengths must match"),
        (np.zeros((4, 3)), np.zeros((4, 2)), "1-D"),
        (np.array(["a", "b"]), None, "numeric"),
        (None, None, "None"),
        (np.float64(3.0), None, "scalar"),
        ({}, None, "empty dict"),
        (TensorDataset(torch.zeros(0, 2), torch.zeros(0)), None, "empty"),
        (TensorDataset(torch.zeros(2, 2), torch.zeros(2)), [0, 1], "y must be None"),
        (DataLoader(TensorDataset(torch.zeros(2, 2), torch.zeros(2))), [0, 1], "y must be None"),
    ],
)
def test_bad_inputs(X, y, message):
    with pytest.raises(ValueError, match=message):
        as_dataset(X, y)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
def test_make_loader_rejects_bad_batch_sizes(batch_size):
    dataset, _ = as_dataset(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="batch_size"):
        make_loader(dataset, batch_size)


def test_make_loader_shuffles_reproducibly():
    dataset, _ = as_dataset(np.arange(20.0)[:, None], np.arange(20))
    orders = [
        torch.cat([y for _, y in make_loader(dataset, 5, shuffle=True, generator=g)]).tolist()
        for g in (torch.Generator().manual_seed(0), torch.Generator().manual_seed(0))
    ]
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(20))
    assert orders[0] != list(range(20))


def test_collate_fn_survives_a_subset_split():
    def collate(items):
        xs, ys = zip(*items, strict=True)
        return torch.stack(xs) + 1, torch.tensor(ys)

    loader = DataLoader(TensorDataset(torch.zeros(6, 2), torch.arange(6)), collate_fn=collate)
    dataset, _ = as_dataset(loader)
    part = torch.utils.data.Subset(dataset, [4, 1])
    assert collate_fn_of(part) is collate
    x, _ = next(iter(make_loader(part, batch_size=2)))
    assert torch.equal(x, torch.ones(2, 2))
    np.testing.assert_array_equal(dataset_labels(part), [4, 1])
    assert collate_fn_of(TensorDataset(torch.zeros(2))) is None


# Loaders that cannot return each of their rows once ------------------------------------------


def _pairs(n=10):
    return TensorDataset(torch.arange(float(n))[:, None], torch.arange(n) % 2)


def test_drop_last_is_refused_only_when_it_drops_rows():
    from reliacal._data import check_every_row_once

    with pytest.raises(ValueError, match=r"drop_last=True.*last 2 of its 10 rows"):
        check_every_row_once(DataLoader(_pairs(), batch_size=4, drop_last=True))
    check_every_row_once(DataLoader(_pairs(), batch_size=5, drop_last=True))  # drops none
    check_every_row_once(DataLoader(_pairs(), batch_size=4))
    # A custom batch sampler with drop_last counts too.
    from torch.utils.data import BatchSampler, SequentialSampler

    batches = BatchSampler(SequentialSampler(range(10)), batch_size=3, drop_last=True)
    with pytest.raises(ValueError, match="drop_last=True"):
        check_every_row_once(DataLoader(_pairs(), batch_sampler=batches))


def test_sampling_with_replacement_is_refused():
    from torch.utils.data import RandomSampler, WeightedRandomSampler

    from reliacal._data import check_every_row_once

    data = _pairs()
    for sampler in (
        RandomSampler(data, replacement=True),
        WeightedRandomSampler([1.0] * 10, num_samples=10),
    ):
        with pytest.raises(ValueError, match=rf"{type(sampler).__name__}.*with replacement"):
            check_every_row_once(DataLoader(data, sampler=sampler))
    check_every_row_once(DataLoader(data, shuffle=True))  # every row once, in some order


def test_random_subset_and_weighted_samplers_count_as_shuffling():
    from torch.utils.data import SubsetRandomSampler, WeightedRandomSampler

    from reliacal._data import check_ordered

    data = _pairs()
    for sampler in (SubsetRandomSampler([0, 1, 2]), WeightedRandomSampler([1.0] * 10, 10, False)):
        with pytest.raises(ValueError, match=rf"shuffles \({type(sampler).__name__}\)"):
            check_ordered(DataLoader(data, sampler=sampler))
    check_ordered(DataLoader(data, sampler=[4, 2, 0]))  # a fixed order the caller knows


def test_prediction_batches_iterate_a_loader_as_given_and_other_forms_at_batch_size():
    from reliacal._data import prediction_batches

    loader = DataLoader(_pairs(), batch_size=3, sampler=[7, 1, 4, 9])
    rows = [(x[:, 0].tolist(), y.tolist()) for x, y in prediction_batches(loader, 64)]
    assert rows == [([7.0, 1.0, 4.0], [1, 1, 0]), ([9.0], [1])]
    X = np.arange(5.0)[:, None]
    assert [len(x) for x, _ in prediction_batches(X, 2)] == [2, 2, 1]
    with pytest.raises(ValueError, match="empty"):
        prediction_batches(torch.utils.data.Subset(_pairs(), []), 4)
    with pytest.raises(ValueError, match="drop_last"):
        prediction_batches(DataLoader(_pairs(), batch_size=4, drop_last=True), 4)
    with pytest.raises(ValueError, match="shuffles"):
        prediction_batches(DataLoader(_pairs(), shuffle=True), 4)
    # Scoring pairs each prediction with its own label: any order then does.
    assert len(list(prediction_batches(DataLoader(_pairs(), shuffle=True), 4, ordered=False))) == 10
