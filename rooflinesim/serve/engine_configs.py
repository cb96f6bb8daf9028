"""Paste-ready engine launch lines with a speculation schedule filled from the model: which k each batch size should
draft, in each engine's own keys. The rule is the dynamic one (k* = argmax over k of E(k) / step_time(batch, k), the
speculative step priced by `price_speculation` at a representative context); k* = 0 means "do not speculate at this
batch". The schedule covers the batches that fit in memory only, and speculation is switched off from `stop_batch`
on where `serve` found it stops paying under load (`cmd_serve --emit-config ... --rate ...`), so the config and
`serve` give one answer.

Every line names the target and draft by their Hugging Face ids (`ModelSpec.hf_id`, a config.json's
`_name_or_path`) and the tensor-parallel degree. Keys and the engine version they need (`ENGINE_REQUIREMENTS`),
verified in the engines' sources and docs:

- vLLM: `vllm serve <id> --tensor-parallel-size N --speculative-config '<json>'`; `method: draft_model` runs a
  separate draft model in the V1 engine (vllm-project/vllm PR #24322, which also added `draft_tensor_parallel_size`);
  `num_speculative_tokens_per_batch_size` is Dynamic SD (PR #32374, vllm/v1/spec_decode/dynamic/utils.py;
  docs/features/speculative_decoding/dynamic_speculative_decoding.md): a list of inclusive `[first_batch,
  last_batch, k]` ranges, each k <= `num_speculative_tokens`. Stock fallback without Dynamic SD: drop that key (one k).
- TensorRT-LLM: `trtllm-serve <id> --tp_size N --extra_llm_api_options spec.yaml` with the PyTorch backend's
  `DecodingBaseConfig` (tensorrt_llm/llmapi/llm_args.py): `decoding_type: DraftTarget`, `max_draft_len`,
  `speculative_model` (alias `speculative_model_dir`), `draft_len_schedule` {batch: k} where each key is the *last*
  batch size its k applies to and batches above the largest key do not speculate (NVIDIA/TensorRT-LLM PR #10860;
  mutually exclusive with `max_concurrency`). Releases with the first form of the schedule (PR #8194) read each key
  as the batch *from which* its k applies; the line printed for them is in a comment. Stock fallback:
  `max_concurrency` alone (PR #6676).
- SGLang: `python -m sglang.launch_server --model-path <id> --tp N --speculative-algorithm STANDALONE
  --speculative-draft-model-path <id> --speculative-num-steps k --speculative-eagle-topk 1
  --speculative-num-draft-tokens k + 1` (sgl-project/sglang PR #10090). SGLang has no batch-size switch among its
  server arguments: the line carries one k (the best over the batches where speculation pays) and the batch from
  which it stops paying as a comment.
- SGLang with a draft tree (`--tree`): `speculative_algorithm` EAGLE / EAGLE3 / STANDALONE, the tree's
  `speculative_num_steps` and `speculative_eagle_topk`, and the `speculative_num_draft_tokens` with the best mean
  speedup over the batches where it pays.
"""

from __future__ import annotations

import json
import shlex

import numpy as np

from ..scenario.builder import Scenario
from ..acceptance.closed_form import get_expected_tokens
from ..pricing.break_even import get_break_even_batch
from ..pricing.speculative import price_speculation
from ..pricing.speedup_band import SpeedupBand, get_scenario_speedup_band
from ..errors import InputError
from ..specs.registry import get_short_name

ENGINES = ("vllm", "trtllm", "sglang")
#: what each emitted key needs, and what to do on an engine without it (see the module docstring for the sources)
ENGINE_REQUIREMENTS = {
    "vllm": ("--speculative-config with method draft_model and draft_tensor_parallel_size: a vLLM release with PR "
             "#24322 (V1 draft models); num_speculative_tokens_per_batch_size: one with PR #32374 (Dynamic SD). "
             "Stock fallback: delete num_speculative_tokens_per_batch_size (one k at every batch)"),
    "trtllm": ("draft_len_schedule read as 'up to this batch': a TensorRT-LLM release with PR #10860; releases with "
               "PR #8194 read the keys as 'from this batch' (commented line below). Stock fallback: delete "
               "draft_len_schedule, keep max_draft_len and set max_concurrency (PR #6676)"),
    "sglang": "--speculative-algorithm STANDALONE: an SGLang release with PR #10090",
}
#: the keys each engine's documentation lists for what is emitted here (the emitted configs' test checks them)
DOCUMENTED_KEYS = {
    "vllm_flags": {"--tensor-parallel-size", "--speculative-config", "--max-num-seqs"},
    "vllm_speculative_config": {"method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
                                "num_speculative_tokens_per_batch_size"},
    "trtllm_flags": {"--tp_size", "--extra_llm_api_options", "--max_batch_size"},
    "trtllm_speculative_config": {"decoding_type", "max_draft_len", "speculative_model", "draft_len_schedule",
                                  "max_concurrency"},
    "sglang_flags": {"--model-path", "--tp", "--speculative-algorithm", "--speculative-draft-model-path",
                     "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                     "--max-running-requests"},
}


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


def get_runs(batch: np.ndarray, best_k: np.ndarray) -> list[tuple[int, int, int]]:
    """[(first batch, last batch, k)] of consecutive batches with one k, inclusive, covering every batch."""
    runs: list[tuple[int, int, int]] = []
    for b, k in zip(batch.tolist(), best_k.tolist()):
        if runs and runs[-1][2] == k:
            runs[-1] = (runs[-1][0], b, k)
        else:
            runs.append((b, b, k))
    return runs


def _hf_id(spec) -> tuple[str, str | None]:
    """(the id an engine loads, a note when the spec names none)."""
    if spec.hf_id:
        return spec.hf_id, None
    name = get_short_name(spec)
    return name, f"no Hugging Face id is known for {name}: replace {name!r} with its repository id or local path"


def _vllm(runs, top: int, target: str, draft: str, tp: int, draft_tp: int, max_batch: int) -> str:
    config = {"method": "draft_model", "model": draft, "num_speculative_tokens": top,
              "draft_tensor_parallel_size": draft_tp,
              "num_speculative_tokens_per_batch_size": [list(run) for run in runs]}
    return (f"vllm serve {shlex.quote(target)} --tensor-parallel-size {tp} --max-num-seqs {max_batch} "
            f"--speculative-config {shlex.quote(json.dumps(config, separators=(', ', ': ')))}")


def _trtllm(runs, top: int, target: str, draft: str, tp: int, max_batch: int) -> str:
    import yaml

    paying = [run for run in runs if run[2] > 0]
    last_paying = paying[-1][1] if paying else 0
    up_to = {int(last): int(k) for _, last, k in runs if last <= last_paying}  # up-to keys; off above the last
    config = {"speculative_config": {"decoding_type": "DraftTarget", "max_draft_len": top, "speculative_model": draft,
                                     "draft_len_schedule": up_to}}
    from_keys = {int(first): int(k) for first, _, k in runs}
    if last_paying < max_batch:
        from_keys[last_paying + 1] = 0
    text = yaml.safe_dump(config, sort_keys=False).rstrip()
    return (f"# releases before PR #10860 (keys: from this batch on): draft_len_schedule: {from_keys}\n"
            f"cat > spec.yaml <<'EOF'\n{text}\nEOF\n"
            f"trtllm-serve {shlex.quote(target)} --tp_size {tp} --max_batch_size {max_batch} "
            "--extra_llm_api_options spec.yaml")


def _sglang(table: dict, runs, target: str, draft: str, tp: int) -> tuple[str, int | None]:
    off = [first for first, _, k in runs if k == 0]
    stop = off[0] if off else None
    paying = table["batch"] < (stop if stop is not None else table["batch"][-1] + 1)
    speedup = table["expected_tokens"][None, :] * table["step_time_s"][:, :1] / table["step_time_s"]
    k = int(np.argmax(speedup[paying].mean(axis=0))) if paying.any() else 0
    args = [("--model-path", target), ("--tp", tp), ("--speculative-algorithm", "STANDALONE"),
            ("--speculative-draft-model-path", draft), ("--speculative-num-steps", k),
            ("--speculative-eagle-topk", 1), ("--speculative-num-draft-tokens", k + 1)]
    flags = " ".join(f"{flag} {shlex.quote(str(value))}" for flag, value in args)
    return f"python -m sglang.launch_server {flags}", stop


def emit_engine_config(scenario: Scenario, engine: str, config, context_tokens: int, max_k: int = 8,
                       stop_batch: int | None = None, verdict: str | None = None) -> str:
    """The launch text for `engine` (see the module docstring) at `context_tokens` of cached context: comment lines
    (what it is, what was assumed, the verdict, the engine version it needs) and the command. `stop_batch`: the
    batch from which speculation is switched off whatever the step model says (serve's verdict under load)."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if scenario.tree is not None:
        if engine != "sglang":
            raise InputError(f"a draft tree is emitted for SGLang (--emit-config sglang); {engine}'s configs here "
                             "are chains")
        return _sglang_tree(scenario, config, context_tokens)
    if scenario.drafter is None or scenario.drafter.kind != "model":
        raise InputError("engine configs are emitted for a separate draft model (--drafter model)")
    max_batch = get_fitting_max_batch(scenario, config.max_num_seqs, context_tokens)
    table = get_k_by_batch(scenario, max_batch, context_tokens, max_k)
    best = table["best_k"].copy()
    if stop_batch is not None:
        best[table["batch"] >= stop_batch] = 0
    runs = get_runs(table["batch"], best)
    top = int(best.max())
    (target, target_note), (draft, draft_note) = _hf_id(scenario.model), _hf_id(scenario.drafter.model)
    tp, draft_tp = scenario.workload.tensor_parallel, scenario.draft_workload.tensor_parallel
    off = [first for first, _, k in runs if k == 0]
    capped = max_batch < config.max_num_seqs
    if verdict is None:
        verdict = (f"speculation stops paying from batch {off[0]}" if off else
                   f"speculation pays at every batch that fits: up to {max_batch} (memory caps the batch there)"
                   if capped else f"speculation pays at every batch up to {max_batch}")
    lines = [get_config_header(scenario, context_tokens), f"# verdict: {verdict}"]
    band = get_scenario_speedup_band(scenario)
    if band is not None:  # on a datasheet: where the published speedup error puts the break-even
        lines.append(f"# {get_break_even_span_line(scenario, band, table, max_batch)}")
    lines += [f"# {get_batch_1_answer(scenario, context_tokens, table)}", f"# needs: {ENGINE_REQUIREMENTS[engine]}"]
    lines += [f"# note: {note}" for note in (target_note, draft_note) if note]
    if engine == "vllm":
        command = _vllm(runs, top, target, draft, tp, draft_tp, max_batch)
    elif engine == "trtllm":
        command = _trtllm(runs, top, target, draft, tp, max_batch)
    else:
        command, stop = _sglang(table, runs, target, draft, tp)
        if stop is not None:
            lines.append(f"# SGLang has no batch switch: cap --max-running-requests {stop - 1} or route by load")
    return "\n".join(lines + [command])


def get_break_even_span_line(scenario: Scenario, band: SpeedupBand, table: dict, max_batch: int) -> str:
    """The batches between which steady speculation stops paying if the measured speedup sat at either end of the
    engine profile's published error (`band`, `pricing.speedup_band`): the range `sweep` prints, over this schedule's
    table."""
    expected, step = table["expected_tokens"], table["step_time_s"]
    best = (expected[None, 1:] * step[:, :1] / step[:, 1:]).max(axis=1) if expected.size > 1 else \
        np.zeros(step.shape[0])
    ends = [int(get_break_even_batch(table["batch"], pays)) for pays in band.get_pays_at_ends(best)]
    earliest, latest = ends
    carried = band.source[band.source.index("carried over"):] if "carried over" in band.source else ""
    within = (f"within engine {scenario.engine_name}'s published speedup error (+-{band.high_error_x:.2f}x"
              + (f", {carried}" if carried else "") + ")")
    if earliest < 0:
        return f"{within}, steady batches pay up to batch {max_batch} at either end"
    if latest < 0:
        return (f"{within}, steady batches stop paying from batch {earliest} at its low end and pay up to batch "
                f"{max_batch} at its high end")
    span = str(earliest) if earliest == latest else f"{earliest} to {latest}"
    return f"{within}, steady batches stop paying from batch {span}"


def get_batch_1_answer(scenario: Scenario, context_tokens: int, table: dict) -> str:
    """The speedup at batch 1 with its k, how it moves with alpha -+ 0.1, and the step times' datasheet band: the
    interval a config is read with."""
    from dataclasses import replace

    from ..pricing.sensitivity import get_alpha_sensitivity
    from ..timing.datasheet_band import get_datasheet_band

    k = int(table["best_k"][0])
    speedup = float(table["expected_tokens"][k] * table["step_time_s"][0, 0] / table["step_time_s"][0, k])
    text = f"at batch 1: k = {k}, speedup {speedup:.2f}x"
    point = replace(scenario.at(1, context_tokens), k_values=table["k"])
    sensitivity = get_alpha_sensitivity(point)
    if sensitivity is not None:
        rows = sensitivity["rows"]
        text += (f" (alpha {rows[0]['alpha']:g}-{rows[-1]['alpha']:g}: {rows[0]['best_speedup']:.2f}x-"
                 f"{rows[-1]['best_speedup']:.2f}x)")
    if scenario.hardware.measured is None:
        band = get_datasheet_band(scenario.hardware)
        text += f"; step times x{band.low_factor:.2f}-{band.high_factor:.2f} ({band.source})"
    return text


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


def get_fitting_max_batch(scenario: Scenario, max_num_seqs: int, context_tokens: int) -> int:
    """The largest batch the schedule covers: the engine's max_num_seqs, capped by what fits in memory at k = 1 (a
    batch that does not fit is a memory answer: it never gets a k = 0 entry)."""
    fitting = int(np.asarray(scenario.get_max_batch(context_tokens, 1)).reshape(-1)[0])
    if fitting < 1:
        raise InputError(f"{scenario.model.name} + draft {scenario.drafter.name} does not fit in "
                         f"{scenario.hardware.name}'s memory at batch 1 and context {context_tokens}: no config to emit")
    return min(int(max_num_seqs), fitting)


def get_config_header(scenario: Scenario, context_tokens: int) -> str:
    header = (f"# rooflinesim: {scenario.model.name} + draft {scenario.drafter.name} on {scenario.hardware.name} "
              f"(tp {scenario.workload.tensor_parallel}), context {context_tokens} tokens; k* = argmax E(k) / "
              "step time")
    assumed = scenario.get_assumed_line()
    return header + (f"\n# {assumed}" if assumed else "")


__all__ = ["emit_engine_config", "get_config_header", "get_k_by_batch", "get_runs", "ENGINES", "ENGINE_REQUIREMENTS",
           "DOCUMENTED_KEYS"]
