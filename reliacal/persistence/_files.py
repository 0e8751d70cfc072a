"""The saved form on disk: ``manifest.json`` and ``arrays.npz``, in a folder or a zip archive.

Writing goes to a temporary sibling that is renamed into place, so an
interrupted save leaves nothing half-written, and an existing path is
replaced only when asked. Reading checks everything that can be checked
before a byte is parsed or a buffer allocated:

- only the two members are read, never through a symbolic link, and a zip
  must hold them once each, stored uncompressed (so that what is read is
  at most the file's own size; the arrays barely compress);
- the manifest is strict JSON (no NaN, no repeated key, at most 64 MiB),
  its own SHA-256 matches (``"sha256"``: the hash of the other entries
  written as canonical JSON, ``json.dumps(..., sort_keys=True,
  separators=(",", ":"))``), and its format version is one this reader
  knows;
- ``arrays.npz`` matches the SHA-256 that the manifest records, holds
  exactly the arrays the manifest lists, each stored uncompressed, and
  each ``.npy`` header declares as many bytes as follow it; numpy reads
  with ``allow_pickle=False``.

The checksums detect a changed or damaged file, not a forged one (whoever
can write the file can recompute them): the codec's refusals and the
estimators' checks of their fitted state are what make a hostile file
harmless.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ARRAYS", "FORMAT", "FORMAT_VERSION", "MANIFEST", "read_saved", "write_saved"]

MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"
#: The name every manifest carries.
FORMAT = "reliacal-model"
#: Raised whenever a change would mislead an older reader; it refuses newer versions.
#: Version 2 added the manifest's checksum and the list of arrays, and stores an
#: archive's members uncompressed.
FORMAT_VERSION = 2
_MAX_MANIFEST_BYTES = 64 * 2**20
_MANIFEST_KEYS = {
    "format",
    "format_version",
    "reliacal_version",
    "class",
    "classes",
    "estimator",
    "files",
    "sha256",
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_checksum(manifest: dict) -> str:
    """SHA-256 of the manifest's entries but ``"sha256"``, written as canonical JSON."""
    body = {key: value for key, value in manifest.items() if key != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return _sha256(text.encode("utf-8"))


def _arrays_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    for key, array in arrays.items():
        if array.dtype.hasobject:  # np.save would pickle it
            raise ValueError(f"internal error: array {key!r} holds Python objects")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


# Writing ---------------------------------------------------------------------------------


def _target(path: str | os.PathLike, *, archive: bool, overwrite: bool) -> Path:
    """``path``, after refusing what save must never write to."""
    if str(path) == "":
        raise ValueError("save needs a path: got an empty string")
    path = Path(path)
    if path.name in ("", ".", ".."):
        raise ValueError(
            f"save({str(path)!r}) names the current or a parent folder, not a new model: "
            "give the model its own name, such as 'model' or 'model.zip'"
        )
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(status.st_mode):
        raise ValueError(
            f"{path} is a symbolic link: save never writes through one (it would replace "
            "the link's target); remove the link or choose another path"
        )
    is_folder = stat.S_ISDIR(status.st_mode)
    if archive and is_folder:
        raise ValueError(f"cannot write the archive {path}: it is a folder")
    if not archive and not is_folder:
        raise ValueError(f"cannot write the folder {path}: a file of that name exists")
    if not overwrite:
        raise ValueError(
            f"{path} exists; pass overwrite=True to replace it (save never replaces a path "
            "by surprise: it may be your data)"
        )
    if is_folder:
        for entry in os.scandir(path):
            if entry.name not in (MANIFEST, ARRAYS):
                raise ValueError(
                    f"{path} holds other files ({entry.name}); overwrite=True replaces only "
                    "a folder that save wrote"
                )
            if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                raise ValueError(
                    f"{path / entry.name} is a symbolic link or not a plain file; save replaces "
                    "only a folder that it wrote"
                )
    return path


def _write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to a file that must not exist yet (never through a link)."""
    with open(path, "xb") as file:
        file.write(data)


def write_saved(
    path: str | os.PathLike,
    manifest: dict,
    arrays: dict[str, np.ndarray],
    *,
    archive: bool,
    overwrite: bool = False,
) -> Path:
    """Write ``manifest`` (its checksums added) and ``arrays`` to ``path``."""
    path = _target(path, archive=archive, overwrite=overwrite)
    data = _arrays_bytes(arrays)
    files = {ARRAYS: {"sha256": _sha256(data), "arrays": sorted(arrays)}}
    manifest = {**manifest, "files": files}
    manifest["sha256"] = manifest_checksum(manifest)
    text = json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}."
    if archive:
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".partial")
        try:
            with (
                os.fdopen(descriptor, "wb") as file,
                zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED) as bundle,
            ):
                bundle.writestr(MANIFEST, text)
                bundle.writestr(ARRAYS, data)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return path
    temporary = Path(tempfile.mkdtemp(dir=path.parent, prefix=prefix, suffix=".partial"))
    try:
        _write_new(temporary / ARRAYS, data)
        _write_new(temporary / MANIFEST, text)
        if path.exists():  # overwrite=True, checked by _target: a folder save wrote
            previous = Path(tempfile.mkdtemp(dir=path.parent, prefix=prefix, suffix=".old"))
            os.rename(path, previous / "model")
            os.rename(temporary, path)
            shutil.rmtree(previous)
        else:
            os.rename(temporary, path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return path


# Reading ---------------------------------------------------------------------------------


def _read_plain_file(path: Path, limit: int | None = None) -> bytes:
    """The bytes of a regular file that is not a symbolic link."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        raise ValueError(
            f"{path.parent} is not a saved reliacal model: {path.name} is missing"
        ) from None
    if stat.S_ISLNK(status.st_mode):
        raise ValueError(
            f"{path} is a symbolic link; reliacal reads only the files that save wrote, "
            "never through a link"
        )
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"{path} is not a plain file")
    if limit is not None and status.st_size > limit:
        raise ValueError(f"{path} is {status.st_size} bytes, more than a manifest can be")
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as file:
        return file.read()


def _check_members(where: Any, infos: list[zipfile.ZipInfo], expected: set[str]) -> None:
    """Refuse repeated, unexpected, missing or compressed members of a zip."""
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            raise ValueError(
                f"{where} holds two members named {info.filename}; refusing an ambiguous file"
            )
        seen.add(info.filename)
    # The manifest first: a zip without one is no saved model at all.
    missing = sorted(expected - seen, key=lambda name: (name != MANIFEST, name))
    if missing:
        raise ValueError(f"{where} is not a saved reliacal model: {missing[0]} is missing")
    unexpected = sorted(seen - expected)
    if unexpected:
        raise ValueError(
            f"{where} holds members that the saved model does not name: "
            f"{', '.join(unexpected[:5])}; refusing to load it"
        )
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise ValueError(
                f"{info.filename} in {where} is compressed; reliacal stores the members of a "
                "saved model uncompressed (so that reading one allocates no more than the "
                "file holds) and refuses others"
            )


def _read_archive(path: Path) -> tuple[bytes, bytes]:
    size = path.stat().st_size
    with zipfile.ZipFile(path) as bundle:
        infos = bundle.infolist()
        _check_members(path, infos, {MANIFEST, ARRAYS})
        for info in infos:
            if info.compress_size > size:
                raise ValueError(f"{path} is damaged: {info.filename} is larger than the file")
            if info.filename == MANIFEST and info.file_size > _MAX_MANIFEST_BYTES:
                raise ValueError(f"{path}: {MANIFEST} is larger than a manifest can be")
        return bundle.read(MANIFEST), bundle.read(ARRAYS)


def _read_members(path: Path) -> tuple[bytes, bytes]:
    if path.is_dir():
        manifest = _read_plain_file(path / MANIFEST, _MAX_MANIFEST_BYTES)
        return manifest, _read_plain_file(path / ARRAYS)
    if not path.exists():
        raise FileNotFoundError(f"no saved model at {path}")
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path} is neither a folder nor a zip archive written by reliacal's save "
            "(joblib or pickle files are not read: they can run code on load)"
        )
    try:
        return _read_archive(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as error:
        raise ValueError(f"{path} is a damaged zip archive ({error})") from None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"it holds {name}, which JSON does not allow")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        repeated = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"an object holds the key {repeated!r} twice")
    return dict(pairs)


def _parse_manifest(path: Path, text: bytes) -> dict:
    try:
        manifest = json.loads(
            text.decode("utf-8"), parse_constant=_refuse_constant, object_pairs_hook=_unique_keys
        )
    except RecursionError:
        raise ValueError(f"{path}: {MANIFEST} is nested too deeply to be a manifest") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{path}: {MANIFEST} is not valid JSON ({error})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: {MANIFEST} must hold a JSON object")
    return manifest


def _check_header(path: Path, manifest: dict) -> None:
    """The format name and version, before anything whose meaning depends on the version."""
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a saved reliacal model (format {manifest.get('format')!r})"
        )
    version = manifest.get("format_version")
    if type(version) is not int or version < 1:
        raise ValueError(
            f"{path}: {MANIFEST} gives the format version {version!r}; format versions are "
            "integers from 1"
        )
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path} was written in format version {version} (by reliacal "
            f"{manifest.get('reliacal_version')}); this reliacal reads versions up to "
            f"{FORMAT_VERSION}: upgrade reliacal to load it"
        )
    if version < FORMAT_VERSION:
        raise ValueError(
            f"{path} was written in format version {version} (by reliacal "
            f"{manifest.get('reliacal_version')}), which this reliacal no longer reads (its "
            "manifest carries no checksum): fit the model again and save it with this reliacal"
        )
    unknown = sorted(set(manifest) - _MANIFEST_KEYS)
    missing = sorted(_MANIFEST_KEYS - set(manifest))
    if unknown or missing:
        raise ValueError(
            f"{path}: {MANIFEST} is malformed ("
            + "; ".join(
                part
                for part in (
                    f"unknown entries {unknown}" if unknown else "",
                    f"missing entries {missing}" if missing else "",
                )
                if part
            )
            + ")"
        )
    if manifest_checksum(manifest) != manifest["sha256"]:
        raise ValueError(
            f"{path}: {MANIFEST} was modified after saving (its content does not match the "
            "SHA-256 it records); refusing to load it"
        )


def _array_list(path: Path, manifest: dict) -> tuple[str, list[str]]:
    files = manifest["files"]
    record = files.get(ARRAYS) if isinstance(files, dict) else None
    if (
        not isinstance(files, dict)
        or set(files) != {ARRAYS}
        or not isinstance(record, dict)
        or set(record) != {"sha256", "arrays"}
        or not isinstance(record["sha256"], str)
        or not isinstance(record["arrays"], list)
        or not all(isinstance(key, str) and key.isidentifier() for key in record["arrays"])
    ):
        raise ValueError(
            f"{path}: {MANIFEST}'s 'files' entry is malformed: it must record the SHA-256 "
            f"of {ARRAYS} and the list of its arrays"
        )
    return record["sha256"], record["arrays"]


def _read_array(bundle: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One ``.npy`` member, after checking that its header declares the bytes that follow."""
    with bundle.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise ValueError(f"npy format version {version}, which save does not write")
        offset = member.tell()
    if dtype.hasobject:
        raise ValueError("it holds Python objects, which are read only through pickle")
    if not all(isinstance(size, int) and size >= 0 for size in shape):
        raise ValueError(f"its header declares the shape {shape}")
    declared = math.prod(shape) * dtype.itemsize
    if offset + declared != info.file_size:
        raise ValueError(
            f"its header declares {shape} {dtype} values ({declared} bytes), but "
            f"{info.file_size - offset} bytes follow it"
        )
    with bundle.open(info) as member:
        return np.lib.format.read_array(member, allow_pickle=False)


def _read_arrays(path: Path, data: bytes, keys: list[str]) -> dict[str, np.ndarray]:
    where = f"{path}: {ARRAYS}"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as bundle:
            infos = bundle.infolist()
            _check_members(where, infos, {f"{key}.npy" for key in keys})
            arrays = {}
            for info in infos:
                key = info.filename[: -len(".npy")]
                try:
                    arrays[key] = _read_array(bundle, info)
                except ValueError as error:
                    raise ValueError(f"{where}: array {key!r} is malformed: {error}") from None
            return arrays
    except (zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{where} is damaged ({error})") from None


def read_saved(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """``(manifest, arrays)`` of a saved model, after the checks of the module docstring."""
    path = Path(path)
    text, data = _read_members(path)
    manifest = _parse_manifest(path, text)
    _check_header(path, manifest)
    expected, keys = _array_list(path, manifest)
    if _sha256(data) != expected:
        raise ValueError(
            f"{path}: {ARRAYS} was modified after saving (it does not match the SHA-256 that "
            f"{MANIFEST} records); refusing to load it"
        )
    return manifest, _read_arrays(path, data, keys)
