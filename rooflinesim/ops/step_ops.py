"""The operations of one forward step and their FLOPs and bytes. Knows transformers, not hardware.

One step: `batch` (B) sequences each add `new_tokens` (q) on top of `context_tokens` (S) already in the KV cache.
Every function here is vectorised: B, S and q may be numpy arrays that broadcast together, so one call prices a
whole sweep grid; the scalar `predict` path calls the same code with 0-d arrays.

Conventions: 2 FLOPs per multiply-accumulate everywhere (lm_head included). Bytes are split into weights,
activations read, activations written, KV-cache read and KV-cache written; each op's count is per instance, and
`count` says how many instances one step runs (the number of layers for per-layer ops).

The op primitives and the attention / routing geometry live in `ops.op_cost`, the sections of a step in
`ops.sections`; this module assembles them into a step.
"""

from __future__ import annotations

import numpy as np

from ..specs.model import ModelSpec
from ..specs.workload import Workload
from .implementation_ops import dispatch_ops, resolve_implementation
from .op_cost import (
    OpCost, get_expected_experts_touched, get_kv_tokens_read, get_kv_tokens_stored, make_collective, make_linear, make_op,
)
from .sections import (
    OpContext, allreduce_ops, attention_ops_gqa, attention_ops_mla, dense_mlp_ops, embedding_ops, get_local_width,
    lm_head_ops, moe_mlp_ops, sampler_ops,
)
from ..units import get_dtype_bytes

#: Attention implementations get_step_ops prices.
ATTENTION_MODES = ("flash", "unfused", "per-head")

# The names these constructors had before the split (tests and older callers use them).
_op, _linear, _collective = make_op, make_linear, make_collective


def get_step_ops(model: ModelSpec, workload: Workload, new_tokens, *, batch=None, context_tokens=None,
                 logits_for_all_tokens: bool = True, implementation=None) -> list[OpCost]:
    """All ops of one forward step on ONE device, in execution order: `batch` (default the workload's) sequences add
    `new_tokens` each on `context_tokens` (default the workload's) cached ones, in the workload's dtypes, attention
    mode, sharding and quantisation group. B, S, q may be broadcastable arrays.

    Attention is GQA-aware: K and V are read once per KV head and shared by its query group. `flash` keeps the score
    matrix on chip (one fused op); `unfused` materialises scores and probabilities in memory, computing the full
    q x (S + q) rectangle as eager implementations do (the causal mask is applied, not skipped). MLA models use the
    absorbed form that decode kernels run: attention over the compressed latent, with the up-projections folded
    into the query and output (`kv_b_absorb`).

    Tensor parallelism over N devices (Megatron layout) shards heads, MLP width, experts' width and the vocabulary;
    KV heads are replicated when N exceeds them, and MLA's latent cache is replicated on every device. Each layer then
    all-reduces its activations twice (after o_proj and after the MLP), the vocab-parallel embedding once, and the
    logits are all-gathered. With N = 1 there are no collectives and nothing is sharded.

    The workload's `sampling` adds the sampler over the computed logits (softmax and one draw per sequence; see
    `op_sections.sampler_ops`): an engine's step samples, a bare forward pass does not.

    int8/int4 weights carry group scales (see units.get_weight_bytes_per_element) and cost 2 FLOPs per weight to
    dequantise on the fly.

    `implementation` (a name, YAML path or `specs.implementation.ImplementationSpec`; None: the workload's, by
    default the reference decoder every calibration times) adds what that code does beyond the reference (`ops.implementation_ops`): a
    concatenating KV cache, materialised GQA expansion, extra RoPE passes, extra dispatches; and fuses q/k/v or
    gate/up where it does.
    """
    if workload.attention not in ATTENTION_MODES:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got {workload.attention!r}")
    c = OpContext.build(model, workload, workload.batch if batch is None else batch,
                        workload.context_tokens if context_tokens is None else context_tokens, new_tokens,
                        logits_for_all_tokens,
                        resolve_implementation(workload.implementation if implementation is None else implementation))
    layers = model.num_layers
    return [
        *embedding_ops(c),
        c.norm("attn_norm", layers),
        *(attention_ops_mla(c) if model.is_mla else attention_ops_gqa(c)),
        *allreduce_ops(c, "attn_allreduce", layers),
        c.residual("attn_residual"),
        c.norm("mlp_norm", layers),
        *dense_mlp_ops(c),
        *moe_mlp_ops(c),
        *allreduce_ops(c, "mlp_allreduce", layers),
        c.residual("mlp_residual"),
        *_dispatch_ops(c),
        *lm_head_ops(c),
        *(sampler_ops(c) if workload.sampling else []),
    ]


def _dispatch_ops(c: OpContext) -> list:
    """The implementation's calls beyond the reference's, its MoE blocks counted with the experts they hit."""
    moe = c.model.moe
    if c.impl is None or moe is None:
        return dispatch_ops(c.impl, c.model.num_layers)
    hit = get_expected_experts_touched(moe.num_experts, moe.num_experts_per_token, c.tokens)
    return dispatch_ops(c.impl, c.model.num_layers, c.model.num_moe_layers, moe.num_experts, hit,
                        bool(moe.shared_intermediate_size))


def get_kv_elements_per_token_per_layer_per_device(model: ModelSpec, tensor_parallel: int = 1) -> int:
    """KV elements one device caches per token and layer: its share of KV heads (replicated when tp exceeds them);
    MLA's latent is replicated on every device."""
    if model.is_mla:
        return model.get_kv_elements_per_token_per_layer()
    return 2 * get_local_width(model.num_kv_heads, tensor_parallel) * model.head_dim_resolved


def get_kv_cache_bytes(model: ModelSpec, workload: Workload, batch, tokens_per_sequence):
    """KV-cache memory on one device for `batch` sequences of `tokens_per_sequence` positions (sliding windows hold
    only W), in the workload's KV dtype and sharding."""
    stored = get_kv_tokens_stored(0, tokens_per_sequence, model.sliding_window_tokens)
    per_token = model.num_layers * get_kv_elements_per_token_per_layer_per_device(model, workload.tensor_parallel)
    return np.asarray(batch, dtype=float) * stored * per_token * get_dtype_bytes(workload.kv_dtype)


def get_activation_bytes(model: ModelSpec, workload: Workload, batch, new_tokens, context_tokens):
    """Peak transient activation memory of one step of `batch` x `new_tokens` on `context_tokens` on one device, in
    the workload's activation dtype, attention mode and sharding (a working-set estimate, not an allocator trace).

    The widest live tensors: the MLP's gate and up outputs (routed tokens x expert width for MoE), a few hidden-sized
    buffers, fp32 logits and, when unfused, one layer's materialised attention scores.
    """
    a = get_dtype_bytes(workload.activation_dtype)
    tp = workload.tensor_parallel
    tokens = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float)
    widest = model.intermediate_size
    if model.is_moe:
        widest = max(widest, model.moe.num_experts_per_token * model.moe.moe_intermediate_size)
    working = tokens * (2 * widest / tp + 4 * model.hidden_size) * a + tokens * model.vocab_size * 4
    if workload.attention == "unfused":
        kv_tokens = get_kv_tokens_read(context_tokens, new_tokens, model.sliding_window_tokens)
        heads = model.num_attention_heads // tp
        working = working + np.asarray(batch, dtype=float) * heads * np.asarray(new_tokens) * kv_tokens * a
    return working


__all__ = [
    "ATTENTION_MODES", "get_step_ops", "get_kv_elements_per_token_per_layer_per_device", "get_kv_cache_bytes",
    "get_activation_bytes",
]
