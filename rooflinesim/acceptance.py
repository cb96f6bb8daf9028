"""Acceptance math for speculative decoding.

This module answers "how many tokens does one speculative step commit?" from three directions:

1. Closed forms (section 1).  With per-position *conditional* acceptance rates ``a_1..a_k`` (``a_i`` is the
   probability that draft ``i`` is accepted given that drafts ``1..i-1`` were), one speculative step commits
   ``n = 1..k+1`` tokens: ``n - 1`` accepted drafts followed either by one token resampled at the first
   rejected position, or, when all ``k`` drafts were accepted, by the "bonus" token the target model sampled
   from its last verified position.  The i.i.d. case (every ``a_i`` equal to ``alpha``) gives the Leviathan
   et al. (2023) formula ``E = (1 - alpha^(k+1)) / (1 - alpha)``.

2. Acceptance from distributions (section 2).  Under the exact speculative-sampling rule the probability of
   accepting a draft sampled from ``q`` when the target distribution is ``p`` is
   ``sum_x min(p(x), q(x)) = 1 - TV(p, q)``.

3. Acceptance rules and a Monte Carlo step simulator (section 3), vectorised over many trials, used to check
   the formulas and to quantify lossy rules such as Medusa's typical acceptance.

Conventions
-----------
* "Tokens" are integer ids in ``[0, vocab)``.  Distributions are float arrays whose last axis is the
  vocabulary; leading axes are batch axes (positions, contexts, ...).
* Monte Carlo functions put the trial axis first: results have shape ``(n_trials, *batch_shape)``.
* All randomness comes from an explicit ``numpy.random.Generator``.
* Probabilities are dimensionless numbers in ``[0, 1]``; token counts are tokens per speculative step
  (one draft-then-verify cycle of the target model).

Only numpy is required (no torch, no matplotlib), so the analytic performance model can import this anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

__all__ = [
    # 1. closed forms
    "expected_tokens_iid",
    "expected_tokens_per_position",
    "committed_tokens_distribution",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "draft_acceptance_rate_from_mean_acceptance_length",
    "mean_acceptance_length_from_draft_acceptance_rate",
    "alpha_from_expected_tokens_iid",
    "leviathan_walltime_improvement",
    "leviathan_arithmetic_operations_factor",
    # 2. acceptance from distributions
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
    # 3. rules and Monte Carlo
    "sample_categorical",
    "RuleStepResult",
    "exact_rejection_step",
    "greedy_draft_step",
    "typical_acceptance_step",
    "ACCEPTANCE_RULES",
    "SpeculativeSimulationResult",
    "simulate_speculative_steps",
    "synthetic_distributions",
    "synthetic_logit_pair",
]

#: Medusa's default ``posterior_threshold`` (epsilon): hard upper bound on the typical-acceptance threshold.
MEDUSA_POSTERIOR_THRESHOLD = 0.09
#: Medusa's default ``posterior_alpha`` (delta): scale of the entropy-dependent threshold ``delta * exp(-H)``.
MEDUSA_POSTERIOR_ALPHA = 0.3


# ---------------------------------------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------------------------------------


def _as_probability(x, name: str) -> np.ndarray:
    """``x`` as a float array, checked to lie in [0, 1] (NaN rejected)."""
    arr = np.asarray(x, dtype=float)
    if not np.all((arr >= 0.0) & (arr <= 1.0)):
        raise ValueError(f"{name} must lie in [0, 1]")
    return arr


def _as_nonnegative_int(k, name: str = "k") -> np.ndarray:
    """``k`` as an int64 array, checked to be integer-valued and >= 0."""
    arr = np.asarray(k)
    if not np.issubdtype(arr.dtype, np.integer):
        as_float = arr.astype(float)
        if not np.all(np.isfinite(as_float) & (as_float == np.round(as_float))):
            raise ValueError(f"{name} must be integer-valued")
        arr = as_float
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0")
    return arr


def _as_distribution(p, name: str) -> np.ndarray:
    """``p`` as a float array with a vocabulary (last) axis of non-negative entries summing to ~1."""
    arr = np.asarray(p, dtype=float)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} needs a non-empty last (vocabulary) axis")
    if not np.all(arr >= 0.0):
        raise ValueError(f"{name} must be non-negative")
    if not np.allclose(arr.sum(axis=-1), 1.0, rtol=0.0, atol=1e-6):
        raise ValueError(f"{name} must sum to 1 along the last axis")
    return arr


def _scalar_or_array(x: np.ndarray):
    """0-d arrays become numpy scalars; other arrays are returned unchanged."""
    return x[()] if x.ndim == 0 else x


# ---------------------------------------------------------------------------------------------------------
# 1. closed forms for expected committed tokens
# ---------------------------------------------------------------------------------------------------------


def expected_tokens_iid(alpha, k):
    """Expected tokens committed per speculative step with i.i.d. acceptance.

    ``E = sum_{i=0..k} alpha^i = (1 - alpha^(k+1)) / (1 - alpha)``: one token is always committed (the
    resample at the first rejection, or the bonus token), plus ``alpha^i`` for "draft ``i`` and all drafts
    before it were accepted".  Leviathan et al. (2023), eq. (1).

    Parameters
    ----------
    alpha : array_like of float in [0, 1]
        Per-draft acceptance probability (dimensionless), the same at every draft position.
    k : array_like of int >= 0
        Number of draft tokens proposed per step.  Broadcast against ``alpha``.

    Returns
    -------
    Expected committed tokens per step, in ``[1, k + 1]`` (tokens/step); a numpy scalar for scalar inputs.

    Notes
    -----
    Evaluated as ``expm1((k+1) log a) / expm1(log a)``, which keeps near machine-precision relative accuracy
    as ``alpha -> 1``.  The textbook ratio is 0/0 at ``alpha = 1`` and, just below 1, subtracts nearly equal
    numbers (relative errors up to ~1e-9 for ``1 - alpha`` in [1e-15, 1e-9]).  ``alpha == 1`` returns exactly
    ``k + 1`` and ``k == 0`` returns exactly 1.
    """
    a = _as_probability(alpha, "alpha")
    kk = _as_nonnegative_int(k)
    a, kk = np.broadcast_arrays(a, kk)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.log(a)  # -inf at a == 0: expm1(-inf) = -1 gives the right limit 1 for k >= 1
        ratio = np.expm1((kk + 1) * log_a) / np.expm1(log_a)
    out = np.where(a == 1.0, (kk + 1).astype(float), ratio)
    out = np.where(kk == 0, 1.0, out)
    return _scalar_or_array(out)


def expected_tokens_per_position(alphas):
    """Expected tokens committed per step with position-dependent acceptance.

    ``E = 1 + sum_{i=1..k} prod_{j<=i} a_j`` where ``a_j`` is the *conditional* acceptance rate of draft
    ``j`` given that drafts ``1..j-1`` were accepted.

    Parameters
    ----------
    alphas : array_like, shape ``(k,)`` or ``(..., k)``
        Conditional per-position acceptance rates in [0, 1]; leading axes are independent cases.
        ``k = 0`` (an empty last axis) gives 1.

    Returns
    -------
    Expected committed tokens per step (tokens/step), shape ``alphas.shape[:-1]``.
    """
    a = _as_probability(alphas, "alphas")
    if a.ndim == 0:
        raise ValueError("alphas needs a last axis of length k (use expected_tokens_iid for a scalar)")
    out = 1.0 + np.cumprod(a, axis=-1).sum(axis=-1)
    return _scalar_or_array(np.asarray(out))


def committed_tokens_distribution(alphas):
    """Probability mass function of the number of tokens committed by one speculative step.

    Entry ``n - 1`` of the last axis is ``P(n committed tokens)`` for ``n = 1..k+1``:
    ``P(n) = prod_{j<n} a_j * (1 - a_n)`` for ``n <= k`` (``n - 1`` accepted drafts, draft ``n`` rejected and
    replaced by a resampled token) and ``P(k+1) = prod_{j<=k} a_j`` (all drafts accepted plus the bonus token).

    Parameters
    ----------
    alphas : array_like, shape ``(k,)`` or ``(..., k)``
        Conditional per-position acceptance rates in [0, 1].

    Returns
    -------
    pmf, shape ``(..., k + 1)``, summing to 1 along the last axis.
    """
    a = _as_probability(alphas, "alphas")
    if a.ndim == 0:
        raise ValueError("alphas needs a last axis of length k")
    ones = np.ones(a.shape[:-1] + (1,))
    reach = np.concatenate([ones, np.cumprod(a, axis=-1)], axis=-1)  # P(at least n committed), n = 1..k+1
    reject = np.concatenate([1.0 - a, ones], axis=-1)  # stop at n: draft n rejected, or no draft left
    return reach * reject


def mean_acceptance_length(alphas, k=None):
    """Expected committed tokens per step, i.e. what vLLM reports as "mean acceptance length".

    vLLM's mean acceptance length is ``1 + accepted draft tokens / number of speculative steps``: it counts the
    token the target model always contributes (the resample at the first rejection or the bonus token), so
    it lies in ``[1, k + 1]``.  Compare :func:`draft_acceptance_rate`, which lies in ``[0, 1]``.

    Parameters
    ----------
    alphas : array_like
        With ``k=None``: conditional per-position acceptance rates, shape ``(..., k)``.
        With ``k`` given: an i.i.d. per-draft acceptance probability broadcast against ``k``.
    k : array_like of int, optional
        Number of drafts per step, only for the i.i.d. form.

    Returns
    -------
    Tokens per step.
    """
    if k is None:
        return expected_tokens_per_position(alphas)
    return expected_tokens_iid(alphas, k)


def draft_acceptance_rate(alphas, k=None):
    """Expected fraction of drafted tokens that are accepted, i.e. vLLM's "draft acceptance rate".

    ``(E - 1) / k`` with ``E`` from :func:`mean_acceptance_length`.  Drafts after the first rejection count as
    rejected, so this is *not* the per-draft acceptance probability: with i.i.d. acceptance ``alpha`` it equals
    ``(alpha + alpha^2 + ... + alpha^k) / k``, which is below ``alpha`` for ``k > 1`` and ``0 < alpha < 1``.

    Parameters are as for :func:`mean_acceptance_length`.  Undefined (ValueError) for ``k = 0``.

    Returns
    -------
    Dimensionless fraction in [0, 1].
    """
    if k is None:
        a = np.asarray(alphas, dtype=float)
        if a.ndim == 0 or a.shape[-1] == 0:
            raise ValueError("draft_acceptance_rate is undefined for k = 0 drafts")
        n_drafts = a.shape[-1]
        return (np.asarray(expected_tokens_per_position(a)) - 1.0) / n_drafts
    kk = _as_nonnegative_int(k)
    if np.any(kk == 0):
        raise ValueError("draft_acceptance_rate is undefined for k = 0 drafts")
    return (expected_tokens_iid(alphas, kk) - 1.0) / kk


def draft_acceptance_rate_from_mean_acceptance_length(mean_length, k):
    """Convert vLLM's mean acceptance length (tokens/step, counts the bonus token) to its draft acceptance
    rate (fraction of drafted tokens accepted): ``(mean_length - 1) / k``."""
    kk = _as_nonnegative_int(k)
    if np.any(kk == 0):
        raise ValueError("k must be >= 1")
    return (np.asarray(mean_length, dtype=float) - 1.0) / kk


def mean_acceptance_length_from_draft_acceptance_rate(rate, k):
    """Inverse of :func:`draft_acceptance_rate_from_mean_acceptance_length`: ``1 + rate * k`` tokens/step."""
    kk = _as_nonnegative_int(k)
    return 1.0 + np.asarray(rate, dtype=float) * kk


def alpha_from_expected_tokens_iid(expected_tokens, k, n_iterations: int = 64):
    """Invert :func:`expected_tokens_iid`: the i.i.d. per-draft acceptance ``alpha`` giving ``E`` tokens/step.

    Useful to turn a measured mean acceptance length into the ``alpha`` of the i.i.d. model.  Solved by
    vectorised bisection on ``[0, 1]`` (``E`` is increasing in ``alpha``); ``n_iterations=64`` reaches double
    precision.  ``expected_tokens`` must lie in ``[1, k + 1]``; ``k = 0`` gives NaN (any alpha fits).
    """
    e = np.asarray(expected_tokens, dtype=float)
    kk = _as_nonnegative_int(k)
    e, kk = np.broadcast_arrays(e, kk)
    if not np.all((e >= 1.0) & (e <= kk + 1.0)):
        raise ValueError("expected_tokens must lie in [1, k + 1]")
    lo = np.zeros(e.shape)
    hi = np.ones(e.shape)
    for _ in range(n_iterations):
        mid = 0.5 * (lo + hi)
        too_small = np.asarray(expected_tokens_iid(mid, kk)) < e
        lo = np.where(too_small, mid, lo)
        hi = np.where(too_small, hi, mid)
    out = np.where(kk == 0, np.nan, 0.5 * (lo + hi))
    return _scalar_or_array(out)


def leviathan_walltime_improvement(alpha, k, c):
    """Expected wall-time speed-up of speculative decoding over plain decoding (Leviathan et al. 2023, Thm 3.8).

    ``(1 - alpha^(k+1)) / ((1 - alpha) (k c + 1))``: one step costs ``k`` draft forward passes plus one target
    forward pass (``k c + 1`` target-step units) and commits :func:`expected_tokens_iid` tokens.

    Parameters
    ----------
    alpha : per-draft acceptance probability in [0, 1].
    k : drafts per step (int >= 0).
    c : draft step time / target step time (dimensionless, >= 0).

    Returns
    -------
    Speed-up factor (dimensionless; > 1 means faster).  Stable as ``alpha -> 1``; ``alpha = 1, c = 0`` gives
    ``k + 1``.
    """
    cc = np.asarray(c, dtype=float)
    if np.any(cc < 0):
        raise ValueError("c must be >= 0")
    kk = _as_nonnegative_int(k)
    return expected_tokens_iid(alpha, kk) / (kk * cc + 1.0)


def leviathan_arithmetic_operations_factor(alpha, k, c_hat):
    """Expected factor by which total arithmetic operations grow (Leviathan et al. 2023, Thm 3.11).

    ``(1 - alpha) (k c_hat + k + 1) / (1 - alpha^(k+1))``: per step the target model runs ``k + 1`` positions
    in parallel and the draft ``k`` positions (``k c_hat`` target-token units), for
    :func:`expected_tokens_iid` committed tokens.

    Parameters
    ----------
    alpha : per-draft acceptance probability in [0, 1].
    k : drafts per step (int >= 0).
    c_hat : draft arithmetic operations per token / target arithmetic operations per token (>= 0).

    Returns
    -------
    Operations ratio versus plain decoding (dimensionless; >= 1 unless ``c_hat`` is tiny and ``alpha`` high).
    """
    ch = np.asarray(c_hat, dtype=float)
    if np.any(ch < 0):
        raise ValueError("c_hat must be >= 0")
    kk = _as_nonnegative_int(k)
    return (kk * ch + kk + 1.0) / expected_tokens_iid(alpha, kk)


# ---------------------------------------------------------------------------------------------------------
# 2. acceptance from distributions
# ---------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------
# 3. acceptance rules (Monte Carlo, vectorised over trials)
# ---------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------
# synthetic inputs
# ---------------------------------------------------------------------------------------------------------


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
