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
from .units import get_dtype_bytes

#: Op kinds whose FLOPs run on the matrix units (tensor cores, AMX); the rest are vector/elementwise work.
MATMUL_KINDS = frozenset({"linear", "attention", "attention_scores", "attention_values"})
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
    dims: dict = field(default_factory=dict, compare=False)

    @property
    def bytes(self) -> np.ndarray:
        return self.weight_bytes + self.act_read_bytes + self.act_write_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def arithmetic_intensity_flops_per_byte(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.bytes > 0, self.flops / np.maximum(self.bytes, 1e-300), 0.0)


def _op(name, kind, count, flops=0.0, weight=0.0, act_read=0.0, act_write=0.0, kv_read=0.0, kv_write=0.0, **dims):
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (flops, weight, act_read, act_write, kv_read, kv_write)))
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
) -> list[OpCost]:
    """All ops of one forward step, in execution order. B, S, q may be broadcastable arrays.

    Attention is GQA-aware: K and V are read once per KV head and shared by its query group. `flash` keeps the score
    matrix on chip (one fused op); `unfused` materialises scores and probabilities in memory, computing the full
    q x (S + q) rectangle as eager implementations do (the causal mask is applied, not skipped).
    """
    if attention not in ("flash", "unfused"):
        raise ValueError(f"attention must be 'flash' or 'unfused', got {attention!r}")
    w, kv, a = get_dtype_bytes(weight_dtype), get_dtype_bytes(kv_dtype), get_dtype_bytes(activation_dtype)
    b = np.asarray(batch, dtype=float)
    s = np.asarray(context_tokens, dtype=float)
    q = np.asarray(new_tokens, dtype=float)
    tokens = b * q
    logit_tokens = tokens if logits_for_all_tokens else b

    h, inter, vocab = model.hidden_size, model.intermediate_size, model.vocab_size
    heads, kv_heads, d = model.num_attention_heads, model.num_kv_heads, model.head_dim_resolved
    q_dim, kv_dim = model.q_dim, model.kv_dim
    layers = model.num_layers
    window = model.sliding_window_tokens
    norm_flops = FLOPS_PER_ELEMENT_RMSNORM if model.norm == "rmsnorm" else FLOPS_PER_ELEMENT_LAYERNORM
    norm_weights = h * w * (1 if model.norm == "rmsnorm" else 2)
    bias = model.attention_bias

    def norm(name, count):
        return _op(name, "norm", count, norm_flops * tokens * h, norm_weights, tokens * h * a, tokens * h * a, m=tokens, n=h)

    def residual(name):
        return _op(name, "elementwise", layers, tokens * h, 0.0, 2 * tokens * h * a, tokens * h * a, m=tokens, n=h)

    kv_tokens = get_kv_tokens_read(s, q, window)
    pairs = get_attention_pairs(s, q, window)
    kv_read_each = b * kv_heads * kv_tokens * d * kv  # K (or V) of every KV head, read once per group
    attn_dims = dict(batch=b, heads=heads, kv_heads=kv_heads, q=q, kv_tokens=kv_tokens, head_dim=d)

    ops = [
        _op("embedding", "embedding", 1, 0.0, np.minimum(tokens, vocab) * h * w, tokens * 4, tokens * h * a, m=tokens, n=h),
        norm("attn_norm", layers),
        _linear("q_proj", layers, tokens, h, q_dim, w, a, bias),
        _linear("k_proj", layers, tokens, h, kv_dim, w, a, bias),
        _linear("v_proj", layers, tokens, h, kv_dim, w, a, bias),
        _op(
            "rope", "elementwise", layers, FLOPS_PER_ELEMENT_ROPE * tokens * (q_dim + kv_dim), 0.0,
            tokens * (q_dim + kv_dim) * a, tokens * (q_dim + kv_dim) * a, m=tokens, n=q_dim + kv_dim,
        ),
        _op(
            "kv_cache_write", "elementwise", layers, 0.0, 0.0, 2 * tokens * kv_dim * a, 0.0, 0.0,
            2 * tokens * kv_dim * kv, m=tokens, n=2 * kv_dim,
        ),
    ]
    if attention == "flash":
        ops.append(
            _op(
                "attention", "attention", layers,
                (4 * d + FLOPS_PER_SCORE_SOFTMAX) * b * heads * pairs,
                0.0, tokens * q_dim * a, tokens * q_dim * a, 2 * kv_read_each, 0.0, **attn_dims,
            )
        )
    else:
        scores = b * heads * q * kv_tokens  # the full rectangle, masked entries included
        ops += [
            _op("attn_scores", "attention_scores", layers, 2 * d * scores, 0.0, tokens * q_dim * a, scores * a, kv_read_each, **attn_dims),
            _op("softmax", "softmax", layers, FLOPS_PER_SCORE_SOFTMAX * scores, 0.0, scores * a, scores * a, **attn_dims),
            _op("attn_values", "attention_values", layers, 2 * d * scores, 0.0, scores * a, tokens * q_dim * a, kv_read_each, **attn_dims),
        ]
    mlp_act = (
        _op("mlp_act", "elementwise", layers, FLOPS_PER_ELEMENT_SILU_GATE * tokens * inter, 0.0, 2 * tokens * inter * a, tokens * inter * a, m=tokens, n=inter)
        if model.gated_mlp
        else _op("mlp_act", "elementwise", layers, FLOPS_PER_ELEMENT_GELU * tokens * inter, 0.0, tokens * inter * a, tokens * inter * a, m=tokens, n=inter)
    )
    ops += [
        _linear("o_proj", layers, tokens, q_dim, h, w, a),
        residual("attn_residual"),
        norm("mlp_norm", layers),
    ]
    if model.gated_mlp:
        ops.append(_linear("gate_proj", layers, tokens, h, inter, w, a))
    ops += [
        _linear("up_proj", layers, tokens, h, inter, w, a),
        mlp_act,
        _linear("down_proj", layers, tokens, inter, h, w, a),
        residual("mlp_residual"),
        _op("final_norm", "norm", 1, norm_flops * logit_tokens * h, norm_weights, logit_tokens * h * a, logit_tokens * h * a, m=logit_tokens, n=h),
        _linear("lm_head", 1, logit_tokens, h, vocab, w, a),
    ]
    return ops


def get_kv_cache_bytes(model: ModelSpec, batch, tokens_per_sequence, kv_dtype: str):
    """KV-cache memory for `batch` sequences of `tokens_per_sequence` positions (sliding windows hold only W)."""
    stored = get_kv_tokens_stored(0, tokens_per_sequence, model.sliding_window_tokens)
    return np.asarray(batch, dtype=float) * stored * model.get_kv_bytes_per_token(kv_dtype)


def get_activation_bytes(model: ModelSpec, batch, new_tokens, context_tokens, activation_dtype: str, attention: str = "flash"):
    """Peak transient activation memory of one step (a working-set estimate, not an allocator trace).

    The widest live tensors: the MLP's gate and up outputs, a few hidden-sized buffers, fp32 logits and, when
    unfused, one layer's materialised attention scores.
    """
    a = get_dtype_bytes(activation_dtype)
    tokens = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float)
    working = tokens * (2 * model.intermediate_size + 4 * model.hidden_size) * a + tokens * model.vocab_size * 4
    if attention == "unfused":
        kv_tokens = get_kv_tokens_read(context_tokens, new_tokens, model.sliding_window_tokens)
        working = working + np.asarray(batch, dtype=float) * model.num_attention_heads * np.asarray(new_tokens) * kv_tokens * a
    return working
