"""The scenario's options in named groups: the primary interface of `build_scenario`, `predict` and `sweep`.

- `Deployment`: what runs where: hardware, target model, tensor parallelism (target and draft), calibration, engine,
  attention kernel.
- `Precision`: weight, KV-cache and activation dtypes, the quantisation group and the quantised kernel.
- `Speculation`: whether and how to speculate: drafter, acceptance (i.i.d., per position or measured), draft lengths,
  trees, self-drafting budgets, the draft loop's variants.
- `Memory`: what memory fit and max batch may use, and whether a context above the model's maximum is modelled.
- `Sampling`: whether the sampler (and, when speculating, the acceptance rule) is priced after each forward pass.

Each field's default lives here, once: either a value, or None where `build_scenario` resolves it (per device or per
model, from `scenario.inputs`' DEFAULT_* constants) and lists the value it used in `Scenario.assumed`. Groups hold
inputs as the user gave them: every check happens in `build_scenario`.

Flat keywords (`build_scenario(hw, model, batch, ctx, k=3, draft=...)`) stay accepted as a convenience: each names one
field of one group (`FLAT_OPTIONS`) and `get_scenario_options` is the one function that maps them into the groups,
on top of any groups given. A keyword left at `DEFAULT` is not given.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields, replace
from textwrap import wrap
from typing import TYPE_CHECKING, Sequence

from ..errors import InputError
from ..units import DEFAULT_QUANT_GROUP_SIZE
from .inputs import (
    DEFAULT_ALPHA, DEFAULT_DRAFTER, DEFAULT_ENGINE, DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_HARDWARE,
    DEFAULT_HEAD_LAYER_FRACTION, DEFAULT_K_MAX, DEFAULT_MEMORY_RESERVE_BYTES, DEFAULT_MODEL, DEFAULT_WEIGHT_DTYPE,
)

if TYPE_CHECKING:  # annotations only: the groups hold inputs as given, the builder resolves them
    from ..acceptance.measured import MeasuredAcceptance
    from ..acceptance.trees import TreeShape
    from ..specs.engine import EngineSpec
    from ..specs.hardware import HardwareSpec
    from ..specs.model import ModelSpec


class _Default:
    """The marker of a keyword not given (its group's default applies); shown as DEFAULT in signatures."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"

    def __reduce__(self):
        return "DEFAULT"


#: a keyword of `predict` / `sweep` left at DEFAULT takes its group's default (`FLAT_OPTIONS`)
DEFAULT = _Default()


def _option(default, doc: str, flat: str | None = None):
    """A group field: its one default, its meaning with the unit, and its flat keyword when named otherwise."""
    return field(default=default, metadata={"doc": doc, "flat": flat})


@dataclass(frozen=True)
class Deployment:
    """What runs where: the hardware, the target model, how both are sharded, the engine and the attention kernel."""

    hardware: str | HardwareSpec | None = _option(
        None, f"hardware name, alias, YAML path or HardwareSpec (None: {DEFAULT_HARDWARE})", flat="hw")
    model: str | ModelSpec | None = _option(
        None, f"target model name, YAML path, HF config.json (or its folder) or ModelSpec (None: {DEFAULT_MODEL})")
    tp: int = _option(1, "tensor-parallel degree of the target: devices it is sharded over (count)")
    draft_tp: int | None = _option(
        None, "a draft model's own tensor-parallel degree (count; None: the target's when it divides the draft's "
              "heads, else 1 with a warning)")
    calibration: str | None = _option(
        None, "measured profile (YAML path) applied to the hardware (None: its datasheet)")
    engine: str | EngineSpec | None = _option(
        None, "serving engine whose launch, host and speculative costs are priced: a name, alias, YAML path or "
              f"EngineSpec (None: {DEFAULT_ENGINE}; 'ideal': bare kernels)")
    attention: str = _option(
        "flash", "attention kernel: flash, unfused, or per-head (K/V read once per query head, no GQA sharing)")
    implementation: str | None = _option(
        None, "the code that runs the model: reference (the decoder calibration times), hf (transformers eager), "
              "gptfast, or an implementation YAML; it adds what that code does beyond the reference (None: reference)")


@dataclass(frozen=True)
class Precision:
    """Number formats: weights, KV cache and activations, and how quantised weights are stored and run."""

    weight_dtype: str | None = _option(
        None, f"weight dtype: fp32, bf16, fp16, fp8, int8, int4 (None: {DEFAULT_WEIGHT_DTYPE})")
    kv_dtype: str | None = _option(
        None, "KV-cache dtype (None: the float dtype of the weights, bf16 for quantised ones)")
    activation_dtype: str | None = _option(
        None, "activation dtype (None: the float dtype of the weights; fp8 weights on a device with an fp8 peak "
              "compute in fp8)")
    quant_group_size: int = _option(DEFAULT_QUANT_GROUP_SIZE, "weights per scale of int8/int4 weights (count)")
    quant_kernel: str | None = _option(
        None, "kernel of int8/int4/fp8 weights: generic, tinygemm, marlin, ... (None: the hardware's default for the "
              "weight dtype, else generic)")


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding: the drafter, its acceptance, the draft lengths priced and the draft loop's variants."""

    enabled: bool = _option(True, "speculate (False: no drafter; plain decoding only)", flat="speculative")
    draft: str | ModelSpec | None = _option(
        None, "draft model name, YAML path, config.json or ModelSpec; an EAGLE head's config.json for drafter "
              "eagle/eagle3/mtp (None: the smallest shipped model of the target's tokenizer family)")
    drafter: str | None = _option(
        None, f"drafter kind: model, ngram, head, eagle, eagle3, medusa, mtp, self (None: {DEFAULT_DRAFTER})")
    alpha: float | Sequence[float] | None = _option(
        None, f"i.i.d. acceptance rate in [0, 1], or several for a grid (probability; None: {DEFAULT_ALPHA:g})")
    alpha_per_position: str | Sequence[float] | None = _option(
        None, "conditional acceptance rate per draft position, a list or '0.9,0.8' (probabilities; instead of alpha)")
    acceptance: str | MeasuredAcceptance | None = _option(
        None, "measured or published acceptance instead of alpha: an engine log or metrics file, a preset name, or "
              "a MeasuredAcceptance")
    acceptance_k: int | None = _option(
        None, "the engine's draft length for an acceptance file that does not state it (tokens)")
    acceptance_as_iid: bool = _option(
        False, "turn a measured per-position acceptance into the i.i.d. rate with the same expected tokens (what "
               "grids price)")
    k: int | None = _option(None, "the draft length to report (draft tokens per step; None: the best of k_values)")
    k_values: Sequence[int] | None = _option(
        None, f"the draft lengths to price (draft tokens per step; None: 0..{DEFAULT_K_MAX}, or 0..the number of "
              "per-position rates)")
    tree: str | TreeShape | None = _option(
        None, "draft a tree: 'steps,topk,num_draft_tokens' (SGLang's flags), a JSON list of Medusa paths, or a "
              "TreeShape; k then counts the tree's draft tokens (None: a chain)")
    draft_kv_budget: int | None = _option(
        None, "drafter self: KV tokens a draft step reads (tokens; None: the whole context)")
    draft_layer_fraction: float | None = _option(
        None, "drafter self: share of the target's layers a draft step runs (fraction; None: 1)")
    head_layer_fraction: float = _option(
        DEFAULT_HEAD_LAYER_FRACTION, "drafter head: cost of one head draft step as a fraction of one target layer "
                                     "(fraction)")
    extra_draft_pass: bool = _option(False, "add gpt-fast's extra draft pass when all k drafts are accepted")
    draft_first_step_tokens: int = _option(
        1, "tokens the first draft step reads: 2 when the loop re-reads the last two committed tokens (tokens; a "
           "draft model only)")
    ngram_match_fraction: float | None = _option(
        None, "drafter ngram: share of sequences that find a match and draft k tokens in a step; the others verify "
              "one token, as vLLM's n-gram proposer runs them (fraction; None: 1, every sequence drafts)")


@dataclass(frozen=True)
class Memory:
    """What memory fit and max batch may use (capacity x utilisation - reserve), and the model's context limit."""

    gpu_memory_utilization: float | None = _option(
        None, f"share of device memory the engine may use (fraction in (0, 1]; None: "
              f"{DEFAULT_GPU_MEMORY_UTILIZATION:g}, vLLM's; 1 on a CPU)")
    memory_reserve_bytes: float | None = _option(
        None, "memory held beyond weights, KV cache and step activations (bytes; None: "
              f"{DEFAULT_MEMORY_RESERVE_BYTES / (1 << 30):g} GiB; 0 on a CPU)")
    allow_long_context: bool = _option(
        False, "model a context above the model's maximum (with a warning) instead of refusing it")


@dataclass(frozen=True)
class Sampling:
    """What runs after each forward pass besides the model."""

    priced: bool = _option(
        False, "price the sampler over the logits and, when speculating, the acceptance rule (False: bare forward "
               "passes, what calibration times)", flat="sampling")


#: the groups in the order `build_scenario` takes them, by keyword
GROUPS = {"deployment": Deployment, "precision": Precision, "speculation": Speculation, "memory": Memory,
          "sampling": Sampling}


@dataclass(frozen=True)
class ScenarioOptions:
    """One group of each kind: every option of a scenario, as given."""

    deployment: Deployment = Deployment()
    precision: Precision = Precision()
    speculation: Speculation = Speculation()
    memory: Memory = Memory()
    sampling: Sampling = Sampling()


def _flat_options() -> dict[str, tuple[str, str]]:
    out = {}
    for group_name, group in GROUPS.items():
        for f in fields(group):
            out[f.metadata["flat"] or f.name] = (group_name, f.name)
    return out


#: flat keyword -> (group keyword, field): `hw` -> ("deployment", "hardware"), `k` -> ("speculation", "k"), ...
FLAT_OPTIONS: dict[str, tuple[str, str]] = _flat_options()


def get_scenario_options(deployment: Deployment | None = None, precision: Precision | None = None,
                         speculation: Speculation | None = None, memory: Memory | None = None,
                         sampling: Sampling | bool = DEFAULT, **flat) -> ScenarioOptions:
    """The one mapping of flat keywords into the groups: the groups given (None, or DEFAULT for `sampling`: all defaults), each flat keyword
    (`FLAT_OPTIONS`) set on its group's field on top. A keyword at DEFAULT is skipped; `sampling` given as anything but
    a `Sampling` is the flat keyword `Sampling.priced`. An unknown keyword is a TypeError naming close ones."""
    given = {"deployment": deployment, "precision": precision, "speculation": speculation, "memory": memory}
    if sampling is not DEFAULT and not isinstance(sampling, Sampling):
        flat["sampling"], sampling = sampling, None
    given["sampling"] = sampling
    updates: dict[str, dict] = {}
    for name, value in flat.items():
        if value is DEFAULT:
            continue
        where = FLAT_OPTIONS.get(name)
        if where is None:
            close = difflib.get_close_matches(name, list(FLAT_OPTIONS) + list(GROUPS), n=3)
            raise TypeError(f"unexpected keyword argument {name!r}"
                            + (f"; did you mean {', '.join(close)}?" if close else ""))
        updates.setdefault(where[0], {})[where[1]] = value
    groups = {}
    for name, group in given.items():
        cls = GROUPS[name]
        if group is DEFAULT or group is None:
            group = None
        elif not isinstance(group, cls):
            raise InputError(f"{name} must be a rooflinesim.scenario.groups.{cls.__name__}, got {type(group).__name__}")
        if name in updates:
            group = replace(group, **updates[name]) if group is not None else cls(**updates[name])
        if group is not None:
            groups[name] = group
    return ScenarioOptions(**groups) if groups else _NO_OPTIONS


_NO_OPTIONS = ScenarioOptions()


def get_default(flat: str):
    """The one default of a flat keyword (`FLAT_OPTIONS`): its group field's."""
    group_name, name = FLAT_OPTIONS[flat]
    return GROUPS[group_name].__dataclass_fields__[name].default


def describe_options(exclude: tuple[str, ...] = (), width: int = 112) -> str:
    """The flat keywords as docstring lines: `name: meaning (unit) [Group.field, default value]`, from the fields, so
    that help() of `predict` and `sweep` shows each option's one default."""
    lines = []
    for group_name, group in GROUPS.items():
        lines.append(f"{group_name} ({group.__name__}):")
        for f in fields(group):
            flat = f.metadata["flat"] or f.name
            if flat in exclude:
                continue
            lines += wrap(f"{flat}: {f.metadata['doc']} [{group.__name__}.{f.name}, default {f.default!r}]",
                          width, initial_indent="    ", subsequent_indent="        ")
    return "\n".join(lines)


def _document(group) -> None:
    """Append each field's meaning, unit and default to the group's docstring (what help() shows)."""
    group.__doc__ += "\n\nFields (default in brackets):\n" + "\n".join(
        "\n".join(wrap(f"{f.name}: {f.metadata['doc']} [{f.default!r}]", 112, initial_indent="    ",
                       subsequent_indent="        ")) for f in fields(group))


for _group in GROUPS.values():
    _document(_group)


__all__ = ["DEFAULT", "Deployment", "FLAT_OPTIONS", "GROUPS", "Memory", "Precision", "Sampling", "ScenarioOptions",
           "Speculation", "describe_options", "get_default", "get_scenario_options"]
