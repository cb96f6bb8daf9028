"""Monte Carlo simulator of whole speculative steps and its result type (acceptance section 3).

``simulate_speculative_steps`` runs ``n_trials`` independent steps of ``k`` drafts plus one verification
with one of the rules in :mod:`.rules`, and summarises them (committed tokens, per-position acceptance, the
committed-token pmf, the distribution of the first committed token) so the closed forms in
:mod:`.closed_form` and the rules' output distributions can be checked against samples.  The trial axis
comes first; token counts are tokens per speculative step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import _as_distribution, _as_nonnegative_int
from .rules import ACCEPTANCE_RULES, sample_categorical

__all__ = ["SpeculativeSimulationResult", "simulate_speculative_steps"]


@dataclass(frozen=True)
class SpeculativeSimulationResult:
    """Monte Carlo outcome of ``n_trials`` independent speculative steps with ``k`` drafts each.

    Attributes
    ----------
    tokens : int array ``(n_trials, k + 1)``: tokens committed by each step, valid where ``token_mask``.
        Slot ``i < k`` holds the accepted draft, or the replacement token at the first rejected position;
        slot ``k`` holds the bonus token (only valid when all ``k`` drafts were accepted).
    token_mask : bool array ``(n_trials, k + 1)``: ``True`` for the ``n_accepted + 1`` committed slots.
    draft_tokens : int array ``(n_trials, k)``: drafts proposed at every position.
    accepted : bool array ``(n_trials, k)``: the rule's verdict at every position, evaluated independently
        (including positions after the first rejection, which a real engine never verifies).
    n_accepted : int array ``(n_trials,)``: accepted drafts before the first rejection.
    per_position_acceptance : float array ``(k,)``: empirical conditional acceptance rate at each position,
        ``P(accept i | drafts before i accepted)`` (NaN where no trial reached position ``i``).
    mean_committed_tokens : float: empirical mean of ``n_accepted + 1`` (tokens/step).
    committed_tokens_pmf : float array ``(k + 1,)``: empirical pmf of committed tokens, entry ``n - 1`` for ``n``.
    first_token_distribution : float array ``(vocab,)``: empirical distribution of the first committed token.
    """

    tokens: np.ndarray
    token_mask: np.ndarray
    draft_tokens: np.ndarray
    accepted: np.ndarray
    n_accepted: np.ndarray
    per_position_acceptance: np.ndarray
    mean_committed_tokens: float
    committed_tokens_pmf: np.ndarray
    first_token_distribution: np.ndarray

    @property
    def committed_tokens(self) -> np.ndarray:
        """Committed tokens per trial, ``n_accepted + 1``."""
        return self.n_accepted + 1

    @property
    def draft_acceptance_rate(self) -> float:
        """Empirical fraction of drafted tokens accepted (vLLM's draft acceptance rate); NaN for k = 0."""
        k = self.accepted.shape[1]
        return float(self.n_accepted.mean() / k) if k else float("nan")


def simulate_speculative_steps(p_seq, q_seq, k: int, rule, rng: np.random.Generator, n_trials: int,
                               **rule_kwargs) -> SpeculativeSimulationResult:
    """Monte Carlo of ``n_trials`` speculative steps: ``k`` drafts, then one verification by the target.

    Simplification: positions are independent.  The target/draft distributions at position ``i`` do not depend
    on the tokens chosen at earlier positions (in a real model they are conditioned on the prefix).  This is
    exactly the assumption behind :func:`expected_tokens_iid` and :func:`expected_tokens_per_position`, with
    ``a_i = P(accept at position i)``, so the simulator checks those formulas and the rules' output
    distributions, not a language model.

    Parameters
    ----------
    p_seq : array_like, shape ``(k + 1, vocab)`` or ``(vocab,)`` (same target at every position).
        Target distributions at draft positions ``0..k-1`` and the bonus position ``k``.
    q_seq : array_like, shape ``(k, vocab)`` or ``(vocab,)``: draft distributions.
    k : number of drafts per step (int >= 0).
    rule : ``"exact"``, ``"greedy"``, ``"typical"`` (see :data:`ACCEPTANCE_RULES`) or a callable
        ``rule(p, q, rng, n_trials, **rule_kwargs) -> RuleStepResult`` taking ``(k, vocab)`` arrays.
    rng : numpy Generator.
    n_trials : number of independent steps to simulate.
    **rule_kwargs : forwarded to the rule (e.g. ``posterior_threshold`` for ``"typical"``).

    Returns
    -------
    :class:`SpeculativeSimulationResult`.
    """
    k = int(_as_nonnegative_int(k))
    n_trials = int(n_trials)
    if n_trials < 1:
        raise ValueError("n_trials must be >= 1")
    p_seq = np.asarray(p_seq, dtype=float)
    q_seq = np.asarray(q_seq, dtype=float)
    vocab = p_seq.shape[-1]
    if p_seq.ndim == 1:
        p_seq = np.broadcast_to(p_seq, (k + 1, vocab))
    if q_seq.ndim == 1:
        q_seq = np.broadcast_to(q_seq, (k, vocab))
    if p_seq.shape != (k + 1, vocab) or q_seq.shape != (k, vocab):
        raise ValueError(f"need p_seq of shape ({k + 1}, V) and q_seq of shape ({k}, V); "
                         f"got {p_seq.shape} and {q_seq.shape}")
    step = ACCEPTANCE_RULES[rule] if isinstance(rule, str) else rule

    if k > 0:
        draft, accepted, emitted = step(p_seq[:k], q_seq, rng, n_trials, **rule_kwargs)
    else:
        draft = np.zeros((n_trials, 0), dtype=np.int64)
        accepted = np.zeros((n_trials, 0), dtype=bool)
        emitted = np.zeros((n_trials, 0), dtype=np.int64)
    bonus = sample_categorical(_as_distribution(p_seq[k], "p_seq[k]"), rng, (n_trials,))

    accepted_prefix = np.logical_and.accumulate(accepted, axis=1)  # all drafts up to i accepted
    n_accepted = accepted_prefix.sum(axis=1)
    tokens = np.concatenate([emitted, bonus[:, None]], axis=1)
    token_mask = np.arange(k + 1)[None, :] <= n_accepted[:, None]

    reached = np.concatenate([np.ones((n_trials, 1), dtype=bool), accepted_prefix[:, :-1]], axis=1)[:, :k]
    n_reached = reached.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_position = np.where(n_reached > 0, accepted_prefix.sum(axis=0) / np.maximum(n_reached, 1), np.nan)

    return SpeculativeSimulationResult(
        tokens=tokens,
        token_mask=token_mask,
        draft_tokens=np.asarray(draft),
        accepted=np.asarray(accepted),
        n_accepted=n_accepted,
        per_position_acceptance=per_position,
        mean_committed_tokens=float(n_accepted.mean() + 1.0),
        committed_tokens_pmf=np.bincount(n_accepted, minlength=k + 1) / n_trials,
        first_token_distribution=np.bincount(tokens[:, 0], minlength=vocab) / n_trials,
    )
