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

import numpy as np
import torch

from ..specs import Efficiency, HardwareSpec, MeasuredProfile, Provenance
from ..units import GIB, KIB, MIB, normalize_dtype
from .benchmarks import JOB_FAMILIES, BenchContext, Job
from .benchmarks.bandwidth import copy_bandwidth, gemv_bandwidth, reference_gemv
from .fit_profile import fit_dtype
from .measurements import Results
from .plan import HOLD_OUT_MODELS, Plan, check_hold_out
from .timers import Device, Timer, get_host_cpu_model, get_torch_dtype

#: a run whose reference GEMV moved by more than this (relative) is flagged in its provenance
DRIFT_FLAG = 0.15


# --- device queries ---------------------------------------------------------------------------------------------------


def _memory_capacity(device: Device) -> float:
    if device.is_cuda:
        return float(torch.cuda.get_device_properties(device.torch_device).total_memory)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 16e9


def _llc_bytes(device: Device) -> float:
    if device.is_cuda:
        return float(device.l2_bytes)
    import glob

    best = 0.0
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            text = open(path).read().strip().upper()
            value = float(text.rstrip("KMG")) * {"K": KIB, "M": MIB, "G": GIB}.get(text[-1], 1)
            best = max(best, value)
        except (OSError, ValueError):
            continue
    return best or 32 * MIB


def _base_hardware(device: Device) -> str:
    if not device.is_cuda:
        return "cpu-generic"
    name = device.name.lower()
    for key, alias in (("h200", "h200"), ("h100", "h100"), ("a100", "a100"), ("l40s", "l40s"), ("l4", "l4"),
                       ("a10g", "a10g"), ("4090", "rtx4090"), ("b200", "b200")):
        if key in name:
            return alias
    return device.slug


def run_calibration(device: Device, dtypes, quick: bool, command: str, seed: int = 0, progress: bool = True,
                    plan: Plan | None = None) -> HardwareSpec:
    """Measure, fit and return the profile (a HardwareSpec with a `measured` block); writing is the caller's."""
    check_hold_out()
    dtypes = tuple(normalize_dtype(d) for d in dtypes)
    for d in dtypes:
        get_torch_dtype(d)
    plan = plan or Plan.make(quick, dtypes, device)
    timer = Timer(device)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    started = time.perf_counter()
    contexts = {d: BenchContext(device, d, plan, timer) for d in dtypes}
    results = {d: Results() for d in dtypes}
    reference: list[float] = []
    bandwidth = {}

    jobs: list[tuple[str, Job]] = []
    for d, ctx in contexts.items():
        for family_jobs in JOB_FAMILIES:
            jobs.extend((d, job) for job in family_jobs(ctx))
    total = len(jobs) * plan.passes + 2 * len(dtypes) + 3

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    reference_ctx = contexts[dtypes[0]]
    with Progress(TextColumn("[bold]calibrate[/] {task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), disable=not progress,
                  transient=False, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"{device.name} {','.join(dtypes)}", total=total)
        reference.append(reference_gemv(reference_ctx).estimate_s)
        bar.advance(task)
        for d, ctx in contexts.items():
            bandwidth[d] = {"copy": copy_bandwidth(ctx)[0]}
            bar.advance(task)
            bandwidth[d]["gemv"] = gemv_bandwidth(ctx)[0]
            bar.advance(task)
        for p in range(plan.passes):
            order = list(jobs)
            rng.shuffle(order)
            half = len(order) // 2
            for i, (d, job) in enumerate(order):
                if p == plan.passes - 1 and i == half:
                    reference.append(reference_gemv(reference_ctx).estimate_s)
                    bar.advance(task)
                results[d].add(job.key, job.run())
                bar.advance(task)
        reference.append(reference_gemv(reference_ctx).estimate_s)
        bar.advance(task)

    profiles = {d: fit_dtype(d, results[d], bandwidth[d]["copy"], bandwidth[d]["gemv"], plan) for d in dtypes}
    duration = time.perf_counter() - started
    ref = np.array(reference)
    drift = float((ref.max() - ref.min()) / np.median(ref))
    return build_profile_spec(device, profiles, plan, command, duration, drift, tuple(float(r) for r in ref))


def build_profile_spec(device: Device, profiles: dict, plan: Plan, command: str, duration: float, drift: float,
                       reference: tuple) -> HardwareSpec:
    """The measured profile as a HardwareSpec: fitted effective peaks in the datasheet-like fields, the fitted
    `profiles` (dtype -> DtypeProfile) and the run's provenance (duration s, drift and the reference GEMV times s)
    in its `measured` block."""
    dtypes = tuple(profiles)
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    quick_note = ("--quick: bandwidth working sets of 256 MiB (not >= 1 GiB), fewer shapes and M points, one pass. "
                  if plan.quick else "")
    prov = Provenance(
        device_kind=device.kind, device_name=device.name, host_cpu=get_host_cpu_model(),
        torch_version=torch.__version__, dtypes=dtypes, threads=device.threads, date=now, command=command,
        duration_s=round(duration, 2), quick=plan.quick, drift=round(drift, 4), drift_flagged=drift > DRIFT_FLAG,
        reference_s=reference,
        notes=quick_note + f"calibrated weight shapes exclude the hold-out models {', '.join(HOLD_OUT_MODELS)}",
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
        notes=("A measured profile: expected times come from the `measured` tables (rooflinesim.calibrate.profile), "
               "the datasheet-like fields hold fitted effective numbers."),
        measured=measured,
    )
