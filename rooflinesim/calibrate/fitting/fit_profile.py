"""The calibration measurements of one dtype fitted into a `DtypeProfile` (numpy / scipy only; no torch).

`fit_dtype` turns `Results` (call times per measured configuration) into the profile's parts, each priced with the
same op costs `rooflinesim.ops` gives the predict path:

* linear: one table of time vs M per calibrated weight shape, an effective roofline (peak FLOP/s, bandwidth,
  per-call overhead) fitted on the tables' two asymptotes, and the shape classes the tables transfer within;
* attention: c + a x KV bytes + b x FLOPs + s x score elements, for decode (one query token) and multi-token
  (verify) steps, per head dimension;
* elementwise: c + bytes / bandwidth per op family;
* cache reuse: the speed-up of weight streaming when the weights rotate over a working set that fits in the caches;
* `fit_overheads`, last: whole decoders as scale x (sum of their per-op times) + per-layer (dispatch, and in a
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
from ...specs.measured import AffineFit, CacheReuse, CopyTable, DtypeProfile, LinearTable, MeasuredProfile, Provenance
from ...specs.hardware import Efficiency, HardwareSpec
from ...units import GIGA, get_dtype_bytes
from .fit import AffineResult, RooflineFit, fit_affine, fit_roofline
from .measurements import (
    AttentionKey, CacheKey, DecoderKey, ElementwiseKey, ImplementationKey, LinearKey, Results, SamplerKey,
    WarmLinearKey, find_heap_concat_outliers, find_stalled_linear_points,
)
from .plan import (CACHE_SHAPE, DECODER_CONTEXT, OVERHEAD_MODELS, Plan, elementwise_step_split, get_decoder_spec,
                   get_kv_concat_allocation_bytes, get_kv_concat_bytes, synthetic_spec)
from ...timing.linear_tables import LinearModel, choose_shape_alignment, get_shape_loo_error
from ...timing.measured import MeasuredTiming

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
    """The speed-up of weight streaming vs the working set, relative to the whole pool (cold). The cold end is one
    configuration; `gemv_bw` (the bandwidth benchmark's sweep of cold GEMVs over the same pool) times the same
    streaming again, and the faster of the two is the cold end: one reading slowed by a neighbour lifted every
    point of the curve (bf16 plateaus of 1.34-1.37x from 32 to 384 MiB on the 2-core AMD EPYC, where the sweep
    streamed 10-17 % faster than the pool point; in the runs without a plateau the pool point was the faster one)."""
    rows = sorted((key.working_set_bytes, results.timing(key).estimate_s) for key in results.keys_of(CacheKey))
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
    warm_bandwidth = k * n * get_dtype_bytes(dtype) / (rows[0][1] - fixed)
    return CacheReuse(working_set_bytes=tuple(float(x) for x in sizes),
                      speedup=tuple(float(min(x, MAX_CACHE_SPEEDUP)) for x in speedup),
                      warm_bandwidth_bytes_per_s=float(warm_bandwidth))


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


#: a mid-size decoder whose weights per step sit this warm or warmer on the measured cache-reuse curve (0 cold .. 1
#: as warm as the smallest working set) does not pin the in-model scale while MIN_COLD_BLOCK_ROWS cold ones do; its
#: error is kept (`decoder_warm_rows_median_rel`, the curve's inside a model). The curve's cold end moves by up to
#: ~15 % of its range between --quick runs (64 MB: 1.00-1.08x against 1.7x at 16 MB, bf16, AMD EPYC)
WARM_BLOCK = 0.3
MIN_COLD_BLOCK_ROWS = 2
#: the in-model per-layer cost is fitted only when at least this many different cold mid-size decoders are in the
#: fit: with one, it and the scale are the same unknown (a warm one pays little of the cost, so it does not count;
#: the CI smoke plan's block-384 + block-1536, one row each, fitted a cost that priced its validation worse than the
#: roofline)
MIN_IN_MODEL_LAYER_MODELS = 2
#: ... and at least this many cold mid-size rows: with one row per model, the scale and the per-layer cost are solved
#: exactly from two timings, and one contended row moved the cost to 1.8 ms per layer where runs a minute apart
#: fitted 0.3 ms (--quick, 2-core AMD EPYC, fp32); a third row leaves a residual to average over
MIN_IN_MODEL_LAYER_ROWS = 3
#: the in-model scale's prior range when mid-size decoders fit it. Full calibrations gave 1.02-1.16 (2-core Xeon and
#: AMD EPYC VMs, fp32 and bf16); contended --quick runs 0.53-1.64, each with an in-model per-layer cost making up
#: the difference (0.53 with 5.1 ms per layer). Outside this range the decoders measured the neighbours, not the ops
IN_MODEL_SCALE_BOUNDS = (0.8, 1.5)


def fit_overheads(dtype: str, profile: DtypeProfile, results: Results, in_model_layer: bool = True) -> DtypeProfile:
    """Whole decoders: t = scale x (sum of their per-op times, cache reuse included) + layers x per-layer overhead
    + mid-size layers x in-model per-layer overhead + per-step overhead, all >= 0, on relative residuals: the tiny
    decoders pin the dispatch overheads, the mid-size ones the scale and the in-model per-layer cost.

    The in-model per-layer cost is what a layer of a real model costs beyond its ops timed alone and the tiny
    decoders' dispatch: after each layer's linears have streamed tens of MB of weights through the caches, the ~60
    small ops between them run slower than in a hidden-64 decoder whose every byte stays cached. It is a constant per
    layer, so it weighs most in narrow layers; a model whose weights stay cached pays none of it (it is priced times
    1 - the step's cache warmth, here and in `MeasuredTiming.get_step_overhead_s`: applied in full to the 128-wide
    pair of `acceptance validate`, 2.4 MB of weights, it took the speculative speedup error from 0.10x to 0.25x).
    Folded into the scale instead, it priced narrow and deep models too fast: with the scale fitted on the 1536- and
    2048-wide decoders alone (1.13), tiny-llama-123m's 1024-wide layers were 0.45-0.72 ms each dearer than priced,
    its LM head within 2-4 % (2-core Xeon VM, fp32). Mid-size decoders of different widths and depths
    separate the two unknowns: on that VM the fit gave 0.30 ms per layer and a scale of 1.07 (the scale alone: 1.16),
    and the hold-out target cut to 1-16 layers was priced within -5..+0 % at batch 1 against -11..+2 % by the scale
    alone. Fitted with at least MIN_IN_MODEL_LAYER_MODELS cold mid-size decoders (`in_model_layer` False: never).

    The scale multiplies the ops of the models it prices (`timing.base.is_outside_in_model_scale` names the others),
    whose weights stream from memory; a mid-size decoder whose weights the cache-reuse curve prices warm (block-384:
    25 MB in fp32 against a 32 MB last-level cache, on the steep part of the curve) measures the curve's error there
    rather than how ops slow down inside a forward pass, and with few decoders it moved the scale by 5-8 % (the
    2-core AMD EPYC, --quick). Such rows are left out of the fit when at least MIN_COLD_BLOCK_ROWS cold ones remain
    (on a device whose caches hold every mid-size decoder, they all stay in); the tiny decoders (dispatch) always
    stay in."""
    hw = _placeholder_hw({dtype: profile.model_copy(update={"in_model_scale": 1.0})})
    timing = MeasuredTiming.from_spec(hw)
    rows, is_block, warm, names, cold = [], [], [], [], []
    for key, measured_s in results.get_decoder_rows().items():
        names.append(key.name)
        spec = get_decoder_spec(key.name)
        ops = get_step_ops(spec, Workload.in_dtype(dtype, key.batch, DECODER_CONTEXT), key.new_tokens)
        step_timing = timing.for_step(ops)
        predicted = sum(float(step_timing.get_op_time(op, dtype).time_s) for op in ops)
        rows.append((predicted, spec.num_layers, measured_s))
        is_block.append(key.name not in OVERHEAD_MODELS)
        warmth = float(step_timing.get_cache_warmth(dtype))
        warm.append(is_block[-1] and warmth >= WARM_BLOCK)
        cold.append(1.0 - warmth if is_block[-1] else 0.0)  # the in-model layer cost's share, as priced
    if not rows:
        return profile
    cold_blocks = sum(b and not w for b, w in zip(is_block, warm))
    # a single mid-size decoder, warm on the cache curve, measures that curve's error rather than the scale: the
    # scale stays 1 (with several warm ones, on a device whose caches hold them all, they still fit it)
    block_models = {name for name, b in zip(names, is_block) if b}
    scale_fixed = bool(block_models) and cold_blocks == 0 and len(block_models) < 2
    left_out = sum(warm) if cold_blocks >= MIN_COLD_BLOCK_ROWS else 0
    warm_rows = [(r[0], r[1], r[2], c) for r, w, c in zip(rows, warm, cold) if w and left_out]  # out of the fit
    if left_out:
        rows = [r for r, w in zip(rows, warm) if not w]
        is_block = [b for b, w in zip(is_block, warm) if not w]
        names = [n for n, w in zip(names, warm) if not w]
        cold = [c for c, w in zip(cold, warm) if not w]
    per_op = np.array([r[0] for r in rows])
    layers = np.array([r[1] for r in rows], dtype=float)
    measured = np.array([r[2] for r in rows])
    cold_models = {name for name, b, c in zip(names, is_block, cold) if b and c > 1.0 - WARM_BLOCK}
    features = {"per_op": per_op, "layers": layers}
    cold_rows = sum(b and c > 1.0 - WARM_BLOCK for b, c in zip(is_block, cold))
    if in_model_layer and len(cold_models) >= MIN_IN_MODEL_LAYER_MODELS and cold_rows >= MIN_IN_MODEL_LAYER_ROWS:
        features["block_layers"] = layers * np.array(cold)
    bounds = {"per_op": (1.0, 1.0) if scale_fixed else IN_MODEL_SCALE_BOUNDS} if block_models else None
    if "block_layers" in features:
        # at most what a cold mid-size decoder's layer costs in its ops: a contended --quick run fitted 19 ms per
        # layer beside a scale at its lower bound (2-core AMD EPYC at CPU pressure 98 %); full calibrations fit
        # 0.27-0.49 ms there, against about 2 ms of ops per layer of block-768 (fp32, batch 1)
        bounds["block_layers"] = (0.0, float(min(p / n for p, n, c in zip(per_op, layers, cold)
                                                 if c > 1.0 - WARM_BLOCK)))
    fit = fit_affine(features, measured, bounds=bounds)
    # only tiny decoders: a scale outside [0.2, 5] means they measured something else than their ops
    scale = min(max(fit.coefficients["per_op"], 0.2), 5.0)
    in_model_layer_s = fit.coefficients.get("block_layers", 0.0)
    predicted = (scale * per_op + fit.coefficients["layers"] * layers + fit.overhead_s
                 + in_model_layer_s * layers * np.array(cold))
    residuals = dict(profile.residuals)
    residuals["decoder_fit_rows"] = float(len(rows))
    residuals["decoder_fit_warm_rows_left_out"] = float(left_out)
    if warm_rows:
        residuals["decoder_warm_rows_median_rel"] = float(np.median([
            m / (scale * p + fit.coefficients["layers"] * n + fit.overhead_s + in_model_layer_s * n * c) - 1.0
            for p, n, m, c in warm_rows]))
    # 1: the scale was kept at 1 (no cold mid-size decoder); 2: it sits at a bound of IN_MODEL_SCALE_BOUNDS
    residuals["decoder_fit_scale_prior"] = (1.0 if scale_fixed else
                                           2.0 if block_models and min(abs(scale - b) for b in
                                                                       IN_MODEL_SCALE_BOUNDS) < 1e-6 else 0.0)
    relative = np.abs(predicted - measured) / measured
    residuals["decoder_fit_median_abs_rel"] = float(np.median(relative))
    if any(is_block):  # the mid-size decoders: the whole-step error of models of a useful size (the interval's)
        residuals["decoder_fit_median_abs_rel_blocks"] = float(np.median(relative[np.array(is_block)]))
    residuals["decoder_per_op_only_median_abs_rel"] = float(np.median(np.abs(per_op - measured) / measured))
    return profile.model_copy(update={
        "layer_overhead_s": float(fit.coefficients["layers"]), "step_overhead_s": float(fit.overhead_s),
        "in_model_scale": float(scale), "in_model_layer_overhead_s": float(in_model_layer_s),
        "residuals": residuals,
    })


def _placeholder_hw(dtypes: dict[str, DtypeProfile]) -> HardwareSpec:
    """A HardwareSpec carrying only the profile being fitted, so `MeasuredTiming` can price the decoders' ops; its
    provenance and datasheet fields are placeholders nothing reads."""
    first = next(iter(dtypes.values()))
    prov = Provenance(device_kind="cpu", device_name="fit", host_cpu="fit", torch_version="fit",
                      dtypes=tuple(dtypes), threads=1, date="", command="", duration_s=0.0, quick=True, drift=0.0,
                      drift_flagged=False)
    return HardwareSpec(
        schema_version=1, name="fit", kind="cpu", vendor="fit",
        peak_flops_per_s={d: p.peak_flops_per_s for d, p in dtypes.items()},
        memory_bandwidth_bytes_per_s=first.gemv_bandwidth_bytes_per_s, memory_capacity_bytes=GIGA,
        last_level_cache_bytes=0, efficiency=Efficiency(memory_fraction=1, compute_fraction=1, kernel_overhead_s=0),
        sources={"peak_flops_per_s": "fit", "memory_bandwidth_bytes_per_s": "fit", "memory_capacity_bytes": "fit"},
        measured=MeasuredProfile(profile_name="fit", base_hardware="fit", provenance=prov, dtypes=dtypes),
    )
