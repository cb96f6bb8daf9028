"""Acceptance measured somewhere (an engine's logs or metrics, a preset, your own models) as one typed result.

Two kinds of evidence reach this module:

* **Counts per draft position** (vLLM V1 logs and Prometheus counters, `rooflinesim acceptance measure`): ``n_drafts``
  speculative steps and ``reached[i]``, the number of steps whose first ``i + 1`` drafts were all accepted. The
  conditional acceptance of position ``i`` (the ``a_i`` of :mod:`.closed_form`) is ``reached[i] / reached[i - 1]``
  (``reached[-1] = n_drafts``): a binomial proportion, so each gets an exact Clopper-Pearson interval. The full
  distribution of committed tokens is known, so E gets a normal interval from its sample variance.
* **A mean only** (vLLM V0's system efficiency, SGLang's accept length, TensorRT-LLM's acceptance length, published
  tau): E at the logged k. The per-position shape is unknown; the i.i.d. ``alpha`` with the same E at that k
  (:func:`~.closed_form.alpha_from_expected_tokens_iid`) stands in for it, and the result says so in its warnings.

Everything here is numpy/scipy; the parsers live in :mod:`.engines`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .closed_form import (
    alpha_from_expected_tokens_iid, committed_tokens_distribution, expected_tokens_iid, get_expected_tokens,
)


#: two-sided confidence level of every interval reported
CONFIDENCE = 0.95


def _stats():
    """scipy.stats, imported on first use: the command-line parser imports this module, and importing scipy.stats
    takes longer than answering a `predict`."""
    from scipy import stats

    return stats


class AcceptanceSourceError(InputError):
    """A source of acceptance that cannot give a trustworthy number; the message is one line for the user."""


def clopper_pearson(successes, trials, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper-Pearson) binomial interval for successes / trials, vectorised; [0, 1] where trials is 0."""
    x = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    tail = (1.0 - confidence) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(x > 0, _stats().beta.ppf(tail, x, n - x + 1), 0.0)
        high = np.where(x < n, _stats().beta.ppf(1.0 - tail, x + 1, n - x), 1.0)
    return np.nan_to_num(low, nan=0.0), np.nan_to_num(high, nan=1.0)


@dataclass(frozen=True)
class MeasuredAcceptance:
    """Acceptance of one deployment at its logged draft length k.

    `per_position` holds conditional rates (probability draft i is accepted given drafts 1..i-1 were) when the source
    counts positions, else None; `iid_alpha` is always the i.i.d. rate with the same E at k. Intervals are
    `CONFIDENCE` two-sided. `warnings` are meant for the user as is (they join `Scenario.warnings`).
    """

    engine: str
    source: str
    k: int
    expected_tokens: float
    iid_alpha: float
    expected_tokens_ci: tuple[float, float] | None = None
    iid_alpha_ci: tuple[float, float] | None = None
    per_position: tuple[float, ...] | None = None
    per_position_ci: tuple[tuple[float, float], ...] | None = None
    n_drafts: int | None = None
    reached: tuple[int, ...] | None = None  # steps whose first i + 1 drafts were accepted, i = 0..k-1
    records: int = 1
    warnings: tuple[str, ...] = ()
    conditions: dict = field(default_factory=dict)  # what a preset or a log states: task, temperature, shape, ...

    @property
    def committed_tokens_pmf(self) -> np.ndarray:
        """P(n committed tokens), n = 1..k+1, from the per-position rates (or the i.i.d. rate)."""
        rates = self.per_position if self.per_position is not None else (self.iid_alpha,) * self.k
        return committed_tokens_distribution(np.asarray(rates, dtype=float))

    def expected_tokens_by_k(self, max_k: int | None = None) -> list[dict]:
        """E at k' = 0..max_k: from the per-position rates up to the logged k ('measured'), and beyond it (or for a
        mean-only source everywhere but at k) from the i.i.d. rate ('i.i.d. extrapolation')."""
        max_k = self.k if max_k is None else max_k
        rows = []
        for kk in range(max_k + 1):
            if self.per_position is not None and kk <= self.k:
                e = float(get_expected_tokens(kk, None, self.per_position))
                basis = "measured"
            else:
                e = float(expected_tokens_iid(self.iid_alpha, kk))
                basis = "measured" if kk == self.k else "i.i.d. extrapolation"
            rows.append({"k": kk, "expected_tokens": e, "basis": basis})
        return rows

    def describe(self) -> str:
        """One line: where the acceptance comes from and what it is."""
        ci = "" if self.expected_tokens_ci is None else (
            f" [{self.expected_tokens_ci[0]:.3f}, {self.expected_tokens_ci[1]:.3f}]")
        what = (f"per position {', '.join(f'{a:.3f}' for a in self.per_position)}" if self.per_position is not None
                else f"i.i.d. alpha {self.iid_alpha:.3f} inferred from E")
        drafts = "" if self.n_drafts is None else f", {self.n_drafts:,} drafts"
        where = self.engine if self.engine == self.source else f"{self.engine} ({self.source})"
        return f"{where}: k = {self.k}, E = {self.expected_tokens:.3f}{ci}, {what}{drafts}"

    def to_dict(self) -> dict:
        return {
            "engine": self.engine, "source": self.source, "k": self.k, "expected_tokens": self.expected_tokens,
            "expected_tokens_ci": None if self.expected_tokens_ci is None else list(self.expected_tokens_ci),
            "confidence": CONFIDENCE, "iid_alpha": self.iid_alpha,
            "iid_alpha_ci": None if self.iid_alpha_ci is None else list(self.iid_alpha_ci),
            "per_position": None if self.per_position is None else list(self.per_position),
            "per_position_ci": None if self.per_position_ci is None else [list(c) for c in self.per_position_ci],
            "n_drafts": self.n_drafts, "reached": None if self.reached is None else list(self.reached),
            "committed_tokens_pmf": self.committed_tokens_pmf.tolist(), "records": self.records,
            "expected_tokens_by_k": self.expected_tokens_by_k(max(self.k, 8)), "conditions": dict(self.conditions),
            "warnings": list(self.warnings),
        }


def from_position_counts(engine: str, source: str, n_drafts: int, reached, records: int = 1,
                         warnings=(), conditions=None) -> MeasuredAcceptance:
    """Counts per position -> conditional rates with exact intervals, E with a normal interval, the i.i.d. alpha.

    `reached[i]` counts steps whose drafts 0..i were all accepted (vLLM's accepted-per-position counter); it must
    not increase with i. Positions after the first one never reached (reached[i - 1] = 0) carry no evidence: they
    are dropped, with a warning, so k shrinks to the positions measured.
    """
    reached = np.asarray(reached, dtype=np.int64)
    warnings = list(warnings)
    if n_drafts <= 0:
        raise AcceptanceSourceError(f"{source}: no speculative steps were counted (0 drafts)")
    if reached.size == 0:
        raise AcceptanceSourceError(f"{source}: no per-position counts (k = 0)")
    if np.any(reached < 0) or reached[0] > n_drafts or np.any(np.diff(reached) > 0):
        raise AcceptanceSourceError(
            f"{source}: per-position accepted counts {reached.tolist()} are not a non-increasing sequence at most the "
            f"{n_drafts} drafts: not vLLM-style prefix counts")
    trials = np.concatenate([[n_drafts], reached[:-1]])
    usable = int(np.argmax(trials == 0)) if np.any(trials == 0) else reached.size
    if usable < reached.size:
        warnings.append(f"{source}: no draft got past position {usable}: positions {usable + 1}..{reached.size} have "
                        f"no evidence and are left out (k = {usable})")
        reached, trials = reached[:usable], trials[:usable]
    k = int(reached.size)
    rates = reached / trials
    low, high = clopper_pearson(reached, trials)
    # accepted drafts per step: exactly j accepted for reached[j-1] - reached[j] steps
    counts = -np.diff(np.concatenate([[n_drafts], reached, [0]]))
    values = np.arange(k + 1)
    mean = float((counts * values).sum() / n_drafts)
    var = float((counts * (values - mean) ** 2).sum() / max(n_drafts - 1, 1))
    half = _stats().norm.ppf(0.5 + CONFIDENCE / 2) * np.sqrt(var / n_drafts)
    expected = 1.0 + mean
    e_ci = (float(max(1.0, expected - half)), float(min(k + 1.0, expected + half)))
    alpha = float(alpha_from_expected_tokens_iid(expected, k))
    alpha_ci = tuple(float(alpha_from_expected_tokens_iid(e, k)) for e in e_ci)
    return MeasuredAcceptance(
        engine=engine, source=source, k=k, expected_tokens=expected, iid_alpha=alpha, expected_tokens_ci=e_ci,
        iid_alpha_ci=alpha_ci, per_position=tuple(float(r) for r in rates),
        per_position_ci=tuple((float(a), float(b)) for a, b in zip(low, high)), n_drafts=int(n_drafts),
        reached=tuple(int(r) for r in reached), records=records, warnings=tuple(warnings),
        conditions=dict(conditions or {}))


def from_mean_length(engine: str, source: str, expected_tokens: float, k: int, records: int = 1,
                     expected_tokens_ci=None, n_drafts: int | None = None, warnings=(), conditions=None,
                     say_iid: bool = True) -> MeasuredAcceptance:
    """E (committed tokens per step, the bonus token included) at draft length k -> the i.i.d. alpha with the same E.

    An E outside [1, k + 1] is no acceptance this k can produce (a wrong k, or a tree's accepted length): refused.
    Without an interval from the source, one is derived from `n_drafts` under the i.i.d. model when that is known.
    """
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise AcceptanceSourceError(f"{source}: the draft length k must be a positive integer, got {k!r}")
    if not np.isfinite(expected_tokens) or not 1.0 - 1e-9 <= expected_tokens <= k + 1.0 + 1e-9:
        raise AcceptanceSourceError(
            f"{source}: mean acceptance length {expected_tokens:g} is outside [1, k + 1] = [1, {k + 1}] for k = {k}: "
            "is k right (a tree counts more candidates than its depth)?")
    expected = float(min(max(expected_tokens, 1.0), k + 1.0))
    alpha = float(alpha_from_expected_tokens_iid(expected, k))
    if expected_tokens_ci is None and n_drafts:
        pmf = committed_tokens_distribution(np.full(k, alpha))
        n = np.arange(1, k + 2)
        sd = float(np.sqrt((pmf * (n - expected) ** 2).sum()))
        half = _stats().norm.ppf(0.5 + CONFIDENCE / 2) * sd / np.sqrt(n_drafts)
        expected_tokens_ci = (expected - half, expected + half)
    e_ci = alpha_ci = None
    if expected_tokens_ci is not None:
        e_ci = (float(max(1.0, expected_tokens_ci[0])), float(min(k + 1.0, expected_tokens_ci[1])))
        alpha_ci = tuple(float(alpha_from_expected_tokens_iid(e, k)) for e in e_ci)
    warnings = list(warnings)
    if say_iid:
        warnings.append(f"{source}: only a mean acceptance length is known (E = {expected:.3f} at k = {k}); "
                        f"per-position acceptance is taken as i.i.d. alpha = {alpha:.3f}, which gives the same E at "
                        "that k but not the real decay over positions")
    return MeasuredAcceptance(
        engine=engine, source=source, k=int(k), expected_tokens=expected, iid_alpha=alpha, expected_tokens_ci=e_ci,
        iid_alpha_ci=alpha_ci, n_drafts=n_drafts, records=records, warnings=tuple(warnings),
        conditions=dict(conditions or {}))


__all__ = ["CONFIDENCE", "AcceptanceSourceError", "MeasuredAcceptance", "clopper_pearson", "from_position_counts",
           "from_mean_length"]
