"""One scenario, one pricing path: predict, sweep and every chart agree on the same Scenario, and each divergence the
front ends once had (issue 10) has a regression test here."""

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import rooflinesim
from rooflinesim import plots
from rooflinesim.pricing.predict import predict_scenario
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.pricing.break_even import get_break_even_batch
from rooflinesim.pricing.speculative import get_engine_extras_s
from rooflinesim.timing.engine import with_role
from rooflinesim.pricing.sweep import sweep, sweep_scenario

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "tests" / "data" / "profiles" / "cpu-intel-xeon-2c.yaml"


# --- the consistency property --------------------------------------------------------------------------------------

DEPLOYMENTS = [  # (hardware, target, draft, weight dtypes, tensor-parallel degrees)
    ("a100", "llama-3.1-8b", "llama-3.2-1b", ("bf16", "int8", "int4"), (1, 2, 4)),
    ("h100", "llama-3.1-70b", "llama-3.1-8b", ("bf16", "fp8"), (2, 4, 8)),
    ("l4", "mistral-7b", "qwen2.5-0.5b", ("bf16", "int4"), (1,)),
    ("mi300x", "mixtral-8x7b", "llama-3.2-1b", ("bf16", "fp8"), (1, 2)),
    ("h200", "deepseek-v2-lite", "llama-3.2-1b", ("bf16",), (1, 2)),
    (str(PROFILE), "tiny-llama-123m", "tiny-draft-2l", ("fp32", "bf16", "int8"), (1,)),
]


@st.composite
def scenarios(draw):
    hw, model, draft, dtypes, tps = draw(st.sampled_from(DEPLOYMENTS))
    drafter = draw(st.sampled_from(["model", "model", "ngram", "head"]))
    k = draw(st.none() | st.integers(0, 8))
    return build_scenario(
        hw, model, draw(st.integers(1, 256)), draw(st.integers(0, 32768)), weight_dtype=draw(st.sampled_from(dtypes)),
        tp=draw(st.sampled_from(tps)), draft=draft, drafter=drafter, alpha=draw(st.floats(0.0, 1.0)),
        k=k, k_values=range(0, 9), head_layer_fraction=draw(st.sampled_from([0.5, 1.0])),
        extra_draft_pass=draw(st.booleans()), allow_long_context=True)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12, atol=0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_predict_sweep_and_charts_agree_on_one_scenario(scenario):
    p = predict_scenario(scenario)
    spec = p.speculative
    grid = sweep_scenario(scenario)
    i = int(np.flatnonzero(grid.k == spec.k)[0])
    _close(grid.speedup[0, 0, i, 0], spec.speedup)
    _close(grid.step_time_s[0, 0, i, 0], spec.step_time_s)
    _close(grid.draft_step_time_s[0, 0, i], spec.draft_step_time_s)
    _close(grid.verify_step_time_s[0, 0, i], spec.verify_step_time_s)
    _close(grid.target_decode_time_s[0, 0], p.decode.step_time_s)
    assert int(grid.best_k[0, 0, 0]) == spec.best_k
    _close(grid.best_speedup[0, 0, 0], spec.best_speedup)
    assert bool(grid.fits_in_memory[0, 0, i]) == spec.fits_in_memory == p.memory["fits_in_memory"]
    assert [bool(f) for f in grid.fits_in_memory[0, 0]] == [row["fits_in_memory"] for row in spec.k_table]
    # what the step sums is what is reported
    _close(spec.step_time_s, spec.k * spec.draft_step_time_s + spec.verify_step_time_s
           + (scenario.extra_draft_pass and spec.k > 0) * spec.draft_step_time_s
           * (scenario.acceptance.alphas[0] ** spec.k))
    # the charts: speedup vs k, the roofline's decode and verify points, the speedup map's cell
    by_k = plots.get_speedup_vs_k_data(scenario)
    _close(by_k["speedup"][:, 0], [row["speedup"] for row in spec.k_table])
    roof = plots.get_roofline_data(scenario, k=spec.k)
    _close(roof["decode"][2][0, 0], p.decode.step_time_s)
    if spec.k > 0 and scenario.drafter.kind != "model":  # no draft weights in the caches: the plain verify step
        # + what the engine adds to a speculative iteration (extend pass, verify kernels, host; 0 under ideal)
        extras = get_engine_extras_s(scenario, with_role(scenario.timing, "speculative"), scenario.batch[0],
                                     scenario.context_tokens[0], spec.k)
        if scenario.engine is None or scenario.engine.is_ideal:
            _close(max(roof["verify"][2][0, 0], p.decode.step_time_s), spec.verify_step_time_s)
        else:
            assert spec.verify_step_time_s >= max(roof["verify"][2][0, 0], p.decode.step_time_s) + float(extras) * 0.999
    _, cells = plots.get_speedup_map_data(scenario)
    rows = [row for row in spec.k_table if row["k"] > 0]
    feasible = [row["speedup"] for row in rows if row["fits_in_memory"]] or [row["speedup"] for row in rows]
    _close(cells["best_speedup"][0, 0], max(feasible))


# --- invariants for every timing model, datasheet and measured alike (issue 15) ----------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
# the committed profile's lm_head table is faster at M = 16 than at M = 8; its attention fits cross far out
@example(scenario=build_scenario(str(PROFILE), "tiny-draft-2l", [4, 8, 16], 256, weight_dtype="fp32", drafter="ngram",
                                 alpha=1.0, k_values=range(0, 9)))
@example(scenario=build_scenario(str(PROFILE), "deepseek-v2-lite", 64, "32k", drafter="ngram", alpha=1.0,
                                 k_values=range(0, 5)))
def test_speculative_invariants_hold_for_every_timing_model(scenario):
    grid = sweep_scenario(scenario)
    k = grid.k[None, None, :, None]
    assert np.all(grid.speedup[:, :, grid.k == 0] == 1.0)  # k = 0 is plain decoding, exactly
    assert np.all(grid.expected_tokens <= k + 1 + 1e-12)
    assert np.all(grid.speedup <= grid.expected_tokens * (1 + 1e-12))  # verify never priced below decode
    for times in (grid.step_time_s, grid.verify_step_time_s, grid.target_decode_time_s, grid.draft_step_time_s):
        assert np.all(np.isfinite(times)) and np.all(times >= 0)
    assert np.all(grid.target_decode_time_s > 0) and np.all(grid.step_time_s > 0)


def test_measured_profile_regressions_from_issue_15():
    # verify priced at half a decode step (attention fits extrapolated far outside the measured range)
    deepseek = rooflinesim.predict(hw=str(PROFILE), model="deepseek-v2-lite", drafter="ngram", batch=64, ctx="32k",
                                   alpha=1, k=1).speculative
    assert deepseek.speedup <= 2.0
    # inside the measured range: the lm_head table is faster at M = 16 than at M = 8 on that CPU
    tiny = rooflinesim.predict(hw=str(PROFILE), model="tiny-draft-2l", drafter="ngram", weight_dtype="fp32", batch=8,
                               ctx=256, alpha=1, k=1).speculative
    assert tiny.speedup <= 2.0
    # k = 0 showed 0.779x: the draft's weights were counted in the cache working set when no draft runs
    k0 = rooflinesim.predict(hw=str(PROFILE), model="tiny-draft-2l", draft="tiny-draft-2l", weight_dtype="fp32",
                             batch=32, ctx=17, alpha=0.6).speculative
    assert k0.k_table[0]["speedup"] == 1.0


def test_quantised_weights_under_a_profile_are_priced_by_a_stated_rule():
    """int4 / int8 under a profile used to give exactly the bf16 time with no warning."""
    times = {d: rooflinesim.predict(hw=str(PROFILE), model="tiny-llama-123m", weight_dtype=d, ctx=1024,
                                    speculative=False) for d in ("bf16", "int8", "int4")}
    assert times["int4"].decode.step_time_s < times["int8"].decode.step_time_s < times["bf16"].decode.step_time_s
    assert not any("narrower stored weights" in w for w in times["bf16"].warnings)
    assert all(any("narrower stored weights" in w for w in times[d].warnings) for d in ("int8", "int4"))
    with pytest.raises(rooflinesim.InputError, match="measured fp32, bf16 only, not fp16"):
        rooflinesim.predict(hw=str(PROFILE), model="tiny-llama-123m", weight_dtype="fp16")


# --- the divergences of issue 10 -----------------------------------------------------------------------------------


def test_charts_price_fp8_as_predict_does():
    """plots had their own dtype defaults: fp8 weights on an H100 were drawn as bf16 compute."""
    p = rooflinesim.predict(hw="h100", weight_dtype="fp8", batch=8, ctx=4096, speculative=False)
    assert p.workload.activation_dtype == "fp8"
    scenario = build_scenario("h100", "llama-3.1-8b", 8, 4096, weight_dtype="fp8", speculative=False)
    _close(plots.get_roofline_data(scenario)["decode"][2][0, 0], p.decode.step_time_s)
    two = build_scenario("h100", "llama-3.1-8b", 8, [4096, 8192], weight_dtype="fp8", speculative=False)
    step, _ = plots.get_breakdown_data(two)
    _close(np.ravel(step.step_time_s)[0], p.decode.step_time_s)


def test_predict_and_sweep_agree_on_memory_with_the_draft_resident():
    """Llama-3.1-8B + 1B draft on an L4 at 8k, k = 4: predict said batches 5-7 fit, sweep that they don't."""
    whole = dict(gpu_memory_utilization=1.0, memory_reserve_bytes=0)  # the whole L4, as when this was found
    swept = sweep(hw="l4", model="llama-3.1-8b", draft="llama-3.2-1b", batch=[4, 5, 6, 7, 8], ctx=["8k"],
                  alpha=[0.8], k=[4], **whole)
    predicted = [rooflinesim.predict(hw="l4", batch=b, ctx="8k", k=4, **whole).memory["fits_in_memory"]
                 for b in range(4, 9)]
    # 24 GiB x 15/16 (ECC) = 24.15e9; weights 18.53e9; KV 8197 x (131072 + 32768) B = 1.34e9 per sequence
    assert list(swept.fits_in_memory[:, 0, 0]) == predicted == [True, False, False, False, False]


def test_sweep_carries_the_scenario_warnings():
    result = sweep(hw="cpu-generic", model="llama-2-7b", draft="tiny-draft-2l", batch=[1], ctx=[8192], alpha=[0.8],
                   k=[0, 2], calibration=str(PROFILE))
    text = " ".join(result.warnings)
    assert "exceeds" in text and "max context" in text  # llama-2-7b holds 4k
    assert result.to_dict(include_grid=False)["warnings"] == list(result.warnings)


def test_break_even_respects_memory():
    """H100, Llama-3.1-8B, 1k context: batch 512 does not fit. Memory is its own answer, not a break-even (issue 24
    changed this test on purpose: it expected the first batch that does not fit, 512)."""
    result = sweep(hw="h100", batch=[1, 64, 512], ctx=[1024], alpha=[0.8])
    assert not result.fits_in_memory[2, 0].any()
    row = result.get_break_even_table()[0]
    assert row["break_even_batch"] is None and row["speculation_verdict"] == "pays_up_to_largest_fitting_batch"
    assert row["largest_fitting_batch"] == 64 and 64 <= row["max_batch_that_fits"] < 512


def test_break_even_has_one_definition():
    batch = np.array([1, 2, 4, 8])
    assert list(get_break_even_batch(batch, np.array([[True], [False], [True], [False]]))) == [8]  # dip then recovery
    assert list(get_break_even_batch(batch, np.array([[True], [True], [True], [True]]))) == [-1]  # pays everywhere
    assert list(get_break_even_batch(batch, np.array([[False], [False], [False], [False]]))) == [1]
    fits = np.array([[True], [True], [True], [False]])  # only memory is in the way at batch 8: no break-even
    assert list(get_break_even_batch(batch, np.array([[True], [True], [True], [False]]), fits)) == [-1]
    assert list(get_break_even_batch(batch, np.array([[True], [False], [True], [False]]), fits)) == [-1]
    assert list(get_break_even_batch(batch, np.array([[True], [True], [False], [False]]), fits)) == [4]
    assert list(get_break_even_batch(batch, np.array([[False]] * 4), np.zeros((4, 1), bool))) == [-1]
    pytest.importorskip("torch")
    from rooflinesim.calibrate.validators.validate import _break_even

    assert _break_even([1, 2, 4, 8], [1.2, 0.9, 1.1, 0.8]) == 8
    assert _break_even([1, 2, 4, 8], [1.2, 1.1, 1.1, 1.05]) is None


def test_measured_timing_is_immutable_and_prices_overhead_in_the_dtype_asked():
    from rooflinesim.specs.profiles import load_profile
    from rooflinesim.timing import MeasuredTiming

    hw = load_profile(PROFILE)
    timing = MeasuredTiming.from_spec(hw)
    with pytest.raises(dataclasses.FrozenInstanceError):
        timing.name = "changed"
    fp32, bf16 = hw.measured.dtypes["fp32"], hw.measured.dtypes["bf16"]

    def per_step(p):  # not bound to a step: no cache warmth, the whole in-model per-layer cost
        return 12 * (p.layer_overhead_s + p.in_model_layer_overhead_s) + p.step_overhead_s

    assert timing.get_step_overhead_s(12, "fp32") == pytest.approx(per_step(fp32))
    assert timing.get_step_overhead_s(12, "bf16") == pytest.approx(per_step(bf16))
    # pricing an fp32 op first no longer changes a bf16 step's overhead
    from rooflinesim.ops.step_ops import get_step_ops
    from rooflinesim.specs.workload import Workload

    timing.get_op_time(get_step_ops(load_model_tiny(), Workload.in_dtype("fp32", 1, 256), 1)[1], "fp32")
    assert timing.get_step_overhead_s(12, "bf16") == pytest.approx(per_step(bf16))


def load_model_tiny():
    from rooflinesim import load_model

    return load_model("tiny-llama-123m")


def test_rich_table_header_shows_expected_tokens():
    from rich.console import Console

    from rooflinesim.report import render_prediction

    console = Console(file=io.StringIO(), width=140, record=True)
    render_prediction(rooflinesim.predict(), console, k_table=True)  # issue 24: the k table is on request
    assert "E[tokens]" in console.export_text()


def test_plot_shows_the_scenario_warnings(tmp_path, capsys):
    from rooflinesim.cli import main

    assert main(["plot", "roofline", "--model", "llama-2-7b", "--ctx", "8k", "--allow-long-context",
                 "-o", str(tmp_path / "r.png")]) == 0
    assert "exceeds Llama-2-7B's max context" in capsys.readouterr().err


def test_engine_schedule_is_off_where_nothing_fits():
    """Regression: best k fell back to all k where none fits, so the TRT-LLM schedule ended on {huge batch: 64}."""
    result = sweep(hw="h100", batch=[1, 64, 4096], ctx=[131072], alpha=[0.8], k=[0, 2, 4])
    assert not result.fits_in_memory[-1, 0].any()
    schedule = result.get_engine_schedules()[0]["trtllm"]["draft_len_schedule"]
    # issue 24 changed this test on purpose: a batch that does not fit gets no entry at all (it had a k = 0 entry,
    # read as "speculation stops paying there"); memory, reported as max_batch_that_fits, caps the batch instead
    assert max(schedule) <= 64 and 0 not in schedule.values()
    assert result.get_break_even_table()[0]["max_batch_that_fits"] < 4096


def test_a_measured_profile_says_when_it_extrapolates():
    """Outside what was measured (MLA's 576-wide latent vs head_dim 64/128; M beyond the tables) the measured model
    prices conservatively and says so."""
    s = build_scenario(str(PROFILE), "deepseek-v2-lite", 4, 4096, drafter="ngram")
    assert any("head_dim 576 is priced from the fit measured at head_dim 128" in w for w in s.warnings)
    big = build_scenario(str(PROFILE), "tiny-llama-123m", 4096, 256, weight_dtype="fp32", speculative=False)
    assert any("exceed the largest measured M" in w for w in big.warnings)
    inside = build_scenario(str(PROFILE), "tiny-llama-123m", 4, 256, weight_dtype="fp32", speculative=False)
    assert not any("priced from the fit" in w or "largest measured M" in w for w in inside.warnings)
