"""Whole synthetic decoders timed as forward passes: tiny ones (hidden 64, 2 and 8 layers) pin the per-layer and
per-step dispatch overhead; mid-size ones of generic shapes pin the in-model scale, how much slower ops run inside a
forward pass than alone (`fit_profile.fit_overheads`)."""

from __future__ import annotations

import torch

from ...fitting.measurements import DecoderKey
from ...fitting.plan import DECODER_CONTEXT, OVERHEAD_MODELS, OVERHEAD_TOKENS
from .base import BenchContext, Job

#: progress-bar weight of a mid-size decoder relative to one microbenchmark
BLOCK_JOB_WEIGHT = 4.0


def decoder_jobs(ctx: BenchContext) -> list[Job]:
    return [Job(key, _decoder_runner(ctx, key), 1.0 if key.name in OVERHEAD_MODELS else BLOCK_JOB_WEIGHT)
            for key in ctx.plan.decoder_keys()]


def _decoder_runner(ctx: BenchContext, key: DecoderKey):
    batch, q = key.batch, key.new_tokens
    configurations = len(OVERHEAD_TOKENS if key.name in OVERHEAD_MODELS else ctx.plan.block_tokens)

    def run():
        # one build is shared by its token configurations; each of the plan's builds lands its weights afresh
        model = ctx.decoder(key.name, key.build)
        model.setup_caches(batch, DECODER_CONTEXT + q + 8)
        tokens = torch.zeros(batch, q, dtype=torch.long, device=ctx.torch_device)
        start = torch.full((batch,), DECODER_CONTEXT, device=ctx.torch_device)
        with torch.inference_mode():
            timing = ctx.time(lambda: model(tokens, start, DECODER_CONTEXT + q), scale=2)
        ctx.release_decoder(key.name, key.build, configurations)
        return timing
    return run
