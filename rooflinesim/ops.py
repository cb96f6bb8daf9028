"""The operations of one forward step and their FLOPs and bytes. Knows transformers, not hardware.

One step: `batch` (B) sequences each add `new_tokens` (q) on top of `context_tokens` (S) already in the KV cache.
Every function here is vectorised: B, S and q may be numpy arrays that broadcast together, so one call prices a
whole sweep grid; the scalar `predict` path calls the same code with 0-d arrays.

Conventions: 2 FLOPs per multiply-accumulate everywhere (lm_head included). Bytes are split into weights,
activations read, activations written, KV-cache read and KV-cache written; each op's count is per instance, and
`count` says how many instances one step runs (the number of layers for per-layer ops).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .specs import ModelSpec
from .units import DEFAULT_QUANT_GROUP_SIZE, get_dtype_bytes, get_weight_bytes_per_element

#: Op kinds whose FLOPs run on the matrix units (tensor cores, AMX); the rest are vector/elementwise work.
MATMUL_KINDS = frozenset({"linear", "expert_linear", "attention", "attention_scores", "attention_values"})
COLLECTIVE_KINDS = frozenset({"allreduce", "allgather"})
ATTENTION_KINDS = frozenset({"attention", "attention_scores", "attention_values", "softmax"})

# FLOPs per element of the elementwise ops (counted as the arithmetic a straightforward kernel does).
FLOPS_PER_ELEMENT_RMSNORM = 4  # square, accumulate, scale by rsqrt, scale by weight
FLOPS_PER_ELEMENT_LAYERNORM = 8
FLOPS_PER_ELEMENT_ROPE = 3  # per element of q and k: a 2x2 rotation is 4 mul + 2 add per pair
FLOPS_PER_ELEMENT_SILU_GATE = 5  # x * sigmoid(x) * up: exp, add, div, mul, mul
FLOPS_PER_ELEMENT_GELU = 8
FLOPS_PER_SCORE_SOFTMAX = 5  # mask add, max, subtract, exp, divide by the sum


@dataclass(frozen=True)
class OpCost:
    """FLOPs and bytes of one instance of an op; arrays broadcast over the workload grid."""

    name: str
    kind: str
    count: int
    flops: np.ndarray
    weight_bytes: np.ndarray
    act_read_bytes: np.ndarray
    act_write_bytes: np.ndarray
    kv_read_bytes: np.ndarray
    kv_write_bytes: np.ndarray
    comm_bytes: np.ndarray  # message size of a collective (interconnect, not memory traffic)
    dims: dict = field(default_factory=dict, compare=False)

    @property
    def bytes(self) -> np.ndarray:
        return self.weight_bytes + self.act_read_bytes + self.act_write_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def arithmetic_intensity_flops_per_byte(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.bytes > 0, self.flops / np.maximum(self.bytes, 1e-300), 0.0)


def _op(name, kind, count, flops=0.0, weight=0.0, act_read=0.0, act_write=0.0, kv_read=0.0, kv_write=0.0, comm=0.0,
        **dims):
    arrays = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (flops, weight, act_read, act_write, kv_read, kv_write, comm))
    )
    return OpCost(name, kind, count, *arrays, dims=dims)


def _linear(name, count, tokens, in_features, out_features, w_bytes, a_bytes, bias=False):
    """y[M, N] = x[M, K] @ W[K, N]: 2*M*K*N FLOPs; W read once per step, x read, y written."""
    flops = 2.0 * tokens * in_features * out_features + (tokens * out_features if bias else 0.0)
    weight = (in_features * out_features + (out_features if bias else 0)) * w_bytes
    return _op(
        name, "linear", count, flops, weight, tokens * in_features * a_bytes, tokens * out_features * a_bytes,
        m=tokens, k=in_features, n=out_features,
    )


def get_attention_pairs(context_tokens, new_tokens, window_tokens=None):
    """(query, key) pairs one head of one sequence scores, causal within the new tokens.

    New token i (0-based) attends to S + i + 1 keys, capped by a sliding window W:
    sum_{n=S+1}^{S+q} min(W, n). Without a window this is q*S + q*(q+1)/2.
    """
    s = np.asarray(context_tokens, dtype=float)
    q = np.asarray(new_tokens, dtype=float)
    if window_tokens is None:
        return q * s + q * (q + 1) / 2
    w = float(window_tokens)
    lo, hi = s + 1, s + q
    m = np.minimum(hi, w)
    below = np.where(m >= lo, (lo + m) * (m - lo + 1) / 2, 0.0)
    above = np.maximum(0.0, hi - np.maximum(lo - 1, w)) * w
    return below + above


def get_kv_tokens_read(context_tokens, new_tokens, window_tokens=None):
    """Cached positions the step reads per sequence (the union over its new tokens' windows)."""
    total = np.asarray(context_tokens, dtype=float) + np.asarray(new_tokens, dtype=float)
    if window_tokens is None:
        return total
    return np.minimum(total, window_tokens + np.asarray(new_tokens, dtype=float) - 1)


def get_kv_tokens_stored(context_tokens, new_tokens, window_tokens=None):
    """Positions held in the KV cache per sequence and layer after the step (a sliding window keeps only W)."""
    total = np.asarray(context_tokens, dtype=float) + np.asarray(new_tokens, dtype=float)
    return total if window_tokens is None else np.minimum(total, window_tokens)


def get_expected_experts_touched(num_experts: int, experts_per_token: int, tokens):
    """Distinct experts a step's tokens route to, in expectation, under uniform top-k routing.

    Each token picks k of E experts, so an expert is missed by one token with probability 1 - k/E and by all T tokens
    with (1 - k/E)^T: E x (1 - (1 - k/E)^T). One token touches exactly k; many tokens touch all E.
    """
    tokens = np.asarray(tokens, dtype=float)
    return num_experts * -np.expm1(tokens * np.log1p(-experts_per_token / num_experts)) if experts_per_token < num_experts \
        else np.full_like(tokens, float(num_experts))


def _collective(name, kind, count, message_bytes, devices):
    """A tensor-parallel collective over `devices`; its time comes from the interconnect (roofline.get_collective_time)."""
    return _op(name, kind, count, comm=message_bytes, devices=devices)


def get_step_ops(
    model: ModelSpec,
    batch,
    context_tokens,
    new_tokens,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    activation_dtype: str = "bf16",
    attention: str = "flash",
    logits_for_all_tokens: bool = True,
    tensor_parallel: int = 1,
    quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE,
) -> list[OpCost]:
    """All ops of one forward step on ONE device, in execution order. B, S, q may be broadcastable arrays.

    Attention is GQA-aware: K and V are read once per KV head and shared by its query group. `flash` keeps the score
    matrix on chip (one fused op); `unfused` materialises scores and probabilities in memory, computing the full
    q x (S + q) rectangle as eager implementations do (the causal mask is applied, not skipped). MLA models use the
    absorbed form that decode kernels run: attention over the compressed latent, with the up-projections folded
    into the query and output (`kv_b_absorb`).

    Tensor parallelism over N devices (Megatron layout) shards heads, MLP width, experts' width and the vocabulary;
    KV heads are replicated when N exceeds them, and MLA's latent cache is replicated on every device. Each layer then
    all-reduces its activations twice (after o_proj and after the MLP), the vocab-parallel embedding once, and the
    logits are all-gathered. With N = 1 there are no collectives and nothing is sharded.

    int8/int4 weights carry group scales (see units.get_weight_bytes_per_element) and cost 2 FLOPs per weight to
    dequantise on the fly.
    """
    if attention not in ("flash", "unfused"):
        raise ValueError(f"attention must be 'flash' or 'unfused', got {attention!r}")
    tp = int(tensor_parallel)
    w = get_weight_bytes_per_element(weight_dtype, quant_group_size)
    dequant_flops_per_weight = 2.0 if weight_dtype in ("int8", "int4") else 0.0
    kv, a = get_dtype_bytes(kv_dtype), get_dtype_bytes(activation_dtype)
    b = np.asarray(batch, dtype=float)
    s = np.asarray(context_tokens, dtype=float)
    q = np.asarray(new_tokens, dtype=float)
    tokens = b * q
    logit_tokens = tokens if logits_for_all_tokens else b

    h, vocab, layers = model.hidden_size, model.vocab_size, model.num_layers
    heads = model.num_attention_heads // tp
    vocab_local = -(-vocab // tp)
    window = model.sliding_window_tokens
    norm_flops = FLOPS_PER_ELEMENT_RMSNORM if model.norm == "rmsnorm" else FLOPS_PER_ELEMENT_LAYERNORM
    norm_params_per_element = 1 if model.norm == "rmsnorm" else 2  # LayerNorm has a bias too

    def linear(name, count, m, k_in, n_out, bias=False, kind="linear", weight_copies=1.0):
        op = _linear(name, count, m, k_in, n_out, w, a, bias)
        if kind == "linear" and not dequant_flops_per_weight:
            return op
        weight = op.weight_bytes * weight_copies
        flops = op.flops + dequant_flops_per_weight * k_in * n_out * weight_copies
        return OpCost(name, kind, count, flops, weight, op.act_read_bytes, op.act_write_bytes, op.kv_read_bytes,
                      op.kv_write_bytes, op.comm_bytes, dims={**op.dims, "experts": weight_copies})

    def norm(name, count, m=tokens, width=h):
        return _op(name, "norm", count, norm_flops * m * width, norm_params_per_element * width * w, m * width * a,
                   m * width * a, m=m, n=width)

    def residual(name):
        return _op(name, "elementwise", layers, tokens * h, 0.0, 2 * tokens * h * a, tokens * h * a, m=tokens, n=h)

    def act(name, count, m, width):
        if model.gated_mlp:
            return _op(name, "elementwise", count, FLOPS_PER_ELEMENT_SILU_GATE * m * width, 0.0, 2 * m * width * a,
                       m * width * a, m=m, n=width)
        return _op(name, "elementwise", count, FLOPS_PER_ELEMENT_GELU * m * width, 0.0, m * width * a,
                   m * width * a, m=m, n=width)

    def mlp(prefix, count, m, width, weight_copies=1.0, kind="linear"):
        ops = []
        if model.gated_mlp:
            ops.append(linear(f"{prefix}gate_proj", count, m, h, width, kind=kind, weight_copies=weight_copies))
        ops += [
            linear(f"{prefix}up_proj", count, m, h, width, kind=kind, weight_copies=weight_copies),
            act(f"{prefix}mlp_act", count, m, width),
            linear(f"{prefix}down_proj", count, m, width, h, kind=kind, weight_copies=weight_copies),
        ]
        return ops

    kv_tokens = get_kv_tokens_read(s, q, window)
    pairs = get_attention_pairs(s, q, window)
    ops = [_op("embedding", "embedding", 1, 0.0, np.minimum(tokens, vocab_local) * h * w, tokens * 4,
               tokens * h * a, m=tokens, n=h)]
    if tp > 1:
        ops.append(_collective("embedding_allreduce", "allreduce", 1, tokens * h * a, tp))
    ops.append(norm("attn_norm", layers))

    if model.is_mla:
        c, rope_d = model.mla.kv_lora_rank, model.mla.qk_rope_head_dim
        nope, v_d = model.mla.qk_nope_head_dim, model.mla.v_head_dim
        latent = c + rope_d
        if model.mla.q_lora_rank:
            ops += [linear("q_a_proj", layers, tokens, h, model.mla.q_lora_rank),
                    norm("q_a_norm", layers, tokens, model.mla.q_lora_rank),
                    linear("q_b_proj", layers, tokens, model.mla.q_lora_rank, heads * (nope + rope_d))]
        else:
            ops.append(linear("q_proj", layers, tokens, h, heads * (nope + rope_d)))
        kv_b_weights = c * heads * (nope + v_d)
        absorb_flops = 2 * tokens * heads * (nope * c + c * v_d)
        ops += [
            linear("kv_a_proj", layers, tokens, h, latent),
            norm("kv_a_norm", layers, tokens, c),
            _op("kv_b_absorb", "linear", layers, absorb_flops, kv_b_weights * w,
                tokens * heads * (nope + c) * a, tokens * heads * (c + v_d) * a, m=tokens, k=c,
                n=heads * (nope + v_d)),
            _op("rope", "elementwise", layers, FLOPS_PER_ELEMENT_ROPE * tokens * (heads + 1) * rope_d, 0.0,
                tokens * (heads + 1) * rope_d * a, tokens * (heads + 1) * rope_d * a, m=tokens, n=(heads + 1) * rope_d),
            _op("kv_cache_write", "elementwise", layers, 0.0, 0.0, tokens * latent * a, 0.0, 0.0,
                tokens * latent * kv, m=tokens, n=latent),
            # all heads share one latent "KV head": scores over c + rope dims, values over the c-dim latent
            _op("attention", "attention", layers,
                (2 * latent + 2 * c + FLOPS_PER_SCORE_SOFTMAX) * b * heads * pairs, 0.0,
                tokens * heads * latent * a, tokens * heads * c * a, b * kv_tokens * latent * kv, 0.0,
                batch=b, heads=heads, kv_heads=1, q=q, kv_tokens=kv_tokens, head_dim=latent),
            linear("o_proj", layers, tokens, heads * v_d, h),
        ]
    else:
        d = model.head_dim_resolved
        kv_heads = -(-model.num_kv_heads // tp)  # replicated when tp > KV heads
        q_dim, kv_dim = heads * d, kv_heads * d
        bias = model.attention_bias
        kv_read_each = b * kv_heads * kv_tokens * d * kv  # K (or V) of every KV head, read once per group
        attn_dims = dict(batch=b, heads=heads, kv_heads=kv_heads, q=q, kv_tokens=kv_tokens, head_dim=d)
        ops += [
            linear("q_proj", layers, tokens, h, q_dim, bias),
            linear("k_proj", layers, tokens, h, kv_dim, bias),
            linear("v_proj", layers, tokens, h, kv_dim, bias),
            _op("rope", "elementwise", layers, FLOPS_PER_ELEMENT_ROPE * tokens * (q_dim + kv_dim), 0.0,
                tokens * (q_dim + kv_dim) * a, tokens * (q_dim + kv_dim) * a, m=tokens, n=q_dim + kv_dim),
            _op("kv_cache_write", "elementwise", layers, 0.0, 0.0, 2 * tokens * kv_dim * a, 0.0, 0.0,
                2 * tokens * kv_dim * kv, m=tokens, n=2 * kv_dim),
        ]
        if attention == "flash":
            ops.append(_op("attention", "attention", layers, (4 * d + FLOPS_PER_SCORE_SOFTMAX) * b * heads * pairs,
                           0.0, tokens * q_dim * a, tokens * q_dim * a, 2 * kv_read_each, 0.0, **attn_dims))
        else:
            scores = b * heads * q * kv_tokens  # the full rectangle, masked entries included
            ops += [
                _op("attn_scores", "attention_scores", layers, 2 * d * scores, 0.0, tokens * q_dim * a, scores * a,
                    kv_read_each, **attn_dims),
                _op("softmax", "softmax", layers, FLOPS_PER_SCORE_SOFTMAX * scores, 0.0, scores * a, scores * a,
                    **attn_dims),
                _op("attn_values", "attention_values", layers, 2 * d * scores, 0.0, scores * a,
                    tokens * q_dim * a, kv_read_each, **attn_dims),
            ]
        ops.append(linear("o_proj", layers, tokens, q_dim, h))

    if tp > 1:
        ops.append(_collective("attn_allreduce", "allreduce", layers, tokens * h * a, tp))
    ops += [residual("attn_residual"), norm("mlp_norm", layers)]

    if model.num_dense_mlp_layers:
        ops += mlp("", model.num_dense_mlp_layers, tokens, -(-model.intermediate_size // tp))
    if model.is_moe:
        moe_layers, experts, top_k = model.num_moe_layers, model.moe.num_experts, model.moe.num_experts_per_token
        touched = get_expected_experts_touched(experts, top_k, tokens)
        routed_tokens = tokens * top_k  # token-expert assignments; each expert multiplies its share of them
        ops.append(linear("router", moe_layers, tokens, h, experts))
        ops += mlp("experts_", moe_layers, routed_tokens, -(-model.moe.moe_intermediate_size // tp),
                   weight_copies=touched, kind="expert_linear")
        if model.shared_intermediate_size:
            ops += mlp("shared_", moe_layers, tokens, -(-model.shared_intermediate_size // tp))
    if tp > 1:
        ops.append(_collective("mlp_allreduce", "allreduce", layers, tokens * h * a, tp))
    ops += [
        residual("mlp_residual"),
        norm("final_norm", 1, logit_tokens),
        linear("lm_head", 1, logit_tokens, h, vocab_local),
    ]
    if tp > 1:
        ops.append(_collective("logits_allgather", "allgather", 1, logit_tokens * vocab * a, tp))
    return ops


def get_kv_elements_per_token_per_layer_per_device(model: ModelSpec, tensor_parallel: int = 1) -> int:
    """KV elements one device caches per token and layer: its share of KV heads (replicated when tp exceeds them);
    MLA's latent is replicated on every device."""
    if model.is_mla:
        return model.get_kv_elements_per_token_per_layer()
    return 2 * -(-model.num_kv_heads // tensor_parallel) * model.head_dim_resolved


def get_kv_cache_bytes(model: ModelSpec, batch, tokens_per_sequence, kv_dtype: str, tensor_parallel: int = 1):
    """KV-cache memory on one device for `batch` sequences of `tokens_per_sequence` positions (sliding windows hold
    only W)."""
    stored = get_kv_tokens_stored(0, tokens_per_sequence, model.sliding_window_tokens)
    per_token = model.num_layers * get_kv_elements_per_token_per_layer_per_device(model, tensor_parallel)
    return np.asarray(batch, dtype=float) * stored * per_token * get_dtype_bytes(kv_dtype)


def get_activation_bytes(model: ModelSpec, batch, new_tokens, context_tokens, activation_dtype: str,
                         attention: str = "flash", tensor_parallel: int = 1):
    """Peak transient activation memory of one step on one device (a working-set estimate, not an allocator trace).

    The widest live tensors: the MLP's gate and up outputs (routed tokens x expert width for MoE), a few hidden-sized
    buffers, fp32 logits and, when unfused, one layer's materialised attention scores.
    """
    a = get_dtype_bytes(activation_dtype)
    tp = tensor_parallel
    tokens = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float)
    widest = model.intermediate_size
    if model.is_moe:
        widest = max(widest, model.moe.num_experts_per_token * model.moe.moe_intermediate_size)
    working = tokens * (2 * widest / tp + 4 * model.hidden_size) * a + tokens * model.vocab_size * 4
    if attention == "unfused":
        kv_tokens = get_kv_tokens_read(context_tokens, new_tokens, model.sliding_window_tokens)
        heads = model.num_attention_heads // tp
        working = working + np.asarray(batch, dtype=float) * heads * np.asarray(new_tokens) * kv_tokens * a
    return working
