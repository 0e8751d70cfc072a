"""Uniform bin edges and the bin of each value: the definition every binned metric shares."""

from __future__ import annotations

import numpy as np


def uniform_edges(n_bins: int) -> np.ndarray:
    """Edges ``b / n_bins`` for ``b = 0..n_bins``, each computed by one division."""
    return np.arange(n_bins + 1, dtype=np.float64) / n_bins


def uniform_bin_index(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin of each value in [0, 1] for right-closed uniform bins.

    Equals ``np.searchsorted(uniform_edges(n_bins)[1:-1], values, side="left")``
    (the definition), computed faster: ``ceil(v * n_bins) - 1`` is off by at most one
    where ``v * n_bins`` rounds across an integer, and one comparison with the exact
    edges repairs that.
    """
    edges = uniform_edges(n_bins)
    index = np.ceil(values * n_bins).astype(np.intp)
    index -= 1
    np.clip(index, 0, n_bins - 1, out=index)
    index += values > edges[index + 1]
    index -= (values <= edges[index]) & (index > 0)
    return index
