"""Tensor-parallel collectives: the algorithm follows message size and TP degree; TP scaling matches gpt-fast."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.pricing.predict import predict_scenario
from rooflinesim.specs.registry import load_hardware
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.hardware import HardwareSpec
from rooflinesim.timing.collectives import get_collective_algorithm, get_collective_parts
from tests.benchmark_scripts import load_script

# numbers of the bare-kernel model (hand-computed or checked against published rows before engine profiles):
# priced with engine "ideal" (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("ideal_engine")

NVLINK = ("a100", "h100", "h200", "b200", "mi300x")


def _decode_tokens_per_s(hw, model, tp):
    return 1.0 / predict_scenario(build_scenario(hw, model, 1, 16, tp=tp, speculative=False)).decode.step_time_s


def test_ring_by_hand_on_pcie():
    """L4 over PCIe: NCCL ring; 1 MiB over 4 GPUs goes by the bulk protocol, 8.4 + 6 x 5.7 us + 1.5 x M / link."""
    hw = load_hardware("l4")
    latency, transfer, algorithm = get_collective_parts(hw.interconnect, "allreduce", 4, 1 << 20, 0.85)
    assert float(latency) == pytest.approx(8.4e-6 + 6 * 5.7e-6)
    assert float(transfer) == pytest.approx(1.5 * (1 << 20) / (32e9 * 0.85))
    assert get_collective_algorithm(hw, "allreduce", 4, [8192])[0] == "ring"


def test_algorithm_moves_with_message_size_and_tp():
    h100 = load_hardware("h100")
    sizes = np.asarray([8 << 10, 64 << 10, 1 << 20, 16 << 20], dtype=float)
    # decode-sized messages: the engine's one-shot kernel (one launch, one barrier) at every TP degree
    for tp in (2, 4, 8):
        assert get_collective_algorithm(h100, "allreduce", tp, sizes)[0] == "one-shot"
    # from ~64 KB at TP 8 NCCL's ring moves the bytes faster; above vLLM's 8 MiB only the ring is left
    assert list(get_collective_algorithm(h100, "allreduce", 8, sizes)) == ["one-shot", "ring", "ring", "ring"]
    # a faster p2p kernel (a hypothetical 400 GB/s) wins the mid sizes with two-shot: 2 barriers but 4x fewer bytes
    data = h100.model_dump()
    data["interconnect"]["peer_to_peer_allreduce"]["bandwidth_bytes_per_s"] = 400e9
    fast = HardwareSpec.model_validate(data)
    assert list(get_collective_algorithm(fast, "allreduce", 8, sizes)) == ["one-shot", "one-shot", "two-shot", "ring"]


def test_ring_protocols_by_hand():
    """NCCL's two ring protocols on H100 NVLink x 0.85: LL (3.6 + 14 x 0.47 us, a quarter of the link) for 256 KB,
    Simple (8.4 + 14 x 3.4 us, the whole link) for 64 MB."""
    ic = load_hardware("h100").interconnect
    link = 450e9 * 0.85
    latency, transfer, _ = get_collective_parts(ic, "allreduce", 8, 256 << 10, 0.85)
    assert float(latency) == pytest.approx(3.6e-6 + 14 * 0.47e-6)
    assert float(transfer) == pytest.approx(1.75 * (256 << 10) / (link / 4))
    latency, transfer, _ = get_collective_parts(ic, "allreduce", 8, 64 << 20, 0.85)
    assert float(latency) == pytest.approx(8.4e-6 + 14 * 3.4e-6)
    assert float(transfer) == pytest.approx(1.75 * (64 << 20) / link)


def test_version_one_interconnect_without_new_fields_prices_a_ring():
    data = load_hardware("h100").model_dump()
    data["interconnect"] = {"kind": "nvlink4", "bandwidth_bytes_per_s_per_direction": 450e9, "latency_s": 3e-6}
    hw = HardwareSpec.model_validate(data)
    latency, _, algorithm = get_collective_parts(hw.interconnect, "allreduce", 8, 16384)
    assert float(latency) == pytest.approx(14 * 3e-6) and int(algorithm) == 0


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(NVLINK + ("l4", "l40s", "a100-pcie", "tpu-v5e")), st.sampled_from([2, 4, 8]),
       st.floats(1, 64e6), st.floats(1.01, 4))
def test_collective_time_never_falls_with_more_bytes(hw_name, tp, message, factor):
    hw = load_hardware(hw_name)
    for kind in ("allreduce", "allgather"):
        small = sum(get_collective_parts(hw.interconnect, kind, tp, message, 0.85)[:2])
        large = sum(get_collective_parts(hw.interconnect, kind, tp, message * factor, 0.85)[:2])
        assert float(large) >= float(small) * (1 - 1e-12)


@pytest.mark.parametrize("hw", ["a100", "h100"])
@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-70b"])
def test_more_gpus_decode_faster_at_batch_one(hw, model):
    rates = [_decode_tokens_per_s(hw, model, tp) for tp in (1, 2, 4, 8)]
    assert rates == sorted(rates) and rates[3] > rates[2] * 1.1


# meta-pytorch/gpt-fast README @9599e04, 8x A100-80GB (330 W), batch 1, 5-token prompt: tok/s by TP degree
GPT_FAST_TP = {("llama-3.1-8b", 1): 93.83, ("llama-3.1-8b", 2): 149.10, ("llama-3.1-8b", 4): 217.21,
               ("llama-3.1-8b", 8): 276.01, ("llama-3.1-70b", 4): 37.45, ("llama-3.1-70b", 8): 58.78,
               ("llama-2-70b", 2): 21.32, ("llama-2-70b", 4): 38.01, ("llama-2-70b", 8): 62.50}


@pytest.mark.parametrize("model,tp", sorted(GPT_FAST_TP))
def test_gpt_fast_tensor_parallel_table_within_15_percent(model, tp):
    assert _decode_tokens_per_s("a100", model, tp) == pytest.approx(GPT_FAST_TP[model, tp], rel=0.15)


def _published_rows():
    bench = load_script("benchmarks/bench_published.py")
    return bench, {row["id"]: row for row in bench.load_rows()}


@pytest.mark.parametrize("hw", ["a100", "h100"])
@pytest.mark.parametrize("model,ctx", [("llama-3.1-8b", 1280), ("llama-3.1-70b", 1280), ("llama-3.1-8b", 16)])
def test_tp8_beats_tp4_beats_tp2_at_a_published_context(hw, model, ctx):
    """TP 8 > TP 4 > TP 2 (> TP 1 for the 8B) at batch 1, also at the ~1.3k-token context of the H100 TP sweep."""
    degrees = (1, 2, 4, 8) if model == "llama-3.1-8b" else (2, 4, 8)
    rates = [1.0 / predict_scenario(build_scenario(hw, model, 1, ctx, tp=tp, speculative=False)).decode.step_time_s
             for tp in degrees]
    assert all(b > a for a, b in zip(rates, rates[1:])), rates


# H100 Llama-3 TP rows of benchmarks/published/measurements.yaml (held out from every fit): the ladder-residual-inference
# gpt-fast logs (TP 4 / 8, 8B and 70B) and LLM-Inference-Bench's TensorRT-LLM runs (TP 4, 4x H100 SXM node)
H100_TP_ROWS = ["ladder-h100-llama-3-8b-tp4-b1-1024-512", "ladder-h100-llama-3-8b-tp8-b1-1024-512",
                "ladder-h100-llama-3-70b-tp4-b1-1024-512", "ladder-h100-llama-3-70b-tp8-b1-1024-512",
                "argonne-trtllm-h100-llama-3-8b-tp4-b1-12-128", "argonne-trtllm-h100-llama-3-8b-tp4-b1-12-1024",
                "argonne-trtllm-h100-llama-3-70b-tp4-b1-12-128", "argonne-trtllm-h100-llama-3-70b-tp4-b1-12-1024"]


@pytest.mark.parametrize("row_id", H100_TP_ROWS)
def test_h100_llama3_tensor_parallel_rows_within_15_percent(row_id, monkeypatch):
    bench, rows = _published_rows()
    monkeypatch.setattr(bench, "ENGINE", "ideal")  # the collectives' constants are the bare kernels' (see above)
    row = rows[row_id]
    assert not row["fitted_on"]
    assert bench.predict_row(row) == pytest.approx(row["measured"], rel=0.15)


@pytest.mark.parametrize("size", ["8b", "70b"])
def test_h100_tp8_faster_than_tp4_measured_and_predicted(size):
    bench, rows = _published_rows()
    tp4, tp8 = (rows[f"ladder-h100-llama-3-{size}-tp{tp}-b1-1024-512"] for tp in (4, 8))
    assert tp8["measured"] > tp4["measured"]
    assert bench.predict_row(tp8) > bench.predict_row(tp4)
