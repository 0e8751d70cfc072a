"""Save and load fitted estimators as data, without pickle.

A saved model is a folder (or a zip archive of the same two files, stored
uncompressed) holding

- ``manifest.json``: the format name and version, the reliacal version that
  wrote it, the estimator's class, its parameters, its class labels, its
  fitted state as JSON, the SHA-256 and the list of the arrays, and its own
  SHA-256 (``"sha256"``: the hash of its other entries written as canonical
  JSON, ``json.dumps(entries, sort_keys=True, separators=(",", ":"))``);
- ``arrays.npz``: every array and tensor (network state dicts included),
  read back with ``allow_pickle=False``.

:func:`load` builds only the classes that reliacal saves (its estimators,
each registered by :class:`SaveMixin`, and the named tuples marked
:func:`loadable`), checks both checksums first, refuses another format
version, members it did not write (repeated, compressed, unnamed, or
symbolic links), parameters that name a resource of the saving machine
(``memory``, ``checkpoint_dir``: :func:`save` never writes them), and a
fitted state that no fit gives (each estimator checks its own). A changed
file is therefore refused, and a hostile one cannot make the loader or the
loaded model run code or read files; the checksums detect changes, not
forgery, so the last guarantee rests on the refusals, not on them.

Two kinds of content are not data:

- estimators fitted around a backbone object (the fine-tuning estimators, a
  calibrator with ``backbone=``) store the fitted networks' state dicts and
  the backbone's class and configuration; :func:`load` takes the backbone
  (or a function that builds it) and checks that it fits;
- a :class:`~reliacal.CalibratedClassifier` around a scikit-learn
  classifier stores that classifier with joblib, which is pickle: it loads
  only with ``load(path, trusted=True)``, as scikit-learn's own advice for
  pickled models asks (load only what you trust).

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

from reliacal.persistence._checks import (
    check_loaded_array,
    check_loaded_number,
    loaded_state_error,
)
from reliacal.persistence._mixin import SaveMixin
from reliacal.persistence._registry import loadable
from reliacal.persistence._saving import FORMAT, FORMAT_VERSION, load, save

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SaveMixin",
    "check_loaded_array",
    "check_loaded_number",
    "load",
    "loadable",
    "loaded_state_error",
    "save",
]
