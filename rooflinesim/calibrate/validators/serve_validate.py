"""`rooflinesim validate --serve`: a measured serving loop on the local device against the serving simulator.

The same seeded Poisson request list (`serve.generate_requests`) is served twice by `serve_loop` on the hold-out pair
(default tiny-llama-123m with tiny-draft-2l, random weights; a profile calibrated `--shapes-of` them is accepted, and
`served_shapes` in the report says how many of their weight shapes it timed): without speculation (`off`) and with
`fixed:k` drafts under the exact rule at temperature 1. The draft's acceptance is measured in the speculative run
itself (per-position counts of every decode step, `acceptance.measured.from_position_counts`); it is a property of the
two random models, not something the simulator is asked to predict. The simulator then replays the same requests with
the calibrated profile (`serve.simulate`, with the same max_num_seqs and token budget, that acceptance, the sampler
and exact rule the loop runs (`sampling=True`) and its two-token first draft step, over `sim_seeds` acceptance seeds
whose percentiles are averaged), and the report compares TTFT and TPOT p50 / p90 (goals: within 15 % at the p50s, 25 %
at the p90s).

On a shared machine other processes stall a multi-threaded loop by whole scheduler slices: the share of each run
during which some task waited for a CPU (Linux PSI) is recorded, and a run contended for more than CONTENDED_SHARE
of its time is served again (`retries`, default once), the quietest attempt kept.

The offered load is a utilisation (`load`, default 0.6) of the capacity the simulator gives `off` on this profile
(`serve.rates.get_saturation_rate_per_s`), so the runs sit at the same point of the queueing curve on a fast device
and a slow one; `rate_per_s` sets the rate instead. Near capacity a queue amplifies any step-time error without bound
(TTFT grows as 1 / (1 - utilisation)), so a fixed rate that loads one machine moderately overloads a slower one.

To tell a step-model error from a scheduling one, every measured step is also priced on its own by the simulator's
`StepPricer` (its decodes, their mean context, k, its prefill chunks): `step_model` gives the median and p90 of
measured / priced per kind of step, the time-weighted ratio (all measured step time / all priced), and the share of
the loop's time spent outside the model forwards (scheduling, sampling and the exact rule; the last two are priced
from the profile's `sample` and `accept_rule` fits). `at_measured_step_speed` then replays the requests with every
step price scaled by that ratio (exactly: scaling every duration and arrival time by c scales the whole schedule by
c, so the requests are replayed with arrivals / c and the results multiplied by c): what the simulator's queueing and
scheduling predict given the loop's own step speed. It is a diagnostic, never the goal: it separates the step
model's error, amplified by the queue, from the scheduling model's. `interval` gives each simulated percentile's
90 % interval from the step model's own error (`serve.uncertainty`), and whether the measured value is inside.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from ...acceptance.measured import from_position_counts
from ...specs.profiles import get_host_cpu_model, load_profile
from ...specs.registry import load_model
from ...scenario.builder import build_scenario
from ...serve import LengthDistribution, ServeConfig, StepPricer, generate_requests, simulate
from ...serve.rates import get_saturation_rate_per_s
from ...serve.uncertainty import simulate_at_step_speed, simulate_interval_ends
from ...errors import InputError
from ...specs.model import ModelSpec
from ...units import MICRO, MILLI
from ..measure.anchor import Anchor, compare_anchor, describe_anchor
from ..reference.model import build_decoder
from ..fitting.plan import get_served_shapes
from ..reference.serve_loop import LoopConfig, LoopResult, run_serving_loop
from ..measure.timers import get_torch_dtype

GOAL_P50 = 0.15
#: a run during which other processes made some task wait for a CPU longer than this share is flagged
CONTENDED_SHARE = 0.05
GOAL_P90 = 0.25
METRICS = ("ttft_s", "tpot_s")
#: the offered load the runs default to, as a share of off's simulated capacity: queueing shows (TTFT tails of a few
#: steps' waiting) while the queue stays stable under the few-% step-time errors of a calibrated profile
DEFAULT_LOAD = 0.6
MAX_LOAD = 2.0


@dataclass(frozen=True)
class ServeValidationSettings:
    """The workload and engine of the measured runs (defaults sized to ~1 min per policy on a 2-core CPU, fp32)."""

    load: float = DEFAULT_LOAD  # offered rate = load x off's simulated capacity, unless rate_per_s is given
    rate_per_s: float | None = None
    requests: int = 60
    prompt_tokens: str = "uniform:16:128"
    output_tokens: str = "uniform:16:96"
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 128
    k: int = 2
    temperature: float = 1.0
    seed: int = 0
    dtype: str = "fp32"
    sim_seeds: int = 5
    retries: int = 1  # runs of a policy served again when the CPU was contended (more than CONTENDED_SHARE)

    def check(self) -> "ServeValidationSettings":
        if self.rate_per_s is not None and not (self.rate_per_s > 0 and np.isfinite(self.rate_per_s)):
            raise InputError(f"--rate must be a positive number of requests per second, got {self.rate_per_s}")
        if not (0 < self.load <= MAX_LOAD):
            raise InputError(f"--load must be a utilisation in (0, {MAX_LOAD:g}] of the simulated capacity, got "
                             f"{self.load}")
        for name, low in (("requests", 2), ("max_num_seqs", 1), ("k", 1), ("sim_seeds", 1), ("retries", 0)):
            if getattr(self, name) < low:
                raise InputError(f"{name} must be at least {low}, got {getattr(self, name)}")
        if self.max_num_batched_tokens < self.max_num_seqs * (self.k + 1):
            raise InputError("max_num_batched_tokens must hold every sequence's 1 + k verify tokens")
        return self


def get_cpu_stall_s(path: str = "/proc/pressure/cpu") -> float | None:
    """Seconds some task has waited for a CPU since boot (Linux PSI 'some total'); None where unavailable. Its
    growth over a run divided by the run's wall time is the share of the run the host was contended."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("some"):
                    return float(dict(part.split("=") for part in line.split()[1:])["total"]) * MICRO
    except (OSError, ValueError, KeyError):
        pass
    return None


def _finite(values: np.ndarray) -> list:
    """Per-request values for JSON: NaN (a request with one output token has no TPOT) becomes null."""
    return [float(v) if np.isfinite(v) else None for v in values]


def _error(simulated, measured) -> float | None:
    return None if not simulated or not measured else float(simulated / measured - 1.0)


def _step_model(result: LoopResult, pricer: StepPricer, draft_prefills: bool) -> dict:
    """Each measured step against its own price: median and p90 of measured / priced, by kind of step."""
    kinds: dict[str, list[float]] = {}
    by_batch: dict[int, list[tuple[float, float]]] = {}
    total_priced = 0.0
    for n, context, k, chunk_context, chunk_tokens, finishing, seconds, _ in result.steps:
        priced = pricer.get_step_time_s(n, context, k, np.asarray(chunk_context), np.asarray(chunk_tokens),
                                        finishing, draft_prefills)
        total_priced += priced
        kind = "decode" if not chunk_tokens else ("mixed" if n else "prefill")
        kinds.setdefault(kind, []).append(seconds / priced)
        if kind == "decode":
            by_batch.setdefault(n, []).append((seconds, priced))
    out = {kind: {"steps": len(r), "median_measured_over_priced": float(np.median(r)),
                  "p90_measured_over_priced": float(np.percentile(r, 90))} for kind, r in kinds.items()}
    out["decode_by_batch"] = [{"batch": n, "steps": len(v), "median_measured_s": float(np.median([m for m, _ in v])),
                               "median_priced_s": float(np.median([q for _, q in v]))}
                              for n, v in sorted(by_batch.items())]
    seconds = np.asarray([s[6] for s in result.steps])
    in_models = np.asarray([s[7] for s in result.steps])
    out["outside_models_share"] = float(1.0 - in_models.sum() / seconds.sum()) if seconds.size else None
    out["measured_over_priced_time_weighted"] = float(seconds.sum() / total_priced) if total_priced else None
    return out


def _batch_share(timeline: np.ndarray, max_num_seqs: int) -> list[float]:
    """The share of busy time spent at each running count 1..max_num_seqs."""
    running, duration = timeline[:, 2].astype(int), timeline[:, 1]
    total = duration.sum()
    return [float(duration[running == b].sum() / total) if total else 0.0 for b in range(1, max_num_seqs + 1)]


def _compare(measured: dict, simulated: list[dict]) -> dict:
    out = {}
    for metric in METRICS:
        for p, goal in (("p50", GOAL_P50), ("p90", GOAL_P90)):
            values = [s[metric][p] for s in simulated]
            sim = float(np.mean(values))
            error = _error(sim, measured[metric][p])
            out[f"{metric[:-2]}_{p}"] = {"measured_s": measured[metric][p], "simulated_s": sim,
                                         "simulated_seeds_s": values, "error": error, "goal": goal,
                                         "meets_goal": error is not None and abs(error) <= goal}
    return out


def _interval(scenario, requests, policy, configs, pricer, simulated: list[dict], measured: dict,
              k: int) -> dict | None:
    """The simulated TTFT / TPOT percentiles' 90 % interval from the step model's (`serve.uncertainty`: the runs at
    both ends of the step-time interval, at the simulated mean batch, averaged over the acceptance seeds), and
    whether each measured value falls inside; None without a measured profile."""
    batch = float(np.mean([r["mean_batch"] for r in simulated]))
    seeds = [simulate_interval_ends(scenario, requests, policy, config, pricer, batch, k) for config in configs]
    if seeds[0] is None:
        return None
    out = {"step_rel_sigma": seeds[0][0], "at_batch": batch,
           "at_context_tokens": float(np.mean(requests.prompt_tokens + requests.output_tokens / 2))}
    for metric in METRICS:
        for p in ("p50", "p90"):
            low, high = (float(np.mean([seed[end][metric][p] for seed in seeds])) for end in (1, 2))
            value = measured[metric][p]
            out[f"{metric[:-2]}_{p}"] = {"low_s": low, "high_s": high,
                                         "measured_inside": bool(value is not None and low <= value <= high)}
    return out


def get_offered_rate_per_s(profile, target_spec: ModelSpec, settings: "ServeValidationSettings") -> tuple[float, float]:
    """(rate, off's simulated capacity in requests/s): `settings.rate_per_s`, or `settings.load` x the capacity the
    simulator gives `off` on this profile for the settings' request lengths and engine limits."""
    prompt = LengthDistribution.parse(settings.prompt_tokens, "prompt tokens")
    output = LengthDistribution.parse(settings.output_tokens, "output tokens")
    longest = prompt.max_tokens + output.max_tokens
    # 'off' deploys no draft: none is resolved (a target without a default draft would otherwise be refused)
    scenario = build_scenario(profile, target_spec, 1, longest, weight_dtype=settings.dtype, kv_dtype=settings.dtype,
                              activation_dtype=settings.dtype, allow_long_context=True, sampling=True,
                              speculative=False, engine="ideal")  # our own torch loop, not an engine
    capacity = get_saturation_rate_per_s(scenario, prompt, output, "off",
                                         ServeConfig(settings.max_num_seqs, settings.max_num_batched_tokens, 16,
                                                     settings.seed), seed=settings.seed)
    return (settings.rate_per_s if settings.rate_per_s is not None else settings.load * capacity), capacity


def _served_shapes(profile, dtype: str, *specs) -> dict:
    """How many of the served models' linear weight shapes the profile timed itself (`calibrate --shapes-of`): all
    of them, and the loop tests the simulator on step prices read off their own tables; none, and the prices
    transfer from other shapes, whose error (validate's hold-out figures) the loop then carries too."""
    shapes = sorted(get_served_shapes(specs))
    tabled = {(t.in_features, t.out_features) for t in profile.measured.dtypes[dtype].linear}
    return {"shapes_of": list(profile.measured.provenance.shapes_of), "shapes": [list(x) for x in shapes],
            "calibrated": sum(tuple(x) in tabled for x in shapes), "total": len(shapes)}


def run_serve_validation(profile_path, device, settings: ServeValidationSettings = ServeValidationSettings(),
                         target: str | ModelSpec = "tiny-llama-123m", draft: str | ModelSpec = "tiny-draft-2l",
                         log=print, check_machine: bool = True) -> dict:
    """Serve the requests without and with speculation, simulate them, compare (see the module docstring)."""
    s = settings.check()
    profile = load_profile(str(profile_path))
    if s.dtype not in profile.measured.dtypes:
        raise InputError(f"profile {profile_path} has no {s.dtype} calibration (it has "
                         f"{', '.join(profile.measured.dtypes)}): give --dtype")
    target_spec, draft_spec = (m if isinstance(m, ModelSpec) else load_model(m) for m in (target, draft))
    target, draft = target_spec.name, draft_spec.name
    if target_spec.vocab_size != draft_spec.vocab_size:
        raise InputError(f"{target} and {draft} must share a vocabulary for the exact rule")
    prompt = LengthDistribution.parse(s.prompt_tokens, "prompt tokens")
    output = LengthDistribution.parse(s.output_tokens, "output tokens")
    rate_per_s, capacity_per_s = get_offered_rate_per_s(profile, target_spec, s)
    log(f"off's simulated capacity {capacity_per_s:.3g} requests/s: offering {rate_per_s:.3g}/s "
        f"(load {rate_per_s / capacity_per_s:.2f})")
    requests = generate_requests(s.requests, rate_per_s, prompt, output, s.seed)
    dtype = get_torch_dtype(s.dtype)
    target_model = build_decoder(target_spec, dtype, device.torch_device, s.seed)
    draft_model = build_decoder(draft_spec, dtype, device.torch_device, s.seed + 1)
    anchor = Anchor(device) if check_machine else None
    anchors, anchor_labels = [], []
    load_before = os.getloadavg()
    runs: dict[str, LoopResult] = {}
    stall: dict[str, float | None] = {}
    attempts: dict[str, list] = {}
    began = time.perf_counter()
    for k in (0, s.k):
        config = LoopConfig(s.max_num_seqs, s.max_num_batched_tokens, k, s.temperature, s.seed)
        policy = config.policy
        attempts[policy] = []
        while True:  # a run other processes contended is served again (up to `retries` times), the quietest kept
            if anchor is not None:  # the machine's speed just before the run (never during: arrivals are timed)
                anchors.append(anchor.time_s())
                anchor_labels.append(f"before {policy}" + (f" (attempt {len(attempts[policy]) + 1})"
                                                           if attempts[policy] else ""))
            log(f"serving {s.requests} requests at {rate_per_s:.3g}/s, policy {policy} ...")
            stall_before = get_cpu_stall_s()
            run = run_serving_loop(target_model, draft_model, requests, config, s.seed)
            stall_after = get_cpu_stall_s()
            share = None if stall_before is None or stall_after is None else (stall_after - stall_before) / run.wall_s
            attempts[policy].append(share)
            log(f"  {run.wall_s:.1f} s" + ("" if share is None else f", CPU contended {share:.1%} of it"))
            if policy not in runs or (share or 0.0) < (stall[policy] or 0.0):
                runs[policy], stall[policy] = run, share
            if (stall[policy] or 0.0) <= CONTENDED_SHARE or len(attempts[policy]) > s.retries:
                break
    measured_s = time.perf_counter() - began
    if anchor is not None:
        anchors.append(anchor.time_s())
        anchor_labels.append("end")
    machine = (compare_anchor(profile.measured.provenance.anchor_s, anchors, anchor_labels)
               if anchor is not None else None)
    load_after = os.getloadavg()

    spec_run = runs[f"fixed:{s.k}"]
    reached = [int((spec_run.accepted > i).sum()) for i in range(s.k)]
    acceptance = from_position_counts(f"rooflinesim serve loop (exact rule, T = {s.temperature:g})",
                                      f"{draft} -> {target} (random weights)", int(spec_run.accepted.size), reached,
                                      conditions={"temperature": s.temperature, "k": s.k, "seed": s.seed})
    longest = int((requests.prompt_tokens + requests.output_tokens).max())
    scenario = build_scenario(profile, target_spec, 1, longest, weight_dtype=s.dtype, kv_dtype=s.dtype,
                              activation_dtype=s.dtype, draft=draft_spec, acceptance=acceptance, k_values=[0],
                              allow_long_context=True, sampling=True, draft_first_step_tokens=2,
                              engine="ideal")
    policies = []
    goals_met = True
    for policy, run in runs.items():
        max_k = run.config.k
        pricer = StepPricer(scenario, s.max_num_seqs, s.max_num_batched_tokens, longest + 2 * max_k + 1, max_k)
        configs = [ServeConfig(s.max_num_seqs, s.max_num_batched_tokens, 16, seed) for seed in range(s.sim_seeds)]
        sims = [simulate(scenario, requests, policy, config, pricer) for config in configs]
        measured = run.to_serve_result(device.name, target, draft)
        m_summary = measured.get_summary()
        s_summaries = [r.get_summary() for r in sims]
        comparison = _compare(m_summary, s_summaries)
        goals_met &= all(c["meets_goal"] for c in comparison.values())
        step_model = _step_model(run, pricer, draft_prefills=max_k > 0)
        ratio = step_model["measured_over_priced_time_weighted"] or 1.0
        at_speed = _compare(m_summary, [simulate_at_step_speed(scenario, requests, policy, config, pricer, ratio)
                                        for config in configs])
        interval = _interval(scenario, requests, policy, configs, pricer, s_summaries, m_summary, max_k)
        keep = ("duration_s", "output_tokens_per_s", "mean_batch", "max_batch", "steps", "mean_k", "ttft_s", "tpot_s",
                "itl_s", "latency_s")
        policies.append({
            "policy": policy, "comparison": comparison,
            "measured": {key: m_summary[key] for key in keep}, "simulated": {key: s_summaries[0][key] for key in keep},
            "step_model": step_model,
            "at_measured_step_speed": {"step_time_ratio": ratio, "comparison": at_speed},
            "interval": interval,
            "batch_share": {"measured": _batch_share(run.timeline, s.max_num_seqs),
                            "simulated": _batch_share(sims[0].timeline, s.max_num_seqs)},
            "requests": {"measured_ttft_s": _finite(measured.ttft_s), "simulated_ttft_s": _finite(sims[0].ttft_s),
                         "measured_tpot_s": _finite(measured.tpot_s), "simulated_tpot_s": _finite(sims[0].tpot_s)},
            "loop_wall_s": run.wall_s, "cpu_contended_share": stall[policy],
            "cpu_contended_share_of_attempts": attempts[policy],
        })
    return {
        "kind": "serving loop validation", "profile": str(profile_path),
        "profile_name": profile.measured.profile_name, "device": device.name, "host_cpu": get_host_cpu_model(),
        "torch": torch.__version__, "threads": torch.get_num_threads(), "dtype": s.dtype, "model": target,
        "draft": draft, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "settings": asdict(s), "arrivals": "poisson", "requests": s.requests,
        "offered_rate_per_s": rate_per_s, "simulated_capacity_per_s": capacity_per_s,
        "offered_load": rate_per_s / capacity_per_s, "load_average_before": list(load_before),
        "load_average_after": list(load_after), "measured_wall_s": measured_s,
        "acceptance": acceptance.to_dict(), "policies": policies,
        "served_shapes": _served_shapes(profile, s.dtype, target_spec, draft_spec),
        "goals": {"p50": GOAL_P50, "p90": GOAL_P90}, "meets_goal": bool(goals_met), "machine_speed": machine,
        "notes": ("error = simulated / measured - 1, per metric and percentile over the requests (TPOT per request "
                  "with more than one output token); simulated values are the mean over the acceptance seeds. The "
                  "acceptance is measured in the speculative run. CPU timings move ~10 % between runs on a quiet "
                  "machine and far more when other processes share the cores: cpu_contended_share is the share "
                  "of each run during which some task waited for a CPU (Linux PSI), which the loop's own threads "
                  "do not cause on their own; the load averages count the loop's own threads. machine_speed: the "
                  "profile's machine-speed anchors re-timed before each run and at the end (time now / then). "
                  "offered_load: the offered rate over the capacity the simulator gives off on this profile. "
                  "at_measured_step_speed: the simulation with every step at the run's measured / priced step time "
                  "(a diagnostic of the queueing model, not a goal). interval: the simulated percentiles at both "
                  "ends of the step model's 90 % interval (rooflinesim.serve.uncertainty)."),
    }


def print_serve_report(report: dict, log=print) -> None:
    acc = report["acceptance"]
    load = report.get("offered_load")
    at_load = "" if load is None else (f" (load {load:.2f} of off's simulated capacity "
                                       f"{report['simulated_capacity_per_s']:.3g}/s)")
    log(f"{report['model']} + {report['draft']} on {report['device']} ({report['dtype']}), {report['requests']} "
        f"requests at {report['offered_rate_per_s']:.3g}/s{at_load}; measured acceptance E = "
        f"{acc['expected_tokens']:.2f} at k = {acc['k']}; load average {report['load_average_before'][0]:.2f} -> "
        f"{report['load_average_after'][0]:.2f}")
    served = report.get("served_shapes")
    if served:
        log(f"weight shapes of the served models with their own tables in the profile: {served['calibrated']} of "
            f"{served['total']}" + (f" (calibrated with --shapes-of {','.join(served['shapes_of'])})"
                                    if served["shapes_of"] else " (the step prices transfer from other shapes)"))
    for row in report["policies"]:
        parts = [f"{name} {c['measured_s'] / MILLI:.0f} / {c['simulated_s'] / MILLI:.0f} ms ({c['error']:+.0%})"
                 for name, c in row["comparison"].items()]
        steps = row["step_model"]
        kinds = ", ".join(f"{kind} {steps[kind]['median_measured_over_priced']:.2f}"
                          for kind in ("decode", "mixed", "prefill") if kind in steps)
        batches = ", ".join(f"{b['batch']}: {b['median_measured_s'] / MILLI:.0f} / {b['median_priced_s'] / MILLI:.0f}"
                            for b in steps["decode_by_batch"])
        contended = row.get("cpu_contended_share")
        log(f"  {row['policy']:>8}: measured / simulated " + "; ".join(parts)
            + ("" if contended is None else f" (CPU contended {contended:.0%} of the run)"))
        log(f"            mean batch {row['measured']['mean_batch']:.2f} / {row['simulated']['mean_batch']:.2f}; "
            f"steps measured / priced (median): {kinds}; outside the forwards {steps['outside_models_share']:.1%}")
        log(f"            decode-only steps by batch, measured / priced ms: {batches}")
        interval = row.get("interval")
        if interval:
            inside = [name for name, c in interval.items() if isinstance(c, dict) and c["measured_inside"]]
            log(f"            90 % interval from the step model (sigma {interval['step_rel_sigma']:.1%} per step): "
                + "; ".join(f"{name} {c['low_s'] / MILLI:.0f}-{c['high_s'] / MILLI:.0f} ms" for name, c in
                            interval.items() if isinstance(c, dict)) + f"; measured inside {len(inside)} of 4")
        at_speed = row.get("at_measured_step_speed")
        if at_speed:
            log(f"            at the loop's own step speed ({at_speed['step_time_ratio']:.2f}x the prices; a "
                "diagnostic): " + "; ".join(f"{name} {c['error']:+.0%}" for name, c in at_speed["comparison"].items()))
    log(f"goals (p50 within {report['goals']['p50']:.0%}, p90 within {report['goals']['p90']:.0%}): "
        + ("met" if report["meets_goal"] else "NOT met"))
    if report.get("machine_speed"):
        log(describe_anchor(report["machine_speed"]))
    busy = [r["policy"] for r in report["policies"] if (r.get("cpu_contended_share") or 0) > CONTENDED_SHARE]
    if busy:
        log(f"warning: other processes contended the CPU during {', '.join(busy)} (more than "
            f"{CONTENDED_SHARE:.0%} of the run): those times are not this device's alone; re-run in a quiet window")


__all__ = ["ServeValidationSettings", "run_serve_validation", "print_serve_report", "get_cpu_stall_s", "GOAL_P50",
           "GOAL_P90", "CONTENDED_SHARE", "DEFAULT_LOAD", "get_offered_rate_per_s"]
