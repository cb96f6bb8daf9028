"""A second, independent Llama-style decoder written in the style of pytorch-labs/gpt-fast (`model.py` there), for
`rooflinesim validate --family gptfast`: a hold-out implementation, not the project's reference decoder.

It differs from `calibrate/model.py` where implementations really differ:

* one fused `wqkv` projection (one GEMV of width q + 2 kv instead of three), as gpt-fast loads Llama weights;
* `torch.nn.RMSNorm` (the fused aten op), not a hand-written upcast-rsqrt-multiply;
* RoPE as a complex multiplication (`torch.view_as_complex` of the float-upcast pairs times `freqs_cis`, as Meta's
  reference Llama code does), not the real-arithmetic stack of `model.py`;
* a static KV cache written with `index_copy_` at one shared `input_pos` for the whole batch, read in full up to
  the cache's capacity (rounded up to a multiple of 8, as gpt-fast sizes it) with a slice of a precomputed causal
  mask, not per-sequence lengths and a mask built each step;
* SDPA with native GQA (`enable_gqa=True`) over that cache.

No torch.compile: the eager graph is what a hold-out on the CPU runs.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from ...specs.model import ModelSpec
from ..fitting.plan import check_hold_out, synthetic_spec
from ..measure.timers import Device, Timer, get_torch_dtype


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - n % k


def precompute_freqs_cis(seq_len: int, head_dim: int, base: float = 500000.0) -> torch.Tensor:
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)  # complex64 [seq, d/2]


def apply_rotary_emb(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """x [B, q, heads, d]; freqs_cis [q, d/2] complex."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3).type_as(x)


class StaticKVCache(nn.Module):
    def __init__(self, batch: int, max_seq: int, kv_heads: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        shape = (batch, kv_heads, max_seq, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        self.k_cache.index_copy_(2, input_pos, k)
        self.v_cache.index_copy_(2, input_pos, v)
        return self.k_cache, self.v_cache


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim_resolved
        self.wqkv = nn.Linear(spec.hidden_size, spec.q_dim + 2 * spec.kv_dim, bias=False)
        self.wo = nn.Linear(spec.q_dim, spec.hidden_size, bias=False)
        self.kv_cache: StaticKVCache | None = None

    def forward(self, x, freqs_cis, mask, input_pos):
        b, q, _ = x.shape
        kv = self.kv_heads * self.head_dim
        xq, xk, xv = self.wqkv(x).split([self.heads * self.head_dim, kv, kv], dim=-1)
        xq = apply_rotary_emb(xq.view(b, q, self.heads, self.head_dim), freqs_cis)
        xk = apply_rotary_emb(xk.view(b, q, self.kv_heads, self.head_dim), freqs_cis)
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.view(b, q, self.kv_heads, self.head_dim).transpose(1, 2)
        keys, values = self.kv_cache.update(input_pos, xk, xv)
        out = F.scaled_dot_product_attention(xq, keys, values, attn_mask=mask, enable_gqa=True)
        return self.wo(out.transpose(1, 2).reshape(b, q, self.heads * self.head_dim))


class FeedForward(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.w1 = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.w3 = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.w2 = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, spec: ModelSpec, eps: float):
        super().__init__()
        self.attention, self.feed_forward = Attention(spec), FeedForward(spec)
        self.attention_norm = nn.RMSNorm(spec.hidden_size, eps=eps)
        self.ffn_norm = nn.RMSNorm(spec.hidden_size, eps=eps)

    def forward(self, x, freqs_cis, mask, input_pos):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, eps: float = 1e-5, rope_base: float = 500000.0):
        super().__init__()
        self.spec, self.rope_base = spec, rope_base
        self.tok_embeddings = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(TransformerBlock(spec, eps) for _ in range(spec.num_layers))
        self.norm = nn.RMSNorm(spec.hidden_size, eps=eps)
        self.output = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        self.freqs_cis = self.causal_mask = None

    def setup_caches(self, batch: int, max_seq: int) -> None:
        max_seq = find_multiple(max_seq, 8)
        dtype, device = self.output.weight.dtype, self.output.weight.device
        for layer in self.layers:
            layer.attention.kv_cache = StaticKVCache(batch, max_seq, self.spec.num_kv_heads,
                                                     self.spec.head_dim_resolved, dtype).to(device)
        self.freqs_cis = precompute_freqs_cis(max_seq, self.spec.head_dim_resolved, self.rope_base).to(device)
        self.causal_mask = torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool, device=device))

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        mask = self.causal_mask[None, None, input_pos]
        freqs_cis = self.freqs_cis[input_pos]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, freqs_cis, mask, input_pos)
        return self.output(self.norm(x))


@torch.no_grad()
def build_transformer(spec: ModelSpec, dtype: torch.dtype, device=None, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(spec)
    for p in model.parameters():
        if p.dim() > 1:
            p.normal_(0.0, 0.02)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


#: gpt-fast-style hold-outs: shapes differ from every calibrated one and from the HF hold-out's
GPTFAST_SPECS = (
    ("gptfast-llama-101m", 704, 11, 1, 1920, 9, 32256),
    ("gptfast-gqa4-hd128-80m", 1024, 8, 2, 2752, 4, 50304),
    ("gptfast-deep-54m", 448, 7, 7, 1280, 16, 28672),
)


def get_gptfast_specs() -> tuple[ModelSpec, ...]:
    specs = tuple(synthetic_spec(name, hidden, heads, kv, inter, layers=layers, vocab=vocab)
                  for name, hidden, heads, kv, inter, layers, vocab in GPTFAST_SPECS)
    check_hold_out(models=specs)
    return specs


def measure_gptfast_family(hw, base, device: Device, dtype: str, grid, timer: Timer, specs=None,
                           advance=lambda: None) -> list[dict]:
    """Report rows (with `model` and `family: gptfast`) of each spec's decode steps, measured and priced."""
    from ..validators.validate_family import price_row_with_impl

    tdtype, dev = get_torch_dtype(dtype), device.torch_device
    rows = []
    for i, spec in enumerate(specs if specs is not None else get_gptfast_specs()):
        model = build_transformer(spec, tdtype, dev, seed=300 + i)
        for batch in grid.batches:
            for context in grid.contexts:
                model.setup_caches(batch, context + 1)
                idx = torch.randint(0, spec.vocab_size, (batch, 1), device=dev)
                input_pos = torch.tensor([context], device=dev)
                with torch.inference_mode():
                    t = timer.time(lambda: model(idx, input_pos), min_calls=grid.min_calls,
                                   min_time_s=grid.min_time_s, max_calls=50, warmup_s=0.0, warmup_calls=1)
                rows.append({"kind": "decode", "model": spec.name, "family": "gptfast", "batch": batch,
                             "context_tokens": context, "new_tokens": 1, "measured_s": t.estimate_s,
                             "measured_spread": t.spread, "measured_median_s": t.median_s,
                             **price_row_with_impl(hw, base, spec, dtype, batch, context, "gptfast")})
                advance()
        model = None
    return rows
