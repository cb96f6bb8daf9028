"""Argument groups shared by the pricing commands, and how their values reach `build_scenario` unchanged."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..scenario.inputs import (
    DEFAULT_ALPHA, DEFAULT_ENGINE, DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_HARDWARE, DEFAULT_MEMORY_RESERVE_BYTES,
    DEFAULT_MODEL, DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS, DEFAULT_SERVE_REQUESTS, DEFAULT_SWEEP_ALPHAS,
    DEFAULT_WEIGHT_DTYPE, DRAFTER_KINDS, DEFAULT_BLOCK_SIZE, DEFAULT_DRAFTER, DEFAULT_SERVE_RATE_PER_S,
)
from ..scenario.groups import get_default
from ..ops.step_ops import ATTENTION_MODES

#: Options left at None are not passed on (`given`): the scenario's groups own every default (`scenario.groups`),
#: and the help texts below print them from there.


def add_deployment_arguments(p: argparse.ArgumentParser) -> None:
    """dtypes, attention mode, tensor parallelism, quantisation groups: shared by predict, sweep and plot."""
    p.add_argument("--weight-dtype", default=None,
                   help=f"fp32, bf16, fp16, fp8, int8, int4 (default {DEFAULT_WEIGHT_DTYPE})")
    p.add_argument("--kv-dtype", default=None, help="KV-cache dtype (default: the activation dtype)")
    p.add_argument("--activation-dtype", default=None, help="default: the weight dtype, bf16 for quantised weights")
    p.add_argument("--attention", default=None, choices=list(ATTENTION_MODES),
                   help="per-head: a fused kernel without GQA sharing, K/V read once per query head (pre-XQA decode; "
                        f"default {get_default('attention')})")
    p.add_argument("--tp", default=None, help="tensor-parallel degree: the model is sharded over this many devices "
                                              f"(default {get_default('tp')})")
    p.add_argument("--draft-tp", default=None, help="the draft model's own tensor-parallel degree (default: --tp)")
    p.add_argument("--quant-group-size", type=int, default=None,
                   help=f"weights per scale for int8/int4 (default {get_default('quant_group_size')})")
    p.add_argument("--quant-kernel", default=None,
                   help="kernel of int8/int4/fp8 weights: generic, tinygemm, marlin, int8-weight-only, fp8-weight-only, "
                        "fp8-rowwise (default: the hardware's, see 'show')")
    p.add_argument("--gpu-memory-utilization", default=None,
                   help="share of device memory the engine may use, as vLLM's flag (default "
                        f"{DEFAULT_GPU_MEMORY_UTILIZATION:g})")
    p.add_argument("--memory-reserve-gib", default=None,
                   help="memory held beyond weights, KV and step activations: CUDA context, workspaces, graphs, "
                        f"prefill activations (GiB, default {DEFAULT_MEMORY_RESERVE_BYTES / (1 << 30):g})")
    p.add_argument("--engine", default=None,
                   help="engine profile whose launch, host and speculative costs are priced, by name (default "
                        f"{DEFAULT_ENGINE}; 'rooflinesim list engines'; ideal: bare kernels) or a YAML path "
                        "(docs/engines.md)")
    p.add_argument("--sampling", action="store_true",
                   help="price what an engine runs after each forward pass: the sampler over the logits and, when "
                        "speculating, the acceptance rule (default: bare forward passes)")
    p.add_argument("--impl", default=None, metavar="NAME_OR_YAML",
                   help="the code running the model: reference (default: the decoder calibration times), hf "
                        "(transformers with its DynamicCache), gptfast, or a YAML path (docs/calibration.md)")


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hw", default=None, help=f"hardware name, alias or YAML path (default {DEFAULT_HARDWARE})")
    p.add_argument("--calibration", help="measured profile YAML to apply to --hw")
    p.add_argument("--model", default=None, help="model name, YAML path, HF config.json or the folder holding it "
                                                 f"(default {DEFAULT_MODEL})")
    add_deployment_arguments(p)
    p.add_argument("--allow-long-context", action="store_true", help="model a context above the model's max (warns)")


def add_speculation_arguments(p: argparse.ArgumentParser, alpha_list: bool = False) -> None:
    p.add_argument("--draft", default=None, help="draft model name, YAML, config.json or its folder (default: the "
                                                 "smallest shipped model of the target's tokenizer family)")
    p.add_argument("--drafter", default=None, choices=list(DRAFTER_KINDS),
                   help="model: a separate draft model; ngram: model-free (free); eagle, eagle3, medusa, mtp: "
                        "self-drafting heads priced from their own ops (eagle/eagle3: --draft the head's config.json); head: eagle-style with --head-layer-fraction; self: the "
                        "target drafts for itself (--draft-kv-budget, --draft-layer-fraction); default "
                        f"{DEFAULT_DRAFTER}")
    p.add_argument("--draft-kv-budget", default=None, metavar="TOKENS",
                   help="--drafter self: KV tokens a draft step reads (StreamingLLM / SnapKV draft cache, as in "
                        "MagicDec and TriForce): min(context, budget)")
    p.add_argument("--draft-layer-fraction", default=None, type=float,
                   help="--drafter self: share of the target's layers a draft step runs (layer skip; default 1)")
    p.add_argument("--ngram-match-fraction", default=None, type=float, metavar="F",
                   help="--drafter ngram: share of sequences that find a match and draft each step; the others "
                        "verify one token, as vLLM's n-gram proposer runs them (default 1: every sequence drafts k)")
    p.add_argument("--head-layer-fraction", type=float, default=None,
                   help="cost of one head draft step as a fraction of one target layer (--drafter head; default "
                        f"{get_default('head_layer_fraction'):g})")
    p.add_argument("--extra-draft-pass", action="store_true",
                   help="add gpt-fast's extra draft pass when all k drafts are accepted")
    p.add_argument("--draft-first-step-tokens", type=int, default=None, choices=[1, 2],
                   help="tokens the first draft step reads: 2 when the loop re-reads the last two committed tokens so "
                        f"that all-accepted sequences catch up without an extra pass (default "
                        f"{get_default('draft_first_step_tokens')})")
    p.add_argument("--tree", default=None, metavar="STEPS,TOPK,TOKENS|PATHS",
                   help="draft a tree: SGLang's speculative_num_steps,speculative_eagle_topk,"
                        "speculative_num_draft_tokens (e.g. 6,10,60), or a static tree as a JSON list of paths "
                        "(Medusa's medusa_choices, e.g. '[[0],[1],[0,0]]'); k then counts tree tokens")
    if alpha_list:
        p.add_argument("--alpha", default=None, help="acceptance rates, e.g. 0.6,0.8 (default "
                                                     f"{','.join(f'{a:g}' for a in DEFAULT_SWEEP_ALPHAS)})")
    else:
        p.add_argument("--alpha", type=float, default=None,
                       help=f"i.i.d. acceptance rate in [0, 1] (default {DEFAULT_ALPHA:g})")
    add_acceptance_source_arguments(p)


def add_acceptance_source_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--acceptance", default=None, metavar="FILE_OR_PRESET",
                   help="measured or published acceptance instead of --alpha: an engine log or metrics file (vLLM, "
                        "SGLang, TensorRT-LLM), a JSON from 'acceptance from-logs --json', or a preset "
                        "('rooflinesim list acceptance')")
    p.add_argument("--acceptance-k", type=int, default=None,
                   help="the engine's draft length, for --acceptance files that do not state it")


def given(**options) -> dict:
    """The options the user gave: an option left at None is not passed, so its group's default applies."""
    return {name: value for name, value in options.items() if value is not None}


def deployment_options(args) -> dict:
    """The build_scenario options every pricing command shares, as the user gave them (no defaults added here)."""
    return given(weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, activation_dtype=args.activation_dtype,
                attention=args.attention, calibration=args.calibration, tp=args.tp, draft_tp=args.draft_tp,
                quant_group_size=args.quant_group_size, gpu_memory_utilization=args.gpu_memory_utilization,
                memory_reserve_bytes=_gib_to_bytes(args.memory_reserve_gib), quant_kernel=args.quant_kernel,
                sampling=args.sampling, engine=args.engine, implementation=getattr(args, "impl", None))


def _gib_to_bytes(value):
    """--memory-reserve-gib as bytes (None stays None: build_scenario owns the default)."""
    if value is None:
        return None
    try:
        return float(value) * (1 << 30)
    except ValueError:
        raise InputError(f"--memory-reserve-gib must be a number of GiB, got {value!r}") from None


def speculation_options(args) -> dict:
    return given(draft=args.draft, drafter=args.drafter, head_layer_fraction=args.head_layer_fraction,
                extra_draft_pass=args.extra_draft_pass, acceptance=args.acceptance, acceptance_k=args.acceptance_k,
                draft_first_step_tokens=args.draft_first_step_tokens, tree=args.tree,
                draft_kv_budget=args.draft_kv_budget, draft_layer_fraction=args.draft_layer_fraction,
                ngram_match_fraction=args.ngram_match_fraction)


def print_assumed(assumed: dict, console=None) -> None:
    """The "assumed:" line: every input the user did not give, with the value used (stderr beside JSON or a
    config on stdout)."""
    from ..scenario.builder import format_assumed

    line = format_assumed(assumed)
    if not line:
        return
    if console is None:
        print(line, file=sys.stderr)
    else:
        from rich.markup import escape

        console.print(f"[cyan]assumed:[/] {escape(line[len('assumed: '):])}")


def print_warnings(warnings, console=None) -> None:
    for warning in warnings:
        if console is None:
            print(f"warning: {warning}", file=sys.stderr)
        else:
            from rich.markup import escape

            console.print(f"[yellow]warning:[/] {escape(warning)}")


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    add_workload_arguments(p)
    add_speculation_arguments(p)
    p.add_argument("--alpha-per-position", default=None, help="conditional acceptance per draft position (not --alpha)")
    p.add_argument("--rate", default=None, help="requests per second: 4, 1,2,4 or 1..32 (doublings); inf: all "
                                                "requests at once; a trace alone replays its own rate (default "
                                                f"{DEFAULT_SERVE_RATE_PER_S:g})")
    p.add_argument("--concurrency", default=None,
                   help="closed-loop clients instead of --rate: 8, 1,2,4 or 1..64 (doublings); each client sends its "
                        "next request when the last one finishes (benchmark_serving --max-concurrency)")
    p.add_argument("--baseline", default="off", help="the policy crossovers are found against (default off; e.g. "
                                                     "chain:3 to compare a --tree's fixed:K with a chain)")
    p.add_argument("--policy", default="off,dynamic", help="off, fixed:K, off-above:B:K, schedule:1=4,16=2, "
                                                           "dynamic[:KMAX], adaptive[:KMAX], chain:K (a chain beside a --tree); "
                                                           "comma-separated")
    p.add_argument("--requests", type=int, default=None, help=f"requests per run (default {DEFAULT_SERVE_REQUESTS})")
    p.add_argument("--prompt-tokens", default=None, help="prompt lengths: 1024 or fixed:1024, uniform:LO:HI, "
                                                         "lognormal:MEDIAN:SIGMA[:MAX], "
                                                         "trunc-lognormal:MEDIAN:SIGMA:MIN:MAX, or a dataset: sonnet, "
                                                         "sharegpt "
                                                         f"(default {DEFAULT_PROMPT_TOKENS})")
    p.add_argument("--output-tokens", default=None, help=f"output lengths, same forms (default {DEFAULT_OUTPUT_TOKENS})")
    p.add_argument("--arrivals", default="poisson", choices=["poisson", "gamma"])
    p.add_argument("--cv", type=float, default=1.0, help="coefficient of variation of gamma inter-arrival gaps")
    p.add_argument("--trace", default=None, help="JSONL trace: arrival_s, prompt_tokens, output_tokens per line")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-num-seqs", type=int, default=None,
                   help="running requests at most (default: the engine's, 256 for vllm-v1)")
    p.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help="token budget per step (default: the engine's, 8192 for vllm-v1)")
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE,
                   help=f"KV-cache block in tokens (default {DEFAULT_BLOCK_SIZE})")
    p.add_argument("--slo-ttft", type=float, default=None, help="time-to-first-token SLO in seconds (goodput)")
    p.add_argument("--slo-tpot", type=float, default=None, help="time-per-output-token SLO in seconds (goodput)")
    p.add_argument("--json", action="store_true", help="print the runs and crossovers as JSON")
    p.add_argument("-o", "--output", default=None, help="per-request JSONL log (one rate and one policy)")
    p.add_argument("--dask", default=None, metavar="ADDRESS", help="run the sweep on this dask.distributed scheduler")
    p.add_argument("--workers", type=int, default=None, help="processes for the sweep (default: one per core)")
    p.add_argument("--emit-config", default=None, choices=["vllm", "trtllm", "sglang"],
                   help="print an engine speculation config filled from the model instead of simulating")


