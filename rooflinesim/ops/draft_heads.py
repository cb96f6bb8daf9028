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

from dataclasses import dataclass, replace

import numpy as np

from ..specs.model import ModelSpec
from .op_cost import FLOPS_PER_SCORE_SOFTMAX, OpCost, make_op
from .sections import (
    OpContext, allreduce_ops, attention_ops_gqa, attention_ops_mla, dense_mlp_ops, embedding_ops, get_local_width,
    lm_head_ops, moe_mlp_ops,
)
from ..specs.workload import Workload

HEAD_KINDS = ("eagle", "eagle3", "mtp", "medusa")
#: EAGLE-3's heads for Llama-3.1 draft over the 32,000 most frequent target tokens: `draft_vocab_size: 32000` in
#: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config.json (and SGLang's test config of LlamaForCausalLMEagle3)
EAGLE3_DRAFT_VOCAB_SIZE = 32000
#: the target hidden states EAGLE-3 fuses (low, middle and high layers), projected by fc (3 h -> h)
EAGLE3_FUSED_FEATURES = 3
#: where each preset's op list comes from
HEAD_SOURCES = {
    "eagle": "EAGLE: one decoder layer + fc (2h -> h) + the target's lm_head per draft token (Li et al., arXiv "
             "2401.15077; EAGLE-3 arXiv 2503.01840 keeps one layer)",
    "eagle3": "EAGLE-3: fc (3 target hidden states -> h) on the target's features, num_hidden_layers decoder layers "
              "(the first's q/k/v read [embedding, hidden] = 2h), its own lm_head over draft_vocab_size (Li et al., "
              "arXiv 2503.01840; SGLang python/sglang/srt/models/llama_eagle3.py @03d5a77)",
    "mtp": "DeepSeek-V3 MTP module: embedding, 2 RMSNorms, projection 2h -> h, one Transformer block of the target, "
           "shared output head per depth (arXiv 2412.19437 s2.2)",
    "medusa": "Medusa: per head one residual block (h -> h, SiLU) + its own lm_head h -> V (Cai et al., arXiv "
              "2401.10774)",
}


@dataclass(frozen=True)
class HeadConfig:
    """A draft head's own shapes, as its config.json states them (`scenario.drafting.read_head_config`); None
    fields fall back to the target's."""

    num_layers: int = 1
    draft_vocab_size: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    source: str = "defaults"


def get_eagle3_model(target: ModelSpec, head: HeadConfig | None) -> ModelSpec:
    """The EAGLE-3 head as a dense model of its own layers, width and (draft) vocabulary; model_copy skips
    validation on purpose: a view of the target's shapes."""
    head = head or HeadConfig()
    vocab = head.draft_vocab_size or min(EAGLE3_DRAFT_VOCAB_SIZE, target.vocab_size)
    return target.model_copy(update={
        "num_layers": head.num_layers, "hidden_size": head.hidden_size or target.hidden_size,
        "intermediate_size": head.intermediate_size or target.intermediate_size,
        "num_attention_heads": head.num_attention_heads or target.num_attention_heads,
        "num_kv_heads": head.num_kv_heads or target.num_kv_heads, "vocab_size": vocab, "moe": None, "mla": None,
        "sliding_window_tokens": None})


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


def _eagle3_ops(target: ModelSpec, w: Workload, batch, context_tokens, head: HeadConfig | None,
                first_step: bool, new_tokens=1) -> tuple[list[OpCost], list[OpCost]]:
    """EAGLE-3's draft step: the fc fusion of the target's three hidden states only on the step that starts from
    the target's features (later steps feed the head's own hidden state, which is already h wide); the first layer's
    q/k/v over [embedding, hidden] (2h in: priced as the layer's q/k/v plus a second h-wide input); the draft
    vocabulary's lm_head."""
    model = get_eagle3_model(target, head)
    layers = model.num_layers
    model = model.model_copy(update={"num_layers": 1})  # one layer's ops, counted `layers` times below
    c = OpContext.build(model, w, batch, context_tokens, new_tokens, False)
    h, t = c.h, c.tokens
    d = model.head_dim_resolved
    qkv_out = (c.heads + 2 * get_local_width(model.num_kv_heads, c.tp)) * d
    target_h = target.hidden_size
    rest = embedding_ops(c) + [c.norm("eagle3_hidden_norm", 1), c.linear("eagle3_qkv_embed_input", 1, t, h, qkv_out)]
    if first_step:
        rest = [c.linear("eagle3_fc", 1, t, EAGLE3_FUSED_FEATURES * target_h, h)] + rest
    return [replace(op, count=op.count * layers) for op in _layer_ops(c)], rest + lm_head_ops(c)


def get_head_ops(kind: str, target: ModelSpec, workload: Workload, batch, context_tokens,
                 head: HeadConfig | None = None, first_step: bool = True,
                 new_tokens=1) -> tuple[list[OpCost], list[OpCost]]:
    """(decoder-layer ops, the rest) of ONE draft forward of a `kind` head, on one device. `head`: an EAGLE-3 head's
    own shapes (its config.json); `first_step`: the draft step that starts from the target's features (EAGLE-3 fuses
    them only then); `new_tokens`: rows per sequence the forward runs (1 for a draft step; an engine's draft-extend
    pass runs the tokens the verify just checked), with logits for the last row of each sequence only."""
    if kind not in HEAD_KINDS:
        raise ValueError(f"unknown head kind {kind!r}; use one of {', '.join(HEAD_KINDS)}")
    w = workload
    if kind == "eagle3":
        return _eagle3_ops(target, w, batch, context_tokens, head, first_step, new_tokens)
    model = target if kind == "medusa" else _one_layer(target, dense=kind == "eagle")
    c = OpContext.build(model, w, batch, context_tokens, new_tokens, False)
    h, t = c.h, c.tokens
    if kind == "medusa":
        block = [c.linear("medusa_block", 1, t, h, h),
                 make_op("medusa_act", "elementwise", 1, 5 * t * h, 0.0, 2 * t * h * c.a, t * h * c.a, m=t, n=h)]
        return [], block + lm_head_ops(c)[1:]  # each head has its own vocabulary projection, no final norm
    project = [c.linear(f"{kind}_fc", 1, t, 2 * h, h)]
    if kind == "mtp":
        project = [c.norm("mtp_hidden_norm", 1), c.norm("mtp_embed_norm", 1)] + project
    return _layer_ops(c), embedding_ops(c) + project + lm_head_ops(c)


#: bytes per element of the logits a draft selection upcasts to before its softmax and top-k (SGLang's
#: LogitsProcessor returns `logits[:, : vocab_size].float()`)
DRAFT_SELECT_LOGIT_BYTES = 4


def get_head_vocab_size(kind: str, target: ModelSpec, head: HeadConfig | None = None) -> int:
    """The vocabulary a head's logits cover: EAGLE-3's own draft vocabulary, else the target's (EAGLE-1/2 and MTP
    share its lm_head; each Medusa head projects onto it)."""
    return get_eagle3_model(target, head).vocab_size if kind == "eagle3" else target.vocab_size


def get_draft_select_ops(rows, vocab: int, logit_bytes: float) -> list[OpCost]:
    """How an EAGLE worker picks its draft tokens from one draft forward's logits (`rows` = sequences x tree width,
    one logit row each), whatever the temperature: the logits upcast to fp32 (read `logit_bytes`, write 4 per
    element), a softmax over them (read 4, write 4: FLOPS_PER_SCORE_SOFTMAX per element) and the top-k (read 4; its
    k indices and probabilities are negligible). Three kernels, as SGLang runs them (`LogitsProcessor._get_logits`
    `.float()`, `torch.softmax`, `fast_topk` in eagle_worker.py)."""
    elements = np.asarray(rows, dtype=float) * vocab
    f32 = DRAFT_SELECT_LOGIT_BYTES
    return [
        make_op("draft_logits_upcast", "elementwise", 1, elements, 0.0, logit_bytes * elements, f32 * elements,
                m=rows, vocab=vocab),
        make_op("draft_softmax", "elementwise", 1, FLOPS_PER_SCORE_SOFTMAX * elements, 0.0, f32 * elements,
                f32 * elements, m=rows, vocab=vocab),
        make_op("draft_topk", "elementwise", 1, elements, 0.0, f32 * elements, 0.0, m=rows, vocab=vocab),
    ]


def get_head_weight_bytes(kind: str, target: ModelSpec, workload: Workload, k: int = 1,
                          head: HeadConfig | None = None) -> float:
    """Weights a head adds on one device beyond the target's (EAGLE and MTP share the embedding and lm_head, EAGLE-3
    only the embedding: its lm_head is its own over the draft vocabulary; each of Medusa's k heads has its own block
    and lm_head)."""
    layer, rest = get_head_ops(kind, target, workload, 1, 1, head)
    if kind == "eagle3":
        own = [op for op in rest if op.name not in ("embedding", "final_norm")]
        return float(sum(np.max(op.weight_bytes) * op.count for op in layer + own))
    if kind == "medusa":
        return float(k * sum(np.max(op.weight_bytes) for op in rest))
    own = [op for op in rest if op.name not in ("embedding", "lm_head", "final_norm")]
    modules = head.num_layers if kind == "mtp" and head is not None else 1  # DeepSeek-V3: num_nextn_predict_layers
    return float(modules * sum(np.max(op.weight_bytes) for op in layer + own))


__all__ = ["HEAD_KINDS", "HEAD_SOURCES", "HeadConfig", "DRAFT_SELECT_LOGIT_BYTES", "EAGLE3_DRAFT_VOCAB_SIZE",
           "get_draft_select_ops", "get_eagle3_model", "get_head_ops", "get_head_vocab_size", "get_head_weight_bytes"]
