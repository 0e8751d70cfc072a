"""Reading prediction files written by other tools into validated probabilities and labels.

``.npz``, ``.npy``, ``.csv`` and ``.parquet`` files become a
:class:`Predictions` record (probabilities, labels, the class of each column
and a one-line description of where each came from), as the ``reliacal``
command reads them. An ``.npz`` file may hold several models, one key each:
:func:`prediction_keys` lists the keys that a pattern (``probs_*``) matches.
"""

from __future__ import annotations

from reliacal.io._parquet import is_parquet_input, stream_parquet
from reliacal.io._prediction_files import (
    LABEL_KEYS,
    Predictions,
    is_key_pattern,
    load_prediction_file,
    prediction_keys,
)

__all__ = [
    "LABEL_KEYS",
    "Predictions",
    "is_key_pattern",
    "is_parquet_input",
    "load_prediction_file",
    "prediction_keys",
    "stream_parquet",
]
