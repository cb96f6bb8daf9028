"""Implementation profiles: what the code running a model does differently from the project's reference decoder.

A calibration profile is measured on `rooflinesim/calibrate/reference/model.py`; a model a user runs is someone
else's code (Hugging Face transformers, gpt-fast, an engine). An `ImplementationSpec` is a small sourced table of the
differences the step model can price, each field a `{value, source}` pair naming the file it was read from:

* `kv_cache_append`: `in_place` (the new token's keys and values written into a preallocated cache) or `concat`
  (the cache grows by `torch.cat` every step: the whole cache read and written into a fresh allocation per layer);
* `rope_extra_passes`: passes over q and k that its RoPE materialises beyond the reference's;
* `gqa_expansion`: `native` (the kernel shares K / V across a query group), `repeat_kv` (K and V expanded to every
  query head in memory) or `repeat_kv_multi_token` (expanded only when a step adds several tokens per sequence);
* `fused_qkv`, `fused_gate_up`: one projection of the concatenated width instead of several;
* `dispatches_per_layer`: aten calls per decoder layer of a decode step (views included);
* `moe_experts` (optional; absent: `batched`): how the routed experts run. `batched`: priced as one op per
  projection over all routed tokens, as the reference step model always has; `grouped_loop`: one GEMM per expert at
  the tokens routed to it, issued for every expert of the layer, empty ones included (transformers' `grouped_mm`
  experts on a CPU), with the gate and up projections of an expert concatenated;
* `moe_dispatches` (optional): aten calls of one MoE block, counted as routing + per_expert x experts +
  per_hit_expert x experts hit (+ dense_mlp for a shared expert), replacing the `dense_mlp` calls of the dense MLP
  that `dispatches_per_layer` counts.

Shipped tables live in `implementations/` (`rooflinesim.data/implementations` in the wheel); a path to a YAML file
works too. `ops.sections` turns a table into ops; the reference table adds none.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import ClassVar, Literal, Optional

from pydantic import Field

from .base import SpecError, SpecModel, StrTuple

#: the implementation every calibration times and every price assumes unless told otherwise
REFERENCE_IMPLEMENTATION = "reference"


class _Sourced(SpecModel):
    source: str = Field(min_length=8, description="the file (and function) the value was read from")


class KvAppend(_Sourced):
    value: Literal["in_place", "concat"]


class GqaExpansion(_Sourced):
    value: Literal["native", "repeat_kv", "repeat_kv_multi_token"]


class SourcedCount(_Sourced):
    value: int = Field(ge=0, le=10_000)


class SourcedFlag(_Sourced):
    value: bool


class MoeExperts(_Sourced):
    value: Literal["batched", "grouped_loop"]


class MoeDispatches(_Sourced):
    """aten calls (views included) of one MoE block of a decode step, as a linear count in the experts."""

    routing: int = Field(ge=0, le=100_000, description="router, sort / gather / scatter glue, shared-expert gate")
    per_expert: int = Field(ge=0, le=10_000, description="per expert of the layer, hit or not")
    per_hit_expert: int = Field(ge=0, le=10_000, description="per expert that received tokens")
    dense_mlp: int = Field(ge=0, le=10_000, description="one dense MLP's calls (the shared expert's, and the dense "
                                                        "MLP's share of dispatches_per_layer)")

    def get_block_calls(self, num_experts: int, experts_hit, shared_expert: bool):
        """The block's calls at `experts_hit` experts receiving tokens (an array over the grid)."""
        return (self.routing + self.per_expert * num_experts + self.per_hit_expert * experts_hit
                + (self.dense_mlp if shared_expert else 0))


class ImplementationSpec(SpecModel):
    """One implementation's op inventory as far as pricing needs it (see the module docstring)."""

    schema_version: Literal[1] = 1
    name: str = Field(min_length=1)
    aliases: StrTuple = ()
    description: str = ""
    kv_cache_append: KvAppend
    rope_extra_passes: SourcedCount
    gqa_expansion: GqaExpansion
    fused_qkv: SourcedFlag
    fused_gate_up: SourcedFlag
    dispatches_per_layer: SourcedCount
    moe_experts: Optional[MoeExperts] = None
    moe_dispatches: Optional[MoeDispatches] = None

    #: the fields that carry a value and its source (the last two optional)
    SOURCED_FIELDS: ClassVar[tuple[str, ...]] = ("kv_cache_append", "rope_extra_passes", "gqa_expansion", "fused_qkv",
                                                 "fused_gate_up", "dispatches_per_layer", "moe_experts",
                                                 "moe_dispatches")

    @property
    def grouped_experts(self) -> bool:
        """Whether routed experts run one GEMM per expert (`moe_experts: grouped_loop`)."""
        return self.moe_experts is not None and self.moe_experts.value == "grouped_loop"

    def sources(self) -> dict[str, str]:
        return {name: getattr(self, name).source for name in self.SOURCED_FIELDS if getattr(self, name) is not None}


def list_implementation_names() -> list[str]:
    from .registry import _index

    return sorted({path.stem for path in _index("implementations").values()})


@lru_cache(maxsize=None)
def _load_cached(path: str, text: str) -> ImplementationSpec:
    from .registry import _parse_yaml_mapping, _validate

    return _validate(Path(path), _parse_yaml_mapping(Path(path), text), ImplementationSpec)


def load_implementation(name: "str | ImplementationSpec | None") -> ImplementationSpec:
    """A shipped implementation by name or alias, or a YAML file; None is the reference."""
    if isinstance(name, ImplementationSpec):
        return name
    if name is None:
        name = REFERENCE_IMPLEMENTATION
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"an implementation is a name or a YAML file, got {name!r}")
    from .base import read_spec_text
    from .registry import _resolve

    try:
        path = _resolve(name, "implementations")
    except SpecError as exc:
        raise SpecError(str(exc).replace("(run 'rooflinesim list implementations')",
                                         f"(known: {', '.join(list_implementation_names())})")) from None
    return _load_cached(str(path), read_spec_text(path, "implementation file"))


def get_reference_implementation() -> ImplementationSpec:
    return load_implementation(REFERENCE_IMPLEMENTATION)


__all__ = ["ImplementationSpec", "REFERENCE_IMPLEMENTATION", "get_reference_implementation",
           "list_implementation_names", "load_implementation"]
