"""The ``reliacal`` command: evaluate, calibrate and demonstrate from a shell.

``reliacal evaluate PRED`` prints the calibration report of a prediction
file; ``reliacal calibrate CAL EVAL --method temperature`` fits a post-hoc
calibrator on one file and reports before/after on the other;
``reliacal demo`` trains the demo classifier and writes a report. A user
mistake (missing file, unknown key, shapes that disagree, values that are not
probabilities) ends with one line on stderr and exit status 1, never a
traceback.

Output files (``--out``, ``--plot``, ``--save-model``) are checked before any
work: the extension says the format (``--out`` writes ``.npz``, ``.csv`` or
``.parquet``; ``--plot`` any image format matplotlib writes), an input file is
never overwritten, two outputs never share a path, and an existing file is
replaced only with ``--force``. The path reported is the path written.
"""

from __future__ import annotations

from reliacal.cli._commands import main

__all__ = ["main"]
