"""What a calibration run measures: the shapes, grids and synthetic decoders, and the `Plan` of one run (no torch).

None of the generic calibrated weight shapes is a shape of the validation models (tiny-llama-123m, tiny-draft-2l):
see `LINEAR_SHAPES` and `check_hold_out`. `calibrate --shapes-of MODEL` adds a model's own shapes (`served_shapes`);
such a profile is not a hold-out for that model (`get_profile_hold_out_clash`). The benchmarks
(`calibrate.measure.benchmarks`) time what the plan lists; the fit (`calibrate.fitting.fit_profile`) reads the same
shapes back, so both stay torch-free here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

from ...ops.step_ops import get_step_ops
from ...specs.workload import Workload
from ...specs.model import ModelSpec
from ...units import GIB, MIB, get_dtype_bytes
from .measurements import (
    AttentionKey, CacheKey, DecoderKey, ElementwiseKey, ImplementationKey, LinearKey, MeasurementKey, SamplerKey,
    WarmLinearKey,
)

if TYPE_CHECKING:
    from ..measure.timers import Device


class WeightShape(NamedTuple):
    """An F.linear weight: in_features K, out_features N (as `rooflinesim.ops` names them k and n)."""

    in_features: int
    out_features: int


class AttentionHeads(NamedTuple):
    heads: int
    kv_heads: int
    head_dim: int


class LayerShape(NamedTuple):
    """The layer dimensions the elementwise op families depend on."""

    hidden: int
    heads: int
    kv_heads: int
    intermediate: int


class DecoderShape(NamedTuple):
    """A synthetic llama-style decoder timed whole."""

    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    layers: int
    vocab: int


class StepTokens(NamedTuple):
    """Sequences in a step and the new tokens of each."""

    batch: int
    new_tokens: int


#: the tiny decoders' own weight shapes (overhead-2l / -8l, hidden 64), timed at the rows those decoders run
#: (OVERHEAD_M_GRID) so that the decoders that pin the per-layer and per-step dispatch costs are priced from their own
#: tables. They stay out of the roofline fit and of the generic tables' blend (`fit_profile._fit_linear`). Priced from
#: the generic shapes (384 wide and up), each of their linears took the fitted per-call intercept. On the 2-core Intel
#: Xeon VM with AMX that intercept is 24 us in bf16, where a 64 x 64 call takes 3 us (and 64 x 128, 23 us). The tiny
#: decoders' ops were then priced above their whole measured step, the per-layer cost fitted 0, and quick bf16 profiles
#: priced the HF hold-out 15 % low (median; p90 27 %). With these tables three quick bf16 runs gave 6.1-8.5 % /
#: 14.0-19.6 %, where the three before them gave 20.5-22.8 % / 35.5-37.0 % on the same measurements
OVERHEAD_LINEAR_SHAPES = tuple(WeightShape(k, n) for k, n in ((64, 32), (64, 64), (64, 128), (64, 256), (128, 64)))
OVERHEAD_M_GRID = (1, 2, 4, 8)
#: square, GQA-narrow (N = K / 4), MLP-wide (N = 8/3 K), MLP-tall, vocabulary-wide; the last row's features and the
#: 24,704-wide head's are not multiples of 256, so the fit can tell whether such shapes run other kernels
#: (`choose_shape_alignment`). Deliberately none is a shape of the hold-out validation models.
LINEAR_SHAPES = tuple(WeightShape(k, n) for k, n in (
    (384, 384), (768, 768), (1536, 1536), (2560, 2560), (768, 192), (1536, 384), (384, 96),
    (768, 2048), (1536, 4096), (384, 1024), (2048, 768), (4096, 1536), (1024, 384),
    (384, 24576), (768, 49152), (1536, 24576), (384, 24704),
    (672, 672), (672, 168), (896, 224), (672, 2400), (384, 1344), (2400, 672), (1344, 384),
))
QUICK_LINEAR_SHAPES = tuple(WeightShape(k, n) for k, n in (
    (384, 384), (1536, 1536), (768, 192), (1536, 4096), (4096, 1536), (384, 1024), (1024, 384), (384, 24576),
    (1536, 24576), (672, 672), (896, 224), (672, 2400), (2400, 672), (384, 24704)))
M_GRID = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512, 768,
          1024, 2048, 4096)
QUICK_M_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 160, 256, 512)
HOLD_OUT_MODELS = ("tiny-llama-123m", "tiny-draft-2l")

ATTENTION_HEADS = (AttentionHeads(12, 3, 64), AttentionHeads(24, 4, 64), AttentionHeads(24, 8, 128))
QUICK_ATTENTION_HEADS = (AttentionHeads(12, 3, 64), AttentionHeads(24, 8, 128))
ATTENTION_BATCH, ATTENTION_CONTEXT, ATTENTION_Q = (1, 3, 12, 40), (96, 400, 1500, 3000), (1, 3, 6, 10)
QUICK_ATTENTION_BATCH, QUICK_ATTENTION_CONTEXT, QUICK_ATTENTION_Q = (1, 12, 40), (96, 1500), (1, 6)

#: synthetic layers for the elementwise families
ELEMENTWISE_SPECS = (LayerShape(768, 12, 4, 2048), LayerShape(1536, 24, 8, 4096))
ELEMENTWISE_TOKENS = (1, 6, 40, 256)
ELEMENTWISE_FAMILIES = ("norm", "rope", "mlp_act", "residual", "kv_cache_write", "embedding")


def elementwise_step_split(tokens: int) -> StepTokens:
    """How the elementwise benchmarks lay out a step of `tokens` tokens: decode-like (one new token per sequence) up
    to 40, verify-like (8 per sequence) above; the fit prices the same layout."""
    return StepTokens(tokens, 1) if tokens <= 40 else StepTokens(tokens // 8, 8)

#: the sampler and acceptance-rule points (kind, batch, positions, vocab) every plan times (tens of ms in all): tiny
#: vocabularies pin the per-call cost, Llama-2-sized ones the per-byte cost; positions 5 are a verify of k = 4
SAMPLER_POINTS = tuple(("sample", b, q, v) for b, q, v in ((1, 1, 32), (16, 1, 32), (1, 5, 32), (1, 1, 32000),
                                                          (8, 1, 32000), (32, 1, 32000), (4, 5, 32000))) \
    + tuple(("accept_rule", b, k, v) for b, k, v in ((1, 4, 32), (16, 4, 32), (1, 4, 32000), (8, 4, 32000),
                                                     (32, 2, 32000)))

#: what other implementations do beyond the reference decoder (`ops.implementation_ops`), timed by every plan:
#: a KV cache grown by concatenation (bytes of one layer's cached keys, and as many values) and the per-call cost of
#: aten dispatch (calls per timed call: the difference of two counts is the per-call cost). The cache sizes straddle
#: glibc malloc's mmap threshold (at most 32 MiB on 64-bit Linux, `specs.measured.CopyTable`): on the 2-core AMD
#: EPYC VM (1 thread) a concatenation allocating 31 MiB per tensor ran at 35 GB/s (read + write), one allocating
#: 33 MiB at 3.7 GB/s, as every such allocation gets fresh pages
#: above glibc's mmap threshold (32 MiB) from 48 MiB: a 40 MiB point was served warm by free heap blocks the run's
#: earlier benchmarks had left (27 GB/s against 9-10 GB/s at 48-96 MiB, 2-core Intel Xeon VM), which a model's step,
#: whose allocations that large are all mapped afresh, does not have
KV_CONCAT_BYTES = tuple(int(x * MIB) for x in (0.5, 2, 8, 16, 24, 48, 64, 96))
QUICK_KV_CONCAT_BYTES = tuple(int(x * MIB) for x in (0.5, 8, 24, 48))
TINY_KV_CONCAT_BYTES = tuple(int(x * MIB) for x in (0.5, 8))
#: a 'kv_concat' point times at least this many calls, hurried or not: some heap states leave its readings bimodal,
#: and above the mmap threshold some calls fault pages the host took back (`benchmarks.implementation._time_concat`)
CONCAT_CALLS = 12
DISPATCH_CALLS = (64, 512)
#: the concatenated cache's layout: [batch 1, KV_CONCAT_HEADS, positions, KV_CONCAT_HEAD_DIM]
KV_CONCAT_HEADS, KV_CONCAT_HEAD_DIM = 4, 64


def get_kv_concat_positions(size_bytes: int, dtype: str) -> int:
    """Cached positions of a 'kv_concat' point of `size_bytes` per cache."""
    return max(1, int(size_bytes // (KV_CONCAT_HEADS * KV_CONCAT_HEAD_DIM * get_dtype_bytes(dtype))))


def get_kv_concat_allocation_bytes(size_bytes: int, dtype: str) -> float:
    """Bytes of each tensor a 'kv_concat' point allocates: the cache and its new position."""
    return (get_kv_concat_positions(size_bytes, dtype) + 1) * KV_CONCAT_HEADS * KV_CONCAT_HEAD_DIM * get_dtype_bytes(dtype)


def get_kv_concat_bytes(size_bytes: int, dtype: str) -> float:
    """The bytes one 'kv_concat' call moves as `ops.implementation_ops` counts them: the cached keys and values read
    and written (the new position's write is the reference's `kv_cache_write`)."""
    positions = get_kv_concat_positions(size_bytes, dtype)
    return 2.0 * 2.0 * positions * KV_CONCAT_HEADS * KV_CONCAT_HEAD_DIM * get_dtype_bytes(dtype)

#: small weight shapes timed with their weights warm in the last-level cache, vs M (`WarmLinearKey`): a small model
#: (a draft, or the tiny pair of `acceptance validate`) keeps its weights cached between steps, where a GEMM's time
#: grows with M at the small-M compute rate instead of hiding behind weight streaming as in the cold tables (a
#: 256 x 512 fp32 linear, cache-warm, on the 2-core AMD EPYC: 16 us at M = 1, 52 us at M = 16; the cold-table price
#: grew 1.4x over the same rows). None is a shape of the validation models.
WARM_LINEAR_SHAPES = tuple(WeightShape(k, n) for k, n in ((128, 128), (128, 512), (640, 160), (384, 384)))
WARM_M_GRID = (1, 2, 4, 8, 16, 32, 64, 128)
WARM_WORKING_SET_BYTES = int(8 * MIB)  # above a core's L2, inside the last-level cache

#: the weight of the cache-reuse benchmark: 16 MB in fp32, 8 MB in bf16
CACHE_SHAPE = WeightShape(2048, 2048)
CACHE_WORKING_SETS = tuple(int(x * MIB) for x in (16, 32, 64, 96, 128, 192, 256, 384))
QUICK_CACHE_WORKING_SETS = tuple(int(x * MIB) for x in (16, 64, 128, 256))
#: a cache-reuse point times whole passes over its working set (`benchmarks.cache`): at least this many, and GEMVs
MIN_CACHE_PASSES, MIN_CACHE_CALLS = 3, 10
#: timings of the cache-reuse curve per run, each point a job in the shuffled order: the curve pools their calls,
#: `speedup_sigma` is their spread (64-256 MiB moved between runs on the Xeon VM: docs/calibration.md s. 5)
CACHE_REPEATS = 3


def get_cache_passes(copies: int) -> int:
    """The passes over a working set of `copies` weights that one cache-reuse point times at least."""
    return max(MIN_CACHE_PASSES, -(-MIN_CACHE_CALLS // copies))

#: whole decoders timed by calibrate. The tiny ones measure dispatch; the mid-size ones (generic shapes, none a
#: hold-out shape) how much slower ops run inside a forward pass, and what a layer costs there beyond its ops. The
#: mid-size ones span weight working sets of about 25-680 MB in fp32 (half in bf16).
DECODER_SPECS = {
    "overhead-2l": DecoderShape(64, 4, 2, 128, 2, 256),
    "overhead-8l": DecoderShape(64, 4, 2, 128, 8, 256),
    "block-384": DecoderShape(384, 6, 2, 1024, 2, 8192),
    "block-768": DecoderShape(768, 12, 4, 2048, 4, 8192),
    "block-1536": DecoderShape(1536, 24, 8, 4096, 2, 8192),
    "block-2048": DecoderShape(2048, 16, 4, 5632, 3, 8192),
    # block-768's shapes, 16 layers deep: 0.45 GB of fp32 weights, cold where block-768 (0.15 GB) sits on the cache
    # curve, so narrow layers are in the fit of the in-model per-layer cost (`fit_profile.fit_overheads`)
    "block-768-16l": DecoderShape(768, 12, 4, 2048, 16, 8192),
}
OVERHEAD_MODELS = ("overhead-2l", "overhead-8l")
OVERHEAD_TOKENS = (StepTokens(1, 1), StepTokens(1, 4))
BLOCK_MODELS = ("block-384", "block-768", "block-1536", "block-2048", "block-768-16l")
#: builds of each mid-size decoder, fitted by their median: its time moves with where its weights land (block-1536,
#: batch 1, six builds on the 2-core Intel Xeon VM: 10.3-10.8 ms in one, 11.4-12.5 in five; docs/calibration.md s. 5)
DECODER_BUILDS = 3
#: tokens already cached when a whole decoder is timed
DECODER_CONTEXT = 256
#: linear points with M up to here are always measured: CPU kernels saw-tooth at small M, so they are not extrapolated
ALWAYS_MEASURED_M = 16
#: attention configurations whose K and V caches exceed this many bytes are skipped (device memory, run time)
MAX_KV_BYTES = 1.5e9


def synthetic_spec(name, hidden, heads, kv_heads, intermediate, layers=1, vocab=4096, head_dim=None) -> ModelSpec:
    """A llama-style ModelSpec of the given dimensions (the shapes calibrate times, priced by `rooflinesim.ops`)."""
    return ModelSpec(schema_version=1, name=name, architecture="llama", num_layers=layers, hidden_size=hidden,
                     num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                     intermediate_size=intermediate, vocab_size=vocab, max_context_tokens=8192)


def get_decoder_spec(name: str) -> ModelSpec:
    shape = DECODER_SPECS[name]
    return synthetic_spec(name, shape.hidden, shape.heads, shape.kv_heads, shape.intermediate, layers=shape.layers,
                          vocab=shape.vocab)


def _linear_weight_shapes(spec: ModelSpec) -> set[tuple[int, int]]:
    ops = get_step_ops(spec, Workload(batch=1, context_tokens=1), 1)
    return {(int(op.dims["k"]), int(op.dims["n"])) for op in ops if op.kind == "linear"}


def get_calibrated_shapes(shapes=LINEAR_SHAPES) -> set[tuple[int, int]]:
    """Every weight shape a calibration may time: the listed F.linear shapes and those of the timed decoders."""
    calibrated = {tuple(shape) for shape in shapes} | {tuple(shape) for shape in WARM_LINEAR_SHAPES}
    for name in DECODER_SPECS:
        calibrated |= _linear_weight_shapes(get_decoder_spec(name))
    return calibrated


def get_linear_weight_shapes(spec: ModelSpec) -> set[tuple[int, int]]:
    """The (in_features, out_features) of every linear of a model."""
    return _linear_weight_shapes(spec)


def get_served_shapes(specs) -> tuple[WeightShape, ...]:
    """The distinct linear weight shapes of the models a profile is calibrated for (`calibrate --shapes-of`)."""
    shapes = set()
    for spec in specs:
        shapes |= _linear_weight_shapes(spec)
    return tuple(WeightShape(k, n) for k, n in sorted(shapes))


def drop_oversized_served_shapes(plan: "Plan", dtype: str) -> tuple["Plan", tuple[WeightShape, ...]]:
    """The plan without the served shapes whose weights do not fit twice in its cold pool (the linear benchmark
    rotates at least two copies), and those shapes: they are priced from the generic tables, as before."""
    size = get_dtype_bytes(dtype)
    fits = tuple(s for s in plan.served_shapes if 2 * s.in_features * s.out_features * size <= plan.rotate_bytes)
    dropped = tuple(s for s in plan.served_shapes if s not in fits)
    return (replace(plan, served_shapes=fits) if dropped else plan), dropped


def _held_out_shapes(models=()) -> set[tuple[int, int]]:
    """The weight shapes of the named hold-out models and of any `models` given."""
    from ...specs.registry import load_model

    return set(get_served_shapes([load_model(name) for name in HOLD_OUT_MODELS] + list(models)))


def get_profile_hold_out_clash(hw, models=()) -> list[tuple[int, int]]:
    """The weight shapes of the hold-out models (the named ones and `models`) that a measured profile has tables
    for: a profile calibrated with `--shapes-of` one of them cannot measure how its tables transfer to them."""
    tabled = {(t.in_features, t.out_features) for prof in hw.measured.dtypes.values() for t in prof.linear}
    return sorted(_held_out_shapes(models) & tabled)


def check_hold_out(shapes=LINEAR_SHAPES, models=()) -> None:
    """Raise if a calibrated weight shape (listed, or of a timed decoder) equals a weight shape of the hold-out
    models (the named ones and any `models` given, e.g. validate's randomised family)."""
    clash = _held_out_shapes(models).intersection(get_calibrated_shapes(shapes))
    if clash:
        raise AssertionError(f"calibration shapes {sorted(clash)} are hold-out shapes")


@dataclass(frozen=True)
class AttentionGrid:
    head_configs: tuple[AttentionHeads, ...]
    batches: tuple[int, ...]
    contexts: tuple[int, ...]  # tokens cached
    query_tokens: tuple[int, ...]  # new tokens per sequence: 1 = decode, > 1 = verify


@dataclass(frozen=True)
class Plan:
    """Everything one calibration run measures, and how long it times each configuration."""

    quick: bool
    dtypes: tuple[str, ...]
    linear_shapes: tuple[WeightShape, ...]
    m_grid: tuple[int, ...]
    passes: int  # interleaved passes over the shuffled configurations
    min_calls: int
    min_time_s: float
    bandwidth_bytes: int  # working set of the copy benchmark (B)
    rotate_bytes: int  # the cold-weight pool (B), far above the last-level cache
    max_call_flops: float  # F.linear points above this (and M > 16) are skipped: extrapolated as compute-bound
    attention: AttentionGrid
    elementwise_tokens: tuple[int, ...]
    block_models: tuple[str, ...]  # mid-size decoders timed for the in-model scale
    block_tokens: tuple[StepTokens, ...]  # their (batch, new tokens)
    cache_working_sets: tuple[int, ...]  # bytes, for the cache-reuse curve
    level: str = "full"  # the name of the ladder rung this plan is (see `calibrate.fitting.budget.LEVELS`)
    elementwise_specs: tuple[LayerShape, ...] = ELEMENTWISE_SPECS
    small_m_extra_passes: int = 0  # extra interleaved passes over the linear points with M <= ALWAYS_MEASURED_M
    # cache-warm small shapes (full plans only: in the 22 s of --quick they displaced configurations the fits need,
    # and the quick profile validated at 10-26 % median with them against 7-10 % without)
    warm_shapes: tuple[WeightShape, ...] = WARM_LINEAR_SHAPES
    # the weight shapes of the models the profile is for (`calibrate --shapes-of`), timed over the same M grid as
    # the generic shapes and priced from their own tables (timing.linear_tables): none of them is a hold-out then
    served_shapes: tuple[WeightShape, ...] = ()
    kv_concat_bytes: tuple[int, ...] = KV_CONCAT_BYTES  # the concatenating-cache sizes timed (`ImplementationKey`)
    # the tiny decoders' shapes, at OVERHEAD_M_GRID; priced from their own tables only (OVERHEAD_LINEAR_SHAPES)
    overhead_shapes: tuple[WeightShape, ...] = OVERHEAD_LINEAR_SHAPES
    decoder_builds: int = DECODER_BUILDS  # fresh builds of each mid-size decoder, fitted by their median
    cache_repeats: int = CACHE_REPEATS  # timings of the cache-reuse curve, shuffled among the other jobs

    @property
    def all_linear_shapes(self) -> tuple[WeightShape, ...]:
        """The generic shapes, then the served ones not already among them."""
        return self.linear_shapes + tuple(s for s in self.served_shapes if s not in self.linear_shapes)

    @classmethod
    def make(cls, quick: bool, dtypes, device: Device, tiny: bool = False) -> "Plan":
        if tiny:  # the CI smoke test: a few seconds, not a usable profile
            return cls(
                quick=True, dtypes=dtypes, level="tiny",
                linear_shapes=(WeightShape(384, 384), WeightShape(1536, 1536), WeightShape(384, 24576)),
                m_grid=(1, 4, 16, 64), passes=1, min_calls=2, min_time_s=0.0,
                bandwidth_bytes=64 * MIB, rotate_bytes=128 * MIB, max_call_flops=1e9,
                attention=AttentionGrid((AttentionHeads(12, 3, 64),), (1, 4), (96, 400), (1, 5)),
                elementwise_tokens=(1, 40), block_models=("block-384", "block-1536"),
                block_tokens=(StepTokens(1, 1),), cache_working_sets=(int(16 * MIB),), warm_shapes=(),
                kv_concat_bytes=TINY_KV_CONCAT_BYTES, decoder_builds=1, cache_repeats=1)
        if quick:
            return cls(
                quick=True, dtypes=dtypes, level="quick", linear_shapes=QUICK_LINEAR_SHAPES, m_grid=QUICK_M_GRID, passes=1,
                min_calls=3, min_time_s=0.004, bandwidth_bytes=256 * MIB, rotate_bytes=512 * MIB,
                max_call_flops=1.5e9 if not device.is_cuda else 5e11,
                attention=AttentionGrid(QUICK_ATTENTION_HEADS, QUICK_ATTENTION_BATCH, QUICK_ATTENTION_CONTEXT,
                                        QUICK_ATTENTION_Q),
                elementwise_tokens=(1, 40, 256), block_models=("block-768", "block-1536", "block-2048"),
                block_tokens=(StepTokens(1, 1), StepTokens(8, 1)), cache_working_sets=QUICK_CACHE_WORKING_SETS,
                warm_shapes=(), kv_concat_bytes=QUICK_KV_CONCAT_BYTES)
        return cls(
            quick=False, dtypes=dtypes, linear_shapes=LINEAR_SHAPES, m_grid=M_GRID, passes=2, min_calls=5,
            min_time_s=0.03, bandwidth_bytes=GIB, rotate_bytes=GIB,
            max_call_flops=2e10 if not device.is_cuda else 5e12,
            attention=AttentionGrid(ATTENTION_HEADS, ATTENTION_BATCH, ATTENTION_CONTEXT, ATTENTION_Q),
            elementwise_tokens=ELEMENTWISE_TOKENS, block_models=BLOCK_MODELS,
            block_tokens=(StepTokens(1, 1), StepTokens(4, 1), StepTokens(16, 1), StepTokens(1, 5)),
            cache_working_sets=CACHE_WORKING_SETS)

    # --- what the plan measures, as keys (the benchmarks time exactly these; the budget planner prices them) ---

    def linear_keys(self) -> list[LinearKey]:
        """One key per (weight shape, M); points above the FLOP budget per call (and M > ALWAYS_MEASURED_M) are
        skipped: extrapolated as compute-bound."""
        return ([LinearKey(k, n, m) for k, n in self.all_linear_shapes for m in self.m_grid
                 if not (2.0 * m * k * n > self.max_call_flops and m > ALWAYS_MEASURED_M)]
                + [LinearKey(k, n, m) for k, n in self.overhead_shapes for m in OVERHEAD_M_GRID])

    def attention_keys(self, dtype: str) -> list[AttentionKey]:
        """Masked SDPA configurations whose K and V caches stay under MAX_KV_BYTES."""
        g, size = self.attention, get_dtype_bytes(dtype)
        return [AttentionKey(h.heads, h.kv_heads, h.head_dim, b, s, q) for h in g.head_configs for b in g.batches
                for s in g.contexts for q in g.query_tokens
                if b * s * h.kv_heads * h.head_dim * 2 * size <= MAX_KV_BYTES]

    def elementwise_keys(self) -> list[ElementwiseKey]:
        return [ElementwiseKey(family, layer.hidden, layer.heads, layer.kv_heads, layer.intermediate, tokens)
                for layer in self.elementwise_specs for tokens in self.elementwise_tokens
                for family in ELEMENTWISE_FAMILIES]

    def decoder_keys(self) -> list[DecoderKey]:
        """The tiny decoders (dispatch overhead) always, then the mid-size ones (in-model scale)."""
        return ([DecoderKey(name, t.batch, t.new_tokens) for name in OVERHEAD_MODELS for t in OVERHEAD_TOKENS]
                + [DecoderKey(name, t.batch, t.new_tokens, build) for build in range(self.decoder_builds)
                   for name in self.block_models for t in self.block_tokens])

    def cache_keys(self) -> list[CacheKey]:
        """One per working set below the pool, per repeat, and the whole pool (the cold reference) once, last."""
        sizes = [s for s in self.cache_working_sets if s < self.rotate_bytes]
        return [CacheKey(int(size), r) for r in range(self.cache_repeats) for size in sizes] + [
            CacheKey(int(self.rotate_bytes))]

    def warm_linear_keys(self) -> list[WarmLinearKey]:
        return [WarmLinearKey(k, n, m) for k, n in self.warm_shapes for m in WARM_M_GRID]

    def sampler_keys(self) -> list[SamplerKey]:
        return [SamplerKey(*point) for point in SAMPLER_POINTS]

    def implementation_keys(self) -> list[ImplementationKey]:
        return ([ImplementationKey("kv_concat", size) for size in self.kv_concat_bytes]
                + [ImplementationKey("dispatch", calls) for calls in DISPATCH_CALLS])

    def keys(self, dtype: str) -> list[MeasurementKey]:
        """Every configuration this plan times for one dtype, family by family."""
        return [*self.linear_keys(), *self.attention_keys(dtype), *self.elementwise_keys(), *self.decoder_keys(),
                *self.cache_keys(), *self.warm_linear_keys(), *self.sampler_keys(), *self.implementation_keys()]
