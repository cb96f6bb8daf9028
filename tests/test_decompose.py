"""The per-op decomposition of a hold-out step (calibrate.external.decompose): aten ops land in the step model's buckets,
dispatches are counted per implementation, and the priced side adds up to the step's price. Counts, not times."""

from __future__ import annotations

from pathlib import Path

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from rooflinesim.calibrate.external import decompose as D  # noqa: E402
from rooflinesim.calibrate.external import gptfast_model as G  # noqa: E402
from rooflinesim.calibrate.reference import model as M  # noqa: E402
from rooflinesim.calibrate.fitting.plan import synthetic_spec  # noqa: E402
from rooflinesim.specs.profiles import load_profile  # noqa: E402
from rooflinesim.scenario.builder import build_scenario  # noqa: E402
from rooflinesim.step import get_step_cost  # noqa: E402

SPEC = synthetic_spec("tiny-decompose", 64, 4, 2, 96, layers=3, vocab=500)


def _step(spec, batch=2, context=16):
    hw = load_profile(Path(__file__).resolve().parent / "data" / "profiles" / "cpu-amd-epyc-2c-quick.yaml")
    sc = build_scenario(hw, spec, batch, context, weight_dtype="fp32", kv_dtype="fp32", activation_dtype="fp32",
                        speculative=False, allow_long_context=True)
    return get_step_cost(sc.hardware, spec, sc.workload, 1, sc.timing, context, batch)


@pytest.mark.parametrize("name, bucket", [
    ("aten::addmm", "linear"), ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("aten::cat", "kv_cache"), ("aten::index_copy_", "kv_cache"), ("aten::rms_norm", "norm"),
    ("aten::view_as_complex", "rope"), ("aten::silu", "elementwise"), ("aten::transpose", "views"),
])
def test_bucket_of(name, bucket):
    assert D.bucket_of(name) == bucket


def test_the_vocabulary_wide_linear_is_the_lm_head():
    assert D.bucket_of("aten::addmm", output_width=500, vocab=500) == "lm_head"
    assert D.bucket_of("aten::addmm", output_width=96, vocab=500) == "linear"


def test_priced_buckets_add_up_to_the_step_price():
    step = _step(SPEC)
    priced = D.priced_buckets(step)
    assert sum(priced.values()) == pytest.approx(float(step.step_time_s))
    assert priced["lm_head"] > 0 and priced["attention"] > 0 and priced["framework"] > 0


def _decompose(fn, spec, before=None):
    with torch.inference_mode():
        fn()
        return D.decompose(fn, _step(spec), calls=2, before=before, vocab=spec.vocab_size)


def test_the_reference_and_gptfast_styles_dispatch_their_own_linears():
    """Reference: q, k, v, o, gate, up, down per layer; gpt-fast: fused wqkv, wo, w1, w3, w2; one lm_head each."""
    ref = M.build_decoder(SPEC, torch.float32)
    ref.setup_caches(2, 24)
    tokens, start = torch.zeros(2, 1, dtype=torch.long), torch.full((2,), 16)
    d_ref = _decompose(lambda: ref(tokens, start, 17), SPEC)
    fast = G.build_transformer(SPEC, torch.float32)
    fast.setup_caches(2, 17)
    d_fast = _decompose(lambda: fast(tokens, torch.tensor([16])), SPEC)
    assert d_ref.dispatches["linear"] == 7 * SPEC.num_layers and d_ref.dispatches["lm_head"] == 1
    assert d_fast.dispatches["linear"] == 5 * SPEC.num_layers and d_fast.dispatches["lm_head"] == 1
    assert d_fast.dispatches["kv_cache"] == 2 * SPEC.num_layers  # index_copy_ of k and v
    for d in (d_ref, d_fast):
        assert d.dispatches["attention"] == SPEC.num_layers
        assert all(v >= 0 for v in d.measured_s.values()) and d.plain_s > 0 and d.predicted_s > 0
    assert "total" in D.format_table("t", d_fast, SPEC.num_layers)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
def test_hf_dynamic_cache_concatenates_every_layer():
    from rooflinesim.calibrate.external.hf_holdout import HfDecodeStep, HfHoldOut, build_hf_model, make_config, \
        spec_from_config

    config = make_config(HfHoldOut("tiny-hf-llama", "llama", dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=500)))
    spec = spec_from_config(config)
    model = build_hf_model(config, torch.float32)
    with torch.inference_mode():
        step = HfDecodeStep(model, 2, 16)
    d = _decompose(step, spec, before=step.reset)
    assert d.dispatches["linear"] == 7 * spec.num_layers and d.dispatches["lm_head"] == 1
    assert d.dispatches["kv_cache"] >= 2 * spec.num_layers  # torch.cat of keys and values, plus RoPE's own cat
