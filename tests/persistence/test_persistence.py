"""save / reliacal.load: pickle-free round trips of every estimator, and the refusals."""

from __future__ import annotations

import copy
import hashlib
import json
import zipfile

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.frozen import FrozenEstimator
from timm.models.vision_transformer import VisionTransformer

import reliacal
from reliacal import CalibratedClassifier
from reliacal.calibrators import AdaptiveTS, AutoCalibrator, MatrixScaling, TemperatureScaling
from reliacal.datasets import make_logits
from reliacal.finetune import CalAttnFinetuner, DiffusionReconfigurer
from reliacal.persistence import FORMAT_VERSION, save

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CALIBRATION = slice(0, 1500)
EVALUATION = slice(5000, 5400)


def test_the_no_pickle_fixture_bites(no_pickle, tmp_path):
    # The guard of the round trips below: numpy's object-array writer goes through pickle.
    with pytest.raises(AssertionError, match="pickle was used"):
        np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object))


def assert_same_predictions(first, second, X):
    np.testing.assert_array_equal(first.predict_proba(X), second.predict_proba(X))
    np.testing.assert_array_equal(first.predict(X), second.predict(X))


# AdaptiveTS with two members and three draws: both are saved and must come back.
ADAPTIVE = dict(hidden_layer_sizes=(8,), temperature_hidden_sizes=(4,), n_members=2, n_draws=3)


@pytest.mark.parametrize("archive", [False, True], ids=["folder", "zip"])
def test_calibrators_round_trip_to_identical_predictions(
    load_record, tmp_path, no_pickle, post_hoc_calibrator, post_hoc_name, archive
):
    name = post_hoc_name
    probs, labels = load_record("wideresnet-16-4-cifar-10")
    model = post_hoc_calibrator(name, **(ADAPTIVE if name == "adaptive" else {}))
    model.fit(probs[CALIBRATION], labels[CALIBRATION])
    path = tmp_path / ("model.zip" if archive else "model")
    model.save(path)
    assert path.is_file() == archive
    loaded = reliacal.load(path)
    assert type(loaded) is type(model)
    assert loaded.get_params(deep=False).keys() == model.get_params(deep=False).keys()
    np.testing.assert_array_equal(loaded.classes_, model.classes_)
    assert_same_predictions(model, loaded, probs[EVALUATION])
    if name == "auto":
        pd.testing.assert_frame_equal(loaded.cv_results_, model.cv_results_)
        assert (loaded.best_name_, loaded.reason_) == (model.best_name_, model.reason_)


def test_numpy_scalars_and_non_finite_floats_round_trip(tmp_path, no_pickle):
    model = TemperatureScaling()
    model.flags_ = (np.bool_(True), np.int64(3), np.float32(0.5), float("nan"), -np.inf)
    model.save(tmp_path / "m")
    flags = reliacal.load(tmp_path / "m").flags_
    assert flags[:3] == (True, 3, 0.5) and type(flags[0]) is bool
    assert np.isnan(flags[3]) and flags[4] == -np.inf


def test_string_classes_and_manifest_contents(tmp_path, no_pickle):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=300)
    logits = 3.0 * (np.eye(3)[y] + rng.normal(size=(300, 3)))
    names = np.array(["cat", "dog", "emu"], dtype=object)
    model = TemperatureScaling(classes=names).fit(logits, names[y])
    model.save(tmp_path / "ts")
    manifest = json.loads((tmp_path / "ts" / "manifest.json").read_text())
    assert manifest["format"] == "reliacal-model"
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["reliacal_version"] == reliacal.__version__
    assert manifest["class"] == "reliacal.calibrators.temperature.TemperatureScaling"
    assert manifest["classes"] == ["cat", "dog", "emu"]
    assert manifest["estimator"]["params"]["objective"] == "nll"
    assert manifest["estimator"]["state"]["temperature_"] == model.temperature_
    loaded = reliacal.load(tmp_path / "ts")
    assert list(loaded.predict(logits[:20])) == list(model.predict(logits[:20]))


def test_unfitted_estimator_round_trips_its_parameters(tmp_path):
    model = MatrixScaling(reg_off_diagonal=0.5, reg_bias=2.0, input="probs")
    model.save(tmp_path / "m.zip")
    assert reliacal.load(tmp_path / "m.zip").get_params() == model.get_params()


def test_calibrated_classifier_of_reliacal_estimators(load_record, tmp_path, no_pickle):
    probs, labels = load_record("lenet-5-cifar-10")
    inner = TemperatureScaling(input="probs").fit(probs[:2000], labels[:2000])
    model = CalibratedClassifier(FrozenEstimator(inner), method="isotonic").fit(
        probs[2000:4000], labels[2000:4000]
    )
    model.save(tmp_path / "cc")
    assert_same_predictions(model, reliacal.load(tmp_path / "cc"), probs[EVALUATION])


def test_foreign_estimators_and_callables_are_refused(tmp_path):
    from sklearn.linear_model import LogisticRegression

    # A scikit-learn classifier alone is joblib's to save (inside CalibratedClassifier it is
    # pickled, and loads only when trusted: tests/persistence/test_hostile_files.py).
    with pytest.raises(ValueError, match="not a LogisticRegression.*joblib.dump"):
        save(LogisticRegression(), tmp_path / "lr")
    with pytest.raises(ValueError, match="random_state"):
        AutoCalibrator(random_state=np.random.RandomState(0)).save(tmp_path / "auto")
    model = TemperatureScaling()
    model.callback_ = print
    with pytest.raises(ValueError, match="callback_ is a builtin_function_or_method"):
        model.save(tmp_path / "ts")
    assert list(tmp_path.iterdir()) == []


def fitted_temperature(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=200)
    model = TemperatureScaling().fit(3.0 * (np.eye(3)[y] + rng.normal(size=(200, 3))), y)
    model.save(tmp_path / "ts")
    return tmp_path / "ts"


def test_tampered_arrays_are_refused(tmp_path):
    path = fitted_temperature(tmp_path)
    data = bytearray((path / "arrays.npz").read_bytes())
    data[-30] ^= 1
    (path / "arrays.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="modified after saving"):
        reliacal.load(path)


def test_a_newer_format_version_is_refused(tmp_path):
    path = fitted_temperature(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=f"format version {FORMAT_VERSION + 1}.*upgrade"):
        reliacal.load(path)


def test_a_manifest_naming_foreign_code_is_refused(tmp_path):
    path = fitted_temperature(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["estimator"]["$estimator"] = "os.system"
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="manifest.json was modified after saving"):
        reliacal.load(path)
    # Also when the edit recomputes the manifest's checksum, as the format documents it.
    body = {key: value for key, value in manifest.items() if key != "sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    manifest["sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="'os.system', which is not a class reliacal saves"):
        reliacal.load(path)


def test_pickle_files_are_not_read(tmp_path):
    import joblib

    joblib.dump(TemperatureScaling(), tmp_path / "model.joblib")
    with pytest.raises(ValueError, match="neither a folder nor a zip archive"):
        reliacal.load(tmp_path / "model.joblib")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as bundle:
        bundle.writestr("notes.txt", "hello")
    with pytest.raises(ValueError, match="manifest.json is missing"):
        reliacal.load(tmp_path / "other.zip")


# Backbones ------------------------------------------------------------------------------

N_CLASSES = 3
TIMM_SIZES = dict(img_size=8, patch_size=4, in_chans=1, embed_dim=16, depth=1, num_heads=2)


def tiny_vit(seed=0, **overrides):
    torch.manual_seed(seed)
    return VisionTransformer(**{**TIMM_SIZES, "num_classes": N_CLASSES, **overrides})


def image_data(n=36, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % N_CLASSES
    X = rng.normal(size=(n, 1, 8, 8)) * 0.5 + y[:, None, None, None]
    return X.astype(np.float32), y


# A random tiny ViT predicts the labels no better than chance: T runs to its bound.
@pytest.mark.filterwarnings("ignore:the NLL is smallest")
def test_calibrator_with_a_backbone_needs_the_same_weights(tmp_path, no_pickle):
    X, y = image_data()
    backbone = tiny_vit()
    model = TemperatureScaling(backbone=backbone, device="cpu").fit(X, y)
    model.save(tmp_path / "ts")
    with pytest.raises(ValueError, match="pass it, or a function that builds it"):
        reliacal.load(tmp_path / "ts")
    loaded = reliacal.load(tmp_path / "ts", backbone=lambda: tiny_vit())  # a factory
    assert_same_predictions(model, loaded, X)
    with pytest.raises(ValueError, match="weights differ"):
        reliacal.load(tmp_path / "ts", backbone=tiny_vit(seed=1))


def test_director_round_trips_given_the_backbone(tmp_path, no_pickle):
    X, y = image_data()
    teacher = tiny_vit(depth=2)
    model = DiffusionReconfigurer(
        copy.deepcopy(teacher),
        max_epochs=1,
        batch_size=12,
        warmup_epochs=0,
        n_draws=3,
        device="cpu",
        random_state=0,
    ).fit(X, y)
    model.save(tmp_path / "director")
    loaded = reliacal.load(tmp_path / "director", backbone=teacher)
    assert_same_predictions(model, loaded, X)
    assert loaded.n_reconfigured_ == model.n_reconfigured_
    with pytest.raises(ValueError, match="does not fit the one rebuilt"):
        reliacal.load(tmp_path / "director", backbone=tiny_vit(depth=3))


def test_module_level_save_writes_a_folder_without_extension(tmp_path):
    path = save(TemperatureScaling(), tmp_path / "plain")
    assert sorted(p.name for p in path.iterdir()) == ["arrays.npz", "manifest.json"]
    assert save(TemperatureScaling(), tmp_path / "forced", archive=True).is_file()


@pytest.mark.parametrize(
    "estimator",
    [TemperatureScaling, AdaptiveTS, CalibratedClassifier, CalAttnFinetuner, DiffusionReconfigurer],
    ids=lambda cls: cls.__name__,
)
def test_every_estimator_saves_through_the_one_save_method(estimator):
    from reliacal.persistence._mixin import SaveMixin

    assert estimator.save is SaveMixin.save


def test_saving_and_loading_a_numpy_calibrator_leaves_torch_unloaded(tmp_path, torch_modules_after):
    loaded = torch_modules_after(
        f"""
        import numpy as np
        import reliacal
        from reliacal.calibrators import IsotonicCalibration

        rng = np.random.default_rng(0)
        logits = rng.normal(size=(200, 3)) * 3.0
        labels = logits.argmax(axis=1)
        model = IsotonicCalibration().fit(logits, labels)
        model.save({str(tmp_path / "iso.zip")!r})
        again = reliacal.load({str(tmp_path / "iso.zip")!r})
        assert np.array_equal(again.predict_proba(logits), model.predict_proba(logits))
        """
    )
    assert loaded == []


def test_a_frozen_reliacal_estimator_is_stored_as_data(tmp_path, no_pickle):
    # FrozenEstimator is scikit-learn's way to say "prefit"; around a reliacal estimator it
    # holds nothing that needs pickle.
    logits, labels = make_logits(600, 3, random_state=0)
    inner = TemperatureScaling().fit(logits[:200], labels[:200])
    model = CalibratedClassifier(FrozenEstimator(inner), method="isotonic").fit(
        logits[200:400], labels[200:400]
    )
    model.save(tmp_path / "frozen")
    loaded = reliacal.load(tmp_path / "frozen")
    assert type(loaded.estimator) is FrozenEstimator
    assert loaded.estimator.estimator.temperature_ == inner.temperature_
    np.testing.assert_array_equal(loaded.predict_proba(logits), model.predict_proba(logits))
