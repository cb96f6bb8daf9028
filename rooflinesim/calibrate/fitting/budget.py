"""Sizing a calibration run to a time budget (no torch: the probes that feed it are in `calibrate.measure.probe`).

A run first probes the device per dtype (`DeviceSpeed`: weight-streaming GEMV bandwidth, GEMM throughput, the cost
of one tiny call, the spread of a small-M call, how fast fresh tensors are filled), then prices every configuration
a plan would time with those speeds (`estimate_plan_s`: per call a roofline of the probed speeds + the call cost,
times the calls the timer makes, + the set-up each benchmark does) and picks, per dtype, the richest rung of the
ladder `LEVELS` that fits (`plan_for_budget`).

Where the time goes when the budget is short (the fit is least certain where the device is noisy and at small M):

* the slowest dtype is degraded first (fewer weight shapes, fewer large-M points, fewer whole decoders), so a device
  with slow bf16 still calibrates fp32 in full; every rung still measures every benchmark family, so the profile
  is always complete;
* the large-M (compute-bound) end is dropped before the small-M points: the roofline extrapolates the former, while
  CPU kernels saw-tooth at M <= 16 and only a measurement describes them;
* budget left over after the rung is chosen buys extra interleaved passes over the small-M linear points (more of
  them where the probed small-M spread is large), which narrows the tables where calls vary most.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...ops.step_ops import get_step_ops
from ...specs.workload import Workload
from ...units import MIB, get_dtype_bytes
from .measurements import (
    AttentionKey, CacheKey, DecoderKey, ElementwiseKey, ImplementationKey, LinearKey, MeasurementKey, SamplerKey,
    WarmLinearKey,
)
from .plan import (
    ALWAYS_MEASURED_M, CACHE_SHAPE, DECODER_CONTEXT, ELEMENTWISE_SPECS, CONCAT_CALLS, OVERHEAD_MODELS,
    OVERHEAD_TOKENS, QUICK_CACHE_WORKING_SETS, QUICK_KV_CONCAT_BYTES, WARM_WORKING_SET_BYTES, AttentionGrid,
    AttentionHeads, Plan, StepTokens, WeightShape,
    elementwise_step_split, get_cache_passes, get_decoder_spec, get_kv_concat_allocation_bytes,
)
from ...specs.measured import FRESH_ALLOCATION_BYTES

#: the ladder, richest first; `plan_for_budget` walks down it per dtype until the run fits
LEVELS = ("full", "full-1pass", "medium", "quick", "lean", "steady", "minimal")
#: share of the budget the plan may fill: the estimate is a model, and the fit and the file write follow the run
SAFETY = 0.85
#: fitting one dtype's measurements (least squares, the decoder fit pricing every decoder's ops), s (0.1 s measured
#: for two dtypes on a contended 2-core AMD EPYC; kept generous)
FIT_S = 0.5
#: the time a `--quick` run is given, s: the goal is <= 30 s wall clock, torch import and writing included, and on a
#: machine whose CPU is contended the essential configurations overrun their plan by a few seconds
QUICK_BUDGET_S = 22.0
#: python and torch cost of one job beyond its calls (allocating inputs, the timer's bookkeeping), s
JOB_SETUP_S = 0.002
#: timer limits every benchmark uses (`BenchContext.time`)
MAX_CALLS = 400
#: ops per decoder layer in eager mode (dispatch overhead of a whole decoder)
OPS_PER_LAYER = 67
#: embedding table rows of the elementwise embedding benchmark (`benchmarks.elementwise.EMBEDDING_ROWS`)
EMBEDDING_ROWS = 32768


@dataclass(frozen=True)
class DeviceSpeed:
    """What the probes measured for one dtype on this device."""

    dtype: str
    gemv_bandwidth_bytes_per_s: float  # cold weight streaming, M = 1
    gemm_flops_per_s: float  # F.linear at M = 256
    call_overhead_s: float  # one tiny op
    small_m_spread: float  # (p90 - p10) / median of a cold M = 4 call
    fill_bytes_per_s: float  # randn into a fresh tensor (inputs, caches)
    build_bytes_per_s: float = 0.0  # building a decoder (fp32 bytes of its parameters per s); 0: 1/3 of the fill
    layer_dispatch_s: float = 0.0  # one tiny decoder layer's forward (its ~67 ops' dispatch); 0: from call_overhead_s
    last_level_cache_bytes: float = 0.0  # what the cold pools are sized from (`get_kv_concat_copies`); 0: unknown


#: a 'kv_concat' point's copies of its caches hold at least this much and twice the LLC (each call reads cold)
KV_CONCAT_COLD_POOL_BYTES, KV_CONCAT_MAX_COPIES = 64 * MIB, 64


def get_kv_concat_copies(size_bytes: float, last_level_cache_bytes: float) -> int:
    """Copies of a 'kv_concat' point's two caches of `size_bytes` each, as the benchmark allocates them and the
    estimate prices them (fill, one untimed turn). With 480 MiB of LLC (2-core Xeon VM) the 48 MiB point turns over
    10: priced as one, the quick plan's implementation family was planned at 1.3 s and took 10.2 s."""
    pool = max(KV_CONCAT_COLD_POOL_BYTES, 2 * last_level_cache_bytes)
    return max(1, min(KV_CONCAT_MAX_COPIES, math.ceil(pool / (2 * size_bytes))))


#: the minimal rung, which is also what a run keeps when it falls behind its budget (`is_essential`): every rung
#: measures these, and they are enough for every fit (3 shapes x M up to 256, 4 decode + 4 verify attention points,
#: each elementwise family at two sizes, the tiny decoders + one mid-size one, a warm and a cold cache point)
MINIMAL_SHAPES = (WeightShape(384, 384), WeightShape(1536, 1536), WeightShape(384, 24576))
MINIMAL_M = (1, 4, 16, 64, 256)
MINIMAL_ATTENTION_BATCH, MINIMAL_ATTENTION_CONTEXT, MINIMAL_ATTENTION_Q = (1, 12), (96, 1500), (1, 6)
MINIMAL_ELEMENTWISE_TOKENS = (1, 40)
#: the minimal rung's one mid-size decoder: block-768 (150 MB of fp32 weights) streams them from memory on a CPU with
#: a last-level cache of tens of MB; block-384 (25 MB), which it had before, sat on the cache cliff, and as the only
#: mid-size decoder of a run it pinned the in-model scale at 1.61 (2-core AMD EPYC, fp32, --quick)
MINIMAL_BLOCK_MODELS = ("block-768",)
#: the minimal rung's cache-reuse points below its pool: with 16 MiB alone the curve ran straight from there to the
#: 512 MiB pool and priced block-768's 150 MB of fp32 weights a third warm, which left it out of the scale's fit
MINIMAL_CACHE_WORKING_SETS = (int(16 * MIB), int(64 * MIB))
#: the quick rung's two mid-size decoders, both cold in fp32 on a CPU with tens of MB of last-level cache: two widths
#: for the in-model scale and per-layer cost; block-1536 builds in a third of block-2048's time (63 M parameters
#: against 170 M), which a --quick run spent 2-3 s of its 22 on
STEADY_BLOCK_MODELS = ("block-768", "block-1536")


#: the cache-warm linear points a run that falls behind its budget still measures (the growth is read from M = 1)
MINIMAL_WARM_M = (1, 8)


def is_essential(key: MeasurementKey, plan: Plan) -> bool:
    """Whether a run that falls behind its budget still measures `key` (the minimal rung's configurations, so
    every benchmark family and every fit keeps its points); the rest is skipped when time runs out."""
    if isinstance(key, LinearKey):
        if (key.in_features, key.out_features) in plan.served_shapes:  # what the profile is for
            return key.m in MINIMAL_M or key.m <= ALWAYS_MEASURED_M
        return (key.in_features, key.out_features) in MINIMAL_SHAPES and key.m in MINIMAL_M
    if isinstance(key, AttentionKey):
        first = plan.attention.head_configs[0]
        return ((key.heads, key.kv_heads, key.head_dim) == tuple(first) and key.batch in MINIMAL_ATTENTION_BATCH
                and key.context_tokens in MINIMAL_ATTENTION_CONTEXT and key.query_tokens in MINIMAL_ATTENTION_Q)
    if isinstance(key, ElementwiseKey):
        return key.hidden == plan.elementwise_specs[0].hidden and key.tokens in MINIMAL_ELEMENTWISE_TOKENS
    if isinstance(key, DecoderKey):
        return key.name in OVERHEAD_MODELS or (key.name == plan.block_models[0] and key.batch == 1
                                               and key.new_tokens == 1 and key.build == 0)
    if isinstance(key, CacheKey):  # the first timing's smallest working set and the pool
        sizes = [k.working_set_bytes for k in plan.cache_keys()]
        return key.repeat == 0 and key.working_set_bytes in (sizes[0], max(sizes))
    if isinstance(key, WarmLinearKey):  # one row and one point of growth per shape; the rest of the grid may wait
        return key.m in MINIMAL_WARM_M
    if isinstance(key, ImplementationKey) and key.kind == "kv_concat":  # the two smallest caches: one fit
        return key.size in sorted(plan.kv_concat_bytes)[:2]
    return True


def get_level_plan(level: str, dtypes, device, served_shapes=()) -> Plan:
    """The Plan of one rung of `LEVELS`, with the `served_shapes` (`calibrate --shapes-of`) in every rung."""
    return replace(_get_generic_level_plan(level, dtypes, device), served_shapes=tuple(served_shapes))


def _get_generic_level_plan(level: str, dtypes, device) -> Plan:
    if level in ("full", "quick"):
        return Plan.make(level == "quick", dtypes, device)
    full = Plan.make(False, dtypes, device)
    quick = Plan.make(True, dtypes, device)
    if level == "full-1pass":
        return replace(full, passes=1, level=level)
    if level == "medium":
        return replace(full, level=level, passes=1, min_calls=4, min_time_s=0.01,
                       max_call_flops=5e9 if not device.is_cuda else full.max_call_flops,
                       block_tokens=(StepTokens(1, 1), StepTokens(8, 1), StepTokens(1, 5)))
    if level == "lean":
        # two vocabulary-wide shapes: an LM head is the largest linear of a small model (27-40 % of the weights of the
        # hold-outs), and a GEMV over 384-element rows runs 1.5x less efficiently than one over 1536 (AMD EPYC, fp32),
        # so K = 384 alone prices every LM head as slow. Two cold mid-size decoders of different widths pin the
        # in-model scale (`fit_profile.fit_overheads` leaves out decoders whose weights stay in the caches). The last
        # five are not multiples of 256: with fp32 on the Intel Xeon such shapes grow 1.4-3.2x from M = 1 to 4, the
        # others 1.2-2.0x, and without them the hold-outs' layers (576 x 1664, 640 x 1856) were priced 10-20 % low
        # at M = 4; heads go the other way (448 x 151,936 1.6x, 448 x 151,552 2.2x) (`plan.LINEAR_SHAPES`)
        return replace(quick, level=level, min_time_s=0.002, max_call_flops=5e8 if not device.is_cuda else 5e11,
                       linear_shapes=tuple(WeightShape(k, n) for k, n in (
                           (384, 384), (1536, 1536), (768, 192), (1536, 4096), (4096, 1536), (384, 24576),
                           (1536, 24576), (672, 672), (896, 224), (672, 2400), (2400, 672), (384, 24704))),
                       min_calls=5, m_grid=(1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 256), bandwidth_bytes=128 * MIB,
                       attention=AttentionGrid(quick.attention.head_configs, (1, 12), (96, 1500), (1, 6)),
                       elementwise_tokens=(1, 40, 256), block_models=("block-768", "block-2048"),
                       block_tokens=(StepTokens(1, 1), StepTokens(8, 1)),
                       cache_working_sets=QUICK_CACHE_WORKING_SETS)
    if level == "steady":  # QUICK_LEVEL: lean's linear shapes and M grid, fewer costly set-ups
        lean = _get_generic_level_plan("lean", dtypes, device)
        return replace(lean, level=level, elementwise_specs=ELEMENTWISE_SPECS[:1],
                       attention=replace(lean.attention, batches=(1, 6)),
                       block_models=STEADY_BLOCK_MODELS, block_tokens=(StepTokens(1, 1), StepTokens(8, 1)))
    if level == "minimal":
        # few configurations, but each from enough calls to survive a noisy, shared CPU
        return replace(quick, level=level, min_calls=5, min_time_s=0.0, max_call_flops=1.5e9,
                       linear_shapes=MINIMAL_SHAPES, m_grid=MINIMAL_M, bandwidth_bytes=64 * MIB,
                       attention=AttentionGrid((AttentionHeads(12, 3, 64),), MINIMAL_ATTENTION_BATCH,
                                               MINIMAL_ATTENTION_CONTEXT, MINIMAL_ATTENTION_Q),
                       elementwise_tokens=MINIMAL_ELEMENTWISE_TOKENS, elementwise_specs=ELEMENTWISE_SPECS[:1],
                       block_models=MINIMAL_BLOCK_MODELS, block_tokens=(StepTokens(1, 1),),
                       cache_working_sets=MINIMAL_CACHE_WORKING_SETS, kv_concat_bytes=QUICK_KV_CONCAT_BYTES[:2],
                       overhead_shapes=(),  # a device too slow for the quick plan: not even the tiny shapes
                       decoder_builds=1, cache_repeats=1)
    raise ValueError(f"unknown calibration level {level!r}; one of {', '.join(LEVELS)}")


def _timed_s(call_s: float, plan: Plan, scale: float = 1.0, min_calls: int | None = None,
             max_calls: int = MAX_CALLS) -> float:
    """What `Timer.time` spends on a call of `call_s`: warm-up by time (at least one call), then calls until both
    the minimum count and the minimum time are reached."""
    warmup_s = 0.002 if plan.quick else 0.01
    calls = min(max_calls, max(min_calls or plan.min_calls, math.ceil(plan.min_time_s * scale / max(call_s, 1e-9))))
    return max(call_s, warmup_s) + calls * call_s


def _linear_call_s(m: int, k: int, n: int, size: float, speed: DeviceSpeed) -> float:
    return max(2.0 * m * k * n / speed.gemm_flops_per_s,
               (k * n + m * (k + n)) * size / speed.gemv_bandwidth_bytes_per_s) + speed.call_overhead_s


def _decoder_forward_s(key: DecoderKey, dtype: str, speed: DeviceSpeed) -> tuple[float, float]:
    """(one forward pass s, building the decoder s) from the probed speeds."""
    spec = get_decoder_spec(key.name)
    ops = get_step_ops(spec, Workload.in_dtype(dtype, key.batch, DECODER_CONTEXT), key.new_tokens)
    work = sum(op.count * max(float(op.flops) / speed.gemm_flops_per_s,
                              float(op.bytes) / speed.gemv_bandwidth_bytes_per_s) for op in ops)
    layer = speed.layer_dispatch_s or OPS_PER_LAYER * speed.call_overhead_s
    forward = work + (spec.num_layers + 1) * layer
    # nn.Linear's own initialisation, the random normal fill and the cast: about three passes over fp32 weights
    build = spec.params * 4 / (speed.build_bytes_per_s or speed.fill_bytes_per_s / 3)
    return forward, build


def estimate_key_s(key: MeasurementKey, plan: Plan, speed: DeviceSpeed) -> float:
    """Seconds one job of the plan spends on `key` (set-up, warm-up and the timed calls)."""
    dtype = speed.dtype
    size = get_dtype_bytes(dtype)
    if isinstance(key, LinearKey):
        return JOB_SETUP_S + _timed_s(_linear_call_s(key.m, key.in_features, key.out_features, size, speed), plan)
    if isinstance(key, AttentionKey):
        per = 2 * key.batch * key.kv_heads * (key.context_tokens + key.query_tokens + 16) * key.head_dim * size
        copies = max(1, min(8, math.ceil(plan.rotate_bytes / per)))
        flops = 4.0 * key.batch * key.heads * key.query_tokens * (key.context_tokens + key.query_tokens) * key.head_dim
        # SDPA with GQA streams the KV cache at about half the GEMV bandwidth (calibration-notes.md)
        call = per / (0.5 * speed.gemv_bandwidth_bytes_per_s) + flops / speed.gemm_flops_per_s \
            + 10 * speed.call_overhead_s
        return JOB_SETUP_S + copies * per / speed.fill_bytes_per_s + _timed_s(call, plan)
    if isinstance(key, ElementwiseKey):
        batch, q = elementwise_step_split(key.tokens)
        elements = batch * q * 3 * max(key.intermediate, key.hidden)
        setup = EMBEDDING_ROWS * key.hidden * size / speed.fill_bytes_per_s if key.family == "embedding" else 0.0
        call = 2 * elements * size / speed.gemv_bandwidth_bytes_per_s + 8 * speed.call_overhead_s
        return JOB_SETUP_S + setup + _timed_s(call, plan)
    if isinstance(key, DecoderKey):
        forward, build = _decoder_forward_s(key, dtype, speed)
        # a decoder is built once per run (`BenchContext.decoder`): its first token configuration pays for it
        first = (OVERHEAD_TOKENS if key.name in OVERHEAD_MODELS else plan.block_tokens)[0]
        build = build if (key.batch, key.new_tokens) == tuple(first) else 0.0
        return JOB_SETUP_S + build + _timed_s(forward, plan, scale=2)
    if isinstance(key, CacheKey):
        k, n = CACHE_SHAPE
        copies = max(1, min(plan.rotate_bytes // (k * n * size), int(key.working_set_bytes // (k * n * size))))
        call = copies * _linear_call_s(1, k, n, size, speed)  # a timed call is a pass (`benchmarks.cache`)
        passes = get_cache_passes(copies)
        return JOB_SETUP_S + call + _timed_s(call, plan, min_calls=passes, max_calls=max(2 * passes, 100))
    if isinstance(key, WarmLinearKey):  # cache-warm weights: streamed at about the copy rate, compute as cold
        copies = max(1, int(WARM_WORKING_SET_BYTES // (key.in_features * key.out_features * size)))
        call = _linear_call_s(key.m, key.in_features, key.out_features, size, speed)
        return JOB_SETUP_S + 2 * copies * call + _timed_s(call, plan)
    if isinstance(key, ImplementationKey):
        if key.kind == "dispatch":
            return JOB_SETUP_S + _timed_s(key.size * speed.call_overhead_s, plan)
        # the copies of two caches of `size` filled (a memset, ~4x faster than randn), then each call reads two and
        # writes them into new tensors; above the fresh-allocation size every call also faults in their pages
        # (about a memset's rate)
        copies = get_kv_concat_copies(key.size, speed.last_level_cache_bytes)
        pages = 2 * key.size / (4 * speed.fill_bytes_per_s)
        fill = copies * 2 * key.size / (4 * speed.fill_bytes_per_s)
        # from glibc's largest mmap threshold up (`specs.measured.CopyTable`)
        fresh = get_kv_concat_allocation_bytes(key.size, speed.dtype) >= FRESH_ALLOCATION_BYTES
        call = 4 * key.size / speed.gemv_bandwidth_bytes_per_s + (pages if fresh else 0.0)
        # one untimed turn over the copies first (`benchmarks.implementation._time_concat`)
        return JOB_SETUP_S + fill + copies * call + _timed_s(call, plan, min_calls=CONCAT_CALLS)
    if isinstance(key, SamplerKey):  # float64 probabilities, a few passes over them and ~20 small calls
        rows = key.batch * (key.positions + 1)
        call = 6 * rows * key.vocab * 8 / speed.gemv_bandwidth_bytes_per_s + 20 * speed.call_overhead_s
        # every timed call follows an untimed decode step of the tiny decoder (`benchmarks.sampler`): the family
        # took 0.5-0.7 s against 0.3 s planned in quiet --quick runs, 9-10 s under two busy neighbours
        before, _ = _decoder_forward_s(DecoderKey(OVERHEAD_MODELS[0], 1, 1), dtype, speed)
        calls = min(MAX_CALLS, max(plan.min_calls, math.ceil(plan.min_time_s / max(call + before, 1e-9))))
        return JOB_SETUP_S + _timed_s(call, plan) + (calls + 1) * before
    raise TypeError(f"no cost model for {key!r}")


def estimate_fixed_s(plan: Plan, speed: DeviceSpeed) -> float:
    """One dtype's cost outside its jobs: the cold pool, the two bandwidth benchmarks and the fit."""
    size = get_dtype_bytes(speed.dtype)
    pool = plan.rotate_bytes / speed.fill_bytes_per_s * 0.25  # torch.full: a memset, ~4x faster than randn
    copy = _timed_s(plan.bandwidth_bytes / speed.gemv_bandwidth_bytes_per_s, plan, scale=2) \
        + plan.bandwidth_bytes / speed.fill_bytes_per_s * 0.25
    k = 2048 if plan.quick else 4096
    sweep = (plan.rotate_bytes // (k * k * size)) * _linear_call_s(1, k, k, size, speed)
    sweeps = _timed_s(sweep, plan, scale=2, min_calls=3 if plan.quick else plan.min_calls)  # bandwidth.gemv_bandwidth
    return pool + copy + sweeps + FIT_S


def estimate_reference_s(speed: DeviceSpeed) -> float:
    """The drift reference GEMV (1536 x 1536, at least 20 calls and 50 ms), timed three times."""
    call = _linear_call_s(1, 1536, 1536, get_dtype_bytes(speed.dtype), speed)
    return 3 * (max(call, 0.002) + max(20 * call, 0.05))


#: the rung every dtype of a `--quick` run measures: the same configurations on every run on a device, so that
#: successive runs fit the same unknowns (the probe chose the rung before, and three runs in a row on the 2-core AMD
#: EPYC got fp32 minimal / lean / lean and bf16 quick / minimal / quick, with hold-out medians of 8.5-82 %)
QUICK_LEVEL = "steady"
def small_m_keys(plan: Plan) -> list[LinearKey]:
    """The linear points an extra pass repeats: M <= ALWAYS_MEASURED_M, where CPU kernels saw-tooth."""
    return [key for key in plan.linear_keys() if key.m <= ALWAYS_MEASURED_M]


def estimate_plan_s(plan: Plan, speed: DeviceSpeed) -> float:
    """One dtype's whole run under `plan`: every job times its passes, the extra small-M passes, the fixed costs."""
    jobs = sum(estimate_key_s(key, plan, speed) for key in plan.keys(speed.dtype)) * plan.passes
    extra = sum(estimate_key_s(key, plan, speed) for key in small_m_keys(plan)) * plan.small_m_extra_passes
    return jobs + extra + estimate_fixed_s(plan, speed)


@dataclass(frozen=True)
class BudgetPlan:
    """The plans chosen per dtype and what they are expected to cost."""

    plans: dict[str, Plan]
    estimate_s: dict[str, float]  # per dtype, s
    reference_s: float  # the drift reference, s
    budget_s: float | None  # None: no budget (the full ladder rung)
    available_s: float  # what the plans were sized to (budget x SAFETY - time already spent), s
    over_budget: bool  # even the smallest rung (or the fixed --quick one) does not fit: it takes longer than asked
    fixed: bool = False  # --quick's one rung (`plan_for_quick`), not a rung of the ladder

    @property
    def total_s(self) -> float:
        return sum(self.estimate_s.values()) + self.reference_s

    def describe(self) -> str:
        levels = ", ".join(f"{d} {p.level}" + (f" (+{p.small_m_extra_passes} small-M passes)"
                                                if p.small_m_extra_passes else "") for d, p in self.plans.items())
        note = ("" if not self.over_budget else " - over the budget: fewer calls per configuration when behind"
                if self.fixed else " - over the budget even at the smallest plan")
        budget = f" of a {self.budget_s:.0f} s budget" if self.budget_s is not None else ""
        return f"expected {self.total_s:.0f} s{budget}: {levels}{note}"


def plan_for_budget(budget_s: float | None, dtypes, device, speeds: dict[str, DeviceSpeed], spent_s: float = 0.0,
                    start: str = "full", served_shapes=()) -> BudgetPlan:
    """Per dtype, the richest rung of LEVELS (from `start` down) whose estimated run fits in the budget (after
    `spent_s` already spent), degrading the dtype with the most expensive plan first; then spend what is left on
    extra small-M passes. budget_s None: every dtype at `start`, no extra passes. `served_shapes` are in every rung."""
    dtypes = tuple(dtypes)
    ladder = LEVELS[LEVELS.index(start):]
    plans = {d: get_level_plan(ladder[0], dtypes, device, served_shapes) for d in dtypes}
    reference = estimate_reference_s(speeds[dtypes[0]])
    if budget_s is None:
        cost = {d: estimate_plan_s(plans[d], speeds[d]) for d in dtypes}
        return BudgetPlan(plans, cost, reference, None, math.inf, False)
    available = budget_s * SAFETY - spent_s - reference
    rung = {d: 0 for d in dtypes}
    cost = {d: estimate_plan_s(plans[d], speeds[d]) for d in dtypes}
    while sum(cost.values()) > available:
        movable = [d for d in dtypes if rung[d] < len(ladder) - 1]
        if not movable:
            break
        d = max(movable, key=lambda x: cost[x])  # the slowest dtype gives up detail first
        rung[d] += 1
        plans[d] = get_level_plan(ladder[rung[d]], dtypes, device, served_shapes)
        cost[d] = estimate_plan_s(plans[d], speeds[d])
    # degrading the costliest dtype may have overshot: give the others back the richest rung that still fits
    for d in sorted(dtypes, key=lambda x: cost[x]):
        while rung[d] > 0:
            richer = get_level_plan(ladder[rung[d] - 1], dtypes, device, served_shapes)
            richer_cost = estimate_plan_s(richer, speeds[d])
            if sum(cost.values()) - cost[d] + richer_cost > available:
                break
            rung[d], plans[d], cost[d] = rung[d] - 1, richer, richer_cost
    over = sum(cost.values()) > available
    if not over:
        for d in sorted(dtypes, key=lambda x: -speeds[x].small_m_spread):  # noisiest first
            one = sum(estimate_key_s(key, plans[d], speeds[d]) for key in small_m_keys(plans[d]))
            cap = 3 if speeds[d].small_m_spread > 0.05 else 1
            extra = int(min(cap, max(0.0, available - sum(cost.values())) // max(one, 1e-9)))
            if extra:
                plans[d] = replace(plans[d], small_m_extra_passes=extra)
                cost[d] = estimate_plan_s(plans[d], speeds[d])
    return BudgetPlan(plans, cost, reference, budget_s, available + reference, over)


def plan_for_quick(dtypes, device, speeds: dict[str, DeviceSpeed], spent_s: float = 0.0,
                   served_shapes=()) -> BudgetPlan:
    """`--quick`: QUICK_LEVEL for every dtype, whatever the probe says (the ladder is for `--budget`): under two or
    three busy neighbours on a 2-core VM the probe's estimate of one plan moved 8x between runs a minute apart, and
    a rung chosen from it would be a measure of the neighbours. The budget decides the repetitions only: an extra
    small-M pass where it fits, and fewer calls per configuration when the run falls behind (`pacing.budget_action`)."""
    dtypes = tuple(dtypes)
    plans = {d: get_level_plan(QUICK_LEVEL, dtypes, device, served_shapes) for d in dtypes}
    cost = {d: estimate_plan_s(plans[d], speeds[d]) for d in dtypes}
    reference = estimate_reference_s(speeds[dtypes[0]])
    available = QUICK_BUDGET_S * SAFETY - spent_s - reference
    for d in dtypes:  # one extra small-M pass per dtype where it fits
        one = sum(estimate_key_s(key, plans[d], speeds[d]) for key in small_m_keys(plans[d]))
        if sum(cost.values()) + one <= available:
            plans[d] = replace(plans[d], small_m_extra_passes=1)
            cost[d] = estimate_plan_s(plans[d], speeds[d])
    return BudgetPlan(plans, cost, reference, QUICK_BUDGET_S, available + reference,
                      sum(cost.values()) > available, fixed=True)


__all__ = ["LEVELS", "QUICK_BUDGET_S", "BudgetPlan", "DeviceSpeed", "estimate_key_s", "estimate_plan_s",
           "get_kv_concat_copies", "get_level_plan", "plan_for_budget", "plan_for_quick"]
