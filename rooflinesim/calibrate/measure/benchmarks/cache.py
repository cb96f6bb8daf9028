"""Cache reuse: the same GEMV with its weights rotating over working sets from a few MB to the whole cold pool, so
the fit can tell how much faster weights stream when a model's weights per step fit in the caches."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from ...fitting.plan import CACHE_SHAPE
from .base import BenchContext, Job


def cache_jobs(ctx: BenchContext) -> list[Job]:
    """One job per working set below the pool, and the whole pool (the cold reference) last."""
    return [Job(key, _cache_runner(ctx, key.working_set_bytes)) for key in ctx.plan.cache_keys()]


def _cache_runner(ctx: BenchContext, working_set_bytes: int):
    def run():
        k, n = CACHE_SHAPE
        weights = ctx.rotating_weights(k, n, working_set_bytes)
        x = torch.randn(1, k, device=ctx.torch_device, dtype=ctx.torch_dtype)
        for w in weights * 2:  # bring the whole working set into the caches it fits in
            F.linear(x, w)
        it = itertools.cycle(weights)
        return ctx.timer.time(lambda: F.linear(x, next(it)), min_calls=max(2 * len(weights), 10),
                              min_time_s=ctx.plan.min_time_s, max_calls=max(4 * len(weights), 400),
                              warmup_s=0.0, warmup_calls=0)
    return run
