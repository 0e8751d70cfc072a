"""The files the ``reliacal`` command writes: checked before any work, written whole.

Every output path is checked up front, before a file is read or a model fitted:
its extension must say a format the command writes, it must not be one of the
command's inputs, two outputs must not share a path, and an existing file is
replaced only with ``--force``. Extensions are read in any case (``OUT.NPZ``).
Each file is written in a temporary folder beside it and renamed into place;
the folder and whatever a writer put in it are removed whatever happens (an
error or an interruption mid-write), so a failed write leaves no half file
and the reported path is the path written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["PREDICTION_FORMATS", "check_outputs", "write_atomically", "write_predictions"]

# What --out writes, by extension; each is a file that `reliacal evaluate` reads back.
PREDICTION_FORMATS = (".npz", ".csv", ".parquet")


def _plot_formats() -> list[str]:
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(f".{extension}" for extension in FigureCanvasBase.get_supported_filetypes())


def _same_file(first: Path, second: Path) -> bool:
    if first.exists() and second.exists():
        return os.path.samefile(first, second)
    return first.resolve() == second.resolve()


def check_outputs(
    outputs: Mapping[str, str | None], inputs: Sequence[str | None], *, force: bool
) -> dict[str, Path]:
    """Refuse output paths that would fail, clobber an input, or replace a file silently.

    Parameters
    ----------
    outputs : mapping of str to str or None
        Option name (``"--out"``, ``"--plot"``, ``"--save-model"``) to the
        path given, or None when the option is not used.
    inputs : sequence of str or None
        The files the command reads (None entries are skipped).
    force : bool
        Replace existing output files.

    Returns
    -------
    dict of str to Path
        The outputs in use.

    Raises
    ------
    ValueError
        Naming the option and the path: an extension that is not written, a
        folder in the way, an input file, two outputs at one path, or an
        existing file without ``force``.

    Examples
    --------
    >>> check_outputs({"--out": "calibrated.csv", "--plot": None}, ["eval.npz"], force=False)
    {'--out': PosixPath('calibrated.csv')}
    >>> check_outputs({"--out": "eval.npz"}, ["eval.npz"], force=True)
    Traceback (most recent call last):
    ...
    ValueError: --out eval.npz is an input of this command; write to another file
    """
    chosen = {option: Path(text) for option, text in outputs.items() if text}
    read = [Path(text) for text in inputs if text]
    for option, path in chosen.items():
        _check_extension(option, path)
        for folder in reversed(path.parents):
            if folder.exists() and not folder.is_dir():
                raise ValueError(f"cannot write {path}: {folder} is a file, not a folder")
        if path.is_dir():
            raise ValueError(f"cannot write {path}: it is a folder; give a file name")
        if any(_same_file(path, source) for source in read):
            raise ValueError(f"{option} {path} is an input of this command; write to another file")
    options = list(chosen)
    for position, option in enumerate(options):
        for other in options[position + 1 :]:
            if _same_file(chosen[option], chosen[other]):
                raise ValueError(
                    f"{option} and {other} name the same file {chosen[option]}; give two paths"
                )
    if not force:
        for option, path in chosen.items():
            if path.exists():
                raise ValueError(
                    f"{option} {path} exists; pass --force to replace it, or choose another path"
                )
    return chosen


def _check_extension(option: str, path: Path) -> None:
    suffix = path.suffix.lower()
    if option == "--out" and suffix not in PREDICTION_FORMATS:
        raise ValueError(
            f"--out {path}: the extension must say the format: "
            f"{', '.join(PREDICTION_FORMATS)} (got {suffix or 'none'!r})"
        )
    if option == "--plot":
        formats = _plot_formats()
        if suffix not in formats:
            raise ValueError(
                f"--plot {path}: the extension must be an image format: "
                f"{', '.join(formats)} (got {suffix or 'none'!r})"
            )


def write_atomically(path: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(temporary)`` and rename the result to ``path``.

    ``temporary`` has ``path``'s name, in a new hidden folder beside it (on
    the same file system, so the rename is atomic): writers that infer a
    format from the extension (matplotlib) see the same one. The folder is
    removed afterwards with anything left in it, also when ``write`` fails
    or is interrupted, so no partial file outlives the call.

    Parameters
    ----------
    path : Path
        The final file.
    write : callable
        Writes a complete file at the path it is given.

    Returns
    -------
    Path
        ``path``, now holding what ``write`` wrote.

    Examples
    --------
    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "notes.txt"
    >>> write_atomically(target, lambda temporary: temporary.write_text("done")).read_text()
    'done'
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
    temporary = folder / path.name
    try:
        try:
            write(temporary)
        except OSError as error:
            # The temporary name in errno's message would mean nothing to the user.
            raise OSError(f"cannot write {path}: {error.strerror or error}") from None
        if not temporary.is_file():  # a writer that chose another name (numpy adds .npz)
            written = ", ".join(sorted(entry.name for entry in folder.iterdir())) or "nothing"
            raise OSError(f"writing {path} wrote {written} instead; nothing was written")
        os.replace(temporary, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return path


def write_predictions(
    path: Path, probs: np.ndarray, labels: np.ndarray, classes, *, columns=None
) -> Path:
    """Write probabilities and labels in the format of ``path``'s extension.

    ``.npz`` holds the arrays ``probs`` and ``labels``; ``.csv`` and
    ``.parquet`` hold one column per class, named ``columns`` (the input
    table's names, ``p_0`` or ``p_cat``) or else by the class, and a
    ``label`` column. All three are prediction files that ``reliacal
    evaluate`` reads back unchanged.

    Parameters
    ----------
    path : Path
        Ends in ``.npz``, ``.csv`` or ``.parquet``.
    probs : ndarray of shape (n, K)
        Probabilities.
    labels : ndarray of shape (n,)
        True labels.
    classes : array-like of shape (K,)
        The class of each column (names the table columns).
    columns : sequence of str or None, default=None
        Names of the table columns, in the order of ``probs``' columns; None:
        the classes.

    Returns
    -------
    Path
        ``path``.

    Examples
    --------
    >>> import tempfile
    >>> import pandas as pd
    >>> target = Path(tempfile.mkdtemp()) / "out.csv"
    >>> _ = write_predictions(target, np.array([[0.9, 0.1]]), np.array([0]), [0, 1])
    >>> print(target.read_text().strip())
    0,1,label
    0.9,0.1,0
    >>> probs, labels = np.array([[0.9, 0.1]]), np.array([0])
    >>> _ = write_predictions(target, probs, labels, [0, 1], columns=["p_0", "p_1"])
    >>> print(target.read_text().strip())
    p_0,p_1,label
    0.9,0.1,0
    """
    suffix = path.suffix.lower()
    if suffix == ".npz":

        def write_npz(temporary: Path) -> None:
            # Through a file object: given a name, numpy appends ".npz" unless the name ends
            # so, in lower case (OUT.NPZ would be written as OUT.NPZ.npz).
            with open(temporary, "wb") as file:
                np.savez_compressed(file, probs=probs, labels=labels)

        return write_atomically(path, write_npz)
    import pandas as pd

    from reliacal.io import LABEL_KEYS

    names = [str(name) for name in classes]
    if columns is not None and len(columns) == len(names):
        names = [str(name) for name in columns]
    # The reader takes the first column named like a label column as the labels.
    if set(names) & set(LABEL_KEYS) or len(set(names)) != len(names):
        raise ValueError(
            f"--out {path}: the classes {names[:5]} cannot name table columns (a class named "
            "like a label column, or two with one name); write .npz instead"
        )
    frame = pd.DataFrame(np.asarray(probs), columns=names)
    frame["label"] = labels
    if suffix == ".csv":
        return write_atomically(path, lambda temporary: frame.to_csv(temporary, index=False))
    return write_atomically(path, lambda temporary: frame.to_parquet(temporary, index=False))
