"""Rate sweeps: independent simulations (rates x policies) through a standard executor, and where speculation stops
paying.

Runs go to `concurrent.futures.ProcessPoolExecutor` (one process per core) or, when the user passes a scheduler
address, to a `dask.distributed.Client` (dask is imported only then). Each run returns its summary dict, so only a
few hundred bytes travel back per run.

Crossover, per speculative policy against `off`: speculation pays for latency at a rate when its p50 end-to-end
latency is below off's, and for throughput when its output throughput is at least THROUGHPUT_TIE of off's (below
saturation both serve the offered load, so equal throughput within noise counts as paying). The crossover rate is the
first rate after the last one at which it still pays (a dip followed by a recovery does not count), with off's mean
running batch there; None when it pays at every rate.

On a datasheet the latency crossover against `off` also comes as a range (`latency_range`): the same rule with the
latency speedup (off's p50 over the policy's) read at either end of the engine profile's published speedup error
(`pricing.speedup_band`, h), paying where speedup - h > 1 (earliest) and where speedup + h > 1 (latest), strictly, as the point reading. The
band is the speedup error of the engine's published rows at a load, which is what this ratio is; throughput has no
range, since below saturation both serve the offered load and the ratio sits at 1 whatever the error.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from ..scenario.builder import Scenario
from ..scenario.inputs import DEFAULT_SERVE_REQUESTS
from ..errors import InputError
from .config import ServeConfig
from .engine import simulate
from .guard import ServeWorkerError, check_workload_work
from .uncertainty import get_summary_interval
from .workload import LengthDistribution, Requests, check_rate_per_s, generate_requests, load_trace

THROUGHPUT_TIE = 0.99
DEFAULT_REQUESTS = DEFAULT_SERVE_REQUESTS


@dataclass(frozen=True)
class WorkloadSpec:
    """How to make the requests of one run at a given rate (or replay a trace, scaled to the rate when given)."""

    prompt: LengthDistribution
    output: LengthDistribution
    requests: int = DEFAULT_REQUESTS
    arrivals: str = "poisson"
    cv: float = 1.0
    seed: int = 0
    trace: str | None = None

    def get_requests(self, rate_per_s: float | None) -> Requests:
        if self.trace is not None:
            native = load_trace(self.trace)
            if rate_per_s is None:
                return native
            native_rate = native.count / max(float(native.arrival_s.max()), 1e-12)
            return load_trace(self.trace, rate_per_s / native_rate)
        if rate_per_s is None:
            raise InputError("give a request rate (--rate) or a trace (--trace)")
        return generate_requests(self.requests, rate_per_s, self.prompt, self.output, self.seed, self.arrivals,
                                 self.cv)


def run_one(scenario: Scenario, workload: WorkloadSpec, rate_per_s: float | None, policy: str, config: ServeConfig,
            slo_ttft_s: float | None = None, slo_tpot_s: float | None = None, concurrency: int | None = None) -> dict:
    """One simulation's summary (a top-level function: executors pickle it). With `concurrency` the requests' lengths
    are drawn as for a rate and sent by that many closed-loop clients instead (`simulate`)."""
    if concurrency is not None:
        requests = workload.get_requests(1.0) if workload.trace is None else workload.get_requests(None)
        summary = simulate(scenario, requests, policy, config, concurrency=concurrency).get_summary(slo_ttft_s,
                                                                                                    slo_tpot_s)
        return {"rate_per_s": None, "concurrency": int(concurrency), **summary, "interval": None}
    requests = workload.get_requests(rate_per_s)
    summary = simulate(scenario, requests, policy, config).get_summary(slo_ttft_s, slo_tpot_s)
    # under a measured profile: the latency percentiles' 90 % interval from the step model's (None otherwise)
    return {"rate_per_s": rate_per_s, **summary,
            "interval": get_summary_interval(scenario, requests, policy, config, summary)}


def get_saturation_rate_per_s(scenario: Scenario, prompt: LengthDistribution, output: LengthDistribution,
                              policy: str = "off", config: ServeConfig = ServeConfig(), requests: int = 400,
                              seed: int = 0) -> float:
    """The most requests per second one instance sustains under `policy` (its capacity, for expressing an offered
    load as a utilisation): `requests` requests of the given lengths all wait at t = 0, so the engine never idles, and
    the rate is read between the 10th and the 90th percentile of the finish times, where the batch is full (the
    start, with every slot prefilling, and the drain, with the batch emptying, are left out)."""
    lengths = generate_requests(requests, 1.0, prompt, output, seed)
    waiting = Requests(np.zeros(requests), lengths.prompt_tokens, lengths.output_tokens)
    finish = np.sort(simulate(scenario, waiting, policy, config).finish_s)
    lo, hi = int(0.1 * requests), int(0.9 * requests) - 1
    span_s = float(finish[hi] - finish[lo])
    if hi <= lo or span_s <= 0:
        raise InputError(f"capacity needs at least 20 requests, got {requests}")
    return (hi - lo) / span_s


def run_rate_sweep(scenario: Scenario, workload: WorkloadSpec, rates, policies: list[str], config: ServeConfig,
                   slo_ttft_s=None, slo_tpot_s=None, dask_address: str | None = None,
                   max_workers: int | None = None, concurrencies=None) -> list[dict]:
    """Every (policy, rate) run, in policy-major order; with `concurrencies`, every (policy, concurrency) closed-loop
    run instead."""
    if concurrencies is not None:
        args = [(scenario, workload, None, policy, config, slo_ttft_s, slo_tpot_s, c)
                for policy in policies for c in concurrencies]
    else:
        args = [(scenario, workload, rate, policy, config, slo_ttft_s, slo_tpot_s)
                for policy in policies for rate in rates]
    check_workload_work(workload, len(args), config.max_num_batched_tokens, max_workers or os.cpu_count() or 1)
    if dask_address is not None:
        try:
            from dask.distributed import Client
        except ImportError:
            raise InputError("--dask needs dask.distributed: pip install 'rooflinesim[dask]'") from None
        try:
            client = Client(dask_address)
        except (OSError, ValueError, TimeoutError) as exc:
            raise InputError(f"cannot reach the Dask scheduler at {dask_address!r}: {exc}") from None
        with client:
            futures = [client.submit(run_one, *a, pure=False) for a in args]
            return client.gather(futures)
    # never more processes than runs: a fork start method launches them all at once (--workers 4096 forked 4096)
    workers = min(max_workers or os.cpu_count() or 1, len(args))
    if workers <= 1 or len(args) == 1:
        return [run_one(*a) for a in args]
    try:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_run_one_recording_warnings, *zip(*args)))
    except BrokenProcessPool:
        raise ServeWorkerError(f"a simulation worker process died (killed or out of memory) during {len(args)} runs "
                               f"on {workers} processes; try --workers 1 or fewer --requests") from None
    for _, caught in results:  # a worker's warnings would reach its stderr raw: raised again here, where the CLI
        for category, message, filename, lineno in caught:  # turns them into one line of its own
            warnings.warn_explicit(message, category, filename, lineno)
    return [row for row, _ in results]


def _run_one_recording_warnings(*args) -> tuple[dict, list]:
    """`run_one` in a worker process, with the warnings it raised (category, message, file, line)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        row = run_one(*args)
    return row, [(w.category, str(w.message), w.filename, w.lineno) for w in caught]


def _load_key(row: dict) -> str:
    return "concurrency" if row.get("concurrency") is not None else "rate_per_s"


def _last_paying_crossover(rows_off: list[dict], rows_spec: list[dict], pays) -> dict | None:
    paying = [pays(o, s) for o, s in zip(rows_off, rows_spec)]
    if all(paying) or paying[-1]:  # it still pays at the highest load: it has not stopped (see the "starts" side)
        return None
    last = max((i for i, p in enumerate(paying) if p), default=-1)
    at = rows_off[last + 1]
    key = _load_key(at)
    return {key: at[key], "mean_batch": at["mean_batch"]}


def _first_paying_crossover(rows_off: list[dict], rows_spec: list[dict], pays) -> dict | None:
    """The other way: the load from which it pays at every higher load, when it does not pay at the lowest (None
    when it pays at the lowest load or never pays at the highest)."""
    paying = [pays(o, s) for o, s in zip(rows_off, rows_spec)]
    if not paying or paying[0] or not paying[-1]:
        return None
    first = max(i for i, p in enumerate(paying) if not p) + 1
    at = rows_off[first]
    key = _load_key(at)
    return {key: at[key], "mean_batch": at["mean_batch"]}


def _latency_pays(o: dict, s: dict) -> bool:
    return s["latency_s"]["p50"] < o["latency_s"]["p50"]  # the point reading: speedup > 1


def _throughput_pays(o: dict, s: dict) -> bool:
    return s["output_tokens_per_s"] >= THROUGHPUT_TIE * o["output_tokens_per_s"]


def get_latency_range(rows_off: list[dict], rows_spec: list[dict], band) -> dict:
    """The latency crossover with the speedup at the low and at the high end of `band` (a `SpeedupBand`): each the
    load from which that reading stops paying, as `get_crossovers` gives it (None: that reading pays at every load)."""
    def reading(error_x):
        # off/spec - e > 1 written without the division, so that e = 0 is exactly the point reading (a tie at
        # speedup 1.0 does not pay in either)
        return lambda o, s: o["latency_s"]["p50"] > (1.0 + error_x) * s["latency_s"]["p50"]

    return {"earliest": _last_paying_crossover(rows_off, rows_spec, reading(band.high_error_x)),
            "latest": _last_paying_crossover(rows_off, rows_spec, reading(band.low_error_x)),
            "error_x": band.high_error_x, "band_source": band.source}


def get_crossovers(rows: list[dict], baseline: str = "off", band=None) -> list[dict]:
    """Per speculative policy: the rate or concurrency (and the baseline's mean batch there) from which it stops
    paying for latency and for throughput (see the module docstring), and, where it does not pay at the lowest load
    but does at the highest, the load from which it starts (`latency_starts`, `throughput_starts`). Empty without a
    `baseline` run to compare with; `baseline` may be any policy (e.g. `chain:3` against a tree's `fixed:59`).
    `band` (`pricing.speedup_band.get_scenario_speedup_band`; None on a measured profile) adds `latency_range`
    against `off`."""
    by_policy: dict[str, list[dict]] = {}
    for row in rows:
        by_policy.setdefault(row["policy"], []).append(row)
    off = by_policy.get(baseline)
    if off is None:
        return []
    out = []
    for policy, spec in by_policy.items():
        if policy == baseline:
            continue
        entry = {
            "policy": policy,
            "latency": _last_paying_crossover(off, spec, _latency_pays),
            "throughput": _last_paying_crossover(off, spec, _throughput_pays),
        }
        if baseline != "off":
            entry["baseline"] = baseline
        elif band is not None:
            entry["latency_range"] = get_latency_range(off, spec, band)
        for what, pays in (("latency", _latency_pays), ("throughput", _throughput_pays)):
            starts = _first_paying_crossover(off, spec, pays)
            if starts is not None:
                entry[f"{what}_starts"] = starts
        out.append(entry)
    return out


def parse_concurrencies(text: str) -> list[int]:
    """'1..64' (doublings, the end included), '1,2,4' or '8': closed-loop clients."""
    from ..scenario.inputs import check_positive_int

    text = str(text).strip()
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split("..", 1))
            if not 0 < lo <= hi:
                raise ValueError
            values, v = [], lo
            while v <= hi and len(values) < 64:
                values.append(v)
                v *= 2
            if values[-1] < hi:
                values.append(hi)
        else:
            values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--concurrency {text!r}: use a client count (8), a list (1,2,4) or a range (1..64)") from None
    if not values:
        raise InputError(f"--concurrency {text!r}: give at least one client count")
    return sorted({check_positive_int(v, "--concurrency", 1_000_000) for v in values})


__all__ = ["WorkloadSpec", "run_one", "run_rate_sweep", "parse_concurrencies", "get_saturation_rate_per_s", "get_crossovers", "get_latency_range", "THROUGHPUT_TIE",
           "DEFAULT_REQUESTS"]


def parse_rates(text: str) -> list[float]:
    """'1..32' (doublings from 1 to 32, the end included), '0.5,1,2' or '4': request rates per second; 'inf' (alone or
    in a list) sends every request at once."""
    import math

    text = str(text).strip()
    if "inf" in [part.strip().lower() for part in text.split(",")]:
        finite = ",".join(part for part in text.split(",") if part.strip().lower() != "inf")
        return (parse_rates(finite) if finite.strip() else []) + [math.inf]
    try:
        if ".." in text:
            lo, hi = (float(x) for x in text.split("..", 1))
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
                raise ValueError
            values, v = [], lo
            while v <= hi * (1 + 1e-12) and len(values) < 64:
                values.append(v)
                v *= 2
            if values[-1] < hi:
                values.append(hi)
        else:
            values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--rate {text!r}: use a rate per second (4), a list (1,2,4) or a range (1..32)") from None
    if not values:
        raise InputError(f"--rate {text!r}: rates must be positive numbers per second")
    for value in values:
        check_rate_per_s(value, f"--rate {text!r}: each rate")
    return sorted(set(values))
