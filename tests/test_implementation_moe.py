"""How an implementation's MoE block is priced: transformers' grouped experts (one GEMM per expert, every expert of
the layer called) and the MoE block's own aten calls (`implementations/hf.yaml` moe_experts / moe_dispatches)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.specs.implementation import load_implementation
from rooflinesim.specs.registry import load_model
from rooflinesim.specs.workload import Workload
from rooflinesim.step import get_step_cost
from rooflinesim.timing.measured import MeasuredTiming
from tests.synthetic_profiles import make_profile

MIXTRAL = load_model("mixtral-8x7b")  # 32 MoE layers, 8 experts, top-2, hidden 4096, expert width 14336, no shared


def _ops(impl, batch, model=MIXTRAL, context=512):
    w = Workload.in_dtype("fp32", batch, context)
    return {op.name: op for op in get_step_ops(model, w, 1, implementation=impl)}


def _with_dispatch(hw, dispatch_s):
    prof = hw.measured.dtypes["fp32"].model_copy(update={"dispatch_s": dispatch_s})
    return hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {"fp32": prof}})})


def test_hf_table_reads_grouped_experts_and_the_block_calls_from_the_profiler_counts():
    hf = load_implementation("hf")
    assert hf.grouped_experts and "moe.py" in hf.moe_experts.source
    d = hf.moe_dispatches
    # the profiler counts of Qwen2MoeSparseMoeBlock the table was read from: 330 calls at 8 experts, batch 1, top-2
    # (2 hit), with its shared expert; 514 at 16 experts, top-4 (4 hit)
    assert d.get_block_calls(8, 2, True) == 330 and d.get_block_calls(16, 4, True) == 514
    assert not load_implementation("reference").grouped_experts and not load_implementation("gptfast").grouped_experts


def test_grouped_experts_at_batch_16_hand_computed():
    ops = _ops("hf", 16)
    hit = 8 * (1 - 0.75**16)  # 16 tokens each miss an expert with probability 6/8
    assert hit == pytest.approx(7.919819, abs=1e-6)  # 0.75 ** 16 = 0.0100226
    assert "experts_gate_proj" not in ops and "experts_up_proj" not in ops  # gate and up concatenated per expert
    up, down = ops["experts_gate_up_proj"], ops["experts_down_proj"]
    for op, k, n in ((up, 4096, 2 * 14336), (down, 14336, 4096)):
        assert op.count == 32 and op.kind == "expert_linear"
        assert (op.dims["k"], op.dims["n"], op.dims["expert_calls"]) == (k, n, 8)
        assert float(op.dims["experts"]) == pytest.approx(hit, rel=1e-12)
        assert float(op.dims["m"]) == pytest.approx(32 / hit)  # 16 tokens x top-2 over the experts hit
        assert float(op.flops) == pytest.approx(2 * 32 * k * n)
        assert float(op.weight_bytes) == pytest.approx(hit * k * n * 4)  # every hit expert's weights, once
        assert float(op.act_read_bytes) == 32 * k * 4 and float(op.act_write_bytes) == 32 * n * 4
    # the same FLOPs and weight bytes as the batched pricing of the reference step model
    ref = _ops(None, 16)
    assert float(up.flops + down.flops) == pytest.approx(sum(float(ref[f"experts_{p}_proj"].flops)
                                                            for p in ("gate", "up", "down")))
    assert float(up.weight_bytes + down.weight_bytes) == pytest.approx(
        sum(float(ref[f"experts_{p}_proj"].weight_bytes) for p in ("gate", "up", "down")))
    # calls per MoE layer: hf's 57 per dense layer - 27 of its MLP + 119 routing + 22 x 8 experts + 4 per hit expert,
    # against the reference's 69
    calls = ops["moe_extra_dispatches"]
    assert calls.count == 32 and float(calls.dims["calls"]) == pytest.approx(57 - 27 + 119 + 22 * 8 + 4 * hit - 69)
    assert "extra_dispatches" not in ops  # no dense layer


def test_one_token_hits_exactly_top_k_experts_and_calls_all_eight():
    ops = _ops("hf", 1)
    up = ops["experts_gate_up_proj"]
    assert float(up.dims["experts"]) == pytest.approx(2) and float(up.dims["m"]) == pytest.approx(1)
    assert float(ops["moe_extra_dispatches"].dims["calls"]) == pytest.approx(57 - 27 + 119 + 176 + 8 - 69)


def test_a_shared_expert_adds_a_dense_mlp_of_calls():
    qwen = load_model("qwen1.5-moe-a2.7b")
    moe = qwen.moe
    assert moe.shared_intermediate_size
    calls = float(_ops("hf", 1, model=qwen)["moe_extra_dispatches"].dims["calls"])
    k = moe.num_experts_per_token
    assert calls == pytest.approx(57 - 27 + 119 + 22 * moe.num_experts + 4 * k + 27 - 69)


def test_measured_timing_prices_each_hit_expert_from_the_tables_and_each_empty_one_as_a_dispatch():
    hw = _with_dispatch(make_profile(), 3e-6)
    timing = MeasuredTiming.from_spec(hw)
    scale = hw.measured.dtypes["fp32"].in_model_scale
    for batch in (1, 16):
        op = _ops("hf", batch)["experts_down_proj"]
        hit = float(op.dims["experts"])
        one = float(timing.get_linear_time_s(float(op.dims["m"]), 14336, 4096, "fp32"))
        expected = 32 * scale * (hit * one + (8 - hit) * 3e-6)
        assert float(timing.get_op_time(op, "fp32").time_s) == pytest.approx(expected, rel=1e-9)
    # at one token: two GEMMs of one row each, six empty calls
    op = _ops("hf", 1)["experts_gate_up_proj"]
    two = 2 * float(timing.get_linear_time_s(1, 4096, 2 * 14336, "fp32"))
    assert float(timing.get_op_time(op, "fp32").time_s) == pytest.approx(32 * scale * (two + 6 * 3e-6), rel=1e-9)


def test_the_block_calls_are_priced_per_call():
    hw = _with_dispatch(make_profile(), 3e-6)
    op = _ops("hf", 1)["moe_extra_dispatches"]
    assert float(MeasuredTiming.from_spec(hw).get_op_time(op, "fp32").time_s) == pytest.approx(32 * 264 * 3e-6)


def test_grid_of_batches_prices_in_one_call_as_point_by_point():
    hw = _with_dispatch(make_profile(), 3e-6)
    timing = MeasuredTiming.from_spec(hw)
    w = Workload.in_dtype("fp32", 1, 512).model_copy(update={"implementation": "hf"})
    batches = np.array([1.0, 4.0, 16.0])
    grid = get_step_cost(hw, MIXTRAL, w, 1, batch=batches, timing=timing).step_time_s
    points = [float(get_step_cost(hw, MIXTRAL, w, 1, batch=b, timing=timing).step_time_s) for b in batches]
    np.testing.assert_allclose(grid, points, rtol=1e-12)


def test_a_table_without_the_moe_fields_prices_experts_batched(tmp_path):
    data = load_implementation("hf").model_dump()
    data.update(name="hf-no-moe", aliases=[], moe_experts=None, moe_dispatches=None)
    path = tmp_path / "hf-no-moe.yaml"
    path.write_text(json.dumps(data))
    ops, ref = _ops(str(path), 16), _ops(None, 16)
    assert "experts_gate_up_proj" not in ops and "moe_extra_dispatches" not in ops
    for name in ("experts_gate_proj", "experts_up_proj", "experts_down_proj"):
        assert float(ops[name].flops) == float(ref[name].flops) and ops[name].dims == ref[name].dims


def test_dense_models_are_untouched_by_the_moe_fields():
    llama = load_model("llama-3.2-1b")
    assert not any(name.startswith(("experts_", "moe_")) for name in _ops("hf", 16, model=llama))


def test_datasheet_timing_prices_the_grouped_experts_as_a_roofline():
    from rooflinesim.specs.registry import load_hardware

    h100 = load_hardware("h100-sxm-80gb")
    w = Workload.in_dtype("bf16", 16, 512)
    hf = get_step_cost(h100, MIXTRAL, w.model_copy(update={"implementation": "hf"}), 1)
    ref = get_step_cost(h100, MIXTRAL, w, 1)
    assert np.isfinite(float(hf.step_time_s)) and float(hf.step_time_s) >= float(ref.step_time_s) * 0.99


# --- the sliding-window cache (transformers' DynamicSlidingWindowLayer) ----------------------------------------------


def _mistral_window_ops(context):
    from rooflinesim.calibrate.fitting.plan import synthetic_spec

    spec = synthetic_spec("swa", 640, 10, 2, 1856, layers=6, vocab=32768).model_copy(
        update={"sliding_window_tokens": 1024})
    return _ops("hf", 16, model=spec, context=context)


@pytest.mark.parametrize("context, kept, attended", [(256, 256, 257), (1023, 1023, 1024), (4096, 1023, 1024)])
def test_a_sliding_window_layer_copies_w_minus_1_and_attends_w(context, kept, attended):
    ops = _mistral_window_ops(context)
    per_position = 16 * 2 * 64 * 4  # batch x KV heads x head_dim x fp32
    concat = ops["kv_concat"]
    assert float(concat.kv_read_bytes) == float(concat.kv_write_bytes) == 2 * kept * per_position
    assert float(concat.dims["allocation_bytes"]) == (kept + 1) * per_position  # the cat's result, before the slice
    assert float(ops["attention"].dims["kv_tokens"]) == attended


def test_transformers_sliding_window_layer_keeps_w_minus_1_and_returns_w():
    """The source the pricing follows, run: DynamicSlidingWindowLayer.update concatenates, returns the window and
    keeps its last W - 1 positions (skipped without the hf extra)."""
    pytest.importorskip("transformers")
    import torch
    from transformers import DynamicCache, MistralConfig

    config = MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, sliding_window=32, vocab_size=128)
    cache = DynamicCache(config=config)
    k = torch.zeros(2, 2, 100, 16)
    cache.update(k, k.clone(), 0)
    keys, _ = cache.update(torch.ones(2, 2, 1, 16), torch.ones(2, 2, 1, 16), 0)
    assert keys.shape[-2] == 32 and cache.layers[0].keys.shape[-2] == 31


def test_transformers_moe_block_runs_grouped_experts_with_the_counted_calls():
    """The hf table's MoE fields, checked against the installed transformers and torch: the default experts
    implementation, one expert mm per expert and grouped projection, and the block's aten calls within 5 % of the
    table's linear count (skipped without the hf extra)."""
    pytest.importorskip("transformers")
    import torch
    from torch.profiler import ProfilerActivity, profile

    from rooflinesim.calibrate.external.hf_holdout import build_hf_model, get_hf_hold_out, make_config

    config = make_config(get_hf_hold_out("hf-qwen2moe-61m"))
    config.num_hidden_layers, config.hidden_size, config.moe_intermediate_size = 1, 64, 32
    config.shared_expert_intermediate_size, config.num_attention_heads, config.num_key_value_heads = 48, 4, 4
    model = build_hf_model(config, torch.float32)
    assert model.config._experts_implementation == "grouped_mm"
    block, table = model.model.layers[0].mlp, load_implementation("hf").moe_dispatches
    x = torch.randn(1, 1, 64)
    with torch.inference_mode():
        block(x)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            block(x)
    counts = {e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")}
    # 5 dense linears (router, shared gate / up / down, shared-expert gate) + 8 experts x 2 grouped projections
    assert counts.get("aten::mm", 0) == 5 + 2 * 8
    assert sum(counts.values()) == pytest.approx(table.get_block_calls(8, 2, True), rel=0.05)
