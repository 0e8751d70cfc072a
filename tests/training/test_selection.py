"""Checkpoint selection never keeps an epoch at chance accuracy when a better one exists.

The network here is scripted: in validation it outputs, for each epoch, the
probabilities written in the test, so every epoch's accuracy and ECE are known
by hand (the history is checked against them) and the selection rule alone is
under test.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from reliacal.training import TrainingConfig, fit_module
from reliacal.training._selection import chance_accuracy, improves

# Ten validation samples, six of class 0: chance accuracy is 0.6.
VALIDATION_Y = torch.tensor([0] * 6 + [1] * 4)


def _rows(predicted, confidence):
    """Probabilities (10, 2) that give each sample ``predicted[i]`` with ``confidence``."""
    rows = np.empty((10, 2))
    for i, label in enumerate(predicted):
        rows[i, label], rows[i, 1 - label] = confidence, 1 - confidence
    return rows


# What each validation sample is predicted to be.
ALL_ZERO = [0] * 10  # accuracy 0.6: the majority label
EIGHT_RIGHT = [0] * 6 + [1, 1, 0, 0]  # accuracy 0.8
ALL_RIGHT = VALIDATION_Y.tolist()  # accuracy 1.0


class ScriptedNetwork(nn.Module):
    """Validation pass ``e`` outputs the log of ``probabilities[e]``; training learns nothing.

    Validation passes are counted in a buffer (each one starts with ``eval()``),
    so that the count is part of a checkpoint. Inputs are sample indices.
    """

    def __init__(self, probabilities):
        super().__init__()
        self.table = torch.log(torch.as_tensor(np.stack(probabilities), dtype=torch.float32))
        self.weight = nn.Parameter(torch.zeros(2))
        self.register_buffer("validations", torch.zeros((), dtype=torch.int64))

    def train(self, mode=True):
        if not mode:
            self.validations += 1
        return super().train(mode)

    def forward(self, x):
        if self.training:
            return self.weight.expand(len(x), 2)
        epoch = min(int(self.validations) - 1, len(self.table) - 1)
        return self.table[epoch][x[:, 0].long()]


def _fit(probabilities, chance_advice=None, **config):
    settings = dict(max_epochs=len(probabilities), batch_size=5, learning_rate=0.01)
    settings.update(device="cpu", random_state=0, warmup_epochs=0, **config)
    network = ScriptedNetwork(probabilities)
    validation = TensorDataset(torch.arange(10.0)[:, None], VALIDATION_Y)
    train = TensorDataset(torch.zeros(10, 1), VALIDATION_Y)
    return fit_module(
        network,
        F.cross_entropy,
        train,
        validation_data=validation,
        config=TrainingConfig(**settings),
        **({} if chance_advice is None else {"chance_advice": chance_advice}),
    )


def test_lowest_ece_at_chance_loses_to_an_epoch_above_chance():
    # Epoch 1 always answers the majority class with confidence 0.6 = its frequency:
    # ECE 0, a perfect score for a network that learnt nothing.
    result = _fit(
        [_rows(ALL_ZERO, 0.6), _rows(EIGHT_RIGHT, 0.9), _rows(ALL_RIGHT, 0.6)],
        selection_metric="ece",
    )
    history = result.history
    # Hand-computed: one confidence bin per epoch, ECE = |confidence - accuracy|.
    np.testing.assert_allclose([e["val_accuracy"] for e in history], [0.6, 0.8, 1.0])
    np.testing.assert_allclose([e["val_ece"] for e in history], [0.0, 0.1, 0.4], atol=1e-6)
    assert result.best_epoch == 2
    assert result.best_score == pytest.approx(0.1, abs=1e-6)


def test_below_chance_loses_too_and_nll_selection_follows_the_same_rule():
    # Epoch 1 answers class 1 everywhere (accuracy 0.4, below chance), epoch 2 the
    # majority class (0.6, at chance); epoch 3 is right 8 times in 10 but overconfident,
    # so its NLL is the worst of the three.
    result = _fit(
        [_rows([1] * 10, 0.5001), _rows(ALL_ZERO, 0.6), _rows(EIGHT_RIGHT, 0.99)],
        selection_metric="nll",
    )
    nll = [e["val_nll"] for e in result.history]
    expected = [
        -(6 * math.log(0.4999) + 4 * math.log(0.5001)) / 10,  # 0.693
        -(6 * math.log(0.6) + 4 * math.log(0.4)) / 10,  # 0.673
        -(8 * math.log(0.99) + 2 * math.log(0.01)) / 10,  # 0.929
    ]
    np.testing.assert_allclose(nll, expected, rtol=1e-5)
    np.testing.assert_allclose([e["val_accuracy"] for e in result.history], [0.4, 0.6, 0.8])
    assert result.best_epoch == 3


def test_chance_epochs_count_as_no_improvement_for_early_stopping():
    above = _rows(EIGHT_RIGHT, 0.9)  # ECE 0.1
    at_chance = _rows(ALL_ZERO, 0.6)  # ECE 0
    result = _fit([above] + [at_chance] * 4, selection_metric="ece", n_iter_no_change=2)
    assert result.best_epoch == 1
    assert result.stopped_early and len(result.history) == 3


def test_only_chance_epochs_warn_and_keep_the_best_by_the_metric():
    with pytest.warns(UserWarning, match=r"never rose above chance \(0\.600.*in 2 epoch"):
        result = _fit([_rows(ALL_ZERO, 0.7), _rows(ALL_ZERO, 0.6)], selection_metric="ece")
    assert result.best_epoch == 2


def _chance_warnings(caught):
    return [w for w in caught if "never rose above chance" in str(w.message)]


def test_the_chance_warning_points_at_the_callers_line_with_the_callers_advice():
    at_chance = [_rows(ALL_ZERO, 0.7), _rows(ALL_ZERO, 0.6)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(at_chance)
        _fit(at_chance, chance_advice="Feed it better logits.")
    default, advised = _chance_warnings(caught)
    # Not training/_loop.py or _selection.py: the line of the test that trained.
    assert default.filename == advised.filename == __file__
    assert "Train longer (max_epochs)" in str(default.message)
    assert str(advised.message).endswith("Feed it better logits.")
    assert "Train longer" not in str(advised.message)
    assert "AdaptiveTS" not in str(default.message)


def test_no_warning_once_an_epoch_is_above_chance(recwarn):
    _fit([_rows(ALL_ZERO, 0.6), _rows(EIGHT_RIGHT, 0.9)])
    assert not [w for w in recwarn if "chance" in str(w.message)]


def test_a_resumed_run_still_prefers_the_epoch_above_chance(tmp_path):
    scripted = [_rows(EIGHT_RIGHT, 0.9), _rows(ALL_ZERO, 0.6), _rows(ALL_ZERO, 0.6)]

    def interrupt(epoch, logs):
        if epoch == 2:
            raise KeyboardInterrupt

    folder = str(tmp_path / "run")
    config = TrainingConfig(
        max_epochs=3, batch_size=5, device="cpu", random_state=0, checkpoint_dir=folder
    )
    validation = TensorDataset(torch.arange(10.0)[:, None], VALIDATION_Y)
    train = TensorDataset(torch.zeros(10, 1), VALIDATION_Y)
    with pytest.raises(KeyboardInterrupt):
        fit_module(
            ScriptedNetwork(scripted),
            F.cross_entropy,
            train,
            validation_data=validation,
            config=config,
            callbacks=[interrupt],
        )
    # The resumed run meets epoch 3 (at chance, ECE 0) with the restored history only.
    result = fit_module(
        ScriptedNetwork(scripted), F.cross_entropy, train, validation_data=validation, config=config
    )
    assert [e["epoch"] for e in result.history] == [1, 2, 3]
    assert result.best_epoch == 1


def test_chance_accuracy_is_the_majority_share_or_the_uniform_guess():
    assert chance_accuracy(np.array([2, 2, 2, 0]), 3) == 0.75
    assert chance_accuracy(np.array([0, 1, 2]), 3) == pytest.approx(1 / 3)
    # A balanced split of 2 classes among 4: the uniform guess, 1/4, is lower than 1/2.
    assert chance_accuracy(np.array([0, 0, 1, 1]), 4) == 0.5
    # One label only: nothing could beat a frequency of 1, so 1/K is chance.
    assert chance_accuracy(np.array([3, 3, 3]), 5) == 0.2
    with pytest.raises(ValueError, match="empty"):
        chance_accuracy(np.array([], dtype=int), 2)


@pytest.mark.parametrize(
    ("metric", "at_chance", "above"),
    [
        ("ece", 0.0, 0.2),
        ("nll", 0.1, 0.9),
        ("loss", 0.1, 0.9),
        # Accuracy itself: the one above chance is the better score anyway.
        ("accuracy", 0.5, 0.7),
    ],
)
def test_improves_puts_chance_first_for_every_metric(metric, at_chance, above):
    chance = 0.5
    chance_entry = {f"val_{metric}": at_chance, "val_accuracy": 0.5}
    above_entry = {f"val_{metric}": above, "val_accuracy": 0.7}
    if metric == "accuracy":
        chance_entry, above_entry = {"val_accuracy": 0.5}, {"val_accuracy": 0.7}
    assert improves(above_entry, chance_entry, metric=metric, chance=chance)
    assert not improves(chance_entry, above_entry, metric=metric, chance=chance)
    # Without validation accuracy (outputs that are not logits) the metric alone decides.
    no_accuracy = {f"val_{metric}": at_chance}
    assert improves(no_accuracy, {f"val_{metric}": above}, metric=metric, chance=None) == (
        metric != "accuracy"
    )


def test_adaptive_ts_on_logits_of_a_chance_classifier_warns():
    # Every row favours class 0 while the labels are balanced: whatever temperatures
    # AdaptiveTS learns, argmax (and so accuracy) stays at chance in every epoch.
    from reliacal.calibrators import AdaptiveTS

    rng = np.random.default_rng(0)
    logits = rng.normal(scale=0.1, size=(120, 3))
    logits[:, 0] += 2.0
    y = np.arange(120) % 3
    model = AdaptiveTS(
        latent_dim=2, hidden_layer_sizes=(8,), temperature_hidden_sizes=(4,), max_epochs=2
    )
    with pytest.warns(UserWarning, match="never rose above chance.*fixed logits"):
        model.set_params(random_state=0).fit(logits, y)
