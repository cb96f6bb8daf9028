"""benchmarks/bench_gemm_table.py: one linear op priced by the datasheet against a published single-GEMM table."""

from __future__ import annotations

import pytest

from tests.benchmark_scripts import load_script


def _bench():
    return load_script("benchmarks/bench_gemm_table.py")


def test_table_is_complete_and_sourced():
    table = _bench().load_table()
    assert "@b50f651" in table["source"] and table["hardware"] == "a100-sxm-40gb"
    for shape, latencies in table["latency_us"].items():
        k, n = (int(x) for x in shape.split("x"))
        assert len(latencies) == len(table["m"]) and all(t > 0 for t in latencies)
        assert k * n * 2 >= 32e6  # the rows copied: fp16 weights of at least 32 MB


def test_one_row_priced_by_hand():
    bench = _bench()
    [row] = [r for r in bench.get_rows(bench.load_table()) if (r["k"], r["n"], r["m"]) == (8192, 131072, 8)]
    # A100 40GB: 312 TFLOP/s fp16 x 0.80, 1555 GB/s x 0.85, overlap 0.17, 4 us per kernel
    compute = 2 * 8 * 8192 * 131072 / (312e12 * 0.80)
    memory = (8192 * 131072 + 8 * 8192 + 8 * 131072) * 2 / (1.555e12 * 0.85)
    assert row["predicted_s"] == pytest.approx(compute + memory - 0.17 * compute + 4e-6, rel=1e-9)
    assert row["measured_s"] == pytest.approx(1520.927e-6)
    # the implied overlap gives back the measurement
    implied = bench.get_implied_overlap(row)
    assert compute + memory - implied * min(compute, memory) + 4e-6 == pytest.approx(row["measured_s"], rel=1e-9)


def test_summary_has_one_line_per_m():
    bench = _bench()
    table = bench.load_table()
    summary = bench.summarize(bench.get_rows(table), 0.17)
    assert [s["m"] for s in summary] == table["m"]
    assert all(s["ratio_min"] <= s["ratio_median"] <= s["ratio_max"] for s in summary)
