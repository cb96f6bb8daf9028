"""Synthetic target/draft distributions and logits for tests, notebooks and the simulator.

``synthetic_distributions`` builds per-position distribution pairs with a prescribed exact-rule acceptance
rate; ``synthetic_logit_pair`` builds random target logits with correlated draft logits.  All randomness
comes from an explicit ``numpy.random.Generator``.
"""

from __future__ import annotations

import numpy as np

from ._checks import _as_nonnegative_int, _as_probability

__all__ = ["synthetic_distributions", "synthetic_logit_pair"]


def synthetic_distributions(rng: np.random.Generator, k: int, vocab: int, target_alpha, concentration: float = 1.0):
    """Random per-position target/draft distributions with a prescribed exact-rule acceptance rate.

    For each draft position ``i`` the vocabulary is split at random into two halves ``A`` and ``B``, and
    ``p = alpha_i w + (1 - alpha_i) a``, ``q = alpha_i w + (1 - alpha_i) b`` with ``w ~ Dirichlet`` on the full
    vocabulary and ``a`` (``b``) ``~ Dirichlet`` on ``A`` (``B``).  Since ``a`` and ``b`` have disjoint supports,
    ``sum_x min(p, q) = alpha_i`` exactly.  The bonus-position target is ``Dirichlet(concentration)``.

    Parameters
    ----------
    rng : numpy Generator.
    k : drafts per step.
    vocab : vocabulary size, >= 2.
    target_alpha : float or array of shape ``(k,)`` in [0, 1]: exact-rule acceptance at each position.
    concentration : Dirichlet concentration (> 0); small values give peaked distributions.

    Returns
    -------
    ``(p_seq, q_seq)`` of shapes ``(k + 1, vocab)`` and ``(k, vocab)``.
    """
    k = int(_as_nonnegative_int(k))
    vocab = int(vocab)
    if vocab < 2:
        raise ValueError("vocab must be >= 2")
    if not concentration > 0:
        raise ValueError("concentration must be > 0")
    alpha = np.broadcast_to(_as_probability(target_alpha, "target_alpha"), (k,))[:, None]
    half = vocab // 2
    perm = rng.permuted(np.tile(np.arange(vocab), (k, 1)), axis=1)
    w = rng.dirichlet(np.full(vocab, concentration), size=k)
    a = np.zeros((k, vocab))
    b = np.zeros((k, vocab))
    np.put_along_axis(a, perm[:, :half], rng.dirichlet(np.full(half, concentration), size=k), axis=1)
    np.put_along_axis(b, perm[:, half:], rng.dirichlet(np.full(vocab - half, concentration), size=k), axis=1)
    p = alpha * w + (1.0 - alpha) * a
    q = alpha * w + (1.0 - alpha) * b
    bonus = rng.dirichlet(np.full(vocab, concentration), size=1)
    return np.concatenate([p, bonus], axis=0), q


def synthetic_logit_pair(rng: np.random.Generator, vocab: int, shape=(), target_scale: float = 3.0,
                         draft_noise: float = 1.0):
    """Random target logits and correlated draft logits.

    ``target = target_scale * N(0, 1)`` and ``draft = target + draft_noise * N(0, 1)``, each of shape
    ``(*shape, vocab)`` (logits in nats).  Larger ``target_scale`` gives peakier softmaxes; larger
    ``draft_noise`` a worse draft.
    """
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    target = target_scale * rng.standard_normal(shape + (int(vocab),))
    draft = target + draft_noise * rng.standard_normal(target.shape)
    return target, draft
