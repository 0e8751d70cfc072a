"""The estimator contract shared by the post-hoc calibrators (reliacal.calibrators._base)."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import warnings

import joblib
import numpy as np
import pytest
import torch
from scipy.special import softmax
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.model_selection import cross_val_score
from sklearn.utils._testing import create_memmap_backed_data
from sklearn.utils.estimator_checks import parametrize_with_checks
from timm.models.vision_transformer import VisionTransformer
from torch.utils.data import DataLoader, TensorDataset

from reliacal.backbones import extract_outputs
from reliacal.calibrators import (
    BaseCalibrator,
    ClassLabelMixin,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
)

ESTIMATORS = [TemperatureScaling(), VectorScaling(), MatrixScaling()]


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=lambda e: e._expected_failed_checks())
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def _logits(seed=0, n=300, n_classes=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    logits = 3.0 * (np.eye(n_classes)[y] + rng.normal(size=(n, n_classes)))
    return logits, y


def _ids(estimators):
    return [type(e).__name__ for e in estimators]


# ------------------------------------------------------------------------------------
# What the waived sklearn checks cover, on data whose labels are column indices.


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids(ESTIMATORS))
def test_fit_returns_self_and_keeps_parameters_and_weights(estimator):
    logits, y = _logits()
    weights = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    weights_copy = weights.copy()
    params = joblib.hash(estimator.get_params())
    assert estimator.fit(logits, y, sample_weight=weights) is estimator
    assert joblib.hash(estimator.get_params()) == params
    np.testing.assert_array_equal(weights, weights_copy)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids(ESTIMATORS))
def test_lists_memmaps_and_pandas_inputs_agree_with_arrays(estimator):
    pandas = pytest.importorskip("pandas")
    logits, y = _logits()
    weights = np.linspace(0.5, 1.5, len(y))
    expected = clone(estimator).fit(logits, y, sample_weight=weights).predict_proba(logits)
    as_lists = clone(estimator).fit(logits.tolist(), y.tolist(), sample_weight=weights.tolist())
    np.testing.assert_allclose(as_lists.predict_proba(logits.tolist()), expected, rtol=1e-12)
    memmapped_logits, memmapped_y = create_memmap_backed_data([logits, y])
    memmapped = clone(estimator).fit(memmapped_logits, memmapped_y, sample_weight=weights)
    np.testing.assert_allclose(memmapped.predict_proba(memmapped_logits), expected, rtol=1e-12)
    series = clone(estimator).fit(
        pandas.DataFrame(logits), pandas.Series(y), sample_weight=pandas.Series(weights)
    )
    np.testing.assert_allclose(series.predict_proba(pandas.DataFrame(logits)), expected)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids(ESTIMATORS))
def test_torch_tensors_agree_with_numpy(estimator):
    logits, y = _logits()
    expected = clone(estimator).fit(logits, y).predict_proba(logits)
    tensor = torch.from_numpy(logits).requires_grad_(True)
    fitted = clone(estimator).fit(tensor, torch.from_numpy(y))
    np.testing.assert_allclose(fitted.predict_proba(tensor), expected, rtol=1e-12)


# ------------------------------------------------------------------------------------
# Labels and classes.


def test_classes_name_the_columns_in_order():
    logits, y = _logits()
    names = np.array(["bee", "ant", "cat"])  # deliberately not sorted
    fitted = TemperatureScaling(classes=names).fit(logits, names[y])
    np.testing.assert_array_equal(fitted.classes_, names)
    np.testing.assert_array_equal(fitted.predict(logits), names[np.argmax(logits, axis=1)])
    assert fitted.score(logits, names[y]) == pytest.approx(np.mean(np.argmax(logits, 1) == y))


def test_default_classes_are_the_column_indices_even_when_some_are_missing():
    logits, y = _logits(n_classes=5)
    keep = y != 4
    fitted = TemperatureScaling().fit(logits[keep], y[keep])
    np.testing.assert_array_equal(fitted.classes_, np.arange(5))
    assert fitted.predict_proba(logits).shape == (len(y), 5)


def test_score_uses_sample_weight():
    logits, y = _logits()
    fitted = TemperatureScaling().fit(logits, y)
    correct = np.argmax(logits, axis=1) == y
    weights = np.where(correct, 3.0, 1.0)
    expected = np.sum(weights * correct) / np.sum(weights)
    assert fitted.score(logits, y, sample_weight=weights) == pytest.approx(expected)


def test_predict_log_proba_is_the_log_of_predict_proba():
    logits, y = _logits()
    fitted = MatrixScaling().fit(logits, y)
    np.testing.assert_allclose(
        np.exp(fitted.predict_log_proba(logits)), fitted.predict_proba(logits), rtol=1e-12
    )


class _LabelOnly(ClassLabelMixin, ClassifierMixin, BaseEstimator):
    """An estimator with its own fit that reuses only the label handling."""

    def __init__(self, classes=None):
        self.classes = classes

    def fit(self, X, y):
        self.y_index_ = self._fit_labels(y, n_columns=np.shape(X)[1])
        return self

    def predict_proba(self, X):
        return softmax(np.asarray(X, dtype=float), axis=1)


def test_label_mixin_on_its_own():
    logits, y = _logits()
    names = np.array(["x", "y", "z"])
    model = _LabelOnly(classes=names).fit(logits, names[y])
    np.testing.assert_array_equal(model.y_index_, y)
    np.testing.assert_array_equal(model._encode_labels(["z", "x"]), [2, 0])
    np.testing.assert_array_equal(model.predict(logits), names[np.argmax(logits, axis=1)])
    with pytest.raises(ValueError, match="not among the classes"):
        model._encode_labels(["w"])
    with pytest.raises(ValueError, match="pass classes="):
        _LabelOnly().fit(logits, names[y])


# ------------------------------------------------------------------------------------
# Bad input gives a ValueError that names the problem.


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids(ESTIMATORS))
def test_bad_inputs(estimator):
    logits, y = _logits()
    bad = logits.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        clone(estimator).fit(bad, y)
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        clone(estimator).fit(bad, y)
    # 1-D X is read as binary scores: three classes cannot be.
    with pytest.raises(ValueError, match=r"X is 1-D: binary scores.* labels \[2\]"):
        clone(estimator).fit(logits[:, 0], y)
    with pytest.raises(ValueError, match="0 sample"):
        clone(estimator).fit(np.empty((0, 3)), np.empty(0, dtype=int))
    with pytest.raises(ValueError, match="1 feature"):
        clone(estimator).fit(logits[:, :1], np.zeros(len(y), dtype=int))
    with pytest.raises(ValueError, match=r"labels \[3 7\] are not column indices"):
        clone(estimator).fit(logits, np.where(y == 0, 7, np.where(y == 1, 3, y)))
    with pytest.raises(ValueError, match="requires y"):
        clone(estimator).fit(logits)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        clone(estimator).fit(logits, y[:-1])
    with pytest.raises(ValueError, match="pass classes="):
        clone(estimator).fit(logits, np.array(["a", "b", "c"])[y])
    with pytest.raises(ValueError, match="one label per column"):
        clone(estimator).set_params(classes=["a", "b"]).fit(logits, y)
    with pytest.raises(ValueError, match="Negative values"):
        clone(estimator).fit(logits, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(ValueError, match="at least one non-zero"):
        clone(estimator).fit(logits, y, sample_weight=np.zeros(len(y)))
    with pytest.raises(ValueError, match="input"):
        clone(estimator).set_params(input="scores").fit(logits, y)

    fitted = clone(estimator).fit(logits, y)
    with pytest.raises(ValueError, match="X has 4 features, but .* is expecting 3"):
        fitted.predict_proba(np.zeros((5, 4)))
    with pytest.raises(ValueError, match="Reshape your data"):
        fitted.predict(logits[0])
    with pytest.raises(ValueError, match="NaN or infinite"):
        fitted.predict_proba(np.full((2, 3), np.nan))


def _every_logit_calibrator():
    from reliacal.calibrators import AdaptiveTS, AutoCalibrator

    return [
        *ESTIMATORS,
        AutoCalibrator(cv=3),
        AdaptiveTS(n_members=1, max_epochs=2, hidden_layer_sizes=(8,), random_state=0),
    ]


@pytest.mark.parametrize(
    "estimator", _every_logit_calibrator(), ids=_ids(_every_logit_calibrator())
)
def test_one_dimensional_binary_scores_are_the_positive_class_logit(estimator):
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, size=400)
    scores = 3.0 * (2.0 * y - 1.0 + rng.normal(size=400))
    columns = np.column_stack([np.zeros_like(scores), scores])
    probabilities = 1.0 / (1.0 + np.exp(-scores))
    expected = clone(estimator).fit(columns, y).predict_proba(columns)
    as_scores = clone(estimator).fit(scores, y)
    assert as_scores.n_features_in_ == 1
    np.testing.assert_allclose(as_scores.predict_proba(scores), expected, atol=1e-6)
    np.testing.assert_allclose(
        as_scores.decision_function(torch.from_numpy(scores)).shape, (400, 2)
    )
    # With input="probs" each value is the positive class's probability: columns [1 - p, p].
    with_probs = clone(estimator).set_params(input="probs")
    probability_columns = np.column_stack([1.0 - probabilities, probabilities])
    expected = clone(with_probs).fit(probability_columns, y).predict_proba(probability_columns)
    as_probabilities = with_probs.fit(probabilities, y)
    np.testing.assert_allclose(as_probabilities.predict_proba(probabilities), expected, atol=1e-6)
    with pytest.raises(ValueError, match="X has 2 features, but .* is expecting 1"):
        as_scores.predict_proba(columns)


def test_probabilities_only_when_asked():
    logits, y = _logits()
    probabilities = softmax(logits, axis=1)
    fitted = TemperatureScaling(input="probs").fit(probabilities, y)
    on_logs = TemperatureScaling().fit(np.log(probabilities), y)
    assert fitted.temperature_ == pytest.approx(on_logs.temperature_, rel=1e-12)
    # Logits passed as probabilities are refused, with the hint to use logits mode.
    with pytest.raises(ValueError, match="does not hold probabilities"):
        TemperatureScaling(input="probs").fit(logits, y)
    # Zero probabilities are clipped, not turned into -inf.
    probabilities[0] = [1.0, 0.0, 0.0]
    clipped = TemperatureScaling(input="probs").fit(probabilities, y)
    assert np.all(np.isfinite(clipped.predict_proba(probabilities)))


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids(ESTIMATORS))
def test_probabilities_in_logits_mode_warn_at_fit_and_predict(estimator):
    logits, y = _logits()
    probabilities = softmax(logits, axis=1)
    with pytest.warns(UserWarning, match=r"look like probabilities.*input='probs'") as fit_record:
        fitted = clone(estimator).fit(probabilities, y)
    assert any("passed to fit" in str(w.message) for w in fit_record)
    with pytest.warns(UserWarning, match=r"passed to predict look like probabilities"):
        fitted.predict_proba(probabilities)
    # Logits, and rows in [0, 1] that do not sum to 1, are not flagged.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clone(estimator).fit(logits, y)
        clone(estimator).fit(np.clip(probabilities * 1.01, 0.0, 1.0), y)
        clone(estimator).set_params(input="probs").fit(probabilities, y)


# ------------------------------------------------------------------------------------
# Persistence and cloning.


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids(ESTIMATORS))
def test_pickle_and_joblib_round_trips_are_bit_identical(estimator, tmp_path):
    logits, y = _logits()
    fitted = clone(estimator).fit(logits, y)
    expected = fitted.predict_proba(logits)
    restored = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(restored.predict_proba(logits), expected)
    joblib.dump(fitted, tmp_path / "calibrator.joblib")
    loaded = joblib.load(tmp_path / "calibrator.joblib")
    np.testing.assert_array_equal(loaded.predict_proba(logits), expected)
    np.testing.assert_array_equal(
        loaded.decision_function(logits), fitted.decision_function(logits)
    )


def test_clone_copies_parameters_not_fitted_state():
    fitted = MatrixScaling(reg_off_diagonal=0.3, reg_bias=0.1).fit(*_logits())
    copy = clone(fitted)
    assert copy.get_params() == fitted.get_params()
    assert not hasattr(copy, "coef_")


# ------------------------------------------------------------------------------------
# The subclass hooks, as a feature-aware calibrator (AdaptiveTS) uses them.


class _FeatureAwareScaling(BaseCalibrator):
    """Toy calibrator: reads features and logits side by side (the last n_logits columns)."""

    _parameter_constraints = {**BaseCalibrator._parameter_constraints, "n_logits": [int]}

    def __init__(
        self,
        n_logits=3,
        **base_params,
    ):
        self.n_logits = n_logits
        super().__init__(**base_params)

    def _split_columns(self, X):
        return X[:, : -self.n_logits], X[:, -self.n_logits :]

    def _check_fit_inputs(self, features, logits):
        if features is None or features.shape[1] == 0:
            raise ValueError("features are required")

    def _fit_core(self, features, logits, y_index, sample_weight):
        self.seen_ = (features.shape, logits.shape, y_index.copy())
        self.temperature_ = TemperatureScaling().fit(logits, y_index).temperature_

    def _calibrated_logits(self, features, logits):
        return logits / self.temperature_


def test_hooks_split_features_and_logits_and_survive_row_splitting():
    logits, y = _logits()
    features = np.random.default_rng(2).normal(size=(len(y), 5))
    X = np.hstack([features, logits])
    fitted = _FeatureAwareScaling().fit(X, y)
    assert fitted.seen_[0] == (len(y), 5) and fitted.seen_[1] == (len(y), 3)
    assert fitted.n_features_in_ == 8
    np.testing.assert_array_equal(fitted.predict(X), np.argmax(logits, axis=1))
    # GridSearchCV-style row splitting keeps features and logits of a row together.
    assert cross_val_score(_FeatureAwareScaling(), X, y, cv=3).mean() == pytest.approx(
        np.mean(np.argmax(logits, axis=1) == y), abs=0.02
    )
    with pytest.raises(ValueError, match="features are required"):
        _FeatureAwareScaling(n_logits=8).fit(X, y)
    # input="probs" converts the logit block only.
    probs = np.hstack([features, softmax(logits, axis=1)])
    from_probs = _FeatureAwareScaling(input="probs").fit(probs, y)
    assert from_probs.temperature_ == pytest.approx(fitted.temperature_, rel=1e-10)


# ------------------------------------------------------------------------------------
# Backbone mode: raw inputs through a frozen model, one forward pass per batch.


def _tiny_vit():
    torch.manual_seed(0)
    return VisionTransformer(
        img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2, num_classes=3
    )


class _ForwardCounter:
    """Counts forward passes through a model (its patch embedding runs once per pass)."""

    def __init__(self, vit):
        self.calls = 0
        vit.patch_embed.register_forward_hook(self)

    def __call__(self, module, inputs, output):
        self.calls += 1


@pytest.fixture
def images():
    generator = torch.Generator().manual_seed(1)
    X = torch.randn(40, 3, 16, 16, generator=generator)
    return X, torch.arange(40) % 3


def test_backbone_mode_equals_logits_mode_for_every_input_form(images):
    X, y = images
    vit = _tiny_vit()
    weights = {key: value.clone() for key, value in vit.state_dict().items()}
    with torch.no_grad():
        own_logits = vit.eval()(X).numpy()
    vit.train()
    reference = TemperatureScaling().fit(own_logits, y.numpy())
    forms = {
        "array": (X.numpy(), y.numpy()),
        "tensor": (X, y),
        "dataset": (TensorDataset(X, y), None),
        "loader": (DataLoader(TensorDataset(X, y), batch_size=7), None),
    }
    for name, (inputs, labels) in forms.items():
        fitted = TemperatureScaling(backbone=vit, batch_size=16, device="cpu").fit(inputs, labels)
        assert fitted.temperature_ == pytest.approx(reference.temperature_, rel=1e-5), name
        np.testing.assert_allclose(
            fitted.predict_proba(inputs), reference.predict_proba(own_logits), atol=1e-6
        )
    # The backbone stays frozen and in the mode the user left it in.
    assert vit.training
    for key, value in vit.state_dict().items():
        assert torch.equal(value, weights[key]), key


def test_backbone_runs_once_per_call_and_memory_skips_the_second_pass(images, tmp_path):
    X, y = images
    vit = _tiny_vit()
    counter = _ForwardCounter(vit)
    calibrator = MatrixScaling(backbone=vit, batch_size=16, device="cpu")
    calibrator.fit(X, y)
    assert counter.calls == 3  # ceil(40 / 16) batches
    counter.calls = 0
    calibrator.score(DataLoader(TensorDataset(X, y), batch_size=20))
    assert counter.calls == 2

    counter.calls = 0
    first = TemperatureScaling(backbone=vit, batch_size=16, device="cpu", memory=tmp_path)
    first.fit(X, y)
    assert counter.calls == 3
    # A new estimator on the same model and data (as in a grid search) reads the cache.
    second = TemperatureScaling(backbone=vit, batch_size=16, device="cpu", memory=tmp_path)
    second.fit(X, y)
    assert counter.calls == 3
    assert second.temperature_ == first.temperature_


def test_backbone_features_reach_the_hooks(images):
    X, y = images
    vit = _tiny_vit()
    pooled, _, _ = extract_outputs(vit, X, y, device="cpu")
    fitted = _FeatureAwareScaling(backbone=vit, device="cpu").fit(X, y)
    assert fitted.seen_[0] == pooled.shape
    assert fitted.seen_[1] == (40, 3)


def test_backbone_calibrator_pickles(images):
    X, y = images
    fitted = TemperatureScaling(backbone=_tiny_vit(), device="cpu").fit(X, y)
    restored = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(restored.predict_proba(X), fitted.predict_proba(X))


def test_modules_on_an_accelerator_are_pickled_as_one_cpu_copy(images, monkeypatch):
    # No GPU here: pretend the backbone sits on one, and check that the pickled state
    # holds a CPU copy in which the adapter still wraps the very model given as backbone.
    from reliacal.calibrators import _base

    X, y = images
    vit = _tiny_vit()
    fitted = TemperatureScaling(backbone=vit, device="cpu").fit(X, y)
    monkeypatch.setattr(_base, "_on_accelerator", lambda value: isinstance(value, torch.nn.Module))
    state = fitted.__getstate__()
    assert state["backbone"] is not vit
    assert state["backbone_"].model is state["backbone"]
    restored = pickle.loads(pickle.dumps(fitted))
    assert restored.backbone_.model is restored.backbone
    np.testing.assert_array_equal(restored.predict_proba(X), fitted.predict_proba(X))


@pytest.mark.gpu
@pytest.mark.gpu
def test_fitted_on_cuda_predicts_on_a_cpu_only_machine(images, tmp_path):
    X, y = images
    vit = _tiny_vit().to("cuda")
    fitted = TemperatureScaling(backbone=vit, device="cuda").fit(X, y)
    path = tmp_path / "cuda.joblib"
    joblib.dump(fitted, path)
    assert next(vit.parameters()).device.type == "cuda"  # the live model stays put
    np.save(tmp_path / "X.npy", X.numpy())
    script = (
        "import joblib, numpy as np, torch\n"
        "assert not torch.cuda.is_available()\n"
        f"model = joblib.load({str(path)!r}).set_params(device='cpu')\n"
        f"np.save({str(tmp_path / 'p.npy')!r}, model.predict_proba(np.load({str(tmp_path / 'X.npy')!r})))\n"
    )
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, "-c", script], check=True, env=environment, timeout=300)
    expected = fitted.set_params(device="cpu").predict_proba(X)
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), expected, atol=1e-5)


def _parameter_doc(obj, name):
    """The text of ``name``'s entry in a numpydoc Parameters section."""
    lines = obj.__doc__.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name} :"))
    indent = len(lines[start]) - len(lines[start].lstrip())
    entry = []
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        entry.append(line.strip())
    return " ".join(entry)


def test_every_memory_parameter_says_the_cache_folder_must_be_trusted():
    # Issue 16: joblib.Memory unpickles whatever the cache folder holds.
    from reliacal.calibrators import AdaptiveTS

    documented = [
        BaseCalibrator,
        TemperatureScaling,
        VectorScaling,
        MatrixScaling,
        AdaptiveTS,
        extract_outputs,
    ]
    for obj in documented:
        entry = _parameter_doc(obj, "memory")
        assert "pickle" in entry and "trust" in entry, (obj.__name__, entry)


def _named_checks(text):
    """The checks a text names, besides ``check_estimator`` itself."""
    return set(re.findall(r"``(check_\w+)``", text)) - {"check_estimator"}


def _section(docstring, name):
    """The text of a numpydoc section, whitespace collapsed."""
    match = re.search(
        rf"^\s*{name}\n\s*-+\n(.*?)(?=^\s*\w[\w ]*\n\s*-{{3,}}\n|\Z)", docstring, re.S | re.M
    )
    assert match, f"no {name} section"
    return " ".join(match.group(1).split())


@pytest.mark.parametrize(
    "name", ["TemperatureScaling", "VectorScaling", "MatrixScaling", "AdaptiveTS"]
)
def test_docstring_lists_exactly_the_waived_checks_with_their_reasons(name):
    # Issue 13.7: generated from _expected_failed_checks(), not hand copies.
    import reliacal.calibrators

    cls = getattr(reliacal.calibrators, name)
    waived = cls()._expected_failed_checks()
    notes = _section(cls.__doc__, "Notes")
    assert _named_checks(notes) == set(waived)
    for reason in waived.values():
        assert " ".join(reason.split()).rstrip(".") in notes


def test_a_new_calibrator_gets_a_notes_section_with_its_waived_checks():
    class Shifted(BaseCalibrator):
        """A toy calibrator.

        Parameters
        ----------
        input : str
            Unused.

        Examples
        --------
        >>> 1 + 1
        2
        """

        def _expected_failed_checks(self):
            return {**super()._expected_failed_checks(), "check_fit2d_1sample": "one row"}

    class Documented(Shifted):
        """Another one.

        Notes
        -----
        Hand-written remark.
        """

    for cls in (Shifted, Documented):
        doc = cls.__doc__
        notes = _section(doc, "Notes")
        assert "``check_fit2d_1sample``: one row." in notes
        assert _named_checks(notes) == set(cls()._expected_failed_checks())
    assert Shifted.__doc__.index("Notes") < Shifted.__doc__.index("Examples")
    assert ">>> 1 + 1" in Shifted.__doc__
    assert _section(Documented.__doc__, "Notes").startswith(
        "Hand-written remark. ``check_estimator``"
    )
