"""Our step prices against SpecDecode-Bench's own measured step-time model (vLLM V1, Llama-3.1-8B, one H100).

The authors of SpecDecode-Bench fitted a linear step-time model on their own measured steps and priced their simulator
with it (`benchmarks/published/specdecode-bench-time-model.yaml`). This script prices their 8B EAGLE and EAGLE-3 rows
twice through the same copies-run arithmetic (`rooflinesim/pricing/batch_run.py`): once with our `vllm-v1` steps, once
with their model, each with its own acceptance (EAGLE-1: fitted on the series' batch-1 row under that time model;
EAGLE-3: from the traces, as bench_under_load.py does). It prints the step times side by side and the speedups against
the measured ones. Where both time models miss a row alike, the miss is not in the step prices.

    python benchmarks/bench_sdb_time_model.py
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from pathlib import Path

import yaml

from rooflinesim.pricing.batch_run import RunPoint, get_copies_run_speedup, get_run_point
from rooflinesim.pricing.predict import predict_scenario

HERE = Path(__file__).resolve().parent
TIME_MODEL = HERE / "published" / "specdecode-bench-time-model.yaml"
STEP_POINTS = [(b, ctx) for b in (1, 16, 64, 128) for ctx in (256, 1024)]


def _bench_under_load():
    spec = importlib.util.spec_from_file_location("bench_under_load", HERE / "bench_under_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_time_model(path: Path = TIME_MODEL) -> dict:
    return yaml.safe_load(path.read_text())


def _expected_tokens(alpha: float, k: int) -> float:
    return sum(alpha ** i for i in range(k + 1))


def get_source_run_point(model: dict, batch: int, context: int, alpha: float, k: int) -> RunPoint:
    """A steady step of `batch` sequences at `context` tokens priced by the source's model as its simulator combines
    the terms (simulator.py simulate_org_batch / simulate_sd_batch), and the prefill of `batch` prompts of `context`."""
    def forward(kv_tokens: float, tokens: float) -> float:
        return (kv_tokens * model["target_s_per_kv_token"] + tokens * model["target_s_per_token"]
                + model["target_fixed_s"])

    kv = batch * context
    overhead = model["overhead_per_step_s"]
    draft = kv * model["draft_s_per_kv_token"] + (k + 1) * model["draft_s_per_spec_token"] + model["draft_fixed_s"]
    return RunPoint(decode_step_s=forward(kv, batch) + overhead,
                    speculative_step_s=forward(kv, batch * (k + 1)) + draft + overhead,
                    tokens_per_step=_expected_tokens(alpha, k), prefill_s=forward(0, kv))


def get_rows(bench) -> list[dict]:
    """SpecDecode-Bench's Llama-3.1-8B vLLM rows with an EAGLE or EAGLE-3 chain: the deployment the model was fitted on."""
    return [r for r in bench.load_rows(bench.SPEC_TABLE)
            if r.get("source_id") == "specdecode-bench" and r["model"] == "llama-3.1-8b" and r["engine"] == "vllm-v1"
            and r.get("drafting") == "chain" and r.get("drafter") in ("eagle", "eagle3")]


def get_source_speedup(bench, model: dict, row: dict, alpha: float, batch: int) -> float:
    lengths = bench._run_lengths()[row["dataset"]]
    return get_copies_run_speedup(lengths, lambda ctx: get_source_run_point(model, batch, ctx, alpha, row["k"]))


def fit_source_alpha(bench, model: dict, row: dict, steps: int = 30) -> float:
    lo, hi = 0.02, 0.98
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if get_source_speedup(bench, model, row, mid, row["batch"]) < row["measured"] else (lo, mid)
    return 0.5 * (lo + hi)


def compare_speedups(bench=None, model: dict | None = None, datasets=None) -> list[dict]:
    """One dict per row (of `datasets`, default all): measured, ours and the source model's speedup, and whether the
    row is held out."""
    bench = bench or _bench_under_load()
    model = model or load_time_model()
    rows = [r for r in get_rows(bench) if datasets is None or r["dataset"] in datasets]
    wanted = {r["series"] for r in rows}
    ours_alpha = bench.series_alphas([r for r in bench.load_rows(bench.SPEC_TABLE) if r["series"] in wanted])
    results = []
    for series in sorted({r["series"] for r in rows}):
        members = sorted((r for r in rows if r["series"] == series), key=lambda r: r["batch"])
        fitted = [r for r in members if "acceptance" in r.get("fitted_on", [])]
        source_alpha = fit_source_alpha(bench, model, fitted[0]) if fitted else ours_alpha[series]
        for row in members:
            results.append(dict(id=row["id"], batch=row["batch"], measured=row["measured"], held_out=row not in fitted,
                                ours=bench.predict_speedup(row, ours_alpha[series]),
                                source=get_source_speedup(bench, model, row, source_alpha, row["batch"])))
    return results


def compare_steps(bench=None, model: dict | None = None, alpha: float = 0.7, k: int = 3) -> list[dict]:
    """Decode, speculative (EAGLE chain of k) and prefill step times of ours and of the source's model."""
    bench = bench or _bench_under_load()
    model = model or load_time_model()
    row = next(r for r in get_rows(bench) if r.get("drafter") == "eagle")
    out = []
    for batch, ctx in STEP_POINTS:
        scenario, _ = bench._build(row, ctx, batch, **dict(bench._spec_extra(row, alpha), k=k))
        ours = get_run_point(predict_scenario(scenario))
        out.append(dict(batch=batch, context=ctx, ours=ours, source=get_source_run_point(model, batch, ctx, alpha, k)))
    return out


def main() -> int:
    bench = _bench_under_load()
    model = load_time_model()
    print(f"machine: {platform.machine()}, Python {platform.python_version()}; deterministic (no timing)")
    print(f"source model: {model['source']}")
    print("\nstep times (ms), vllm-v1 on h100, Llama-3.1-8B, EAGLE chain of 3: ours / source (ours vs source)")
    for p in compare_steps(bench, model):
        o, s = p["ours"], p["source"]
        cells = [f"{name} {1e3 * a:7.2f} / {1e3 * b:7.2f} ({100 * (a / b - 1):+4.0f} %)" for name, a, b in (
            ("decode", o.decode_step_s, s.decode_step_s), ("speculative", o.speculative_step_s, s.speculative_step_s),
            ("prefill", o.prefill_s, s.prefill_s))]
        print(f"  b{p['batch']:<4d} ctx {p['context']:<5d} " + "  ".join(cells))
    print("\nspeedup, measured vs predicted (copies runs as the source timed them):")
    print(f"  {'row':58s} {'measured':>8s} {'ours':>7s} {'source':>7s} {'ours-src':>8s}")
    worst = 0.0
    for r in compare_speedups(bench, model):
        tag = "" if r["held_out"] else "  (fit)"
        print(f"  {r['id']:58s} {r['measured']:8.3f} {r['ours'] - r['measured']:+7.3f} "
              f"{r['source'] - r['measured']:+7.3f} {r['ours'] - r['source']:+8.3f}{tag}")
        if r["held_out"]:
            worst = max(worst, abs(r["ours"] - r["source"]))
    print(f"\nlargest |ours - source| over held-out rows: {worst:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
