"""Recompute the lengths and EAGLE-3 acceptance the SpecDecode-Bench rows of speculation-under-load.yaml take from the
source's own traces (SpecDecode-Bench/simulator @2fdccbd, data/llama3.1-8B/combined_<dataset>.jsonl: one request a
line with its prompt tokens, Llama-3.1-8B-Instruct's greedy output tokens and per-position accepted lengths).

    python benchmarks/published/sdb_traces.py PATH/TO/simulator/data/llama3.1-8B          # the figures below
    python benchmarks/published/sdb_traces.py PATH/TO/simulator/data/llama3.1-8B --write  # + the lengths file

Per dataset: the requests that stopped before the 8192-token cap (bench_latency.py max_tokens 8 x 1024; vis_speedup.py
keeps only finish_reason 'stop'), their mean prompt and output lengths, and the EAGLE-3 tokens per step of a k-draft
chain, walked as the simulator's FIXED_k does (simulator.py simulate_sd_batch: from the first generated token, each step
takes min(acc_len[position], k + 1) tokens), averaged per request as the figure averages per-request throughput.
`--write` also writes the (prompt, output) lengths of the first RUN_REQUESTS stopped requests of each file
(vis_speedup.py averages the first 100 stopped prompts; that the file keeps the benchmark's sample order is an
assumption), which the bench prices SpecDecode-Bench's batch runs over (rooflinesim/pricing/batch_run.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATASETS = {"gsm8k": "gsm8k", "cnn-dailymail": "cnn", "sharegpt": "sharegpt", "instructcoder": "instructcoder"}
OUTPUT_CAP_TOKENS = 8192
RUN_REQUESTS = 100
LENGTHS_FILE = Path(__file__).resolve().parent / "specdecode-bench-lengths.yaml"


def get_tokens_per_step(accepted: list[int], k: int) -> float:
    """Generated tokens after the first / chain steps, for one request's trace (accepted[i]: the tokens a step that
    starts at generated position i + 1 yields, bonus included)."""
    position, steps = 1, 0
    while position < len(accepted):
        position += min(accepted[position - 1], k + 1)
        steps += 1
    return (len(accepted) - 1) / max(steps, 1)


def summarize(path: Path, k: int = 3) -> dict:
    requests = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    stopped = [r for r in requests if len(r["generated_token_ids"]) < OUTPUT_CAP_TOKENS]
    n = len(stopped)
    return {"requests": n,
            "prompt_tokens": sum(len(r["prompt_token_ids"]) for r in stopped) / n,
            "output_tokens": sum(len(r["generated_token_ids"]) for r in stopped) / n,
            "eagle3_tokens_per_step": sum(get_tokens_per_step(r["acc_eagle"]["acc_len"], k) for r in stopped) / n}


def get_run_lengths(path: Path, n: int = RUN_REQUESTS) -> list[list[int]]:
    requests = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [[len(r["prompt_token_ids"]), len(r["generated_token_ids"])] for r in requests
            if len(r["generated_token_ids"]) < OUTPUT_CAP_TOKENS][:n]


def write_lengths(folder: Path) -> None:
    import yaml

    data = {"about": ("(prompt, output) token lengths of the first %d requests of each SpecDecode-Bench/simulator "
                      "data/llama3.1-8B/combined_<dataset>.jsonl @2fdccbd that stopped before the 8192-token cap: "
                      "prompts with Llama-3.1's chat template, Llama-3.1-8B-Instruct's greedy outputs. Written by "
                      "benchmarks/published/sdb_traces.py --write" % RUN_REQUESTS),
            "datasets": {d: get_run_lengths(folder / f"combined_{stem}.jsonl") for d, stem in DATASETS.items()}}
    LENGTHS_FILE.write_text(yaml.safe_dump(data, sort_keys=False, width=120, default_flow_style=None))


def main(argv: list[str]) -> int:
    write = "--write" in argv
    argv = [a for a in argv if a != "--write"]
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: sdb_traces.py PATH/TO/simulator/data/llama3.1-8B [--write]", file=sys.stderr)
        return 2
    for dataset, stem in DATASETS.items():
        s = summarize(Path(argv[0]) / f"combined_{stem}.jsonl")
        print(f"{dataset:14s} {s['requests']:4d} requests, prompt {s['prompt_tokens']:.0f}, output "
              f"{s['output_tokens']:.0f} tokens, EAGLE-3 k=3 {s['eagle3_tokens_per_step']:.3f} tokens per step")
    if write:
        write_lengths(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
