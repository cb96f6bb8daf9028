"""The user's serving workload of one forward step: batch, context, dtypes, attention mode and sharding."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import FrozenModel
from ..units import DEFAULT_QUANT_GROUP_SIZE, normalize_dtype


class Workload(FrozenModel):
    """The user's serving workload: `batch` sequences with `context_tokens` already cached, the dtypes, attention
    mode and sharding. Each step priced from it says how many new tokens (q) every sequence adds: prefill is
    q = prompt length on S = 0; decode is q = 1; verifying k draft tokens is q = k + 1.
    """

    batch: int = Field(gt=0)
    context_tokens: int = Field(ge=0)
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    activation_dtype: str = "bf16"
    attention: Literal["flash", "unfused", "per-head"] = "flash"
    tensor_parallel: int = Field(default=1, gt=0, description="devices the model is sharded over (--tp)")
    quant_group_size: int = Field(default=DEFAULT_QUANT_GROUP_SIZE, gt=0, description="int8/int4 weights per scale")
    sampling: bool = Field(default=False, description="price the sampler after each step's logits and, when "
                           "speculating, the acceptance rule (--sampling); off: a bare forward pass")
    implementation: str = Field(default="reference", min_length=1, description="the code that runs the model "
                                "(--impl; `specs.implementation`): reference (the decoder calibration times), hf, "
                                "gptfast or a YAML file")

    @field_validator("weight_dtype", "kv_dtype", "activation_dtype")
    @classmethod
    def _dtype(cls, value: str) -> str:
        return normalize_dtype(value)

    @property
    def compute_dtype(self) -> str:
        """Matmuls run in the activation dtype (weight-only quantisation dequantises to it; fp8 weights with fp8
        activations compute in fp8)."""
        return self.activation_dtype

    @classmethod
    def in_dtype(cls, dtype: str, batch: int = 1, context_tokens: int = 0, **fields) -> "Workload":
        """Weights, KV cache and activations all in one dtype (what calibration times), at this batch and context."""
        return cls(batch=int(batch), context_tokens=int(context_tokens), weight_dtype=dtype, kv_dtype=dtype,
                   activation_dtype=dtype, **fields)
