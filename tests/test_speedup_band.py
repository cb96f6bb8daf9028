"""The speedup's published error band on a datasheet (pricing/speedup_band.py): read per engine profile from the held-out
rows of the speculation-under-load benchmark, added to the speedup, and deciding the verdict."""

import json
from pathlib import Path

import pytest

import rooflinesim
from rooflinesim.cli import main
from rooflinesim.pricing import speedup_error_bands
from rooflinesim.pricing.sensitivity import get_acceptance_interval
from rooflinesim.pricing.speedup_band import get_speedup_band, get_speedup_verdict
from rooflinesim.specs.registry import load_engine

from .benchmark_scripts import load_script
from .test_intervals import _predict, make_profile  # the suite's measured-profile helpers


def test_shipped_bands_name_engine_profiles_and_are_positive():
    for name, (h, n) in speedup_error_bands.BANDS.items():
        load_engine(name)  # an unknown profile name raises
        assert h > 0 and n > 0, name
    h, n = speedup_error_bands.POOLED
    assert h > 0 and n >= speedup_error_bands.MIN_ROWS
    inside, rows = speedup_error_bands.LEAVE_ONE_SOURCE_OUT
    assert rows == n and 0.8 * rows <= inside <= rows  # the band holds on sources left out of it (about 90 %)


def test_a_profile_with_rows_reads_its_own_band_by_hand():
    h, n = speedup_error_bands.BANDS["sglang"]
    band = get_speedup_band("sglang")
    assert band.engine_rows and band.rows == n
    assert band.apply(1.2) == pytest.approx((1.2 - h, 1.2 + h))  # symmetric: +-h
    assert band.apply(0.1) == (0.0, pytest.approx(0.1 + h))  # never below zero
    assert "sglang" in band.source and str(n) in band.source and "; " not in band.source


def test_a_profile_without_enough_rows_gets_the_pooled_band_widened_and_flagged():
    band = get_speedup_band("trtllm")
    h, n = speedup_error_bands.POOLED
    w = speedup_error_bands.POOLED_WIDENING
    assert not band.engine_rows and band.rows == n
    assert (band.low_error_x, band.high_error_x) == pytest.approx((-h * w, h * w))
    assert band.source.startswith("FLAGGED") and "; " not in band.source
    assert get_speedup_band("sglang").high_error_x < band.high_error_x  # wider than a profile's own


@pytest.mark.parametrize("speedup, interval, verdict", [
    (1.2, (1.05, 1.4), "pays"), (0.9, (0.7, 0.98), "does_not_pay"), (1.2, (0.99, 1.47), "uncertain"),
    (0.95, (0.8, 1.1), "uncertain"), (1.2, None, "pays"), (1.0, None, "does_not_pay")])
def test_verdict_follows_the_interval(speedup, interval, verdict):
    assert get_speedup_verdict(speedup, interval) == verdict


def test_eagle1_at_batch_24_in_sglang_is_uncertain_not_paying(capsys):
    """Regression: the EAGLE-3 paper measured EAGLE-1 at 0.93x here; the tool printed 'speculation pays here' for
    1.20x with no interval, the step band cancelling in the speedup."""
    args = ["predict", "--hw", "h100", "--model", "llama-3.1-8b", "--batch", "24", "--ctx", "512", "--engine",
            "sglang", "--drafter", "eagle", "--alpha", "0.512", "--k", "3"]
    assert main(args + ["--json"]) == 0
    spec = json.loads(capsys.readouterr().out)["speculative"]
    assert spec["speedup"] > 1 and spec["speedup_low"] < 1 < spec["speedup_high"]
    assert spec["speedup_verdict"] == "uncertain"
    assert "engine sglang's published error" in spec["interval_source"]
    assert main(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "uncertain here" in text and "speedup interval: engine sglang's published error" in text


def test_acceptance_interval_and_published_band_add():
    """A measured acceptance's interval is widened by the engine band at both ends (datasheet, default engine)."""
    log = Path(__file__).resolve().parent / "data" / "engine-logs" / "vllm-v1.log"
    result = rooflinesim.predict(acceptance=str(log))
    p = result.speculative
    band = get_speedup_band(result.engine)
    _, (s_low, s_high) = get_acceptance_interval(result.scenario, p.k)
    assert p.speedup_interval == pytest.approx((s_low - band.high_error_x, s_high - band.low_error_x))
    assert "acceptance" in p.interval_source and "published error" in p.interval_source


def test_a_measured_profile_keeps_its_own_intervals_without_the_published_band():
    spec = _predict(make_profile())["speculative"]
    assert "published error" not in (spec["interval_source"] or "")


def test_shipped_bands_were_priced_from_the_files_in_the_tree():
    """The bands are generated (benchmarks/speedup_bands.py --write); editing the benchmark, an engine profile, a
    hardware or a model file without regenerating them fails here."""
    generator = load_script("benchmarks/speedup_bands.py")
    assert speedup_error_bands.INPUTS_SHA256 == generator.get_inputs_sha256(), \
        "regenerate: python benchmarks/speedup_bands.py --write"
    assert (speedup_error_bands.MIN_ROWS, speedup_error_bands.POOLED_WIDENING) == \
        (generator.MIN_ROWS, generator.POOLED_WIDENING)


BATCHES = [1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 128]


def test_sweep_brackets_eagle1_break_even_with_the_published_error(capsys):
    """EAGLE-1 in SGLang (alpha fitted on the EAGLE-3 paper's batch-2 row): the point break-even is batch 80, the
    paper's 1.02x at 16 and 0.93x at 24; within the profile's published error the break-even runs from 20 to beyond
    128, which holds the paper's crossing."""
    from rooflinesim.pricing.sweep import sweep

    result = sweep("h100", "llama-3.1-8b", batch=BATCHES, ctx=[512], engine="sglang", drafter="eagle", alpha=[0.512],
                   k=[3])
    row = result.get_break_even_table()[0]
    assert row["break_even_batch"] == 80
    assert row["break_even_batch_earliest"] == 20 and row["break_even_batch_latest"] is None
    assert "sglang" in result.to_dict(include_grid=False)["break_even_band_source"]
    assert main(["sweep", "--hw", "h100", "--model", "llama-3.1-8b", "--ctx", "512", "--engine", "sglang",
                 "--drafter", "eagle", "--alpha", "0.512", "--k", "3", "--batch", ",".join(map(str, BATCHES))]) == 0
    assert "20 - >128" in capsys.readouterr().out


@pytest.mark.parametrize("engine, alpha, ctx", [("vllm-v1", 0.6, 512), ("sglang", 0.7, 4096), ("ideal", 0.5, 1024),
                                                ("trtllm", 0.55, 2048)])
def test_break_even_range_brackets_the_point_break_even(engine, alpha, ctx):
    from rooflinesim.pricing.sweep import sweep

    result = sweep("h100", "llama-3.1-8b", batch=BATCHES, ctx=[ctx], engine=engine, drafter="eagle", alpha=[alpha],
                   k=[3])
    row = result.get_break_even_table()[0]
    never = 10 ** 9  # None: pays at every batch that fits
    point = row["break_even_batch"] if row["speculation_verdict"] in ("stops_paying", "never_pays") else never
    earliest = row["break_even_batch_earliest"] or never
    latest = row["break_even_batch_latest"] or never
    assert earliest <= point <= latest


def test_sweep_under_a_measured_profile_has_no_published_range():
    from rooflinesim.pricing.sweep import sweep

    result = sweep(make_profile(), "tiny-llama-123m", batch=[1, 2, 4], ctx=[256], weight_dtype="fp32",
                   kv_dtype="fp32", activation_dtype="fp32", draft="tiny-draft-2l", alpha=[0.7], k=[2])
    row = result.get_break_even_table()[0]
    assert result.speedup_band is None and row["break_even_batch_earliest"] is None
    assert result.to_dict(include_grid=False)["break_even_band_source"] is None


def test_speedup_map_draws_the_break_even_at_either_end_of_the_published_error():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from rooflinesim.plots.speedup import get_speedup_map_data, plot_speedup_map
    from rooflinesim.scenario.builder import build_scenario

    options = dict(engine="sglang", drafter="eagle", alpha=0.512, k_values=[0, 3])
    scenario = build_scenario("h100", "llama-3.1-8b", [1, 8, 24, 48, 96, 128], [512, 2048], **options)
    result, cells = get_speedup_map_data(scenario)
    low, point, high = cells["pays_at_low_end"], cells["pays"], cells["pays_at_high_end"]
    assert (low <= point).all() and (point <= high).all()  # the low-end reading pays in fewer cells
    assert low.sum() < point.sum()
    fig = plot_speedup_map(scenario)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("low end of sglang's published error" in label for label in labels)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_a_band_read_on_hardware_its_rows_did_not_run_on_says_so():
    assert speedup_error_bands.HARDWARE["vllm-v1"] == ("h100",)
    on_h100, on_l4 = get_speedup_band("vllm-v1", "h100"), get_speedup_band("vllm-v1", "l4")
    assert "carried over" not in on_h100.source
    assert "carried over to l4: the rows ran on h100 only" in on_l4.source and "; " not in on_l4.source
    assert (on_l4.low_error_x, on_l4.high_error_x) == (on_h100.low_error_x, on_h100.high_error_x)
    spec = rooflinesim.predict(hw="l4", model="llama-3.1-8b", engine="vllm-v1").speculative
    assert "carried over to l4" in spec.interval_source


def test_emitted_engine_config_states_the_break_even_within_the_published_error():
    from rooflinesim.pricing.break_even import get_break_even_batch
    from rooflinesim.scenario.builder import build_scenario
    from rooflinesim.serve.engine_configs import emit_engine_config, get_break_even_span_line, get_k_by_batch
    from rooflinesim.serve.config import ServeConfig

    scenario = build_scenario("h100", "llama-3.1-8b", 1, 1024, draft="llama-3.2-1b", alpha=0.6, k_values=range(0, 9))
    text = emit_engine_config(scenario, "vllm", ServeConfig(), 1024)
    lines = text.splitlines()
    assert lines[2].startswith("# verdict:") and "published speedup error (+-0.17x)" in lines[3]
    # by hand over the same table: the best speculative speedup per batch, less and plus h, crossing 1.0x
    table = get_k_by_batch(scenario, 256, 1024, 8)
    best = (table["expected_tokens"][None, 1:] * table["step_time_s"][:, :1] / table["step_time_s"][:, 1:]).max(axis=1)
    h = get_speedup_band("vllm-v1").high_error_x
    earliest = int(get_break_even_batch(table["batch"], best - h > 1))
    assert earliest > 0 and f"from batch {earliest}" in get_break_even_span_line(
        scenario, get_speedup_band("vllm-v1", "h100"), table, 256)
    a100 = build_scenario("a100", "llama-3.1-8b", 1, 1024, draft="llama-3.2-1b", alpha=0.6, k_values=range(0, 9))
    assert "carried over to a100" in emit_engine_config(a100, "vllm", ServeConfig(), 1024)


def test_a_tie_at_one_does_not_pay_at_either_end_as_at_the_point():
    import numpy as np

    from rooflinesim.pricing.speedup_band import SpeedupBand

    band = SpeedupBand(-0.25, 0.25, 50, True, "b")  # binary-exact values, so the ties below are exact
    low, high = band.get_pays_at_ends(np.array([1.0, 1.25, 0.75, 1.5]))
    # low end: speedup - 0.25 > 1; high end: speedup + 0.25 > 1 (1.25 - 0.25 and 0.75 + 0.25 are ties: not paying)
    assert low.tolist() == [False, False, False, True] and high.tolist() == [True, True, False, True]
    assert get_speedup_verdict(1.0, None) == "does_not_pay"
