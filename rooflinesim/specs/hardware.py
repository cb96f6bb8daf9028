"""The hardware specification: peaks, bandwidth, capacity, efficiencies and the interconnect.

Specs are pydantic models: frozen, unknown keys rejected, strict (no booleans or strings taken as numbers, no
fractional integers) and finite, versioned with `schema_version`. Every number is SI and its key names its unit.
Derived quantities (parameter count, KV bytes per token, ridge points) are computed here and nowhere else.
ModelSpec lives in `specs.model`, the measured-profile schema in `specs.measured`, the workload in `specs.workload`.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from .measured import MeasuredProfile
from .base import SpecModel, StrTuple
from ..units import normalize_dtype

#: The version hardware files (and measured profiles) are written in.
SCHEMA_VERSION = 1

#: When a device has no peak for the compute dtype, use the first of these it has (documented in `show`). Floating
#: point chains continue to other floating-point paths only: a device that runs fp32 on its bf16 units (TPU v5e) must
#: not be priced at an integer peak it also lists. Integer chains may fall back to floats (dequantise and compute).
COMPUTE_DTYPE_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp32": ("fp32", "tf32", "bf16", "fp16"),
    "tf32": ("tf32", "fp32", "bf16", "fp16"),
    "bf16": ("bf16", "fp16", "fp32", "tf32"),
    "fp16": ("fp16", "bf16", "fp32", "tf32"),
    "fp8": ("fp8", "bf16", "fp16", "fp32", "tf32"),
    "int8": ("int8", "fp8", "bf16", "fp16", "fp32", "tf32"),
    "int4": ("int4", "int8", "fp8", "bf16", "fp16", "fp32", "tf32"),
}


class PeerToPeerAllReduce(SpecModel):
    """Engines' own small-message all-reduce over peer-to-peer loads and stores (vLLM / SGLang custom all-reduce,
    TensorRT-LLM one-shot / two-shot, PyTorch intra-node comm): one kernel, one barrier per phase.

    one-shot: latency + (N - 1) x bytes / bandwidth (every device reads every peer's whole buffer);
    two-shot: 2 x latency + 2 (N - 1) / N x bytes / bandwidth (reduce-scatter, then all-gather).
    """

    latency_s: float = Field(ge=0, description="fixed cost of one phase: launch-free kernel time + barrier")
    latency_per_peer_s: float = Field(default=0.0, ge=0, description="extra per peer (flags to poll)")
    bandwidth_bytes_per_s: float = Field(gt=0, description="achieved per device at decode message sizes")
    max_bytes: float = Field(gt=0, description="above this message size the engine falls back to NCCL")
    max_devices: int = Field(default=8, gt=1, description="largest TP degree the kernel runs at on this link")


class Interconnect(SpecModel):
    """Device-to-device link used by tensor-parallel collectives.

    The ring (NCCL) costs `ring_base_latency_s` + steps x `latency_s` + its bytes over the link's bandwidth; with a
    `peer_to_peer_allreduce` block the engine's one-shot / two-shot kernels are also available and the fastest of
    the algorithms is taken per message size and TP degree (`timing.collectives`). Version-1 files without the
    optional fields price the ring alone, as before.
    """

    kind: str = Field(description="e.g. nvlink4, pcie5, infinity-fabric, ici")
    bandwidth_bytes_per_s_per_direction: float = Field(gt=0)
    latency_s: float = Field(ge=0, description="ring: per step (NCCL's hwLat of the low-latency protocol)")
    ring_base_latency_s: float = Field(default=0.0, ge=0, description="ring: once per collective (NCCL baseLat)")
    ring_bulk_base_latency_s: Optional[float] = Field(
        default=None, ge=0, description="ring, bulk protocol (NCCL Simple): once per collective; with it, the "
                                        "low-latency protocol above moves data at a quarter of the link (NCCL LL)")
    ring_bulk_latency_s: Optional[float] = Field(default=None, ge=0, description="ring, bulk protocol: per step")
    peer_to_peer_allreduce: Optional[PeerToPeerAllReduce] = None


class Efficiency(SpecModel):
    """Achievable fractions of the datasheet peaks and a fixed cost per kernel, used for the *expected* time.

    The speed-of-light (roofline) time uses fractions of 1 and no overhead.
    """

    memory_fraction: float = Field(gt=0, le=1)
    compute_fraction: float = Field(gt=0, le=1)
    compute_fraction_by_dtype: dict[str, float] = Field(
        default_factory=dict,
        description="matmul compute fraction for a compute dtype whose best GEMMs reach a different share of its peak "
                    "than compute_fraction's (H100 fp8: cuBLASLt reaches 0.65 of the fp8 peak where bf16 reaches 0.80)",
    )
    kernel_overhead_s: float = Field(ge=0)
    compute_memory_overlap: float = Field(
        default=1.0, ge=0, le=1,
        description="how far an op's shorter time (math or traffic) hides under the longer in the expected time: "
                    "max(c, m) + (1 - overlap) x min(c, m); 1 is the roofline's perfect overlap, less where kernels at "
                    "moderate intensity (prefill GEMMs of a few hundred to a few thousand tokens) reach neither peak "
                    "at once",
    )
    interconnect_fraction: float = Field(
        default=0.85, gt=0, le=1,
        description="achieved share of link bandwidth in collectives (nvbandwidth on 8x H200 measured 0.88 of NVLink)",
    )
    layer_latency_s: float = Field(
        default=0.0, ge=0,
        description="fixed latency each layer adds to a forward step beyond its ops' work: the pipeline floor of an "
                    "SRAM-resident system, where weight streaming is ~free and a token's trip through the layers "
                    "decides the step (0 on GPUs)",
    )


class HardwareSpec(SpecModel):
    schema_version: Literal[1]
    name: str
    aliases: StrTuple = ()
    kind: Literal["gpu", "tpu", "cpu", "asic"]
    vendor: str
    peak_flops_per_s: dict[str, float] = Field(description="dense (no 2:4 sparsity) peak per compute dtype")
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    memory_capacity_bytes: float = Field(gt=0)
    last_level_cache_bytes: float = Field(ge=0)
    interconnect: Optional[Interconnect] = None
    efficiency: Efficiency
    sources: dict[str, str] = Field(description="where each number comes from, keyed by field name")
    notes: str = ""
    quant_kernels: dict[str, str] = Field(
        default_factory=dict, description="weight dtype -> the quantised kernel engines run on this device by default "
                                          "(timing.quant_kernels; none named: 'generic')")
    # A measured profile (written by `rooflinesim calibrate`) carries its fitted tables here.
    measured: Optional[MeasuredProfile] = None

    @field_validator("peak_flops_per_s")
    @classmethod
    def _check_peaks(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("at least one dtype peak is required")
        checked = {}
        for dtype, flops in value.items():
            key = normalize_dtype(dtype)
            if not flops > 0:
                raise ValueError(f"peak for {dtype} must be positive, got {flops}")
            checked[key] = float(flops)
        return checked

    @field_validator("sources")
    @classmethod
    def _check_sources(cls, value: dict[str, str]) -> dict[str, str]:
        for key in ("peak_flops_per_s", "memory_bandwidth_bytes_per_s", "memory_capacity_bytes"):
            if not value.get(key):
                raise ValueError(f"sources must name where {key} comes from")
        return value

    def get_compute_dtype(self, dtype: str) -> str:
        """The dtype whose peak applies when computing in `dtype` on this device (see COMPUTE_DTYPE_FALLBACK)."""
        for candidate in COMPUTE_DTYPE_FALLBACK[normalize_dtype(dtype)]:
            if candidate in self.peak_flops_per_s:
                return candidate
        # No peak on the chain (a device listing only integer peaks, asked for a float): its slowest peak, the
        # conservative choice, rather than its fastest.
        return min(self.peak_flops_per_s, key=self.peak_flops_per_s.__getitem__)

    def get_peak_flops_per_s(self, dtype: str) -> float:
        return self.peak_flops_per_s[self.get_compute_dtype(dtype)]

    def get_ridge_point_flops_per_byte(self, dtype: str) -> float:
        """Arithmetic intensity at which compute time equals memory time (speed of light)."""
        return self.get_peak_flops_per_s(dtype) / self.memory_bandwidth_bytes_per_s

    @property
    def ridge_points_flops_per_byte(self) -> dict[str, float]:
        return {d: p / self.memory_bandwidth_bytes_per_s for d, p in self.peak_flops_per_s.items()}


__all__ = [
    "SCHEMA_VERSION", "COMPUTE_DTYPE_FALLBACK", "Interconnect", "PeerToPeerAllReduce", "Efficiency", "HardwareSpec",
]
