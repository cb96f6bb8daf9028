"""What every timing model offers: the per-op time record and the protocol the step model calls.

A timing model turns one op's FLOPs and bytes (`ops.OpCost`) into seconds on one device. Two peers implement it,
side by side and both immutable: `datasheet.DatasheetTiming` (the roofline with achievable fractions of the
datasheet peaks) and `measured.MeasuredTiming` (a calibration profile's tables and fits). The step model never asks
which one it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ..ops import MATMUL_KINDS, OpCost
from ..specs import HardwareSpec


@dataclass(frozen=True)
class OpTime:
    """Time of all `count` instances of one op in a step, arrays over the workload grid (seconds)."""

    compute_time_s: np.ndarray
    memory_time_s: np.ndarray
    overhead_s: np.ndarray
    time_s: np.ndarray
    compute_bound: np.ndarray  # bool


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


def get_op_peak_flops_per_s(hw: HardwareSpec, op: OpCost, compute_dtype: str) -> float:
    """Matmul-like ops run at the compute dtype's peak; elementwise work at the fp32 (vector) peak."""
    if op.kind in MATMUL_KINDS:
        return hw.get_peak_flops_per_s(compute_dtype)
    return hw.get_peak_flops_per_s("fp32")
