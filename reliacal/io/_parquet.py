"""Evaluating a parquet file or folder batch by batch, in memory bounded by one batch.

``reliacal evaluate PRED.parquet`` (or a folder of parquet files) reads the
file with pyarrow one batch of rows at a time (pyarrow decodes one row group
at a time) and feeds a :class:`reliacal.metrics.CalibrationState`; only the
state's per-bin sums, and the fine histogram of the confidences when the sorted
and smoothed metrics are asked for, outlive a batch. Those metrics then read
the files again, usually once, to collect the few samples whose order the
histogram leaves open (:meth:`~reliacal.metrics.CalibrationState.refinement`):
memory stays constant whatever the number of rows. The columns are read as
:func:`reliacal.io.load_prediction_file` reads a table (label column, class
columns, their order and names), decided on the first batch and then fixed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reliacal.metrics import CalibrationState, softmax

__all__ = ["BATCH_ROWS", "is_parquet_input", "parquet_files", "stream_parquet"]

# Rows per batch: 2**16 rows of 10 float64 classes are 5 MB.
BATCH_ROWS = 1 << 16


def is_parquet_input(path: str | Path) -> bool:
    """Whether ``path`` is a ``.parquet`` file or a folder (read as parquet files)."""
    path = Path(path)
    return path.is_dir() or path.suffix.lower() == ".parquet"


def parquet_files(path: str | Path) -> list[Path]:
    """The parquet files of ``path``: itself, or a folder's ``*.parquet`` files in name order.

    Files whose name starts with ``_`` or ``.`` (Spark's ``_SUCCESS``, hidden
    files) are skipped, as pyarrow's datasets skip them.

    Examples
    --------
    >>> parquet_files("missing.parquet")
    Traceback (most recent call last):
    ...
    FileNotFoundError: missing.parquet does not exist
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(
            file
            for file in path.rglob("*.parquet")
            if file.is_file() and not file.name.startswith(("_", "."))
        )
        if not files:
            raise ValueError(f"{path.name}: the folder holds no .parquet files")
        return files
    if not path.exists():
        raise FileNotFoundError(f"{path.name} does not exist")
    return [path]


@dataclass(frozen=True)
class _Columns:
    """Where the labels and the class columns (in class order) are, fixed by the first batch."""

    label_column: str
    value_columns: list[str]
    classes: np.ndarray | None
    description: str


def _columns(path: Path, frame, probs_key, labels_key, classes) -> _Columns:
    from reliacal.io._prediction_files import _arrange_table, _given_classes, table_from_frame

    table = table_from_frame(path, frame, probs_key, labels_key, labels_in_table=True)
    table = _arrange_table(path, table, table.labels, classes)
    if classes is not None:
        classes = _given_classes(path, classes, table.labels, table.values)
    else:
        classes = table.classes
    return _Columns(table.label_column, table.columns, classes, table.description)


@contextmanager
def _named_in_errors(file: Path, root: Path) -> Iterator[None]:
    """Name ``file`` in pyarrow's errors about it: a junk or damaged file in a folder.

    pyarrow's messages ("Parquet magic bytes not found in footer") do not say
    which file of a folder they are about.
    """
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, OSError) as error:
        shown = file.relative_to(root.parent) if root.is_dir() else Path(file.name)
        raise ValueError(f"{shown} is not a readable parquet file: {error}") from None


def _frames(file: Path, root: Path, batch_rows: int) -> Iterator:
    """The batches of rows of one parquet file, as DataFrames; pyarrow's errors name the file."""
    import pyarrow.parquet as pq

    with _named_in_errors(file, root):
        # pre_buffer (pyarrow's default) coalesces reads ahead and held the whole file
        # in pyarrow's pool (221 MiB of a 221 MiB file, measured); unbuffered reads of
        # at most 1 MiB keep it to about one row group's columns.
        with pq.ParquetFile(file, pre_buffer=False, buffer_size=1 << 20) as handle:
            for batch in handle.iter_batches(batch_size=batch_rows):
                yield batch.to_pandas()


class _Reader:
    """The batches of parquet files as ``(labels, values)``, read again on every pass."""

    def __init__(self, files, root, *, probs_key, labels_key, logits, classes, batch_rows):
        self.files, self.root = files, root
        self.probs_key, self.labels_key = probs_key, labels_key
        self.logits, self.classes = logits, classes
        self.batch_rows = batch_rows
        self.columns: _Columns | None = None

    def feed(self, consume, bar, start=None) -> None:
        """``consume(labels, values)`` for every batch; ``start(columns)`` before the first.

        A ``ValueError`` names the file and, where the values look like logits, says so.
        """
        from reliacal._validation import check_logits
        from reliacal.io._columns import names_logits
        from reliacal.io._prediction_files import (
            _explain_not_probabilities,
            warn_if_probabilities,
        )

        for file in self.files:
            for frame in _frames(file, self.root, self.batch_rows):
                first = self.columns is None
                if first:
                    self.columns = _columns(
                        file, frame, self.probs_key, self.labels_key, self.classes
                    )
                    # Columns logit_0, logit_1, ... hold logits, as their names say.
                    named_logits = not self.logits and names_logits(self.columns.value_columns)
                    self.logits = self.logits or named_logits
                if start is not None:
                    start(self.columns)
                    start = None
                columns = self.columns
                values = frame[columns.value_columns].to_numpy(dtype=np.float64)
                if len(columns.value_columns) == 1:
                    values = values[:, 0]
                if first and named_logits:
                    warn_if_probabilities(file, values, columns.description)
                labels = frame[columns.label_column].to_numpy()
                n_rows = len(frame)
                del frame
                try:
                    if self.logits:
                        values = softmax(check_logits(values, name="logits"))
                    consume(labels, values)
                except ValueError as error:
                    message = _explain_not_probabilities(
                        error, values, columns.value_columns, self.logits
                    )
                    raise ValueError(f"{file.name}: {message}") from None
                bar.update(n_rows)


def _progress_bar(total: int, name: str, progress):
    from tqdm.auto import tqdm

    # progress=None: a bar on stderr only when it is a terminal (tqdm's disable=None).
    # A given file (a log) gets every update; a terminal at most 10 a second.
    if progress is False:
        options = {"disable": True}
    elif progress is None:
        options = {"disable": None, "file": sys.stderr}
    else:
        options = {"file": progress, "mininterval": 0}
    return tqdm(total=total, unit="row", unit_scale=True, desc=name, leave=False, **options)


def stream_parquet(
    path: str | Path,
    *,
    n_bins: int = 15,
    probs_key: str | None = None,
    labels_key: str | None = None,
    logits: bool = False,
    classes=None,
    streamable_only: bool = False,
    batch_rows: int = BATCH_ROWS,
    progress=None,
) -> tuple[CalibrationState, str]:
    """The calibration state of a parquet file or folder, read batch by batch.

    Parameters
    ----------
    path : str or Path
        A ``.parquet`` file, or a folder of them (read in name order; every file
        must have the same columns).
    n_bins : int, default=15
        Bins of the binned metrics.
    probs_key, labels_key, logits, classes
        As :func:`reliacal.io.load_prediction_file` (``classes`` is its ``labels``).
    streamable_only : bool, default=False
        Read the files once, for the metrics that stream from bin sums. By default
        the state also gives the sorted and smoothed metrics: it keeps a fine
        histogram of the confidences, made exact by reading the files again
        (usually once more); memory stays constant either way.
    batch_rows : int, default=65536
        Rows per batch.
    progress : file-like, None or False, default=None
        Where the progress bar goes (one bar per pass); None: stderr, when it is a
        terminal; False: no bar.

    Returns
    -------
    (CalibrationState, str)
        The state and a description of the columns read, as the command prints it.

    Examples
    --------
    >>> import os, tempfile
    >>> import pandas as pd
    >>> path = os.path.join(tempfile.mkdtemp(), "preds.parquet")
    >>> pd.DataFrame({"p0": [0.9, 0.2], "p1": [0.1, 0.8], "label": [0, 1]}).to_parquet(path)
    >>> state, source = stream_parquet(path)
    >>> state.n_samples, source
    (2, "preds.parquet: probabilities from 2 columns (p0, p1), labels from column 'label'")
    >>> round(state.compute(["ks_error"])["ks_error"], 4)
    0.15
    """
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            "reading parquet batch by batch needs pyarrow: pip install pyarrow, or pip "
            "install 'reliacal[parquet]'"
        ) from None

    path = Path(path)
    files = parquet_files(path)
    # Schemas and row counts from the footers alone: one file open at a time, since a
    # Spark or Dask folder can hold more parts than the process may open at once.
    total = 0
    for file in files:
        with _named_in_errors(file, path):
            schema = pq.read_schema(file).names
            total += pq.read_metadata(file).num_rows
        if file == files[0]:
            names = schema
        elif schema != names:
            raise ValueError(
                f"{file.name} has other columns than {files[0].name}: every file of "
                f"{path.name} must have the same columns"
            )
    if total == 0:
        raise ValueError(f"{path.name} has no rows")
    reader = _Reader(
        files,
        path,
        probs_key=probs_key,
        labels_key=labels_key,
        logits=logits,
        classes=classes,
        batch_rows=batch_rows,
    )
    states = []

    def start(columns: _Columns) -> None:
        states.append(
            CalibrationState(n_bins, labels=columns.classes, histogram=not streamable_only)
        )

    with _progress_bar(total, path.name, progress) as bar:
        reader.feed(lambda labels, values: states[0].update(labels, values), bar, start)
    (state,) = states
    # The histogram's refining passes read the files again, until its metrics are exact.
    passes = 1
    while (refinement := state.refinement()) is not None:
        passes += 1
        with _progress_bar(total, f"{path.name} (pass {passes})", progress) as bar:
            reader.feed(refinement.update, bar)
        state.refine(refinement)
    columns, logits = reader.columns, reader.logits
    kind = "logits" if logits else "probabilities"
    source = f"{path.name}: {kind} from {columns.description}"
    source += " (softmax applied)" if logits else ""
    return state, f"{source}, labels from column {columns.label_column!r}"
