"""Closed forms for the tokens one speculative step commits (acceptance section 1).

With per-position *conditional* acceptance rates ``a_1..a_k`` (``a_i`` is the probability that draft ``i`` is
accepted given that drafts ``1..i-1`` were), one speculative step commits ``n = 1..k+1`` tokens: ``n - 1``
accepted drafts followed either by one token resampled at the first rejected position, or, when all ``k``
drafts were accepted, by the "bonus" token the target model sampled from its last verified position.  The
i.i.d. case (every ``a_i`` equal to ``alpha``) gives the Leviathan et al. (2023) formula
``E = (1 - alpha^(k+1)) / (1 - alpha)``.

Holds: expected tokens (i.i.d. and per position), the committed-token pmf, vLLM's mean acceptance length and
draft acceptance rate with their conversions, the inverse ``alpha`` from ``E``, and Leviathan et al.'s
wall-time and arithmetic-operations factors.  Token counts are tokens per speculative step (one
draft-then-verify cycle of the target model); probabilities are dimensionless, in [0, 1].
"""

from __future__ import annotations

import numpy as np

from ._checks import _as_nonnegative_int, _as_probability, _scalar_or_array

__all__ = [
    "get_expected_tokens",
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
]


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
    return _scalar_or_array(np.asarray(_expected_tokens_by_prefix(a)[..., -1]))


def _expected_tokens_by_prefix(rates: np.ndarray) -> np.ndarray:
    """Conditional rates [..., k] -> E[committed tokens] at k' = 0..k [..., k + 1]:
    ``1 + sum_{i<=k'} prod_{j<=i} a_j``."""
    ones = np.ones(rates.shape[:-1] + (1,))
    return np.concatenate([ones, 1.0 + np.cumsum(np.cumprod(rates, axis=-1), axis=-1)], axis=-1)


def get_expected_tokens(k, alpha=None, alpha_per_position=None) -> np.ndarray:
    """E[committed tokens per step] at draft lengths ``k`` (array): the one function pricing, serving, engine configs
    and measured-acceptance reports use.

    From the i.i.d. rate ``alpha`` (:func:`expected_tokens_iid`) when ``alpha_per_position`` is None, else from the
    conditional per-position rates (1-D; a ``k`` beyond their length uses all of them, as a drafter proposes at most
    that many). Returns floats shaped like ``k`` (broadcast with ``alpha``).
    """
    k = np.asarray(k)
    if alpha_per_position is None:
        return np.asarray(expected_tokens_iid(alpha, k), dtype=float)
    by_prefix = _expected_tokens_by_prefix(np.asarray(alpha_per_position, dtype=float))
    return by_prefix[np.minimum(k, by_prefix.size - 1)]


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
