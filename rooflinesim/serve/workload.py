"""The requests a serving simulation replays: arrival times and prompt / output lengths.

Arrivals are Poisson (exponential gaps), Gamma with a coefficient of variation (CV 1 is Poisson; above 1 bursty,
below 1 smoother, as in vLLM's benchmark `--burstiness` = 1 / CV^2), or read from a JSONL trace with one object per
line: {"arrival_s": 0.12, "prompt_tokens": 512, "output_tokens": 128}. Lengths are fixed ("512"), uniform
("uniform:128:1024"), lognormal with a median and a sigma ("lognormal:512:0.8") or from the trace. Everything random
comes from one numpy Generator seeded by the user, so a run is reproducible.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..fileio import read_text_limited
from ..units import MIB

ARRIVAL_KINDS = ("poisson", "gamma")
#: no request is longer than this (a guard against a typo asking for 10^12 tokens)
MAX_REQUEST_TOKENS = 1 << 22
#: a trace line is one small JSON object; a trace holds a few million requests at most
MAX_TRACE_BYTES = 256 * MIB
MAX_TRACE_LINE_CHARS = 4096
# Ranges where the arithmetic of the generators stays finite and exact enough (no overflow of exp or of the Gamma
# shape 1 / cv^2, no zero division, no arrival time past float precision for a second's resolution):
#: Gamma inter-arrival CV (vLLM's --burstiness = 1 / CV^2 then lies in [1e-4, 1e4])
CV_RANGE = (0.01, 100.0)
#: request rates per second
RATE_RANGE_PER_S = (1e-6, 1e6)
#: lognormal sigma (at 8 the 99.99th percentile is e^30 times the median: every length above that is clipped)
MAX_LOGNORMAL_SIGMA = 8.0
#: latest arrival a trace may state (about 31 years)
MAX_ARRIVAL_S = 1e9


def check_rate_per_s(rate_per_s, what: str = "request rate") -> float:
    """A request rate inside RATE_RANGE_PER_S, or a one-line InputError that states the range."""
    lo, hi = RATE_RANGE_PER_S
    try:
        ok = not isinstance(rate_per_s, bool) and lo <= float(rate_per_s) <= hi
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"{what} must be between {lo:g} and {hi:g} requests per second, got {rate_per_s!r}")
    return float(rate_per_s)


def check_cv(cv, what: str = "--cv") -> float:
    """A Gamma arrival CV inside CV_RANGE, or a one-line InputError that states the range."""
    lo, hi = CV_RANGE
    try:
        ok = not isinstance(cv, bool) and lo <= float(cv) <= hi
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"{what} (the CV of Gamma inter-arrival gaps) must be between {lo:g} and {hi:g}, got {cv!r}")
    return float(cv)
TRUNCATED = "trunc-lognormal"
TRUNCATED_ROUNDS = 64
#: benchmark datasets by name: (prompt form, output form), each a form LengthDistribution.parse reads
NAMED_LENGTHS = {
    # vLLM's benchmark_serving.py sonnet dataset defaults: --sonnet-input-len 550, --sonnet-output-len 150 (the
    # prompt is built from lines of a sonnet up to ~550 tokens; the output is capped at 150 with ignore_eos)
    "sonnet": ("550", "150"),
    # ShareGPT as vLLM's benchmark_serving.py and SGLang's bench_serving.py sample it (prompt = the first human turn,
    # output = the first gpt turn; requests with prompt or output < 4 or prompt > 1024 tokens skipped). Lognormals
    # truncated to [4, 1024] with: means 202 / 179 tokens (vLLM v0.6.0 blog); a median output of 116 tokens (derived
    # from the SGLang v0.3 vs vLLM v0.6 README's online rows); the prompt's sigma 1.0 assumed; the output's cap of
    # 1024 fitted on two throughput rows. Sources and derivation: docs/serving.md "Length distributions"
    "sharegpt": ("trunc-lognormal:143:1.0:4:1024", "trunc-lognormal:119:1.07:4:1024"),
}


@dataclass(frozen=True)
class Requests:
    """Requests sorted by arrival; arrays of one entry per request."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    @property
    def count(self) -> int:
        return int(self.arrival_s.size)


@dataclass(frozen=True)
class LengthDistribution:
    """fixed (low = high), uniform integers in [low, high], lognormal(median = low, sigma) clipped to [1, high], or
    truncated lognormal(median = low, sigma) with draws outside [floor, high] drawn again (as a benchmark script
    skips the requests outside its length filter)."""

    kind: str
    low: float
    high: float
    sigma: float = 0.0
    floor: int = 1

    @classmethod
    def parse(cls, text, what: str) -> "LengthDistribution":
        """A form: 512, fixed:512, uniform:LOW:HIGH, lognormal:MEDIAN:SIGMA[:MAX], or a dataset name from
        NAMED_LENGTHS (its prompt or output lengths, by whether `what` names the output)."""
        name = str(text).strip().lower()
        if name in NAMED_LENGTHS:
            text = NAMED_LENGTHS[name][1 if "output" in what.lower() else 0]
        elif name.startswith("fixed:"):
            text = name.partition(":")[2]
        parts = str(text).strip().split(":")
        try:
            if len(parts) == 1:
                value = int(parts[0])
                dist = cls("fixed", value, value)
            elif parts[0] == "uniform" and len(parts) == 3:
                dist = cls("uniform", int(parts[1]), int(parts[2]))
            elif parts[0] == "lognormal" and len(parts) in (3, 4):
                cap = int(parts[3]) if len(parts) == 4 else MAX_REQUEST_TOKENS
                dist = cls("lognormal", float(parts[1]), cap, float(parts[2]))
            elif parts[0] == TRUNCATED and len(parts) == 5:
                dist = cls(TRUNCATED, float(parts[1]), int(parts[4]), float(parts[2]), int(parts[3]))
            else:
                raise ValueError
        except ValueError:
            import difflib

            close = difflib.get_close_matches(name, list(NAMED_LENGTHS), n=1, cutoff=0.6)
            if close:
                raise InputError(f"{what} {text!r}: unknown dataset; did you mean {close[0]}?") from None
            raise InputError(f"{what} {text!r}: use a token count (512 or fixed:512), uniform:LOW:HIGH, "
                             f"lognormal:MEDIAN:SIGMA[:MAX], {TRUNCATED}:MEDIAN:SIGMA:MIN:MAX or a dataset "
                             f"({', '.join(NAMED_LENGTHS)})") from None
        if not (1 <= dist.floor <= dist.low <= dist.high <= MAX_REQUEST_TOKENS) or \
                not 0 <= dist.sigma <= MAX_LOGNORMAL_SIGMA:
            raise InputError(f"{what} {text!r}: lengths must satisfy 1 <= low (or MIN <= median) <= high <= "
                             f"{MAX_REQUEST_TOKENS:,} and 0 <= sigma <= {MAX_LOGNORMAL_SIGMA:g}")
        return dist

    @property
    def typical_tokens(self) -> int:
        """The median length (fixed: the value; uniform: the middle; lognormal: its median)."""
        return int(round((self.low + self.high) / 2 if self.kind == "uniform" else self.low))

    @property
    def max_tokens(self) -> int:
        return int(self.high)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.low), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.low), int(self.high) + 1, size=n)
        if self.kind == TRUNCATED:
            return self._sample_truncated(rng, n)
        values = np.round(self.low * np.exp(self.sigma * rng.standard_normal(n)))
        return np.clip(values, 1, self.high).astype(np.int64)

    def _sample_truncated(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw, keep the lengths in [floor, high], draw again for the rest (a bounded number of rounds; the median
        lies inside the window, so each round keeps a share of the draws; whatever is left after them is clipped)."""
        kept, missing = [], n
        for _ in range(TRUNCATED_ROUNDS):
            if not missing:
                break
            values = np.round(self.low * np.exp(self.sigma * rng.standard_normal(2 * missing + 8)))
            inside = values[(values >= self.floor) & (values <= self.high)][:missing]
            kept.append(inside)
            missing -= inside.size
        if missing:
            kept.append(np.full(missing, float(self.low)))
        return np.concatenate(kept).astype(np.int64)


def get_arrival_times_s(rng: np.random.Generator, n: int, rate_per_s: float, kind: str = "poisson",
                        cv: float = 1.0) -> np.ndarray:
    """n arrival times of a renewal process with mean rate `rate_per_s`: exponential gaps (Poisson) or Gamma gaps
    with coefficient of variation `cv` (shape 1 / cv^2, mean 1 / rate). An infinite rate sends every request at
    t = 0 (`--rate inf`, as the engines' benchmark scripts do for their offline-throughput runs)."""
    if rate_per_s == math.inf:
        return np.zeros(n)
    rate_per_s = check_rate_per_s(rate_per_s)
    if kind not in ARRIVAL_KINDS:
        raise InputError(f"arrivals must be one of {', '.join(ARRIVAL_KINDS)} (or a --trace), got {kind!r}")
    if kind == "poisson":
        gaps = rng.exponential(1.0 / rate_per_s, n)
    else:
        shape = 1.0 / check_cv(cv) ** 2
        gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), n)
    return np.cumsum(gaps)


def generate_requests(n: int, rate_per_s: float, prompt: LengthDistribution, output: LengthDistribution,
                      seed: int = 0, arrivals: str = "poisson", cv: float = 1.0) -> Requests:
    rng = np.random.default_rng(seed)
    arrival = get_arrival_times_s(rng, n, rate_per_s, arrivals, cv)
    return Requests(arrival, prompt.sample(rng, n), output.sample(rng, n))


def load_trace(path: str | Path, rate_scale: float | None = None) -> Requests:
    """A JSONL trace: one {"arrival_s", "prompt_tokens", "output_tokens"} object per line (blank lines skipped).
    `rate_scale` multiplies the trace's request rate (arrival times are divided by it)."""
    path = Path(path)
    lines = read_text_limited(path, "trace", MAX_TRACE_BYTES, MAX_TRACE_LINE_CHARS).splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            row = (float(item["arrival_s"]), int(item["prompt_tokens"]), int(item["output_tokens"]))
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            raise InputError(f"{path}:{number}: each line must be a JSON object with arrival_s, prompt_tokens and "
                             "output_tokens") from None
        if not (0 <= row[0] <= MAX_ARRIVAL_S and 1 <= row[1] <= MAX_REQUEST_TOKENS and
                1 <= row[2] <= MAX_REQUEST_TOKENS):
            raise InputError(f"{path}:{number}: arrival_s must be in 0..{MAX_ARRIVAL_S:g} s and token counts in "
                             f"1..{MAX_REQUEST_TOKENS:,}")
        rows.append(row)
    if not rows:
        raise InputError(f"trace {str(path)!r} has no requests")
    data = np.asarray(sorted(rows), dtype=float)
    arrival = data[:, 0] / (rate_scale or 1.0)
    return Requests(arrival, data[:, 1].astype(np.int64), data[:, 2].astype(np.int64))


__all__ = ["Requests", "LengthDistribution", "check_cv", "check_rate_per_s", "CV_RANGE", "RATE_RANGE_PER_S",
           "MAX_LOGNORMAL_SIGMA", "generate_requests", "load_trace", "get_arrival_times_s",
           "ARRIVAL_KINDS"]
