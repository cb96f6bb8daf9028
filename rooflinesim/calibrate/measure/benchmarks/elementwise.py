"""The decoder's elementwise building blocks (RMSNorm, RoPE, SwiGLU, residual add, KV-cache write, embedding) vs
size, timed with the decoder's own functions; their bytes come from `rooflinesim.ops` at fit time."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...reference import model as M
from ...fitting.measurements import ElementwiseKey
from ...fitting.plan import elementwise_step_split
from .base import BenchContext, Job

#: size of the embedding table the lookup benchmark gathers from
EMBEDDING_ROWS = 32768


def elementwise_jobs(ctx: BenchContext) -> list[Job]:
    return [Job(key, _elementwise_runner(ctx, key)) for key in ctx.plan.elementwise_keys()]


def _elementwise_runner(ctx: BenchContext, key: ElementwiseKey):
    def run():
        dev, dt = ctx.torch_device, ctx.torch_dtype
        hidden, heads, kv_heads, inter = key.hidden, key.heads, key.kv_heads, key.intermediate
        d = hidden // heads
        b, q = elementwise_step_split(key.tokens)
        family = key.family
        if family == "norm":
            x, w = torch.randn(b, q, hidden, device=dev, dtype=dt), torch.ones(hidden, device=dev, dtype=dt)
            fn = lambda: M.rms_norm(x, w)
        elif family == "rope":
            xq = torch.randn(b, q, heads, d, device=dev, dtype=dt)
            xk = torch.randn(b, q, kv_heads, d, device=dev, dtype=dt)
            cos_t, sin_t = M.rope_tables(4096, d, dt, dev)
            pos = torch.full((b, 1), 1000, device=dev) + torch.arange(q, device=dev)[None, :]

            def fn():
                c, s = cos_t[pos], sin_t[pos]
                return M.apply_rope(xq, c, s), M.apply_rope(xk, c, s)
        elif family == "mlp_act":
            g, u = (torch.randn(b, q, inter, device=dev, dtype=dt) for _ in range(2))
            fn = lambda: M.swiglu(g, u)
        elif family == "residual":
            x, y = (torch.randn(b, q, hidden, device=dev, dtype=dt) for _ in range(2))
            fn = lambda: x + y
        elif family == "kv_cache_write":
            cache = M.KVCache(b, 1100, kv_heads, d, dt, dev)
            k, v = (torch.randn(b, q, kv_heads, d, device=dev, dtype=dt) for _ in range(2))
            pos = torch.full((b, 1), 1000, device=dev) + torch.arange(q, device=dev)[None, :]
            fn = lambda: cache.update(pos, k, v)
        else:
            table = torch.randn(EMBEDDING_ROWS, hidden, device=dev, dtype=dt)
            ids = torch.randint(0, EMBEDDING_ROWS, (b, q), device=dev)
            fn = lambda: F.embedding(ids, table)
        return ctx.time(fn)
    return run
