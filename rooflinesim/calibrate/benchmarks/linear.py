"""F.linear time vs M over the calibrated weight shapes, with the weights rotating over the cold pool so every call
streams them from memory as a model's forward pass does."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from ..measurements import LinearKey
from .base import BenchContext, Job

#: points with M up to here are always measured: CPU kernels saw-tooth at small M, so they are not extrapolated
ALWAYS_MEASURED_M = 16


def linear_jobs(ctx: BenchContext) -> list[Job]:
    """One job per (weight shape, M); points above the plan's FLOP budget are skipped (extrapolated as
    compute-bound)."""
    jobs = []
    for k, n in ctx.plan.linear_shapes:
        for m in ctx.plan.m_grid:
            if 2.0 * m * k * n > ctx.plan.max_call_flops and m > ALWAYS_MEASURED_M:
                continue
            jobs.append(Job(LinearKey(in_features=k, out_features=n, m=m), _linear_runner(ctx, k, n, m), 1.0))
    return jobs


def _linear_runner(ctx: BenchContext, k: int, n: int, m: int):
    def run():
        weights = ctx.rotating_weights(k, n)
        x = torch.randn(m, k, device=ctx.torch_device, dtype=ctx.torch_dtype)
        it = itertools.cycle(weights)
        return ctx.time(lambda: F.linear(x, next(it)))
    return run
