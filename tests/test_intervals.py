"""Prediction intervals from a measured profile, the host notice of a profile measured elsewhere, and
`calibrate --merge`."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibrate.fitting.merge import merge_profiles
from rooflinesim.specs.workload import Workload
from rooflinesim.pricing.predict import predict
from rooflinesim.specs.profiles import get_host_cpu_isa, get_host_cpu_model, get_host_notice, write_profile
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.errors import InputError
from rooflinesim.timing import get_timing_model

from .test_calibrate import ROOT, make_profile

STEP_KEYS = ("step_time_s_low", "step_time_s_high")
SPECULATIVE_KEYS = tuple(f"{name}_{end}" for name in ("draft_step_time_s", "verify_step_time_s", "step_time_s",
                                                      "speedup") for end in ("low", "high"))


def with_spread(spec, spread: float, drift: float = 0.01, runs=None):
    """The synthetic profile with every table's per-call spread (and the run's drift) set."""
    measured = spec.measured
    dtypes = {}
    for d, prof in measured.dtypes.items():
        tables = tuple(t.model_copy(update={"spread": tuple(spread for _ in t.m)}) for t in prof.linear)
        residuals = {k: v for k, v in prof.residuals.items() if k != "linear_table_median_spread"}
        dtypes[d] = prof.model_copy(update={"linear": tables, "residuals": residuals, "runs": runs})
    prov = measured.provenance.model_copy(update={"drift": drift})
    return spec.model_copy(update={"measured": measured.model_copy(update={"dtypes": dtypes, "provenance": prov})})


def _predict(hw, **options):
    return predict(hw, "tiny-llama-123m", 4, 1024, weight_dtype="fp32", kv_dtype="fp32", activation_dtype="fp32",
                   draft="tiny-draft-2l", k=4, **options).to_dict()


def test_interval_keys_exist_and_bracket_the_prediction():
    out = _predict(make_profile())
    for section in ("decode", "prefill"):
        low, mid, high = (out[section][k] for k in ("step_time_s_low", "step_time_s", "step_time_s_high"))
        assert 0 < low < mid < high
    spec = out["speculative"]
    for name in ("draft_step_time_s", "verify_step_time_s", "step_time_s", "speedup"):
        assert 0 < spec[f"{name}_low"] < spec[name] < spec[f"{name}_high"], name


def test_the_datasheet_roofline_reports_the_published_band_on_step_times():
    """Issue 24 changed this test on purpose: a datasheet prediction carried no interval (keys present and null);
    its step times now carry the published-measurement band (tests/test_datasheet_intervals.py). That band is a
    factor common to every step and cancels in the speedup, so the speedup's interval was null with alpha given as
    a number; JSON contract 3 changed this on purpose again: it now carries the engine profile's published speedup
    error (tests/test_speedup_band.py)."""
    out = predict("a100", "llama-3.1-8b", 8, 4096, k=4).to_dict()
    assert all(out["decode"][k] is not None and out["prefill"][k] is not None for k in STEP_KEYS)
    spec = out["speculative"]
    assert all(k in spec for k in SPECULATIVE_KEYS)
    assert spec["speedup_low"] < spec["speedup"] < spec["speedup_high"]
    assert "published error" in spec["interval_source"]
    assert spec["step_time_s_low"] <= spec["step_time_s"] <= spec["step_time_s_high"]


@settings(max_examples=15, deadline=None)
@given(spread=st.floats(0.0, 0.5), more=st.floats(0.05, 1.0))
def test_intervals_widen_with_the_measured_spread(spread, more):
    narrow, wide = (_predict(with_spread(make_profile(), s)) for s in (spread, spread + more))
    for section in ("decode", "prefill"):
        ratio = lambda o: o[section]["step_time_s_high"] / o[section]["step_time_s_low"]  # noqa: E731
        assert ratio(wide) > ratio(narrow)
    assert (wide["speculative"]["speedup_high"] / wide["speculative"]["speedup_low"]
            > narrow["speculative"]["speedup_high"] / narrow["speculative"]["speedup_low"])


def test_intervals_widen_with_drift_and_narrow_with_pooled_runs():
    base = _predict(with_spread(make_profile(), 0.2, drift=0.01))["decode"]
    drifted = _predict(with_spread(make_profile(), 0.2, drift=0.3))["decode"]
    pooled = _predict(with_spread(make_profile(), 0.2, drift=0.01, runs=4))["decode"]
    width = lambda d: d["step_time_s_high"] / d["step_time_s_low"]  # noqa: E731
    assert width(drifted) > width(base) > width(pooled)


def test_k0_is_plain_decoding_with_an_exact_speedup():
    scenario = build_scenario(with_spread(make_profile(), 0.3), "tiny-llama-123m", 4, 1024, weight_dtype="fp32",
                              kv_dtype="fp32", activation_dtype="fp32", draft="tiny-draft-2l", k=0)
    from rooflinesim.pricing.speculative import price_speculation

    grid = price_speculation(scenario, 4, 1024, np.arange(0, 5), 0.8)
    assert grid.speedup_rel_sigma[0] == 0.0 and np.all(grid.speedup_rel_sigma[1:] > 0)


def test_the_interval_is_the_documented_root_sum_square():
    """One step by hand: per op sigma_family x its time, root-sum-square, (+) the shared term; 90 % = 1.645 sigma."""
    from rooflinesim.step import get_step_cost
    from rooflinesim.specs.registry import load_model

    hw = with_spread(make_profile(), 0.25, drift=0.05)
    timing = get_timing_model(hw)
    step = get_step_cost(hw, load_model("tiny-llama-123m"), Workload.in_dtype("fp32", 2, 512), 1, timing=timing)
    sig = timing.get_relative_sigmas("fp32")
    parts = [sig.by_family["linear" if op.kind == "linear" else "attention" if op.kind == "attention" else
                           "elementwise"] * float(t.time_s) for op, t in zip(step.ops, step.expected)]
    expected = np.hypot(np.sqrt(np.sum(np.square(parts))) / float(step.step_time_s), sig.shared)
    assert float(step.rel_sigma) == pytest.approx(expected, rel=1e-12)
    assert float(step.step_time_s_high) == pytest.approx(float(step.step_time_s) * np.exp(1.6449 * expected))
    assert sig.shared == pytest.approx(0.05 / 1.6926, rel=1e-3)  # drift only: the profile has no decoder residual


def test_text_output_shows_the_intervals():
    from rich.console import Console

    from rooflinesim.report import render_prediction

    console = Console(record=True, width=200)
    p = predict(make_profile(), "tiny-llama-123m", 4, 1024, weight_dtype="fp32", kv_dtype="fp32",
                activation_dtype="fp32", draft="tiny-draft-2l", k=4)
    render_prediction(p, console)
    text = console.export_text()
    assert text.count("90 % interval") >= 2 and "90 % intervals: draft step" in text


# --- where a profile was measured --------------------------------------------------------------------------------------


def test_host_notice_names_the_measured_device_only_on_another_host():
    measured = make_profile().measured
    assert get_host_notice(measured, host_cpu="Test CPU") == []
    (line,) = get_host_notice(measured, host_cpu="Some Other CPU")
    assert "Test CPU (2 threads)" in line and "Some Other CPU" in line and "\n" not in line


def test_build_scenario_says_which_device_a_foreign_profile_describes():
    here = get_host_cpu_model()
    spec = make_profile()
    foreign = build_scenario(spec, "tiny-llama-123m", 1, 256, weight_dtype="fp32", kv_dtype="fp32",
                             activation_dtype="fp32", speculative=False)
    assert any("describes Test CPU (2 threads)" in w for w in foreign.warnings) == (here != "Test CPU")
    prov = spec.measured.provenance.model_copy(update={"host_cpu": here})
    local = spec.model_copy(update={"measured": spec.measured.model_copy(update={"provenance": prov})})
    assert not any("describes" in w for w in build_scenario(local, "tiny-llama-123m", 1, 256, weight_dtype="fp32",
                                                            kv_dtype="fp32", activation_dtype="fp32",
                                                            speculative=False).warnings)


def test_host_cpu_is_read_from_proc_cpuinfo_without_torch(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Fancy CPU 9000\nflags\t: avx\n")
    assert get_host_cpu_model(info) == "Fancy CPU 9000"
    code = "import sys, rooflinesim.scenario.builder, rooflinesim.specs.profiles; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- merging runs ------------------------------------------------------------------------------------------------------


def _scaled_tables(spec, factor: float, spread: float):
    measured = spec.measured
    dtypes = {d: p.model_copy(update={"linear": tuple(t.model_copy(update={
        "time_s": tuple(x * factor for x in t.time_s), "spread": tuple(spread for _ in t.m)}) for t in p.linear)})
        for d, p in measured.dtypes.items()}
    return spec.model_copy(update={"measured": measured.model_copy(update={"dtypes": dtypes})})


def test_merge_pools_tables_with_medians_adds_runs_and_narrows_intervals():
    a, b, c = (_scaled_tables(make_profile(), f, 0.3) for f in (1.0, 1.2, 1.1))
    merged = merge_profiles([a, b, c], ["a.yaml", "b.yaml", "c.yaml"])
    prof = merged.measured.dtypes["fp32"]
    assert prof.runs == 3
    first = a.measured.dtypes["fp32"].linear[0]
    assert prof.linear[0].time_s == pytest.approx(tuple(x * 1.1 for x in first.time_s))  # the median of three
    assert "a.yaml" in merged.measured.provenance.notes and "c.yaml" in merged.measured.provenance.notes
    single = _predict(a)["decode"]
    pooled = _predict(merged)["decode"]
    assert pooled["step_time_s_high"] / pooled["step_time_s_low"] < single["step_time_s_high"] / single["step_time_s_low"]


def _with_anchor(spec, anchor):
    prov = spec.measured.provenance.model_copy(update={"anchor_s": anchor})
    return spec.model_copy(update={"measured": spec.measured.model_copy(update={"provenance": prov})})


def test_merge_averages_the_machine_speed_anchors():
    a = _with_anchor(make_profile(), {"gemm": 2e-3, "forward": 5e-4})
    b = _with_anchor(make_profile(), {"gemm": 4e-3, "forward": 7e-4})
    merged = merge_profiles([a, b], ["a.yaml", "b.yaml"]).measured.provenance.anchor_s
    assert merged == pytest.approx({"gemm": 3e-3, "forward": 6e-4})
    # a run measured before anchors existed: the merged profile has none (nothing to compare a validation with)
    assert merge_profiles([a, make_profile()], ["a.yaml", "old.yaml"]).measured.provenance.anchor_s is None
    # a run measured before the 'stream' anchor: the anchors both runs have are averaged, the other is dropped
    c = _with_anchor(make_profile(), {"gemm": 4e-3, "forward": 7e-4, "stream": 6e-4})
    assert merge_profiles([c, a], ["c.yaml", "a.yaml"]).measured.provenance.anchor_s == pytest.approx(
        {"gemm": 3e-3, "forward": 6e-4})


def test_merge_refuses_profiles_of_different_devices():
    other = make_profile()
    prov = other.measured.provenance.model_copy(update={"device_name": "Another CPU (2 threads)"})
    other = other.model_copy(update={"measured": other.measured.model_copy(update={"provenance": prov})})
    with pytest.raises(InputError, match="profiles of different devices"):
        merge_profiles([make_profile(), other])


def test_cli_merge_writes_a_profile_and_refuses_other_devices_in_one_line(tmp_path):
    a = write_profile(_scaled_tables(make_profile(), 1.0, 0.2), tmp_path / "a.yaml")
    b = write_profile(_scaled_tables(make_profile(), 1.3, 0.2), tmp_path / "b.yaml")
    out = tmp_path / "c.yaml"
    run = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "calibrate", "--merge", str(a), str(b), "--out",
                          str(out)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    predicted = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "predict", "--hw", str(out), "--model",
                                "tiny-llama-123m", "--weight-dtype", "fp32", "--json"], cwd=ROOT, capture_output=True,
                               text=True, check=True)
    assert json.loads(predicted.stdout)["decode"]["step_time_s_low"] > 0
    other = make_profile()
    prov = other.measured.provenance.model_copy(update={"threads": 4})
    write_profile(other.model_copy(update={"measured": other.measured.model_copy(update={"provenance": prov})}),
                  tmp_path / "d.yaml")
    refused = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "calibrate", "--merge", str(a),
                              str(tmp_path / "d.yaml"), "--out", str(tmp_path / "e.yaml")], cwd=ROOT,
                             capture_output=True, text=True)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "e.yaml").exists()


@pytest.mark.parametrize("flags, isa", [("fpu sse2 avx avx2 avx512f avx512_bf16 amx_bf16", "avx512"),
                                        ("fpu sse2 avx avx2 fma", "avx2"), ("fpu sse2 avx", "avx"), ("fpu sse2", "")])
def test_host_cpu_isa_is_the_widest_vector_extension_in_the_flags(tmp_path, flags, isa):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n")
    assert get_host_cpu_isa(info) == isa
    assert get_host_cpu_isa(tmp_path / "missing") == ""


def test_host_notice_tells_apart_two_hosts_of_one_model_name_by_their_vector_extension():
    """A Zen 3 and a Zen 4 'AMD EPYC' share the model name; a profile recording AVX-512 does not describe the AVX2
    host. One measured before host_isa was recorded is compared by name only (no notice on a same-named host)."""
    measured = make_profile().measured
    assert measured.provenance.host_isa is None
    assert get_host_notice(measured, host_cpu="Test CPU", host_isa="avx2") == []
    prov = measured.provenance.model_copy(update={"host_isa": "avx512"})
    recorded = measured.model_copy(update={"provenance": prov})
    assert get_host_notice(recorded, host_cpu="Test CPU", host_isa="avx512") == []
    (line,) = get_host_notice(recorded, host_cpu="Test CPU", host_isa="avx2")
    assert "host Test CPU, avx512" in line and "(Test CPU, avx2)" in line


def test_cpu_slug_names_the_vector_extension_below_avx512_only():
    from rooflinesim.calibrate.measure.timers import get_cpu_slug

    assert get_cpu_slug("AMD EPYC", "avx512", 2) == "cpu-amd-epyc-2c"  # the committed folders keep their names
    assert get_cpu_slug("AMD EPYC", "avx2", 2) == "cpu-amd-epyc-avx2-2c"
    assert get_cpu_slug("Intel(R) Xeon(R) Processor", "avx512", 2) == "cpu-intel-xeon-2c"
    assert get_cpu_slug("Neoverse-N1", "", 4) == "cpu-neoverse-n1-4c"
