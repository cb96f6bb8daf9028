"""Uncalibrated predictions against published measurements: prints predicted vs measured per row and the median /
p90 absolute error of the shipped defaults, for the rows the defaults were fitted on and the held-out rows apart.

    python benchmarks/bench_published.py            # the table and the error summary
    python benchmarks/bench_published.py --fit      # refit the fitted constants, each on the rows tagged for it

The table is `benchmarks/published/measurements.yaml` (every row names its public source). Each row is priced
through `build_scenario` exactly as the CLI would, with the row's hardware, model, dtypes, TP, quantised kernel and
attention kernel (`attention: per-head` where the engine's decode kernel did not share K/V across a query group; the
row cites why); no row-specific constant enters a prediction. Metrics:

- decode_tokens_per_s: batch / decode step time at the context halfway through the generation;
- ttft_s: the prefill step of the prompt;
- request_latency_s: prefill + output x the mid-generation decode step;
- output_tokens_per_s[_per_gpu]: batch x output / request latency (a static batch), divided by TP per GPU.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rooflinesim.pricing.predict import predict_scenario  # noqa: E402
from rooflinesim.specs.registry import load_hardware  # noqa: E402
from rooflinesim.scenario.builder import build_scenario  # noqa: E402

TABLE = Path(__file__).resolve().parent / "published" / "measurements.yaml"


def load_rows(path: Path = TABLE) -> list[dict]:
    return yaml.safe_load(path.read_text())["rows"]


#: how rows are priced: "row" (each row with the engine profile of the engine that ran it, `get_row_engine`), or
#: one engine profile's name for every row ("ideal": the bare kernels the shipped constants were fitted with)
ENGINE = "row"


def get_row_engine(row: dict) -> str:
    """The shipped engine profile closest to the engine a row names: gpt-fast and torchao (compiled, graph-captured,
    no scheduler) -> gpt-fast; TensorRT-LLM and NeMo (its TensorRT-LLM backend) -> trtllm; vLLM of 2023-2024 (V0)
    -> vllm-v0; anything else -> ideal."""
    name = row["engine"].lower()
    if "gpt-fast" in name or "torchao" in name:
        return "gpt-fast"
    if "tensorrt" in name or "nemo" in name:
        return "trtllm"
    if "vllm" in name:
        return "vllm-v0"
    return "ideal"


def _scenario(row: dict, hw, batch, ctx):
    engine = get_row_engine(row) if ENGINE == "row" else ENGINE
    return build_scenario(hw, row["model"], batch, ctx, weight_dtype=row["weight_dtype"], kv_dtype=row.get("kv_dtype"),
                          activation_dtype=row.get("activation_dtype"), tp=row["tp"],
                          quant_group_size=row.get("quant_group_size", 128), quant_kernel=row.get("quant_kernel"),
                          attention=row.get("attention", "flash"), speculative=False, allow_long_context=True,
                          engine=engine)


def predict_row(row: dict, hw=None) -> float:
    """The row's metric as the uncalibrated defaults predict it (hw: a spec to use instead of the row's name)."""
    hw = hw if hw is not None else row["hardware"]
    batch, prompt, out = row["batch"], row["prompt_tokens"], row["output_tokens"]
    if row["metric"] == "ttft_s":
        return float(predict_scenario(_scenario(row, hw, batch, prompt)).prefill.step_time_s)
    decode = float(predict_scenario(_scenario(row, hw, batch, prompt + out // 2)).decode.step_time_s)
    if row["metric"] == "decode_tokens_per_s":
        return batch / decode
    prefill = float(predict_scenario(_scenario(row, hw, batch, prompt)).prefill.step_time_s)
    latency = prefill + out * decode
    if row["metric"] == "request_latency_s":
        return latency
    per_system = batch * out / latency
    return per_system / row["tp"] if row["metric"] == "output_tokens_per_s_per_gpu" else per_system


def relative_error(row: dict, predicted: float) -> float:
    return predicted / row["measured"] - 1.0


def summarize(errors) -> str:
    e = np.abs(np.asarray(errors, dtype=float))
    if e.size == 0:
        return "no rows"
    return f"median {100 * np.median(e):.1f} %, p90 {100 * np.percentile(e, 90):.1f} % over {e.size} rows"


def fit_efficiency(rows: list[dict], hw_name: str):
    """Least squares (log error) of the per-kernel overhead on the `<hw>-efficiency` rows (batch-1 decode). The
    memory and compute fractions keep their datasheet-side sources: with one model family per device the overhead
    and the memory fraction trade off, so only the one the sources cannot pin is fitted."""
    from scipy.optimize import least_squares

    tag = f"{load_hardware(hw_name).aliases[0]}-efficiency"
    chosen = [r for r in rows if tag in r.get("fitted_on", [])]
    base = load_hardware(hw_name)

    def residuals(x):
        eff = base.efficiency.model_copy(update={"kernel_overhead_s": x[0] * 1e-6})
        hw = base.model_copy(update={"efficiency": eff})
        return [np.log(predict_row(r, hw) / r["measured"]) for r in chosen]

    fit = least_squares(residuals, [base.efficiency.kernel_overhead_s * 1e6], bounds=([0.0], [50.0]))
    return chosen, fit.x


def fit_p2p_latency(rows: list[dict], hw_name: str = "a100"):
    """Least squares (log error) of the p2p all-reduce latency on the `<hw>-p2p-allreduce-latency` rows."""
    from scipy.optimize import least_squares

    base = load_hardware(hw_name)
    chosen = [r for r in rows if f"{base.aliases[0]}-p2p-allreduce-latency" in r.get("fitted_on", [])]

    def residuals(x):
        p2p = base.interconnect.peer_to_peer_allreduce.model_copy(update={"latency_s": x[0] * 1e-6})
        hw = base.model_copy(update={"interconnect": base.interconnect.model_copy(
            update={"peer_to_peer_allreduce": p2p})})
        return [np.log(predict_row(r, hw) / r["measured"]) for r in chosen]

    fit = least_squares(residuals, [base.interconnect.peer_to_peer_allreduce.latency_s * 1e6], bounds=([0.0], [50.0]))
    return chosen, fit.x[0]


def fit_overlap(rows: list[dict]):
    """The compute-memory overlap (one value for every GPU tagged) that zeroes the median log error on the
    `compute-memory-overlap` rows, each priced on its own device with the overlap replaced."""
    from scipy.optimize import brentq

    chosen = [r for r in rows if "compute-memory-overlap" in r.get("fitted_on", [])]
    specs = {r["hardware"]: load_hardware(r["hardware"]) for r in chosen}

    def median_log_error(overlap):
        errors = []
        for r in chosen:
            base = specs[r["hardware"]]
            hw = base.model_copy(update={"efficiency": base.efficiency.model_copy(
                update={"compute_memory_overlap": overlap})})
            errors.append(np.log(predict_row(r, hw) / r["measured"]))
        return float(np.median(errors))

    return chosen, brentq(median_log_error, 0.0, 1.0) if median_log_error(0.0) > 0 > median_log_error(1.0) else None


def fit_quant_kernel(rows: list[dict], kernel_name: str):
    """The kernel efficiency (memory = compute) that zeroes the median log error on the rows tagged with its name,
    with the devices' fitted overheads in place (so run after the overhead fit has been written to the specs)."""
    from scipy.optimize import brentq

    from rooflinesim.timing import quant_kernels

    chosen = [r for r in rows if kernel_name in r.get("fitted_on", [])]
    original = quant_kernels.KERNELS[kernel_name]

    def median_log_error(efficiency):
        quant_kernels.KERNELS[kernel_name] = replace(original, memory_efficiency=efficiency,
                                                     compute_efficiency=efficiency)
        try:
            return float(np.median([np.log(predict_row(r) / r["measured"]) for r in chosen]))
        finally:
            quant_kernels.KERNELS[kernel_name] = original

    return chosen, brentq(median_log_error, 0.2, 1.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="refit the A100 and H100 kernel overheads and print them")
    parser.add_argument("--engine", default="row", help="row (default: each row with its own engine's profile) or "
                                                        "an engine profile for every row (ideal: bare kernels)")
    args = parser.parse_args(argv)
    global ENGINE
    ENGINE = "ideal" if args.fit else args.engine  # the fitted constants are the bare kernels' (engine ideal)
    rows = load_rows()
    if args.fit:
        for hw in ("a100", "h100"):
            chosen, x = fit_efficiency(rows, hw)
            print(f"{hw}: kernel_overhead_s {x[0]:.2f}e-6 (fitted on {', '.join(r['id'] for r in chosen)})")
        chosen, latency = fit_p2p_latency(rows)
        print(f"a100 p2p all-reduce latency_s {latency:.2f}e-6 (fitted on {', '.join(r['id'] for r in chosen)})")
        chosen, overlap = fit_overlap(rows)
        print(f"compute_memory_overlap {overlap} (fitted on {', '.join(r['id'] for r in chosen)})")
        for kernel in ("tinygemm", "int8-weight-only", "fp8-weight-only"):
            chosen, efficiency = fit_quant_kernel(rows, kernel)
            print(f"{kernel}: efficiency {efficiency:.3f} (fitted on {', '.join(r['id'] for r in chosen)})")
        return 0
    fitted, held_out = [], []
    print(f"{'row':58s} {'metric':28s} {'measured':>10s} {'predicted':>10s} {'error':>8s}")
    for row in rows:
        predicted = predict_row(row)
        error = relative_error(row, predicted)
        (fitted if row.get("fitted_on") else held_out).append(error)
        mark = "" if not row.get("fitted_on") else "  (fit)"
        print(f"{row['id']:58s} {row['metric']:28s} {row['measured']:10.4g} {predicted:10.4g} {100 * error:+7.1f}%{mark}")
    print(f"\npriced with engine {'each row' + chr(39) + 's own (get_row_engine)' if ENGINE == 'row' else ENGINE}")
    print(f"all rows:       {summarize(fitted + held_out)}")
    print(f"fitted rows:    {summarize(fitted)}")
    print(f"held-out rows:  {summarize(held_out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
