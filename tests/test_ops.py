"""Golden numbers computed by hand, and invariants of the per-op cost model."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim import load_hardware, load_model
from rooflinesim.specs.workload import Workload
from rooflinesim.ops.op_cost import get_attention_pairs, get_kv_tokens_read
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.step import get_step_cost


def _op(ops, name):
    found = [op for op in ops if op.name == name]
    assert found, f"no op named {name!r} among {[op.name for op in ops]}"
    return found[0]


def test_llama2_70b_fp16_on_a100_speed_of_light():
    """Llama-2-70B fp16, batch 1: ~138 GB of weights streamed per token at 2.039 TB/s -> ~68 ms per token."""
    hw, model = load_hardware("a100"), load_model("llama-2-70b")
    # by hand: 80 layers x (2*8192*8192 + 2*8192*1024 + 3*8192*28672) + 2 * 32000*8192 (+ norms) = 68.98e9 params
    per_layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    params_by_hand = 80 * per_layer + 2 * 32000 * 8192 + 8192
    assert model.params == params_by_hand
    assert model.get_weight_bytes("fp16") == pytest.approx(137.96e9, rel=1e-3)
    step = get_step_cost(hw, model, Workload.in_dtype("fp16", 1, 0), 1)
    # decode reads every weight except the embedding table (only one row of it)
    streamed = 2 * (params_by_hand - 32000 * 8192 + 8192)
    assert float(step.weight_bytes) == pytest.approx(streamed, rel=1e-9)
    assert float(step.roofline_step_time_s) == pytest.approx(streamed / 2.039e12, rel=0.01)
    assert 0.0665 < float(step.roofline_step_time_s) < 0.070
    assert float(step.step_time_s) > float(step.roofline_step_time_s)


def test_linear_intensity_is_about_m_in_bf16():
    model = load_model("llama-3.1-8b")
    for m in (1, 8, 64):
        ops = get_step_ops(model, Workload.in_dtype("bf16", 1, 0), 1, batch=m)
        down = _op(ops, "down_proj")
        # by hand: 2*M*K*N / (2*(K*N + M*K + M*N)) ~ M for M << K, N
        k, n = 14336, 4096
        assert float(down.flops) == 2 * m * k * n
        assert float(down.arithmetic_intensity_flops_per_byte) == pytest.approx(m * k * n / (k * n + m * k + m * n))
        assert float(down.arithmetic_intensity_flops_per_byte) == pytest.approx(m, rel=0.02)


def test_decode_attention_intensity_is_one_flop_per_byte_per_query_of_a_group():
    model = load_model("llama-3.1-8b")  # 32 query heads share 8 KV heads: groups of 4
    ops = get_step_ops(model, Workload.in_dtype("bf16", 1, 32768), 1)
    attn = _op(ops, "attention")
    # KV read once per KV head: 2 (K,V) x 8 heads x 32769 tokens x 128 dims x 2 bytes
    assert float(attn.kv_read_bytes) == 2 * 8 * 32769 * 128 * 2
    assert float(attn.arithmetic_intensity_flops_per_byte) == pytest.approx(4.0, rel=0.02)


def test_attention_pairs_causal_and_windowed():
    assert float(get_attention_pairs(100, 1)) == 101
    assert float(get_attention_pairs(0, 4)) == 1 + 2 + 3 + 4
    assert float(get_attention_pairs(10, 3)) == 11 + 12 + 13
    # window 12: the keys per new token are min(12, n) for n = 11, 12, 13
    assert float(get_attention_pairs(10, 3, window_tokens=12)) == 11 + 12 + 12
    assert float(get_kv_tokens_read(10, 3, window_tokens=12)) == 13
    assert float(get_kv_tokens_read(100, 3, window_tokens=12)) == 14
    s, q, w = np.arange(0, 50)[:, None], np.arange(1, 9)[None, :], 20
    brute = np.array([[sum(min(w, n) for n in range(si + 1, si + qi + 1)) for qi in range(1, 9)] for si in range(50)])
    assert np.array_equal(get_attention_pairs(s, q, w), brute)


def test_mistral_sliding_window_caps_kv_read():
    model = load_model("mistral-7b")
    short = _op(get_step_ops(model, Workload(batch=1, context_tokens=4000), 1), "attention")
    long = _op(get_step_ops(model, Workload(batch=1, context_tokens=30000), 1), "attention")
    assert float(long.kv_read_bytes) == pytest.approx(float(short.kv_read_bytes) * 4096 / 4001)


def test_unfused_materialises_scores_flash_does_not():
    model = load_model("llama-3.1-8b")
    flash = get_step_ops(model, Workload(batch=4, context_tokens=4096, attention="flash"), 5)
    unfused = get_step_ops(model, Workload(batch=4, context_tokens=4096, attention="unfused"), 5)
    names = {op.name for op in unfused}
    assert {"attn_scores", "softmax", "attn_values"} <= names and "attention" not in names
    flash_act = float(_op(flash, "attention").act_read_bytes + _op(flash, "attention").act_write_bytes)
    scores_bytes = 4 * 32 * 5 * 4101 * 2
    assert float(_op(unfused, "softmax").act_read_bytes) == scores_bytes
    assert float(sum(op.bytes for op in unfused if op.kind.startswith("attention") or op.kind == "softmax")) > flash_act
    # both read K and V exactly once per KV head
    assert float(_op(flash, "attention").kv_read_bytes) == pytest.approx(
        float(_op(unfused, "attn_scores").kv_read_bytes + _op(unfused, "attn_values").kv_read_bytes))


@pytest.mark.parametrize("name, tp, group", [("llama-2-70b", 1, 8), ("llama-2-70b", 4, 8), ("llama-2-7b", 1, 1),
                                            ("llama-3.1-8b", 16, 2)])
def test_per_head_attention_reads_kv_once_per_query_head(name, tp, group):
    """per-head (decode kernels without GQA sharing) reads K/V group-size times; FLOPs and everything else as flash.
    At TP 16 Llama-3.1-8B keeps 2 query heads per device over a replicated KV head, so 2x, not 4x."""
    model = load_model(name)
    flash = get_step_ops(model, Workload(batch=8, context_tokens=2048, attention="flash", tensor_parallel=tp), 1)
    per_head = get_step_ops(model, Workload(batch=8, context_tokens=2048, attention="per-head", tensor_parallel=tp), 1)
    a, b = _op(flash, "attention"), _op(per_head, "attention")
    assert float(b.kv_read_bytes) == pytest.approx(group * float(a.kv_read_bytes))
    assert float(b.flops) == float(a.flops)
    assert [op.name for op in flash] == [op.name for op in per_head]
    assert all(float(x.bytes) == float(y.bytes) for x, y in zip(flash, per_head) if x.name != "attention")

def test_dtypes_are_independent_and_compute_follows_activation_dtype():
    hw, model = load_hardware("h100"), load_model("llama-3.1-8b")
    bf16 = get_step_cost(hw, model, Workload.in_dtype("bf16", 1, 8192), 1)
    kv8 = get_step_cost(hw, model, Workload(batch=1, context_tokens=8192, kv_dtype="fp8"), 1)
    w4 = get_step_cost(hw, model, Workload(batch=1, context_tokens=8192, weight_dtype="int4"), 1)
    assert float(kv8.kv_read_bytes) == pytest.approx(float(bf16.kv_read_bytes) / 2)
    assert float(kv8.weight_bytes) == float(bf16.weight_bytes)
    # int4 with one fp16 scale and a 4-bit zero point per group of 128: 0.5 + 2.5 / 128 bytes per weight
    assert float(w4.weight_bytes) == pytest.approx(float(bf16.weight_bytes) * (0.5 + 2.5 / 128) / 2)
    # compute peak follows the compute (activation) dtype, never the KV dtype: with fp8 KV on an H100 (whose fp8
    # peak is twice its bf16 peak) the step's q_proj runs at the bf16 peak
    big = get_step_cost(hw, model, Workload(batch=4096, context_tokens=0, kv_dtype="fp8"), 1)
    qproj, t = next((op, t) for op, t in zip(big.ops, big.roofline) if op.name == "q_proj")
    assert hw.peak_flops_per_s["fp8"] > hw.peak_flops_per_s["bf16"]
    assert float(t.compute_time_s) == pytest.approx(float(qproj.flops) * qproj.count / hw.peak_flops_per_s["bf16"])


def test_lm_head_counts_two_flops_per_mac_and_prefill_computes_last_logits_only():
    model = load_model("llama-3.1-8b")
    decode = _op(get_step_ops(model, Workload(batch=2, context_tokens=100), 3), "lm_head")
    assert float(decode.flops) == 2 * 6 * 4096 * 128256
    prefill = _op(get_step_ops(model, Workload(batch=2, context_tokens=0), 512, logits_for_all_tokens=False), "lm_head")
    assert float(prefill.flops) == 2 * 2 * 4096 * 128256


@settings(max_examples=40, deadline=None)
@given(d=st.sampled_from([256, 1024, 4096, 16384, 65536]), m=st.integers(1, 64))
def test_linear_intensity_tends_to_2m_over_bytes_per_weight(d, m):
    from rooflinesim.ops.op_cost import make_linear as _linear

    for w_bytes in (2.0, 1.0, 0.5):
        op = _linear("x", 1, m, d, d, w_bytes, 2.0)
        limit = 2 * m / w_bytes
        ai = float(op.arithmetic_intensity_flops_per_byte)
        assert ai < limit
        if d >= 65536:
            assert ai == pytest.approx(limit, rel=0.01 * m * w_bytes)


def test_layernorm_reads_weight_and_bias_rmsnorm_weight_only():
    rms = load_model("llama-3.2-1b")
    ln = rms.model_copy(update={"norm": "layernorm"})
    by_name = {op.name: op for op in get_step_ops(rms, Workload(batch=1, context_tokens=128), 1)}
    for op in get_step_ops(ln, Workload(batch=1, context_tokens=128), 1):
        if op.kind == "norm":
            assert float(op.weight_bytes) == 2 * float(by_name[op.name].weight_bytes) == 2 * 2 * rms.hidden_size


def test_dtype_spelling_does_not_change_the_ops():
    """'INT4' and 'int4' are the same dtype: both store group scales and both pay the dequantisation FLOPs."""
    model = load_model("llama-3.1-8b")
    lower = {op.name: op for op in get_step_ops(model, Workload(batch=4, context_tokens=1024, weight_dtype="int4"), 2)}
    for op in get_step_ops(model, Workload(batch=4, context_tokens=1024, weight_dtype="INT4"), 2):
        assert float(op.flops) == float(lower[op.name].flops) and float(op.bytes) == float(lower[op.name].bytes)
