"""ModelSpec: the shapes of a decoder-only transformer, with its mixture-of-experts and multi-head latent attention
blocks as nested sub-models (schema version 2), and every parameter and KV-cache count derived from them.

Version-1 files kept the MoE and MLA fields flat at the top level; they still load (lifted into the blocks).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from .base import SpecModel, StrTuple, field_error
from ..units import DEFAULT_QUANT_GROUP_SIZE, get_dtype_bytes, get_weight_bytes_per_element

#: The version new model files are written in; version 1 (flat MoE / MLA keys) is read too.
MODEL_SCHEMA_VERSION = 2


class MoESpec(SpecModel):
    """Mixture of experts: every MoE layer routes each token to `num_experts_per_token` of `num_experts` experts."""

    num_experts: int = Field(gt=0, description="routed experts per MoE layer (E)")
    num_experts_per_token: int = Field(gt=0, description="top-k routing")
    moe_intermediate_size: int = Field(gt=0, description="MLP width of one routed expert")
    num_shared_experts: int = Field(default=0, ge=0, description="experts every token passes (DeepSeek, Qwen-MoE)")
    shared_expert_intermediate_size: Optional[int] = Field(
        default=None, gt=0, description="width of the fused shared-expert MLP (default moe size x shared experts)"
    )
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense MLP (DeepSeek)")

    @model_validator(mode="after")
    def _check(self) -> "MoESpec":
        if self.num_experts_per_token > self.num_experts:
            raise field_error(self.__class__, "num_experts_per_token",
                              f"{self.num_experts_per_token} exceeds num_experts ({self.num_experts})",
                              self.num_experts_per_token)
        if self.shared_expert_intermediate_size is not None and not self.num_shared_experts:
            raise field_error(self.__class__, "shared_expert_intermediate_size",
                              "given without shared experts: set num_shared_experts", self.shared_expert_intermediate_size)
        return self

    @property
    def shared_intermediate_size(self) -> int:
        """Width of the shared experts' fused MLP (0 without shared experts)."""
        if not self.num_shared_experts:
            return 0
        return self.shared_expert_intermediate_size or self.num_shared_experts * self.moe_intermediate_size


class MLASpec(SpecModel):
    """Multi-head latent attention (DeepSeek-V2/V3): each token caches one compressed KV latent of `kv_lora_rank`
    plus a RoPE key of `qk_rope_head_dim` shared by all heads, instead of K and V per head."""

    kv_lora_rank: int = Field(gt=0)
    q_lora_rank: Optional[int] = Field(default=None, gt=0, description="query compression rank (None: a full q_proj)")
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Cached elements per token and layer: the latent and the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


# Version-1 files: the flat keys of each block, and the values a dense / non-MLA v1 file may carry for them.
_V1_BLOCKS = {
    "moe": (tuple(MoESpec.model_fields), {"num_shared_experts": 0, "first_dense_layers": 0}),
    "mla": (tuple(MLASpec.model_fields), {}),
}


def lift_version_1(data: Any) -> Any:
    """A version-1 model mapping in the version-2 layout (flat MoE / MLA keys moved into `moe` / `mla`).

    A block is created only when one of its keys carries more than its "absent" value: a v1 dense file may say
    `num_shared_experts: 0` or `kv_lora_rank: null`.
    """
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        return data
    data = dict(data)
    for block, (keys, absent) in _V1_BLOCKS.items():
        flat = {k: data.pop(k) for k in keys if k in data}
        if block in data:
            raise field_error("ModelSpec", block, f"a version-1 file has flat {block} keys; "
                              f"a '{block}' block needs schema_version: {MODEL_SCHEMA_VERSION}", data[block])
        if any(v is not None and not (k in absent and v == absent[k] and not isinstance(v, bool))
               for k, v in flat.items()):
            data[block] = {k: v for k, v in flat.items() if v is not None}
    data["schema_version"] = MODEL_SCHEMA_VERSION
    return data


class ModelSpec(SpecModel):
    """A decoder-only transformer (Llama family shapes: pre-norm, RoPE, GQA, optionally gated MLP), optionally with
    mixture-of-experts MLPs (`moe`) and multi-head latent attention (`mla`)."""

    schema_version: Literal[2]
    name: str
    aliases: StrTuple = ()
    architecture: str = Field(description="family, e.g. llama, mistral, qwen2")
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: Optional[int] = Field(default=None, gt=0)
    intermediate_size: int = Field(gt=0, description="width of the dense MLP")
    gated_mlp: bool = True
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    max_context_tokens: int = Field(gt=0)
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    attention_bias: bool = Field(default=False, description="bias on q/k/v projections (Qwen2)")
    sliding_window_tokens: Optional[int] = Field(default=None, gt=0)
    moe: Optional[MoESpec] = Field(default=None, description="None: a dense MLP in every layer")
    mla: Optional[MLASpec] = Field(default=None, description="None: grouped-query attention")
    published_params: Optional[float] = Field(default=None, gt=0)
    family: Optional[str] = Field(default=None, description="models that share one tokenizer (token ids), so one "
                                  "can draft for another, e.g. llama-3, qwen2.5; the default draft is the smallest "
                                  "shipped model of the target's family")
    hf_id: Optional[str] = Field(default=None, description="Hugging Face repository id (org/name) engines load")
    sources: dict[str, str] = Field(default_factory=dict)
    notes: str = ""

    @model_validator(mode="before")
    @classmethod
    def _lift_version_1(cls, data: Any) -> Any:
        return lift_version_1(data)

    @model_validator(mode="after")
    def _check_shapes(self) -> "ModelSpec":
        if self.num_attention_heads % self.num_kv_heads:
            raise field_error(self.__class__, "num_kv_heads", f"num_attention_heads ({self.num_attention_heads}) must "
                              f"be a multiple of num_kv_heads ({self.num_kv_heads})", self.num_kv_heads)
        if self.head_dim is None and self.hidden_size % self.num_attention_heads and self.mla is None:
            raise field_error(self.__class__, "head_dim", f"hidden_size ({self.hidden_size}) is not divisible by "
                              f"num_attention_heads ({self.num_attention_heads}): give head_dim", None)
        if self.moe is not None and self.moe.first_dense_layers > self.num_layers:
            raise field_error(self.__class__, "moe.first_dense_layers",
                              f"exceeds num_layers ({self.num_layers})", self.moe.first_dense_layers)
        return self

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def is_mla(self) -> bool:
        return self.mla is not None

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.moe.first_dense_layers if self.moe is not None else 0

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def shared_intermediate_size(self) -> int:
        return self.moe.shared_intermediate_size if self.moe is not None else 0

    @property
    def attention_params_per_layer(self) -> int:
        h, heads = self.hidden_size, self.num_attention_heads
        if self.mla is not None:
            mla = self.mla
            if mla.q_lora_rank:
                q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * heads * mla.qk_head_dim
            else:
                q = h * heads * mla.qk_head_dim
            kv_a = h * mla.latent_dim + mla.kv_lora_rank  # + its norm
            kv_b = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
            return q + kv_a + kv_b + heads * mla.v_head_dim * h
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.attention_bias:
            attention += self.q_dim + 2 * self.kv_dim
        return attention

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP: gate, up and down when gated, else up and down."""
        return 3 if self.gated_mlp else 2

    @property
    def dense_mlp_params(self) -> int:
        return self.mlp_matrices * self.hidden_size * self.intermediate_size

    def get_moe_mlp_params(self, experts: float | None = None) -> float:
        """Router + `experts` routed experts (default all) + the shared experts of one MoE layer."""
        moe = self.moe
        experts = moe.num_experts if experts is None else experts
        per_expert = self.mlp_matrices * self.hidden_size * moe.moe_intermediate_size
        shared = self.mlp_matrices * self.hidden_size * moe.shared_intermediate_size
        return self.hidden_size * moe.num_experts + experts * per_expert + shared

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
    def norm_params_per_element(self) -> int:
        """LayerNorm has a weight and a bias per element, RMSNorm a weight only."""
        return 2 if self.norm == "layernorm" else 1

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size * self.norm_params_per_element

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def _get_params(self, experts: float | None) -> float:
        final_norm = self.hidden_size * self.norm_params_per_element
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
        return int(self._get_params(self.moe.num_experts_per_token if self.moe is not None else None))

    def get_weight_bytes(self, weight_dtype: str, quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE) -> float:
        """Weight storage, including the group scales of int8/int4 weight-only quantisation."""
        return self.params * get_weight_bytes_per_element(weight_dtype, quant_group_size)

    def get_kv_elements_per_token_per_layer(self) -> int:
        """MLA caches one compressed latent + a shared RoPE key; GQA caches K and V of every KV head."""
        if self.mla is not None:
            return self.mla.latent_dim
        return 2 * self.kv_dim

    def get_kv_bytes_per_token(self, kv_dtype: str) -> float:
        """KV cache of one token over all layers."""
        return self.num_layers * self.get_kv_elements_per_token_per_layer() * get_dtype_bytes(kv_dtype)
