"""What every timing model offers: the per-op time record and the protocol the step model calls.

A timing model turns one op's FLOPs and bytes (`ops.OpCost`) into seconds on one device. Two peers implement it,
side by side and both immutable: `datasheet.DatasheetTiming` (the roofline with achievable fractions of the
datasheet peaks) and `measured.MeasuredTiming` (a calibration profile's tables and fits). The step model never asks
which one it has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..ops.op_cost import MATMUL_KINDS, OpCost
from ..specs.hardware import HardwareSpec


@dataclass(frozen=True)
class OpTime:
    """Time of all `count` instances of one op in a step, arrays over the workload grid (seconds)."""

    compute_time_s: np.ndarray
    memory_time_s: np.ndarray
    overhead_s: np.ndarray
    time_s: np.ndarray
    compute_bound: np.ndarray  # bool
    #: what fully cached weights would take off `time_s` against fully cold ones (a measured profile's cache-reuse
    #: curve; 0 elsewhere): how the time moves with the warmth the curve reads (`StepCost.priced_time_s`)
    warm_saving_s: np.ndarray | float = 0.0


#: a two-sided 90 % interval of a normal distribution, in standard deviations
Z90 = 1.6449

#: the op families whose errors are independent of each other (within a family one table or fit prices every op,
#: so their errors move together)
OP_FAMILIES = ("linear", "attention", "elementwise", "other")


#: op name -> elementwise family measured by `rooflinesim calibrate`.
ELEMENTWISE_FAMILY = {
    "attn_norm": "norm", "mlp_norm": "norm", "final_norm": "norm",
    "rope": "rope", "mlp_act": "mlp_act", "attn_residual": "residual", "mlp_residual": "residual",
    "kv_cache_write": "kv_cache_write", "embedding": "embedding",
    "sample": "sample", "accept_rule": "accept_rule",
    # what an implementation adds beyond the reference decoder (`ops.implementation_ops`): copies into a fresh
    # allocation (a concatenating KV cache, a materialised GQA expansion) and RoPE's extra elementwise passes
    "kv_concat": "kv_concat", "kv_repeat": "kv_concat", "rope_extra_pass": "residual",
}

#: ops an engine runs after a forward pass rather than inside it (no in-model slow-down applies to them)
AFTER_FORWARD_OPS = ("sample", "accept_rule")
#: the copies a concatenating KV cache makes each step (`ops.implementation_ops.kv_append_ops`)
KV_COPY_OPS = ("kv_concat", "kv_repeat")


def is_outside_in_model_scale(op: OpCost) -> bool:
    """Whether the in-model scale leaves `op` alone: an engine's work after the forward pass, the dispatch count, and
    the copies of a concatenating KV cache. The scale is fitted on whole reference decoders, which write their static
    cache in place and have no such copy, so nothing measured how the copy slows down in a forward pass; its own
    benchmark times it as a step runs it (cold sources, a fresh allocation from the mmap threshold up). Scaled with
    the rest, transformers' steps at batch 16 and long contexts, where the copies weigh most, were priced 10-40 %
    high in bf16 (2-core Intel Xeon VM; docs/calibration.md section 3)."""
    return op.name in AFTER_FORWARD_OPS or op.kind == "dispatch" or op.name in KV_COPY_OPS


def get_op_family(op: OpCost) -> str:
    """The op family whose measured error this op shares: linear, attention, elementwise or other."""
    if op.kind in ("linear", "attention"):
        return op.kind
    return "elementwise" if op.name in ELEMENTWISE_FAMILY else "other"


@dataclass(frozen=True)
class RelativeSigmas:
    """Relative standard errors (1 sigma) of a calibrated prediction, from what calibration measured: one per op
    family (`OP_FAMILIES`, independent of each other, fully correlated within a family) and one shared by every op
    of a step (drift, the in-model scale). `step.StepCost.rel_sigma` combines them over a step."""

    by_family: dict[str, float]
    shared: float
    #: the part of each family's error that is per-call noise (independent between two steps); the rest is the
    #: family's fit error, the same in every step the family prices
    noise_by_family: dict[str, float] = field(default_factory=dict)

    def fit(self, family: str) -> float:
        total, noise = self.by_family.get(family, 0.0), self.noise_by_family.get(family, 0.0)
        return float(np.sqrt(max(total**2 - noise**2, 0.0)))


@runtime_checkable
class TimingModel(Protocol):
    """The methods the step and speculative models call. Implementations are immutable: binding returns a copy."""

    name: str

    def for_step(self, ops: list[OpCost]) -> "TimingModel":
        """This model bound to one step's ops (a measured model reads the step's weight working set from them)."""
        ...

    def with_co_resident(self, weight_bytes: float) -> "TimingModel":
        """This model with another model's weights passing through the caches between its steps (the draft and the
        target in a speculative loop); a model without caches returns itself."""
        ...

    def get_op_time(self, op: OpCost, compute_dtype: str) -> OpTime:
        """All `op.count` instances of `op` computed in `compute_dtype` (seconds, arrays over the grid)."""
        ...

    def get_step_overhead_s(self, num_layers: int, compute_dtype: str) -> float:
        """Dispatch cost of one forward step of `num_layers` layers in `compute_dtype` beyond its ops' times."""
        ...

    def get_warnings(self, ops: list[OpCost], compute_dtype: str) -> list[str]:
        """What the user should know about how these ops were priced (e.g. outside the measured range)."""
        ...

    def get_relative_sigmas(self, compute_dtype: str) -> RelativeSigmas | None:
        """The relative errors of this model's op times in `compute_dtype`; None where nothing was measured (the
        datasheet roofline: its error is a model error no measurement describes, so it reports no interval)."""
        ...

    def get_cache_sigma_s(self, expected: list[OpTime], num_layers: int, compute_dtype: str):
        """How far (s, 1 sigma) a step priced as `expected` moves with the measured cache-reuse curve; read only
        where `get_relative_sigmas` gives errors (0 where no curve was timed more than once)."""
        ...


def get_op_peak_flops_per_s(hw: HardwareSpec, op: OpCost, compute_dtype: str) -> float:
    """Matmul-like ops run at the compute dtype's peak; elementwise work at the fp32 (vector) peak."""
    if op.kind in MATMUL_KINDS:
        return hw.get_peak_flops_per_s(compute_dtype)
    return hw.get_peak_flops_per_s("fp32")
