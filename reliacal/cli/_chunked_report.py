"""The command's metric table, computed from row blocks so that memory stays near the input's.

:func:`reliacal.metrics.calibration_report` summarises a whole probability
matrix at once; on a file of hundreds of megabytes its per-sample temporaries
cost several times the file. Here each model's rows feed a
:class:`reliacal.metrics.CalibrationState` block by block: the state keeps
per-bin sums and one confidence and one correctness flag per sample, so once
the states are built the matrices can be freed before the quantile-bin and
smoothed metrics are computed. The values equal ``calibration_report``'s up
to floating-point summation order.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from reliacal.metrics import CalibrationState
from reliacal.metrics._registry import REPORT_COLUMNS, STREAMABLE
from reliacal.metrics._report import model_table, per_model

__all__ = ["BLOCK_ROWS", "STREAMABLE_COLUMNS", "metric_states", "report_from_states"]

# The report's columns that stream from bin sums: all a state without confidences has.
STREAMABLE_COLUMNS = tuple(name for name in REPORT_COLUMNS if name in STREAMABLE)

# Rows per block: 2**16 rows of 1,000 float64 classes are 0.5 GB of input, but the
# per-block temporaries are O(rows), a few megabytes.
BLOCK_ROWS = 1 << 16


def metric_states(
    y_true,
    predictions: Mapping[str, np.ndarray],
    *,
    n_bins: int,
    labels=None,
    keep_confidences: bool = True,
) -> dict[str, CalibrationState]:
    """One streaming state per model, fed ``BLOCK_ROWS`` rows at a time.

    Parameters
    ----------
    y_true : ndarray of shape (n,)
        True labels, shared by the models.
    predictions : mapping of str to ndarray of shape (n, K) or (n,)
        Model name to probabilities.
    n_bins : int
        Bins of the binned metrics.
    labels : array-like of shape (K,), optional
        The class of each column.
    keep_confidences : bool, default=True
        Keep what the sorted and smoothed columns need (False: the streamable
        columns only, in constant memory).

    Returns
    -------
    dict of str to CalibrationState

    Raises
    ------
    ValueError
        As :func:`reliacal.metrics.calibration_report` does, the message
        starting with the model's name.

    Examples
    --------
    >>> y = np.array([0, 1, 1, 0])
    >>> probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]])
    >>> states = metric_states(y, {"sharp": probs}, n_bins=15)
    >>> states["sharp"].n_samples
    4
    """
    y_true = np.asarray(y_true)

    def state_of(_name: str, y_prob) -> CalibrationState:
        y_prob = np.asarray(y_prob)
        if y_prob.shape[:1] != y_true.shape[:1]:
            raise ValueError(
                "y_true and y_prob have different lengths: "
                f"{y_true.shape[0]} labels for {y_prob.shape[0]} rows of probabilities"
            )
        state = CalibrationState(n_bins, labels=labels, keep_confidences=keep_confidences)
        for start in range(0, max(len(y_true), 1), BLOCK_ROWS):
            stop = start + BLOCK_ROWS
            state.update(y_true[start:stop], y_prob[start:stop])
        return state

    return per_model(predictions, state_of)


def report_from_states(
    states: Mapping[str, CalibrationState], columns=REPORT_COLUMNS
) -> pd.DataFrame:
    """The table of :func:`reliacal.metrics.calibration_report` from streaming states.

    Parameters
    ----------
    states : mapping of str to CalibrationState
        Model name to a state built with ``keep_confidences=True`` (or any state,
        with ``columns=STREAMABLE_COLUMNS``).
    columns : sequence of str, default: every column of the report
        The columns to compute.

    Returns
    -------
    pandas.DataFrame
        One row per model (index ``model``), the columns of
        ``calibration_report``.

    Examples
    --------
    >>> from reliacal.metrics import calibration_report
    >>> y = np.array([0, 1, 1, 0])
    >>> probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]])
    >>> table = report_from_states(metric_states(y, {"sharp": probs}, n_bins=15))
    >>> expected = calibration_report(y, {"sharp": probs})
    >>> bool(np.allclose(table.to_numpy(), expected.to_numpy(), rtol=1e-12))
    True
    """
    return model_table(per_model(states, lambda _name, state: state.compute(columns)))
