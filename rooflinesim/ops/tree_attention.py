"""What a tree-shaped verify adds to the causal verify of the same width: the tree attention mask.

A verify of q = tree tokens + 1 (the root) query tokens per sequence is priced by `step_ops` as a causal step: token
i scores the S cached keys and the i + 1 new ones, q S + q (q + 1) / 2 pairs per head. Under a tree mask token i may
only see its ancestors, but the kernels that verify trees (FlashInfer's custom-mask prefill in SGLang, the
tree-attention kernels of EAGLE / Medusa) compute the whole q x q block of new keys and apply the mask to it, so
they score q S + q^2 pairs and read the mask: bit-packed, q x q / 8 bytes per sequence and layer (SGLang's
`custom_mask` is packed with FlashInfer's `segment_packbits`). This module prices the difference: the upper
triangle's q (q - 1) / 2 extra pairs and the mask read, as one op per layer.
"""

from __future__ import annotations

import numpy as np

from ..specs.model import ModelSpec
from .op_cost import FLOPS_PER_SCORE_SOFTMAX, OpCost, make_op
from .sections import get_local_width

#: bits of the packed mask per (query, key) pair of the new-token block
MASK_BITS_PER_PAIR = 1


def get_tree_mask_ops(model: ModelSpec, batch, verify_tokens, tensor_parallel: int = 1
                      ) -> list[OpCost]:
    """The extra work of a tree mask over a verify of `verify_tokens` (q, the root included) per sequence, on one
    device: 0 for q <= 1."""
    b = np.asarray(batch, dtype=float)
    q = np.asarray(verify_tokens, dtype=float)
    heads = model.num_attention_heads // tensor_parallel
    if model.is_mla:  # the absorbed form scores over the latent + RoPE part
        d = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
    else:
        d = model.head_dim_resolved
    extra_pairs = np.maximum(q * (q - 1) / 2, 0.0)
    flops = (4 * d + FLOPS_PER_SCORE_SOFTMAX) * b * heads * extra_pairs
    mask_bytes = b * q * q * MASK_BITS_PER_PAIR / 8
    kv_heads = get_local_width(model.num_kv_heads, tensor_parallel)
    return [make_op("tree_mask", "attention_scores", model.num_layers, flops, 0.0, mask_bytes, 0.0,
                    batch=b, heads=heads, kv_heads=kv_heads, q=q, kv_tokens=q, head_dim=d)]


__all__ = ["get_tree_mask_ops", "MASK_BITS_PER_PAIR"]
