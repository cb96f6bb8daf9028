"""An SRAM-resident system (Groq LPU-class): a per-layer latency floor, not bandwidth, sets the step; verification
is ~free until the compute ceiling; a draft model costs by its depth."""

import numpy as np
import pytest

import rooflinesim
from rooflinesim.specs.registry import load_hardware
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.pricing.speculative import price_speculation


def _decode(model, batch=1, **kw):
    return rooflinesim.predict(hw="groq", model=model, batch=batch, ctx="1k", speculative=False, **kw).decode


def test_published_decode_rates():
    """Fitted on Llama-2-70B's 300 tok/s; Llama-2-7B's 750 tok/s is held out (32 vs 80 layers of 41.6 us)."""
    assert 1 / _decode("llama-2-70b").step_time_s == pytest.approx(300, rel=0.01)
    assert 1 / _decode("llama-2-7b").step_time_s == pytest.approx(750, rel=0.05)
    hw = load_hardware("groq")
    assert hw.efficiency.layer_latency_s * 80 == pytest.approx(1 / 300, rel=0.01)


def test_bandwidth_roofline_is_meaningless_there():
    decode = _decode("llama-2-70b")
    assert decode.roofline_step_time_s < decode.step_time_s / 500  # microseconds of SRAM streaming vs 3.3 ms


def test_verify_costs_a_decode_until_the_compute_ceiling_and_drafts_cost_by_depth():
    s = build_scenario("groq", "llama-3.1-70b", 1, 4096, draft="llama-3.2-1b", k_values=[0, 8])
    grid = price_speculation(s, np.asarray([1, 256])[:, None, None], np.asarray([4096])[None, :, None],
                             np.asarray([8])[None, None, :], np.asarray([0.8]))
    ratio = (grid.verify_step_time_s / grid.target_decode_time_s).reshape(-1)
    assert ratio[0] < 1.01 and ratio[1] > 1.5  # batch 1: free; batch 256 x 9 tokens: compute-bound
    c = float((grid.draft_step_time_s / grid.target_decode_time_s).reshape(-1)[0])
    assert c == pytest.approx(16 / 80, rel=0.05)  # 16 draft layers against 80 target layers


def test_whole_sram_is_usable_by_default():
    s = build_scenario("groq", "llama-2-70b", 1, 1024, speculative=False)
    assert s.usable_memory_bytes == s.hardware.memory_capacity_bytes
