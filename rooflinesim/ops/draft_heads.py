"""What a self-drafting head runs per draft token, as its own op list (never a filter over the target's ops).

Each preset builds the ops its drafter executes for one draft token of B sequences at context S, on the target's
dtypes and tensor parallelism, so the datasheet or measured timing model prices them like any other step:

- `eagle` (EAGLE-1/2/3: Li et al., arXiv 2401.15077, 2406.16858, 2503.01840): the sampled token's embedding and
  the target's feature are concatenated and projected (fc, 2h -> h), then ONE decoder layer of the target's shape
  (dense MLP of the target's intermediate size, its own KV cache over the context) and the target's lm_head:
  embedding + fc + one layer + final norm + lm_head per draft step, chained k times.
- `mtp` (DeepSeek-V3 multi-token prediction, arXiv 2412.19437 s2.2): per depth the shared embedding, two RMSNorms,
  a projection 2h -> h, one Transformer block of the target (an MoE block for DeepSeek-V3) and the shared output
  head.
- `medusa` (Cai et al., arXiv 2401.10774): every head is one residual feed-forward block (h -> h, SiLU, residual)
  with its own vocabulary projection (h -> V); the k heads run side by side, so k draft tokens cost k of these.

`head_layer_fraction` scales the decoder-layer part of eagle / mtp (1 = one layer) for heads of other sizes; the
vocabulary projection is always paid in full.
"""

from __future__ import annotations

import numpy as np

from ..specs.model import ModelSpec
from .op_cost import OpCost, make_op
from .sections import (
    OpContext, allreduce_ops, attention_ops_gqa, attention_ops_mla, dense_mlp_ops, embedding_ops, lm_head_ops,
    moe_mlp_ops,
)
from ..specs.workload import Workload

HEAD_KINDS = ("eagle", "mtp", "medusa")
#: where each preset's op list comes from
HEAD_SOURCES = {
    "eagle": "EAGLE: one decoder layer + fc (2h -> h) + the target's lm_head per draft token (Li et al., arXiv "
             "2401.15077; EAGLE-3 arXiv 2503.01840 keeps one layer)",
    "mtp": "DeepSeek-V3 MTP module: embedding, 2 RMSNorms, projection 2h -> h, one Transformer block of the target, "
           "shared output head per depth (arXiv 2412.19437 s2.2)",
    "medusa": "Medusa: per head one residual block (h -> h, SiLU) + its own lm_head h -> V (Cai et al., arXiv "
              "2401.10774)",
}


def _one_layer(target: ModelSpec, dense: bool) -> ModelSpec:
    """The target's shapes with one layer: dense (EAGLE's layer is a plain decoder layer) or as the target's MoE
    layers are (MTP); model_copy skips validation on purpose: the one layer is a view of the target's."""
    moe = None if dense or target.moe is None else target.moe.model_copy(update={"first_dense_layers": 0})
    return target.model_copy(update={"num_layers": 1, "moe": moe})


def _layer_ops(c: OpContext) -> list[OpCost]:
    """One decoder layer on the context's model (attention, MLP, their norms, residuals and all-reduces)."""
    model = c.model
    return [
        c.norm("attn_norm", 1),
        *(attention_ops_mla(c) if model.is_mla else attention_ops_gqa(c)),
        *allreduce_ops(c, "attn_allreduce", 1),
        c.residual("attn_residual"),
        c.norm("mlp_norm", 1),
        *dense_mlp_ops(c),
        *moe_mlp_ops(c),
        *allreduce_ops(c, "mlp_allreduce", 1),
        c.residual("mlp_residual"),
    ]


def get_head_ops(kind: str, target: ModelSpec, workload: Workload, batch, context_tokens
                 ) -> tuple[list[OpCost], list[OpCost]]:
    """(decoder-layer ops, the rest) of ONE draft token of a `kind` head, on one device."""
    if kind not in HEAD_KINDS:
        raise ValueError(f"unknown head kind {kind!r}; use one of {', '.join(HEAD_KINDS)}")
    w = workload
    model = target if kind == "medusa" else _one_layer(target, dense=kind == "eagle")
    c = OpContext.build(model, batch, context_tokens, 1, w.weight_dtype, w.kv_dtype, w.activation_dtype, w.attention,
                        True, w.tensor_parallel, w.quant_group_size)
    h, t = c.h, c.tokens
    if kind == "medusa":
        block = [c.linear("medusa_block", 1, t, h, h),
                 make_op("medusa_act", "elementwise", 1, 5 * t * h, 0.0, 2 * t * h * c.a, t * h * c.a, m=t, n=h)]
        return [], block + lm_head_ops(c)[1:]  # each head has its own vocabulary projection, no final norm
    project = [c.linear(f"{kind}_fc", 1, t, 2 * h, h)]
    if kind == "mtp":
        project = [c.norm("mtp_hidden_norm", 1), c.norm("mtp_embed_norm", 1)] + project
    return _layer_ops(c), embedding_ops(c) + project + lm_head_ops(c)


def get_head_weight_bytes(kind: str, target: ModelSpec, workload: Workload, k: int = 1) -> float:
    """Weights a head adds on one device beyond the target's (EAGLE and MTP share the embedding and lm_head; each
    of Medusa's k heads has its own block and lm_head)."""
    layer, rest = get_head_ops(kind, target, workload, 1, 1)
    if kind == "medusa":
        return float(k * sum(np.max(op.weight_bytes) for op in rest))
    own = [op for op in rest if op.name not in ("embedding", "lm_head", "final_norm")]
    return float(sum(np.max(op.weight_bytes) for op in layer + own))


__all__ = ["HEAD_KINDS", "HEAD_SOURCES", "get_head_ops", "get_head_weight_bytes"]
