"""What `rooflinesim calibrate` measures, as named records, and the samples collected for them (no torch).

Every timed configuration is identified by one frozen key record per benchmark family; `Results` maps each key to
the individual call times (s) collected over all passes, and `Timing` summarises one configuration's calls. The
benchmarks (`calibrate.measure.benchmarks`, torch) produce them and the fit (`calibrate.fitting.fit_profile`,
numpy / scipy) reads them, so this module is importable without torch.

The keys are frozen dataclasses rather than tuples so that keys of different families can never compare equal and
every field is read by name.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Iterator, TypeVar, Union


#: a run whose reference GEMV moved by more than this (relative) is flagged in its provenance
DRIFT_FLAG = 0.15


@dataclass(frozen=True)
class LinearKey:
    """F.linear(x[m, in_features], W[out_features, in_features]) with cold (rotated) weights."""

    in_features: int
    out_features: int
    m: int  # rows of x: tokens in the step


@dataclass(frozen=True)
class AttentionKey:
    """Masked SDPA over the decoder's KV-cache layout: `query_tokens` new tokens against `context_tokens` cached."""

    heads: int
    kv_heads: int
    head_dim: int
    batch: int
    context_tokens: int
    query_tokens: int  # 1 = decode, > 1 = verify


@dataclass(frozen=True)
class ElementwiseKey:
    """One elementwise op family (norm, rope, mlp_act, residual, kv_cache_write, embedding) of a synthetic layer."""

    family: str
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    tokens: int  # tokens in the step (batch x new tokens)


@dataclass(frozen=True)
class DecoderKey:
    """A whole synthetic decoder (`plan.DECODER_SPECS[name]`) timed as one forward pass; `build`: which of its
    fresh builds in the run (`Plan.decoder_builds`)."""

    name: str
    batch: int
    new_tokens: int
    build: int = 0


@dataclass(frozen=True)
class CacheKey:
    """The cache-reuse GEMV with its weights rotating over `working_set_bytes` (B); `repeat`: which of the run's
    timings of the curve (`Plan.cache_repeats`)."""

    working_set_bytes: int
    repeat: int = 0


@dataclass(frozen=True)
class WarmLinearKey:
    """F.linear(x[m, in_features], W[out_features, in_features]) with the weights rotating over a working set that
    stays in the last-level cache (`plan.WARM_WORKING_SET_BYTES`): a small model's weights between its steps."""

    in_features: int
    out_features: int
    m: int


@dataclass(frozen=True)
class SamplerKey:
    """What runs after a forward pass: `kind` 'sample' (probabilities of `positions` logit rows per sequence, one draw
    per sequence, the next step's books: `sampling.sample_and_advance`) or 'accept_rule' (the verify input, the exact
    rule over `positions` = k drafts and the rollback: `sampling.verify_input` + `sampling.commit`), over a
    vocabulary of `vocab`."""

    kind: str
    batch: int
    positions: int
    vocab: int


@dataclass(frozen=True)
class ImplementationKey:
    """What other implementations do that the reference decoder does not (`ops.implementation_ops`): `kind`
    'kv_concat' concatenates one new position onto a layer's cached keys and values of `size` bytes each (a copy
    into a fresh allocation, as transformers' DynamicCache does every step); 'dispatch' runs `size` tiny aten calls."""

    kind: str
    size: int


MeasurementKey = Union[LinearKey, AttentionKey, ElementwiseKey, DecoderKey, CacheKey, WarmLinearKey, SamplerKey,
                       ImplementationKey]
KeyT = TypeVar("KeyT", LinearKey, AttentionKey, ElementwiseKey, DecoderKey, CacheKey, WarmLinearKey, SamplerKey,
               ImplementationKey)


@dataclass(frozen=True)
class Timing:
    """Individual call times (s) of one configuration; median and relative spread."""

    samples: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)

    @property
    def estimate_s(self) -> float:
        """The time used for fitting and comparison: the median of the faster half of the calls (about p25).

        On a shared or virtualised CPU, other tenants and descheduled OpenMP threads add stalls of 4-120 ms to some
        calls; the faster half's median is what the device does when it is not interrupted, and is reproducible
        where the plain median is not. Calibration and validation use the same statistic.
        """
        xs = sorted(self.samples)
        return statistics.median(xs[: max(1, (len(xs) + 1) // 2)])

    @property
    def spread(self) -> float:
        """(p90 - p10) / median over the individual calls."""
        xs = sorted(self.samples)
        if len(xs) < 3:
            return 0.0
        lo = xs[int(0.1 * (len(xs) - 1))]
        hi = xs[int(round(0.9 * (len(xs) - 1)))]
        return (hi - lo) / max(self.median_s, 1e-12)


@dataclass
class Results:
    """The call times (s) of one dtype's measurements, per key, accumulated over the passes of a run."""

    samples: dict[MeasurementKey, list[float]] = field(default_factory=dict)

    def add(self, key: MeasurementKey, timing: Timing) -> None:
        self.samples.setdefault(key, []).extend(timing.samples)

    def timing(self, key: MeasurementKey) -> Timing:
        return Timing(tuple(self.samples[key]))

    def keys_of(self, kind: type[KeyT]) -> Iterator[KeyT]:
        """The keys of one family, in the order they were first measured."""
        return (key for key in self.samples if isinstance(key, kind))

    def get_decoder_rows(self) -> dict[DecoderKey, float]:
        """Each decoder configuration's time (s), keyed by its build-0 key: the median over its builds of each
        build's `Timing.estimate_s` (a build's weights land where they land, `plan.DECODER_BUILDS`)."""
        builds: dict[DecoderKey, list[float]] = {}
        for key in self.keys_of(DecoderKey):
            builds.setdefault(replace(key, build=0), []).append(self.timing(key).estimate_s)
        return {key: statistics.median(times) for key, times in builds.items()}


#: a small-M linear point this many times slower than both of its neighbours in M (same weight shape) was timed
#: during a stall: the dense grid up to M = 16 steps M by at most 2x, and the CPU saw-tooth moves the time by less
#: than that. With a neighbour busy on the other core of a 2-core VM, every call of a few configurations took
#: 13-16 ms where their neighbours took 0.04-2 ms (a descheduled OpenMP thread), and priced the batch-8 steps of the
#: project's hold-outs 1.7-5x too slow
STALL_FACTOR = 3.0
#: the largest M the stall check covers (the dense part of the grids, `plan.ALWAYS_MEASURED_M`)
STALL_CHECK_MAX_M = 16


#: a 'kv_concat' point above glibc's mmap threshold whose cost per byte is this many times the largest point below
#: it (heap reuse) was timed while the VM's page faults were slow, a state that comes and goes: fresh pages cost
#: 2.9x the heap's rate on the 2-core Intel Xeon VM (9.3 against 27 GB/s) and up to 9.5x on the AMD EPYC one (3.7
#: against 35 GB/s), and one quick run of three read 48 MiB at 1.5 GB/s (18x), which priced transformers' batch-16
#: long-context steps 5-6x too slow where the hold-out ran at 9 GB/s
CONCAT_STALL_FACTOR = 12.0


#: a 'kv_concat' point below the threshold whose cost per byte is this many times the median of the points below
#: it, and at least HEAP_CONCAT_STALL_MIN_S above what that median prices it at, was timed while its heap pages
#: faulted or sat in a slow state: per byte the heap points ran within 1.27x of their median (0.5-24 MiB) in 26 of
#: 30 points of ten quiet --quick runs on the 2-core Intel Xeon VM, where the other four read 1.9-9.5x it (0.5 MiB
#: at 225-741 us against 50-68 us; 8 MiB at 2.2 ms against 0.94-1.2 ms, in every call of one run), and those
#: profiles priced transformers' steps up to 26 % slow (per-model signed medians). The excess floor keeps a point
#: whose fixed per-call cost is a large part of it (a slow CPU's dispatch, a GPU's launch) from being named.
HEAP_CONCAT_STALL_FACTOR = 1.6
HEAP_CONCAT_STALL_MIN_S = 100e-6


def find_heap_concat_outliers(results: Results) -> list[ImplementationKey]:
    """The 'kv_concat' points below the mmap threshold whose time is more than HEAP_CONCAT_STALL_FACTOR times, and
    HEAP_CONCAT_STALL_MIN_S more than, what the median cost per byte of those points prices them at (with at least
    three of them; none otherwise)."""
    from ...specs.measured import FRESH_ALLOCATION_BYTES

    heap = [(key.size, results.timing(key).estimate_s, key) for key in results.keys_of(ImplementationKey)
            if key.kind == "kv_concat" and key.size < FRESH_ALLOCATION_BYTES]
    if len(heap) < 3:
        return []
    typical = statistics.median(t / size for size, t, _ in heap)
    return [key for size, t, key in sorted(heap, key=lambda x: x[0])
            if t > HEAP_CONCAT_STALL_FACTOR * typical * size and t - typical * size > HEAP_CONCAT_STALL_MIN_S]


def find_stalled_concat_points(results: Results) -> list[ImplementationKey]:
    """The 'kv_concat' points from the mmap threshold up whose time per byte is more than CONCAT_STALL_FACTOR times
    that of the largest point below it (none without such a point); all of them when none cost at least
    `specs.measured.WARM_SERVED_FACTOR` times it (every one served warm: the profile would price fresh pages at a
    warm block's rate); and the outliers below it (`find_heap_concat_outliers`)."""
    from ...specs.measured import FRESH_ALLOCATION_BYTES, WARM_SERVED_FACTOR

    points = sorted((key.size, results.timing(key).estimate_s / key.size, key)
                    for key in results.keys_of(ImplementationKey) if key.kind == "kv_concat")
    heap = [rate for size, rate, _ in points if size < FRESH_ALLOCATION_BYTES]
    if not heap:
        return []
    fresh = [(rate, key) for size, rate, key in points if size >= FRESH_ALLOCATION_BYTES]
    # a quick run has one point there: read 3x faster than paid pages in one of two quick runs at 11:07 (7.4 ms
    # against 22-23 ms for 48 MiB, 2-core Intel Xeon VM), which priced every cache above 32 MiB at the heap's rate
    all_warm = bool(fresh) and all(rate < WARM_SERVED_FACTOR * heap[-1] for rate, _ in fresh)
    return [*find_heap_concat_outliers(results),
            *(key for rate, key in fresh if all_warm or rate > CONCAT_STALL_FACTOR * heap[-1])]


def find_stalled_points(results: Results) -> list[MeasurementKey]:
    """Every point a stall check names: small-M linear points and fresh-page 'kv_concat' points."""
    return [*find_stalled_linear_points(results), *find_stalled_concat_points(results)]


def find_stalled_linear_points(results: Results) -> list[LinearKey]:
    """The linear points up to STALL_CHECK_MAX_M whose time is more than STALL_FACTOR times both of their
    neighbours' in M (same weight shape, at least one neighbour)."""
    by_shape: dict[tuple[int, int], list[LinearKey]] = {}
    for key in results.keys_of(LinearKey):
        by_shape.setdefault((key.in_features, key.out_features), []).append(key)
    stalled = []
    for keys in by_shape.values():
        keys.sort(key=lambda k: k.m)
        times = [results.timing(k).estimate_s for k in keys]
        for i, key in enumerate(keys):
            neighbours = [times[j] for j in (i - 1, i + 1) if 0 <= j < len(keys)]
            if key.m <= STALL_CHECK_MAX_M and neighbours and times[i] > STALL_FACTOR * max(neighbours):
                stalled.append(key)
    return stalled
