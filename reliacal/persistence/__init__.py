"""Save and load fitted estimators without pickle.

A saved model is a folder (or a zip archive of the same two files) holding

- ``manifest.json``: the format name and version, the reliacal version that
  wrote it, the estimator's class, its parameters, its class labels, its
  fitted state as JSON, and the SHA-256 of the array file;
- ``arrays.npz``: every array and tensor (network state dicts included),
  read back with ``allow_pickle=False``.

Loading rebuilds only reliacal's own classes, checks the SHA-256 first and
refuses a newer format version, so a saved model can be shared like data.
Estimators fitted around a backbone object (the fine-tuning estimators, a
calibrator with ``backbone=``) store the fitted networks' state dicts and
the backbone's class and configuration; :func:`load` takes the backbone
(or a function that builds it) and checks that it fits.

Examples
--------
>>> import tempfile, numpy as np
>>> import reliacal
>>> from reliacal.calibrators import TemperatureScaling
>>> from reliacal.datasets import make_logits
>>> logits, y = make_logits(200, 3, random_state=0)
>>> model = TemperatureScaling().fit(logits, y)
>>> path = tempfile.mkdtemp() + "/ts.zip"
>>> model.save(path)
>>> again = reliacal.load(path)
>>> bool(np.array_equal(again.predict_proba(logits), model.predict_proba(logits)))
True
"""

from __future__ import annotations

from reliacal.persistence._mixin import SaveMixin
from reliacal.persistence._saving import FORMAT, FORMAT_VERSION, load, save

__all__ = ["FORMAT", "FORMAT_VERSION", "SaveMixin", "load", "save"]
