"""The decoder's own masked SDPA (`model.attend`, with enable_gqa, on its own KV-cache layout) vs batch, context and
query tokens (1 = decode, > 1 = verify)."""

from __future__ import annotations

import itertools
import math

import torch

from ...reference import model as M
from ...fitting.measurements import AttentionKey
from .base import BenchContext, Job

def attention_jobs(ctx: BenchContext) -> list[Job]:
    """One job per configuration of `Plan.attention_keys` (caches above plan.MAX_KV_BYTES skipped)."""
    return [Job(key, _attention_runner(ctx, key)) for key in ctx.plan.attention_keys(ctx.dtype)]


def _attention_runner(ctx: BenchContext, key: AttentionKey):
    def run():
        b, s, q, d = key.batch, key.context_tokens, key.query_tokens, key.head_dim
        dev, dt = ctx.torch_device, ctx.torch_dtype
        max_tokens = s + q + 16  # the decoder slices a longer cache, as here
        per = 2 * b * key.kv_heads * max_tokens * d * ctx.bytes
        # on a CPU, rotate over copies of the caches (up to the pool size) so they are read cold; on CUDA the timer
        # flushes L2 between calls
        copies = max(1, min(8, math.ceil(ctx.plan.rotate_bytes / per))) if not ctx.device.is_cuda else 1
        # constant contents: SDPA's time does not depend on the values, and filling is 10x faster than randn
        caches = [tuple(torch.full((b, key.kv_heads, max_tokens, d), 0.01 * (i + 1), device=dev, dtype=dt)
                        for _ in range(2)) for i in range(copies)]
        xq = torch.randn(b, key.heads, q, d, device=dev, dtype=dt)
        positions = torch.full((b, 1), s, device=dev) + torch.arange(q, device=dev)[None, :]
        mask = M.causal_mask(positions, s + q)
        it = itertools.cycle(caches)

        def call():
            kc, vc = next(it)
            return M.attend(xq, kc, vc, s + q, mask)
        return ctx.time(call)
    return run
