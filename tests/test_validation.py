"""Input validation: the checks every metric and calibrator relies on."""

import numpy as np
import pytest
import torch

from reliacal._validation import (
    check_logits,
    check_n_bins,
    check_option,
    check_probabilities,
    check_scores_and_target,
    encode_labels,
    is_torch_tensor,
    to_numpy,
)

PROBS = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3]])


def test_torch_tensors_are_told_from_other_torch_objects():
    assert is_torch_tensor(torch.zeros(2))
    assert is_torch_tensor(torch.nn.Parameter(torch.zeros(2)))  # a Tensor subclass
    assert not is_torch_tensor(torch.Size([2, 3]))  # torch's, but not a tensor
    assert not is_torch_tensor(np.zeros(2))
    # torch.Size goes the array route (the module-name test sent it to .detach()).
    np.testing.assert_array_equal(to_numpy(torch.Size([2, 3]), "shape"), [2, 3])
    parameter = torch.nn.Parameter(torch.ones(2))
    np.testing.assert_array_equal(to_numpy(parameter, "weights"), [1.0, 1.0])


def test_integer_labels_are_column_indices():
    y_index, y_prob, classes = check_probabilities([2, 0, 1], PROBS)
    np.testing.assert_array_equal(y_index, [2, 0, 1])
    np.testing.assert_array_equal(classes, [0, 1, 2])
    assert y_prob is not PROBS or y_prob.dtype == np.float64


def test_float32_and_float64_are_not_copied():
    for dtype in (np.float32, np.float64):
        probs = PROBS.astype(dtype)
        _, y_prob, _ = check_probabilities([0, 1, 2], probs)
        assert y_prob is probs


def test_string_labels_map_through_labels_in_column_order():
    y_index, _, classes = check_probabilities(
        ["dog", "cat", "cow"], PROBS, labels=["dog", "cow", "cat"]
    )
    np.testing.assert_array_equal(y_index, [0, 2, 1])
    np.testing.assert_array_equal(classes, ["dog", "cow", "cat"])


def test_one_class_present_is_legal():
    y_index, _, _ = check_probabilities([1, 1, 1], PROBS)
    np.testing.assert_array_equal(y_index, [1, 1, 1])


def test_binary_1d_input_and_labels():
    y_index, y_prob, classes = check_probabilities([0, 1, 1], [0.2, 0.9, 0.5])
    np.testing.assert_array_equal(y_index, [0, 1, 1])
    assert y_prob.shape == (3,)
    np.testing.assert_array_equal(classes, [0, 1])
    y_index, _, _ = check_probabilities(["no", "yes"], [0.2, 0.9], labels=["no", "yes"])
    np.testing.assert_array_equal(y_index, [0, 1])


def test_torch_tensors_are_accepted():
    y_index, y_prob, _ = check_probabilities(torch.tensor([0, 2, 1]), torch.tensor(PROBS))
    assert isinstance(y_prob, np.ndarray)
    np.testing.assert_array_equal(y_index, [0, 2, 1])
    bf16 = torch.tensor(PROBS).to(torch.bfloat16)
    _, y_prob, _ = check_probabilities([0, 2, 1], bf16)
    assert y_prob.dtype == np.float32


def test_float32_rows_within_tolerance_pass():
    probs = np.array([[0.5005, 0.5]], dtype=np.float32)  # off by 5e-4 < 1e-3
    check_probabilities([0], probs)
    with pytest.raises(ValueError, match="sum to 1"):
        check_probabilities([0], probs.astype(np.float64))  # float64 tolerance is 1e-4


def test_real_float32_record_passes(cifar_record):
    _, probs, labels = cifar_record
    check_probabilities(labels, probs)
    check_probabilities(labels, probs.astype(np.float64))


BAD_PROBABILITIES = [
    ([[0.5, np.nan], [0.5, 0.5]], "NaN"),
    ([[0.5, np.inf], [0.5, 0.5]], "infinite"),
    ([[-np.inf, 0.5], [0.5, 0.5]], "infinite"),
    ([[1.2, -0.2], [0.5, 0.5]], "outside \\[0, 1\\].*softmax"),
    ([[3.0, -1.0], [0.2, 1.5]], "logits.*softmax"),
    ([[0.5, 0.4], [0.5, 0.5]], "sum to 1.*row 0.*softmax"),
    ([[0.9, 0.9], [0.5, 0.5]], "sum to 1"),
    ([[1.0005, 0.0], [0.5, 0.5]], "outside"),
]


@pytest.mark.parametrize(("probs", "message"), BAD_PROBABILITIES)
def test_bad_probabilities_raise(probs, message):
    with pytest.raises(ValueError, match=message):
        check_probabilities([0, 1], np.array(probs))


def test_bad_1d_probabilities_raise():
    with pytest.raises(ValueError, match="outside"):
        check_probabilities([0, 1], [0.5, 1.5])
    with pytest.raises(ValueError, match="NaN"):
        check_probabilities([0, 1], [0.5, np.nan])


@pytest.mark.parametrize(
    ("y_true", "y_prob", "kwargs", "message"),
    [
        ([0, 3, 1], PROBS, {}, "not among the classes 0..2.*labels="),
        ([0, -1, 1], PROBS, {}, "not among"),
        (["a", "b", "c"], PROBS, {}, "non-numeric labels.*labels="),
        (["a", "b", "z"], PROBS, {"labels": ["a", "b", "c"]}, "not among"),
        ([0, 1, 2], PROBS, {"labels": [0, 1]}, "one class per column"),
        ([0, 1, 2], PROBS, {"labels": [0, 1, 1]}, "duplicates"),
        ([0, 1], PROBS, {}, "different lengths"),
        ([0, 1, 2, 0], PROBS, {}, "different lengths"),
        ([], np.zeros((0, 3)), {}, "empty"),
        ([[0], [1], [2]], PROBS, {}, "1-D"),
        ([0.5, 1.0, 2.0], PROBS, {}, "non-integer"),
        ([0, 1, 2], PROBS[:, :, None], {}, "1-D or 2-D"),
        ([0, 1, 2], np.ones((3, 1)), {}, "at least 2 columns"),
        ([0, 2], [0.3, 0.6], {}, "not among"),
        ([0, 1, 2], [[0.5, "x", 0.5]] * 3, {}, "numeric|converted"),
    ],
)
def test_bad_labels_and_shapes_raise(y_true, y_prob, kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_probabilities(y_true, y_prob, **kwargs)


def test_encode_labels():
    np.testing.assert_array_equal(encode_labels([5, 1, 5], [5, 1]), [0, 1, 0])
    np.testing.assert_array_equal(encode_labels(np.array([2, 0]), np.arange(3)), [2, 0])
    with pytest.raises(ValueError, match="not among"):
        encode_labels([1, 7], [1, 2])
    with pytest.raises(ValueError, match="not among"):
        encode_labels(["a"], [1, 2])


def test_check_logits():
    logits = np.array([[1.0, -2.0, 30.0]], dtype=np.float32)
    assert check_logits(logits) is logits
    assert check_logits(torch.tensor([[1, 2]])).dtype == np.float64
    with pytest.raises(ValueError, match="Z contains NaN"):
        check_logits([[0.0, np.nan]], name="Z")
    with pytest.raises(ValueError, match="infinite"):
        check_logits([[0.0, -np.inf]])
    with pytest.raises(ValueError, match="2-D"):
        check_logits([1.0, 2.0])
    with pytest.raises(ValueError, match="empty"):
        check_logits(np.zeros((0, 3)))


@pytest.mark.parametrize("n_bins", [0, -1, 1.5, True, "15", None])
def test_bad_n_bins(n_bins):
    with pytest.raises(ValueError, match="n_bins"):
        check_n_bins(n_bins)


def test_check_n_bins_accepts_numpy_integers():
    assert check_n_bins(np.int64(7)) == 7


def test_check_option():
    with pytest.raises(ValueError, match="strategy must be one of"):
        check_option("equal", "strategy", ("uniform", "quantile"))


def test_check_scores_and_target_reads_only_shapes():
    # Tensors on the meta device have shapes and no data: the check never reads values.
    scores = torch.empty(5, 3, device="meta")
    check_scores_and_target(scores, torch.empty(5, dtype=torch.long, device="meta"), "logits")
    with pytest.raises(
        ValueError, match=r"^logits must have shape \(n, K\) with K >= 2, got \(5,\)$"
    ):
        check_scores_and_target(torch.empty(5, device="meta"), torch.empty(5), "logits")
    with pytest.raises(ValueError, match=r"K >= 2, got \(5, 1\)"):
        check_scores_and_target(np.zeros((5, 1)), np.zeros(5), "preds")
    with pytest.raises(
        ValueError, match=r"^target must have shape \(5,\) to match preds, got \(5, 1\)$"
    ):
        check_scores_and_target(scores, torch.empty(5, 1, device="meta"), "preds")
