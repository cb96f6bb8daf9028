"""Drafting shapes under load: the rows of the speculation-under-load comparison that use a draft tree,
self-speculation or closed-loop concurrency, each beside the published trend it should reproduce (where one exists).

A benchmark, not a test: run `python benchmarks/bench_drafting_under_load.py`. Prints, on the datasheet roofline:

1. trees (h100, llama-3.1-8b, EAGLE-3 head, top-1 acceptance 0.7 per depth, 2k context): SGLang's 6,10,60 tree
   against a chain of 3 by batch. Published trend: a tree's longer acceptance length pays most at batch 1 (EAGLE-3,
   arXiv 2503.01840: tree tau 6.13 on MT-bench for Llama-3.1-8B at batch 1), while under load SGLang's EAGLE-3 gain
   falls with the batch (1.81x at batch 2 -> 1.38x at 64 for a chain of 3; secondary, via the project's reference
   notes).
2. self-speculation (h200, llama-3.1-8b, StreamingLLM-style budget 512, alpha 0.8): the speedup by batch at 4k and
   32k. Published trend: MagicDec (arXiv 2408.11049v5, abstract) reports up to 2.51x for Llama-3.1-8B at batch 32-256
   on long sequences, and a speedup that grows with the batch.
3. closed-loop concurrency (the tree against the chain with 1..64 clients): where they cross, and Little's law
   N = X x R per run.
"""

from __future__ import annotations

from rooflinesim.pricing.speculative import analyse_speculation
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, generate_requests, simulate
from rooflinesim.serve.rates import get_crossovers


def trees() -> None:
    print("1. trees: h100, llama-3.1-8b, eagle3, a = 0.7, 2k -- speedup (E) by batch")
    for batch in (1, 4, 16, 64):
        cells = []
        for tree in ("6,10,60", "3,1,4"):
            r = analyse_speculation(build_scenario("h100", "llama-3.1-8b", batch, 2048, drafter="eagle3", alpha=0.7,
                                                   tree=tree))
            cells.append(f"tree {tree}: {r.speedup:.2f}x (E {r.expected_tokens:.2f})")
        print(f"  batch {batch:>3}: " + " | ".join(cells))


def self_speculation() -> None:
    print("2. self-speculation: h200, llama-3.1-8b, --draft-kv-budget 512, a = 0.8 -- best speedup (k) by batch")
    for ctx in ("4k", "32k"):
        cells = []
        for batch in (1, 4, 16, 32):
            scenario = build_scenario("h200", "llama-3.1-8b", batch, ctx, drafter="self", draft_kv_budget=512,
                                      alpha=0.8, allow_long_context=True)
            r = analyse_speculation(scenario)
            fits = "" if scenario.get_memory_fit(batch, scenario.context_tokens[0], r.best_k).fits_in_memory else "*"
            cells.append(f"b{batch} {r.best_speedup:.2f}x (k {r.best_k}){fits}")
        print(f"  ctx {ctx:>3}: " + ", ".join(cells) + "   (* does not fit in memory)")


def concurrency() -> None:
    print("3. closed loop: h100, llama-3.1-8b, eagle3 tree 6,10,60 (fixed:59) vs chain:3, prompts 1024, outputs 128")
    scenario = build_scenario("h100", "llama-3.1-8b", drafter="eagle3", tree="6,10,60", alpha=0.7, k_values=[0])
    rows = []
    for policy in ("chain:3", "fixed:59"):
        for clients in (1, 4, 16, 64):
            requests = generate_requests(300, 1.0, LengthDistribution.parse("1024", "p"),
                                         LengthDistribution.parse("128", "o"), seed=0)
            s = simulate(scenario, requests, policy, concurrency=clients).get_summary()
            rows.append({"concurrency": clients, "rate_per_s": None, **s})
            little = s["requests_per_s"] * s["latency_s"]["mean"]
            print(f"  {policy:>8} N = {clients:>2}: {s['output_tokens_per_s']:7,.0f} tok/s, TPOT p50 "
                  f"{s['tpot_s']['p50'] * 1e3:5.2f} ms, TTFT p50 {s['ttft_s']['p50'] * 1e3:6.1f} ms; "
                  f"Little's law X R = {little:.2f}")
    for c in get_crossovers(rows, baseline="chain:3"):
        print(f"  {c['policy']} vs {c['baseline']}: latency stops paying from {c['latency']}, throughput from "
              f"{c['throughput']}")


if __name__ == "__main__":
    trees()
    self_speculation()
    concurrency()
