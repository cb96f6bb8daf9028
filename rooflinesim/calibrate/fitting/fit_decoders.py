"""Whole synthetic decoders fitted on top of the per-op profile: the in-model scale, per-layer and per-step
overheads and the in-model per-layer cost (`fit_overheads`, the last step of `fit_profile.fit_dtype`), and the same
fit again from the decoder steps a profile keeps (`refit_overheads`: no measuring, for a change to the fit itself)."""

from __future__ import annotations

import numpy as np

from ...errors import InputError
from ...ops.step_ops import get_step_ops
from ...specs.hardware import Efficiency, HardwareSpec
from ...specs.measured import DecoderStep, DtypeProfile, MeasuredProfile, Provenance
from ...specs.workload import Workload
from ...timing.measured import MeasuredTiming
from ...units import GIGA
from .fit import fit_affine
from .measurements import DecoderKey, Results
from .plan import DECODER_CONTEXT, DECODER_SPECS, OVERHEAD_MODELS, get_decoder_spec


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
    timed = results.get_decoder_rows()
    for key, measured_s in timed.items():
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
    # every decoder_* residual is this fit's: a refit drops what the last fit said (a warm row that is no longer one)
    residuals = {k: v for k, v in profile.residuals.items() if not k.startswith("decoder_")}
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
        "residuals": residuals, "decoder_steps": tuple(DecoderStep(model=k.name, batch=k.batch, new_tokens=k.new_tokens,
                                                                   time_s=float(t)) for k, t in timed.items()),
    })


class _StoredSteps:
    """The decoder steps a profile keeps, in the form `fit_overheads` reads measurements in."""

    def __init__(self, steps: tuple[DecoderStep, ...]):
        self.steps = steps

    def get_decoder_rows(self) -> dict[DecoderKey, float]:
        return {DecoderKey(s.model, s.batch, s.new_tokens): s.time_s for s in self.steps}


def refit_overheads(dtype: str, profile: DtypeProfile, in_model_layer: bool = True) -> DtypeProfile:
    """`fit_overheads` again on the decoder steps `profile` keeps, without measuring: what a change to the fit (or
    to the per-op prices under it) does to a committed profile. The profile unchanged when it keeps none (measured
    before they were kept). A merged profile's steps are every run's, so its refit pools them where `calibrate
    --merge` averaged each run's terms."""
    if not profile.decoder_steps:
        return profile
    unknown = sorted({s.model for s in profile.decoder_steps} - set(DECODER_SPECS))
    if unknown:
        raise InputError(f"{dtype} profile keeps steps of decoder(s) this version does not define: "
                         f"{', '.join(unknown)} (known: {', '.join(DECODER_SPECS)}); it cannot be refitted")
    return fit_overheads(dtype, profile, _StoredSteps(profile.decoder_steps), in_model_layer)


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
