"""The files the ``reliacal`` command writes: checked before any work, written whole.

Every output path is checked up front, before a file is read or a model fitted:
its extension must say a format the command writes, it must not be one of the
command's inputs, two outputs must not share a path, and an existing file is
replaced only with ``--force``. Each file is written to a temporary name in
the same folder and renamed into place, so a failed write leaves no half file
and the reported path is the path written.
"""

from __future__ import annotations

import os
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

    The temporary name is in the same folder (created if needed) and keeps
    the extension, so that writers that infer a format from it (matplotlib)
    or append one when it is missing (numpy) write exactly that file.

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
    temporary = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def write_predictions(path: Path, probs: np.ndarray, labels: np.ndarray, classes) -> Path:
    """Write probabilities and labels in the format of ``path``'s extension.

    ``.npz`` holds the arrays ``probs`` and ``labels``; ``.csv`` and
    ``.parquet`` hold one column per class, named by the class, and a
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
    """
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return write_atomically(
            path, lambda temporary: np.savez_compressed(temporary, probs=probs, labels=labels)
        )
    import pandas as pd

    from reliacal.io import LABEL_KEYS

    names = [str(name) for name in classes]
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
