"""Validated specifications: hardware, models and the workload of one forward step.

Specs are pydantic models: frozen, unknown keys rejected, versioned with `schema_version`. Every number is SI and
its key names its unit. Derived quantities (parameter count, KV bytes per token, ridge points) are computed here and
nowhere else.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .units import DEFAULT_QUANT_GROUP_SIZE, DTYPES, get_dtype_bytes, get_weight_bytes_per_element, normalize_dtype

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
    interconnect_fraction: float = Field(
        default=0.85, gt=0, le=1,
        description="achieved share of link bandwidth in collectives (nvbandwidth on 8x H200 measured 0.88 of NVLink)",
    )


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
    measured: Optional["MeasuredProfile"] = None

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
    # Mixture of experts (all None: a dense MLP in every layer).
    num_experts: Optional[int] = Field(default=None, gt=0, description="routed experts per MoE layer (E)")
    num_experts_per_token: Optional[int] = Field(default=None, gt=0, description="top-k routing")
    moe_intermediate_size: Optional[int] = Field(default=None, gt=0, description="per routed expert")
    num_shared_experts: int = Field(default=0, ge=0, description="experts every token passes (DeepSeek, Qwen-MoE)")
    shared_expert_intermediate_size: Optional[int] = Field(
        default=None, gt=0, description="width of the fused shared-expert MLP (default moe size x shared experts)"
    )
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense MLP (DeepSeek)")
    # Multi-head latent attention (DeepSeek-V2/V3): a compressed KV latent per token instead of K and V per head.
    kv_lora_rank: Optional[int] = Field(default=None, gt=0)
    q_lora_rank: Optional[int] = Field(default=None, gt=0)
    qk_nope_head_dim: Optional[int] = Field(default=None, gt=0)
    qk_rope_head_dim: Optional[int] = Field(default=None, gt=0)
    v_head_dim: Optional[int] = Field(default=None, gt=0)
    published_params: Optional[float] = Field(default=None, gt=0)
    sources: dict[str, str] = Field(default_factory=dict)
    notes: str = ""

    @model_validator(mode="after")
    def _check_heads(self) -> "ModelSpec":
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads and self.kv_lora_rank is None:
            raise ValueError("hidden_size is not divisible by num_attention_heads: give head_dim")
        moe = (self.num_experts, self.num_experts_per_token, self.moe_intermediate_size)
        if any(v is not None for v in moe) and any(v is None for v in moe):
            raise ValueError("a MoE model needs num_experts, num_experts_per_token and moe_intermediate_size")
        if self.num_experts is not None and self.num_experts_per_token > self.num_experts:
            raise ValueError("num_experts_per_token cannot exceed num_experts")
        if self.first_dense_layers > self.num_layers:
            raise ValueError("first_dense_layers cannot exceed num_layers")
        mla = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if any(v is not None for v in mla) and any(v is None for v in mla):
            raise ValueError("an MLA model needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def shared_intermediate_size(self) -> int:
        if not self.num_shared_experts:
            return 0
        return self.shared_expert_intermediate_size or self.num_shared_experts * self.moe_intermediate_size

    @property
    def attention_params_per_layer(self) -> int:
        h, heads = self.hidden_size, self.num_attention_heads
        if self.is_mla:
            qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk_head
            else:
                q = h * heads * qk_head
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank  # + its norm
            kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv_a + kv_b + heads * self.v_head_dim * h
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.attention_bias:
            attention += self.q_dim + 2 * self.kv_dim
        return attention

    @property
    def dense_mlp_params(self) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size

    def get_moe_mlp_params(self, experts: float | None = None) -> float:
        """Router + `experts` routed experts (default all) + the shared experts of one MoE layer."""
        experts = self.num_experts if experts is None else experts
        per_expert = (3 if self.gated_mlp else 2) * self.hidden_size * self.moe_intermediate_size
        shared = (3 if self.gated_mlp else 2) * self.hidden_size * self.shared_intermediate_size
        return self.hidden_size * self.num_experts + experts * per_expert + shared

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
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size * (2 if self.norm == "layernorm" else 1)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def _get_params(self, experts: float | None) -> float:
        final_norm = self.hidden_size * (2 if self.norm == "layernorm" else 1)
        layers = self.num_layers * (self.attention_params_per_layer + self.norm_params_per_layer)
        layers += self.num_dense_mlp_layers * self.dense_mlp_params
        if self.is_moe:
            layers += self.num_moe_layers * self.get_moe_mlp_params(experts)
        return self.embedding_params + layers + final_norm + self.lm_head_params

    @property
    def params(self) -> int:
        """Total parameter count (embedding + layers + final norm + untied lm_head; all experts)."""
        return int(self._get_params(None))

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (top-k routed experts + shared experts)."""
        return int(self._get_params(self.num_experts_per_token if self.is_moe else None))

    def get_weight_bytes(self, weight_dtype: str, quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE) -> float:
        """Weight storage, including the group scales of int8/int4 weight-only quantisation."""
        return self.params * get_weight_bytes_per_element(weight_dtype, quant_group_size)

    def get_kv_elements_per_token_per_layer(self) -> int:
        """MLA caches one compressed latent + a shared RoPE key; GQA caches K and V of every KV head."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_dim

    def get_kv_bytes_per_token(self, kv_dtype: str) -> float:
        """KV cache of one token over all layers."""
        return self.num_layers * self.get_kv_elements_per_token_per_layer() * get_dtype_bytes(kv_dtype)


class Workload(_Strict):
    """The user's serving workload: `batch` sequences with `context_tokens` already cached, the dtypes, attention
    mode and sharding. Each step priced from it says how many new tokens (q) every sequence adds: prefill is
    q = prompt length on S = 0; decode is q = 1; verifying k draft tokens is q = k + 1.
    """

    batch: int = Field(gt=0)
    context_tokens: int = Field(ge=0)
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    activation_dtype: str = "bf16"
    attention: Literal["flash", "unfused"] = "flash"
    tensor_parallel: int = Field(default=1, gt=0, description="devices the model is sharded over (--tp)")
    quant_group_size: int = Field(default=DEFAULT_QUANT_GROUP_SIZE, gt=0, description="int8/int4 weights per scale")

    @field_validator("weight_dtype", "kv_dtype", "activation_dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        return normalize_dtype(value)

    @property
    def compute_dtype(self) -> str:
        """Matmuls run in the activation dtype (weight-only quantisation dequantises to it; fp8 weights with fp8
        activations compute in fp8)."""
        return self.activation_dtype



# --- Measured profiles (written by `rooflinesim calibrate`, read by rooflinesim.calibrate.profile) -------------------


class Provenance(_Strict):
    """Where and how a profile was measured."""

    device_kind: Literal["cpu", "cuda"]
    device_name: str
    host_cpu: str
    torch_version: str
    dtypes: tuple[str, ...]
    threads: int = Field(gt=0)
    date: str
    command: str
    duration_s: float = Field(ge=0)
    quick: bool
    drift: float = Field(description="max relative change of the reference measurement (start/middle/end)")
    drift_flagged: bool
    reference_s: tuple[float, ...] = ()
    notes: str = ""


class LinearTable(_Strict):
    """Measured time of one F.linear(x[M, K], W[N, K]) call vs M, with cold (rotated) weights."""

    in_features: int = Field(gt=0)
    out_features: int = Field(gt=0)
    m: tuple[int, ...]
    time_s: tuple[float, ...]
    spread: tuple[float, ...]

    @model_validator(mode="after")
    def _check(self) -> "LinearTable":
        if not (len(self.m) == len(self.time_s) == len(self.spread)) or len(self.m) < 1:
            raise ValueError("m, time_s and spread must have the same, non-zero length")
        if any(t <= 0 for t in self.time_s) or list(self.m) != sorted(set(self.m)):
            raise ValueError("times must be positive and m strictly increasing")
        return self


class AffineFit(_Strict):
    """time = overhead_s + sum(coefficient x feature), features named by `features` (e.g. bytes, flops)."""

    overhead_s: float = Field(ge=0)
    coefficients: dict[str, float]
    median_abs_rel_residual: float = Field(ge=0)
    points: int = Field(ge=0)


class CacheReuse(_Strict):
    """A GEMV whose weights rotate over a working set of `working_set_bytes` runs `speedup` times faster than over
    the cold pool (>= 1: the set stays in the caches between calls); interpolated in log bytes, clamped. Fully cached
    weights stream at `warm_bandwidth_bytes_per_s` whatever their shape."""

    working_set_bytes: tuple[float, ...]
    speedup: tuple[float, ...]
    warm_bandwidth_bytes_per_s: float = Field(gt=0, description="weight streaming at the smallest working set")

    @model_validator(mode="after")
    def _check(self) -> "CacheReuse":
        if len(self.working_set_bytes) != len(self.speedup) or not self.speedup:
            raise ValueError("working_set_bytes and speedup must have the same, non-zero length")
        if any(b <= 0 for b in self.working_set_bytes) or list(self.working_set_bytes) != sorted(set(self.working_set_bytes)):
            raise ValueError("working_set_bytes must be positive and strictly increasing")
        if any(not 1.0 <= x <= 20.0 for x in self.speedup):
            raise ValueError("cache speedups must lie in [1, 20]")
        return self


class DtypeProfile(_Strict):
    """Everything measured for one compute dtype."""

    gemv_bandwidth_bytes_per_s: float = Field(gt=0)
    copy_bandwidth_bytes_per_s: float = Field(gt=0)
    peak_flops_per_s: float = Field(gt=0)
    linear_overhead_s: float = Field(ge=0)
    linear: tuple[LinearTable, ...]
    attention: dict[str, AffineFit] = Field(
        description="masked SDPA, keyed '<decode|multi>_d<head_dim>': one query token (decode) or several (verify)"
    )
    elementwise: dict[str, AffineFit] = Field(description="per op family: norm, rope, mlp_act, residual, kv_cache_write, embedding")
    layer_overhead_s: float = Field(ge=0, description="dispatch left per decoder layer after the per-op times")
    step_overhead_s: float = Field(ge=0, description="dispatch left per forward step (mask, embedding glue)")
    cache_reuse: Optional[CacheReuse] = Field(
        None, description="weight streaming vs the working set the weights rotate over (the tables are cold)")
    in_model_scale: float = Field(
        1.0, ge=0.2, le=5.0,
        description="whole synthetic decoders' measured time / the sum of their per-op times measured alone: ops run "
                    "slower inside a forward pass than in a loop of their own",
    )
    residuals: dict[str, float] = Field(default_factory=dict)


class MeasuredProfile(_Strict):
    schema_version: Literal[1] = 1
    profile_name: str
    base_hardware: str = Field(description="the shipped hardware spec this device corresponds to (warn if applied to another)")
    provenance: Provenance
    dtypes: dict[str, DtypeProfile]

    @field_validator("dtypes")
    @classmethod
    def _dtype_keys(cls, value: dict) -> dict:
        if not value:
            raise ValueError("a profile needs at least one measured dtype")
        return {normalize_dtype(k): v for k, v in value.items()}


HardwareSpec.model_rebuild()

__all__ = [
    "SCHEMA_VERSION",
    "DTYPES",
    "Interconnect",
    "Efficiency",
    "HardwareSpec",
    "ModelSpec",
    "Workload",
    "InputError",
    "MeasuredProfile",
    "DtypeProfile",
    "LinearTable",
    "AffineFit",
    "CacheReuse",
    "Provenance",
]
