"""``save`` and ``load``: the manifest and the array file, written and checked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reliacal.persistence._codec import Decoder, Encoder, class_path
from reliacal.persistence._files import read_saved, write_saved

__all__ = ["FORMAT", "FORMAT_VERSION", "load", "save"]

#: The name every manifest carries.
FORMAT = "reliacal-model"
#: Raised whenever a change would mislead an older reader; it refuses newer versions.
FORMAT_VERSION = 1


def save(estimator: Any, path: str | os.PathLike, *, archive: bool | None = None) -> Path:
    """Write a fitted (or unfitted) reliacal estimator to ``path`` without pickle.

    Parameters
    ----------
    estimator : reliacal estimator
        A calibrator, AutoCalibrator, CalibratedClassifier around reliacal
        estimators, CalAttnFinetuner or DiffusionReconfigurer.
    path : str or path
        Where to write.
    archive : bool, default=None
        Write one zip archive (True) or a folder (False). ``None``: an
        archive when the file name has an extension (``model.zip``), a
        folder otherwise.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ValueError
        When the estimator holds something that cannot be stored without
        pickle (a scikit-learn classifier, a callable parameter, a
        ``RandomState``), naming it.
    """
    from reliacal._version import __version__

    path = Path(path)
    if archive is None:
        archive = path.suffix != ""
    encoder = Encoder()
    encoded = encoder.estimator(estimator, type(estimator).__name__)
    classes = getattr(estimator, "classes_", None)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "reliacal_version": __version__,
        "class": class_path(type(estimator)),
        "classes": None if classes is None else Encoder().value(list(classes), "classes_"),
        "estimator": encoded,
    }
    return write_saved(path, manifest, encoder.arrays, archive=archive)


def load(path: str | os.PathLike, *, backbone: Any = None) -> Any:
    """Read an estimator written by :func:`save` (or an estimator's ``save``).

    Parameters
    ----------
    path : str or path
        The folder or zip archive.
    backbone : model or callable, default=None
        The backbone of an estimator saved with a backbone object: the same
        architecture (for a calibrator, the same weights), or a function of
        no arguments that returns it. Replaces a saved backbone name too.

    Returns
    -------
    estimator
        Predicting exactly as the saved one.

    Raises
    ------
    ValueError
        A file that is not a saved reliacal model, one written by a newer
        format version, modified arrays (SHA-256 mismatch), or a missing or
        mismatched backbone.
    """
    manifest, arrays = read_saved(path)
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a saved reliacal model (format {manifest.get('format')!r})"
        )
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{path} was written in format version {version} (by reliacal "
            f"{manifest.get('reliacal_version')}); this reliacal reads versions up to "
            f"{FORMAT_VERSION}: upgrade reliacal to load it"
        )
    return Decoder(arrays, backbone=backbone).estimator(manifest["estimator"])
