"""Argument checks shared by the acceptance modules (private).

Every public acceptance function validates its inputs the same way: probabilities in [0, 1] (NaN rejected),
draft counts as non-negative integers, distributions along the last (vocabulary) axis summing to 1.  Each
check raises ``ValueError`` with the argument's name.
"""

from __future__ import annotations

import numpy as np


def _as_probability(x, name: str) -> np.ndarray:
    """``x`` as a float array, checked to lie in [0, 1] (NaN rejected)."""
    arr = np.asarray(x, dtype=float)
    if not np.all((arr >= 0.0) & (arr <= 1.0)):
        raise ValueError(f"{name} must lie in [0, 1]")
    return arr


def _as_nonnegative_int(k, name: str = "k") -> np.ndarray:
    """``k`` as an int64 array, checked to be integer-valued and >= 0."""
    arr = np.asarray(k)
    if not np.issubdtype(arr.dtype, np.integer):
        as_float = arr.astype(float)
        if not np.all(np.isfinite(as_float) & (as_float == np.round(as_float))):
            raise ValueError(f"{name} must be integer-valued")
        arr = as_float
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0")
    return arr


def _as_distribution(p, name: str) -> np.ndarray:
    """``p`` as a float array with a vocabulary (last) axis of non-negative entries summing to ~1."""
    arr = np.asarray(p, dtype=float)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} needs a non-empty last (vocabulary) axis")
    if not np.all(arr >= 0.0):
        raise ValueError(f"{name} must be non-negative")
    if not np.allclose(arr.sum(axis=-1), 1.0, rtol=0.0, atol=1e-6):
        raise ValueError(f"{name} must sum to 1 along the last axis")
    return arr


def _scalar_or_array(x: np.ndarray):
    """0-d arrays become numpy scalars; other arrays are returned unchanged."""
    return x[()] if x.ndim == 0 else x
