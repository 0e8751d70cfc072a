"""The saved form on disk: ``manifest.json`` and ``arrays.npz``, in a folder or a zip archive.

The manifest records the SHA-256 of ``arrays.npz``; reading checks it before
numpy parses a byte, and numpy reads with ``allow_pickle=False``, so neither
file can make the reader run code.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["ARRAYS", "MANIFEST", "read_saved", "write_saved"]

MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _arrays_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    for key, array in arrays.items():
        if array.dtype.hasobject:  # np.save would pickle it
            raise ValueError(f"internal error: array {key!r} holds Python objects")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def write_saved(
    path: str | os.PathLike, manifest: dict, arrays: dict[str, np.ndarray], *, archive: bool
) -> Path:
    """Write ``manifest`` (the file hashes added) and ``arrays`` to ``path``."""
    path = Path(path)
    data = _arrays_bytes(arrays)
    manifest = {**manifest, "files": {ARRAYS: {"sha256": _sha256(data)}}}
    text = json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8")
    if archive:
        if path.is_dir():
            raise ValueError(f"cannot write the archive {path}: it is a folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            bundle.writestr(MANIFEST, text)
            bundle.writestr(ARRAYS, data)
        return path
    if path.exists() and not path.is_dir():
        raise ValueError(f"cannot write the folder {path}: a file of that name exists")
    path.mkdir(parents=True, exist_ok=True)
    (path / ARRAYS).write_bytes(data)
    (path / MANIFEST).write_bytes(text)
    return path


def _read_members(path: Path) -> tuple[bytes, bytes]:
    if path.is_dir():
        missing = [name for name in (MANIFEST, ARRAYS) if not (path / name).is_file()]
        if missing:
            raise ValueError(f"{path} is not a saved reliacal model: {missing[0]} is missing")
        return (path / MANIFEST).read_bytes(), (path / ARRAYS).read_bytes()
    if not path.exists():
        raise FileNotFoundError(f"no saved model at {path}")
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path} is neither a folder nor a zip archive written by reliacal's save "
            "(joblib or pickle files are not read: they can run code on load)"
        )
    with zipfile.ZipFile(path) as bundle:
        names = set(bundle.namelist())
        missing = [name for name in (MANIFEST, ARRAYS) if name not in names]
        if missing:
            raise ValueError(f"{path} is not a saved reliacal model: {missing[0]} is missing")
        return bundle.read(MANIFEST), bundle.read(ARRAYS)


def read_saved(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """``(manifest, arrays)`` of a saved model, after checking the arrays' SHA-256."""
    path = Path(path)
    text, data = _read_members(path)
    try:
        manifest = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: {MANIFEST} is not valid JSON ({error})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: {MANIFEST} must hold a JSON object")
    expected = manifest.get("files", {}).get(ARRAYS, {}).get("sha256")
    if expected is None:
        raise ValueError(f"{path}: {MANIFEST} records no SHA-256 for {ARRAYS}")
    actual = _sha256(data)
    if actual != expected:
        raise ValueError(
            f"{path}: {ARRAYS} was modified after saving (SHA-256 {actual[:16]}... but the "
            f"manifest records {expected[:16]}...); refusing to load it"
        )
    with np.load(io.BytesIO(data), allow_pickle=False) as stored:
        arrays = {key: stored[key] for key in stored.files}
    return manifest, arrays
