"""What a speculative loop runs after each forward pass, in torch: the sampler (probabilities from logits, one draw
per sequence) and the exact acceptance rule of speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

The loops (`acceptance_validate`, the serving loop) and the calibration benchmark that prices these steps
(`benchmarks.sampler`) call the same functions, so the profile measures exactly what the loops run.
"""

from __future__ import annotations

import torch


def get_probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Rows of probabilities (float64, for the ratio p / q) from logits [..., V]; temperature 0 is greedy (one-hot)."""
    if temperature == 0.0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.float64)
    return torch.softmax(logits.to(torch.float64) / temperature, dim=-1)


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of probs [B, V] -> [B]."""
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def sample_step(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None):
    """A step's sampler over logits [B, q, V]: the probabilities of every position, one token drawn per sequence
    from its last position. Returns (tokens [B], probabilities [B, q, V])."""
    probs = get_probabilities(logits, temperature)
    return draw(probs[:, -1], generator), probs


def accept_exact(p_rows: torch.Tensor, q_rows: torch.Tensor, drafts: torch.Tensor,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact rule per sequence: p_rows [B, k + 1, V] the target's probabilities at the k drafted positions and the
    bonus one, q_rows [B, k, V] the draft's, drafts [B, k]. Draft i is accepted with probability min(1, p / q) until
    the first rejection; the correction token is drawn from max(p - q, 0) there (from p at the bonus position when
    all k were accepted). Returns (accepted drafts n [B], next token [B])."""
    b, k = drafts.shape
    rows = torch.arange(b, device=drafts.device)
    p_draft = p_rows[:, :k].gather(2, drafts[..., None])[..., 0]
    q_draft = q_rows.gather(2, drafts[..., None])[..., 0]
    u = torch.rand(b, k, generator=generator, dtype=torch.float64, device=drafts.device)
    n = (u * q_draft < p_draft).to(torch.int64).cumprod(1).sum(1)  # leading accepted drafts
    rejected = (n < k)[:, None]
    residual = torch.clamp(p_rows[rows, n] - torch.where(rejected, q_rows[rows, n.clamp(max=k - 1)], 0.0), min=0.0)
    # p == q at the rejected position leaves no residual mass (a rejection there has probability 0): fall back to p
    residual = torch.where(residual.sum(1, keepdim=True) > 0, residual, p_rows[rows, n])
    return n, draw(residual, generator)


__all__ = ["get_probabilities", "draw", "sample_step", "accept_exact"]
