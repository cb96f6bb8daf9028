"""Calibration pieces on the torch side that need no measurement: hold-out shapes, the CUDA refusal, the decoder's KV
rollback, the benchmark plan, the loop pricing and the combined validation report. The fits, profile files and
the measured timing model are test_calibrate_fit, test_profile_files and test_measured_timing; the CPU smoke test
is test_calibrate_smoke."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rooflinesim.step import get_step_cost
from rooflinesim.specs.workload import Workload

from .synthetic_profiles import make_profile, with_cache

ROOT = Path(__file__).resolve().parent.parent


def test_combined_report_leads_with_bf16_and_keeps_every_dtype():
    pytest.importorskip("torch")
    from rooflinesim.calibrate.validators.validate import combine_reports

    reports = [{"dtype": "fp32", "configs": [1]}, {"dtype": "bf16", "configs": [2]}]
    combined = combine_reports(reports)
    assert combined["dtype"] == "bf16" and combined["configs"] == [2]
    assert set(combined["by_dtype"]) == {"fp32", "bf16"} and combined["by_dtype"]["fp32"]["configs"] == [1]


# --- torch-side pieces that need no measurement -------------------------------------------------------------------------


def test_calibration_shapes_exclude_the_hold_out_models():
    from rooflinesim.calibrate.fitting.plan import LINEAR_SHAPES, QUICK_LINEAR_SHAPES, check_hold_out

    check_hold_out(LINEAR_SHAPES)
    check_hold_out(QUICK_LINEAR_SHAPES)
    with pytest.raises(AssertionError):
        check_hold_out(LINEAR_SHAPES + ((1024, 1024),))


def test_cuda_request_without_cuda_is_one_line_exit_2():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    commands = {"calibrate": ["calibrate", "--device", "cuda"],
                "validate": ["validate", "--device", "cuda", "--profile", "x.yaml"]}
    for cmd, argv in commands.items():
        out = subprocess.run([sys.executable, "-m", "rooflinesim.cli", *argv], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 2, (cmd, out.stderr)
        assert out.stderr.count("\n") == 1 and ("cuda" in out.stderr.lower() or "not found" in out.stderr)


def test_decoder_kv_cache_rollback_matches_a_fresh_run():
    """The validation decoder: writing rejected tokens and moving the length back equals never writing them."""
    torch = pytest.importorskip("torch")
    from rooflinesim.calibrate.reference.model import build_decoder
    from rooflinesim.calibrate.fitting.plan import synthetic_spec

    spec = synthetic_spec("t", 64, 4, 2, 128, layers=2, vocab=100)
    model = build_decoder(spec, torch.float32)
    model.setup_caches(2, 32)
    prompt = torch.randint(0, 100, (2, 6))
    with torch.inference_mode():
        model(prompt, torch.zeros(2, dtype=torch.long), 6)
        model(torch.randint(0, 100, (2, 3)), torch.full((2,), 6), 9)  # 3 tokens later rejected
        nxt = torch.randint(0, 100, (2, 1))
        rolled = model(nxt, torch.full((2,), 6), 7)
        fresh = build_decoder(spec, torch.float32)
        fresh.setup_caches(2, 32)
        fresh(prompt, torch.zeros(2, dtype=torch.long), 6)
        expected = fresh(nxt, torch.full((2,), 6), 7)
    torch.testing.assert_close(rolled, expected)


def test_calibration_builds_each_decoder_once_per_build_and_times_every_token_configuration(monkeypatch):
    """The decoder jobs of one build share one built decoder (`BenchContext.decoder`), each timing its own batch; a
    mid-size decoder is built `Plan.decoder_builds` times, and each build's memory goes after its last job."""
    pytest.importorskip("torch")
    from rooflinesim.calibrate.measure.benchmarks import BenchContext
    from rooflinesim.calibrate.measure.benchmarks.decoder import decoder_jobs
    from rooflinesim.calibrate.fitting.plan import Plan, StepTokens
    from rooflinesim.calibrate.measure.timers import Timer, select_device
    from rooflinesim.calibrate.reference import model as M

    from dataclasses import replace

    built = []
    real_build = M.build_decoder
    monkeypatch.setattr(M, "build_decoder", lambda spec, *a, **k: (built.append(spec.name), real_build(spec, *a, **k))[1])
    device = select_device("cpu")  # the thread count torch already uses
    plan = replace(Plan.make(True, ("fp32",), device, tiny=True), block_models=("block-384",),
                   block_tokens=(StepTokens(1, 1), StepTokens(2, 1)), decoder_builds=2, min_calls=1)
    ctx = BenchContext(device, "fp32", plan, Timer(device))
    assert ctx.decoder("overhead-2l") is ctx.decoder("overhead-2l")
    assert ctx.decoder("block-384", 0) is not ctx.decoder("block-384", 1)
    ctx._decoders.clear()
    built.clear()
    jobs = decoder_jobs(ctx)
    assert [job.key.build for job in jobs if job.key.name == "block-384"] == [0, 0, 1, 1]
    timings = [job.run() for job in jobs]
    assert len(timings) == 8 and all(t.estimate_s > 0 for t in timings)
    # two token configurations each: one build of each tiny decoder, two of the mid-size one
    assert sorted(built) == sorted(["overhead-2l", "overhead-8l", "block-384", "block-384"])
    assert ctx._decoders == {}  # every build released after its last configuration


def test_decoder_rows_are_the_median_of_their_builds():
    """The decoder fit reads each configuration once: the median over its builds of each build's estimate."""
    from rooflinesim.calibrate.fitting.measurements import DecoderKey, Results, Timing

    results = Results()
    for build, ms in enumerate((10.3, 11.5, 11.9)):
        results.add(DecoderKey("block-1536", 1, 1, build), Timing((ms * 1e-3,) * 3))
    results.add(DecoderKey("overhead-2l", 1, 1), Timing((4e-4, 5e-4, 4e-4)))
    rows = results.get_decoder_rows()
    assert rows == pytest.approx({DecoderKey("block-1536", 1, 1): 11.5e-3, DecoderKey("overhead-2l", 1, 1): 4e-4})


def test_speculative_loop_prices_the_first_draft_step_cold_and_the_rest_warm():
    """In the loop the target's verify runs between the last and the first draft step: that one streams the draft
    from memory (both models' weights count), the following k - 1 reuse the cached draft."""
    from rooflinesim.scenario.builder import build_scenario
    from rooflinesim.pricing.speculative import get_draft_step_time_s, price_speculation

    hw = with_cache(make_profile(), (1e7, 1e8, 1e9), (2.0, 1.5, 1.0))
    scenario = build_scenario(hw, "tiny-llama-123m", 1, 1024, weight_dtype="fp32", draft="tiny-draft-2l")
    timing = scenario.timing
    grid = price_speculation(scenario, 1, 1024, np.array([1, 4]), 0.8)
    target = scenario.model
    target_bytes = float(get_step_cost(hw, target, Workload.in_dtype("fp32", 1, 1024), 1, timing=timing).weight_bytes)
    warm = float(get_draft_step_time_s(scenario, timing, 1, 1024))
    cold = float(get_draft_step_time_s(scenario, timing.with_co_resident(target_bytes), 1, 1024))
    assert cold > 1.2 * warm
    assert grid.draft_cold_step_time_s == pytest.approx(cold) and grid.draft_warm_step_time_s == pytest.approx(warm)
    assert grid.draft_step_time_s == pytest.approx([cold, (cold + 3 * warm) / 4])
    # what the step time sums is what is reported: k x mean draft step + verify
    assert grid.step_time_s == pytest.approx(np.array([1, 4]) * grid.draft_step_time_s + grid.verify_step_time_s,
                                             rel=1e-12)


def test_cache_reuse_points_time_whole_passes_over_their_working_set(monkeypatch):
    """Regression: where a working set half fits in a cache, some GEMVs of a pass hit and others miss, and the faster
    half of single calls took the hits (256 MiB read 44-47 GB/s by single calls, 34-36 GB/s over whole passes,
    2-core Intel Xeon VM). A point is now timed as whole passes and reported per GEMV: the mean a step pays."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from rooflinesim.calibrate.fitting.measurements import Timing
    from rooflinesim.calibrate.fitting.plan import get_cache_passes
    from rooflinesim.calibrate.measure.benchmarks import cache as C

    costs, calls = [], []

    def fake_linear(x, w):  # every other weight hits: 1 ms, the others miss: 3 ms
        calls.append(w)
        costs.append(1e-3 if len(calls) % 2 else 3e-3)

    class FakeTimer:
        def time(self, fn, min_calls, **kwargs):
            samples = []
            for _ in range(min_calls):
                costs.clear()
                fn()
                samples.append(sum(costs))
            return Timing(tuple(samples))

    monkeypatch.setattr(C.F, "linear", fake_linear)
    weights = [object() for _ in range(4)]
    ctx = SimpleNamespace(rotating_weights=lambda k, n, size: weights, torch_device=torch.device("cpu"),
                          torch_dtype=torch.float32, timer=FakeTimer(), plan=SimpleNamespace(min_time_s=0.0))
    timing = C._cache_runner(ctx, 4 * 16 * 2**20)()
    assert timing.estimate_s == pytest.approx(2e-3)  # single calls: 1e-3, the hits
    assert len(timing.samples) == get_cache_passes(4) == 3
    assert len(calls) == 4 * (1 + 3)  # one untimed pass, then the timed ones, each over every weight
    assert get_cache_passes(1) == 10 and get_cache_passes(32) == 3


def test_only_the_tiny_decoders_shapes_rotate_over_fewer_views_than_the_whole_pool():
    """The generic shapes' points rotate over the whole cold pool (a cap of 4096 views would leave a 384 x 96 bf16
    weight a 300 MB working set, under a 480 MiB L3); the tiny decoders' 8-32 KB weights over at most 4096."""
    import itertools

    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from rooflinesim.calibrate.fitting.plan import OVERHEAD_LINEAR_SHAPES
    from rooflinesim.calibrate.measure.benchmarks import linear as L

    asked = []

    def rotating_weights(k, n, working_set_bytes=None):
        asked.append(working_set_bytes)
        return [torch.zeros(n, k)]

    ctx = SimpleNamespace(rotating_weights=rotating_weights, bytes=2, torch_device=torch.device("cpu"),
                          torch_dtype=torch.float32, plan=SimpleNamespace(overhead_shapes=OVERHEAD_LINEAR_SHAPES),
                          time=lambda fn: (fn(), "timed")[1], cold_rotation=itertools.cycle)
    assert L._linear_runner(ctx, 384, 96, 1)() == "timed" and asked[-1] is None
    assert L._linear_runner(ctx, 64, 64, 1)() == "timed" and asked[-1] == L.MAX_OVERHEAD_SHAPE_COPIES * 64 * 64 * 2


def test_each_cold_point_reads_the_pool_where_the_last_one_stopped():
    """Every cold-weight point used to start at the pool's first view, which the points before it had just read: with
    three calls a point (--quick) on a VM whose caches held 128 MiB at 1.2x the cold rate, the quick tables priced the
    shapes they share with a full run 21-27 % faster (median), the in-model scale rose to 1.25-1.31 to make up for it,
    and the cold rotation took the ratio to 0.98-1.02 (2-core Intel Xeon VM, fp32, 2026-12-03)."""
    torch = pytest.importorskip("torch")
    from dataclasses import replace

    from rooflinesim.calibrate.fitting.plan import Plan
    from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
    from rooflinesim.calibrate.measure.timers import Timer, select_device

    device = select_device("cpu")
    plan = replace(Plan.make(True, ("fp32",), device, tiny=True), rotate_bytes=4 * 2**20)
    ctx = BenchContext(device, "fp32", plan, Timer(device))
    base = ctx.pool().data_ptr()

    def offsets(k, n, calls):  # elements into the pool of the views read, in order
        it = ctx.cold_rotation(ctx.rotating_weights(k, n))
        return [(next(it).data_ptr() - base) // 4 for _ in range(calls)]

    first = offsets(256, 256, 3)  # 65,536 elements a view, 16 views
    assert first == [0, 65536, 131072]
    # the next point, of another shape, starts at its first view at or after where the first stopped
    second = offsets(512, 256, 2)  # 131,072 elements a view, 8 views
    assert second == [2 * 131072, 3 * 131072]  # 196,608 rounds up to view 2
    # a point that wraps around the pool goes back to its start
    third = offsets(512, 512, 3)  # 262,144 elements a view, 4 views: 524,288 is view 2
    assert third == [524288, 786432, 0]


@pytest.mark.parametrize("flags, expected", [("fpu avx2 avx512f avx512_bf16", ("fp32", "bf16")),
                                             ("fpu avx2 amx_bf16 amx_tile", ("fp32", "bf16")),
                                             ("fpu avx2 fma", ("fp32",))])
def test_calibrate_measures_bf16_by_default_only_where_the_cpu_computes_it(tmp_path, monkeypatch, flags, expected):
    """Without bf16 dot products torch converts (2-core Zen 3: 17 against 83 GFLOP/s for fp32): the default is fp32
    there, and `calibrate` passes the default to the run; --dtype still asks for any."""
    pytest.importorskip("torch")
    from rooflinesim.calibrate.measure import bench, timers
    from rooflinesim.cli import main
    from rooflinesim.specs import profiles

    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n")
    assert profiles.host_cpu_has_bf16(info) == ("bf16" in expected)
    monkeypatch.setattr(timers, "host_cpu_has_bf16", lambda: profiles.host_cpu_has_bf16(info))
    assert timers.get_default_calibration_dtypes(timers.select_device("cpu")) == expected

    asked = []

    def fake_run(device, dtypes, *args, **kwargs):
        asked.append(tuple(dtypes))
        raise SystemExit(0)  # stop before anything is measured or written

    monkeypatch.setattr(bench, "run_calibration", fake_run)
    for argv, want in ((["calibrate", "--quick", "--out", str(tmp_path / "p.yaml")], expected),
                       (["calibrate", "--quick", "--dtype", "bf16", "--out", str(tmp_path / "p.yaml")], ("bf16",))):
        with pytest.raises(SystemExit):
            main(argv)
        assert asked.pop() == want
