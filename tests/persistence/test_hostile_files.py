"""reliacal.load on files written to mislead it, and save on paths that must not be written.

Each test plays a file that a careful loader refuses with a ``ValueError`` (or a
path that ``save`` must leave alone). A hand edit is simulated by rewriting the
manifest and recomputing its checksums as the format documents them (see
:mod:`reliacal.persistence`), so the refusal tested is that of the check named,
not of a checksum.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator

import reliacal
from reliacal import CalibratedClassifier
from reliacal.calibrators import (
    CenteredIsotonicCalibration,
    EnsembleTemperatureScaling,
    HistogramBinning,
    IsotonicCalibration,
    MatrixScaling,
    QuadraticScaling,
    SplineCalibration,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    TemperatureScaling,
    VectorScaling,
    VennAbersCalibration,
)
from reliacal.datasets import make_logits
from reliacal.persistence import save

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MANIFEST, ARRAYS = "manifest.json", "arrays.npz"


# The format's checksums, as its documentation spells them ----------------------------------


def manifest_checksum(manifest: dict) -> str:
    body = {key: value for key, value in manifest.items() if key != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def write_manifest(folder: Path, manifest: dict) -> None:
    """Write ``manifest`` with its checksum recomputed (a hand edit that covers its tracks)."""
    manifest = {**manifest, "sha256": manifest_checksum(manifest)}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def edit_manifest(folder: Path, change) -> None:
    manifest = read_manifest(folder)
    change(manifest)
    write_manifest(folder, manifest)


def write_arrays(folder: Path, data: bytes, listed=None) -> None:
    """Replace ``arrays.npz`` by ``data`` and record its SHA-256 (and, if given, its arrays)."""
    (folder / ARRAYS).write_bytes(data)
    manifest = read_manifest(folder)
    record = manifest.setdefault("files", {}).setdefault(ARRAYS, {})
    record["sha256"] = hashlib.sha256(data).hexdigest()
    if listed is not None:
        record["arrays"] = listed
    write_manifest(folder, manifest)


def npz_bytes(arrays: dict[str, np.ndarray], compressed: dict[str, bytes] | None = None) -> bytes:
    """An npz of ``arrays`` (stored, as np.savez writes them) plus raw deflated members."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    if compressed:
        with zipfile.ZipFile(buffer, "a", compression=zipfile.ZIP_DEFLATED) as bundle:
            for name, member in compressed.items():
                bundle.writestr(name, member)
    return buffer.getvalue()


def stored_arrays(folder: Path) -> dict[str, np.ndarray]:
    with np.load(folder / ARRAYS, allow_pickle=False) as stored:
        return {key: stored[key] for key in stored.files}


def replace_array(folder: Path, attribute: str, value: np.ndarray) -> None:
    """Give the fitted ``attribute`` (an ``$array``) another array, checksums recomputed."""
    key = read_manifest(folder)["estimator"]["state"][attribute]["$array"]
    arrays = stored_arrays(folder)
    arrays[key] = np.asarray(value)
    write_arrays(folder, npz_bytes(arrays))


def npy_member(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def logits_and_labels(n=200, k=3, seed=0):
    return make_logits(n, k, random_state=seed)


def saved(model, folder: Path) -> Path:
    model.save(folder)
    return folder


@pytest.fixture
def ts_folder(tmp_path):
    logits, y = logits_and_labels()
    return saved(TemperatureScaling().fit(logits, y), tmp_path / "ts")


# 1. Machine-local parameters -----------------------------------------------------------------


def test_a_cache_folder_is_neither_saved_nor_restored(tmp_path):
    logits, y = logits_and_labels()
    cache = tmp_path / "cache"
    model = TemperatureScaling(memory=str(cache)).fit(logits, y)
    folder = saved(model, tmp_path / "ts")
    assert "memory" not in read_manifest(folder)["estimator"]["params"]
    assert str(cache) not in (folder / MANIFEST).read_text()
    assert reliacal.load(folder).memory is None


def test_a_manifest_that_sets_a_cache_folder_is_refused(ts_folder, tmp_path):
    # A crafted cache there would be unpickled by the victim's predict_proba.
    crafted = tmp_path / "crafted-cache"
    crafted.mkdir()
    edit_manifest(ts_folder, lambda m: m["estimator"]["params"].update(memory=str(crafted)))
    with pytest.raises(ValueError, match="memory.*never restore"):
        reliacal.load(ts_folder)


def test_a_checkpoint_folder_is_neither_saved_nor_restored(tmp_path):
    from reliacal.finetune import CalAttnFinetuner

    model = CalAttnFinetuner("vit_tiny_patch16_224", checkpoint_dir=str(tmp_path / "ckpt"))
    folder = saved(model, tmp_path / "calattn")
    params = read_manifest(folder)["estimator"]["params"]
    assert "checkpoint_dir" not in params and params["backbone"] is not None
    edit_manifest(
        folder, lambda m: m["estimator"]["params"].update(checkpoint_dir=str(tmp_path / "x"))
    )
    with pytest.raises(ValueError, match="checkpoint_dir.*never restore"):
        reliacal.load(folder)


# 2. Integrity and validation of the manifest ------------------------------------------------


def test_one_changed_digit_of_the_manifest_is_refused(ts_folder):
    text = (ts_folder / MANIFEST).read_text()
    written = json.dumps(json.loads(text)["estimator"]["state"]["temperature_"])
    digits = [i for i, c in enumerate(written) if c.isdigit() and "e" not in written[:i]]
    # The last digit that changes the number: a 17th significant digit may not.
    for digit in reversed(digits):
        changed = written[:digit] + str((int(written[digit]) + 1) % 10) + written[digit + 1 :]
        if float(changed) != float(written):
            break
    assert written in text and float(changed) != float(written)
    (ts_folder / MANIFEST).write_text(text.replace(written, changed))
    with pytest.raises(ValueError, match="manifest.json was modified after saving"):
        reliacal.load(ts_folder)


@pytest.mark.parametrize("value", [{"$float": "nan"}, 0.0, -1.5, "warm", [2.0], True], ids=repr)
def test_a_temperature_no_fit_gives_is_refused(ts_folder, value):
    edit_manifest(ts_folder, lambda m: m["estimator"]["state"].update(temperature_=value))
    with pytest.raises(ValueError, match="temperature_"):
        reliacal.load(ts_folder)


def fitted_folder(tmp_path, model, n_classes=3):
    logits, y = logits_and_labels(k=n_classes)
    return saved(model.fit(logits, y), tmp_path / "model")


@pytest.mark.parametrize(
    "model, attribute, value",
    [
        (VectorScaling(), "coef_", np.ones(4)),  # K + 1 entries
        (VectorScaling(), "intercept_", np.array([0.0, np.inf, 0.0])),
        (MatrixScaling(), "coef_", np.full((3, 3), np.nan)),
        (MatrixScaling(), "coef_", np.ones((3, 2))),
        (EnsembleTemperatureScaling(), "weights_", np.array([1.5, -0.5, 0.0])),
        (TemperatureScaling(), "classes_", np.array([0, 0, 1])),
    ],
    ids=["vs-shape", "vs-inf", "ms-nan", "ms-shape", "ets-negative", "duplicate-classes"],
)
def test_fitted_arrays_no_fit_gives_are_refused(tmp_path, model, attribute, value):
    folder = fitted_folder(tmp_path, model)
    replace_array(folder, attribute, value)
    with pytest.raises(ValueError, match=attribute):
        reliacal.load(folder)


def test_lookup_tables_no_fit_gives_are_refused(tmp_path):
    isotonic = fitted_folder(tmp_path / "iso", IsotonicCalibration())
    manifest = read_manifest(isotonic)
    key = manifest["estimator"]["state"]["values_"][0]["$array"]
    arrays = stored_arrays(isotonic)
    arrays[key] = arrays[key] + 2.0  # probabilities above 1
    write_arrays(isotonic, npz_bytes(arrays))
    with pytest.raises(ValueError, match="values_"):
        reliacal.load(isotonic)

    binning = fitted_folder(tmp_path / "hist", HistogramBinning())
    key = read_manifest(binning)["estimator"]["state"]["edges_"][0]["$array"]
    arrays = stored_arrays(binning)
    arrays[key] = arrays[key][::-1].copy()  # edges out of order
    write_arrays(binning, npz_bytes(arrays))
    with pytest.raises(ValueError, match="edges_"):
        reliacal.load(binning)


def change_state(folder: Path, path: tuple, change) -> None:
    """Replace the fitted value at ``path`` (attribute, then list indices) by ``change(value)``.

    An ``$array`` entry gets the array ``change(array)`` in ``arrays.npz``; any other entry
    is replaced in the manifest. Checksums are recomputed.
    """
    manifest = read_manifest(folder)
    parent, key = manifest["estimator"]["state"], path[0]
    for index in path[1:]:
        parent, key = parent[key], index
    entry = parent[key]
    if isinstance(entry, dict) and "$array" in entry:
        arrays = stored_arrays(folder)
        arrays[entry["$array"]] = np.asarray(change(arrays[entry["$array"]]))
        write_arrays(folder, npz_bytes(arrays))
    else:
        parent[key] = change(entry)
        write_manifest(folder, manifest)


def _unsorted(array):
    return array[::-1].copy()


def _longer(array):
    return np.append(array, array[-1:])


# (calibrator, path to the fitted value, change): each gives a state that no fit gives.
RANKED_CORRUPTIONS = {
    "svs-temperature-negative": (StructuredVectorScaling(), ("temperature_",), lambda v: -1.0),
    "svs-temperature-nan": (
        StructuredVectorScaling(),
        ("temperature_",),
        lambda v: {"$float": "nan"},
    ),
    "svs-coef-shape": (StructuredVectorScaling(), ("coef_",), _longer),
    "sms-mixture-one": (StructuredMatrixScaling(), ("mixture_weight_",), lambda v: 1.0),
    "sms-mixture-zero": (StructuredMatrixScaling(), ("mixture_weight_",), lambda v: 0.0),
    "sms-penalty-negative": (StructuredMatrixScaling(), ("penalty_weights_",), lambda a: -a),
    "sms-coef-nan": (StructuredMatrixScaling(), ("coef_",), lambda a: np.full_like(a, np.nan)),
    "quadratic-coef-shape": (QuadraticScaling(), ("coef_",), lambda a: a[:, 0].copy()),
    "quadratic-intercept-inf": (
        QuadraticScaling(),
        ("intercept_",),
        lambda a: np.full_like(a, np.inf),
    ),
    "venn-abers-knots-unsorted": (VennAbersCalibration(), ("knots_", 0, 1), _unsorted),
    "venn-abers-knots-nan": (
        VennAbersCalibration(),
        ("knots_", 0, 0),
        lambda a: np.full_like(a, np.nan),
    ),
    "venn-abers-upper-length": (VennAbersCalibration(), ("upper_", 0, 2), _longer),
    "venn-abers-upper-zero": (VennAbersCalibration(), ("upper_", 0, 0), np.zeros_like),
    "venn-abers-lower-one": (VennAbersCalibration(), ("lower_", 0, 1), np.ones_like),
    "venn-abers-folds": (
        VennAbersCalibration(),
        ("lower_",),
        lambda folds: folds + folds,
    ),
    "cir-knots-unsorted": (CenteredIsotonicCalibration(), ("knots_", 0), _unsorted),
    "cir-values-above-one": (CenteredIsotonicCalibration(), ("values_", 2), lambda a: a + 2.0),
    "cir-values-length": (CenteredIsotonicCalibration(), ("values_", 1), _longer),
    "spline-knots-repeated": (SplineCalibration(), ("knots_", 0), _longer),
    "spline-coef-length": (SplineCalibration(), ("coef_", 2), _longer),
    "spline-coef-inf": (SplineCalibration(), ("coef_", 1), lambda a: np.full_like(a, np.inf)),
    "spline-maps": (SplineCalibration(), ("coef_",), lambda maps: maps[:2]),
    "spline-reg-param-negative": (SplineCalibration(), ("reg_param_",), lambda a: a - 10.0),
}


@pytest.mark.parametrize("case", list(RANKED_CORRUPTIONS))
def test_ranked_calibrators_refuse_a_state_no_fit_gives(tmp_path, case):
    model, path, change = RANKED_CORRUPTIONS[case]
    folder = fitted_folder(tmp_path, clone(model))
    reliacal.load(folder)  # the file as saved loads
    change_state(folder, path, change)
    with pytest.raises(ValueError, match=f"{path[0]}.*refusing to load it"):
        reliacal.load(folder)


@pytest.mark.parametrize(
    "where, name",
    [
        ("state", "__dict__"),
        ("state", "__class__"),
        ("state", "predict_proba"),
        ("state", "_private"),
        ("params", "__dict__"),
        ("params", "not_a_parameter"),
    ],
)
def test_the_manifest_cannot_set_arbitrary_attributes(ts_folder, where, name):
    value = {"$dict": {"temperature_": 5.0}} if name == "__dict__" else 1.0
    edit_manifest(ts_folder, lambda m: m["estimator"][where].update({name: value}))
    with pytest.raises(ValueError, match=name):
        reliacal.load(ts_folder)


# 3. save never overwrites by surprise, never follows a link ---------------------------------


def fitted_temperature():
    logits, y = logits_and_labels()
    return TemperatureScaling().fit(logits, y), logits


def test_save_refuses_to_replace_an_existing_file(tmp_path):
    model, logits = fitted_temperature()
    data_file = tmp_path / "calibration.npz"
    np.savez(data_file, logits=logits)
    before = data_file.read_bytes()
    with pytest.raises(ValueError, match="exists.*overwrite=True"):
        model.save(data_file)
    assert data_file.read_bytes() == before
    model.save(data_file, overwrite=True)
    assert reliacal.load(data_file).temperature_ == model.temperature_


def test_save_replaces_a_saved_model_folder_only_when_asked(tmp_path):
    model, logits = fitted_temperature()
    folder = saved(model, tmp_path / "ts")
    with pytest.raises(ValueError, match="exists.*overwrite=True"):
        TemperatureScaling().save(folder)
    TemperatureScaling(objective="ece").save(folder, overwrite=True)
    assert reliacal.load(folder).objective == "ece"
    assert sorted(p.name for p in folder.iterdir()) == [ARRAYS, MANIFEST]


def test_save_never_replaces_a_folder_of_other_files(tmp_path):
    model, _ = fitted_temperature()
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="other files"):
        model.save(project, overwrite=True)
    assert sorted(p.name for p in project.iterdir()) == ["notes.txt"]


def test_save_never_writes_through_a_symbolic_link(tmp_path):
    model, _ = fitted_temperature()
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"precious")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / ARRAYS).symlink_to(victim)
    (folder / MANIFEST).write_text("{}")
    for overwrite in (False, True):
        with pytest.raises(ValueError):
            model.save(folder, overwrite=overwrite)
    link = tmp_path / "link.zip"
    link.symlink_to(victim)
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="symbolic link"):
            model.save(link, overwrite=overwrite)
    assert victim.read_bytes() == b"precious"


@pytest.mark.parametrize("path", ["", ".", "..", "./"])
def test_save_refuses_the_current_folder(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("mine")
    model, _ = fitted_temperature()
    for overwrite in (False, True):
        with pytest.raises(ValueError):
            model.save(path, overwrite=overwrite)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_a_failed_save_leaves_nothing_behind(tmp_path):
    model, _ = fitted_temperature()
    model.callback_ = print  # cannot be saved
    for target in (tmp_path / "folder", tmp_path / "model.zip"):
        with pytest.raises(ValueError, match="callback_"):
            model.save(target)
    assert list(tmp_path.iterdir()) == []


# 4. Sizes, members and versions --------------------------------------------------------------


def assert_refused_within_memory(path, match):
    """``load(path)`` raises a ValueError matching ``match`` having allocated under 8 MiB.

    The members of these files inflate to 64 MiB: staying under 8 MiB shows that they
    were refused before being read.
    """
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=match):
            reliacal.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20


def test_an_unreferenced_array_is_refused_before_it_is_read(ts_folder):
    # A deflated member that inflates to 64 MiB of zeros, behind a matching SHA-256.
    bomb = npy_member(np.zeros(8 * 2**20))
    arrays = stored_arrays(ts_folder)
    write_arrays(ts_folder, npz_bytes(arrays, compressed={"a99.npy": bomb}))
    assert_refused_within_memory(ts_folder, "a99")


def test_a_compressed_array_is_refused_before_it_is_read(ts_folder):
    arrays = stored_arrays(ts_folder)
    listed = read_manifest(ts_folder)["files"][ARRAYS].get("arrays")
    key = next(iter(arrays))
    inflated = {f"{key}.npy": npy_member(np.zeros(8 * 2**20))}
    del arrays[key]
    write_arrays(ts_folder, npz_bytes(arrays, compressed=inflated), listed=listed)
    with pytest.raises(ValueError, match="compressed"):
        reliacal.load(ts_folder)


def test_an_archive_whose_members_inflate_is_refused_before_reading(ts_folder, tmp_path):
    manifest = (ts_folder / MANIFEST).read_bytes()
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr(MANIFEST, manifest)
        bundle.writestr(ARRAYS, b"\0" * 64 * 2**20)
    assert archive.stat().st_size < 2**20
    assert_refused_within_memory(archive, "compressed")


def test_an_archive_with_two_manifests_is_refused(ts_folder, tmp_path):
    archive = tmp_path / "two.zip"
    honest = (ts_folder / MANIFEST).read_bytes()
    other = json.loads(honest)
    other["estimator"]["state"]["temperature_"] = 50.0
    other = {**other, "sha256": manifest_checksum(other)}
    with (
        pytest.warns(UserWarning, match="Duplicate name"),
        zipfile.ZipFile(archive, "w") as bundle,
    ):
        bundle.writestr(MANIFEST, honest)
        bundle.writestr(ARRAYS, (ts_folder / ARRAYS).read_bytes())
        bundle.writestr(MANIFEST, json.dumps(other))
    with pytest.raises(ValueError, match="two members named manifest.json"):
        reliacal.load(archive)


def test_an_archive_with_a_member_it_does_not_name_is_refused(ts_folder, tmp_path):
    archive = tmp_path / "extra.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr(MANIFEST, (ts_folder / MANIFEST).read_bytes())
        bundle.writestr(ARRAYS, (ts_folder / ARRAYS).read_bytes())
        bundle.writestr("payload.bin", b"x" * 100)
    with pytest.raises(ValueError, match="payload.bin"):
        reliacal.load(archive)


@pytest.mark.parametrize("version", [0, -1, True, 1.0, "1", None])
def test_format_versions_below_the_first_are_refused(ts_folder, version):
    edit_manifest(ts_folder, lambda m: m.update(format_version=version))
    with pytest.raises(ValueError, match="format version"):
        reliacal.load(ts_folder)


# 5. Only reliacal's own savable classes are built ------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "reliacal.calibrators.scaling.GridSearchCV",
        "reliacal.wrap.FrozenEstimator",
        "reliacal.calibrators._base.BaseEstimator",
        "reliacal.calibrators._base.BaseCalibrator.fit",
        "reliacal.__main__.main",
    ],
)
def test_classes_reached_through_reliacal_modules_are_not_built(ts_folder, path):
    def change(manifest):
        manifest["class"] = path
        manifest["estimator"]["$estimator"] = path
        manifest["estimator"]["params"] = {}
        manifest["estimator"]["state"] = {}

    edit_manifest(ts_folder, change)
    with pytest.raises(ValueError, match="not a class reliacal saves"):
        reliacal.load(ts_folder)


def test_named_tuples_that_did_not_opt_in_are_not_built(ts_folder):
    tuple_value = {
        "$namedtuple": "reliacal.metrics._calibration_tests.SpiegelhalterResult",
        "fields": {"statistic": 1.0, "pvalue": 0.5},
    }
    edit_manifest(ts_folder, lambda m: m["estimator"]["state"].update(extra_=tuple_value))
    with pytest.raises(ValueError, match="not a class reliacal saves"):
        reliacal.load(ts_folder)


# 23. Malformed manifests: each a ValueError saying what is wrong ----------------------------


# Each malformed manifest, and what its error must say: the entry that is wrong.
MALFORMED = {
    "no estimator": (lambda m: m.pop("estimator"), r"missing entries \['estimator'\]"),
    "estimator not an object": (
        lambda m: m.update(estimator=[]),
        "estimator must be a JSON object",
    ),
    "params not an object": (
        lambda m: m["estimator"].update(params=5),
        "params must be a JSON object, got 5",
    ),
    "unknown float name": (
        lambda m: m["estimator"]["state"].update(n_iter_={"$float": "zz"}),
        "unknown float 'zz'",
    ),
    "unknown tag": (
        lambda m: m["estimator"]["state"].update(n_iter_={"$unknown": 1}),
        r"unknown tag '\$unknown'",
    ),
    "array key not a string": (
        lambda m: m["estimator"]["state"].update(n_iter_={"$array": [1]}),
        r"array \[1\] that arrays.npz lacks",
    ),
    "object array shape": (
        lambda m: m["estimator"]["state"].update(
            n_iter_={"$object_array": [1, 2, 3], "shape": [10**12]}
        ),
        "object array whose shape is not its length",
    ),
    "fields not an object": (
        lambda m: m["estimator"]["state"].update(
            members_={"$namedtuple": "reliacal.calibrators.adaptive.AdaptiveTSMember", "fields": 3}
        ),
        "named tuple fields must be a JSON object, got 3",
    ),
    "files not an object": (
        lambda m: m.update(files="arrays.npz"),
        "'files' entry is malformed",
    ),
}


@pytest.mark.parametrize(("change", "message"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_manifests_are_value_errors_that_name_the_entry(ts_folder, change, message):
    edit_manifest(ts_folder, change)
    with pytest.raises(ValueError, match=message):
        reliacal.load(ts_folder)


def test_a_deeply_nested_manifest_is_a_value_error(ts_folder):
    depth = 100_000
    (ts_folder / MANIFEST).write_text("[" * depth + "]" * depth)
    with pytest.raises(ValueError, match="manifest.json"):
        reliacal.load(ts_folder)


def test_a_corrupt_archive_is_a_value_error(ts_folder, tmp_path):
    archive = tmp_path / "ts.zip"
    reliacal.load(ts_folder).save(archive)
    data = bytearray(archive.read_bytes())
    data[40:200] = b"\xff" * 160  # inside the first member: headers and data broken
    archive.write_bytes(bytes(data))
    with pytest.raises(ValueError):
        reliacal.load(archive)


def test_a_huge_declared_array_shape_is_a_value_error(ts_folder):
    arrays = stored_arrays(ts_folder)
    key = next(iter(arrays))
    # A header that declares 10**12 float64 values, and no data behind it.
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
    )
    huge = header.getvalue()
    body = npz_bytes({k: v for k, v in arrays.items() if k != key})
    buffer = io.BytesIO(body)
    with zipfile.ZipFile(buffer, "a") as bundle:
        bundle.writestr(f"{key}.npy", huge)
    write_arrays(ts_folder, buffer.getvalue())
    with pytest.raises(ValueError, match=key):
        reliacal.load(ts_folder)


# 26. A link in a saved folder is not followed, and no error prints a hash ------------------


def test_a_linked_array_file_is_refused_without_printing_its_hash(ts_folder, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"the user's private key")
    (ts_folder / ARRAYS).unlink()
    (ts_folder / ARRAYS).symlink_to(secret)
    with pytest.raises(ValueError, match="symbolic link") as error:
        reliacal.load(ts_folder)
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    assert not any(digest[i : i + 6] in str(error.value) for i in range(0, 58))


def test_a_changed_array_file_error_prints_no_hash(ts_folder):
    data = bytearray((ts_folder / ARRAYS).read_bytes())
    data[-30] ^= 1
    (ts_folder / ARRAYS).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="modified after saving") as error:
        reliacal.load(ts_folder)
    for digest in (
        hashlib.sha256(bytes(data)).hexdigest(),
        read_manifest(ts_folder)["files"][ARRAYS]["sha256"],
    ):
        assert digest[:8] not in str(error.value)


# 33.7. CalibratedClassifier around a scikit-learn classifier ------------------------------


def sklearn_data():
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    return X, y


@pytest.mark.parametrize("cv", [3, "frozen"])
def test_a_scikit_learn_classifier_saves_and_loads_only_when_trusted(tmp_path, cv):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = sklearn_data()
    for inner in (
        make_pipeline(StandardScaler(), LogisticRegression()),
        RandomForestClassifier(n_estimators=10, random_state=0),
    ):
        named = type(inner).__name__
        if cv == "frozen":
            inner = FrozenEstimator(inner.fit(X[:300], y[:300]))
        model = CalibratedClassifier(inner, method="isotonic", cv=None if cv == "frozen" else cv)
        model.fit(X[300:], y[300:])
        folder = tmp_path / f"{named}-{cv}"
        model.save(folder)
        with pytest.raises(ValueError, match="trusted=True") as error:
            reliacal.load(folder)
        # The pickled class is named: the classifier, or the FrozenEstimator around it.
        assert (named if cv == 3 else "FrozenEstimator") in str(error.value)
        loaded = reliacal.load(folder, trusted=True)
        np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
        assert type(loaded.calibrated_classifiers_[0][1]) is type(
            model.calibrated_classifiers_[0][1]
        )


def test_trusted_does_not_lift_the_other_checks(tmp_path):
    from sklearn.linear_model import LogisticRegression

    X, y = sklearn_data()
    model = CalibratedClassifier(LogisticRegression(max_iter=5000), cv=2).fit(X, y)
    folder = saved(model, tmp_path / "cc")
    data = bytearray((folder / ARRAYS).read_bytes())
    data[-30] ^= 1
    (folder / ARRAYS).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="modified after saving"):
        reliacal.load(folder, trusted=True)


def test_a_reliacal_only_model_needs_no_trust(tmp_path, no_pickle):
    logits, y = logits_and_labels()
    inner = TemperatureScaling().fit(logits[:100], y[:100])
    model = CalibratedClassifier(FrozenEstimator(inner), method="isotonic").fit(
        logits[100:], y[100:]
    )
    folder = saved(model, tmp_path / "cc")
    np.testing.assert_array_equal(
        reliacal.load(folder).predict_proba(logits), model.predict_proba(logits)
    )


def test_the_module_level_save_takes_overwrite(tmp_path):
    model, _ = fitted_temperature()
    target = save(model, tmp_path / "m.zip")
    with pytest.raises(ValueError, match="exists"):
        save(model, target)
    assert save(model, target, overwrite=True) == target
    assert reliacal.load(target).temperature_ == model.temperature_
    # A torch network in a parameter is still refused, with its name, and nothing is written.
    with pytest.raises(ValueError, match="estimator"):
        CalibratedClassifier(torch.nn.Linear(2, 2), cv="prefit").save(tmp_path / "net")
    assert not os.path.exists(tmp_path / "net")


def test_network_sizes_that_do_not_match_the_weights_are_refused_before_allocating(tmp_path):
    from reliacal.calibrators import AdaptiveTS

    logits, y = logits_and_labels()
    model = AdaptiveTS(hidden_layer_sizes=(8,), temperature_hidden_sizes=(4,), max_epochs=1)
    folder = saved(model.fit(logits, y), tmp_path / "adaptive")

    def change(manifest):
        member = manifest["estimator"]["state"]["members_"][0]["fields"]["network"]
        # 4 TB of weights, were the network built for real before its weights are checked.
        member["config"]["$dict"]["hidden_layer_sizes"] = [10**6, 10**6]

    edit_manifest(folder, change)
    with pytest.raises(ValueError, match="does not fit the one rebuilt"):
        reliacal.load(folder)
