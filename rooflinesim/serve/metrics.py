"""What a serving simulation measured: per-request latencies, their percentiles, throughput, goodput under SLOs, and
the engine's state over time.

TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1), per request with more than one
output token; ITL = the gaps between a request's successive emissions (with speculation several tokens arrive at
once: one gap per step, as a streaming client sees them); end-to-end latency = finish - arrival. Output throughput =
output tokens / the time from the first arrival to the last finish. Goodput = completed requests per second that met
every SLO given (TTFT and / or TPOT) (DistServe instead reports the highest rate at which a target share of requests
meets them; a rate sweep with --slo-* gives the curve to read it from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ..specs.registry import get_short_name

PERCENTILES = (50, 90, 99)
#: columns of ServeResult.timeline, one row per engine step
TIMELINE_COLUMNS = ("start_s", "duration_s", "running", "waiting", "kv_blocks_used", "k", "scheduled_tokens")


def _percentiles(values: np.ndarray) -> dict:
    values = values[np.isfinite(values)]
    out = {f"p{p}": float(np.percentile(values, p)) if values.size else None for p in PERCENTILES}
    out["mean"] = float(values.mean()) if values.size else None
    return out


@dataclass(frozen=True)
class ServeResult:
    hardware: str
    model: str
    draft: str | None
    policy: str
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_blocks: int
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    timeline: np.ndarray  # (steps, len(TIMELINE_COLUMNS))
    itl_s: np.ndarray
    warnings: tuple[str, ...] = field(default=())
    engine: str = "ideal"  # the engine profile whose costs priced the steps (docs/engines.md)

    @classmethod
    def build(cls, scenario, policy, config, requests, first_token_s, finish_s, preemptions, timeline, itl_s,
              kv_blocks) -> "ServeResult":
        return cls(get_short_name(scenario.hardware), get_short_name(scenario.model),
                   scenario.drafter.name if scenario.drafter is not None and policy.deployed else None, policy.name,
                   config.max_num_seqs, config.max_num_batched_tokens, kv_blocks, requests.arrival_s,
                   requests.prompt_tokens, requests.output_tokens, first_token_s, finish_s, preemptions, timeline,
                   itl_s, scenario.warnings, getattr(scenario, "engine_name", "ideal"))

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output_tokens > 1, (self.finish_s - self.first_token_s) / (self.output_tokens - 1),
                            np.nan)

    @property
    def latency_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def duration_s(self) -> float:
        return float(np.nanmax(self.finish_s) - self.arrival_s.min())

    @property
    def output_tokens_per_s(self) -> float:
        return float(self.output_tokens.sum()) / self.duration_s

    @property
    def requests_per_s(self) -> float:
        return self.arrival_s.size / self.duration_s

    def get_goodput_requests_per_s(self, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> float:
        ok = np.isfinite(self.finish_s)
        if slo_ttft_s is not None:
            ok &= self.ttft_s <= slo_ttft_s
        if slo_tpot_s is not None:
            ok &= np.nan_to_num(self.tpot_s, nan=0.0) <= slo_tpot_s
        return float(ok.sum()) / self.duration_s

    def get_time_average(self, column: str) -> float:
        """A timeline column averaged over time (idle gaps between steps count as 0 running and 0 waiting)."""
        t = self.timeline
        values = t[:, TIMELINE_COLUMNS.index(column)]
        return float((values * t[:, 1]).sum() / self.duration_s) if t.size else 0.0

    def get_busy_average(self, column: str) -> float:
        """A timeline column averaged over the time the engine was busy (stepping)."""
        t = self.timeline
        values = t[:, TIMELINE_COLUMNS.index(column)]
        return float((values * t[:, 1]).sum() / t[:, 1].sum()) if t.size else 0.0

    @property
    def mean_batch(self) -> float:
        """Mean running requests over the time the engine was busy."""
        return self.get_busy_average("running")

    def get_summary(self, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None) -> dict:
        t = self.timeline
        return {
            "hardware": self.hardware, "model": self.model, "draft": self.draft, "policy": self.policy,
            "engine": self.engine,
            "requests": int(self.arrival_s.size), "offered_rate_per_s": float(self.arrival_s.size /
                                                                                max(self.arrival_s.max(), 1e-12)),
            "duration_s": self.duration_s, "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "goodput_requests_per_s": self.get_goodput_requests_per_s(slo_ttft_s, slo_tpot_s),
            "slo_ttft_s": slo_ttft_s, "slo_tpot_s": slo_tpot_s,
            "ttft_s": _percentiles(self.ttft_s), "tpot_s": _percentiles(self.tpot_s), "itl_s": _percentiles(self.itl_s),
            "latency_s": _percentiles(self.latency_s),
            "mean_batch": self.mean_batch, "max_batch": int(t[:, 2].max()) if t.size else 0,
            "mean_in_system": self.get_time_average("running") + self.get_time_average("waiting"),
            "mean_kv_occupancy": self.get_busy_average("kv_blocks_used") / self.kv_blocks,
            "peak_kv_occupancy": float(t[:, 4].max() / self.kv_blocks) if t.size else 0.0,
            "kv_blocks": self.kv_blocks, "preemptions": int(self.preemptions.sum()), "steps": int(t.shape[0]),
            "mean_k": self.get_busy_average("k"),
            "warnings": list(self.warnings),
        }

    def get_request_rows(self) -> list[dict]:
        """One row per request (the -o log)."""
        ttft, tpot, latency = self.ttft_s, self.tpot_s, self.latency_s
        return [{"id": i, "arrival_s": float(self.arrival_s[i]), "prompt_tokens": int(self.prompt_tokens[i]),
                 "output_tokens": int(self.output_tokens[i]), "ttft_s": float(ttft[i]),
                 "tpot_s": None if np.isnan(tpot[i]) else float(tpot[i]), "latency_s": float(latency[i]),
                 "finish_s": float(self.finish_s[i]), "preemptions": int(self.preemptions[i])}
                for i in range(self.arrival_s.size)]

    def get_request_log_jsonl(self) -> str:
        return "".join(json.dumps(row) + "\n" for row in self.get_request_rows())


__all__ = ["ServeResult", "PERCENTILES", "TIMELINE_COLUMNS"]
