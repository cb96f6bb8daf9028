"""Cache reuse: the same GEMV with its weights rotating over working sets from a few MB to the whole cold pool, so
the fit can tell how much faster weights stream when a model's weights per step fit in the caches."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...fitting.measurements import Timing
from ...fitting.plan import CACHE_SHAPE, get_cache_passes
from .base import BenchContext, Job


def cache_jobs(ctx: BenchContext) -> list[Job]:
    """One job per working set below the pool, and the whole pool (the cold reference) last."""
    return [Job(key, _cache_runner(ctx, key.working_set_bytes)) for key in ctx.plan.cache_keys()]


def _cache_runner(ctx: BenchContext, working_set_bytes: int):
    def run():
        k, n = CACHE_SHAPE
        weights = ctx.rotating_weights(k, n, working_set_bytes)
        x = torch.randn(1, k, device=ctx.torch_device, dtype=ctx.torch_dtype)

        def one_pass():
            for w in weights:
                F.linear(x, w)

        one_pass()  # brings the whole working set into the caches it fits in
        # A timed call is a whole pass, reported per GEMV: a model's step pays every weight of its working set. Where
        # the working set half fits in a cache, some GEMVs of a pass hit and others miss, and the faster half of
        # single calls (`Timing.estimate_s`) took the hits: 256 MiB read 44-47 GB/s by single calls against 34-36 GB/s
        # over whole passes in --quick runs on the 2-core Intel Xeon VM (480 MiB L3 as reported; 30 GB/s cold), which
        # priced 126-252 MB decoders half warm where they streamed at 22-28 GB/s, and the in-model scale took it up
        passes = get_cache_passes(len(weights))
        timing = ctx.timer.time(one_pass, min_calls=passes, min_time_s=ctx.plan.min_time_s,
                                max_calls=max(2 * passes, 100), warmup_s=0.0, warmup_calls=0)
        return Timing(tuple(s / len(weights) for s in timing.samples))
    return run
