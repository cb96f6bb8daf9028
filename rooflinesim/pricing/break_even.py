"""Where speculation stops paying: the best draft length among those that fit, the break-even batch among the
batches that fit, and the verdict a break-even value means. Memory is its own answer (`Scenario.get_max_batch`)."""

from __future__ import annotations

import numpy as np


def get_best_k_index(speedup: np.ndarray, fits: np.ndarray, axis: int) -> np.ndarray:
    """Index along `axis` of the best speedup among the draft lengths that fit in memory (among all of them where
    none fits: the point is then infeasible anyway, and reported as such)."""
    speedup, fits = np.broadcast_arrays(speedup, fits)
    any_fits = fits.any(axis=axis, keepdims=True)
    masked = np.where(fits | ~any_fits, speedup, -np.inf)
    return np.argmax(masked, axis=axis)


def get_break_even_batch(batch: np.ndarray, pays: np.ndarray, feasible: np.ndarray | None = None) -> np.ndarray:
    """The first batch from which speculation no longer pays, along axis 0 of `pays` (bool, batch first), counted
    among the batches that are `feasible` (fit in memory; default: all of them); -1 where it pays at every feasible
    batch of the grid, or where none is feasible. A dip followed by a recovery (a GEMM-shape artefact) does not
    count: the break-even is the first feasible batch after the last one at which speculation still pays. A batch
    that does not fit is a memory answer (`get_max_batch`), never a break-even. Front ends write -1 as None, and say
    which of "pays up to the largest batch that fits" or "nothing fits" it is (`get_break_even_verdict`)."""
    pays = np.asarray(pays, dtype=bool)
    feasible = np.ones_like(pays) if feasible is None else np.broadcast_to(np.asarray(feasible, dtype=bool), pays.shape)
    n = pays.shape[0]
    pays = pays & feasible
    any_pays = pays.any(axis=0)
    last = n - 1 - np.argmax(pays[::-1], axis=0)
    start = np.where(any_pays, last + 1, 0)
    index = np.arange(n).reshape((n,) + (1,) * (pays.ndim - 1))
    after = feasible & (index >= start)
    return np.where(after.any(axis=0), np.asarray(batch)[np.argmax(after, axis=0)], -1)


#: what a break-even batch means (JSON `speculation_verdict`)
VERDICT_STOPS_PAYING = "stops_paying"  # pays at small batches, stops at `break_even_batch` (a batch that fits)
VERDICT_NEVER_PAYS = "never_pays"  # loses at every batch that fits (`break_even_batch` is the first that fits)
VERDICT_PAYS_UP_TO_MAX_FIT = "pays_up_to_largest_fitting_batch"  # never stops paying, up to the largest that fits
VERDICT_NOTHING_FITS = "nothing_fits"  # no batch of the grid fits in memory while speculating


def get_break_even_verdict(break_even_batch, any_feasible, any_pays) -> np.ndarray:
    """The verdict per break-even value (see the VERDICT_ constants); `any_feasible` / `any_pays`: whether some batch
    fits, and whether speculation pays at some batch that fits."""
    be = np.asarray(break_even_batch)
    feasible, pays = np.asarray(any_feasible, dtype=bool), np.asarray(any_pays, dtype=bool)
    return np.where(~feasible, VERDICT_NOTHING_FITS, np.where(
        be < 0, VERDICT_PAYS_UP_TO_MAX_FIT, np.where(pays, VERDICT_STOPS_PAYING, VERDICT_NEVER_PAYS)))
