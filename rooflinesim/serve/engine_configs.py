"""Engine speculation configs filled from the model: which k each batch size should draft, in each engine's own key
names. The rule is the dynamic one (k* = argmax over k of E(k) / step_time(batch, k), the speculative step priced by
`price_speculation` at a representative context); k* = 0 means "do not speculate at this batch".

Targets (verified in the engines' source; key names change between versions):

- vLLM: `DynamicSpeculativeConfig` of dynamic speculative decoding (vLLM PR #32374, vllm/v1/spec_decode/dynamic/
  manager.py): `batch_stats` {batch: {k: ITL in ms}} must hold batch 1 and the engine's max batch, k 0 and 1, keys
  sorted; `acceptance_rate_per_pos` holds the *unconditional* rate of each position (AL(k) = 1 + their sum over the
  first k), one per position up to `max_num_speculative_tokens`; `use_online_acceptance_rate` re-estimates them.
  vLLM builds `batch_stats` by timing real servers; here every entry comes from the step model. (vLLM V0's
  `speculative_disable_by_batch_size`, which `rooflinesim sweep` prints, is no longer honoured by V1.)
- TensorRT-LLM: the PyTorch backend's `DecodingBaseConfig` (tensorrt_llm/llmapi/llm_args.py): `draft_len_schedule`
  {batch: k} where each key is the batch size *from which* its k applies (it must contain batch 1 with
  k = `max_draft_len`), and `max_concurrency`, above which speculation is off.
- SGLang with a draft tree (`--tree`): `speculative_algorithm` EAGLE / EAGLE3 / STANDALONE, the tree's
  `speculative_num_steps` and `speculative_eagle_topk`, and the `speculative_num_draft_tokens` with the best mean
  speedup over the batches where it pays.
- SGLang: server arguments `speculative_algorithm` STANDALONE (a separate draft model), `speculative_num_steps`,
  `speculative_eagle_topk` 1 (a chain) and `speculative_num_draft_tokens` = steps + 1. No batch-size switch was found
  among SGLang's documented server arguments, so the config carries one k (the best over the batches where
  speculation pays) and the batch from which it stops paying as a comment, to set `max_running_requests` or route
  by load.
"""

from __future__ import annotations

import json

import numpy as np

from ..scenario.builder import Scenario
from ..pricing.speculative import get_expected_tokens, price_speculation
from ..errors import InputError
from ..units import MILLI

ENGINES = ("vllm", "trtllm", "sglang")
#: batch sizes vLLM's generate_config.py profiles; the engine's max batch is added
VLLM_PROFILE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _acceptance(scenario: Scenario, max_k: int) -> np.ndarray:
    acceptance = scenario.acceptance
    if acceptance.per_position is not None:
        return np.asarray(acceptance.per_position[:max_k], dtype=float)
    if len(acceptance.alphas) != 1:
        raise InputError("an engine config takes one acceptance rate (--alpha) or per-position rates")
    return np.full(max_k, acceptance.alphas[0])


def get_k_by_batch(scenario: Scenario, max_batch: int, context_tokens: int, max_k: int) -> dict:
    """Step times (s) over batch 1..max_batch x k 0..max_k at one context, E(k), and k* per batch."""
    conditional = _acceptance(scenario, max_k)
    max_k = conditional.size
    batch = np.arange(1, max_batch + 1)
    k = np.arange(max_k + 1)
    step = np.broadcast_to(price_speculation(scenario, batch[:, None], context_tokens, k[None, :]).step_time_s,
                           (batch.size, k.size))
    expected = get_expected_tokens(k, None, conditional)
    best = np.argmax(expected[None, :] / step, axis=1)
    return {"batch": batch, "k": k, "step_time_s": step, "expected_tokens": expected, "best_k": best,
            "conditional": conditional}


def _vllm(table: dict, scenario: Scenario, max_batch: int) -> dict:
    batches = sorted({b for b in VLLM_PROFILE_BATCHES if b <= max_batch} | {max_batch})
    k = table["k"]
    stats = {int(b): {int(kk): round(float(table["step_time_s"][b - 1, kk]) / MILLI, 4) for kk in k} for b in batches}
    unconditional = np.cumprod(table["conditional"])
    return {"speculative_config": {
        "method": "draft_model", "model": scenario.drafter.name, "num_speculative_tokens": int(k[-1]),
        "dynamic_config": {
            "max_num_speculative_tokens": int(k[-1]),
            "acceptance_rate_per_pos": [round(float(a), 6) for a in unconditional],
            "use_online_acceptance_rate": True,
            "batch_stats": stats,
        }}}


def _trtllm(table: dict, scenario: Scenario) -> dict:
    best = table["best_k"]
    off = np.flatnonzero(best == 0)
    top = int(best[0])
    schedule: dict[int, int] = {}
    for i, k in enumerate(np.minimum(best, top)):
        if i == 0 or k != schedule[list(schedule)[-1]]:
            schedule[int(table["batch"][i])] = int(k)
    config = {"decoding_type": "DraftTarget", "max_draft_len": top, "speculative_model_dir": scenario.drafter.name,
              "draft_len_schedule": schedule}
    if off.size:
        config["max_concurrency"] = int(table["batch"][off[0]]) - 1
    return {"speculative_config": config}


def _sglang(table: dict, scenario: Scenario) -> tuple[dict, int | None]:
    best = table["best_k"]
    off = np.flatnonzero(best == 0)
    paying = slice(0, off[0] if off.size else best.size)
    speedup = table["expected_tokens"][None, :] * table["step_time_s"][:, :1] / table["step_time_s"]
    k = int(np.argmax(speedup[paying].mean(axis=0))) if best[0] > 0 else 0
    args = {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": scenario.drafter.name,
            "speculative_num_steps": k, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": k + 1}
    return args, int(table["batch"][off[0]]) if off.size else None


def emit_engine_config(scenario: Scenario, engine: str, config, context_tokens: int, max_k: int = 8) -> str:
    """The config text for `engine` (see the module docstring), at `context_tokens` of cached context."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if scenario.tree is not None:
        if engine != "sglang":
            raise InputError(f"a draft tree is emitted for SGLang (--emit-config sglang); {engine}'s configs here "
                             "are chains")
        return _sglang_tree(scenario, config, context_tokens)
    if scenario.drafter is None or scenario.drafter.kind != "model":
        raise InputError("engine configs are emitted for a separate draft model (--drafter model)")
    table = get_k_by_batch(scenario, config.max_num_seqs, context_tokens, max_k)
    header = get_config_header(scenario, context_tokens)
    if engine == "vllm":  # JSON has no comments and vLLM rejects unknown keys: the text is the config alone (the
        # command line prints the header on stderr)
        return json.dumps(_vllm(table, scenario, config.max_num_seqs), indent=1)
    if engine == "trtllm":
        import yaml

        return header + "\n" + yaml.safe_dump(_trtllm(table, scenario), sort_keys=False).rstrip()
    args, stop = _sglang(table, scenario)
    flags = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in args.items())
    note = ("speculation pays at every batch up to " + str(config.max_num_seqs) if stop is None else
            f"speculation stops paying from batch {stop}: cap --max-running-requests {stop - 1} or route by load")
    return f"{header}\n# {note}\npython -m sglang.launch_server {flags}"


#: SGLang's --speculative-algorithm per drafter kind (python/sglang/srt/server_args.py: EAGLE, EAGLE3, STANDALONE)
SGLANG_TREE_ALGORITHMS = {"model": "STANDALONE", "eagle": "EAGLE", "head": "EAGLE", "eagle3": "EAGLE3"}


def _sglang_tree(scenario: Scenario, config, context_tokens: int) -> str:
    """SGLang's tree flags: the tree's speculative_num_steps and speculative_eagle_topk, and the
    speculative_num_draft_tokens (tree tokens + 1) with the best mean speedup over the batches where speculation
    pays (1..max_num_seqs at `context_tokens`), with the batch from which no tree size pays as a comment."""
    tree, drafter = scenario.tree, scenario.drafter
    if tree.static is not None:
        raise InputError("SGLang drafts dynamic top-k trees: a static (Medusa) tree has no SGLang flags")
    algorithm = SGLANG_TREE_ALGORITHMS.get(drafter.kind)
    if algorithm is None:
        raise InputError(f"no SGLang speculative algorithm drafts a tree with a {drafter.kind} drafter")
    batch = np.arange(1, config.max_num_seqs + 1)
    k = np.arange(tree.tree_tokens + 1)
    grid = price_speculation(scenario, batch[:, None], context_tokens, k[None, :])
    speedup = np.broadcast_to(grid.speedup, (batch.size, k.size))
    best = np.argmax(speedup, axis=1)
    off = np.flatnonzero(best == 0)
    paying = slice(0, off[0] if off.size else best.size)
    tokens = int(np.argmax(speedup[paying].mean(axis=0))) if best[0] > 0 else 0
    if tree.topk == 1:
        tokens = tree.steps  # SGLang requires steps + 1 draft tokens for a chain
    path = (drafter.name if drafter.kind == "model" else
            getattr(drafter.head_config, "source", None) or "PATH_TO_DRAFT_HEAD")
    args = {"speculative_algorithm": algorithm, "speculative_draft_model_path": path,
            "speculative_num_steps": tree.steps, "speculative_eagle_topk": tree.topk,
            "speculative_num_draft_tokens": tokens + 1}
    flags = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in args.items())
    stop = int(batch[off[0]]) if off.size else None
    note = (f"tree of {tokens} draft tokens (best mean speedup where it pays); " +
            ("it pays at every batch up to " + str(config.max_num_seqs) if stop is None else
             f"no tree size pays from batch {stop}: cap --max-running-requests {stop - 1} or route by load"))
    if tokens == 0:
        note = "speculation with this tree does not pay even at batch 1"
    return f"{get_config_header(scenario, context_tokens)}\n# {note}\npython -m sglang.launch_server {flags}"


def get_config_header(scenario: Scenario, context_tokens: int) -> str:
    return (f"# rooflinesim: {scenario.model.name} + draft {scenario.drafter.name} on {scenario.hardware.name} "
            f"(tp {scenario.workload.tensor_parallel}), context {context_tokens} tokens; k* = argmax E(k) / "
            "step time")


__all__ = ["emit_engine_config", "get_config_header", "get_k_by_batch", "ENGINES"]
