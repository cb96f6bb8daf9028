"""Token sampling and the exact speculative rule, batched, shared by the measured loops (`acceptance_validate`,
`serve_loop`) and by the calibration benchmark that prices them (`benchmarks.sampler`: the profile's `sample` and
`accept_rule` fits time exactly these functions).

Sampling is by the inverse CDF (a cumulative sum and a binary search per row): exact, and on a CPU about 40x cheaper
than `torch.multinomial` or the exponential trick over a 32k vocabulary (both draw one random number per vocabulary
entry: ~0.6 ms per row on a 2-core EPYC, which would add an unpriced 5-15 % to a small model's step).

The exact rule (Leviathan et al. 2023, Chen et al. 2023), per sequence: draft i is accepted with probability
min(1, p(x) / q(x)); at the first rejection the next token is drawn from norm(max(p - q, 0)); when all k drafts are
accepted a bonus token is drawn from the target's last position. The committed tokens follow the target's
distribution exactly.

A decoding loop also keeps books between forward passes: the next step's input, positions and attention span (a
host integer), the verify input, the rollback after the rule. On a CPU each of those small tensor ops costs a few
microseconds of dispatch, together about as much as a tiny draft model's forward, so the loop runs them in two
functions, `sample_and_advance` (after every decode or draft forward) and `verify_input` + `commit` (around each
verify), and the calibration times exactly these: what the profile prices as the sampler and the acceptance rule is
what the loop runs between its forward passes.
"""

from __future__ import annotations

import torch


def probabilities(logits: torch.Tensor, temperature: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Softmax at `temperature` (0: one-hot greedy), in `dtype`."""
    if temperature == 0.0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(dtype)
    return torch.softmax(logits.to(dtype) / temperature, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of `probs` [..., V] (rows need not be normalised), by the inverse CDF; shape [...]."""
    cdf = torch.cumsum(probs, dim=-1)
    u = torch.rand(cdf.shape[:-1] + (1,), generator=generator, dtype=cdf.dtype, device=cdf.device) * cdf[..., -1:]
    return torch.searchsorted(cdf, u, right=True)[..., 0].clamp_(max=probs.shape[-1] - 1)


def sample_step(logits: torch.Tensor, temperature: float, generator: torch.Generator):
    """A step's sampler over logits [B, q, V]: the probabilities of every position, one token drawn per sequence from
    its last position. Returns (tokens [B], probabilities [B, q, V])."""
    probs = probabilities(logits, temperature)
    return sample(probs[:, -1], generator), probs


def exact_rule(p_rows: torch.Tensor, q_rows: torch.Tensor, drafts: torch.Tensor,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """p_rows [B, k + 1, V] (target), q_rows [B, k, V] (draft), drafts [B, k] -> (accepted leading drafts n [B],
    the next token [B]: the correction at the first rejection, or the bonus token when all k were accepted)."""
    b, k = drafts.shape
    rows = torch.arange(b, device=drafts.device)
    p_draft = p_rows[:, :k].gather(2, drafts[..., None])[..., 0]
    q_draft = q_rows.gather(2, drafts[..., None])[..., 0]
    ok = torch.rand(b, k, generator=generator, dtype=p_rows.dtype, device=p_rows.device) * q_draft < p_draft
    n = ok.to(torch.int64).cumprod(1).sum(1)
    p_next = p_rows[rows, n]
    residual = torch.clamp(p_next - torch.where((n < k)[:, None], q_rows[rows, n.clamp(max=k - 1)], 0.0), min=0.0)
    residual = torch.where(residual.sum(1, keepdim=True) > 0, residual, p_next)
    return n, sample(residual, generator)


def sample_and_advance(logits: torch.Tensor, start: torch.Tensor, fed: int, temperature: float,
                       generator: torch.Generator):
    """What a loop runs after a decode or draft forward that read `fed` tokens per sequence from positions `start`
    [B]: the sampler over the last position's logits [B, q, V] and the next step's books. Returns (token [B], its
    probabilities [B, V], the next feed [B, 1], its start positions [B], its attention span max(start) + 1)."""
    token, probs = sample_step(logits[:, -1:], temperature, generator)
    start = start + fed
    return token, probs[:, 0], token[:, None], start, int(start.max()) + 1


def verify_input(last: torch.Tensor, drafts: list[torch.Tensor], cur: torch.Tensor):
    """The verify step's input: the newest committed token `last` [B] (at positions `cur`) and the k drafts, as
    tokens [B, k + 1], with the attention span max(cur) + k + 1."""
    return torch.stack([last, *drafts], 1), int(cur.max()) + len(drafts) + 1


def commit(p_rows: torch.Tensor, q_rows: list[torch.Tensor], tokens: torch.Tensor, cur: torch.Tensor,
           generator: torch.Generator):
    """What a loop runs after its verify: the exact rule per sequence (target probabilities p_rows [B, k + 1, V],
    the draft's q_rows, k x [B, V], the verified tokens [B, k + 1]) and the rollback by position. Returns (n accepted
    [B], the next token [B] (not yet read by either model), the next draft feed [B, 2] (the last accepted token, or
    the previous last when none was, then the next token), its start [B], span, and the next token's position
    [B])."""
    n, next_token = exact_rule(p_rows, torch.stack(q_rows, 1), tokens[:, 1:], generator)
    prev = tokens.gather(1, n[:, None])[:, 0]  # tokens[:, n]: the last accepted draft, or `last` when n = 0
    cur = cur + n + 1
    return n, next_token, torch.stack([prev, next_token], 1), cur - 1, int(cur.max()) + 1, cur


__all__ = ["probabilities", "sample", "sample_step", "exact_rule", "sample_and_advance", "verify_input", "commit"]
