"""Deployment breadth on the same per-op model: tensor parallelism, MoE, MLA, sliding windows, quantisation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rooflinesim
from rooflinesim import load_hardware, load_model
from rooflinesim.specs.workload import Workload
from rooflinesim.ops.op_cost import get_expected_experts_touched
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.pricing.speculative import price_speculation
from rooflinesim.step import get_step_cost

from .strategies import hardware_names, model_names, workloads


def _ops(ops):
    return {op.name: op for op in ops}


# --- tensor parallelism -----------------------------------------------------------------------------------------


def test_tp2_halves_weights_and_adds_two_allreduces_per_layer():
    model = load_model("llama-3.1-70b")
    one = _ops(get_step_ops(model, Workload(batch=8, context_tokens=4096), 1))
    two = _ops(get_step_ops(model, Workload(batch=8, context_tokens=4096, tensor_parallel=2), 1))
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"):
        assert float(two[name].weight_bytes) == pytest.approx(float(one[name].weight_bytes) / 2), name
        assert float(two[name].flops) == pytest.approx(float(one[name].flops) / 2), name
    # 8 KV heads over 2 devices: each reads half the KV cache
    assert float(two["attention"].kv_read_bytes) == pytest.approx(float(one["attention"].kv_read_bytes) / 2)
    assert two["attn_allreduce"].count == two["mlp_allreduce"].count == 80
    assert float(two["attn_allreduce"].comm_bytes) == 8 * 8192 * 2  # B x h activations in bf16
    assert not any(op.kind in ("allreduce", "allgather") for op in one.values())


def test_allreduce_cost_by_hand():
    hw = load_hardware("h100")  # see the spec's interconnect block and timing/collectives.py
    step = get_step_cost(hw, load_model("llama-3.1-70b"), Workload(batch=8, context_tokens=4096, tensor_parallel=4), 1)
    op, t = next((op, t) for op, t in zip(step.ops, step.roofline) if op.name == "attn_allreduce")
    message = 8 * 8192 * 2  # 128 KiB over 4 GPUs, roofline (link fraction 1)
    one_shot = 3.3e-6 + 3 * 0.3e-6 + 3 * message / 62e9  # 10.54 us: p2p kernel
    ring_ll = 3.6e-6 + 6 * 0.47e-6 + 1.5 * message / (450e9 / 4)  # 8.17 us: NCCL's low-latency ring wins here
    assert ring_ll < one_shot
    assert float(t.time_s) == pytest.approx(80 * ring_ll)


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    model = load_model("llama-3.1-70b")  # 8 KV heads
    tp16 = _ops(get_step_ops(model, Workload(batch=1, context_tokens=4096, tensor_parallel=16), 1))
    tp8 = _ops(get_step_ops(model, Workload(batch=1, context_tokens=4096, tensor_parallel=8), 1))
    assert float(tp16["attention"].kv_read_bytes) == float(tp8["attention"].kv_read_bytes)


@settings(max_examples=40, deadline=None)
@given(hw=hardware_names, model=model_names, w=workloads())
def test_tp1_has_no_collectives_and_tp2_halves_every_sharded_linear(hw, model, w):
    hw, model = load_hardware(hw), load_model(model)
    q = w.pop("new_tokens")
    tp1 = get_step_cost(hw, model, Workload(tensor_parallel=1, **w), q)
    assert not [op for op in tp1.ops if op.kind in ("allreduce", "allgather")]
    if model.num_attention_heads % 2 or model.num_kv_heads % 2 or model.is_mla:
        return
    tp2 = {op.name: op for op in get_step_cost(hw, model, Workload(tensor_parallel=2, **w), q).ops}
    for op in tp1.ops:  # Megatron layout: every projection's weight is split in two (vocab rounded up)
        if op.kind == "linear" and op.name in tp2 and op.name not in ("router", "lm_head"):
            assert float(np.max(tp2[op.name].weight_bytes)) * 2 == pytest.approx(float(np.max(op.weight_bytes)))


def test_tp_in_predict_json_and_memory_per_device():
    one = rooflinesim.predict(hw="h100", model="llama-3.1-70b", tp=1, speculative=False).to_dict()
    four = rooflinesim.predict(hw="h100", model="llama-3.1-70b", tp=4, draft_tp=1, draft="llama-3.2-1b").to_dict()
    assert four["workload"]["tensor_parallel"] == 4
    assert not one["memory"]["fits_in_memory"] and four["memory"]["fits_in_memory"]
    draft_bytes = load_model("llama-3.2-1b").get_weight_bytes("bf16")  # --draft-tp 1: the whole draft on each device
    assert four["memory"]["includes_draft"] and not one["memory"]["includes_draft"]
    assert four["memory"]["weight_bytes"] == pytest.approx(one["memory"]["weight_bytes"] / 4 + draft_bytes)
    assert four["decode"]["step_time_s"] < one["decode"]["step_time_s"] / 2.5
    assert four["speculative"]["draft_step_time_s"] > 0


def test_draft_tp_defaults_to_the_target_tp_in_time_and_memory_alike():
    """Regression: without --draft-tp the draft's time used the target's TP but its memory fit assumed TP 1."""
    from rooflinesim.scenario.builder import build_scenario

    s = build_scenario("h100", "llama-3.1-70b", 8, 4096, tp=4, draft="llama-3.1-8b")
    assert s.draft_workload.tensor_parallel == 4
    shared = s.get_memory_fit(k=4).weight_bytes
    target_only = load_model("llama-3.1-70b").get_weight_bytes("bf16") / 4
    assert shared - target_only == pytest.approx(load_model("llama-3.1-8b").get_weight_bytes("bf16") / 4)
    odd = build_scenario("h100", "llama-3.1-70b", 8, 4096, tp=8, draft="qwen2.5-0.5b")  # 14 heads: not over 8
    assert odd.draft_workload.tensor_parallel == 1 and any("unsharded" in w for w in odd.warnings)


def test_tp_bad_input(capsys):
    from rooflinesim.cli import main

    for args, fragment in ((["--tp", "3"], "does not divide"), (["--tp", "0"], "positive"),
                           (["--hw", "cpu", "--model", "tiny-llama", "--tp", "2"], "no interconnect")):
        assert main(["predict", *args]) == 2
        assert fragment in capsys.readouterr().err


# --- mixture of experts ---------------------------------------------------------------------------------------------


def test_mixtral_batch1_decode_reads_2_of_8_experts_and_large_batches_read_all():
    model = load_model("mixtral-8x7b")
    expert_bytes = 3 * 4096 * 14336 * 2  # gate + up + down of one expert in bf16
    for tokens, experts in ((1, 2.0), (4096, 8.0)):
        ops = _ops(get_step_ops(model, Workload(batch=tokens, context_tokens=0 if tokens > 1 else 1024), 1))
        read = sum(float(ops[n].weight_bytes) for n in ("experts_gate_proj", "experts_up_proj", "experts_down_proj"))
        assert read == pytest.approx(experts * expert_bytes, rel=1e-6)
    # by hand: 2 tokens touch 8 x (1 - (6/8)^2) = 3.5 experts
    assert float(get_expected_experts_touched(8, 2, 2)) == pytest.approx(3.5)


@settings(max_examples=100, deadline=None)
@given(e=st.integers(1, 256), k=st.integers(1, 16), t1=st.integers(1, 10_000), t2=st.integers(1, 10_000))
def test_more_tokens_never_read_fewer_experts(e, k, t1, t2):
    k = min(k, e)
    lo, hi = sorted((t1, t2))
    a, b = float(get_expected_experts_touched(e, k, lo)), float(get_expected_experts_touched(e, k, hi))
    assert k - 1e-9 <= a <= b + 1e-9 <= e + 1e-9


def _dense_equivalent(moe):
    """A dense model with the MoE's active size: its MLP is as wide as the top-k experts together."""
    return moe.model_copy(update=dict(
        name=f"{moe.name} dense-equivalent", moe=None,
        intermediate_size=moe.moe.num_experts_per_token * moe.moe.moe_intermediate_size,
    ))


def test_moe_speculation_vs_a_dense_model_of_the_same_active_size():
    """At small batch a verify of k + 1 tokens touches up to 2(k + 1) of Mixtral's 8 experts while decode touches 2,
    so speculation pays far less than on the dense equivalent. From batch ~16 decode already touches all 8 experts,
    whose small per-expert GEMMs keep the layer memory-bound longer: there MoE speculation pays *more* than dense."""
    hw, moe = load_hardware("h100"), load_model("mixtral-8x7b")
    dense = _dense_equivalent(moe)
    assert dense.params == pytest.approx(moe.active_params, rel=0.01)
    batch = np.array([1, 2, 4, 8, 16, 32, 64, 128])[:, None]
    k = np.arange(0, 9)[None, :]
    results = {}
    for name, model in (("moe", moe), ("dense", dense)):
        # a free drafter isolates the verify cost
        scenario = build_scenario(hw, model, 1, 4096, tp=2, drafter="ngram", alpha=0.7)
        grid = price_speculation(scenario, batch, 4096, k, 0.7)
        results[name] = grid.speedup.max(axis=1)
    moe_s, dense_s = results["moe"], results["dense"]
    assert moe_s[0] < 0.5 * dense_s[0]
    assert np.all(np.diff(moe_s[:5]) > 0)  # batch 1 -> 16: the expert-read penalty of verify fades
    assert np.all(np.diff(dense_s) < 0)  # dense: verify turns compute-bound as the batch grows
    assert moe_s[-1] > dense_s[-1]
    decode_moe = get_step_cost(hw, moe, Workload(batch=1, context_tokens=4096, tensor_parallel=2), 1).step_time_s
    decode_dense = get_step_cost(hw, dense, Workload(batch=1, context_tokens=4096, tensor_parallel=2), 1).step_time_s
    assert float(decode_moe) == pytest.approx(float(decode_dense), rel=0.03)


# --- MLA ------------------------------------------------------------------------------------------------------------


def test_mla_caches_a_compressed_latent():
    model = load_model("deepseek-v2-lite")
    assert model.get_kv_bytes_per_token("bf16") == 27 * (512 + 64) * 2
    mha_equivalent = 27 * 2 * 16 * 128 * 2
    assert mha_equivalent / model.get_kv_bytes_per_token("bf16") == pytest.approx(7.11, rel=0.01)
    ops = _ops(get_step_ops(model, Workload(batch=1, context_tokens=8192), 1))
    attn = ops["attention"]
    assert float(attn.kv_read_bytes) == 8193 * 576 * 2  # one latent per token, shared by all 16 heads
    # absorbed form: per head and key, 2 x 576 (scores) + 2 x 512 (values) + softmax
    assert float(attn.flops) == pytest.approx(16 * 8193 * (2 * 576 + 2 * 512 + 5))
    assert float(attn.arithmetic_intensity_flops_per_byte) == pytest.approx(16 * 2181 / 1152, rel=0.01)
    assert float(ops["kv_b_absorb"].flops) == 2 * 16 * (128 * 512 + 512 * 128)


def test_mla_and_moe_predict_end_to_end():
    d = rooflinesim.predict(hw="h200", model="deepseek-v3", tp=8, batch=16, ctx="32k", weight_dtype="fp8",
                            draft=None, drafter="ngram", alpha=0.6).to_dict()
    assert d["memory"]["fits_in_memory"]
    assert d["hardware"]["compute_dtype"] == "fp8"
    assert d["speculative"]["best_speedup"] >= 1
    names = [op["name"] for op in d["ops"]]
    assert {"q_a_proj", "kv_a_proj", "kv_b_absorb", "router", "experts_up_proj", "shared_up_proj"} <= set(names)


# --- quantisation ---------------------------------------------------------------------------------------------------


def test_weight_only_quantisation_bytes_and_dequant_flops():
    model = load_model("llama-3.1-8b")
    bf16 = _ops(get_step_ops(model, Workload(batch=1, context_tokens=0, weight_dtype="bf16"), 1))
    int4 = _ops(get_step_ops(model, Workload(batch=1, context_tokens=0, weight_dtype="int4", quant_group_size=64), 1))
    w = 4096 * 14336
    assert float(int4["down_proj"].weight_bytes) == pytest.approx(w * (0.5 + 2.5 / 64))
    assert float(int4["down_proj"].flops) == pytest.approx(float(bf16["down_proj"].flops) + 2 * w)
    int8 = _ops(get_step_ops(model, Workload(batch=1, context_tokens=0, weight_dtype="int8"), 1))
    assert float(int8["down_proj"].weight_bytes) == pytest.approx(w * (1 + 2 / 128))


def test_fp8_computes_in_fp8_only_where_the_device_has_it():
    h100 = rooflinesim.predict(hw="h100", weight_dtype="fp8", speculative=False).to_dict()
    a100 = rooflinesim.predict(hw="a100", weight_dtype="fp8", speculative=False).to_dict()
    assert h100["workload"]["activation_dtype"] == "fp8" and h100["hardware"]["compute_dtype"] == "fp8"
    assert h100["hardware"]["peak_flops_per_s"] == 1979e12
    assert a100["workload"]["activation_dtype"] == "bf16" and a100["hardware"]["compute_dtype"] == "bf16"
    kv8 = rooflinesim.predict(hw="h100", kv_dtype="fp8", ctx="32k", speculative=False).to_dict()
    assert kv8["hardware"]["compute_dtype"] == "bf16"  # an fp8 KV cache never changes the compute peak
