"""`rooflinesim calibrate`: torch microbenchmarks on the local device, fitted into a measured profile.

What is measured, per dtype (all with the thread count recorded, per-call medians with the spread kept):

* streaming bandwidth: a copy and a weight-streaming GEMV (F.linear with M = 1) over working sets of >= 1 GiB
  (`--quick`: 256 MiB, stated in the profile), i.e. far above the last-level cache;
* F.linear time vs M (1..4096, log-spaced, dense below 16 where CPU kernels saw-tooth) over generic weight shapes
  (square, GQA-narrow, MLP-wide and -tall, vocabulary-wide) with the weights rotated over copies that together
  exceed the last-level cache, so every call streams cold weights as a model's forward pass does. Points above a
  FLOP budget per call are skipped and extrapolated as compute-bound;
* masked SDPA with enable_gqa (the decoder's own `attend`, on its own cache layout) vs batch, context and query
  tokens (1 = decode, > 1 = verify);
* the decoder's elementwise building blocks (RMSNorm, RoPE, SwiGLU, residual add, KV-cache write, embedding) vs size;
* whole decoders timed as forward passes: tiny ones (hidden 64, 2 and 8 layers) pin the per-layer and per-step
  dispatch overhead; mid-size ones of generic shapes (hidden 768 and 1536) pin the in-model scale, how much slower
  ops run inside a forward pass than alone (`fit_profile.fit_overheads`).

None of the calibrated weight shapes is a shape of the validation models (tiny-llama-123m, tiny-draft-2l): see
`plan.LINEAR_SHAPES` and `plan.check_hold_out`. Configurations are shuffled and, outside --quick, measured in two
interleaved passes; a reference GEMV is timed at the start, middle and end to detect drift.

This module runs the whole thing: `run_calibration` (measure, fit) and `build_profile_spec` (the HardwareSpec with
its provenance), with the device queries they need. Where the parts live:

* `plan`: the shapes, grids and synthetic decoders, and the `Plan` of a run (no torch);
* `benchmarks`: one module per benchmark family (torch);
* `measurements`: the measurement keys, `Timing` and `Results` (no torch);
* `fit_profile`: measurements -> `DtypeProfile` (numpy / scipy, no torch).
"""

from __future__ import annotations

import datetime as _dt
import random
import time
from dataclasses import replace

import numpy as np
import torch

from ...specs.hardware import Efficiency, HardwareSpec
from ...specs.measured import MeasuredProfile, Provenance
from ...units import MIB, MILLI, normalize_dtype
from .benchmarks import JOB_FAMILIES, BenchContext, Job
from .anchor import ANCHOR_TOLERANCE, Anchor
from .benchmarks.bandwidth import copy_bandwidth, gemv_bandwidth, reference_gemv
from .drift import DriftWatch, retime_affected, retime_stalled, take_reference as take_drift_reference
from ..fitting.fit_profile import fit_dtype
from ..fitting.measurements import DRIFT_FLAG, Results, find_stalled_points
from .probe import probe_speed
from ..fitting.budget import (
    FIT_S, estimate_fixed_s, estimate_key_s, get_level_plan, is_essential,
    plan_for_budget, plan_for_quick,
)
from ..fitting.pacing import budget_action
from ..fitting.plan import (
    ALWAYS_MEASURED_M, HOLD_OUT_MODELS, Plan, check_hold_out, drop_oversized_served_shapes, get_served_shapes,
)
from .timers import Device, Timer, get_host_cpu_isa, get_host_cpu_model, get_torch_dtype



# --- device queries ---------------------------------------------------------------------------------------------------


def _memory_capacity(device: Device) -> float:
    return device.backend.total_memory_bytes()


def _llc_bytes(device: Device) -> float:
    return device.backend.last_level_cache_bytes()


def _base_hardware(device: Device) -> str:
    if not device.is_cuda:
        return "cpu-generic"
    name = device.name.lower()
    for key, alias in (("h200", "h200"), ("h100", "h100"), ("a100", "a100"), ("l40s", "l40s"), ("l4", "l4"),
                       ("a10g", "a10g"), ("4090", "rtx4090"), ("b200", "b200")):
        if key in name:
            return alias
    return device.slug


#: CPU pressure above which the run's host was contended (noted in the profile)
CONTENDED = 0.2


def get_cpu_pressure(path: str = "/proc/pressure/cpu") -> float | None:
    """Share of the last 10 s some task waited for a CPU (Linux PSI 'some avg10', 0..1); None where unavailable.
    On a shared machine this is the co-tenancy that stalls multi-threaded calls by whole scheduler slices."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("some"):
                    fields = dict(part.split("=") for part in line.split()[1:])
                    return float(fields["avg10"]) / 100.0
    except (OSError, ValueError, KeyError):
        pass
    return None


def _family(key) -> str:
    return type(key).__name__.removesuffix("Key").lower()


def run_calibration(device: Device, dtypes, quick: bool, command: str, seed: int = 0, progress: bool = True,
                    plan: Plan | None = None, budget_s: float | None = None, spent_s: float = 0.0,
                    shapes_of=()) -> HardwareSpec:
    """Measure, fit and return the profile (a HardwareSpec with a `measured` block); writing is the caller's.

    Without `plan`, the device is probed first (`probe.probe_speed`, per dtype) and each dtype's plan sized to
    `budget_s` (`budget.plan_for_budget`; `--quick` means QUICK_BUDGET_S and never more than the quick plan; no
    budget: the full plan, its expected duration stated up front). `spent_s`: what the caller spent before (the
    torch import), counted against the budget. `shapes_of`: ModelSpecs whose own weight shapes are timed too
    (`calibrate --shapes-of`), in every plan; their names are kept in the provenance.
    """
    check_hold_out()
    served = get_served_shapes(shapes_of)
    dtypes = tuple(normalize_dtype(d) for d in dtypes)
    for d in dtypes:
        get_torch_dtype(d)
    timer = Timer(device)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    started = time.perf_counter()
    pressure = [get_cpu_pressure()]
    anchor = Anchor(device)
    anchors = [anchor.time_s()]
    if plan is not None:
        plans = {d: replace(plan, served_shapes=served) if served else plan for d in dtypes}
        speeds, budget = None, None
    else:
        probe_plan = get_level_plan("quick", dtypes, device)
        speeds = {d: probe_speed(BenchContext(device, d, probe_plan, timer)) for d in dtypes}
        if quick and budget_s is None:  # the same rung on every run (the ladder is for --budget)
            budget = plan_for_quick(dtypes, device, speeds, spent_s=spent_s + time.perf_counter() - started,
                                    served_shapes=served)
        else:
            budget = plan_for_budget(budget_s, dtypes, device, speeds,
                                     spent_s=spent_s + time.perf_counter() - started,
                                     start="quick" if quick else "full", served_shapes=served)
        plans = budget.plans
    dropped = {}
    for d in dtypes:
        plans[d], dropped[d] = drop_oversized_served_shapes(plans[d], d)
    contexts = {d: BenchContext(device, d, plans[d], timer) for d in dtypes}
    results = {d: Results() for d in dtypes}
    reference: list[float] = []
    bandwidth = {}

    def cost(d, key) -> float:  # expected seconds of a job (progress-bar weight); 1 without probes
        return 1.0 if speeds is None else estimate_key_s(key, plans[d], speeds[d])

    passes = max(p.passes for p in plans.values())
    # (dtype, job, expected s, essential): a run that falls behind its budget skips what is not essential
    rounds: list[list[tuple[str, Job, float, bool]]] = [[] for _ in range(passes)]
    for d, ctx in contexts.items():
        for family_jobs in JOB_FAMILIES:
            for job in family_jobs(ctx):
                for p in range(ctx.plan.passes):
                    rounds[p].append((d, job, cost(d, job.key), p == 0 and is_essential(job.key, ctx.plan)))
        small = [job for job in JOB_FAMILIES[0](ctx) if getattr(job.key, "m", 1 << 30) <= ALWAYS_MEASURED_M]
        for _ in range(ctx.plan.small_m_extra_passes):  # where the small-M spread is large, more repeats
            rounds.append([(d, job, cost(d, job.key), False) for job in small])
    fixed = {d: (1.0 if speeds is None else estimate_fixed_s(plans[d], speeds[d]) - FIT_S) for d in dtypes}
    ref_cost = 1.0 if speeds is None else budget.reference_s / 3
    total = sum(c for r in rounds for _, _, c, _ in r) + sum(fixed.values()) + 3 * ref_cost
    # the budget is a promise: when the run falls behind its estimate (a loaded machine), the jobs that are not
    # essential are skipped as soon as finishing the essential ones at the pace seen so far would overrun it
    # a --quick run stops measuring at 80 % of it, so that drift can be re-timed within the budget (`retime_affected`)
    measuring_share = 0.8 if quick else 0.9
    deadline = (None if budget is None or budget.budget_s is None else
                started + (budget.budget_s - spent_s) * measuring_share - FIT_S * len(dtypes) - ref_cost)
    essential_left = sum(c for r in rounds for _, _, c, e in r if e)
    all_left = sum(c for r in rounds for _, _, c, _ in r)
    pace = [0.0, 0.0]  # expected s, measured s of the jobs run so far
    skipped = 0

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True)
    if budget is not None:  # the expected duration, stated up front (with or without the progress bar)
        console.print(f"[bold]calibrate[/] {device.name}: {budget.describe()}")
    for d, shapes in dropped.items():
        if shapes:
            console.print(f"[yellow]warning[/]: {d}: weight shapes {', '.join(f'{k} x {n}' for k, n in shapes)} of "
                          f"--shapes-of do not fit twice in the {plans[d].rotate_bytes / MIB:.0f} MiB cold pool; "
                          "they are priced from the other tables")
    spent = {}
    reference_ctx = contexts[dtypes[0]]
    with Progress(TextColumn("[bold]calibrate[/] {task.description}"), BarColumn(), TimeElapsedColumn(),
                  TextColumn("remaining"), TimeRemainingColumn(), disable=not progress, transient=False,
                  console=console) as bar:
        task = bar.add_task(f"{device.name} {','.join(dtypes)}", total=total)
        # the reference is re-timed about every eighth of the jobs; what ran between two off-speed references is
        # timed again at the end (calibrate.drift)
        watch = DriftWatch(every=max(8, sum(len(r) for r in rounds) // 8))

        def take_reference() -> float:  # an off-speed reading gets a second look (`drift.take_reference`)
            return take_drift_reference(watch, lambda: reference_gemv(reference_ctx).estimate_s)

        reference.append(take_reference())
        watch.checkpoint(reference[-1])
        bar.advance(task, ref_cost)
        for d, ctx in contexts.items():
            bandwidth[d] = {"copy": copy_bandwidth(ctx)[0]}
            bandwidth[d]["gemv"] = gemv_bandwidth(ctx)[0]
            bar.advance(task, fixed[d])
        for p, order in enumerate(rounds):
            order = list(order)
            rng.shuffle(order)
            half = len(order) // 2
            for i, (d, job, c, essential) in enumerate(order):
                if p == passes - 1 and i == half:
                    reference.append(take_reference())
                    watch.checkpoint(reference[-1])
                    anchors.append(anchor.time_s())
                    bar.advance(task, ref_cost)
                t0 = time.perf_counter()
                all_left -= c
                if deadline is not None:  # --quick trusts the pace measured so far over the probe's estimate
                    slowdown = (pace[1] / pace[0] if pace[0] > 0 else 0.0) if quick else \
                        (max(1.0, pace[1] / pace[0]) if pace[0] > 0 else 1.0)
                    action = budget_action(t0, deadline, all_left + c, essential_left, c, essential, slowdown,
                                           hurry_first=quick, hurried=contexts[d].hurry, started_s=started)
                    if action == "skip":
                        skipped += 1
                        bar.advance(task, c)
                        continue
                    if action == "hurry":  # fewer calls for every configuration from here on
                        for other in contexts.values():
                            other.hurry = True
                        pace = [0.0, 0.0]  # the pace of hurried jobs, from here on
                first = len(results[d].samples.get(job.key, ()))
                timing = job.run()
                results[d].add(job.key, timing)
                if watch.record(d, job, c, first, len(timing.samples)):
                    reference.append(take_reference())
                    watch.checkpoint(reference[-1])
                pace[0] += c
                pace[1] += time.perf_counter() - t0
                essential_left -= c if essential else 0.0
                family = _family(job.key)
                was = spent.get(family, (0.0, 0.0))
                spent[family] = (was[0] + c, was[1] + time.perf_counter() - t0)
                bar.advance(task, c)
        reference.append(take_reference())
        watch.checkpoint(reference[-1])
        bar.advance(task, ref_cost)
        raw_drift = float((max(reference) - min(reference)) / np.median(reference))
        # the measuring stops at 90 % of the budget (`deadline`); the rest, less the fit, is for re-timing. Without a
        # budget: up to a quarter of the time measured so far
        time_left = (started + budget.budget_s - spent_s - FIT_S * len(dtypes) - ref_cost - time.perf_counter()
                     if deadline is not None else 0.25 * (time.perf_counter() - started))
        retimed = retime_affected(watch, results, lambda job: job.run(), time_left, take_reference,
                                  slowdown=pace[1] / pace[0] if pace[0] > 0 else 1.0)
        # single configurations timed during a stall (far off their neighbours in M): timed again while time is left
        slowdown = max(1.0, pace[1] / pace[0]) if pace[0] > 0 else 1.0
        time_left = (started + budget.budget_s - spent_s - FIT_S * len(dtypes) - time.perf_counter()
                     if deadline is not None else 0.05 * (time.perf_counter() - started))
        jobs_by_key = {(d, job.key): job for r in rounds for d, job, _, _ in r}
        stalls_retimed = retime_stalled(results, jobs_by_key, find_stalled_points, time_left,
                                        lambda d, key: cost(d, key) * slowdown)
        if retimed["retimed"]:
            reference.append(watch.refs[-1])
            console.print(f"drift: {retimed['retimed']} configurations of {retimed['segments']} segment(s) measured "
                          f"while the reference was off by more than {DRIFT_FLAG:.0%} were timed again"
                          + (f"; {retimed['left']} left as measured (budget)" if retimed["left"] else ""))
    if speeds is not None:
        console.print("expected / measured s per family: " + ", ".join(
            f"{f} {e:.1f} / {m:.1f}" for f, (e, m) in sorted(spent.items()))
            + (f"; {skipped} configurations skipped to keep the budget" if skipped else ""))

    pressure.append(get_cpu_pressure())
    anchors.append(anchor.time_s())
    fit_started = time.perf_counter()
    profiles = {d: fit_dtype(d, results[d], bandwidth[d]["copy"], bandwidth[d]["gemv"], plans[d],
                             None if speeds is None else speeds[d].gemm_flops_per_s) for d in dtypes}
    if speeds is not None:
        console.print(f"fitted in {time.perf_counter() - fit_started:.1f} s ({FIT_S:.1f} s per dtype planned)")
    duration = time.perf_counter() - started
    drift = watch.kept_drift()  # over the references bounding the samples kept (raw_drift: all of them)
    retime_note = (f"Drift: reference {raw_drift:.0%} over the whole run; {retimed['retimed']} configurations "
                   f"timed again ({retimed['segments']} segment(s) off by more than {DRIFT_FLAG:.0%}), "
                   f"{retimed['left']} left as measured; {drift:.0%} over the samples kept. "
                   if retimed["retimed"] or retimed["left"] else "")
    if stalls_retimed:
        retime_note += (f"{stalls_retimed} configurations timed again: far slower than their neighbours (a stall: "
                        "a linear point vs its neighbours in M, a fresh-page concatenation vs the heap's). ")
    return build_profile_spec(device, profiles, plans, command, duration, drift, tuple(float(r) for r in reference),
                              budget, skipped, pressure, anchors, tuple(spec.name for spec in shapes_of),
                              retime_note)


def build_profile_spec(device: Device, profiles: dict, plans: dict, command: str, duration: float, drift: float,
                       reference: tuple, budget=None, skipped: int = 0, pressure=(None,), anchors=(),
                       shapes_of: tuple[str, ...] = (), retime_note: str = "") -> HardwareSpec:
    """The measured profile as a HardwareSpec: fitted effective peaks in the datasheet-like fields, the fitted
    `profiles` (dtype -> DtypeProfile) and the run's provenance (duration s, drift and the reference GEMV times s,
    the machine-speed anchors timed at its start, middle and end, averaged) in its `measured` block."""
    dtypes = tuple(profiles)
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    quick = any(p.quick for p in plans.values())
    levels = ", ".join(f"{d}: {p.level}" for d, p in plans.items())
    quick_note = (f"plans {levels}: bandwidth working sets below 1 GiB, fewer shapes and M points, one pass. "
                  if quick else f"plans {levels}. ")
    if skipped:
        quick_note += f"{skipped} configurations skipped to keep the time budget. "
    if any(x is not None for x in pressure):
        quick_note += ("CPU pressure (PSI some avg10) at start / end: "
                       + " / ".join("n/a" if x is None else f"{x:.0%}" for x in pressure)
                       + (f" - above {CONTENDED:.0%}: other tenants stalled calls, re-run in a quiet window. "
                          if max(x or 0.0 for x in pressure) > CONTENDED else ". "))
    anchor_s = None
    if anchors:
        anchor_s = {name: float(np.mean([a[name] for a in anchors])) for name in anchors[0]}
        moved = max(abs(a[name] / anchor_s[name] - 1.0) for a in anchors for name in anchor_s)
        quick_note += (f"Machine-speed anchors ({' / '.join(anchor_s)}) at start, middle and end: "
                       + "; ".join(" / ".join(f"{a[name] / MILLI:.3f}" for name in anchor_s) + " ms" for a in anchors)
                       + (f" - they moved {moved:.0%} during the run. " if moved > ANCHOR_TOLERANCE else ". "))
    quick_note += retime_note
    quick_note += f"SDPA kernels enabled: {', '.join(device.backend.sdpa_kernels()) or 'none reported'}. "
    if device.host_memory_kept:
        quick_note += "Host memory: freed memory kept for reuse (glibc mallopt, calibrate.measure.timers). "
    quick_note += ("Implementation costs (ops.implementation_ops): kv_concat, torch.cat of cold caches into new "
                   "tensors vs their size, and dispatch_s, the slope of a loop of tiny aten calls "
                   "(calibrate.measure.benchmarks.implementation). ")
    prov = Provenance(
        device_kind=device.kind, device_name=device.name, host_cpu=get_host_cpu_model(), host_isa=get_host_cpu_isa(),
        torch_version=torch.__version__, dtypes=dtypes, threads=device.threads, date=now, command=command,
        duration_s=round(duration, 2), quick=quick,
        budget_s=None if budget is None or budget.budget_s is None else float(budget.budget_s),
        planned_s=None if budget is None else round(budget.total_s, 2), drift=round(drift, 4), drift_flagged=drift > DRIFT_FLAG,
        reference_s=reference, anchor_s=anchor_s,
        notes=quick_note + (f"generic weight shapes exclude the hold-out models {', '.join(HOLD_OUT_MODELS)}; "
                            f"the shapes of {', '.join(shapes_of)} are calibrated too (--shapes-of)" if shapes_of else
                            f"calibrated weight shapes exclude the hold-out models {', '.join(HOLD_OUT_MODELS)}"),
        shapes_of=shapes_of,
    )
    measured = MeasuredProfile(profile_name=device.slug, base_hardware=_base_hardware(device), provenance=prov,
                               dtypes=profiles)
    gemv = max(p.gemv_bandwidth_bytes_per_s for p in profiles.values())
    first = profiles[dtypes[0]]
    where = f"measured by rooflinesim calibrate on {device.name}, torch {torch.__version__}, {now}"
    return HardwareSpec(
        schema_version=1,
        name=f"{device.name}, measured",
        aliases=(device.slug,),
        kind="gpu" if device.is_cuda else "cpu",
        vendor=device.name.split()[0],
        peak_flops_per_s={d: p.peak_flops_per_s for d, p in profiles.items()},
        memory_bandwidth_bytes_per_s=gemv,
        memory_capacity_bytes=_memory_capacity(device),
        last_level_cache_bytes=_llc_bytes(device),
        efficiency=Efficiency(memory_fraction=1.0, compute_fraction=1.0, kernel_overhead_s=first.linear_overhead_s),
        sources={
            "peak_flops_per_s": f"{where}: effective GEMM peak fitted (least squares) to F.linear time vs M",
            "memory_bandwidth_bytes_per_s": f"{where}: weight-streaming GEMV over cold weights (best dtype)",
            "memory_capacity_bytes": "device memory reported by the OS / CUDA",
            "last_level_cache_bytes": "from sysfs (CPU) or the CUDA device properties",
            "efficiency": ("fractions 1.0: the peaks above are measured effective figures; "
                           "overhead = fitted per-linear cost"),
        },
        notes=("A measured profile: expected times come from the `measured` tables (rooflinesim.timing.measured), "
               "the datasheet-like fields hold fitted effective numbers."),
        measured=measured,
    )
