"""The building blocks of the op list: OpCost (FLOPs and bytes of one op), the op constructors, and the attention and
routing geometry every section of a step shares (pairs scored, KV positions read and stored, experts touched).

Every function here is vectorised: B, S and q may be numpy arrays that broadcast together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

#: Op kinds whose FLOPs run on the matrix units (tensor cores, AMX); the rest are vector/elementwise work.
MATMUL_KINDS = frozenset({"linear", "expert_linear", "attention", "attention_scores", "attention_values"})
COLLECTIVE_KINDS = frozenset({"allreduce", "allgather"})
ATTENTION_KINDS = frozenset({"attention", "attention_scores", "attention_values", "softmax"})

# FLOPs per element of the elementwise ops (counted as the arithmetic a straightforward kernel does).
FLOPS_PER_ELEMENT_RMSNORM = 4  # square, accumulate, scale by rsqrt, scale by weight
FLOPS_PER_ELEMENT_LAYERNORM = 8
FLOPS_PER_ELEMENT_ROPE = 3  # per element of q and k: a 2x2 rotation is 4 mul + 2 add per pair
FLOPS_PER_ELEMENT_SILU_GATE = 5  # x * sigmoid(x) * up: exp, add, div, mul, mul
FLOPS_PER_ELEMENT_GELU = 8
FLOPS_PER_SCORE_SOFTMAX = 5  # mask add, max, subtract, exp, divide by the sum


@dataclass(frozen=True)
class OpCost:
    """FLOPs and bytes of one instance of an op; arrays broadcast over the workload grid."""

    name: str
    kind: str
    count: int
    flops: np.ndarray
    weight_bytes: np.ndarray
    act_read_bytes: np.ndarray
    act_write_bytes: np.ndarray
    kv_read_bytes: np.ndarray
    kv_write_bytes: np.ndarray
    comm_bytes: np.ndarray  # message size of a collective (interconnect, not memory traffic)
    dims: dict = field(default_factory=dict, compare=False)

    @cached_property
    def bytes(self) -> np.ndarray:
        return self.weight_bytes + self.act_read_bytes + self.act_write_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def arithmetic_intensity_flops_per_byte(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.bytes > 0, self.flops / np.maximum(self.bytes, 1e-300), 0.0)


def make_op(name, kind, count, flops=0.0, weight=0.0, act_read=0.0, act_write=0.0, kv_read=0.0, kv_write=0.0, comm=0.0,
        **dims):
    """An op whose seven quantities are float arrays of one shape (their broadcast; treat them as read-only). At one
    point (every quantity a number or a 0-d array) they are numpy float64 scalars: the same IEEE arithmetic as 0-d
    arrays, without an array's per-operation cost in every sum the pricing makes over the ops."""
    values = (flops, weight, act_read, act_write, kv_read, kv_write, comm)
    if ({type(flops), type(weight), type(act_read), type(act_write), type(kv_read), type(kv_write), type(comm)}
            <= _SCALAR_TYPES or all(np.ndim(v) == 0 for v in values)):
        flops, weight, act_read, act_write, kv_read, kv_write, comm = map(np.float64, values)
        # the dataclass's own `__init__` sets each of a frozen instance's 11 fields through `object.__setattr__`; one
        # point builds some 40 ops, so its fields go into the instance's dict at once (the same object:
        # `tests/test_pricing_fast_paths.py`)
        op = _new_op(OpCost)
        op.__dict__.update(name=name, kind=kind, count=count, flops=flops, weight_bytes=weight, act_read_bytes=act_read,
                           act_write_bytes=act_write, kv_read_bytes=kv_read, kv_write_bytes=kv_write, comm_bytes=comm,
                           dims=dims,
                           # `bytes`, summed now in the property's order: read many times, and a cached property
                           # costs a call each
                           bytes=weight + act_read + act_write + kv_read + kv_write)
        return op
    arrays = [np.asarray(v, dtype=float) for v in values]
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays):  # np.broadcast_arrays' numbers, without its per-call overhead
        shape = np.broadcast(*arrays).shape
        arrays = [a if a.shape == shape else _broadcast(v, a, shape) for v, a in zip(values, arrays)]
    return OpCost(name, kind, count, *arrays, dims=dims)


_new_op = object.__new__

#: the types of one point's quantities that `make_op` keeps as float64 scalars
_SCALAR_TYPES = frozenset({float, int, np.float64, np.int64})

#: grids up to this many values broadcast by copying (faster for the small arrays of one point); larger ones by a
#: view, which takes no memory
_COPY_MAX_VALUES = 4096


def _broadcast(value, array: np.ndarray, shape: tuple) -> np.ndarray:
    if array.size != 1 or math.prod(shape) > _COPY_MAX_VALUES:
        return np.broadcast_to(array, shape)
    if type(value) is float and value == 0.0 and math.copysign(1.0, value) > 0:
        return _zeros(shape)  # a constructor's default (no bytes of that kind): one shared zero array
    return np.full(shape, array.reshape(()))


@lru_cache(maxsize=64)
def _zeros(shape: tuple) -> np.ndarray:
    zeros = np.zeros(shape)
    zeros.setflags(write=False)
    return zeros


def make_linear(name, count, tokens, in_features, out_features, w_bytes, a_bytes, bias=False):
    """y[M, N] = x[M, K] @ W[K, N]: 2*M*K*N FLOPs; W read once per step, x read, y written."""
    flops = 2.0 * tokens * in_features * out_features + (tokens * out_features if bias else 0.0)
    weight = (in_features * out_features + (out_features if bias else 0)) * w_bytes
    return make_op(
        name, "linear", count, flops, weight, tokens * in_features * a_bytes, tokens * out_features * a_bytes,
        m=tokens, k=in_features, n=out_features,
    )


def get_attention_pairs(context_tokens, new_tokens, window_tokens=None):
    """(query, key) pairs one head of one sequence scores, causal within the new tokens.

    New token i (0-based) attends to S + i + 1 keys, capped by a sliding window W:
    sum_{n=S+1}^{S+q} min(W, n). Without a window this is q*S + q*(q+1)/2.
    """
    s = np.asarray(context_tokens, dtype=float)
    q = np.asarray(new_tokens, dtype=float)
    if window_tokens is None:
        return q * s + q * (q + 1) / 2
    w = float(window_tokens)
    lo, hi = s + 1, s + q
    m = np.minimum(hi, w)
    below = np.where(m >= lo, (lo + m) * (m - lo + 1) / 2, 0.0)
    above = np.maximum(0.0, hi - np.maximum(lo - 1, w)) * w
    return below + above


def get_kv_tokens_read(context_tokens, new_tokens, window_tokens=None):
    """Cached positions the step reads per sequence (the union over its new tokens' windows)."""
    total = np.asarray(context_tokens, dtype=float) + np.asarray(new_tokens, dtype=float)
    if window_tokens is None:
        return total
    return np.minimum(total, window_tokens + np.asarray(new_tokens, dtype=float) - 1)


def get_kv_tokens_stored(context_tokens, new_tokens, window_tokens=None):
    """Positions held in the KV cache per sequence and layer after the step (a sliding window keeps only W)."""
    total = np.asarray(context_tokens, dtype=float) + np.asarray(new_tokens, dtype=float)
    return total if window_tokens is None else np.minimum(total, window_tokens)


def get_expected_experts_touched(num_experts: int, experts_per_token: int, tokens):
    """Distinct experts a step's tokens route to, in expectation, under uniform top-k routing.

    Each token picks k of E experts, so an expert is missed by one token with probability 1 - k/E and by all T tokens
    with (1 - k/E)^T: E x (1 - (1 - k/E)^T). One token touches exactly k; many tokens touch all E.
    """
    tokens = np.asarray(tokens, dtype=float)
    return num_experts * -np.expm1(tokens * np.log1p(-experts_per_token / num_experts)) if experts_per_token < num_experts \
        else np.full_like(tokens, float(num_experts))


def make_collective(name, kind, count, message_bytes, devices):
    """A tensor-parallel collective over `devices`; its time comes from the interconnect (timing.collectives)."""
    return make_op(name, kind, count, comm=message_bytes, devices=devices)
