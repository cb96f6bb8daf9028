"""Streaming bandwidth (copy, weight-streaming GEMV) and the drift reference, timed once per dtype per run."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...fitting.measurements import Timing
from .base import BenchContext

#: calls of the whole-pool GEMV sweep in a quick plan
BANDWIDTH_QUICK_CALLS = 3


def copy_bandwidth(ctx: BenchContext) -> tuple[float, Timing]:
    """Bytes read + written per second (B/s) of a copy over the plan's `bandwidth_bytes`, and its timing."""
    n = ctx.plan.bandwidth_bytes // 2 // int(ctx.bytes)
    src = torch.ones(n, device=ctx.torch_device, dtype=ctx.torch_dtype)
    dst = torch.empty_like(src)
    t = ctx.time(lambda: dst.copy_(src), scale=2)
    return 2 * n * ctx.bytes / t.estimate_s, t


def gemv_bandwidth(ctx: BenchContext) -> tuple[float, Timing]:
    """Weight-streaming bandwidth (B/s): GEMVs (M = 1) over the whole cold pool, timed as one call per sweep."""
    k = n = 4096 if not ctx.plan.quick else 2048
    weights = ctx.rotating_weights(k, n)
    x = torch.randn(1, k, device=ctx.torch_device, dtype=ctx.torch_dtype)

    def run():
        for w in weights:
            F.linear(x, w)

    # one call streams the whole pool (dozens of GEMVs): a quick plan takes 3 of them
    t = ctx.timer.time(run, min_calls=BANDWIDTH_QUICK_CALLS if ctx.plan.quick else ctx.plan.min_calls,
                       min_time_s=2 * ctx.plan.min_time_s, max_calls=400, warmup_s=0.0)
    return len(weights) * k * n * ctx.bytes / t.estimate_s, t


def reference_gemv(ctx: BenchContext) -> Timing:
    """The drift reference: a cold-weight GEMV of one fixed shape, timed at the start, middle and end of a run."""
    weights = ctx.rotating_weights(1536, 1536)
    x = torch.randn(1, 1536, device=ctx.torch_device, dtype=ctx.torch_dtype)
    it = ctx.cold_rotation(weights)
    return ctx.timer.time(lambda: F.linear(x, next(it)), min_calls=20, min_time_s=0.05, max_calls=200)
