"""Timing models, peers behind one protocol: the datasheet roofline and a measured calibration profile."""

from __future__ import annotations

from ..specs.hardware import HardwareSpec
from .base import OP_FAMILIES, Z90, OpTime, RelativeSigmas, TimingModel, get_op_family, get_op_peak_flops_per_s
from .collectives import get_collective_algorithm, get_collective_time
from .datasheet import DatasheetTiming, get_op_time
from .linear_tables import LinearModel
from .measured import MeasuredTiming


def get_timing_model(hw: HardwareSpec) -> TimingModel:
    """The expected-time model of a spec: its measured profile's tables when it carries one, else the datasheet."""
    if hw.measured is not None:
        return MeasuredTiming.from_spec(hw)
    return DatasheetTiming.expected(hw)


__all__ = [
    "OP_FAMILIES", "Z90", "RelativeSigmas", "get_op_family", "OpTime", "TimingModel", "DatasheetTiming",
    "MeasuredTiming", "LinearModel", "get_timing_model", "get_collective_time", "get_collective_algorithm",
    "get_op_time", "get_op_peak_flops_per_s",
]
