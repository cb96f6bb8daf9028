"""Acceptance from the target and draft distributions (acceptance section 2).

Under the exact speculative-sampling rule the probability of accepting a draft sampled from ``q`` when the
target distribution is ``p`` is ``sum_x min(p(x), q(x)) = 1 - TV(p, q)``.

Holds: the acceptance rate and total variation, entropy (nats), the sampling distribution an engine derives
from logits (temperature, top-k, top-p), the exact rule's residual (resampling) distribution, the greedy
draft's acceptance, and Medusa's typical acceptance (threshold, acceptance probability, emitted
distribution).  Distributions are float arrays whose last axis is the vocabulary; leading axes are batch
axes (positions, contexts, ...).  Probabilities are dimensionless, in [0, 1].
"""

from __future__ import annotations

import numpy as np

from ._checks import _scalar_or_array

__all__ = [
    "MEDUSA_POSTERIOR_THRESHOLD",
    "MEDUSA_POSTERIOR_ALPHA",
    "acceptance_rate",
    "total_variation",
    "entropy",
    "softmax_with_temperature",
    "acceptance_rate_from_logits",
    "residual_distribution",
    "one_hot_argmax",
    "greedy_draft_acceptance_rate",
    "typical_acceptance_threshold",
    "typical_acceptance_probability",
    "typical_acceptance_emitted_distribution",
]

#: Medusa's default ``posterior_threshold`` (epsilon): hard upper bound on the typical-acceptance threshold.
MEDUSA_POSTERIOR_THRESHOLD = 0.09
#: Medusa's default ``posterior_alpha`` (delta): scale of the entropy-dependent threshold ``delta * exp(-H)``.
MEDUSA_POSTERIOR_ALPHA = 0.3


def acceptance_rate(p, q):
    """Probability that the exact speculative-sampling rule accepts a draft ``x ~ q`` against target ``p``.

    ``sum_x min(p(x), q(x)) = 1 - TV(p, q)`` (Leviathan et al. 2023, Lemma 3.3; Chen et al. 2023).
    ``p`` and ``q`` broadcast; the last axis is the vocabulary, leading axes are e.g. positions.
    Returns a dimensionless probability, shape ``broadcast(p, q).shape[:-1]``.
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    return _scalar_or_array(np.asarray(np.minimum(p, q).sum(axis=-1)))


def total_variation(p, q):
    """Total-variation distance ``0.5 * sum_x |p(x) - q(x)|`` along the last (vocabulary) axis, in [0, 1]."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    return _scalar_or_array(np.asarray(0.5 * np.abs(p - q).sum(axis=-1)))


def entropy(p):
    """Shannon entropy in nats (natural log) along the last axis, with ``0 log 0 = 0``."""
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return _scalar_or_array(np.asarray(terms.sum(axis=-1)))


def softmax_with_temperature(logits, temperature: float, top_k: int | None = None, top_p: float | None = None):
    """Sampling distribution a serving engine derives from logits.

    Order of operations (as in HF ``generate`` and vLLM): divide by ``temperature``; keep the ``top_k``
    largest logits (ties with the k-th largest are kept); softmax; keep the smallest prefix of the
    probability-sorted vocabulary whose mass reaches ``top_p`` (nucleus; the most likely token is always
    kept); renormalise.

    Parameters
    ----------
    logits : array_like, shape ``(..., vocab)``; leading axes are independent positions.
    temperature : float >= 0.  0 means greedy: a one-hot distribution on ``argmax`` (first index on ties).
    top_k : int >= 1 or None (no top-k truncation).
    top_p : float in (0, 1] or None (no nucleus truncation).

    Returns
    -------
    Probabilities, same shape as ``logits``, summing to 1 along the last axis.
    """
    x = np.asarray(logits, dtype=float)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError("logits needs a non-empty last (vocabulary) axis")
    temperature = float(temperature)
    if not temperature >= 0.0:
        raise ValueError("temperature must be >= 0")
    if top_k is not None and int(top_k) < 1:
        raise ValueError("top_k must be >= 1")
    if top_p is not None and not (0.0 < float(top_p) <= 1.0):
        raise ValueError("top_p must lie in (0, 1]")
    vocab = x.shape[-1]
    if temperature == 0.0:
        return one_hot_argmax(x)
    z = x / temperature
    if top_k is not None and int(top_k) < vocab:
        kth_largest = np.partition(z, vocab - int(top_k), axis=-1)[..., vocab - int(top_k), None]
        z = np.where(z >= kth_largest, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    if top_p is not None and float(top_p) < 1.0:
        order = np.argsort(-probs, axis=-1, kind="stable")
        sorted_probs = np.take_along_axis(probs, order, axis=-1)
        mass_before = np.cumsum(sorted_probs, axis=-1) - sorted_probs  # mass of strictly higher-ranked tokens
        keep_sorted = mass_before < float(top_p)
        keep = np.empty_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    return probs


def acceptance_rate_from_logits(target_logits, draft_logits, temperature: float, top_k=None, top_p=None):
    """Exact-rule acceptance rate ``sum_x min(p, q)`` with ``p``, ``q`` from
    :func:`softmax_with_temperature` applied to target and draft logits with the same sampling parameters.

    Shapes ``(..., vocab)`` broadcast; returns one probability per leading index.  At temperature 0 it is 1
    where the two argmaxes agree and 0 elsewhere.
    """
    p = softmax_with_temperature(target_logits, temperature, top_k, top_p)
    q = softmax_with_temperature(draft_logits, temperature, top_k, top_p)
    return acceptance_rate(p, q)


def residual_distribution(p, q):
    """Resampling distribution of the exact rule after a rejection: ``normalize(max(0, p - q))``.

    Rows where ``p <= q`` everywhere (``p == q``; a rejection then has probability 0) return ``p``.
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    r = np.maximum(p - q, 0.0)
    total = r.sum(axis=-1, keepdims=True)
    safe_total = np.where(total > 0, total, 1.0)
    return np.where(total > 0, r / safe_total, np.broadcast_to(p, r.shape))


def one_hot_argmax(x):
    """One-hot distribution on ``argmax`` of the last axis (first index on ties); same shape as ``x``."""
    x = np.asarray(x, dtype=float)
    out = np.zeros(x.shape)
    np.put_along_axis(out, np.argmax(x, axis=-1)[..., None], 1.0, axis=-1)
    return out


def greedy_draft_acceptance_rate(p, q):
    """Acceptance probability when the draft proposes ``argmax q`` deterministically: ``p(argmax q)``.

    This is :func:`acceptance_rate` with ``q`` replaced by its one-hot argmax.
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    p, q = np.broadcast_arrays(p, q)
    x = np.argmax(q, axis=-1)
    return _scalar_or_array(np.take_along_axis(p, x[..., None], axis=-1)[..., 0])


def typical_acceptance_threshold(p, posterior_threshold: float = MEDUSA_POSTERIOR_THRESHOLD,
                                 posterior_alpha: float = MEDUSA_POSTERIOR_ALPHA):
    """Medusa typical-acceptance threshold ``min(epsilon, delta * exp(-H(p)))`` (Cai et al. 2024, sec. 2.3.1).

    ``p`` is the target distribution at the sampling temperature, ``H`` its entropy in nats,
    ``epsilon = posterior_threshold`` and ``delta = posterior_alpha`` (Medusa defaults 0.09 and 0.3).
    A draft ``x`` is accepted iff ``p(x) > threshold``.  (Medusa's code uses ``log(p + 1e-5)`` inside the
    entropy; this uses the exact entropy.)
    """
    h = np.asarray(entropy(p))
    return _scalar_or_array(np.minimum(posterior_threshold, posterior_alpha * np.exp(-h)))


def typical_acceptance_probability(p, q, posterior_threshold: float = MEDUSA_POSTERIOR_THRESHOLD,
                                   posterior_alpha: float = MEDUSA_POSTERIOR_ALPHA):
    """Probability that typical acceptance accepts a draft ``x ~ q``: ``sum_x q(x) [p(x) > threshold(p)]``."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    thr = np.asarray(typical_acceptance_threshold(p, posterior_threshold, posterior_alpha))[..., None]
    return _scalar_or_array(np.asarray(np.where(p > thr, q, 0.0).sum(axis=-1)))


def typical_acceptance_emitted_distribution(p, q, posterior_threshold: float = MEDUSA_POSTERIOR_THRESHOLD,
                                            posterior_alpha: float = MEDUSA_POSTERIOR_ALPHA):
    """Distribution of the token emitted at one position under typical acceptance (see
    :func:`typical_acceptance_step`): ``q(x) [p(x) > thr] + (1 - P(accept)) p(x)``.

    It differs from ``p`` in general (the rule is lossy); ``TV(result, p)`` measures the drift.
    """
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    thr = np.asarray(typical_acceptance_threshold(p, posterior_threshold, posterior_alpha))[..., None]
    accepted_mass = np.where(p > thr, q, 0.0)
    return accepted_mass + (1.0 - accepted_mass.sum(axis=-1, keepdims=True)) * p
