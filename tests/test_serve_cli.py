"""`rooflinesim serve`: the curve and crossover, JSON, the per-request log, traces, engine configs, bad input."""

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rooflinesim.cli import main
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import ServeConfig
from rooflinesim.serve.engine_configs import emit_engine_config, get_k_by_batch
from rooflinesim.serve.rates import get_crossovers, parse_rates
from rooflinesim.serve.workload import LengthDistribution, load_trace

try:  # tests/ on sys.path (pytest's default rootdir/prepend import mode)
    import engine_config_parsing  # noqa: F401
except ImportError:  # tests/ imported as a package
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))

SMALL = ["--hw", "h100", "--model", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--requests", "150",
         "--output-tokens", "64", "--prompt-tokens", "512", "--workers", "1"]


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_serve_prints_the_curve_and_the_crossover(capsys):
    code, out, err = run_cli(capsys, "serve", *SMALL, "--rate", "1..64", "--policy", "off,fixed:4,dynamic")
    assert code == 0, err
    for policy in ("policy off", "policy fixed:4", "policy dynamic"):
        assert policy in out
    assert "fixed:4 vs off" in out and "dynamic vs off" in out and "latency:" in out and "throughput:" in out


def test_serve_json_has_runs_percentiles_and_crossovers(capsys):
    code, out, _ = run_cli(capsys, "serve", *SMALL, "--rate", "2,200", "--policy", "off,fixed:4", "--json",
                           "--slo-ttft", "0.5", "--slo-tpot", "0.02")
    assert code == 0
    data = json.loads(out)
    assert len(data["runs"]) == 4
    run = data["runs"][0]
    for key in ("ttft_s", "tpot_s", "itl_s", "latency_s"):
        assert set(run[key]) == {"p50", "p90", "p99", "mean"}
    for key in ("output_tokens_per_s", "goodput_requests_per_s", "mean_batch", "mean_kv_occupancy",
                "peak_kv_occupancy", "preemptions", "mean_k"):
        assert key in run
    assert run["goodput_requests_per_s"] <= run["requests_per_s"] + 1e-9
    # at 2 req/s with k = 4, speculation pays for latency; at 200 req/s (saturated) fixed:4 loses throughput
    [crossover] = data["crossovers"]
    assert crossover["policy"] == "fixed:4"
    assert crossover["throughput"] == {"rate_per_s": 200.0, "mean_batch": pytest.approx(data["runs"][1]["mean_batch"])}


def test_request_log_is_written_atomically_as_jsonl(capsys, tmp_path):
    out_file = tmp_path / "requests.jsonl"
    code, out, _ = run_cli(capsys, "serve", *SMALL, "--rate", "4", "--policy", "dynamic", "-o", str(out_file))
    assert code == 0 and "written" in out
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(rows) == 150 and {"ttft_s", "tpot_s", "latency_s", "preemptions"} <= set(rows[0])
    assert not list(tmp_path.glob(".*tmp"))


def test_a_trace_is_replayed_and_scaled(capsys, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": i * 0.5, "prompt_tokens": 100 + i, "output_tokens": 20})
                             + "\n" for i in range(40)))
    native = load_trace(trace)
    assert native.count == 40 and native.arrival_s[-1] == pytest.approx(19.5)
    assert load_trace(trace, 2.0).arrival_s[-1] == pytest.approx(9.75)
    code, out, _ = run_cli(capsys, "serve", *SMALL, "--trace", str(trace), "--policy", "off", "--json")
    assert code == 0 and json.loads(out)["runs"][0]["requests"] == 40


@pytest.mark.parametrize("args,message", [
    (["--rate", "0"], "--rate"), (["--rate", "x"], "--rate"), (["--policy", "sometimes"], "unknown policy"),
    (["--prompt-tokens", "lognormal:x"], "--prompt-tokens"), (["--rate", "1,2", "-o", "log.jsonl"], "one --rate"),
    (["--max-num-seqs", "0"], "max_num_seqs"), (["--max-num-batched-tokens", "8", "--max-num-seqs", "16"],
                                                "at least max_num_seqs"),
    (["--alpha", "1.5"], "alpha"), (["--slo-tpot", "-1"], "--slo-tpot"), (["--trace", "missing.jsonl"], "trace"),
    (["--dask", "tcp://127.0.0.1:1"], "dask"), (["--seed", "-1"], "seed"), (["--workers", "-1"], "--workers"),
    (["--requests", "0"], "--requests"), (["--cv", "-1", "--arrivals", "gamma"], "CV"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "serve", *SMALL, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_malformed_trace_line_names_the_line(tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n{"arrival_s": "soon"}\n')
    with pytest.raises(Exception, match="bad.jsonl:2"):
        load_trace(trace)


def test_parse_rates_and_lengths():
    assert parse_rates("1..32") == [1, 2, 4, 8, 16, 32]
    assert parse_rates("1..10") == [1, 2, 4, 8, 10]
    assert parse_rates("0.5,2") == [0.5, 2]
    rng = np.random.default_rng(0)
    assert (LengthDistribution.parse("uniform:5:9", "x").sample(rng, 1000) >= 5).all()
    lognormal = LengthDistribution.parse("lognormal:200:0.5:1000", "x").sample(rng, 20000)
    assert np.median(lognormal) == pytest.approx(200, rel=0.05) and lognormal.max() <= 1000


def test_crossover_is_the_first_rate_after_the_last_that_pays():
    def row(policy, rate, latency, tput):
        return {"policy": policy, "rate_per_s": rate, "mean_batch": rate, "latency_s": {"p50": latency},
                "output_tokens_per_s": tput}
    rows = [row("off", 1, 2.0, 100), row("off", 2, 2.0, 200), row("off", 4, 2.0, 400), row("off", 8, 2.0, 800),
            row("k", 1, 1.0, 100), row("k", 2, 3.0, 200), row("k", 4, 1.5, 400), row("k", 8, 2.5, 700)]
    [c] = get_crossovers(rows)
    assert c["latency"]["rate_per_s"] == 8 and c["throughput"]["rate_per_s"] == 8
    assert get_crossovers(rows[4:]) == []


def _latency_rows(off_p50, spec_p50, rates=(1, 2, 4, 8)):
    def row(policy, rate, latency):
        return {"policy": policy, "rate_per_s": rate, "mean_batch": 10 * rate, "latency_s": {"p50": latency},
                "output_tokens_per_s": 100.0 * rate}
    return [row("off", r, o) for r, o in zip(rates, off_p50)] + [row("k", r, s) for r, s in zip(rates, spec_p50)]


def test_latency_range_reads_the_speedup_at_either_end_of_the_band_by_hand():
    from rooflinesim.pricing.speedup_band import SpeedupBand

    band = SpeedupBand(-0.2, 0.2, 50, True, "a band")
    # latency speedups (off p50 / spec p50): 2.0, 1.25, 1.1, 0.9 at 1, 2, 4, 8 req/s
    rows = _latency_rows([2.0, 2.5, 2.2, 1.8], [1.0, 2.0, 2.0, 2.0])
    [c] = get_crossovers(rows, band=band)
    assert c["latency"] == {"rate_per_s": 8, "mean_batch": 80}  # the point: 0.9 < 1 first at 8
    rng = c["latency_range"]
    # low end (speedup - 0.2 > 1): 1.8, 1.05, 0.9, 0.7 -> stops from 4; high end (+ 0.2): 1.1 at 8 still pays
    assert rng["earliest"] == {"rate_per_s": 4, "mean_batch": 40} and rng["latest"] is None
    assert rng["error_x"] == 0.2 and rng["band_source"] == "a band"
    # a wider band: the low end never pays (stops from the lowest rate); a narrow one: both ends meet the point
    [wide] = get_crossovers(rows, band=SpeedupBand(-1.5, 1.5, 50, True, "wide"))
    assert wide["latency_range"]["earliest"]["rate_per_s"] == 1 and wide["latency_range"]["latest"] is None
    [narrow] = get_crossovers(rows, band=SpeedupBand(-0.05, 0.05, 50, True, "narrow"))
    assert narrow["latency_range"]["earliest"] == narrow["latency_range"]["latest"] == c["latency"]
    # no band (a measured profile) or another baseline: no range
    assert "latency_range" not in get_crossovers(rows)[0]
    assert "latency_range" not in get_crossovers(rows, baseline="k", band=band)[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.3, 3.0), min_size=2, max_size=6), st.floats(0.0, 1.0))
@example(speedups=[1.0, 1.0], h=0.0)  # a tie at 1.0x: CI found the range (>= 1) and the point (> 1) disagreeing
def test_latency_range_brackets_the_point_crossover(speedups, h):
    from rooflinesim.pricing.speedup_band import SpeedupBand

    rates = [2 ** i for i in range(len(speedups))]
    rows = _latency_rows([1.0] * len(speedups), [1.0 / s for s in speedups], rates)
    [c] = get_crossovers(rows, band=SpeedupBand(-h, h, 50, True, "b"))
    beyond = 2 ** len(speedups)  # None: pays at every load, i.e. the crossover lies beyond the last
    at = {key: (beyond if v is None else v["rate_per_s"]) for key, v in
          (("point", c["latency"]), ("earliest", c["latency_range"]["earliest"]),
           ("latest", c["latency_range"]["latest"]))}
    assert at["earliest"] <= at["point"] <= at["latest"]


def test_serve_prints_and_emits_the_latency_range_on_a_datasheet_only(capsys, tmp_path):
    args = ("serve", *SMALL, "--rate", "1,16,256", "--policy", "off,fixed:4")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "within the published error (+-0.17x)" in out and "latency range: engine vllm-v1's published error" in out
    code, out, _ = run_cli(capsys, *args, "--json")
    [c] = json.loads(out)["crossovers"]
    assert c["latency_range"]["error_x"] == pytest.approx(0.17, abs=0.005)
    assert "vllm-v1" in c["latency_range"]["band_source"]


# --- engine configs ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scenario():
    return build_scenario("h100", "llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k_values=[0])


def test_k_by_batch_is_the_argmax_of_e_over_step_time(scenario):
    table = get_k_by_batch(scenario, 64, 2048, 6)
    rate = table["expected_tokens"][None, :] / table["step_time_s"]
    assert (rate[np.arange(64), table["best_k"]] >= rate.max(axis=1) - 1e-12).all()
    assert table["best_k"][0] > 0


def test_vllm_config_follows_the_dynamic_sd_schedule_rules(scenario):
    """Issue 24 changed this test on purpose: vLLM's merged Dynamic SD (PR #32374) takes
    num_speculative_tokens_per_batch_size ranges, not the dynamic_config / batch_stats of the PR's draft; the text is
    a full launch line (tests/test_engine_configs.py parses it)."""
    from engine_config_parsing import vllm_speculative_config

    config = vllm_speculative_config(emit_engine_config(scenario, "vllm", ServeConfig(max_num_seqs=48), 2048, 5))
    ranges = config["num_speculative_tokens_per_batch_size"]
    assert ranges[0][0] == 1 and ranges[-1][1] == 48
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, inclusive
    assert max(k for _, _, k in ranges) == config["num_speculative_tokens"] <= 5
    table = get_k_by_batch(scenario, 48, 2048, 5)
    for first, last, k in ranges:  # each range is the argmax E(k) / step time of its batches
        assert set(table["best_k"][first - 1:last].tolist()) == {k}


def test_trtllm_schedule_keys_are_the_last_batch_of_each_k(scenario):
    """TensorRT-LLM reads draft_len_schedule {4: 4, 8: 2} as batches 1-4 draft 4, 5-8 draft 2, above 8 none
    (tensorrt_llm/llmapi/llm_args.py, PR #10860); issue 24 changed this test on purpose (keys were 'from')."""
    from engine_config_parsing import trtllm_speculative_config

    text = emit_engine_config(scenario, "trtllm", ServeConfig(max_num_seqs=256), 8192, 8)
    config = trtllm_speculative_config(text)
    schedule = config["draft_len_schedule"]
    table = get_k_by_batch(scenario, max(schedule), 8192, 8)
    previous = 0
    for last, k in schedule.items():
        assert set(table["best_k"][previous:last].tolist()) == {k}
        previous = last
    assert max(schedule.values()) == config["max_draft_len"] > 0


def test_sglang_config_is_a_chain_of_steps(scenario):
    text = emit_engine_config(scenario, "sglang", ServeConfig(), 2048)
    assert "--speculative-eagle-topk 1" in text
    steps = int(text.split("--speculative-num-steps ")[1].split()[0])
    assert f"--speculative-num-draft-tokens {steps + 1}" in text


def test_emit_config_cli(capsys):
    from engine_config_parsing import vllm_speculative_config

    code, out, err = run_cli(capsys, "serve", "--hw", "h100", "--model", "llama-3.1-8b", "--draft", "llama-3.2-1b",
                             "--emit-config", "vllm", "--max-num-seqs", "32")
    assert code == 0 and vllm_speculative_config(out)["num_speculative_tokens_per_batch_size"]
    assert out.startswith("# rooflinesim") and "--rate" in err
