"""The sampler and the exact acceptance rule vs batch, positions and vocabulary, timed on random logits as the
measured loops run them (`calibrate.reference.sampling`): 'sample' at one position is `sample_and_advance`, the
draw and the next step's books after a decode or draft forward, and at several positions `probabilities` over all
of them, what a loop computes after a verify for the rule to read; 'accept_rule' is `verify_input` + `commit`, the verify input, the
rule and the rollback. Their bytes come from `rooflinesim.ops.sections` at fit time. (Timing the
several-position points with `sample_and_advance`, which reads the last position only, was wrong: a verify's 5.6 MB of
probabilities came in at the cost of its last rows', and the fit missed its own points by 40 % at the median.)

A loop runs them right after a forward pass, never back to back, so each timed call follows an untimed decode step of
the tiny `IN_CONTEXT_MODEL` decoder: the forward's ~200 dispatched ops leave the host's caches and branch predictors
to the model, and the small sampler calls run 1.3-1.7x slower after it than in a tight loop (2-core AMD EPYC, fp32,
vocabulary 32: 'sample' 34 -> 57 us, 'accept_rule' 122 -> 162 us; at vocabulary 32000 the data dominates, +5-20 %)."""

from __future__ import annotations

import torch

from ...reference import sampling
from ...fitting.measurements import SamplerKey
from ...reference.model import one_token_step
from ...fitting.plan import DECODER_CONTEXT
from .base import BenchContext, Job

#: the decoder whose one-token step runs (untimed) before every timed sampler call
IN_CONTEXT_MODEL = "overhead-2l"


def sampler_jobs(ctx: BenchContext) -> list[Job]:
    return [Job(key, _sampler_runner(ctx, key)) for key in ctx.plan.sampler_keys()]


def _sampler_runner(ctx: BenchContext, key: SamplerKey):
    def run():
        dev = ctx.torch_device
        g = torch.Generator(device=dev).manual_seed(0)
        b, q, vocab = key.batch, key.positions, key.vocab
        if key.kind == "sample":  # the model's logits come in its dtype; the sampler upcasts
            logits = torch.randn(b, q, vocab, device=dev, dtype=ctx.torch_dtype)
            start = torch.arange(b, device=dev) + 64
            if q == 1:  # after a decode or draft step: one position's draw and the next step's books
                fn = lambda: sampling.sample_and_advance(logits, start, q, 1.0, g)
            else:  # after a verify: the probabilities of every position, which the rule then reads
                fn = lambda: sampling.probabilities(logits, 1.0)
        else:  # accept_rule: q = k drafted positions
            p_rows = torch.softmax(torch.randn(b, q + 1, vocab, device=dev, dtype=torch.float64), -1)
            q_rows = list(torch.softmax(torch.randn(b, q, vocab, device=dev, dtype=torch.float64), -1).unbind(1))
            drafts = list(torch.randint(0, vocab, (b, q), device=dev).unbind(1))
            last, cur = torch.randint(0, vocab, (b,), device=dev), torch.arange(b, device=dev) + 64

            def fn():
                tokens, _ = sampling.verify_input(last, drafts, cur)
                return sampling.commit(p_rows, q_rows, tokens, cur, g)
        return ctx.time(fn, before=_forward_step(ctx))
    return run


def _forward_step(ctx: BenchContext):
    """One decode step (batch 1, one token on DECODER_CONTEXT cached) of IN_CONTEXT_MODEL, as a callable."""
    step = one_token_step(ctx.decoder(IN_CONTEXT_MODEL), DECODER_CONTEXT)

    def run():
        with torch.inference_mode():
            step()
    return run
