"""The datasheet roofline: per-op time from a spec's peaks, achievable fractions and a per-kernel overhead.

time per op instance = max(c, m) + (1 - overlap) x min(c, m) + overhead, with c = FLOPs / (peak x compute fraction)
and m = bytes / (bandwidth x memory fraction), applied per op and then summed (never one max over step totals); the
overlap is 1 (the plain roofline max) unless the spec says how much of the shorter time its kernels fail to hide.
`expected` uses the spec's documented fractions, overlap and overhead; `speed_of_light` uses fractions of 1, perfect
overlap and no overhead (the *roofline* time). Collectives of tensor
parallelism are timed by the interconnect (`collectives.get_collective_time`), whatever the timing model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..ops.op_cost import COLLECTIVE_KINDS, MATMUL_KINDS, OpCost
from ..specs.hardware import HardwareSpec
from .base import OpTime, TimingModel, get_op_peak_flops_per_s
from .collectives import get_collective_time
from .quant_kernels import QuantKernel

#: (the spec's id, every field the rates and overhead are worked out from, the compute dtype, the ops' kinds and
#: counts) -> (the spec, the stacked rates, counts and overheads of one point's op list): shared by every timing model
#: with those numbers (a build makes new ones, and each step's speed-of-light model is new)
_STACKED_RATES: dict = {}
_MAX_STACKED_RATES = 256

#: ops whose weights are stored in the workload's (possibly quantised) weight dtype
QUANTISED_KINDS = frozenset({"linear", "expert_linear"})


@dataclass(frozen=True)
class DatasheetTiming:
    """The roofline with achievable fractions of the datasheet peaks and a fixed per-kernel overhead."""

    hw: HardwareSpec
    compute_fraction: float
    memory_fraction: float
    kernel_overhead_s: float
    name: str = "datasheet"
    quant_kernel: QuantKernel | None = None  # scales the linears' fractions when the weights are quantised
    layer_latency_s: float = 0.0  # per-layer pipeline floor (SRAM-resident systems), added once per layer and step
    # matmul compute fraction per compute dtype where it differs from compute_fraction (fp8 GEMMs reach a smaller share
    # of their doubled peak than bf16 ones: the tensor cores double, the data movement feeding them does not)
    compute_fraction_by_dtype: dict[str, float] = field(default_factory=dict)
    # share of the shorter of an op's compute and memory times hidden under the longer (1: the roofline's max)
    compute_memory_overlap: float = 1.0
    #: (op kind, compute dtype) -> `_rates`, filled as ops are priced (not an input: `replace` starts a new one)
    _rates_by_kind: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def expected(cls, hw: HardwareSpec) -> "DatasheetTiming":
        e = hw.efficiency
        return cls(hw, e.compute_fraction, e.memory_fraction, e.kernel_overhead_s, name="datasheet-expected",
                   layer_latency_s=e.layer_latency_s, compute_fraction_by_dtype=dict(e.compute_fraction_by_dtype),
                   compute_memory_overlap=e.compute_memory_overlap)

    @classmethod
    def speed_of_light(cls, hw: HardwareSpec) -> "DatasheetTiming":
        return cls(hw, 1.0, 1.0, 0.0, name="roofline")

    def with_quant_kernel(self, kernel: QuantKernel | None) -> "DatasheetTiming":
        """This model with the linears run by a quantised kernel (None: the bf16 kernel's efficiency)."""
        return replace(self, quant_kernel=kernel)

    def _rates(self, op: OpCost, compute_dtype: str) -> tuple[float, float, float]:
        """(achievable FLOP/s, achievable B/s, compute-memory overlap) of ops of this kind in `compute_dtype`; they
        depend on the op's kind only, so each (kind, dtype) is worked out once per model."""
        key = (op.kind, compute_dtype)
        rates = self._rates_by_kind.get(key)
        if rates is not None:
            return rates
        fraction = self.compute_fraction
        if op.kind in MATMUL_KINDS:
            fraction = self.compute_fraction_by_dtype.get(compute_dtype, fraction)
        peak = get_op_peak_flops_per_s(self.hw, op, compute_dtype) * fraction
        bandwidth = self.hw.memory_bandwidth_bytes_per_s * self.memory_fraction
        overlap = self.compute_memory_overlap
        if self.quant_kernel is not None and op.kind in QUANTISED_KINDS:
            peak *= self.quant_kernel.compute_efficiency
            bandwidth *= self.quant_kernel.memory_efficiency
            if self.quant_kernel.compute_memory_overlap is not None:
                overlap = self.quant_kernel.compute_memory_overlap
        rates = self._rates_by_kind[key] = (peak, bandwidth, overlap)
        return rates

    def get_op_time(self, op: OpCost, compute_dtype: str) -> OpTime:
        if op.kind == "dispatch":  # host-side aten calls: a datasheet has no figure for them (engines price launches)
            zero = np.zeros(np.broadcast(op.flops, op.bytes).shape)
            return OpTime(zero, zero, zero, zero, zero > 0)
        peak, bandwidth, overlap = self._rates(op, compute_dtype)
        compute = op.count * op.flops / peak
        memory = op.count * op.bytes / bandwidth
        overhead = np.full(np.shape(compute), op.count * self.kernel_overhead_s)
        # a kernel hides its loads under its math only partly when neither dominates (a prefill GEMM of a few hundred
        # tokens runs too few tiles to saturate either peak): the shorter time counts by (1 - overlap)
        hidden = overlap * np.minimum(compute, memory)
        total = compute + memory - hidden + overhead
        return OpTime(compute, memory, overhead, total, compute > memory)

    def get_ops_times(self, ops: list[OpCost], compute_dtype: str) -> list[OpTime] | None:
        """`get_op_time` of every op in one numpy evaluation over the stacked ops (the same arithmetic element by
        element, so the same numbers); None when the ops' arrays differ in shape (price them one by one)."""
        if not ops:
            return []
        if all(type(op.flops) is np.float64 and type(op.bytes) is np.float64 and op.kind != "dispatch" for op in ops):
            return self._get_point_ops_times(ops, compute_dtype)
        shape = ops[0].flops.shape
        if any(op.flops.shape != shape or op.bytes.shape != shape or op.kind == "dispatch" for op in ops):
            return None
        column = (-1,) + (1,) * len(shape)  # one row per op, broadcast over the grid
        rates = np.array([self._rates(op, compute_dtype) for op in ops]).T
        peak, bandwidth, overlap = (r.reshape(column) for r in rates)
        counts = np.array([op.count for op in ops], dtype=float).reshape(column)
        compute = counts * np.stack([op.flops for op in ops]) / peak
        memory = counts * np.stack([op.bytes for op in ops]) / bandwidth
        overhead = np.empty_like(compute)
        overhead[...] = counts * self.kernel_overhead_s
        total = compute + memory - overlap * np.minimum(compute, memory) + overhead
        bound = compute > memory
        return [OpTime(compute[i], memory[i], overhead[i], total[i], bound[i]) for i in range(len(ops))]

    def _get_point_ops_times(self, ops: list[OpCost], compute_dtype: str) -> list[OpTime]:
        """`get_ops_times` at one point (every op's quantities float64 scalars): the same arithmetic over one row per
        op, with the rates and counts of an op list of these kinds and counts worked out once."""
        key = (id(self.hw), self.compute_fraction, self.memory_fraction, self.compute_memory_overlap,
               self.kernel_overhead_s, tuple(self.compute_fraction_by_dtype.items()), self.quant_kernel, compute_dtype,
               tuple([(op.kind, op.count) for op in ops]))
        hit = _STACKED_RATES.get(key)
        if hit is None or hit[0] is not self.hw:  # the spec itself is kept, so its id is never another's
            if len(_STACKED_RATES) >= _MAX_STACKED_RATES:
                _STACKED_RATES.clear()
            peak, bandwidth, overlap = np.array([self._rates(op, compute_dtype) for op in ops]).T
            counts = np.array([op.count for op in ops], dtype=float)
            hit = _STACKED_RATES[key] = (self.hw, (peak, bandwidth, overlap, counts, counts * self.kernel_overhead_s))
        peak, bandwidth, overlap, counts, overhead = hit[1]
        compute = counts * np.array([op.flops for op in ops]) / peak
        memory = counts * np.array([op.bytes for op in ops]) / bandwidth
        total = compute + memory - overlap * np.minimum(compute, memory) + overhead
        return _make_op_times(compute, memory, overhead, total, compute > memory)

    def get_step_overhead_s(self, num_layers: int, compute_dtype: str) -> float:
        return num_layers * self.layer_latency_s

    def for_step(self, ops: list[OpCost]) -> "DatasheetTiming":
        return self

    def with_co_resident(self, weight_bytes: float) -> "DatasheetTiming":
        return self

    def get_warnings(self, ops: list[OpCost], compute_dtype: str) -> list[str]:
        return []

    def get_relative_sigmas(self, compute_dtype: str) -> None:
        """No interval: nothing was measured (`TimingModel.get_relative_sigmas`)."""
        return None

    def get_cache_sigma_s(self, expected: list[OpTime], num_layers: int, compute_dtype: str) -> float:
        """No cache-reuse curve was measured (`TimingModel.get_cache_sigma_s`)."""
        return 0.0


def _make_op_times(compute, memory, overhead, total, bound) -> list[OpTime]:
    """`list(map(OpTime, ...))` over one row per op: the dataclass's `__init__` sets each field of a frozen instance
    through `object.__setattr__`, a point makes some 70 of them, so the fields go into each instance's dict at once
    (the same objects: `tests/test_pricing_fast_paths.py`)."""
    times = []
    for c, m, o, t, b in zip(compute, memory, overhead, total, bound):
        time = _new_time(OpTime)
        time.__dict__.update(compute_time_s=c, memory_time_s=m, overhead_s=o, time_s=t, compute_bound=b,
                             warm_saving_s=0.0)
        times.append(time)
    return times


_new_time = object.__new__


def get_op_time(timing: TimingModel, hw: HardwareSpec, op: OpCost, compute_dtype: str,
                interconnect_fraction: float = 1.0) -> OpTime:
    """Collectives are timed by the interconnect; every other op by the timing model."""
    if op.kind in COLLECTIVE_KINDS:
        return get_collective_time(op, hw, interconnect_fraction)
    return timing.get_op_time(op, compute_dtype)


def get_ops_times(timing: TimingModel, hw: HardwareSpec, ops: list[OpCost], compute_dtype: str,
                  interconnect_fraction: float = 1.0) -> list[OpTime]:
    """`get_op_time` of each op: the collectives by the interconnect, the others in one evaluation where the timing
    model offers `get_ops_times` (the datasheet's), else one by one."""
    batched = getattr(timing, "get_ops_times", None)
    times = None if batched is None else batched([op for op in ops if op.kind not in COLLECTIVE_KINDS], compute_dtype)
    if times is None:
        return [get_op_time(timing, hw, op, compute_dtype, interconnect_fraction) for op in ops]
    priced = iter(times)
    return [get_collective_time(op, hw, interconnect_fraction) if op.kind in COLLECTIVE_KINDS else next(priced)
            for op in ops]
