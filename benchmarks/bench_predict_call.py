"""Where does one in-process `rooflinesim.predict()` call spend its time? Prints figures, asserts nothing.

For a few deployments with the specs already loaded (HardwareSpec / ModelSpec objects passed in, as a script that
loops over thousands of deployments holds them), prints per deployment:

* the median, p10 and p90 wall time of one `rooflinesim.predict(hw, model, batch, ctx, **options)` call (goal: a
  median <= 0.5 ms);
* the same call split into `build_scenario`, `predict_scenario` and `Prediction.to_dict()` (medians);
* with `--profile`, the cProfile top 15 (by cumulative time) over repeated calls of that deployment.

A benchmark, not a test: run `python benchmarks/bench_predict_call.py` and name the machine next to the figures (on
a shared machine the wall clock includes waiting for a core).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from pathlib import Path

import rooflinesim
from rooflinesim.pricing.predict import predict_scenario
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.registry import load_hardware, load_model

#: a measured profile (the test suite's frozen copy), passed by path as `--calibration` is
PROFILE = Path(__file__).resolve().parents[1] / "tests" / "data" / "profiles" / "cpu-amd-epyc-2c.yaml"

#: (label, hardware, model, batch, context, options)
DEPLOYMENTS = [
    ("h100 llama-3.1-8b b8 4k, no speculation", "h100", "llama-3.1-8b", 8, 4096, dict(speculative=False)),
    ("h100 llama-3.1-8b b8 4k, default draft", "h100", "llama-3.1-8b", 8, 4096, {}),
    ("h100 llama-3.1-8b b8 4k, eagle head, k 4", "h100", "llama-3.1-8b", 8, 4096, dict(drafter="eagle", k=4)),
    ("h100 llama-3.1-70b b16 8k tp4, no speculation", "h100", "llama-3.1-70b", 16, 8192,
     dict(tp=4, speculative=False)),
    ("h100 llama-3.1-70b b16 8k tp4, default draft", "h100", "llama-3.1-70b", 16, 8192, dict(tp=4)),
    ("h100 mixtral-8x7b b8 4k tp2, no speculation", "h100", "mixtral-8x7b", 8, 4096, dict(tp=2, speculative=False)),
    ("cpu + measured profile, tiny-llama-123m b1 512, no speculation", "cpu", "tiny-llama-123m", 1, 512,
     dict(calibration=str(PROFILE), speculative=False)),
    ("cpu + measured profile, tiny-llama-123m b1 512, draft tiny-draft-2l", "cpu", "tiny-llama-123m", 1, 512,
     dict(calibration=str(PROFILE), draft="tiny-draft-2l")),
]


def _percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    pick = lambda p: ordered[min(len(ordered) - 1, int(p * len(ordered)))]  # noqa: E731
    return statistics.median(ordered), pick(0.1), pick(0.9)


def time_calls(call, calls: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each call (on a shared machine the CPU time is the steadier figure)."""
    call()  # warm every cache once
    wall, cpu = [], []
    for _ in range(calls):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def breakdown(hw, model, batch, ctx, options, calls: int) -> dict[str, float]:
    """Median seconds of each stage of one call."""
    stages = {"build_scenario": [], "predict_scenario": [], "to_dict": []}
    for _ in range(calls):
        t0 = time.perf_counter()
        scenario = build_scenario(hw, model, batch, ctx, **options)
        t1 = time.perf_counter()
        prediction = predict_scenario(scenario)
        t2 = time.perf_counter()
        prediction.to_dict()
        t3 = time.perf_counter()
        for name, dt in zip(stages, (t1 - t0, t2 - t1, t3 - t2)):
            stages[name].append(dt)
    return {name: statistics.median(samples) for name, samples in stages.items()}


def profile(hw, model, batch, ctx, options, calls: int, top: int = 15) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        rooflinesim.predict(hw, model, batch, ctx, **options).to_dict()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per deployment (default 200)")
    parser.add_argument("--profile", action="store_true", help="print the cProfile top 15 of each deployment")
    parser.add_argument("--only", type=int, default=None, help="only the deployment with this index")
    args = parser.parse_args()
    specs = {}
    for index, (label, hw, model, batch, ctx, options) in enumerate(DEPLOYMENTS):
        if args.only is not None and index != args.only:
            continue
        hw_spec = specs.setdefault(hw, load_hardware(hw))
        model_spec = specs.setdefault(model, load_model(model))
        wall, cpu = time_calls(lambda: rooflinesim.predict(hw_spec, model_spec, batch, ctx, **options), args.calls)
        median, p10, p90 = _percentiles(wall)
        stages = breakdown(hw_spec, model_spec, batch, ctx, options, max(args.calls // 2, 1))
        print(f"[{index}] {label}: predict() median {median * 1e3:.3f} ms wall (p10 {p10 * 1e3:.3f}, p90 "
              f"{p90 * 1e3:.3f}), {statistics.median(cpu) * 1e3:.3f} ms CPU, over {len(wall)} calls; "
              + ", ".join(f"{name} {t * 1e3:.3f} ms" for name, t in stages.items()))
        if args.profile:
            print(profile(hw_spec, model_spec, batch, ctx, options, max(args.calls // 4, 1)))


if __name__ == "__main__":
    main()
