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


# --------------------------------------------------------------------------------------------------------
# specs and workloads: used by tests/test_ops.py, tests/test_step.py, tests/test_speculative.py
# --------------------------------------------------------------------------------------------------------

SHIPPED_GPU_NAMES = ("a100", "a100-40gb", "h100", "h100-pcie", "h200", "b200", "l40s", "l4", "mi300x", "rtx4090")
SHIPPED_MODEL_NAMES = ("llama-3.2-1b", "llama-3.1-8b", "llama-2-7b", "mistral-7b", "qwen2.5-0.5b", "qwen2.5-7b")
FLOAT_DTYPES = ("fp32", "bf16", "fp16")
STORAGE_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")

hardware_names = st.sampled_from(SHIPPED_GPU_NAMES)
model_names = st.sampled_from(SHIPPED_MODEL_NAMES)
batches = st.integers(min_value=1, max_value=512)
contexts = st.integers(min_value=0, max_value=32768)
new_token_counts = st.integers(min_value=1, max_value=17)
attention_modes = st.sampled_from(("flash", "unfused"))


@st.composite
def workloads(draw) -> dict:
    """A workload as keyword arguments: the `Workload` fields plus `new_tokens` (the step's q)."""
    weight_dtype = draw(st.sampled_from(STORAGE_DTYPES))
    return dict(
        batch=draw(batches),
        context_tokens=draw(contexts),
        new_tokens=draw(new_token_counts),
        weight_dtype=weight_dtype,
        kv_dtype=draw(st.sampled_from(STORAGE_DTYPES)),
        activation_dtype=weight_dtype if weight_dtype in FLOAT_DTYPES else "bf16",
        attention=draw(attention_modes),
    )
