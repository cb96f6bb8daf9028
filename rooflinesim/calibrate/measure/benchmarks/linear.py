"""F.linear time vs M over the calibrated weight shapes, with the weights rotating over the cold pool so every call
streams them from memory as a model's forward pass does; and a few small shapes with their weights rotating over a
working set inside the last-level cache, as a small model's stay between its steps (`warm_linear_jobs`)."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from ...fitting.plan import WARM_WORKING_SET_BYTES
from .base import BenchContext, Job

def linear_jobs(ctx: BenchContext) -> list[Job]:
    """One job per (weight shape, M) the plan lists (`Plan.linear_keys`: points above its FLOP budget per call are
    skipped and extrapolated as compute-bound)."""
    return [Job(key, _linear_runner(ctx, key.in_features, key.out_features, key.m)) for key in ctx.plan.linear_keys()]


#: views a point of the tiny decoders' shapes rotates over at most: their 8-32 KB weights would take 16-65 k views of
#: the pool, whose building cost more than timing them, and those decoders run from the caches anyway. The generic
#: shapes rotate over the whole pool, cold
MAX_OVERHEAD_SHAPE_COPIES = 4096


def _linear_runner(ctx: BenchContext, k: int, n: int, m: int):
    def run():
        tiny = (k, n) in {tuple(s) for s in ctx.plan.overhead_shapes}
        weights = ctx.rotating_weights(k, n, MAX_OVERHEAD_SHAPE_COPIES * k * n * ctx.bytes if tiny else None)
        x = torch.randn(m, k, device=ctx.torch_device, dtype=ctx.torch_dtype)
        it = itertools.cycle(weights) if tiny else ctx.cold_rotation(weights)
        return ctx.time(lambda: F.linear(x, next(it)))
    return run


def warm_linear_jobs(ctx: BenchContext) -> list[Job]:
    """One job per (small weight shape, M) of `Plan.warm_linear_keys`."""
    return [Job(key, _warm_linear_runner(ctx, key.in_features, key.out_features, key.m))
            for key in ctx.plan.warm_linear_keys()]


def _warm_linear_runner(ctx: BenchContext, k: int, n: int, m: int):
    def run():
        weights = ctx.rotating_weights(k, n, WARM_WORKING_SET_BYTES)
        x = torch.randn(m, k, device=ctx.torch_device, dtype=ctx.torch_dtype)
        for w in weights * 2:  # bring the working set into the caches
            F.linear(x, w)
        it = itertools.cycle(weights)
        return ctx.time(lambda: F.linear(x, next(it)))
    return run
