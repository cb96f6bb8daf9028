"""Whole synthetic decoders timed as forward passes: tiny ones (hidden 64, 2 and 8 layers) pin the per-layer and
per-step dispatch overhead; mid-size ones of generic shapes pin the in-model scale, how much slower ops run inside a
forward pass than alone (`fit_profile.fit_overheads`)."""

from __future__ import annotations

import torch

from ...fitting.plan import DECODER_CONTEXT, OVERHEAD_MODELS
from .base import BenchContext, Job

#: progress-bar weight of a mid-size decoder relative to one microbenchmark
BLOCK_JOB_WEIGHT = 4.0


def decoder_jobs(ctx: BenchContext) -> list[Job]:
    return [Job(key, _decoder_runner(ctx, key.name, key.batch, key.new_tokens),
                1.0 if key.name in OVERHEAD_MODELS else BLOCK_JOB_WEIGHT) for key in ctx.plan.decoder_keys()]


def _decoder_runner(ctx: BenchContext, name: str, batch: int, q: int):
    def run():
        model = ctx.decoder(name)  # built once per run, shared by its token configurations
        model.setup_caches(batch, DECODER_CONTEXT + q + 8)
        tokens = torch.zeros(batch, q, dtype=torch.long, device=ctx.torch_device)
        start = torch.full((batch,), DECODER_CONTEXT, device=ctx.torch_device)
        with torch.inference_mode():
            return ctx.time(lambda: model(tokens, start, DECODER_CONTEXT + q), scale=2)
    return run
