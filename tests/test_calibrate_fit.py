"""Calibration fits: the least-squares primitives, the overhead / in-model fits, the warm tables, and fitting
without torch (numpy / scipy only)."""

from __future__ import annotations

import json
import subprocess
import types
import sys
from pathlib import Path

import numpy as np
import pytest

from rooflinesim.calibrate.fitting.fit import fit_affine, fit_roofline
from rooflinesim.specs.workload import Workload
from rooflinesim.timing.measured import MeasuredTiming
from rooflinesim.calibrate.fitting.plan import synthetic_spec
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.specs.registry import load_model
from rooflinesim.specs.measured import LinearTable

from .synthetic_profiles import BW_TRUE, C_TRUE, P_TRUE, make_profile, with_cache

ROOT = Path(__file__).resolve().parent.parent


# --- fitting -----------------------------------------------------------------------------------------------------------


def test_fit_roofline_recovers_known_parameters():
    rng = np.random.default_rng(0)
    flops, bytes_, times = [], [], []
    for k, n in ((256, 256), (512, 512), (1024, 1024), (2048, 2048), (4096, 4096)):
        for m in (1, 2, 4, 16, 64, 256, 1024, 4096):
            f, b = 2.0 * m * k * n, k * n * 4.0
            flops.append(f)
            bytes_.append(b)
            times.append((max(f / P_TRUE, b / BW_TRUE) + C_TRUE) * rng.lognormal(0.0, 0.01))
    fit = fit_roofline(flops, bytes_, times)
    assert fit.peak_flops_per_s == pytest.approx(P_TRUE, rel=0.05)
    assert fit.bandwidth_bytes_per_s == pytest.approx(BW_TRUE, rel=0.05)
    assert fit.overhead_s == pytest.approx(C_TRUE, rel=0.05)
    assert fit.median_abs_rel_residual < 0.02


def test_fit_affine_recovers_known_parameters():
    rng = np.random.default_rng(1)
    # log-spaced, as the calibration grids are: the intercept needs points where it is a visible share of the time
    kv = 10 ** rng.uniform(4, 8, 60)
    scores = 10 ** rng.uniform(3, 7, 60)
    truth = 30e-6 + kv / 10e9 + scores * 2e-10
    fit = fit_affine({"kv_bytes": kv, "scores": scores}, truth * rng.lognormal(0.0, 0.005, 60))
    assert fit.overhead_s == pytest.approx(30e-6, rel=0.05)
    assert fit.coefficients["kv_bytes"] == pytest.approx(1 / 10e9, rel=0.05)
    assert fit.coefficients["scores"] == pytest.approx(2e-10, rel=0.05)


def test_fit_affine_keeps_coefficients_non_negative():
    x = np.linspace(1e6, 1e8, 20)
    fit = fit_affine({"bytes": x, "noise": np.ones_like(x)[::-1] * np.arange(20)}, 1e-5 + x / 1e10)
    assert all(v >= 0 for v in fit.coefficients.values())



def _warm_table(k, n, ms=(1, 2, 4, 16, 64)):
    # a cached GEMM: 5 us at one row, a GEMV-to-GEMM step to 2x at M = 2, then the small-M compute rate
    times = [5e-6 if m == 1 else 10e-6 + 2 * m * k * n / 50e9 for m in ms]
    return LinearTable(in_features=k, out_features=n, m=ms, time_s=tuple(times), spread=tuple(0.02 for _ in ms))


def test_warm_tables_make_cached_small_linears_grow_with_m_and_never_above_cold():
    """With measured warm tables a fully warm step's linear costs its one-row cached price times the tables' growth
    from M = 1 (here the same shape: exactly its t(M) / t(1)), floored by the warm-bandwidth rule and capped at the
    cold price; one row is priced as before; a step pushed out of the cache is unchanged."""
    from rooflinesim.timing.linear_tables import get_warm_growth

    hw = with_cache(make_profile(), (1e7, 1e8, 1e9), (2.0, 1.5, 1.0))
    prof = hw.measured.dtypes["fp32"].model_copy(update={"warm_linear": (_warm_table(256, 512),)})
    fitted = hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {"fp32": prof}})})
    timing, before = MeasuredTiming.from_spec(fitted), MeasuredTiming.from_spec(hw)
    assert float(get_warm_growth(timing.models["fp32"].warm, 16, 256, 512)) == pytest.approx(
        (10e-6 + 2 * 16 * 256 * 512 / 50e9) / 5e-6)
    tiny = synthetic_spec("tiny", 256, 4, 2, 512, layers=2, vocab=64)  # ~2 MB of fp32 weights: fully warm
    for m in (1, 5, 16, 64):
        ops = get_step_ops(tiny, Workload.in_dtype("fp32", 1, 64), 1, batch=m)
        gate = next(op for op in ops if op.name == "gate_proj")
        old = float(before.for_step(ops).get_op_time(gate, "fp32").time_s) / gate.count
        cold = float(MeasuredTiming.from_spec(make_profile()).for_step(ops).get_op_time(gate, "fp32").time_s)
        cold /= gate.count
        ops1 = get_step_ops(tiny, Workload.in_dtype("fp32", 1, 64), 1)
        one = float(before.for_step(ops1).get_op_time(next(op for op in ops1 if op.name == "gate_proj"), "fp32").time_s)
        one /= gate.count
        growth = float(get_warm_growth(timing.models["fp32"].warm, m, 256, 512))
        got = float(timing.for_step(ops).get_op_time(gate, "fp32").time_s) / gate.count
        assert got == pytest.approx(min(cold, max(old, one * growth)), rel=1e-6)
        assert got <= cold * (1 + 1e-9) and got >= old * (1 - 1e-9)
        if m == 1:
            assert got == pytest.approx(old)
    small = load_model("tiny-draft-2l")
    big = get_step_ops(small, Workload.in_dtype("fp32", 1, 128), 1)
    head = next(op for op in big if op.name == "lm_head")
    assert float(timing.with_co_resident(2e9).for_step(big).get_op_time(head, "fp32").time_s) == pytest.approx(
        float(before.with_co_resident(2e9).for_step(big).get_op_time(head, "fp32").time_s))


def test_warm_tables_are_fitted_from_the_warm_timings():
    from rooflinesim.calibrate.fitting.fit_profile import _fit_warm_linear
    from rooflinesim.calibrate.fitting.measurements import Results, Timing, WarmLinearKey
    from rooflinesim.calibrate.fitting.plan import WARM_LINEAR_SHAPES, WARM_M_GRID

    results = Results()
    for k, n in WARM_LINEAR_SHAPES:
        for m in WARM_M_GRID:
            results.add(WarmLinearKey(k, n, m), Timing((1e-6 * m,) * 3))
    tables = _fit_warm_linear(results)
    assert [(t.in_features, t.out_features) for t in tables] == sorted(WARM_LINEAR_SHAPES)
    assert tables[0].m == WARM_M_GRID and tables[0].time_s[-1] == pytest.approx(1e-6 * WARM_M_GRID[-1])
    assert _fit_warm_linear(Results()) == ()


def test_fit_overheads_recovers_scale_and_dispatch_from_synthetic_decoders():
    """Whole-decoder times generated from known parameters (plus 0.2 % noise: the per-step overhead is 2-5 % of a
    tiny decoder's time) are fitted back within 5 %."""
    from rooflinesim.calibrate.fitting.fit_profile import fit_overheads
    from rooflinesim.calibrate.fitting.measurements import DecoderKey, Results, Timing
    from rooflinesim.calibrate.fitting.plan import DECODER_CONTEXT, get_decoder_spec

    profile = make_profile().measured.dtypes["fp32"].model_copy(update={"layer_overhead_s": 0.0,
                                                                        "step_overhead_s": 0.0})
    timing = MeasuredTiming.from_spec(make_profile())
    true_scale = 1.2
    per_layer, per_step = 150e-6, 40e-6
    rng = np.random.default_rng(3)
    results = Results()
    configs = [("overhead-2l", 1, 1), ("overhead-2l", 1, 4), ("overhead-8l", 1, 1), ("overhead-8l", 1, 4)]
    configs += [(name, b, q) for name in ("block-384", "block-768", "block-1536", "block-2048")
                for b, q in ((1, 1), (4, 1), (1, 5))]
    for name, batch, q in configs:
        spec = get_decoder_spec(name)
        per_op = sum(float(timing.get_op_time(op, "fp32").time_s)
                     for op in get_step_ops(spec, Workload.in_dtype("fp32", batch, DECODER_CONTEXT), q))
        true = true_scale * per_op + spec.num_layers * per_layer + per_step
        results.add(DecoderKey(name, batch, q), Timing(tuple(true * rng.lognormal(0, 0.002, 5))))
    fitted = fit_overheads("fp32", profile, results)
    assert fitted.in_model_scale == pytest.approx(true_scale, rel=0.05)
    assert fitted.layer_overhead_s == pytest.approx(per_layer, rel=0.05)
    assert fitted.step_overhead_s == pytest.approx(per_step, rel=0.05)
    assert fitted.residuals["decoder_fit_median_abs_rel"] < 0.02


def test_the_decoder_steps_are_kept_and_refit_gives_the_terms_back(tmp_path):
    """The profile keeps each decoder configuration's time (the median over its builds); fitting again from a
    profile written and read back reproduces its terms; the predict path prices each kept step as the fit did; a
    profile without steps is returned as it is; a merged profile keeps every run's steps."""
    from rooflinesim.calibrate.fitting.fit_decoders import fit_overheads, refit_overheads
    from rooflinesim.errors import InputError
    from rooflinesim.calibrate.fitting.measurements import DecoderKey, Results, Timing
    from rooflinesim.calibrate.fitting.merge import merge_dtype
    from rooflinesim.calibrate.fitting.plan import DECODER_CONTEXT, get_decoder_spec
    from rooflinesim.specs.profiles import load_profile, write_profile

    mib = 2**20  # a cache curve, as every shipped profile has: the tiny decoders are priced warm
    hw = with_cache(make_profile(), (16 * mib, 64 * mib, 1024 * mib), (2.0, 1.0, 1.0))
    profile = hw.measured.dtypes["fp32"]
    timing = MeasuredTiming.from_spec(hw)
    rng = np.random.default_rng(7)
    results = Results()
    for name in ("overhead-2l", "overhead-8l", "block-768", "block-1536", "block-2048"):
        spec = get_decoder_spec(name)
        for batch, q in ((1, 1), (4, 1), (1, 5)):
            per_op = sum(float(timing.get_op_time(op, "fp32").time_s)
                         for op in get_step_ops(spec, Workload.in_dtype("fp32", batch, DECODER_CONTEXT), q))
            for build in (0, 1, 2):  # three builds: the kept time is their median
                true = (1.1 + 0.05 * build) * per_op + spec.num_layers * 2e-4 + 4e-5
                results.add(DecoderKey(name, batch, q, build), Timing(tuple(true * rng.lognormal(0, 0.01, 3))))
    fitted = fit_overheads("fp32", profile, results)
    assert len(fitted.decoder_steps) == 15
    first = fitted.decoder_steps[0]
    assert (first.model, first.batch, first.new_tokens) == ("overhead-2l", 1, 1)
    assert first.time_s == pytest.approx(results.get_decoder_rows()[DecoderKey("overhead-2l", 1, 1)])

    written = hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {"fp32": fitted}})})
    path = write_profile(written, tmp_path / "p.yaml")
    read_back = load_profile(str(path)).measured.dtypes["fp32"]
    # from a profile with other terms in it: the refit starts from the stored steps, not from those terms
    stale = {**read_back.residuals, "decoder_warm_rows_median_rel": 0.5}  # what an earlier fit with a warm row said
    again = refit_overheads("fp32", read_back.model_copy(update={"in_model_scale": 0.9, "layer_overhead_s": 0.0,
                                                                 "residuals": stale}))
    assert "decoder_warm_rows_median_rel" not in again.residuals  # no warm row now
    assert again.residuals == fitted.residuals
    for name in ("in_model_scale", "layer_overhead_s", "step_overhead_s", "in_model_layer_overhead_s"):
        assert getattr(again, name) == pytest.approx(getattr(fitted, name), rel=1e-9, abs=1e-15), name
    assert again.decoder_steps == fitted.decoder_steps

    # the predict path prices a kept step as the fit did: its errors are the fit's residual
    from rooflinesim.scenario.builder import build_scenario
    from rooflinesim.step import get_step_cost

    errors = []
    for step in fitted.decoder_steps:
        spec = get_decoder_spec(step.model)
        scenario = build_scenario(written, spec, step.batch, DECODER_CONTEXT, weight_dtype="fp32", kv_dtype="fp32",
                                  activation_dtype="fp32", speculative=False, allow_long_context=True, engine="ideal")
        priced = get_step_cost(scenario.hardware, spec, scenario.workload, step.new_tokens, scenario.timing,
                               DECODER_CONTEXT, step.batch).step_time_s
        errors.append(abs(float(priced) / step.time_s - 1))
    assert np.median(errors) == pytest.approx(fitted.residuals["decoder_fit_median_abs_rel"], rel=1e-6)

    assert refit_overheads("fp32", profile) is profile  # measured before the steps were kept
    renamed = fitted.model_copy(update={"decoder_steps": (first.model_copy(update={"model": "block-999"}),)})
    with pytest.raises(InputError, match="block-999"):
        refit_overheads("fp32", renamed)
    merged = merge_dtype("fp32", [fitted, fitted.model_copy(update={"decoder_steps": fitted.decoder_steps[:2]})])
    assert len(merged.decoder_steps) == 17


@pytest.mark.parametrize("in_model_layer_s", [0.0, 400e-6])
def test_fit_overheads_separates_the_in_model_layer_cost_from_the_scale(in_model_layer_s):
    """Mid-size decoders whose every layer costs `in_model_layer_s` more than its ops and the tiny decoders'
    dispatch: the fit gives that cost back (within 10 %, or under 10 us when there is none) with the true scale,
    where the scale alone would absorb it (and price a narrow model's layers too fast); with a single mid-size
    decoder the two are one unknown and only the scale is fitted."""
    from rooflinesim.calibrate.fitting.fit_profile import fit_overheads
    from rooflinesim.calibrate.fitting.measurements import DecoderKey, Results, Timing
    from rooflinesim.calibrate.fitting.plan import DECODER_CONTEXT, get_decoder_spec

    profile = make_profile().measured.dtypes["fp32"]
    timing = MeasuredTiming.from_spec(make_profile())
    rng = np.random.default_rng(5)

    def results_for(blocks):
        results = Results()
        for name in ("overhead-2l", "overhead-8l") + blocks:
            spec = get_decoder_spec(name)
            block = not name.startswith("overhead")
            for batch, q in ((1, 1), (4, 1), (1, 5)) if block else ((1, 1), (1, 4)):
                per_op = sum(float(timing.get_op_time(op, "fp32").time_s)
                             for op in get_step_ops(spec, Workload.in_dtype("fp32", batch, DECODER_CONTEXT), q))
                true = 1.1 * per_op + spec.num_layers * (120e-6 + block * in_model_layer_s) + 40e-6
                results.add(DecoderKey(name, batch, q), Timing(tuple(true * rng.lognormal(0, 0.002, 5))))
        return results

    fitted = fit_overheads("fp32", profile, results_for(("block-384", "block-768", "block-1536", "block-2048")))
    assert fitted.in_model_scale == pytest.approx(1.1, rel=0.03)
    assert fitted.layer_overhead_s == pytest.approx(120e-6, rel=0.1)
    assert fitted.in_model_layer_overhead_s == pytest.approx(in_model_layer_s, rel=0.1, abs=10e-6)
    assert fitted.residuals["decoder_fit_median_abs_rel"] < 0.02
    old = fit_overheads("fp32", profile, results_for(("block-384", "block-768", "block-1536", "block-2048")),
                        in_model_layer=False)
    assert old.in_model_layer_overhead_s == 0.0
    if in_model_layer_s:  # the scale alone absorbs the per-layer cost and misses the decoders by more
        assert old.in_model_scale > 1.12
        assert old.residuals["decoder_fit_median_abs_rel"] > 2 * fitted.residuals["decoder_fit_median_abs_rel"]
    one = fit_overheads("fp32", profile, results_for(("block-1536",)))
    assert one.in_model_layer_overhead_s == 0.0


def test_the_in_model_layer_cost_is_priced_per_layer_of_every_model():
    hw = make_profile()
    prof = hw.measured.dtypes["fp32"]
    more = prof.model_copy(update={"in_model_layer_overhead_s": 300e-6})
    hw_more = hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {"fp32": more}})})
    base, with_cost = MeasuredTiming.from_spec(hw), MeasuredTiming.from_spec(hw_more)
    for layers in (2, 8, 32):
        assert with_cost.get_step_overhead_s(layers, "fp32") - base.get_step_overhead_s(layers, "fp32") == \
            pytest.approx(layers * 300e-6)
    # a model whose weights stay cached pays none of it, one half way down the cache curve half
    mib = 2**20
    cached = MeasuredTiming.from_spec(with_cache(hw_more, (16 * mib, 64 * mib, 1024 * mib), (2.0, 1.5, 1.0)))
    plain = MeasuredTiming.from_spec(with_cache(hw, (16 * mib, 64 * mib, 1024 * mib), (2.0, 1.5, 1.0)))
    for weight_mib, warmth in ((8, 1.0), (64, 0.5), (2048, 0.0)):
        ops = [types.SimpleNamespace(count=1, weight_bytes=weight_mib * mib)]
        extra = cached.for_step(ops).get_step_overhead_s(4, "fp32") - plain.for_step(ops).get_step_overhead_s(4, "fp32")
        assert extra == pytest.approx(4 * 300e-6 * (1 - warmth))


def test_fit_overheads_leaves_out_decoders_the_cache_curve_prices_warm():
    """block-384's weights (25 MB in fp32) sit on the steep part of a cache-reuse curve that drops between 16 and
    64 MB: its time measures that curve's error, not the in-model scale, so it is left out while two cold mid-size
    decoders remain; alone, it stays in the fit of the dispatch terms but the scale is kept at 1."""
    from rooflinesim.calibrate.fitting.fit_profile import fit_overheads
    from rooflinesim.calibrate.fitting.measurements import DecoderKey, Results, Timing
    from rooflinesim.calibrate.fitting.plan import DECODER_CONTEXT, get_decoder_spec

    mib = 2**20
    hw = with_cache(make_profile(), (16 * mib, 64 * mib, 1024 * mib), (2.0, 1.0, 1.0))
    profile = hw.measured.dtypes["fp32"]
    timing = MeasuredTiming.from_spec(hw)

    def results_for(names):
        results = Results()
        for name in ("overhead-2l", "overhead-8l") + names:
            spec = get_decoder_spec(name)
            for batch, q in ((1, 1), (1, 4)) if name.startswith("overhead") else ((1, 1), (8, 1)):
                ops = get_step_ops(spec, Workload.in_dtype("fp32", batch, DECODER_CONTEXT), q)
                step = timing.for_step(ops)
                per_op = sum(float(step.get_op_time(op, "fp32").time_s) for op in ops)
                scale = 1.6 if name == "block-384" else 1.2  # the warm one runs slower than its curve says
                results.add(DecoderKey(name, batch, q), Timing((scale * per_op + spec.num_layers * 1e-4 + 5e-5,)))
        return results

    fitted = fit_overheads("fp32", profile, results_for(("block-384", "block-768", "block-2048")))
    assert fitted.in_model_scale == pytest.approx(1.2, rel=0.01)
    assert fitted.residuals["decoder_fit_warm_rows_left_out"] == 2
    # what the left-out rows say about the curve is kept: block-384 ran 1.6 / 1.2 of the price its warmth gave it
    assert 0.2 < fitted.residuals["decoder_warm_rows_median_rel"] < 0.34
    assert "decoder_warm_rows_median_rel" not in fit_overheads(
        "fp32", profile, results_for(("block-768", "block-2048"))).residuals  # no warm decoder: nothing to say
    # regression (the CI smoke plan): a warm and a cold mid-size decoder are one cold model, too few to tell an
    # in-model per-layer cost from the scale, so none is fitted
    smoke = Results()
    for name in ("overhead-2l", "overhead-8l", "block-384", "block-1536"):  # one row per mid-size decoder: none left out
        spec = get_decoder_spec(name)
        for batch, q in ((1, 1), (1, 4)) if name.startswith("overhead") else ((1, 1),):
            ops = get_step_ops(spec, Workload.in_dtype("fp32", batch, DECODER_CONTEXT), q)
            per_op = sum(float(timing.for_step(ops).get_op_time(op, "fp32").time_s) for op in ops)
            extra = 1.6 if name == "block-384" else 1.2
            smoke.add(DecoderKey(name, batch, q), Timing((extra * per_op + spec.num_layers * 1e-4 + 5e-5,)))
    fitted_smoke = fit_overheads("fp32", profile, smoke)
    assert fitted_smoke.residuals["decoder_fit_warm_rows_left_out"] == 0
    assert fitted_smoke.in_model_layer_overhead_s == 0.0
    # a single warm mid-size decoder measures the cache curve's error (1.6 here): it no longer pins the scale (q1 of
    # the 07:01 quiet window: block-384 alone fitted 1.61), which stays 1, flagged in the residuals
    alone = fit_overheads("fp32", profile, results_for(("block-384",)))
    assert alone.residuals["decoder_fit_warm_rows_left_out"] == 0 and alone.in_model_scale == 1.0
    assert alone.residuals["decoder_fit_scale_prior"] == 1.0
    assert "decoder_warm_rows_median_rel" not in alone.residuals  # kept in the fit: not an out-of-fit reading


def test_import_profile_does_not_import_torch():
    code = ("import sys, rooflinesim.specs.profiles, rooflinesim.calibrate.fitting.fit, rooflinesim.pricing.predict; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


#: run first in a subprocess: any later `import torch` (or torch.anything) raises ImportError, as without torch
BLOCK_TORCH = """
import sys
class BlockTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch is blocked: {name}")
sys.meta_path.insert(0, BlockTorch())
"""


def _run_without_torch(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", BLOCK_TORCH + code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_torch_blocker_blocks_torch():
    out = subprocess.run([sys.executable, "-c", BLOCK_TORCH + "import torch"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode != 0 and "torch is blocked" in out.stderr


def test_fitting_imports_and_fits_without_torch():
    """The fitting side of calibrate (keys, plan, fits) needs no torch: fit_dtype recovers a known linear roofline
    from synthetic timings with torch blocked."""
    code = f"""
import types
from rooflinesim.calibrate.fitting import fit, fit_profile, measurements, plan
from rooflinesim.calibrate.fitting.measurements import AttentionKey, CacheKey, ElementwiseKey, LinearKey, Results, Timing
p = plan.Plan.make(True, ("fp32",), types.SimpleNamespace(is_cuda=False))
results = Results()
for k, n in p.linear_shapes:
    for m in p.m_grid:
        t = max(2.0 * m * k * n / {P_TRUE!r}, (k * n + m * (k + n)) * 4.0 / {BW_TRUE!r}) + {C_TRUE!r}
        results.add(LinearKey(k, n, m), Timing((t, t, t)))
grid = p.attention
for heads, kv_heads, d in grid.head_configs:
    for q in grid.query_tokens:
        for s in grid.contexts:
            results.add(AttentionKey(heads, kv_heads, d, 1, s, q), Timing((1e-5 + 1e-9 * s * q,) * 3))
for family in plan.ELEMENTWISE_FAMILIES:
    for tokens in p.elementwise_tokens:
        layer = plan.ELEMENTWISE_SPECS[0]
        results.add(ElementwiseKey(family, *layer, tokens), Timing((2e-6 + 1e-8 * tokens,) * 3))
for size, t in zip(p.cache_working_sets + (p.rotate_bytes,), (1e-4, 2e-4, 3e-4, 4e-4, 4e-4)):
    results.add(CacheKey(size), Timing((t,) * 3))
fitted = fit_profile.fit_dtype("fp32", results, {BW_TRUE!r}, {BW_TRUE!r}, p)
import json, sys
print(json.dumps(dict(peak=fitted.peak_flops_per_s, overhead=fitted.linear_overhead_s, tables=len(fitted.linear),
                      attention=sorted(fitted.attention), elementwise=sorted(fitted.elementwise),
                      cache=fitted.cache_reuse is not None, torch="torch" in sys.modules)))
"""
    from rooflinesim.calibrate.fitting.plan import QUICK_LINEAR_SHAPES

    fitted = json.loads(_run_without_torch(code))
    assert fitted["peak"] == pytest.approx(P_TRUE, rel=0.05) and fitted["overhead"] == pytest.approx(C_TRUE, rel=0.05)
    assert fitted["tables"] == len(QUICK_LINEAR_SHAPES) and fitted["attention"] == ["decode_d128", "decode_d64", "multi_d128", "multi_d64"]
    assert len(fitted["elementwise"]) == 6 and fitted["cache"] and not fitted["torch"]




def test_tiny_decoders_shapes_get_exact_only_tables_outside_the_roofline_and_the_blend():
    """Regression (bf16, 2-core Intel Xeon VM with AMX): the tiny decoders' 64-wide linears were priced from the
    generic shapes, each at the fitted 24 us per-call intercept where a 64 x 64 call takes 3 us; their ops came to
    more than their whole measured step and the per-layer dispatch cost fitted 0 (HF hold-out 15-22 % low, quick).
    Their own shapes are now timed at M 1-8 and priced from their own tables only."""
    from types import SimpleNamespace

    from rooflinesim.calibrate.fitting.budget import get_level_plan
    from rooflinesim.calibrate.fitting.fit_profile import _fit_linear
    from rooflinesim.calibrate.fitting.measurements import LinearKey, Results, Timing
    from rooflinesim.calibrate.fitting.plan import (
        OVERHEAD_LINEAR_SHAPES, OVERHEAD_M_GRID, OVERHEAD_MODELS, WeightShape, get_decoder_spec,
        get_linear_weight_shapes)
    from rooflinesim.timing.linear_tables import LinearModel, get_shape_loo_error

    tiny = {tuple(s) for s in OVERHEAD_LINEAR_SHAPES}
    assert all(get_linear_weight_shapes(get_decoder_spec(name)) == tiny for name in OVERHEAD_MODELS)
    cpu = SimpleNamespace(is_cuda=False)
    for level in ("full", "medium", "steady", "quick"):
        keys = {(k.in_features, k.out_features, k.m) for k in get_level_plan(level, ("fp32",), cpu).linear_keys()}
        assert {(k, n, m) for k, n in tiny for m in OVERHEAD_M_GRID} <= keys, level
    assert not get_level_plan("minimal", ("fp32",), cpu).overhead_shapes

    generic = (WeightShape(384, 384), WeightShape(1536, 1536), WeightShape(384, 24576))
    results = Results()
    for k, n in generic:
        for m in (1, 4, 16, 64, 256):
            t = max(2.0 * m * k * n / P_TRUE, k * n * 4.0 / BW_TRUE) + 24e-6
            results.add(LinearKey(k, n, m), Timing((t,) * 3))
    plain = SimpleNamespace(all_linear_shapes=generic, overhead_shapes=())
    with_tiny = SimpleNamespace(all_linear_shapes=generic, overhead_shapes=OVERHEAD_LINEAR_SHAPES)
    _, roof_before, _ = _fit_linear("fp32", results, plain, BW_TRUE)
    for k, n in OVERHEAD_LINEAR_SHAPES:
        for m in OVERHEAD_M_GRID:
            results.add(LinearKey(k, n, m), Timing((3e-6,) * 3))
    tables, roof, _ = _fit_linear("fp32", results, with_tiny, BW_TRUE)
    assert (roof.peak_flops_per_s, roof.overhead_s) == pytest.approx((roof_before.peak_flops_per_s,
                                                                      roof_before.overhead_s))
    assert [t.exact_only for t in tables] == [False] * 3 + [True] * len(OVERHEAD_LINEAR_SHAPES)
    model = LinearModel.from_tables(tables, roof.peak_flops_per_s, roof.bandwidth_bytes_per_s, roof.overhead_s, 4.0)
    without = LinearModel.from_tables(tables[:3], roof.peak_flops_per_s, roof.bandwidth_bytes_per_s,
                                      roof.overhead_s, 4.0)
    assert float(model.time_s(1, 64, 64)) == pytest.approx(3e-6)  # its own table
    assert float(without.time_s(1, 64, 64)) > 20e-6  # what the generic shapes gave it
    for k, n in ((96, 96), (128, 128), (768, 2048)):  # no other shape's price moves
        assert float(model.time_s(4, k, n)) == pytest.approx(float(without.time_s(4, k, n)))
    assert get_shape_loo_error(model) == pytest.approx(get_shape_loo_error(without))


def test_merged_profiles_keep_a_table_exact_only():
    from rooflinesim.calibrate.fitting.merge import _merge_tables
    from rooflinesim.specs.measured import LinearTable

    profile = make_profile().measured.dtypes["fp32"]
    tiny = LinearTable(in_features=64, out_features=64, m=(1, 4), time_s=(3e-6, 4e-6), spread=(0.0, 0.0),
                       exact_only=True)
    one = profile.model_copy(update={"linear": profile.linear + (tiny,)})
    merged = {(t.in_features, t.out_features): t.exact_only for t in _merge_tables([one, one])}
    assert merged[(64, 64)] is True and not any(v for shape, v in merged.items() if shape != (64, 64))
