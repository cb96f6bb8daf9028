"""Per-position acceptance rules with sampling, vectorised over Monte Carlo trials (acceptance section 3).

Holds: a vectorised categorical sampler, the outcome type of one rule at one position (``RuleStepResult``),
the three rules (exact speculative sampling, greedy draft, Medusa's lossy typical acceptance) and the
name -> rule table used by the simulator.  Each rule takes target and draft distributions ``p``, ``q`` of
shape ``(*batch, vocab)`` and returns arrays of shape ``(n_trials, *batch)`` (trial axis first).  All
randomness comes from an explicit ``numpy.random.Generator``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ._checks import _as_distribution
from .distributions import (
    MEDUSA_POSTERIOR_ALPHA, MEDUSA_POSTERIOR_THRESHOLD, one_hot_argmax, residual_distribution,
    typical_acceptance_threshold,
)

__all__ = [
    "sample_categorical",
    "RuleStepResult",
    "exact_rejection_step",
    "greedy_draft_step",
    "typical_acceptance_step",
    "ACCEPTANCE_RULES",
]


def sample_categorical(probs, rng: np.random.Generator, sample_shape=()) -> np.ndarray:
    """Draw token ids from categorical distributions, vectorised.

    Parameters
    ----------
    probs : array_like, shape ``(*batch_shape, vocab)``; rows need not be exactly normalised (non-negative,
        positive sum).
    rng : numpy Generator.
    sample_shape : int or tuple; independent draws per row.

    Returns
    -------
    int64 array of shape ``(*sample_shape, *batch_shape)``.

    Notes
    -----
    Inverse-CDF sampling with one ``searchsorted`` over all rows (row ``r``'s CDF is offset by ``2 r``).  The
    offset costs resolution ``~ulp(2 * n_rows)`` in probability (about 2e-10 for a million rows), negligible
    for the per-position distributions used here.
    """
    probs = np.asarray(probs, dtype=float)
    if probs.ndim == 0 or probs.shape[-1] == 0:
        raise ValueError("probs needs a non-empty last (vocabulary) axis")
    sample_shape = (int(sample_shape),) if np.isscalar(sample_shape) else tuple(int(s) for s in sample_shape)
    vocab = probs.shape[-1]
    batch_shape = probs.shape[:-1]
    cdf = np.cumsum(probs.reshape(-1, vocab), axis=-1)
    total = cdf[:, -1:]
    if not np.all(np.isfinite(cdf)) or not np.all(total > 0) or not np.all(probs >= 0):
        raise ValueError("each row of probs must be finite, non-negative and have a positive sum")
    cdf = cdf / total
    cdf[:, -1] = 1.0
    n_rows = cdf.shape[0]
    flat_cdf = (cdf + 2.0 * np.arange(n_rows)[:, None]).ravel()
    row = np.broadcast_to(np.arange(n_rows).reshape(batch_shape), sample_shape + batch_shape)
    u = 1.0 - rng.random(sample_shape + batch_shape)  # in (0, 1]: never selects a leading zero-mass token
    idx = np.searchsorted(flat_cdf, u + 2.0 * row, side="left") - row * vocab
    return np.clip(idx, 0, vocab - 1).astype(np.int64)


def _gather_last(probs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``probs[..., tokens]`` elementwise: probs ``(*batch, V)``, tokens ``(*sample, *batch)`` -> ``tokens.shape``."""
    expanded = np.broadcast_to(probs, tokens.shape + (probs.shape[-1],))
    return np.take_along_axis(expanded, tokens[..., None], axis=-1)[..., 0]


def _prob_pair(p, q) -> tuple[np.ndarray, np.ndarray]:
    p = _as_distribution(p, "p")
    q = _as_distribution(q, "q")
    if p.shape[-1] != q.shape[-1]:
        raise ValueError("p and q need the same vocabulary size")
    return np.broadcast_arrays(p, q)


class RuleStepResult(NamedTuple):
    """Outcome of one acceptance rule applied at one (batch of) position(s), shape ``(n_trials, *batch)`` each.

    draft_tokens : token proposed by the draft model.
    accepted : whether the rule accepted the draft.
    emitted_tokens : token the step emits at this position: the draft if accepted, else the replacement token
        (after which a real speculative step stops).
    """

    draft_tokens: np.ndarray
    accepted: np.ndarray
    emitted_tokens: np.ndarray


def exact_rejection_step(p, q, rng: np.random.Generator, n_trials: int) -> RuleStepResult:
    """Exact speculative sampling (Leviathan et al. 2023; Chen et al. 2023) at one position.

    Draft ``x ~ q``; accept with probability ``min(1, p(x) / q(x))``; on rejection emit a token from
    ``normalize(max(0, p - q))``.  The emitted token is distributed exactly as ``p``, and
    ``P(accept) = sum_x min(p, q)``.

    Parameters
    ----------
    p, q : array_like, shape ``(*batch, vocab)``: target and draft distributions (broadcast).
    rng : numpy Generator.
    n_trials : independent trials per batch element.

    Returns
    -------
    :class:`RuleStepResult` with arrays of shape ``(n_trials, *batch)``.
    """
    p, q = _prob_pair(p, q)
    sample_shape = (int(n_trials),)
    draft = sample_categorical(q, rng, sample_shape)
    p_x = _gather_last(p, draft)
    q_x = _gather_last(q, draft)
    ratio = np.divide(p_x, q_x, out=np.ones_like(p_x), where=q_x > 0)
    accepted = rng.random(draft.shape) < ratio
    resampled = sample_categorical(residual_distribution(p, q), rng, sample_shape)
    return RuleStepResult(draft, accepted, np.where(accepted, draft, resampled))


def greedy_draft_step(p, q, rng: np.random.Generator, n_trials: int) -> RuleStepResult:
    """Exact rule with a greedy (one-hot) draft at one position.

    The draft proposes ``x = argmax q`` deterministically; accept if ``u < p(x)``, else emit a token from
    ``normalize(p with x removed)``.  This *is* :func:`exact_rejection_step` with ``q = one_hot(argmax q)``
    (``min(1, p(x)/1) = p(x)``; ``max(0, p - one_hot(x))`` is ``p`` with ``x`` zeroed), so the emitted token is
    distributed as ``p`` and ``P(accept) = p(argmax q)`` (:func:`greedy_draft_acceptance_rate`).

    Shapes as in :func:`exact_rejection_step`.
    """
    p, q = _prob_pair(p, q)
    sample_shape = (int(n_trials),)
    q_greedy = one_hot_argmax(q)
    draft = np.broadcast_to(np.argmax(q, axis=-1), sample_shape + q.shape[:-1]).astype(np.int64)
    accepted = rng.random(draft.shape) < _gather_last(p, draft)
    resampled = sample_categorical(residual_distribution(p, q_greedy), rng, sample_shape)
    return RuleStepResult(draft, accepted, np.where(accepted, draft, resampled))


def typical_acceptance_step(p, q, rng: np.random.Generator, n_trials: int,
                            posterior_threshold: float = MEDUSA_POSTERIOR_THRESHOLD,
                            posterior_alpha: float = MEDUSA_POSTERIOR_ALPHA) -> RuleStepResult:
    """Medusa typical acceptance (Cai et al. 2024) at one position.  Lossy.

    Draft ``x ~ q`` (pass ``q = one_hot_argmax(q)`` for Medusa-style greedy heads); accept iff
    ``p(x) > min(posterior_threshold, posterior_alpha * exp(-H(p)))`` with ``p`` the target distribution at
    the sampling temperature and ``H`` its entropy in nats.  On rejection the token is sampled from ``p``
    (as Medusa does at the first rejected position; at temperature 0 ``p`` is one-hot, so this is
    ``argmax p``).

    At temperature 0 (one-hot ``p``, ``H = 0``, threshold ``min(0.09, 0.3)``) it accepts iff
    ``x == argmax p`` and always emits ``argmax p``, exactly like the exact rule.  At temperature > 0 the
    emitted distribution is :func:`typical_acceptance_emitted_distribution`, not ``p``.

    Shapes as in :func:`exact_rejection_step`.
    """
    p, q = _prob_pair(p, q)
    sample_shape = (int(n_trials),)
    draft = sample_categorical(q, rng, sample_shape)
    threshold = np.asarray(typical_acceptance_threshold(p, posterior_threshold, posterior_alpha))
    accepted = _gather_last(p, draft) > threshold
    fallback = sample_categorical(p, rng, sample_shape)
    return RuleStepResult(draft, accepted, np.where(accepted, draft, fallback))


#: Rules accepted by name in :func:`simulate_speculative_steps`.
ACCEPTANCE_RULES: dict[str, Callable[..., RuleStepResult]] = {
    "exact": exact_rejection_step,
    "greedy": greedy_draft_step,
    "typical": typical_acceptance_step,
}
