"""Where a step's time goes: expected time split into weight, KV and activation traffic, compute, overhead."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ops.op_cost import COLLECTIVE_KINDS
from ..specs.registry import get_short_name, load_model
from ..scenario.inputs import MAX_CONTEXT_TOKENS, check_positive_int
from ..scenario.builder import Scenario
from ..errors import InputError
from ..step import get_step_cost
from ..units import MILLI, format_count
from .common import attach_warnings, BREAKDOWN_COMPONENTS, _new_figure, _tp_label, get_scenario

def get_step_breakdown(step) -> dict[str, np.ndarray]:
    """Split a StepCost's expected time into weight / KV / activation traffic, compute and overhead (seconds).

    Attribution, op by op (each op's expected time is max(compute, memory) + overhead): the op's kernel overhead goes
    to 'overhead'; the max(...) part goes wholly to its dominant component: to 'compute' when the op is compute-bound,
    otherwise to memory traffic, split between weights, KV cache (reads + writes) and activations (reads + writes) in
    proportion to the bytes the op moves of each. Tensor-parallel collectives (all-reduce, all-gather) go wholly to
    'interconnect'. The step's fixed overhead is added to 'overhead'. The components sum
    to `step.step_time_s` exactly. Time hidden under the dominant side (e.g. the compute of a memory-bound GEMV) is not
    shown: this is where the time goes, not what the hardware does.
    """
    parts = {name: 0.0 for name, _ in BREAKDOWN_COMPONENTS}
    for op, t in zip(step.ops, step.expected):
        if op.kind in COLLECTIVE_KINDS:  # link transfer + latency of a tensor-parallel collective
            parts["interconnect"] = parts["interconnect"] + np.asarray(t.time_s)
            continue
        body = np.asarray(t.time_s) - np.asarray(t.overhead_s)
        compute_bound = np.asarray(t.compute_bound)
        total_bytes = np.asarray(op.bytes, dtype=float)
        safe = np.where(total_bytes > 0, total_bytes, 1.0)
        memory_part = np.where(compute_bound, 0.0, body)
        parts["compute"] = parts["compute"] + np.where(compute_bound, body, 0.0)
        parts["weight traffic"] = parts["weight traffic"] + memory_part * op.weight_bytes / safe
        parts["KV traffic"] = parts["KV traffic"] + memory_part * (op.kv_read_bytes + op.kv_write_bytes) / safe
        parts["activation traffic"] = (parts["activation traffic"]
                                       + memory_part * (op.act_read_bytes + op.act_write_bytes) / safe)
        parts["overhead"] = parts["overhead"] + np.asarray(t.overhead_s)
    parts["overhead"] = parts["overhead"] + step.step_overhead_s + step.engine_s
    shape = np.shape(step.step_time_s)
    return {name: np.broadcast_to(np.asarray(v, dtype=float), shape).copy() for name, v in parts.items()}


def get_breakdown_data(scenario: Scenario, new_tokens: int = 1) -> tuple[object, dict[str, np.ndarray]]:
    """The scenario's step of `new_tokens` per sequence (1: decode, k + 1: verify) at its one batch over its
    contexts, and its time split by `get_step_breakdown`."""
    if scenario.batch.size != 1:
        raise InputError("the step breakdown takes one batch size")
    new_tokens = check_positive_int(new_tokens, "new tokens per sequence", MAX_CONTEXT_TOKENS)
    if scenario.context_tokens.size < 2:
        raise InputError("the step breakdown needs at least two contexts >= 0")
    step = get_step_cost(scenario.hardware, scenario.model, scenario.workload, int(new_tokens), scenario.timing,
                             scenario.context_tokens.astype(float), int(scenario.batch[0]))
    return step, get_step_breakdown(step)


def plot_step_breakdown(
    hw=None,
    model=None,
    batch: int = 1,
    ctx: Sequence[int] | None = None,
    new_tokens: int = 1,
    ax=None,
    **options,
):
    """Stacked expected step time vs context: weight, KV and activation traffic, compute, (interconnect,) overhead.

    `hw` is a Scenario or a hardware name; other deployment options are `build_scenario`'s. `new_tokens` = 1 is a
    decode step, k + 1 a verify step. Contexts default to powers of two from 256 up to the model's maximum. See
    `get_step_breakdown` for how each op's time is attributed; the dashed line is the speed-of-light (roofline)
    step time for comparison.
    """
    if ctx is None and not isinstance(hw, Scenario):
        from ..scenario.inputs import DEFAULT_MODEL

        max_context = load_model(DEFAULT_MODEL if model is None else model).max_context_tokens
        ctx = [2**i for i in range(8, 30) if 2**i <= max_context]
    scenario = get_scenario(hw, model, batch, ctx, speculative=False, **options)
    step, parts = get_breakdown_data(scenario, new_tokens)
    contexts = scenario.context_tokens.astype(float)
    hw_spec, model_spec, w, timing = scenario.hardware, scenario.model, scenario.workload, scenario.timing
    fig, (ax,) = _new_figure((8.5, 5.5), ax)
    shown = [(n, c) for n, c in BREAKDOWN_COMPONENTS if n != "interconnect" or np.any(parts[n] > 0)]
    names = [n for n, _ in shown]
    colors = [c for _, c in shown]
    ax.stackplot(contexts, *[parts[n] / MILLI for n in names], labels=names, colors=colors, alpha=0.9)
    ax.plot(contexts, np.broadcast_to(step.roofline_step_time_s, contexts.shape) / MILLI, color="black", linestyle="--",
            linewidth=1.5, label="speed-of-light step time")
    ax.set_xscale("log", base=2)
    ax.set_xlim(contexts[0], contexts[-1])
    ax.set_xticks(contexts, [format_count(c) for c in contexts], fontsize=8)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("context (tokens already in the KV cache)")
    ax.set_ylabel("expected step time (ms)")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    order = list(range(len(names)))[::-1] + [len(names)]  # legend top-to-bottom matches the stack
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left", fontsize=8)
    what = "decode" if int(new_tokens) == 1 else f"verify (k + 1 = {int(new_tokens)} tokens)"
    ax.set_title(f"Where a {what} step's time goes: {get_short_name(model_spec)} on {get_short_name(hw_spec)}"
                 f"{_tp_label(scenario)}, batch {int(scenario.batch[0])}\nweights {w.weight_dtype}, KV {w.kv_dtype}, "
                 f"compute {w.activation_dtype}; {timing.name} timing", fontsize=10)
    return attach_warnings(fig, scenario)


