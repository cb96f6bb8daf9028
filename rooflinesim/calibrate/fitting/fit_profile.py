"""The calibration measurements of one dtype fitted into a `DtypeProfile` (numpy / scipy only; no torch).

`fit_dtype` turns `Results` (call times per measured configuration) into the profile's parts, each priced with the
same op costs `rooflinesim.ops` gives the predict path:

* linear: one table of time vs M per calibrated weight shape, an effective roofline (peak FLOP/s, bandwidth,
  per-call overhead) fitted on the tables' two asymptotes, and the shape classes the tables transfer within;
* attention: c + a x KV bytes + b x FLOPs + s x score elements, for decode (one query token) and multi-token
  (verify) steps, per head dimension;
* elementwise: c + bytes / bandwidth per op family;
* cache reuse: the speed-up of weight streaming when the weights rotate over a working set that fits in the caches;
* `fit_overheads` (`calibrate.fitting.fit_decoders`), last: whole decoders as scale x (sum of their per-op times) + per-layer (dispatch, and in a
  mid-size model's layers an in-model cost) + per-step overhead (decoders the cache curve prices warm left out).

The least-squares primitives are in `calibrate.fitting.fit`; the measurement keys and the plan in
`calibrate.fitting.measurements` and `calibrate.fitting.plan`.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from ...ops.sections import get_acceptance_rule_bytes, get_sampler_bytes
from ...ops.step_ops import get_step_ops
from ...specs.workload import Workload
from ...specs.measured import AffineFit, CacheReuse, CopyTable, DtypeProfile, LinearTable
from ...units import get_dtype_bytes
from .fit import AffineResult, RooflineFit, fit_affine, fit_roofline
from .fit_decoders import IN_MODEL_SCALE_BOUNDS, fit_overheads  # noqa: F401 (IN_MODEL_SCALE_BOUNDS: re-exported)
from .measurements import (
    AttentionKey, CacheKey, ElementwiseKey, ImplementationKey, LinearKey, Results, SamplerKey, Timing,
    WarmLinearKey, find_heap_concat_outliers, find_stalled_linear_points,
)
from .plan import (CACHE_SHAPE, Plan, elementwise_step_split, get_kv_concat_allocation_bytes, get_kv_concat_bytes,
                   synthetic_spec)
from ...timing.linear_tables import LinearModel, choose_shape_alignment, get_shape_loo_error

#: cache-reuse speedups are capped here: a working set that fits in L1/L2 would otherwise claim absurd factors
MAX_CACHE_SPEEDUP = 20.0


def _as_affine_fit(result: AffineResult) -> AffineFit:
    return AffineFit(overhead_s=result.overhead_s, coefficients=result.coefficients,
                     median_abs_rel_residual=result.median_abs_rel_residual, points=result.points)


#: the fitted GEMM peak stays within this factor of the device probe's M = 256 GEMM (`measure.probe`): the roofline's
#: compute-bound asymptote rests on a few points per run, and a neighbour's burst over them once fitted 19 GFLOP/s
#: where the runs before and after fitted 110-139 (2-core AMD EPYC, fp32, --quick), pricing every hold-out 1.6-2.5x
#: too slow
PEAK_PRIOR_FACTOR = 2.0


def _linear_table(results: Results, k: int, n: int, leave_out=frozenset(), exact_only: bool = False
                  ) -> LinearTable | None:
    """The measured (K, N) points as a table vs M, `leave_out` keys left out (None: no point)."""
    rows = sorted((key.m, results.timing(key)) for key in results.keys_of(LinearKey)
                  if (key.in_features, key.out_features) == (k, n) and key not in leave_out)
    if not rows:
        return None
    return LinearTable(in_features=k, out_features=n, m=tuple(int(m) for m, _ in rows),
                       time_s=tuple(float(t.estimate_s) for _, t in rows),
                       spread=tuple(round(float(t.spread), 4) for _, t in rows), exact_only=exact_only)


def _fit_linear(dtype: str, results: Results, plan: Plan, gemv_bw: float, probe_gemm_flops_per_s: float | None = None
                ) -> tuple[tuple[LinearTable, ...], RooflineFit, float]:
    """The per-shape tables (in plan order), the roofline fitted on their asymptotes (its peak within
    PEAK_PRIOR_FACTOR of the probe's GEMM, when given), and that roofline's median relative error over every table
    point."""
    weight_bytes = get_dtype_bytes(dtype)
    tables = []
    flops, bytes_, times_s = [], [], []
    stalled = set(find_stalled_linear_points(results))  # still stalled after re-timing: the table interpolates
    for k, n in plan.all_linear_shapes:
        table = _linear_table(results, k, n, stalled)
        if table is None:
            continue
        tables.append(table)
        for m, t in zip(table.m, table.time_s):
            flops.append(2.0 * m * k * n)
            bytes_.append(k * n * weight_bytes + m * (k + n) * weight_bytes)
            times_s.append(t)
    for k, n in plan.overhead_shapes:  # their own prices only: out of the roofline fit and of the blend
        table = _linear_table(results, k, n, exact_only=True)
        if table is not None and (k, n) not in {(t.in_features, t.out_features) for t in tables}:
            tables.append(table)
    # the analytic roofline is fitted on its two asymptotes: weight streaming (M = 1) and the compute-bound points
    # (the top quarter of FLOPs per call); the tables carry everything in between
    fl, by, ts = np.array(flops), np.array(bytes_), np.array(times_s)
    envelope = (fl / by <= 2.0 / weight_bytes * 1.01) | (fl >= np.quantile(fl, 0.75))
    bounds = (None if not probe_gemm_flops_per_s else
              (probe_gemm_flops_per_s / PEAK_PRIOR_FACTOR, probe_gemm_flops_per_s * PEAK_PRIOR_FACTOR))
    roof = fit_roofline(fl[envelope], by[envelope], ts[envelope], bandwidth_guess=gemv_bw, peak_bounds=bounds)
    all_points = float(np.median(np.abs(roof.predict(fl, by) - ts) / ts))
    return tuple(tables), roof, all_points


def _fit_attention(dtype: str, results: Results) -> dict[str, AffineFit]:
    """'decode_d{head_dim}' (one query token) and 'multi_d{head_dim}' (several) fits of the masked SDPA time."""
    keys = list(results.keys_of(AttentionKey))
    attention = {}
    phases = (("decode", lambda q: q == 1), ("multi", lambda q: q > 1))
    for (label, selects), head_dim in itertools.product(phases, sorted({key.head_dim for key in keys})):
        features = {"kv_bytes": [], "flops": [], "scores": []}
        times = []
        for key in keys:
            if not selects(key.query_tokens) or key.head_dim != head_dim:
                continue
            spec = synthetic_spec("attn", key.heads * key.head_dim, key.heads, key.kv_heads, 256,
                                  head_dim=key.head_dim)
            op = next(o for o in get_step_ops(spec, Workload.in_dtype(dtype, key.batch, key.context_tokens),
                                              key.query_tokens) if o.kind == "attention")
            features["kv_bytes"].append(float(op.kv_read_bytes))
            features["flops"].append(float(op.flops))
            features["scores"].append(float(key.batch * key.heads * key.query_tokens * float(op.dims["kv_tokens"])))
            times.append(results.timing(key).estimate_s)
        if times:
            fit = fit_affine({name: np.array(v) for name, v in features.items()}, np.array(times))
            attention[f"{label}_d{head_dim}"] = _as_affine_fit(fit)
    return attention


def _elementwise_bytes(key: ElementwiseKey, dtype: str) -> float:
    """Bytes of one instance of the op family, as rooflinesim.ops counts them."""
    batch, q = elementwise_step_split(key.tokens)
    spec = synthetic_spec("elementwise", key.hidden, key.heads, key.kv_heads, key.intermediate)
    name = {"norm": "attn_norm", "residual": "attn_residual"}.get(key.family, key.family)
    for op in get_step_ops(spec, Workload.in_dtype(dtype, batch, 1000), q):
        if op.name == name:
            return float(op.bytes)
    raise KeyError(name)


def _fit_elementwise(dtype: str, results: Results) -> dict[str, AffineFit]:
    keys = list(results.keys_of(ElementwiseKey))
    elementwise = {}
    for family in sorted({key.family for key in keys}):
        family_keys = [key for key in keys if key.family == family]
        xs = [_elementwise_bytes(key, dtype) for key in family_keys]
        times = [results.timing(key).estimate_s for key in family_keys]
        elementwise[family] = _as_affine_fit(fit_affine({"bytes": np.array(xs)}, np.array(times)))
    sampler_keys = list(results.keys_of(SamplerKey))
    for kind in sorted({key.kind for key in sampler_keys}):  # 'sample' and 'accept_rule', priced like the rest
        kind_keys = [key for key in sampler_keys if key.kind == kind]
        xs = [float(get_sampler_bytes(key.batch, key.positions, key.vocab)) if kind == "sample"
              else float(get_acceptance_rule_bytes(key.batch, key.vocab)) for key in kind_keys]
        times = [results.timing(key).estimate_s for key in kind_keys]
        elementwise[kind] = _as_affine_fit(fit_affine({"bytes": np.array(xs)}, np.array(times)))
    return elementwise


def _fit_kv_concat(dtype: str, results: Results) -> CopyTable | None:
    """A concatenating KV cache (`ops.implementation_ops.kv_append_ops`): its time per point vs the size of each
    tensor it allocates (None when not measured). A point below the mmap threshold still far off the others after
    its re-time (`measurements.find_heap_concat_outliers`) is left out: the table interpolates between its points,
    so one slow reading priced every cache near it at its cost."""
    outliers = set(find_heap_concat_outliers(results))
    rows = sorted((get_kv_concat_allocation_bytes(key.size, dtype), get_kv_concat_bytes(key.size, dtype),
                   results.timing(key)) for key in results.keys_of(ImplementationKey)
                  if key.kind == "kv_concat" and key not in outliers)
    if not rows:
        return None
    return CopyTable(allocation_bytes=tuple(r[0] for r in rows), bytes_moved=tuple(r[1] for r in rows),
                     time_s=tuple(r[2].estimate_s for r in rows), spread=tuple(round(r[2].spread, 4) for r in rows))


def _fit_dispatch_s(results: Results) -> float | None:
    """One aten call's cost: the slope of the dispatch loop's time between its call counts (None unmeasured)."""
    points = sorted((key.size, results.timing(key).estimate_s) for key in results.keys_of(ImplementationKey)
                    if key.kind == "dispatch")
    if len(points) < 2 or points[-1][0] == points[0][0]:
        return None
    (n0, t0), (n1, t1) = points[0], points[-1]
    return float(min(max((t1 - t0) / (n1 - n0), 0.0), 1e-3))


def _fit_cache_reuse(dtype: str, results: Results, roof: RooflineFit, gemv_bw: float | None = None
                     ) -> CacheReuse | None:
    """The speed-up of weight streaming vs the working set, relative to the whole pool (cold), from the calls of
    every timing of the curve pooled per working set. The cold end is the pool; `gemv_bw` (the bandwidth benchmark's
    sweep of cold GEMVs over the same pool) times the same streaming again, and the faster of the two is the cold
    end: one reading slowed by a neighbour lifted every point of the curve (bf16 plateaus of 1.34-1.37x from 32 to
    384 MiB on the 2-core AMD EPYC, where the sweep streamed 10-17 % faster than the pool point; in the runs without
    a plateau the pool point was the faster one). `speedup_sigma`: each point's spread between the timings."""
    pooled: dict[int, list[float]] = {}
    repeats: dict[int, list[float]] = {}
    for key in results.keys_of(CacheKey):
        pooled.setdefault(key.working_set_bytes, []).extend(results.samples[key])
        repeats.setdefault(key.working_set_bytes, []).append(results.timing(key).estimate_s)
    rows = sorted((size, Timing(tuple(samples)).estimate_s) for size, samples in pooled.items())
    if len(rows) < 2:
        return None
    k, n = CACHE_SHAPE
    # speedup of the weight-streaming part of the call (its fixed per-call cost taken out)
    fixed = min(roof.overhead_s, 0.5 * min(t for _, t in rows))
    cold = rows[-1][1] - fixed  # the whole pool
    if gemv_bw:
        cold = min(cold, k * n * get_dtype_bytes(dtype) / gemv_bw)
    sizes = np.array([size for size, _ in rows], dtype=float)
    speedup = np.maximum(cold / (np.array([t for _, t in rows]) - fixed), 1.0)
    speedup = np.maximum.accumulate(speedup[::-1])[::-1]  # never faster for a larger working set
    # the pool is the cold end by definition; elsewhere the sample deviation of the timings' speedups (none if once)
    sigma = [float(np.std(np.clip(cold / (np.array(repeats[int(size)]) - fixed), 1.0, MAX_CACHE_SPEEDUP), ddof=1))
             if len(repeats[int(size)]) > 1 and i < len(rows) - 1 else 0.0 for i, size in enumerate(sizes)]
    warm_bandwidth = k * n * get_dtype_bytes(dtype) / (rows[0][1] - fixed)
    return CacheReuse(working_set_bytes=tuple(float(x) for x in sizes),
                      speedup=tuple(float(min(x, MAX_CACHE_SPEEDUP)) for x in speedup),
                      warm_bandwidth_bytes_per_s=float(warm_bandwidth),
                      speedup_sigma=tuple(sigma) if any(len(r) > 1 for r in repeats.values()) else ())


def _fit_warm_linear(results: Results) -> tuple[LinearTable, ...]:
    """The cache-warm small-shape timings as tables vs M (the pricing reads their growth from one row)."""
    by_shape: dict[tuple[int, int], list[tuple[int, float, float]]] = {}
    for key in results.keys_of(WarmLinearKey):
        timing = results.timing(key)
        by_shape.setdefault((key.in_features, key.out_features), []).append((key.m, timing.estimate_s,
                                                                             round(timing.spread, 4)))
    tables = []
    for (k, n), rows in sorted(by_shape.items()):
        rows.sort()
        if len(rows) < 2 or rows[0][0] != 1:  # the growth is read from M = 1
            continue
        tables.append(LinearTable(in_features=k, out_features=n, m=tuple(r[0] for r in rows),
                                  time_s=tuple(r[1] for r in rows), spread=tuple(r[2] for r in rows)))
    return tuple(tables)


def _median_spread(results: Results, kind) -> float:
    spreads = [results.timing(key).spread for key in results.keys_of(kind)]
    return float(np.median(spreads)) if spreads else 0.0


def fit_dtype(dtype: str, results: Results, copy_bw: float, gemv_bw: float, plan: Plan,
              probe_gemm_flops_per_s: float | None = None) -> DtypeProfile:
    """Fit one dtype's measurements into a DtypeProfile (overheads from the tiny decoders fitted last).

    copy_bw and gemv_bw are the measured streaming bandwidths (B/s) of a copy and of cold-weight GEMVs;
    probe_gemm_flops_per_s, the device probe's GEMM throughput (the prior of the fitted peak; None: no prior).
    """
    tables, roof, all_points = _fit_linear(dtype, results, plan, gemv_bw, probe_gemm_flops_per_s)
    linear = LinearModel.from_tables(tables, roof.peak_flops_per_s, gemv_bw, roof.overhead_s, get_dtype_bytes(dtype))
    alignment, small_m_by_size, small_m_by_class = choose_shape_alignment(linear)
    residuals = {
        "linear_roofline_median_abs_rel_envelope": roof.median_abs_rel_residual,
        "linear_roofline_median_abs_rel_all_points": all_points,
        "linear_roofline_bandwidth_bytes_per_s": roof.bandwidth_bytes_per_s,
        "linear_table_median_spread": float(np.median([s for t in tables for s in t.spread])),
        "linear_shape_loo_median_abs_rel": get_shape_loo_error(replace(linear, shape_alignment=alignment)),
        "linear_small_m_loo_by_size": small_m_by_size, "linear_small_m_loo_by_class": small_m_by_class,
        "attention_median_spread": _median_spread(results, AttentionKey),
        "elementwise_median_spread": _median_spread(results, ElementwiseKey),
        "linear_stalled_points_left_out": float(len(find_stalled_linear_points(results))),
        # 1: the fitted peak sits at a bound of the probe's prior (the compute-bound points measured contention)
        "linear_peak_at_probe_bound": float(bool(probe_gemm_flops_per_s) and min(
            abs(np.log(roof.peak_flops_per_s * PEAK_PRIOR_FACTOR ** sign / probe_gemm_flops_per_s))
            for sign in (-1, 1))
            < 1e-6),
    }
    profile = DtypeProfile(
        gemv_bandwidth_bytes_per_s=gemv_bw, copy_bandwidth_bytes_per_s=copy_bw,
        peak_flops_per_s=roof.peak_flops_per_s, linear_overhead_s=roof.overhead_s, linear=tables,
        linear_shape_alignment=alignment,
        attention=_fit_attention(dtype, results), elementwise=_fit_elementwise(dtype, results),
        layer_overhead_s=0.0, step_overhead_s=0.0, cache_reuse=_fit_cache_reuse(dtype, results, roof, gemv_bw),
        warm_linear=_fit_warm_linear(results), dispatch_s=_fit_dispatch_s(results),
        kv_concat=_fit_kv_concat(dtype, results),
        residuals=residuals,
    )
    return fit_overheads(dtype, profile, results)
