"""The sections of one forward step (embedding, attention GQA / MLA, MLP dense / MoE, collectives, lm_head), each a
function of one OpContext that returns its ops in execution order; `ops.get_step_ops` strings them together. The
sampler after the logits (and, for speculation, the acceptance rule) are ops too, priced only when the workload asks
for them: an engine's step samples, a bare forward pass (what calibration and `validate` time) does not.

OpContext holds what every section prices from, resolved once per step: the token counts of the grid, bytes per
element of each dtype, the tensor-parallel local sizes, and the attention geometry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs.model import ModelSpec
from ..specs.workload import Workload
from .op_cost import (
    FLOPS_PER_ELEMENT_GELU, FLOPS_PER_ELEMENT_LAYERNORM, FLOPS_PER_ELEMENT_RMSNORM, FLOPS_PER_ELEMENT_ROPE,
    FLOPS_PER_ELEMENT_SILU_GATE, FLOPS_PER_SCORE_SOFTMAX, OpCost, get_attention_pairs, get_expected_experts_touched,
    get_kv_tokens_read, make_collective, make_linear, make_op,
)
from ..units import get_dtype_bytes, get_weight_bytes_per_element, normalize_dtype
from ..specs.implementation import ImplementationSpec
from .implementation_ops import gqa_expansion_ops, grouped_expert_ops, kv_append_ops, rope_extra_ops

#: Weight dtypes stored quantised and dequantised on the fly: 2 FLOPs per weight (scale and shift).
DEQUANTISED_WEIGHT_DTYPES = ("int8", "int4")
DEQUANT_FLOPS_PER_WEIGHT = 2.0


@dataclass(frozen=True)
class OpContext:
    """One step's resolved quantities on ONE device. B, S, q and everything derived from them may be arrays."""

    model: ModelSpec
    attention: str  # 'flash', 'unfused' or 'per-head'
    tp: int
    w: float  # stored bytes per weight, group scales included
    a: float  # bytes per activation element
    kv: float  # bytes per KV-cache element
    dequant_flops_per_weight: float
    b: np.ndarray
    q: np.ndarray
    tokens: np.ndarray  # B x q new tokens
    logit_tokens: np.ndarray  # tokens whose logits are computed
    heads: int  # local query heads
    vocab_local: int
    kv_tokens: np.ndarray  # cached positions each sequence reads (sliding window applied)
    pairs: np.ndarray  # (query, key) pairs one head of one sequence scores
    s: np.ndarray = 0.0  # cached positions per sequence before the step
    #: what the running code does beyond the reference decoder (`specs.implementation`); None: the reference
    impl: ImplementationSpec | None = None

    @classmethod
    def build(cls, model: ModelSpec, workload: Workload, batch, context_tokens, new_tokens,
              logits_for_all_tokens: bool, impl: ImplementationSpec | None = None) -> "OpContext":
        """The step's quantities for `batch` x `new_tokens` on `context_tokens`, in the workload's dtypes, attention
        mode, sharding and quantisation group (its own batch and context are not read); `impl`: what the running code does beyond the
        reference decoder (None: the reference)."""
        tp = int(workload.tensor_parallel)
        b = np.asarray(batch, dtype=float)
        s = np.asarray(context_tokens, dtype=float)
        q = np.asarray(new_tokens, dtype=float)
        tokens = b * q
        window = model.sliding_window_tokens
        return cls(
            model=model, attention=workload.attention, tp=tp,
            w=get_weight_bytes_per_element(workload.weight_dtype, workload.quant_group_size),
            a=get_dtype_bytes(workload.activation_dtype), kv=get_dtype_bytes(workload.kv_dtype),
            dequant_flops_per_weight=(DEQUANT_FLOPS_PER_WEIGHT if normalize_dtype(workload.weight_dtype)
                                      in DEQUANTISED_WEIGHT_DTYPES else 0.0),
            b=b, q=q, tokens=tokens, logit_tokens=tokens if logits_for_all_tokens else b,
            heads=model.num_attention_heads // tp, vocab_local=-(-model.vocab_size // tp),
            kv_tokens=get_kv_tokens_read(s, q, window), pairs=get_attention_pairs(s, q, window), s=s, impl=impl,
        )

    @property
    def h(self) -> int:
        return self.model.hidden_size

    @property
    def layers(self) -> int:
        return self.model.num_layers

    def linear(self, name, count, m, k_in, n_out, bias=False, kind="linear", weight_copies=1.0) -> OpCost:
        """A projection; `weight_copies` distinct weight matrices are read (routed experts) and quantised weights
        add their dequantisation FLOPs."""
        op = make_linear(name, count, m, k_in, n_out, self.w, self.a, bias)
        if kind == "linear" and not self.dequant_flops_per_weight:
            return op
        weight = op.weight_bytes * weight_copies
        flops = op.flops + self.dequant_flops_per_weight * k_in * n_out * weight_copies
        return OpCost(name, kind, count, flops, weight, op.act_read_bytes, op.act_write_bytes, op.kv_read_bytes,
                      op.kv_write_bytes, op.comm_bytes, dims={**op.dims, "experts": weight_copies})

    def norm(self, name, count, m=None, width=None) -> OpCost:
        m = self.tokens if m is None else m
        width = self.h if width is None else width
        flops = FLOPS_PER_ELEMENT_RMSNORM if self.model.norm == "rmsnorm" else FLOPS_PER_ELEMENT_LAYERNORM
        return make_op(name, "norm", count, flops * m * width, self.model.norm_params_per_element * width * self.w,
                       m * width * self.a, m * width * self.a, m=m, n=width)

    def residual(self, name) -> OpCost:
        t, h, a = self.tokens, self.h, self.a
        return make_op(name, "elementwise", self.layers, t * h, 0.0, 2 * t * h * a, t * h * a, m=t, n=h)

    def mlp(self, prefix, count, m, width, weight_copies=1.0, kind="linear") -> list[OpCost]:
        """gate (when gated), up, activation, down: one MLP of `width` (already the device's share)."""
        h, gated = self.h, self.model.gated_mlp
        if gated and self.impl is not None and self.impl.fused_gate_up.value:  # one projection of twice the width
            ops = [self.linear(f"{prefix}gate_up_proj", count, m, h, 2 * width, kind=kind,
                               weight_copies=weight_copies)]
        else:
            ops = [self.linear(f"{prefix}gate_proj", count, m, h, width, kind=kind, weight_copies=weight_copies)] \
                if gated else []
            ops.append(self.linear(f"{prefix}up_proj", count, m, h, width, kind=kind, weight_copies=weight_copies))
        return ops + [
            self._mlp_act(f"{prefix}mlp_act", count, m, width),
            self.linear(f"{prefix}down_proj", count, m, width, h, kind=kind, weight_copies=weight_copies),
        ]

    def _mlp_act(self, name, count, m, width) -> OpCost:
        a = self.a
        if self.model.gated_mlp:  # silu(gate) * up reads two inputs
            return make_op(name, "elementwise", count, FLOPS_PER_ELEMENT_SILU_GATE * m * width, 0.0, 2 * m * width * a,
                           m * width * a, m=m, n=width)
        return make_op(name, "elementwise", count, FLOPS_PER_ELEMENT_GELU * m * width, 0.0, m * width * a,
                       m * width * a, m=m, n=width)


def get_local_width(width: int, tp: int) -> int:
    """A device's share of a dimension sharded over `tp` devices (rounded up: the largest shard sets the time)."""
    return -(-width // tp)


def embedding_ops(c: OpContext) -> list[OpCost]:
    """Gather one row per token from the device's vocabulary shard (at most the whole shard)."""
    t = c.tokens
    ops = [make_op("embedding", "embedding", 1, 0.0, np.minimum(t, c.vocab_local) * c.h * c.w, t * 4,
                   t * c.h * c.a, m=t, n=c.h)]
    return ops + allreduce_ops(c, "embedding_allreduce", 1)


def attention_ops_gqa(c: OpContext) -> list[OpCost]:
    """q/k/v projections, RoPE, the KV-cache write, attention (flash: one fused op; unfused: scores, softmax and
    values materialised over the full q x (S + q) rectangle), o_proj. K and V are read once per KV head."""
    model, t, a, layers = c.model, c.tokens, c.a, c.layers
    d = model.head_dim_resolved
    kv_heads = get_local_width(model.num_kv_heads, c.tp)  # replicated when tp > KV heads
    q_dim, kv_dim = c.heads * d, kv_heads * d
    bias = model.attention_bias
    kv_read_each = c.b * kv_heads * c.kv_tokens * d * c.kv  # K (or V) of every KV head, read once per group
    if c.attention == "per-head":
        # a fused kernel that does not share K/V across a query group (one thread block per query head, as decode
        # kernels did before GQA-specific ones such as TensorRT-LLM's XQA): each query head reads its K/V again
        kv_read_each = kv_read_each * (c.heads / kv_heads)
    dims = dict(batch=c.b, heads=c.heads, kv_heads=kv_heads, q=c.q, kv_tokens=c.kv_tokens, head_dim=d)
    window = model.sliding_window_tokens
    if c.impl is not None and c.impl.fused_qkv.value:  # one projection of width q + 2 kv (gpt-fast's wqkv)
        ops = [c.linear("qkv_proj", layers, t, c.h, q_dim + 2 * kv_dim, bias)]
    else:
        ops = [c.linear("q_proj", layers, t, c.h, q_dim, bias), c.linear("k_proj", layers, t, c.h, kv_dim, bias),
               c.linear("v_proj", layers, t, c.h, kv_dim, bias)]
    ops += [
        make_op("rope", "elementwise", layers, FLOPS_PER_ELEMENT_ROPE * t * (q_dim + kv_dim), 0.0,
                t * (q_dim + kv_dim) * a, t * (q_dim + kv_dim) * a, m=t, n=q_dim + kv_dim),
        *rope_extra_ops(c.impl, t, q_dim + kv_dim, a, layers),
        make_op("kv_cache_write", "elementwise", layers, 0.0, 0.0, 2 * t * kv_dim * a, 0.0, 0.0,
                2 * t * kv_dim * c.kv, m=t, n=2 * kv_dim),
        *kv_append_ops(c.impl, c.b, c.s, c.q, kv_heads, d, c.kv, layers, window),
        *gqa_expansion_ops(c.impl, c.b, c.s, c.q, c.heads, kv_heads, d, c.kv, layers, window),
    ]
    if c.attention in ("flash", "per-head"):
        ops.append(make_op("attention", "attention", layers, (4 * d + FLOPS_PER_SCORE_SOFTMAX) * c.b * c.heads * c.pairs,
                           0.0, t * q_dim * a, t * q_dim * a, 2 * kv_read_each, 0.0, **dims))
    else:
        scores = c.b * c.heads * c.q * c.kv_tokens  # the full rectangle, masked entries included
        ops += [
            make_op("attn_scores", "attention_scores", layers, 2 * d * scores, 0.0, t * q_dim * a, scores * a,
                    kv_read_each, **dims),
            make_op("softmax", "softmax", layers, FLOPS_PER_SCORE_SOFTMAX * scores, 0.0, scores * a, scores * a,
                    **dims),
            make_op("attn_values", "attention_values", layers, 2 * d * scores, 0.0, scores * a, t * q_dim * a,
                    kv_read_each, **dims),
        ]
    return ops + [c.linear("o_proj", layers, t, q_dim, c.h)]


def attention_ops_mla(c: OpContext) -> list[OpCost]:
    """The absorbed form decode kernels run: attention over the compressed latent, with the KV up-projections folded
    into the query and output (`kv_b_absorb`). The latent cache is replicated on every device."""
    mla, t, a, h, heads, layers = c.model.mla, c.tokens, c.a, c.h, c.heads, c.layers
    rank, rope_d, nope, v_d = mla.kv_lora_rank, mla.qk_rope_head_dim, mla.qk_nope_head_dim, mla.v_head_dim
    latent = mla.latent_dim
    if mla.q_lora_rank:
        ops = [c.linear("q_a_proj", layers, t, h, mla.q_lora_rank),
               c.norm("q_a_norm", layers, t, mla.q_lora_rank),
               c.linear("q_b_proj", layers, t, mla.q_lora_rank, heads * (nope + rope_d))]
    else:
        ops = [c.linear("q_proj", layers, t, h, heads * (nope + rope_d))]
    kv_b_weights = rank * heads * (nope + v_d)
    absorb_flops = 2 * t * heads * (nope * rank + rank * v_d)
    return ops + [
        c.linear("kv_a_proj", layers, t, h, latent),
        c.norm("kv_a_norm", layers, t, rank),
        make_op("kv_b_absorb", "linear", layers, absorb_flops, kv_b_weights * c.w,
                t * heads * (nope + rank) * a, t * heads * (rank + v_d) * a, m=t, k=rank, n=heads * (nope + v_d)),
        make_op("rope", "elementwise", layers, FLOPS_PER_ELEMENT_ROPE * t * (heads + 1) * rope_d, 0.0,
                t * (heads + 1) * rope_d * a, t * (heads + 1) * rope_d * a, m=t, n=(heads + 1) * rope_d),
        make_op("kv_cache_write", "elementwise", layers, 0.0, 0.0, t * latent * a, 0.0, 0.0,
                t * latent * c.kv, m=t, n=latent),
        # all heads share one latent "KV head": scores over the latent + rope dims, values over the latent
        make_op("attention", "attention", layers,
                (2 * latent + 2 * rank + FLOPS_PER_SCORE_SOFTMAX) * c.b * heads * c.pairs, 0.0,
                t * heads * latent * a, t * heads * rank * a, c.b * c.kv_tokens * latent * c.kv, 0.0,
                batch=c.b, heads=heads, kv_heads=1, q=c.q, kv_tokens=c.kv_tokens, head_dim=latent),
        c.linear("o_proj", layers, t, heads * v_d, h),
    ]


def dense_mlp_ops(c: OpContext) -> list[OpCost]:
    """The dense MLP of every layer that has one (all layers of a dense model, the leading ones of DeepSeek)."""
    layers = c.model.num_dense_mlp_layers
    if not layers:
        return []
    return c.mlp("", layers, c.tokens, get_local_width(c.model.intermediate_size, c.tp))


def moe_mlp_ops(c: OpContext) -> list[OpCost]:
    """Router, the routed experts (each multiplies its share of the token-expert assignments; the step reads the
    weights of every expert touched) and the shared experts."""
    moe = c.model.moe
    if moe is None:
        return []
    layers = c.model.num_moe_layers
    touched = get_expected_experts_touched(moe.num_experts, moe.num_experts_per_token, c.tokens)
    routed_tokens = c.tokens * moe.num_experts_per_token
    width = get_local_width(moe.moe_intermediate_size, c.tp)
    ops = [c.linear("router", layers, c.tokens, c.h, moe.num_experts)]
    if c.impl is not None and c.impl.grouped_experts:  # one GEMM per expert (`implementation_ops`)
        up, down = grouped_expert_ops(layers, routed_tokens, touched, moe.num_experts, c.h, width,
                                      c.model.gated_mlp, c.w, c.a, c.dequant_flops_per_weight)
        ops += [up, c._mlp_act("experts_mlp_act", layers, routed_tokens, width), down]
    else:
        ops += c.mlp("experts_", layers, routed_tokens, width, weight_copies=touched, kind="expert_linear")
    if moe.shared_intermediate_size:
        ops += c.mlp("shared_", layers, c.tokens, get_local_width(moe.shared_intermediate_size, c.tp))
    return ops


def allreduce_ops(c: OpContext, name: str, count: int) -> list[OpCost]:
    """Megatron tensor parallelism all-reduces the hidden activations after each sharded section; none at tp 1."""
    if c.tp == 1:
        return []
    return [make_collective(name, "allreduce", count, c.tokens * c.h * c.a, c.tp)]


def lm_head_ops(c: OpContext) -> list[OpCost]:
    """Final norm and the vocab-parallel lm_head over the tokens whose logits are needed; the logit shards are then
    all-gathered."""
    t = c.logit_tokens
    ops = [c.norm("final_norm", 1, t), c.linear("lm_head", 1, t, c.h, c.vocab_local)]
    if c.tp > 1:
        ops.append(make_collective("logits_allgather", "allgather", 1, t * c.model.vocab_size * c.a, c.tp))
    return ops



#: bytes per element the sampler and the acceptance rule move: engines sample from fp32 logits (vLLM and SGLang upcast
#: before the softmax)
SAMPLER_BYTES_PER_ELEMENT = get_dtype_bytes("fp32")


def get_sampler_bytes(batch, new_tokens, vocab: int):
    """Traffic of one step's sampler: the logits of every computed position read and their probabilities written
    (temperature, softmax), then one probability row per sequence read to draw its next token."""
    rows = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float)
    return SAMPLER_BYTES_PER_ELEMENT * vocab * (2.0 * rows + np.asarray(batch, dtype=float))


def get_acceptance_rule_bytes(batch, vocab: int):
    """Traffic of the exact acceptance rule after a verify, per sequence: the target's and the draft's probability rows
    at the first rejected position read, the residual max(p - q, 0) written and read to draw the correction token
    (the per-draft probability lookups are a few scalars)."""
    return SAMPLER_BYTES_PER_ELEMENT * vocab * 4.0 * np.asarray(batch, dtype=float)


def sampler_ops(c: OpContext) -> list[OpCost]:
    """The sampler over the logits the step computed (the whole vocabulary: vocab-parallel logits were gathered)."""
    return get_sampler_ops(c.model, c.b, c.logit_tokens / c.b)


def get_sampler_ops(model: ModelSpec, batch, new_tokens=1) -> list[OpCost]:
    """The sampler of a step of `batch` sequences with `new_tokens` computed logit positions each."""
    b = np.asarray(batch, dtype=float)
    q = np.asarray(new_tokens, dtype=float)
    vocab = model.vocab_size
    bytes_moved = get_sampler_bytes(b, q, vocab)
    return [make_op("sample", "elementwise", 1, FLOPS_PER_SCORE_SOFTMAX * b * q * vocab, 0.0, bytes_moved / 2, bytes_moved / 2,
                    m=b, q=q, vocab=vocab)]


def get_acceptance_rule_ops(model: ModelSpec, batch, k) -> list[OpCost]:
    """The exact (rejection-sampling) rule of one speculative iteration: per sequence, accept each draft with
    probability min(1, p / q) until the first rejection, then draw the correction token from max(p - q, 0). Nothing
    when k = 0 (plain decoding samples in its step)."""
    b = np.asarray(batch, dtype=float)
    on = (np.asarray(k, dtype=float) > 0).astype(float)
    bytes_moved = get_acceptance_rule_bytes(b, model.vocab_size) * on
    return [make_op("accept_rule", "elementwise", 1, 2.0 * b * model.vocab_size * on, 0.0, bytes_moved / 2,
                    bytes_moved / 2, m=b, k=np.asarray(k, dtype=float), vocab=model.vocab_size)]
