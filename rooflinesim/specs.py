"""Validated specifications: hardware, models and the workload of one forward step.

Specs are pydantic models: frozen, unknown keys rejected, versioned with `schema_version`. Every number is SI and
its key names its unit. Derived quantities (parameter count, KV bytes per token, ridge points) are computed here and
nowhere else.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .units import DTYPES, get_dtype_bytes, normalize_dtype

SCHEMA_VERSION = 1

#: When a device has no peak for the compute dtype, use the first of these it has (documented in `show`).
COMPUTE_DTYPE_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp32": ("fp32",),
    "tf32": ("tf32", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "bf16", "fp32"),
    "fp8": ("fp8", "bf16", "fp16", "fp32"),
    "int8": ("int8", "fp8", "bf16", "fp16", "fp32"),
    "int4": ("int4", "int8", "fp8", "bf16", "fp16", "fp32"),
}


class InputError(ValueError):
    """A workload the user asked for that makes no sense. The message is meant for the user as is."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Interconnect(_Strict):
    """Device-to-device link used by tensor-parallel collectives."""

    kind: str = Field(description="e.g. nvlink4, pcie5, infinity-fabric, ici")
    bandwidth_bytes_per_s_per_direction: float = Field(gt=0)
    latency_s: float = Field(ge=0)


class Efficiency(_Strict):
    """Achievable fractions of the datasheet peaks and a fixed cost per kernel, used for the *expected* time.

    The speed-of-light (roofline) time uses fractions of 1 and no overhead.
    """

    memory_fraction: float = Field(gt=0, le=1)
    compute_fraction: float = Field(gt=0, le=1)
    kernel_overhead_s: float = Field(ge=0)


class HardwareSpec(_Strict):
    schema_version: Literal[1]
    name: str
    aliases: tuple[str, ...] = ()
    kind: Literal["gpu", "tpu", "cpu"]
    vendor: str
    peak_flops_per_s: dict[str, float] = Field(description="dense (no 2:4 sparsity) peak per compute dtype")
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    memory_capacity_bytes: float = Field(gt=0)
    last_level_cache_bytes: float = Field(ge=0)
    interconnect: Optional[Interconnect] = None
    efficiency: Efficiency
    sources: dict[str, str] = Field(description="where each number comes from, keyed by field name")
    notes: str = ""
    # A measured profile (written by `rooflinesim calibrate`) carries its fitted tables here.
    measured: Optional[dict] = None

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
        return max(self.peak_flops_per_s, key=self.peak_flops_per_s.__getitem__)

    def get_peak_flops_per_s(self, dtype: str) -> float:
        return self.peak_flops_per_s[self.get_compute_dtype(dtype)]

    def get_ridge_point_flops_per_byte(self, dtype: str) -> float:
        """Arithmetic intensity at which compute time equals memory time (speed of light)."""
        return self.get_peak_flops_per_s(dtype) / self.memory_bandwidth_bytes_per_s

    @property
    def ridge_points_flops_per_byte(self) -> dict[str, float]:
        return {d: p / self.memory_bandwidth_bytes_per_s for d, p in self.peak_flops_per_s.items()}


class ModelSpec(_Strict):
    """A decoder-only transformer (Llama family shapes: pre-norm, RoPE, GQA, optionally gated MLP)."""

    schema_version: Literal[1]
    name: str
    aliases: tuple[str, ...] = ()
    architecture: str = Field(description="family, e.g. llama, mistral, qwen2")
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: Optional[int] = Field(default=None, gt=0)
    intermediate_size: int = Field(gt=0)
    gated_mlp: bool = True
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    max_context_tokens: int = Field(gt=0)
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    attention_bias: bool = Field(default=False, description="bias on q/k/v projections (Qwen2)")
    sliding_window_tokens: Optional[int] = Field(default=None, gt=0)
    published_params: Optional[float] = Field(default=None, gt=0)
    sources: dict[str, str] = Field(default_factory=dict)
    notes: str = ""

    @model_validator(mode="after")
    def _check_heads(self) -> "ModelSpec":
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size is not divisible by num_attention_heads: give head_dim")
        return self

    @property
    def head_dim_resolved(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim_resolved

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim_resolved

    @property
    def query_group_size(self) -> int:
        return self.num_attention_heads // self.num_kv_heads

    @property
    def params_per_layer(self) -> int:
        h = self.hidden_size
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.attention_bias:
            attention += self.q_dim + 2 * self.kv_dim
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size
        norms = 2 * h * (2 if self.norm == "layernorm" else 1)
        return attention + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        """Total parameter count (embedding + layers + final norm + untied lm_head)."""
        final_norm = self.hidden_size * (2 if self.norm == "layernorm" else 1)
        return self.embedding_params + self.num_layers * self.params_per_layer + final_norm + self.lm_head_params

    def get_weight_bytes(self, weight_dtype: str) -> float:
        return self.params * get_dtype_bytes(weight_dtype)

    def get_kv_bytes_per_token(self, kv_dtype: str) -> float:
        """K and V of one token over all layers."""
        return 2 * self.num_layers * self.kv_dim * get_dtype_bytes(kv_dtype)


class Workload(_Strict):
    """What one forward step does and in which dtypes.

    batch sequences each add `new_tokens` (q) on top of `context_tokens` (S) already cached: prefill is q = prompt
    length, S = 0; decode is q = 1; verifying k draft tokens is q = k + 1.
    """

    batch: int = Field(gt=0)
    context_tokens: int = Field(ge=0)
    new_tokens: int = Field(default=1, gt=0)
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    activation_dtype: str = "bf16"
    attention: Literal["flash", "unfused"] = "flash"
    logits_for_all_tokens: bool = Field(
        default=True, description="decode/verify need logits for every new token; prefill only for the last"
    )

    @field_validator("weight_dtype", "kv_dtype", "activation_dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        return normalize_dtype(value)

    @property
    def compute_dtype(self) -> str:
        """Matmuls run in the activation dtype (weight-only quantisation dequantises to it)."""
        return self.activation_dtype


__all__ = [
    "SCHEMA_VERSION",
    "DTYPES",
    "Interconnect",
    "Efficiency",
    "HardwareSpec",
    "ModelSpec",
    "Workload",
    "InputError",
]
