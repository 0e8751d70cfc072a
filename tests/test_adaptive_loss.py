"""AdaptiveTS(loss=...): the documented hook that replaces the training loss."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from torch.nn import functional as F

from reliacal.calibrators import AdaptiveTS

SMALL = dict(
    latent_dim=2,
    hidden_layer_sizes=(16,),
    temperature_hidden_sizes=(8,),
    max_epochs=3,
    batch_size=32,
    learning_rate=5e-3,
    random_state=0,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Bitwise comparisons of two fits need the same reduction order in both.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _logits(n=240, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    return 2.5 * np.eye(3)[y] + rng.normal(size=(n, 3)), y


def documented_elbo(logits, y, sample_weight, variational):
    """The default loss, written from the ``loss`` parameter's description."""
    cross_entropy = F.cross_entropy(logits, y, reduction="none")
    return (sample_weight * (variational + cross_entropy)).mean()


def brier_instead_of_cross_entropy(logits, y, sample_weight, variational):
    one_hot = F.one_hot(y, logits.shape[1]).to(logits.dtype)
    brier = (torch.softmax(logits, dim=-1) - one_hot).square().sum(dim=-1)
    return (sample_weight * (variational + 10.0 * brier)).mean()


def _state(model):
    return [member.network.state_dict() for member in model.members_]


def test_the_documented_formula_reproduces_the_default_fit_exactly():
    X, y = _logits()
    weights = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    default = AdaptiveTS(**SMALL).fit(X, y, sample_weight=weights)
    custom = AdaptiveTS(**SMALL, loss=documented_elbo).fit(X, y, sample_weight=weights)
    for expected, actual in zip(_state(default), _state(custom)):
        for name, value in expected.items():
            assert torch.equal(actual[name], value), name
    np.testing.assert_array_equal(custom.temperature(X), default.temperature(X))


def test_the_callable_receives_the_documented_arguments_and_steers_training():
    X, y = _logits()
    weights = np.random.default_rng(2).uniform(0.5, 2.0, size=len(y))
    seen = []

    def recording(logits, target, sample_weight, variational):
        seen.append((logits.shape, logits.requires_grad, target.dtype, sample_weight.clone()))
        assert variational.shape == target.shape == sample_weight.shape == (len(logits),)
        return brier_instead_of_cross_entropy(logits, target, sample_weight, variational)

    params = {**SMALL, "validation_fraction": 0.0, "n_iter_no_change": None}
    model = AdaptiveTS(**params, loss=recording).fit(X, y, sample_weight=weights)
    # 240 rows in batches of 32: 8 batches (the last of 16) per epoch, 3 epochs.
    assert len(seen) == 3 * 8
    assert {shape for shape, *_ in seen} == {(32, 3), (16, 3)}
    assert all(grad and dtype == torch.int64 for _, grad, dtype, _ in seen)
    # The weights arrive scaled to mean 1 over the calibration data.
    epoch = torch.cat([weight for *_, weight in seen[:8]])
    torch.testing.assert_close(epoch.mean(), torch.tensor(1.0), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        torch.sort(epoch).values,
        torch.sort(torch.as_tensor(weights * len(y) / weights.sum(), dtype=torch.float32)).values,
    )
    default = AdaptiveTS(**params).fit(X, y, sample_weight=weights)
    assert not np.allclose(model.temperature(X), default.temperature(X))


def test_a_non_scalar_loss_is_refused():
    X, y = _logits(n=64)

    def per_sample(logits, target, sample_weight, variational):
        return variational

    with pytest.raises(ValueError, match="scalar"):
        AdaptiveTS(**SMALL, loss=per_sample).fit(X, y)


@pytest.mark.parametrize("loss", ["mse", 1.0])
def test_an_unknown_loss_is_refused_by_name(loss):
    X, y = _logits(n=64)
    with pytest.raises(ValueError, match="'loss' parameter"):
        AdaptiveTS(loss=loss).fit(X, y)


def test_clone_pickle_and_grid_search_over_the_loss():
    X, y = _logits()
    model = AdaptiveTS(**SMALL, loss=brier_instead_of_cross_entropy)
    assert clone(model).get_params()["loss"] is brier_instead_of_cross_entropy
    fitted = model.fit(X, y)
    restored = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(restored.temperature(X), fitted.temperature(X))
    grid = {"loss": ["elbo", brier_instead_of_cross_entropy]}
    search = GridSearchCV(AdaptiveTS(**SMALL), grid, scoring="neg_log_loss", cv=2).fit(X, y)
    assert list(search.cv_results_["param_loss"]) == grid["loss"]
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert search.best_estimator_.loss in grid["loss"]
