"""reliacal.datasets.make_logits: the toy logits of the examples."""

import numpy as np
import pytest

from reliacal.datasets import make_logits


def test_shapes_and_dtypes():
    logits, y = make_logits(50, 4, random_state=0)
    assert logits.shape == (50, 4) and logits.dtype == np.float64
    assert y.shape == (50,) and y.dtype == np.int64
    assert set(np.unique(y)) <= {0, 1, 2, 3}


def test_same_seed_same_draw_other_seed_other_draw():
    first, second = make_logits(30, 3, random_state=7), make_logits(30, 3, random_state=7)
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    assert not np.array_equal(first[0], make_logits(30, 3, random_state=8)[0])


def test_equals_the_inline_draw_it_replaces_bit_for_bit():
    # Examples that print numbers switched from these lines to make_logits.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=600)
    expected = 3.0 * np.eye(3)[y] + rng.normal(size=(600, 3)) + [2.0, 0.0, 0.0]
    logits, labels = make_logits(600, 3, bias=[2.0, 0.0, 0.0], random_state=0)
    assert np.array_equal(labels, y)
    assert np.array_equal(logits, expected)


def test_labels_are_the_argmax_when_the_signal_dominates_the_noise():
    logits, y = make_logits(200, 5, scale=1e6, random_state=1)
    assert np.array_equal(np.argmax(logits, axis=1), y)


def test_scale_moves_only_the_true_class_and_bias_every_row():
    plain, y = make_logits(40, 3, scale=0.0, random_state=2)
    scaled, _ = make_logits(40, 3, scale=2.5, random_state=2)
    biased, _ = make_logits(40, 3, scale=0.0, bias=[1.0, -2.0, 0.5], random_state=2)
    one_hot = np.zeros((40, 3))
    one_hot[np.arange(40), y] = 1.0
    np.testing.assert_allclose(scaled - plain, 2.5 * one_hot, atol=1e-12)
    np.testing.assert_allclose(biased - plain, np.tile([1.0, -2.0, 0.5], (40, 1)), atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_samples": 0}, "n_samples"),
        ({"n_samples": 2.5}, "n_samples"),
        ({"n_samples": True}, "n_samples"),
        ({"n_classes": 1}, "n_classes"),
        ({"scale": float("nan")}, "scale"),
        ({"scale": "3"}, "scale"),
        ({"bias": [1.0, 2.0]}, "bias"),
        ({"bias": [0.0, np.inf, 0.0]}, "bias"),
        ({"bias": ["a", "b", "c"]}, "bias"),
    ],
)
def test_bad_input_is_refused_by_name(kwargs, match):
    arguments = {"n_samples": 10, "n_classes": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_logits(**arguments)
