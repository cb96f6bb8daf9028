"""Shared hypothesis strategies for the rooflinesim test-suite (append new sections; keep others' content)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

# --------------------------------------------------------------------------------------------------------
# acceptance (speculative decoding acceptance math): used by tests/test_acceptance.py
# --------------------------------------------------------------------------------------------------------

#: Per-draft acceptance probability in [0, 1].
acceptance_alphas = st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False)

#: Number of draft tokens per speculative step.
draft_lengths = st.integers(min_value=0, max_value=24)


@st.composite
def per_position_alphas(draw, min_k: int = 0, max_k: int = 12) -> np.ndarray:
    """Conditional per-position acceptance rates, a float array of shape (k,) in [0, 1]."""
    values = draw(st.lists(acceptance_alphas, min_size=min_k, max_size=max_k))
    return np.asarray(values, dtype=float)


@st.composite
def probability_vectors(draw, vocab: int | None = None, min_vocab: int = 2, max_vocab: int = 24,
                        allow_zeros: bool = True) -> np.ndarray:
    """A categorical distribution (float array summing to 1) over ``vocab`` tokens."""
    if vocab is None:
        vocab = draw(st.integers(min_value=min_vocab, max_value=max_vocab))
    low = 0.0 if allow_zeros else 1e-3
    weights = np.asarray(draw(st.lists(st.floats(min_value=low, max_value=1.0, allow_nan=False),
                                       min_size=vocab, max_size=vocab)), dtype=float)
    if weights.sum() <= 0.0:
        weights[draw(st.integers(min_value=0, max_value=vocab - 1))] = 1.0
    return weights / weights.sum()


@st.composite
def probability_vector_pairs(draw, min_vocab: int = 2, max_vocab: int = 24,
                             allow_zeros: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(target p, draft q) distributions over a shared vocabulary."""
    vocab = draw(st.integers(min_value=min_vocab, max_value=max_vocab))
    return (draw(probability_vectors(vocab=vocab, allow_zeros=allow_zeros)),
            draw(probability_vectors(vocab=vocab, allow_zeros=allow_zeros)))
