"""The sampler and the exact acceptance rule (`calibrate.sampling`) vs batch, positions and vocabulary, timed on
random logits; their bytes come from `rooflinesim.op_sections` at fit time."""

from __future__ import annotations

import torch

from .. import sampling
from ..measurements import SamplerKey
from .base import BenchContext, Job


def sampler_jobs(ctx: BenchContext) -> list[Job]:
    return [Job(key, _sampler_runner(ctx, key)) for key in ctx.plan.sampler_keys()]


def _sampler_runner(ctx: BenchContext, key: SamplerKey):
    def run():
        dev = ctx.torch_device
        g = torch.Generator(device=dev).manual_seed(0)
        b, q, vocab = key.batch, key.positions, key.vocab
        if key.kind == "sample":  # the model's logits come in its dtype; the sampler upcasts
            logits = torch.randn(b, q, vocab, device=dev, dtype=ctx.torch_dtype)
            fn = lambda: sampling.sample_step(logits, 1.0, g)
        else:  # accept_rule: q = k drafted positions
            p_rows = torch.softmax(torch.randn(b, q + 1, vocab, device=dev, dtype=torch.float64), -1)
            q_rows = torch.softmax(torch.randn(b, q, vocab, device=dev, dtype=torch.float64), -1)
            drafts = torch.randint(0, vocab, (b, q), device=dev)
            fn = lambda: sampling.exact_rule(p_rows, q_rows, drafts, g)
        return ctx.time(fn)
    return run
