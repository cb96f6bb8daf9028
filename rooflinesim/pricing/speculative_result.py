"""The answer of a speculative analysis at one point (`speculative.analyse_speculation`): the chosen and best draft
length, their step times and speedup, the table over k, and the intervals `sensitivity.add_intervals` fills in."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..timing import Z90
from .speedup_band import get_speedup_verdict


@dataclass(frozen=True)
class SpeculativeResult:
    draft: str
    drafter_kind: str
    k: int
    alpha: float | None
    alpha_per_position: list[float] | None
    expected_tokens: float
    target_decode_time_s: float
    draft_step_time_s: float
    draft_cold_step_time_s: float
    draft_warm_step_time_s: float
    verify_step_time_s: float
    step_time_s: float
    speedup: float
    fits_in_memory: bool
    best_k: int
    best_speedup: float
    k_table: list[dict] = field(default_factory=list)
    acceptance_source: str | None = None  # a measured or published acceptance: where it came from
    batch: int = 1  # sequences decoded together: the aggregate throughput is batch x E / step time
    #: the best k and its speedup at alpha - 0.1, alpha, alpha + 0.1 (i.i.d. acceptance only), and the one k that
    #: loses least across them (`robust_k`, with its worst share of each alpha's best speedup)
    speedup_by_alpha: list[dict] | None = None
    robust_k: int | None = None
    robust_k_worst_share: float | None = None
    #: E's interval from a measured acceptance's confidence interval (None: acceptance given as numbers), and where
    #: the intervals come from (a measured profile, the datasheet band, the acceptance interval), in words
    expected_tokens_interval: tuple[float, float] | None = None
    interval_source: str | None = None
    #: 90 % prediction intervals ((low, high) s, or x for the speedup) under a measured profile; None under the
    #: datasheet roofline
    draft_step_interval: tuple[float, float] | None = None
    verify_step_interval: tuple[float, float] | None = None
    step_interval: tuple[float, float] | None = None
    speedup_interval: tuple[float, float] | None = None
    tree: str | None = None  # a draft tree's shape (then draft_step_time_s is its drafting spread over its k tokens)

    @property
    def verdict(self) -> str:
        """'pays', 'does_not_pay' or 'uncertain' (1.0x inside the speedup's interval; `speedup_band`)."""
        return get_speedup_verdict(self.speedup, self.speedup_interval)

    def to_dict(self) -> dict:
        return {
            "tree": self.tree,
            "draft": self.draft,
            "drafter_kind": self.drafter_kind,
            "k": self.k,
            "alpha": self.alpha,
            "alpha_per_position": self.alpha_per_position,
            "expected_tokens": self.expected_tokens,
            "target_decode_time_s": self.target_decode_time_s,
            "draft_step_time_s": self.draft_step_time_s,
            "draft_cold_step_time_s": self.draft_cold_step_time_s,
            "draft_warm_step_time_s": self.draft_warm_step_time_s,
            "verify_step_time_s": self.verify_step_time_s,
            "step_time_s": self.step_time_s,
            "speedup": self.speedup,
            "fits_in_memory": self.fits_in_memory,
            "tokens_per_s": self.batch * self.expected_tokens / self.step_time_s,  # aggregate, as decode's
            "tokens_per_s_per_sequence": self.expected_tokens / self.step_time_s,
            "best_k": self.best_k,
            "best_speedup": self.best_speedup,
            "speedup_by_k": self.k_table,
            "speedup_by_alpha": self.speedup_by_alpha,
            "robust_k": self.robust_k,
            "robust_k_worst_share": self.robust_k_worst_share,
            "acceptance_source": self.acceptance_source,
            **_interval_keys("draft_step_time_s", self.draft_step_interval),
            **_interval_keys("verify_step_time_s", self.verify_step_interval),
            **_interval_keys("step_time_s", self.step_interval),
            **_interval_keys("speedup", self.speedup_interval),
            "speedup_verdict": self.verdict,
            **_interval_keys("expected_tokens", self.expected_tokens_interval),
            "interval_source": self.interval_source,
        }


def _interval_keys(name: str, interval: tuple[float, float] | None) -> dict:
    """`<name>_low` / `<name>_high`: always present, null without an interval (the datasheet roofline)."""
    low, high = interval if interval is not None else (None, None)
    return {f"{name}_low": low, f"{name}_high": high}


def get_interval(value: float, rel_sigma) -> tuple[float, float] | None:
    """The 90 % interval value x exp(-/+ 1.645 sigma) (log-symmetric: errors are ratios); None without a sigma."""
    if rel_sigma is None:
        return None
    return (value * float(np.exp(-Z90 * rel_sigma)), value * float(np.exp(Z90 * rel_sigma)))


__all__ = ["SpeculativeResult", "get_interval"]
