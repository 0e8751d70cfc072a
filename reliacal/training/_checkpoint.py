"""Files in a ``checkpoint_dir``: written atomically, verified on reading.

A checkpoint is the archive ``torch.save`` writes (a zip file) whose zip
comment records the SHA-256 of every byte before it, so one flipped byte is
refused rather than resumed from. Reading uses ``weights_only=True``: a
checkpoint folder must not be a way to run code. The hash detects damage
(disks, copies, crashes); it is not a signature against someone who can write
to the folder. Every damaged, incomplete or unwritable folder is reported as a
:class:`CheckpointError` that names the file and the fix.

A checkpoint also records what its run was written for (:func:`run_fingerprint`):
the network's parameter names and shapes, a fingerprint of the training data and
the caller's fingerprint of the starting weights. A folder reused for another run
(other data of the same size, another backbone, another width) is refused by
:func:`check_fingerprint` instead of handing back the old run's model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from reliacal._data import fingerprint
from reliacal._validation import warn_at_caller

__all__ = [
    "CHECKPOINT_NAME",
    "CheckpointError",
    "check_checkpoint_dir",
    "check_entries",
    "check_fingerprint",
    "checkpoint_path",
    "load_checkpoint",
    "read_seed_file",
    "run_fingerprint",
    "save_checkpoint",
    "write_atomically",
    "write_seed_file",
]

CHECKPOINT_NAME = "checkpoint.pt"

# The zip comment: this tag, then the hex SHA-256 of the archive before the comment.
_DIGEST_TAG = b"reliacal-sha256:"
_TRAILER_LENGTH = len(_DIGEST_TAG) + 64
# The end-of-central-directory record closes every zip file; its last field is the
# comment's length (APPNOTE.TXT 4.3.16).
_END_SIGNATURE = b"PK\x05\x06"
_END_LENGTH = 22
_CHUNK = 1 << 20


class CheckpointError(ValueError):
    """A ``checkpoint_dir`` that cannot be used: damaged, incomplete or not writable.

    The message names the file and what to do: delete the folder (losing the
    interrupted run) or point ``checkpoint_dir`` elsewhere.
    """


def _remedy(directory: Path) -> str:
    return f"delete the folder {directory} to start afresh, or point checkpoint_dir elsewhere"


def checkpoint_path(checkpoint_dir: str | os.PathLike) -> Path:
    """The checkpoint file inside ``checkpoint_dir``."""
    return Path(checkpoint_dir) / CHECKPOINT_NAME


def check_checkpoint_dir(checkpoint_dir: str | os.PathLike) -> Path:
    """Return ``checkpoint_dir`` as a Path once it is known that a run can write there.

    Checked before any training, so that an unusable folder is reported at
    once rather than after the first epoch. The folder need not exist yet:
    its nearest existing ancestor must be a writable folder.

    Raises
    ------
    CheckpointError
        When ``checkpoint_dir`` or an ancestor is a file, or the folder is not writable.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     check_checkpoint_dir(Path(folder) / "run").name
    'run'
    """
    directory = Path(checkpoint_dir)
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        where = "" if existing == directory else f" (its ancestor {existing} is a file)"
        raise CheckpointError(
            f"checkpoint_dir {directory} is not a folder{where}; point checkpoint_dir to a "
            "folder (it is created if missing)"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "" if existing == directory else f" (nor can it be created in {existing})"
        raise CheckpointError(
            f"checkpoint_dir {directory} is not writable{what}; a run writes its checkpoint "
            "there after every epoch: point checkpoint_dir to a writable folder"
        )
    return directory


def write_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write a file through ``write(file)`` so that ``path`` is always complete.

    The content goes to a temporary file in the same folder, is flushed and
    synced to the disk, and only then renamed over ``path``; the folder is
    synced too, so that the rename survives a power loss. A run killed at
    any moment leaves either the old file or the new one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w+b") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _sync_folder(path.parent)


def _sync_folder(directory: Path) -> None:
    # The rename is done either way; Windows and some network file systems cannot
    # open or sync a folder, and there the rename's durability is the system's.
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _append_digest(file: IO[bytes]) -> None:
    """Record the SHA-256 of the zip archive in ``file`` as its zip comment."""
    file.seek(-_END_LENGTH, os.SEEK_END)
    end = file.read(_END_LENGTH)
    if end[:4] != _END_SIGNATURE or end[-2:] != b"\0\0":
        raise RuntimeError("torch.save did not end its archive with a comment-less zip record")
    # The comment's length is part of the hashed bytes: set it first.
    file.seek(-2, os.SEEK_END)
    file.write(struct.pack("<H", _TRAILER_LENGTH))
    file.seek(0)
    digest = hashlib.sha256()
    while chunk := file.read(_CHUNK):
        digest.update(chunk)
    file.write(_DIGEST_TAG + digest.hexdigest().encode("ascii"))


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically, with its SHA-256.

    The file stays an ordinary ``torch.save`` archive: ``torch.load`` reads it.

    Raises
    ------
    CheckpointError
        When the file cannot be written (full disk, permissions).
    """

    def write(file: IO[bytes]) -> None:
        torch.save(state, file)
        _append_digest(file)

    try:
        write_atomically(path, write)
    except (OSError, RuntimeError) as error:
        raise CheckpointError(
            f"could not write the checkpoint {path}: {error}; is the disk full or the folder "
            "read-only? Free space or point checkpoint_dir to a writable folder"
        ) from error


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """The state saved at ``path`` after checking its SHA-256; None when there is no file.

    Raises
    ------
    CheckpointError
        When the file is empty, truncated, altered, not a reliacal checkpoint,
        or holds something a weights-only load refuses.
    """
    if not path.exists():
        return None
    remedy = _remedy(path.parent)
    if not path.is_file():
        raise CheckpointError(f"the checkpoint {path} is not a file; {remedy}")
    try:
        with open(path, "rb") as file:
            state = _read_verified(file, path, remedy)
    except OSError as error:
        raise CheckpointError(f"the checkpoint {path} cannot be read ({error}); {remedy}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"the checkpoint {path} does not hold a dict; {remedy}")
    return state


def _read_verified(file: IO[bytes], path: Path, remedy: str) -> Any:
    """Check the SHA-256 of the open checkpoint ``file``, then load it weights-only."""
    size = os.fstat(file.fileno()).st_size
    if size == 0:
        raise CheckpointError(
            f"the checkpoint {path} is empty (a run stopped while writing it?); {remedy}"
        )
    digest = hashlib.sha256()
    remaining = max(size - _TRAILER_LENGTH, 0)
    while remaining:
        chunk = file.read(min(_CHUNK, remaining))
        if not chunk:  # shortened since fstat; the trailer check below refuses it
            break
        digest.update(chunk)
        remaining -= len(chunk)
    trailer = file.read()
    if not trailer.startswith(_DIGEST_TAG) or len(trailer) != _TRAILER_LENGTH:
        raise CheckpointError(
            f"the checkpoint {path} is truncated or was not written by reliacal (it does "
            f"not end with its SHA-256); {remedy}"
        )
    if trailer[len(_DIGEST_TAG) :] != digest.hexdigest().encode("ascii"):
        raise CheckpointError(
            f"the checkpoint {path} is damaged: its bytes no longer match the SHA-256 "
            f"recorded when it was written; {remedy}"
        )
    file.seek(0)
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        # torch's own message advises weights_only=False, i.e. running the file's code.
        raise CheckpointError(
            f"the checkpoint {path} holds objects other than tensors and plain containers, "
            f"which are not loaded; {remedy}"
        ) from None
    except (RuntimeError, EOFError, ValueError) as error:
        raise CheckpointError(
            f"the checkpoint {path} cannot be read ({type(error).__name__}: {error}); {remedy}"
        ) from None
    return state


def check_entries(state: dict[str, Any], expected: Iterable[str], path: Path) -> None:
    """Refuse a checkpoint that lacks any of the ``expected`` entries."""
    missing = [name for name in expected if name not in state]
    if missing:
        raise CheckpointError(
            f"the checkpoint {path} lacks the entries {missing} (written by another version "
            f"of reliacal?); {_remedy(path.parent)}"
        )


def write_seed_file(path: Path, seed: int) -> None:
    """Record ``seed`` as ``{"seed": seed}`` in the JSON file ``path``, atomically."""
    text = json.dumps({"seed": int(seed)}).encode("utf-8")
    write_atomically(path, lambda file: file.write(text))


def read_seed_file(path: Path) -> int:
    """The seed recorded by :func:`write_seed_file`.

    Raises
    ------
    CheckpointError
        When the file is not such a record (damaged, empty, edited).
    """
    try:
        record = json.loads(path.read_bytes())
    except ValueError:  # JSONDecodeError and UnicodeDecodeError among them
        record = None
    seed = record.get("seed") if isinstance(record, dict) else None
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise CheckpointError(
            f'the seed file {path} is damaged (expected JSON like {{"seed": 123}}); '
            f"{_remedy(path.parent)}"
        )
    return seed


def run_fingerprint(
    module: nn.Module, train_data: Any, validation_data: Any, start: str | None
) -> dict[str, Any]:
    """What a run is written for: architecture, data and starting weights.

    ``architecture`` lists ``[name, shape, dtype]`` of every tensor in the
    module's ``state_dict``; ``data`` is :func:`reliacal._data.fingerprint` of
    the training and validation data (None, with a warning, when they cannot
    be pickled); ``start`` is the caller's fingerprint of the starting
    weights (None when not given). Plain lists and strings, so that a
    weights-only load reads them.
    """
    architecture = [
        [name, list(value.shape), str(value.dtype)]
        for name, value in module.state_dict().items()
        if isinstance(value, torch.Tensor)
    ]
    try:
        data = fingerprint((train_data, validation_data))
    except Exception as error:  # pickling fails in many ways (lambdas, local classes, files)
        warn_at_caller(
            f"checkpoint_dir: the training data cannot be fingerprinted ({type(error).__name__}: "
            f"{error}), so a checkpoint written for other data of the same size would not be "
            "recognised; use a new checkpoint_dir for each data set",
            UserWarning,
        )
        data = None
    return {"architecture": architecture, "data": data, "start": start}


def _architecture_difference(saved: list, current: list) -> str:
    """``new: a (3, 2); missing: b (2, 2); changed: c (4,) -> (8,)``, a few of each."""
    before = {name: tuple(shape) for name, shape, _ in saved}
    after = {name: tuple(shape) for name, shape, _ in current}
    parts = []
    new = [f"{name} {after[name]}" for name in after if name not in before]
    missing = [f"{name} {before[name]}" for name in before if name not in after]
    changed = [
        f"{name} {before[name]} -> {after[name]}"
        for name in after
        if name in before and before[name] != after[name]
    ]
    dtypes = [
        f"{name} {dtype_before} -> {dtype_after}"
        for (name, _, dtype_before), (other, _, dtype_after) in zip(saved, current)
        if name == other and dtype_before != dtype_after
    ]
    for label, entries in (("new", new), ("missing", missing), ("changed", changed + dtypes)):
        if entries:
            more = f" and {len(entries) - 3} more" if len(entries) > 3 else ""
            parts.append(f"{label}: {', '.join(entries[:3])}{more}")
    return "; ".join(parts) or "the order of the parameters differs"


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Refuse to resume from a checkpoint written for another run (see :func:`run_fingerprint`).

    Raises
    ------
    ValueError
        When the network's parameter names or shapes, the training data, or
        the starting weights differ from the checkpoint's.
    """
    remedy = f"use a new checkpoint_dir, or delete the folder {path.parent} to start afresh"
    if saved["architecture"] != current["architecture"]:
        difference = _architecture_difference(saved["architecture"], current["architecture"])
        raise ValueError(
            f"the checkpoint {path} was written for another network (its parameters differ: "
            f"{difference}); {remedy}"
        )
    if None not in (saved["data"], current["data"]) and saved["data"] != current["data"]:
        raise ValueError(
            f"the checkpoint {path} was written for other training data (the same number of "
            f"samples, but other values, labels or order); {remedy}"
        )
    if saved["start"] != current["start"]:
        raise ValueError(
            f"the checkpoint {path} was written for a run that started from other weights "
            f"(another backbone, or another initialisation); {remedy}"
        )
