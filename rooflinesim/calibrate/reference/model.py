"""A Llama-style decoder in plain torch, for `rooflinesim validate` (and the building blocks `calibrate` times).

RMSNorm, RoPE, grouped-query attention over a KV cache through `scaled_dot_product_attention(..., enable_gqa=True)`,
SwiGLU MLP; random weights. Shapes come from a `ModelSpec`. Every sequence of a batch has its own length, so a
speculative loop can accept a different number of tokens per sequence and "roll back" by moving that length (the
rejected positions are overwritten later). As in gpt-fast, attention always takes a boolean mask, so decode, draft
and verify steps run the same kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...specs.model import ModelSpec

ROPE_THETA = 10000.0
NORM_EPS = 1e-5


# --- building blocks (also timed on their own by `rooflinesim calibrate`) -------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = NORM_EPS) -> torch.Tensor:
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return out.type_as(x) * weight


def rope_tables(max_tokens: int, head_dim: int, dtype: torch.dtype, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(max_tokens, dtype=torch.float32, device=device), inv_freq)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, q, heads, d]; cos, sin: [B, q, d/2] (rows already gathered at each token's position)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, length: int, mask: torch.Tensor) -> torch.Tensor:
    """q: [B, heads, q, d]; caches [B, kv_heads, max_tokens, d]; mask [B, 1, q, length] (True = attend)."""
    k, v = k_cache[:, :, :length], v_cache[:, :, :length]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def causal_mask(positions: torch.Tensor, length: int) -> torch.Tensor:
    """positions [B, q] of the new tokens -> [B, 1, q, length]: key j is visible to a token at p when j <= p."""
    keys = torch.arange(length, device=positions.device)
    return (keys[None, None, :] <= positions[:, :, None]).unsqueeze(1)


class KVCache(nn.Module):
    def __init__(self, batch: int, max_tokens: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device=None):
        super().__init__()
        shape = (batch, kv_heads, max_tokens, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first: int = 0) -> None:
        """Write k, v [B, q, kv_heads, d] at each sequence's positions [B, q], in cache rows first..first + B - 1."""
        rows = first + torch.arange(k.shape[0], device=k.device)[:, None]
        self.k[rows, :, positions] = k
        self.v[rows, :, positions] = v


# --- the decoder -----------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim_resolved
        h = spec.hidden_size
        self.q_proj = nn.Linear(h, spec.q_dim, bias=spec.attention_bias)
        self.k_proj = nn.Linear(h, spec.kv_dim, bias=spec.attention_bias)
        self.v_proj = nn.Linear(h, spec.kv_dim, bias=spec.attention_bias)
        self.o_proj = nn.Linear(spec.q_dim, h, bias=False)
        self.cache: KVCache | None = None

    def forward(self, x, cos, sin, positions, length, mask):
        b, q, _ = x.shape
        xq = self.q_proj(x).view(b, q, self.heads, self.head_dim)
        xk = self.k_proj(x).view(b, q, self.kv_heads, self.head_dim)
        xv = self.v_proj(x).view(b, q, self.kv_heads, self.head_dim)
        xq, xk = apply_rope(xq, cos, sin), apply_rope(xk, cos, sin)
        self.cache.update(positions, xk, xv)
        out = attend(xq.transpose(1, 2), self.cache.k, self.cache.v, length, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, q, self.heads * self.head_dim))

    def forward_packed(self, x, cos, sin, groups):
        """x [T, hidden]: the tokens of several groups packed one after another (see Decoder.forward_packed); the
        projections run once over all T tokens, attention once per group over its own cache rows."""
        t = x.shape[0]
        xq = apply_rope(self.q_proj(x).view(1, t, self.heads, self.head_dim), cos, sin)[0]
        xk = apply_rope(self.k_proj(x).view(1, t, self.kv_heads, self.head_dim), cos, sin)[0]
        xv = self.v_proj(x).view(t, self.kv_heads, self.head_dim)
        outs = []
        for g in groups:
            b, q = g.tokens.shape
            rows = slice(g.first, g.first + b)
            self.cache.update(g.positions, xk[g.lo:g.hi].view(b, q, self.kv_heads, self.head_dim),
                              xv[g.lo:g.hi].view(b, q, self.kv_heads, self.head_dim), g.first)
            out = attend(xq[g.lo:g.hi].view(b, q, self.heads, self.head_dim).transpose(1, 2), self.cache.k[rows],
                         self.cache.v[rows], g.length, g.mask)
            outs.append(out.transpose(1, 2).reshape(b * q, self.heads * self.head_dim))
        return self.o_proj(outs[0] if len(outs) == 1 else torch.cat(outs))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gate_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.up_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.down_proj = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.attn_norm = nn.Parameter(torch.ones(spec.hidden_size))
        self.mlp_norm = nn.Parameter(torch.ones(spec.hidden_size))
        self.attn = Attention(spec)
        self.mlp = MLP(spec)
        self.eps = NORM_EPS  # a loaded checkpoint sets its own (config rms_norm_eps)

    def forward(self, x, cos, sin, positions, length, mask):
        h = x + self.attn(rms_norm(x, self.attn_norm, self.eps), cos, sin, positions, length, mask)
        return h + self.mlp(rms_norm(h, self.mlp_norm, self.eps))


class Decoder(nn.Module):
    """Llama-style decoder: embedding, N blocks, final RMSNorm, lm_head (tied when the spec says so)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec.num_layers))
        self.norm = nn.Parameter(torch.ones(spec.hidden_size))
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self.cos = self.sin = None

    def new_caches(self, batch: int, max_tokens: int) -> list[KVCache]:
        p = self.embed.weight
        return [KVCache(batch, max_tokens, self.spec.num_kv_heads, self.spec.head_dim_resolved, p.dtype, p.device)
                for _ in self.layers]

    def set_caches(self, caches: list[KVCache]) -> None:
        """Switch to another set of per-layer caches (e.g. another batch size) without reallocating."""
        for layer, cache in zip(self.layers, caches):
            layer.attn.cache = cache
        max_tokens = caches[0].k.shape[2]
        if self.cos is None or self.cos.shape[0] < max_tokens:
            p = self.embed.weight
            self.cos, self.sin = rope_tables(max_tokens, self.spec.head_dim_resolved, p.dtype, p.device)

    def setup_caches(self, batch: int, max_tokens: int) -> None:
        self.set_caches(self.new_caches(batch, max_tokens))

    def forward(self, tokens: torch.Tensor, start: torch.Tensor, length: int) -> torch.Tensor:
        """tokens [B, q] at positions start[b] .. start[b] + q - 1; `length` = max(start) + q (host int)."""
        q = tokens.shape[1]
        positions = start[:, None] + torch.arange(q, device=tokens.device)[None, :]
        mask = causal_mask(positions, length)
        cos, sin = self.cos[positions], self.sin[positions]
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, positions, length, mask)
        return self.lm_head(rms_norm(x, self.norm, self.layers[0].eps if len(self.layers) else NORM_EPS))


    def forward_packed(self, groups: list["Group"], logit_rows: torch.Tensor | None = None) -> torch.Tensor | None:
        """One forward over several groups of sequences, as a serving engine runs a mixed step (decodes and prefill
        chunks together): every linear runs once over all the step's tokens (the weights are read once), attention
        once per group over its cache rows. Logits only for `logit_rows` (indices into the packed tokens; None or
        empty: no lm_head, e.g. a draft model prefilling)."""
        x = self.embed(torch.cat([g.tokens.reshape(-1) for g in groups]))
        positions = torch.cat([g.positions.reshape(-1) for g in groups])
        cos, sin = self.cos[positions][None], self.sin[positions][None]
        for layer in self.layers:
            h = x + layer.attn.forward_packed(rms_norm(x, layer.attn_norm, layer.eps), cos, sin, groups)
            x = h + layer.mlp(rms_norm(h, layer.mlp_norm, layer.eps))
        if logit_rows is None or logit_rows.numel() == 0:
            return None
        return self.lm_head(rms_norm(x[logit_rows], self.norm, self.layers[0].eps if len(self.layers) else NORM_EPS))


class Group:
    """B sequences in cache rows first..first + B - 1, each reading q new tokens from its own start position: one
    attention call of a packed forward (a decode / verify group, or one prefill chunk with B = 1)."""

    def __init__(self, first: int, tokens: torch.Tensor, start: torch.Tensor, offset: int = 0):
        b, q = tokens.shape
        self.first, self.tokens = first, tokens
        self.positions = start[:, None] + torch.arange(q, device=tokens.device)[None, :]
        self.length = int(start.max()) + q
        self.mask = causal_mask(self.positions, self.length)
        self.lo, self.hi = offset, offset + b * q  # this group's rows in the packed tokens


def pack(parts: list[tuple[int, torch.Tensor, torch.Tensor]]) -> list[Group]:
    """(first row, tokens [B, q], start [B]) per group -> Groups with their offsets in the packed tokens."""
    groups, offset = [], 0
    for first, tokens, start in parts:
        groups.append(Group(first, tokens, start, offset))
        offset = groups[-1].hi
    return groups


@torch.no_grad()
def build_decoder(spec: ModelSpec, dtype: torch.dtype, device=None, seed: int = 0) -> Decoder:
    """Random weights (scaled like an initialised model), in `dtype`, in inference mode."""
    torch.manual_seed(seed)
    model = Decoder(spec)
    for p in model.parameters():
        if p.dim() > 1:
            p.normal_(0.0, 0.02)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def one_token_step(model: Decoder, context: int):
    """A callable that runs one decode step of `model` (batch 1, one token on `context` cached tokens), its caches
    set up once: the dispatch-bound reference forward of the machine-speed anchor and of the sampler benchmark."""
    device = model.embed.weight.device
    model.setup_caches(1, context + 16)
    tokens = torch.zeros(1, 1, dtype=torch.long, device=device)
    start = torch.full((1,), context, dtype=torch.long, device=device)
    return lambda: model(tokens, start, context + 1)
