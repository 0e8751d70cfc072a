"""``save`` and ``load``: the manifest and the array file, written and checked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reliacal.persistence._codec import Decoder, Encoder, Given
from reliacal.persistence._files import FORMAT, FORMAT_VERSION, read_saved, write_saved
from reliacal.persistence._registry import class_path, loadable_class

__all__ = ["FORMAT", "FORMAT_VERSION", "load", "save"]

# What a malformed manifest raises deep in the codec or an estimator's constructor, before a
# check names the problem: each becomes a ValueError that says the file is at fault.
_MALFORMED = (
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    RecursionError,
    MemoryError,
    OverflowError,
)


def save(
    estimator: Any,
    path: str | os.PathLike,
    *,
    archive: bool | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a fitted (or unfitted) reliacal estimator to ``path``.

    The file holds data only, except for scikit-learn estimators inside a
    :class:`~reliacal.CalibratedClassifier`: those are stored with joblib
    (pickle) and load only with ``load(path, trusted=True)``. Parameters
    that name resources of this machine (``memory``, ``checkpoint_dir``)
    are not written: the loaded estimator has their defaults.

    Parameters
    ----------
    estimator : reliacal estimator
        A calibrator, AutoCalibrator, CalibratedClassifier, CalAttnFinetuner
        or DiffusionReconfigurer.
    path : str or path
        Where to write: a new path (its parent folders are created), or
        one that ``save`` wrote before, with ``overwrite=True``.
    archive : bool, default=None
        Write one zip archive (True) or a folder (False). ``None``: an
        archive when the file name has an extension (``model.zip``), a
        folder otherwise.
    overwrite : bool, default=False
        Replace what ``path`` holds: a file (for an archive), or a folder
        that holds only a saved model. Without it an existing path is
        refused, so a data file of the same name stays intact.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        When the estimator holds something that cannot be stored (a
        callable parameter, a ``RandomState``, a torch network it cannot
        rebuild), naming it; when ``path`` exists (without ``overwrite``),
        is a symbolic link, or names the current folder.

    Notes
    -----
    The folder or archive is written under a temporary name beside
    ``path`` and renamed into place, never through a symbolic link.
    """
    from reliacal._version import __version__

    cls = type(estimator)
    if loadable_class(class_path(cls), estimator=True) is not cls:
        raise ValueError(
            f"save writes reliacal's estimators, not a {cls.__name__}: wrap a scikit-learn "
            "classifier in reliacal.CalibratedClassifier, or store it with joblib.dump"
        )
    if archive is None:
        archive = Path(path).suffix != ""
    encoder = Encoder()
    encoded = encoder.estimator(estimator, cls.__name__)
    classes = getattr(estimator, "classes_", None)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "reliacal_version": __version__,
        "class": class_path(cls),
        "classes": None if classes is None else Encoder().value(list(classes), "classes_"),
        "estimator": encoded,
    }
    return write_saved(path, manifest, encoder.arrays, archive=archive, overwrite=overwrite)


def load(path: str | os.PathLike, *, backbone: Any = None, trusted: bool = False) -> Any:
    """Read an estimator written by :func:`save` (or an estimator's ``save``).

    Parameters
    ----------
    path : str or path
        The folder or zip archive.
    backbone : model or callable, default=None
        The backbone of an estimator saved with a backbone object: the same
        architecture (for a calibrator, the same weights), or a function of
        no arguments that returns it. Replaces a saved backbone name too.
    trusted : bool, default=False
        Read the scikit-learn estimators that the file stores with joblib
        (a :class:`~reliacal.CalibratedClassifier` around one). Unpickling
        can run any code: pass True only for a file you trust as you would
        trust code from its source. Everything else is checked as always.

    Returns
    -------
    estimator
        Predicting exactly as the saved one.

    Raises
    ------
    ValueError
        A file that is not a saved reliacal model or is malformed; one
        written by another format version; changed files (a checksum
        mismatch); members that are compressed, repeated, unnamed or
        symbolic links; a class that reliacal does not save; a fitted state
        that no fit gives; a parameter naming a resource of the saving
        machine; a missing or mismatched backbone; a pickled estimator
        without ``trusted=True``.
    """
    manifest, arrays = read_saved(path)
    decoder = Decoder(arrays, given=Given(backbone=backbone), trusted=trusted)
    try:
        estimator = decoder.estimator(manifest["estimator"])
    except _MALFORMED as error:
        raise ValueError(
            f"{path}: the saved model cannot be rebuilt ({type(error).__name__}: {error}); its "
            "manifest is malformed or was not written by this reliacal's save"
        ) from error
    if manifest["class"] != class_path(type(estimator)):
        raise ValueError(
            f"{path}: the manifest names the class {manifest['class']!r} but holds a "
            f"{class_path(type(estimator))}"
        )
    decoder.check_all_used()
    return estimator
