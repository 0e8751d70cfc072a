"""Checkpoint folders: verified, atomic files and clear errors for damaged or unusable ones."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn
from torch.utils.data import TensorDataset

import reliacal.training._checkpoint as checkpoint_module
from reliacal.finetune.calattn import CalAttnFinetuner
from reliacal.training import CheckpointError, fit_module
from reliacal.training._checkpoint import save_checkpoint
from reliacal.training._loop import CHECKPOINT_ENTRIES

REMEDY = "delete the folder"


class CountingLoss:
    """Cross-entropy that counts its calls: zero calls means no training happened."""

    def __init__(self):
        self.calls = 0

    def __call__(self, logits, y):
        self.calls += 1
        return F.cross_entropy(logits, y)


@pytest.fixture
def run_in(blobs, quick):
    """``run_in(checkpoint_dir, model=None, loss=F.cross_entropy, data=None, **options)``:
    two epochs that checkpoint.

    The model defaults to a fresh ``nn.Linear(2, 2)``, the data to ``blobs(32)``;
    ``options`` go to ``fit_module``. The trained model is returned.
    """

    def run(checkpoint_dir, model=None, loss=F.cross_entropy, data=None, **options):
        model = nn.Linear(2, 2) if model is None else model
        config = quick(max_epochs=2, batch_size=8, checkpoint_dir=str(checkpoint_dir))
        fit_module(model, loss, blobs(32) if data is None else data, config=config, **options)
        return model

    return run


@pytest.fixture
def train(run_in):
    """``train(checkpoint_dir)``: a seeded run from scratch; returns the trained model."""

    def train(checkpoint_dir):
        torch.manual_seed(0)
        return run_in(checkpoint_dir)

    return train


@pytest.fixture
def finished_run(tmp_path, train):
    """A folder holding the checkpoint of a finished two-epoch run, and its weights."""
    folder = tmp_path / "run"
    model = train(folder)
    return folder, model


# The file -------------------------------------------------------------------------------


def test_checkpoint_is_a_torch_archive_whose_zip_comment_is_its_sha256(finished_run):
    folder, _ = finished_run
    path = folder / "checkpoint.pt"
    data = path.read_bytes()
    comment = zipfile.ZipFile(path).comment  # the standard library reads it as a valid zip
    assert comment.startswith(b"reliacal-sha256:")
    expected = hashlib.sha256(data[: len(data) - len(comment)]).hexdigest()
    assert comment == b"reliacal-sha256:" + expected.encode()
    # Still an ordinary checkpoint for torch, holding what a resumed run reads.
    state = torch.load(path, weights_only=True)
    assert sorted(state) == sorted(CHECKPOINT_ENTRIES)  # what Run._load checks for


def test_intact_checkpoint_resumes_to_the_same_weights(finished_run, run_in):
    folder, trained = finished_run
    again = run_in(folder, nn.Linear(2, 2))  # other weights: the checkpoint must win
    for name, value in trained.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], value, rtol=0, atol=0)


# What a run was written for ------------------------------------------------------------------


def _other_data(blobs, how):
    data = blobs(32)
    x, y = data.tensors
    if how == "values":
        return TensorDataset(x + 0.5, y)
    if how == "labels":
        return TensorDataset(x, y[torch.randperm(32, generator=torch.Generator().manual_seed(1))])
    return TensorDataset(x.flip(0), y.flip(0))  # the same rows in another order


@pytest.mark.parametrize("how", ["values", "labels", "order"])
def test_a_finished_folder_refuses_other_training_data_of_the_same_size(
    finished_run, run_in, blobs, how
):
    folder, _ = finished_run
    loss = CountingLoss()
    with pytest.raises(ValueError, match="written for other training data") as caught:
        run_in(folder, data=_other_data(blobs, how), loss=loss)
    assert loss.calls == 0 and "new checkpoint_dir" in str(caught.value)


def test_a_finished_folder_refuses_another_architecture_naming_the_difference(finished_run, run_in):
    folder, _ = finished_run
    other = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2))
    with pytest.raises(ValueError, match="written for another network") as caught:
        run_in(folder, model=other)
    message = str(caught.value)
    assert "0.weight" in message and "weight" in message  # what is new, what is missing
    assert not isinstance(caught.value, RuntimeError)


def test_a_finished_folder_refuses_a_run_that_starts_from_other_weights(tmp_path, run_in):
    folder = tmp_path / "run"
    run_in(folder, fingerprint="backbone A")
    with pytest.raises(ValueError, match="started from other weights"):
        run_in(folder, fingerprint="backbone B")
    run_in(folder, fingerprint="backbone A")  # the same start resumes


def test_data_that_cannot_be_fingerprinted_warns_and_still_trains(tmp_path, run_in, blobs):
    class Unpicklable(torch.utils.data.Dataset):  # a local class: pickle cannot name it
        def __init__(self):
            self.data = blobs(32)

        def __len__(self):
            return 32

        def __getitem__(self, index):
            return self.data[index]

    with pytest.warns(UserWarning, match="cannot be fingerprinted") as caught:
        run_in(tmp_path / "run", data=Unpicklable())
    assert caught[0].filename == __file__
    assert (tmp_path / "run" / "checkpoint.pt").is_file()


def test_write_syncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to tell a folder's descriptor from a file's")
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor):
        kind = "folder" if os.path.isdir(f"/proc/self/fd/{descriptor}") else "file"
        events.append(f"fsync {kind}")
        real_fsync(descriptor)

    def replace(source, target):
        events.append("replace")
        real_replace(source, target)

    monkeypatch.setattr(checkpoint_module.os, "fsync", fsync)
    monkeypatch.setattr(checkpoint_module.os, "replace", replace)
    save_checkpoint(tmp_path / "checkpoint.pt", {"a": torch.ones(2)})
    assert events == ["fsync file", "replace", "fsync folder"]


def _full_disk(obj, file):
    file.write(b"PK partial")
    raise OSError(28, "No space left on device")


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"a": torch.ones(2)})
    before = path.read_bytes()
    monkeypatch.setattr(checkpoint_module.torch, "save", _full_disk)
    with pytest.raises(CheckpointError, match="No space left"):
        save_checkpoint(path, {"a": torch.zeros(2)})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_failed_write_during_training_names_the_file(tmp_path, monkeypatch, train):
    monkeypatch.setattr(checkpoint_module.torch, "save", _full_disk)
    folder = tmp_path / "run"
    with pytest.raises(CheckpointError, match="could not write the checkpoint") as caught:
        train(folder)
    assert str(folder / "checkpoint.pt") in str(caught.value)


# Damaged files ----------------------------------------------------------------------------


def _flip(position):
    def damage(data: bytes) -> bytes:
        index = int(position * (len(data) - 1))
        return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]

    return damage


DAMAGE = {
    "truncated": (lambda data: data[: len(data) // 2], "truncated"),
    "empty": (lambda data: b"", "empty"),
    "garbage": (lambda data: np.random.default_rng(0).bytes(len(data)), "truncated"),
    "flipped byte in the tensors": (_flip(0.5), "damaged"),
    "flipped byte in the header": (_flip(0.001), "damaged"),
    "flipped byte in the zip directory": (_flip(0.9), "damaged"),
    "flipped byte in the recorded hash": (_flip(1.0), "damaged"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_damaged_checkpoint_is_refused_naming_the_file_and_the_fix(finished_run, case, run_in):
    folder, _ = finished_run
    damage, what = DAMAGE[case]
    path = folder / "checkpoint.pt"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=what) as caught:
        run_in(folder)
    message = str(caught.value)
    assert str(path) in message and REMEDY in message and "checkpoint_dir elsewhere" in message
    assert "weights_only" not in message


def test_every_single_flipped_byte_is_refused(finished_run, run_in):
    # The case: flips that torch.load accepted, some with different weights.
    folder, _ = finished_run
    path = folder / "checkpoint.pt"
    original = path.read_bytes()
    for index in np.linspace(0, len(original) - 1, 25).astype(int):
        path.write_bytes(original[:index] + bytes([original[index] ^ 0x80]) + original[index + 1 :])
        with pytest.raises(CheckpointError):
            run_in(folder)


def test_checkpoint_missing_an_entry_names_it(finished_run, run_in):
    folder, _ = finished_run
    path = folder / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    del state["optimizer"]
    save_checkpoint(path, state)  # intact file, incomplete content
    with pytest.raises(CheckpointError, match=r"lacks the entries \['optimizer'\]") as caught:
        run_in(folder)
    assert REMEDY in str(caught.value)


class Payload:
    """Not a tensor or plain container: a weights-only load must refuse it."""


def test_checkpoint_with_arbitrary_objects_is_refused_without_suggesting_unsafe_loading(
    tmp_path, run_in
):
    folder = tmp_path / "run"
    save_checkpoint(folder / "checkpoint.pt", {"config": Payload()})
    with pytest.raises(CheckpointError, match="objects other than tensors") as caught:
        run_in(folder)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "weights_only" not in str(caught.value)


# Folders -----------------------------------------------------------------------------------


@pytest.fixture
def untrained(run_in):
    """``untrained(checkpoint_dir)``: the CheckpointError's message, raised before training."""

    def refused(checkpoint_dir):
        loss = CountingLoss()
        with pytest.raises(CheckpointError) as caught:
            run_in(checkpoint_dir, loss=loss)
        assert loss.calls == 0, "the folder must be checked before training"
        return str(caught.value)

    return refused


def test_checkpoint_dir_that_is_a_file_is_refused_before_training(tmp_path, untrained):
    target = tmp_path / "run"
    target.write_text("not a folder")
    message = untrained(target)
    assert f"checkpoint_dir {target} is not a folder" in message


def test_checkpoint_dir_below_a_file_is_refused_before_training(tmp_path, untrained):
    (tmp_path / "file").write_text("")
    message = untrained(tmp_path / "file" / "run")
    assert f"its ancestor {tmp_path / 'file'} is a file" in message


def test_read_only_checkpoint_dir_is_refused_before_training(tmp_path, monkeypatch, untrained):
    folder = tmp_path / "run"
    folder.mkdir()
    real_access = os.access

    def access(path, mode, **kwargs):
        # Root writes through any permission bits, so read-only is simulated here.
        if os.fspath(path) == os.fspath(folder) and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(checkpoint_module.os, "access", access)
    message = untrained(folder)
    assert f"checkpoint_dir {folder} is not writable" in message


def test_checkpoint_dir_in_a_read_only_folder_is_refused_before_training(tmp_path, untrained):
    parent = tmp_path / "locked"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        if os.access(parent, os.W_OK):
            pytest.skip("this user (root) can write to a read-only folder")
        message = untrained(parent / "run")
        assert f"checkpoint_dir {parent / 'run'} is not writable" in message
    finally:
        parent.chmod(0o700)


def test_missing_checkpoint_dir_is_created(tmp_path, train):
    train(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b" / "checkpoint.pt").is_file()


# The CalAttn seed file ----------------------------------------------------------------------


VIT_SETTINGS = dict(
    img_size=8, patch_size=4, in_chans=1, embed_dim=8, depth=1, num_heads=2, num_classes=2
)


def tiny_calattn(checkpoint_dir):
    torch.manual_seed(0)
    estimator = CalAttnFinetuner(
        VisionTransformer(**VIT_SETTINGS),
        max_epochs=1,
        batch_size=4,
        device="cpu",
        checkpoint_dir=str(checkpoint_dir),
    )
    estimator.backbone_settings = VIT_SETTINGS
    return estimator


def images(n=8):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 1, 8, 8)).astype(np.float32), np.arange(n) % 2


@pytest.mark.parametrize("content", ["{not json", "", '{"other": 1}', '{"seed": "12"}', "\xff\xfe"])
def test_damaged_calattn_seed_file_is_refused_naming_it(tmp_path, content):
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "fit_seed.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(CheckpointError, match="seed file .* is damaged") as caught:
        tiny_calattn(folder).fit(*images())
    assert str(path) in str(caught.value) and REMEDY in str(caught.value)


def test_calattn_seed_file_records_the_seed_of_an_unseeded_run(tmp_path):
    folder = tmp_path / "run"
    tiny_calattn(folder).fit(*images())
    record = json.loads((folder / "fit_seed.json").read_text())
    assert set(record) == {"seed"} and isinstance(record["seed"], int)
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.pt", "fit_seed.json"]


def test_calattn_checkpoint_dir_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "run"
    target.write_text("")
    with pytest.raises(CheckpointError, match="is not a folder"):
        tiny_calattn(target).fit(*images())


# A CalAttn folder reused --------------------------------------------------------------------


def finished_calattn(tmp_path):
    folder = tmp_path / "run"
    X, y = images()
    tiny_calattn(folder).set_params(random_state=0).fit(X, y)
    return folder, X, y


@pytest.mark.parametrize("change", ["images", "labels", "backbone", "hidden"])
def test_a_finished_calattn_folder_refuses_another_fit(tmp_path, change):
    folder, X, y = finished_calattn(tmp_path)
    estimator = tiny_calattn(folder).set_params(random_state=0)
    if change == "images":
        X = X + 1.0
    elif change == "labels":
        y = 1 - y
    elif change == "backbone":
        torch.manual_seed(1)
        estimator.set_params(backbone=VisionTransformer(**estimator.backbone_settings))
    else:
        estimator.set_params(hidden=64)
    expected = {
        "images": "other training data",
        "labels": "other training data",
        "backbone": "started from other weights",
        "hidden": "another network",
    }[change]
    with pytest.raises(ValueError, match=expected):
        estimator.fit(X, y)
    tiny_calattn(folder).set_params(random_state=0).fit(*images())  # the same fit resumes
