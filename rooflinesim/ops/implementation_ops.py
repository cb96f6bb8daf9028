"""The ops an implementation adds to a step beyond the reference decoder's (`specs.implementation`).

Each is an ordinary op with its bytes, priced per op by the timing model like any other (so `predict --ops` lists
them); the reference implementation adds none, so its prices are the ones every calibration measured.

* `kv_concat` (per layer): the cache grows by concatenation (transformers' `DynamicCache`): the keys and values
  already cached are read and written again into a fresh allocation, 2 x B x kv_heads x S_kept x d elements each
  way (S_kept: the cached positions, at most `sliding_window - 1` for a sliding-window layer, which keeps that many).
  The new tokens' own write stays in `kv_cache_write`. Its `allocation_bytes` (each new tensor's size) decides
  which measured rate prices it: allocations above the allocator's fresh-page size fault in new pages.
* `kv_repeat` (per layer; with `repeat_kv_multi_token` only in steps of several tokens over a cached prefix, a
  verify): K and V expanded to every query head in memory before attention (`repeat_kv`): reads the KV positions
  the step attends to once, writes them heads / kv_heads times.
* `rope_extra_pass` (per layer and pass): one more read and write of the step's q and k.
* `extra_dispatches` (per layer): aten calls beyond the reference decoder's per layer, priced per call by a
  measured profile (`DtypeProfile.dispatch_s`). Fewer calls than the reference earn no credit: the reference's
  dispatch cost is spread over its per-op fits and the fitted per-layer overhead, and cannot be taken out of them op
  by op. An MoE layer of an implementation with `moe_dispatches` counts its own calls: the layer's dense count with
  the MoE block's (routing + per expert + per hit expert + a shared expert's MLP) in place of the dense MLP's.
* `experts_gate_up_proj` / `experts_down_proj` (per MoE layer, `moe_experts: grouped_loop`): the routed experts as
  one GEMM per expert, each at the tokens routed to it (T x top_k / experts hit, in expectation under uniform
  routing), issued for all E experts of the layer; the experts not hit run an empty GEMM, priced as a dispatch.
  The op's FLOPs and bytes are the whole layer's (every hit expert's weights read once); `dims` carry the per-expert
  shape (`m`, `k`, `n`), `experts` (hit) and `expert_calls` (E) for the timing model (`timing.measured`).
"""

from __future__ import annotations

import numpy as np

from ..specs.implementation import ImplementationSpec, get_reference_implementation
from .op_cost import OpCost, get_kv_tokens_read, make_op


def get_cached_tokens_copied(context_tokens, window_tokens=None):
    """Positions a concatenating cache copies per sequence and layer: all cached ones, or the last W - 1 of a
    sliding window (transformers' DynamicSlidingWindowLayer keeps sliding_window - 1 positions)."""
    s = np.asarray(context_tokens, dtype=float)
    return s if window_tokens is None else np.minimum(s, max(window_tokens - 1, 0))


def kv_append_ops(impl: ImplementationSpec | None, b, context_tokens, new_tokens, kv_heads: int, head_dim: int,
                  kv_bytes: float, layers: int, window_tokens=None) -> list[OpCost]:
    if impl is None or impl.kv_cache_append.value != "concat":
        return []
    copied = get_cached_tokens_copied(context_tokens, window_tokens)
    elements = 2.0 * b * kv_heads * copied * head_dim
    # each of the two new tensors (keys, values) holds the copied positions and the new ones: an allocation above
    # the allocator's fresh-page size costs more per byte (`timing.measured`)
    allocation = b * kv_heads * (copied + np.asarray(new_tokens, dtype=float)) * head_dim * kv_bytes
    return [make_op("kv_concat", "elementwise", layers, 0.0, 0.0, 0.0, 0.0, elements * kv_bytes, elements * kv_bytes,
                    batch=b, kv_heads=kv_heads, head_dim=head_dim, allocation_bytes=allocation)]


def gqa_expansion_ops(impl: ImplementationSpec | None, b, context_tokens, new_tokens, heads: int, kv_heads: int,
                      head_dim: int, kv_bytes: float, layers: int, window_tokens=None) -> list[OpCost]:
    if impl is None or impl.gqa_expansion.value == "native" or heads <= kv_heads:
        return []
    q = np.asarray(new_tokens, dtype=float)
    # `repeat_kv_multi_token`: transformers expands K and V when a mask is needed, i.e. several new tokens over a
    # cached prefix (a verify step); one token packs the query instead, and a prefill without padding is causal
    # without a mask (enable_gqa)
    several_over_cache = (q > 1) & (np.asarray(context_tokens, dtype=float) > 0)
    on = np.ones(several_over_cache.shape) if impl.gqa_expansion.value == "repeat_kv" \
        else several_over_cache.astype(float)
    if not np.any(on):  # decode steps of an implementation that expands only for several tokens
        return []
    positions = get_kv_tokens_read(context_tokens, q, window_tokens)
    elements = 2.0 * b * kv_heads * positions * head_dim * on
    return [make_op("kv_repeat", "elementwise", layers, 0.0, 0.0, 0.0, elements * kv_bytes * heads / kv_heads,
                    elements * kv_bytes, 0.0, batch=b, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                    allocation_bytes=b * heads * positions * head_dim * kv_bytes)]


def rope_extra_ops(impl: ImplementationSpec | None, tokens, width: int, a_bytes: float, layers: int) -> list[OpCost]:
    passes = 0 if impl is None else impl.rope_extra_passes.value
    if not passes:
        return []
    moved = tokens * width * a_bytes
    return [make_op("rope_extra_pass", "elementwise", layers * passes, 0.0, 0.0, moved, moved, m=tokens, n=width)]


def dispatch_ops(impl: ImplementationSpec | None, layers: int, moe_layers: int = 0, num_experts: int = 0,
                 experts_hit=0.0, shared_expert: bool = False) -> list[OpCost]:
    """Calls beyond the reference's per layer: `layers` decoder layers, `moe_layers` of them with an MoE block of
    `num_experts` experts, `experts_hit` of which receive tokens (an array over the grid)."""
    if impl is None:
        return []
    reference = get_reference_implementation().dispatches_per_layer.value
    counted = impl.moe_dispatches
    dense_layers = layers - moe_layers if counted is not None else layers
    ops = []
    extra = impl.dispatches_per_layer.value - reference
    if extra > 0 and dense_layers > 0:
        ops.append(make_op("extra_dispatches", "dispatch", dense_layers, calls=extra))
    if counted is not None and moe_layers > 0:
        calls = impl.dispatches_per_layer.value - counted.dense_mlp \
            + counted.get_block_calls(num_experts, np.asarray(experts_hit, dtype=float), shared_expert)
        moe_extra = np.maximum(calls - reference, 0.0)
        if np.any(moe_extra > 0):
            ops.append(make_op("moe_extra_dispatches", "dispatch", moe_layers, calls=moe_extra))
    return ops


def grouped_expert_ops(layers: int, routed_tokens, experts_hit, num_experts: int, hidden: int, width: int,
                       gated: bool, w: float, a: float, dequant_flops_per_weight: float) -> list[OpCost]:
    """The routed experts' two projections as one GEMM per expert (`moe_experts: grouped_loop`); the activation
    between them is the caller's."""
    routed, hit = np.asarray(routed_tokens, dtype=float), np.asarray(experts_hit, dtype=float)
    rows = routed / np.maximum(hit, 1e-300)  # tokens each hit expert multiplies, in expectation
    ops = []
    for name, k, n in (("experts_gate_up_proj" if gated else "experts_up_proj", hidden, (2 if gated else 1) * width),
                       ("experts_down_proj", width, hidden)):
        weights = hit * k * n
        ops.append(make_op(name, "expert_linear", layers, 2.0 * routed * k * n + dequant_flops_per_weight * weights,
                           weights * w, routed * k * a, routed * n * a, m=rows, k=k, n=n, experts=hit,
                           expert_calls=num_experts))
    return ops


def resolve_implementation(impl) -> ImplementationSpec | None:
    """None for the reference (no ops added: prices are exactly the profile's), the spec otherwise."""
    from ..specs.implementation import REFERENCE_IMPLEMENTATION, load_implementation

    if impl is None or impl == REFERENCE_IMPLEMENTATION:
        return None

    spec = load_implementation(impl)
    return None if spec.name == REFERENCE_IMPLEMENTATION else spec
