"""The hold-outs written outside the project: the Hugging Face builder (skipped without transformers), the
gpt-fast-style decoder, and `validate --family` on tiny models (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rooflinesim.calibrate.external import gptfast_model as G  # noqa: E402
from rooflinesim.errors import InputError  # noqa: E402
from rooflinesim.calibrate.reference import model as M  # noqa: E402
from rooflinesim.calibrate.fitting.plan import get_calibrated_shapes, get_linear_weight_shapes, synthetic_spec  # noqa: E402

needs_hf = pytest.mark.skipif(__import__("importlib").util.find_spec("transformers") is None,
                              reason="transformers not installed (pip install 'rooflinesim[hf]')")

PROFILE = str(Path(__file__).resolve().parent / "data" / "profiles" / "cpu-amd-epyc-2c-quick.yaml")


def tiny_entries():
    from rooflinesim.calibrate.external.hf_holdout import HfHoldOut

    return (
        HfHoldOut("tiny-hf-llama", "llama", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=300)),
        HfHoldOut("tiny-hf-mistral", "mistral", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                                     num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                                                     vocab_size=300, sliding_window=16)),
        HfHoldOut("tiny-hf-qwen2moe", "qwen2_moe", dict(
            hidden_size=64, intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=48,
            num_experts=4, num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            vocab_size=300, decoder_sparse_step=1, mlp_only_layers=[])),
    )


@needs_hf
def test_hf_hold_out_is_four_architectures_no_calibration_timed():
    from rooflinesim.calibrate.external.hf_holdout import check_hf_hold_out

    specs = check_hf_hold_out()
    assert [s.architecture for s in specs] == ["llama", "qwen2", "mistral", "qwen2_moe"]
    calibrated = get_calibrated_shapes()
    for spec in specs:
        assert not get_linear_weight_shapes(spec) & calibrated
    assert specs[1].attention_bias and specs[1].tie_word_embeddings and specs[1].vocab_size == 151936
    assert specs[2].sliding_window_tokens == 1024
    assert specs[3].moe.num_experts == 8 and specs[3].moe.num_experts_per_token == 2
    assert specs[3].sliding_window_tokens is None  # transformers writes sliding_window 0 there: no window


@needs_hf
@pytest.mark.parametrize("index", [0, 1, 2])
def test_hf_spec_counts_the_parameters_transformers_builds(index):
    """The ModelSpec read from the config prices the weights transformers really allocates."""
    from rooflinesim.calibrate.external.hf_holdout import build_hf_model, make_config, spec_from_config

    config = make_config(tiny_entries()[index])
    model = build_hf_model(config, torch.float32)
    spec = spec_from_config(config)
    built = sum(p.numel() for p in model.parameters())
    # the MoE router (hidden x experts per layer) and the shared expert's gate (hidden x 1) are not in the spec
    router = spec.num_layers * spec.hidden_size * (spec.moe.num_experts + 1) if spec.moe else 0
    assert 0 <= built - spec.params <= router


@needs_hf
def test_hf_decode_step_appends_one_token_to_the_same_cache_every_call():
    from rooflinesim.calibrate.external.hf_holdout import HfDecodeStep, build_hf_model, make_config

    for entry in tiny_entries():
        model = build_hf_model(make_config(entry), torch.float32)
        with torch.inference_mode():
            step = HfDecodeStep(model, batch=2, context=24)
            assert step.cache.get_seq_length() == 24
            first = step()
            assert step.cache.get_seq_length() == 25
            step.reset()
            assert step.cache.get_seq_length() == 24
            again = step()
        assert first.shape == (2, 1, 300)
        torch.testing.assert_close(first, again)  # the reset cache is the filled one, not one token longer



@needs_hf
def test_hf_decode_step_frees_the_cache_it_replaces_as_generate_does():
    """Regression: `reset` put the filled tensors themselves back, still held by the step, so a timed call kept twice
    the cache alive and its allocations could not reuse the replaced cache's memory as in `generate`."""
    import weakref

    from rooflinesim.calibrate.external.hf_holdout import HfDecodeStep, build_hf_model, make_config

    model = build_hf_model(make_config(tiny_entries()[0]), torch.float32)
    with torch.inference_mode():
        step = HfDecodeStep(model, batch=2, context=24)
        step.reset()
        filled = [(w, layer.keys) for w, layer in ((weakref.ref(layer.keys), layer) for layer in step.cache.layers)]
        refs = [w for w, _ in filled]
        filled = None
        step()
        assert all(w() is None for w in refs)  # each layer's cat released the cache it replaced
        step.reset()
        assert step.cache.get_seq_length() == 24


@needs_hf
def test_hf_decode_step_rewinds_without_copying_as_the_next_step_of_generate():
    """`rewind` takes every grown layer back to `context` tokens as a view of the last step's tensor (no copy), so the
    next step allocates and frees as `generate`'s next step does; a sliding-window layer at its window keeps its
    size. Before, the timers called `reset`, whose fresh copies made the steps stall every few calls."""
    import weakref

    from rooflinesim.calibrate.external.hf_holdout import HfDecodeStep, build_hf_model, make_config

    llama, mistral = tiny_entries()[0], tiny_entries()[1]
    with torch.inference_mode():
        model = build_hf_model(make_config(llama), torch.float32)
        step = HfDecodeStep(model, batch=2, context=24)
        first = step()
        grown = [layer.keys for layer in step.cache.layers]
        assert all(k.shape[-2] == 25 for k in grown)
        step.rewind()
        assert step.cache.get_seq_length() == 24
        assert all(layer.keys.shape[-2] == 24 and layer.keys.data_ptr() == k.data_ptr()
                   for layer, k in zip(step.cache.layers, grown))  # views of the grown tensors: nothing copied
        refs = [weakref.ref(k) for k in grown]
        grown = None
        again = step()
        assert all(w() is None for w in refs)  # the next step's cat released what it replaced
        torch.testing.assert_close(first, again)  # the same 24 cached positions as the first call
        step.rewind()
        assert step.cache.get_seq_length() == 24

        model = build_hf_model(make_config(mistral), torch.float32)  # sliding window 16 < context 24
        step = HfDecodeStep(model, batch=2, context=24)
        step()
        sizes = [layer.keys.shape[-2] for layer in step.cache.layers]
        step.rewind()
        assert [layer.keys.shape[-2] for layer in step.cache.layers] == sizes == [15, 15]
        assert step.cache.get_seq_length() == 24


@needs_hf
def test_hf_hold_out_and_model_steps_are_timed_after_a_rewind(tmp_path):
    """The timed paths, the HF hold-out and `calibrate --model`'s steps, call `rewind` between calls, not `reset`."""
    from rooflinesim.calibrate.external import hf_holdout as H
    from rooflinesim.calibrate.external.model_terms import ModelSteps
    from rooflinesim.calibrate.fitting.measurements import Timing
    from rooflinesim.calibrate.measure.timers import select_device
    from rooflinesim.specs.profiles import load_profile

    class RecordingTimer:
        def __init__(self):
            self.before = []

        def time(self, fn, before=None, **_):
            self.before.append(getattr(before, "__name__", None))
            before()
            fn()
            return Timing((1e-3, 1e-3))

    hw, device, timer = load_profile(PROFILE), select_device("cpu"), RecordingTimer()
    rows = H.measure_hf_family(hw, hw, device, "fp32", H.HfGrid((1, 2), (16,), 1, 0.0), timer,
                               entries=tiny_entries()[:2])
    assert len(rows) == 4 and timer.before == ["rewind"] * 4

    config = H.make_config(tiny_entries()[0])
    config.save_pretrained(tmp_path)
    spec = H.spec_from_config(config)
    fn, between = ModelSteps(tmp_path / "config.json", spec, "hf", "fp32", device).step(2, 16, 1)
    assert between.__name__ == "rewind" and between.__self__ is fn


def test_default_process_heap_runs_its_block_without_glibc(monkeypatch):
    import ctypes

    from rooflinesim.calibrate.measure import timers

    def no_libc(name):
        raise OSError(f"{name}: not found")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    ran = []
    with timers.default_process_heap():
        ran.append(1)
    assert ran == [1]


def test_gptfast_decoder_computes_the_reference_decoders_function():
    """Independent code, same model: with the reference decoder's weights (q, k, v fused into wqkv) the gpt-fast-style
    decoder gives the same logits token by token, so its timings are those of a correct Llama."""
    spec = synthetic_spec("tiny-equiv", 64, 4, 2, 96, layers=2, vocab=128)
    ref = M.build_decoder(spec, torch.float32, seed=3)
    ours = G.Transformer(spec, eps=M.NORM_EPS, rope_base=M.ROPE_THETA).eval()
    with torch.no_grad():
        ours.tok_embeddings.weight.copy_(ref.embed.weight)
        ours.output.weight.copy_(ref.lm_head.weight)
        ours.norm.weight.copy_(ref.norm)
        for a, b in zip(ours.layers, ref.layers):
            a.attention.wqkv.weight.copy_(torch.cat([b.attn.q_proj.weight, b.attn.k_proj.weight,
                                                     b.attn.v_proj.weight]))
            a.attention.wo.weight.copy_(b.attn.o_proj.weight)
            a.feed_forward.w1.weight.copy_(b.mlp.gate_proj.weight)
            a.feed_forward.w3.weight.copy_(b.mlp.up_proj.weight)
            a.feed_forward.w2.weight.copy_(b.mlp.down_proj.weight)
            a.attention_norm.weight.copy_(b.attn_norm)
            a.ffn_norm.weight.copy_(b.mlp_norm)
    ref.setup_caches(1, 16)
    ours.setup_caches(1, 16)
    tokens = torch.randint(0, 128, (1, 6))
    with torch.inference_mode():
        for pos in range(6):
            expected = ref(tokens[:, pos:pos + 1], torch.tensor([pos]), pos + 1)
            got = ours(tokens[:, pos:pos + 1], torch.tensor([pos]))
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_gptfast_family_is_hold_out():
    specs = G.get_gptfast_specs()
    calibrated = get_calibrated_shapes()
    assert len(specs) == 3 and all(not get_linear_weight_shapes(s) & calibrated for s in specs)
    assert {s.num_attention_heads // s.num_kv_heads for s in specs} == {11, 4, 1}


@needs_hf
def test_validate_family_reports_each_family_beside_the_project(tmp_path):
    from rooflinesim.calibrate.external.external_validate import run_external_validation, write_external_report
    from rooflinesim.calibrate.measure.timers import select_device

    tiny_gptfast = (synthetic_spec("tiny-gf", 96, 3, 1, 160, layers=2, vocab=500),)
    report = run_external_validation(PROFILE, select_device("cpu", 1), "fp32", ("hf", "gptfast"), tiny=True,
                                     progress=False, hf_entries=tiny_entries()[:2], gptfast_specs=tiny_gptfast)
    assert set(report["summary"]) == {"hf", "gptfast"}
    assert report["summary"]["hf"]["calibrated"]["n"] == 2 * 2 * 1  # two models x batches (1, 2) x one context
    assert report["summary"]["gptfast"]["calibrated"]["n"] == 2
    for family in report["summary"].values():
        assert 0.0 <= family["coverage"] <= 1.0 and family["interval_half_width"] > 0
    for row in report["configs"]:
        assert row["measured_s"] > 0 and row["predicted_low_s"] <= row["predicted_s"] <= row["predicted_high_s"]
    # each family is priced with its implementation profile, and as the reference decoder beside it
    for row in report["configs"]:
        assert row["implementation"] == row["family"]
        if row["family"] == "hf":  # DynamicCache's concatenation is priced on top of the reference's ops
            assert row["predicted_s"] > row["predicted_reference_s"]
    assert {"hf", "gptfast"} <= {f for f, s in report["summary"].items() if "reference_impl" in s}
    assert write_external_report(report, tmp_path, "r").is_file()


def test_validate_family_refuses_an_unknown_family(capsys):
    from rooflinesim.cli import main

    assert main(["validate", "--family", "hf,vllm", "--profile", PROFILE]) == 2
    assert "--family takes a comma-separated list of hf, gptfast, project" in capsys.readouterr().err


def test_speed_factor_is_the_geometric_mean_of_the_anchors():
    from rooflinesim.calibrate.external.external_validate import speed_factor

    assert speed_factor({"median_ratio": {"gemm": 2.0, "forward": 4.0, "stream": 8.0}}) == pytest.approx(4.0)
    assert speed_factor({"median_ratio": {"gemm": 9.0, "forward": 4.0}}) == pytest.approx(6.0)
    assert speed_factor({"median_ratio": None}) is None and speed_factor(None) is None


def test_the_speed_verdict_says_which_way_the_machine_moved():
    """Regression: a machine running faster than when its profile was measured (anchor times now / then below 1, as
    on the 2-core Zen 3 VM of 2026-12-07: forward 0.60x) was reported as 'not as fast'."""
    from rich.console import Console

    from rooflinesim.calibrate.external.external_validate import get_speed_direction, print_external_report

    assert get_speed_direction({"gemm": 0.99, "forward": 0.60, "stream": 0.88}) == "faster"
    assert get_speed_direction({"gemm": 1.3, "forward": 1.01}) == "slower"
    assert get_speed_direction({"gemm": 0.8, "forward": 1.2}) == "at another speed"
    summary = {"calibrated": {"median_ape": 0.1, "p90_ape": 0.2, "n": 1}, "roofline": {"median_ape": 0.3,
               "p90_ape": 0.4, "n": 1}, "median_signed_error": 0.1, "coverage": 1.0, "interval_half_width": 0.2,
               "speed_adjusted": {"median_ape": 0.05, "p90_ape": 0.1, "n": 1}, "speed_factor": 0.8}
    report = {"device": "cpu", "dtype": "fp32", "profile": "p.yaml", "summary": {"hf": summary},
              "by_model": {"m": summary}, "configs": [{"family": "hf", "model": "m"}],
              "anchor": {"median_ratio": {"gemm": 0.99, "forward": 0.60}, "matches_profile": False}}
    console = Console(record=True, width=200)
    print_external_report(report, console)
    text = console.export_text()
    assert "the machine ran faster than when the profile was measured" in text and "not as fast" not in text
    assert "predictions x 0.80 (the machine's speed now against then)" in text


@needs_hf
def test_the_moe_hold_out_runs_the_experts_implementation_the_profile_prices(monkeypatch):
    """transformers falls back to its eager per-expert loop, silently, where grouped_mm cannot dispatch; the hold-out
    asks for grouped_mm by name, so it runs what implementations/hf.yaml prices or stops with one line."""
    from rooflinesim.calibrate.external.hf_holdout import HF_EXPERTS_IMPLEMENTATION, build_hf_model, make_config

    moe = tiny_entries()[2]
    config = make_config(moe)
    assert config._experts_implementation == HF_EXPERTS_IMPLEMENTATION == "grouped_mm"
    assert build_hf_model(config, torch.float32).config._experts_implementation == "grouped_mm"
    assert getattr(make_config(tiny_entries()[0]), "_experts_implementation", None) is None  # dense: untouched

    from transformers import PreTrainedModel

    def cannot_dispatch(self):
        raise ImportError("no grouped_mm kernel on this torch")

    monkeypatch.setattr(PreTrainedModel, "_grouped_mm_can_dispatch", cannot_dispatch, raising=False)
    with pytest.raises(InputError, match="cannot run the 'grouped_mm' experts implementation of tiny-hf-qwen2moe"):
        build_hf_model(make_config(moe), torch.float32)
