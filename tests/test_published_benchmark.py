"""The published-measurement table loads, every row names a real source and a known metric, and every row is
priced by the uncalibrated defaults (the accuracy goal itself is reported by the benchmark, not asserted here)."""

import math

import pytest

from tests.benchmark_scripts import load_script

METRICS = {"decode_tokens_per_s", "ttft_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "request_latency_s"}


def _bench():
    return load_script("benchmarks/bench_published.py")


def test_table_has_enough_sourced_rows():
    rows = _bench().load_rows()
    assert len(rows) >= 30
    assert len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        assert row["metric"] in METRICS, row["id"]
        assert row["measured"] > 0 and row["source"] and ("@" in row["source"] or "pull/" in row["source"]), row["id"]
        for key in ("engine", "hardware", "model", "weight_dtype", "tp", "batch", "prompt_tokens", "output_tokens"):
            assert key in row, (row["id"], key)
    assert any(r.get("fitted_on") for r in rows) and any(not r.get("fitted_on") for r in rows)


def test_every_row_is_priced_and_the_summary_prints(capsys):
    bench = _bench()
    rows = bench.load_rows()
    errors = [bench.relative_error(r, bench.predict_row(r)) for r in rows]
    assert all(math.isfinite(e) and e > -1 for e in errors)
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    assert "held-out rows:" in out and "median" in out


def test_prediction_of_a_row_by_hand():
    """A decode row is batch / decode step at the mid-generation context: the same number predict gives, under the
    engine profile of the engine that ran the row (gpt-fast here)."""
    import rooflinesim

    bench = _bench()
    row = next(r for r in bench.load_rows() if r["id"] == "gptfast-a100-llama-3.1-8b-tp8")
    assert bench.get_row_engine(row) == "gpt-fast"
    step = rooflinesim.predict(hw="a100", model="llama-3.1-8b", batch=1, ctx=5 + 100, tp=8, engine="gpt-fast",
                               speculative=False).decode.step_time_s
    assert bench.predict_row(row) == pytest.approx(1 / step)


def test_every_row_fits_the_device_it_ran_on():
    """Each row's batch at its final context fits the whole device memory (static-batch engines preallocate exactly
    that; vLLM's 0.9 utilisation and 3 GiB reserve are a serving default, and 5 TensorRT-LLM rows exceed it)."""
    from rooflinesim.pricing.predict import predict_scenario
    from rooflinesim.scenario.builder import build_scenario

    bench = _bench()
    for row in bench.load_rows():
        final_context = row["prompt_tokens"] + row["output_tokens"]
        scenario = build_scenario(row["hardware"], row["model"], row["batch"], final_context,
                                  weight_dtype=row["weight_dtype"], kv_dtype=row.get("kv_dtype"), tp=row["tp"],
                                  quant_group_size=row.get("quant_group_size", 128), speculative=False,
                                  allow_long_context=True, gpu_memory_utilization=1.0, memory_reserve_bytes=0)
        assert predict_scenario(scenario).memory["fits_in_memory"], row["id"]
