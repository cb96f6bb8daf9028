"""The datasheet roofline: per-op time from a spec's peaks, achievable fractions and a per-kernel overhead.

time per op instance = max(FLOPs / (peak x compute fraction), bytes / (bandwidth x memory fraction)) + overhead,
applied per op and then summed (never one max over step totals). `expected` uses the spec's documented fractions and
overhead; `speed_of_light` uses fractions of 1 and no overhead (the *roofline* time). Collectives of tensor
parallelism are timed by the interconnect (`get_collective_time`), whatever the timing model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ops import COLLECTIVE_KINDS, OpCost
from ..specs import HardwareSpec, InputError
from .base import OpTime, TimingModel, get_op_peak_flops_per_s


@dataclass(frozen=True)
class DatasheetTiming:
    """The roofline with achievable fractions of the datasheet peaks and a fixed per-kernel overhead."""

    hw: HardwareSpec
    compute_fraction: float
    memory_fraction: float
    kernel_overhead_s: float
    name: str = "datasheet"

    @classmethod
    def expected(cls, hw: HardwareSpec) -> "DatasheetTiming":
        e = hw.efficiency
        return cls(hw, e.compute_fraction, e.memory_fraction, e.kernel_overhead_s, name="datasheet-expected")

    @classmethod
    def speed_of_light(cls, hw: HardwareSpec) -> "DatasheetTiming":
        return cls(hw, 1.0, 1.0, 0.0, name="roofline")

    def get_op_time(self, op: OpCost, compute_dtype: str) -> OpTime:
        peak = get_op_peak_flops_per_s(self.hw, op, compute_dtype) * self.compute_fraction
        bandwidth = self.hw.memory_bandwidth_bytes_per_s * self.memory_fraction
        compute = op.count * op.flops / peak
        memory = op.count * op.bytes / bandwidth
        overhead = np.full_like(compute, op.count * self.kernel_overhead_s)
        return OpTime(compute, memory, overhead, np.maximum(compute, memory) + overhead, compute > memory)

    def get_step_overhead_s(self, num_layers: int, compute_dtype: str) -> float:
        return 0.0

    def for_step(self, ops: list[OpCost]) -> "DatasheetTiming":
        return self

    def with_co_resident(self, weight_bytes: float) -> "DatasheetTiming":
        return self

    def get_warnings(self, ops: list[OpCost], compute_dtype: str) -> list[str]:
        return []

    def get_relative_sigmas(self, compute_dtype: str) -> None:
        """No interval: nothing was measured (`TimingModel.get_relative_sigmas`)."""
        return None


def get_collective_time(op: OpCost, hw: HardwareSpec, bandwidth_fraction: float = 1.0) -> OpTime:
    """Ring all-reduce / all-gather of `op.comm_bytes` over N devices, alpha-beta model per instance:

    all-reduce: 2(N-1) x latency + 2(N-1)/N x bytes / link bandwidth (reduce-scatter then all-gather);
    all-gather: (N-1) x latency + (N-1)/N x bytes / link bandwidth. Bandwidth is per direction of one link.
    """
    if hw.interconnect is None:
        raise InputError(f"{hw.name} has no interconnect in its spec: tensor parallelism cannot be modelled")
    n = float(op.dims["devices"])
    steps = 2 * (n - 1) if op.kind == "allreduce" else (n - 1)
    link = hw.interconnect.bandwidth_bytes_per_s_per_direction * bandwidth_fraction
    transfer = op.count * steps / n * op.comm_bytes / link
    latency = np.full_like(transfer, op.count * steps * hw.interconnect.latency_s)
    zero = np.zeros_like(transfer)
    return OpTime(zero, transfer, latency, transfer + latency, zero.astype(bool))


def get_op_time(timing: TimingModel, hw: HardwareSpec, op: OpCost, compute_dtype: str,
                interconnect_fraction: float = 1.0) -> OpTime:
    """Collectives are timed by the interconnect; every other op by the timing model."""
    if op.kind in COLLECTIVE_KINDS:
        return get_collective_time(op, hw, interconnect_fraction)
    return timing.get_op_time(op, compute_dtype)
