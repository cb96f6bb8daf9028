"""The schema of a measured profile (written by `rooflinesim calibrate`, read by rooflinesim.specs.profiles): the
`measured` block of a HardwareSpec.

Every number is finite and every fitted coefficient non-negative, so a hand-edited or corrupted profile cannot
price a step at a negative or NaN time; attention fits are keyed so that the timing model always finds a decode
and a multi-token fit.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal, Optional

from pydantic import Field, field_validator, model_validator

from .base import FloatTuple, IntTuple, SpecModel, StrTuple
from ..units import MIB, normalize_dtype

#: Elementwise op families `rooflinesim calibrate` measures (the keys of DtypeProfile.elementwise).
ELEMENTWISE_FAMILIES = ("norm", "rope", "mlp_act", "residual", "kv_cache_write", "embedding", "sample", "accept_rule")
#: DtypeProfile.attention keys: one query token per sequence (decode) or several (verify), per head_dim.
ATTENTION_FIT_KINDS = ("decode", "multi")
#: The machine-speed anchors `calibrate` times and every measured validation re-times (rooflinesim.calibrate.measure.anchor).
ANCHOR_NAMES = ("gemm", "forward", "stream")
_ATTENTION_KEY = re.compile(r"^(decode|multi)_d([1-9][0-9]*)$")


def parse_attention_key(key: str) -> tuple[str, int]:
    """'decode_d128' -> ('decode', 128); raises ValueError for any other form."""
    match = _ATTENTION_KEY.match(key)
    if not match:
        raise ValueError(f"attention key {key!r} is not of the form '<decode|multi>_d<head_dim>', e.g. 'decode_d128'")
    return match.group(1), int(match.group(2))


def check_anchor_s(value):
    """A dict of anchor name -> time (s): known names, finite positive times (None passes)."""
    if value is None:
        return value
    unknown = sorted(set(value) - set(ANCHOR_NAMES))
    if unknown:
        raise ValueError(f"unknown anchor(s) {', '.join(unknown)}; known: {', '.join(ANCHOR_NAMES)}")
    if not all(math.isfinite(v) and v > 0 for v in value.values()):
        raise ValueError("anchor times must be finite and positive (s)")
    return value


class ModelTerms(SpecModel):
    """One model's own terms fitted on top of the device profile (`calibrate --model`): its steps measured at a few
    (batch, context, new tokens) points are priced as scale x (the device profile's price, with the implementation
    profile `priced_with`) + step_overhead_s + kv_cache_s_per_byte x (the KV-cache bytes the step's attention reads).
    They carry what the model and its implementation do that the device profile's prices do not."""

    source: str = Field(description="the config.json, checkpoint folder or model name that was timed")
    implementation: str = Field(description="the code that ran it: hf (transformers) or reference (calibrate/model.py)")
    priced_with: str = Field(
        "reference", description="the implementation profile (`implementations/`) whose prices the terms sit on: the "
                                 "one of the code that ran it since 2026-12-03; terms fitted before then sit on the "
                                 "reference decoder's prices")
    scale: float = Field(ge=0.2, le=5.0)
    step_overhead_s: float = Field(ge=0)
    kv_cache_s_per_byte: float = Field(
        0.0, ge=0, description="time per byte of KV cache the step's attention reads, on top of the device profile's "
                               "price: an implementation that copies its cache every step (transformers' "
                               "DynamicCache concatenates) pays for the whole cache, not one token's write")
    batches: IntTuple
    contexts: IntTuple
    new_tokens: IntTuple
    median_abs_rel_residual: float = Field(ge=0, description="on the timed points")
    check_median_abs_rel_error: Optional[float] = Field(
        None, ge=0, description="on the points it did not time, measured right after the fit")
    anchor_s: Optional[dict[str, float]] = Field(
        None, description="the machine-speed anchors (rooflinesim.calibrate.measure.anchor) timed before and after "
                          "the model's points, averaged (s): the machine's state the terms absorbed; `validate "
                          "--family model` compares with these rather than the profile's")

    @field_validator("anchor_s")
    @classmethod
    def _check_anchor(cls, value):
        return check_anchor_s(value)


class Provenance(SpecModel):
    """Where and how a profile was measured."""

    device_kind: Literal["cpu", "cuda"]
    device_name: str
    host_cpu: str
    host_isa: Optional[str] = Field(
        None, description="the host's widest x86 vector extension (specs.profiles.get_host_cpu_isa); absent in "
                          "profiles measured before it was recorded")
    torch_version: str
    dtypes: StrTuple
    threads: int = Field(gt=0)
    date: str
    command: str
    duration_s: float = Field(ge=0)
    quick: bool
    drift: float = Field(description="max relative change of the reference measurement (start/middle/end)")
    drift_flagged: bool
    reference_s: FloatTuple = ()
    notes: str = ""
    budget_s: Optional[float] = Field(None, gt=0, description="the time budget the run was sized to (s)")
    planned_s: Optional[float] = Field(None, ge=0, description="the run's duration estimated before it started (s)")
    shapes_of: StrTuple = Field(
        (), description="models whose own linear weight shapes were calibrated too (`calibrate --shapes-of`): the "
                        "profile prices them from their own tables, and is no hold-out for them")
    model_terms: Optional[dict[str, dict[str, ModelTerms]]] = Field(
        None, description="model name -> dtype -> the model's own fitted terms (`calibrate --model`)")
    anchor_s: Optional[dict[str, float]] = Field(
        None, description="the machine-speed anchors (rooflinesim.calibrate.measure.anchor) timed during the run (s); "
                          "absent in profiles measured before they existed")

    @field_validator("anchor_s")
    @classmethod
    def _check_anchor(cls, value):
        return check_anchor_s(value)


class LinearTable(SpecModel):
    """Measured time of one F.linear(x[M, K], W[N, K]) call vs M, with cold (rotated) weights."""

    in_features: int = Field(gt=0)
    out_features: int = Field(gt=0)
    m: IntTuple
    time_s: FloatTuple
    spread: FloatTuple
    exact_only: bool = Field(False, description="priced for its own weight shape only, never blended into other "
                                                "shapes' prices nor in the roofline fit (the tiny decoders' shapes)")

    @model_validator(mode="after")
    def _check(self) -> "LinearTable":
        if not (len(self.m) == len(self.time_s) == len(self.spread)) or len(self.m) < 1:
            raise ValueError("m, time_s and spread must have the same, non-zero length")
        if any(t <= 0 for t in self.time_s) or list(self.m) != sorted(set(self.m)) or self.m[0] < 1:
            raise ValueError("times must be positive and m positive and strictly increasing")
        if any(s < 0 for s in self.spread):
            raise ValueError("spreads must be non-negative")
        return self


class AffineFit(SpecModel):
    """time = overhead_s + sum(coefficient x feature), features named by the keys (e.g. kv_bytes, flops): every
    coefficient non-negative, as the fit constrains them (a negative one would give negative times)."""

    overhead_s: float = Field(ge=0)
    coefficients: dict[str, Annotated[float, Field(ge=0)]]
    median_abs_rel_residual: float = Field(ge=0)
    points: int = Field(ge=0)


class CacheReuse(SpecModel):
    """A GEMV whose weights rotate over a working set of `working_set_bytes` runs `speedup` times faster than over
    the cold pool (>= 1: the set stays in the caches between calls); interpolated in log bytes, clamped. Fully cached
    weights stream at `warm_bandwidth_bytes_per_s` whatever their shape."""

    working_set_bytes: FloatTuple
    speedup: FloatTuple
    warm_bandwidth_bytes_per_s: float = Field(gt=0, description="weight streaming at the smallest working set")
    speedup_sigma: FloatTuple = Field(
        (), description="1-sigma of each point's speedup between the run's repeated timings of the curve (`plan."
                        "CACHE_REPEATS`, spread over the run; over runs too in a merged profile): how far the curve "
                        "itself moves, which the intervals of steps whose weights sit on it carry (`timing.measured`); "
                        "empty: timed once, or measured before it was kept")

    @model_validator(mode="after")
    def _check(self) -> "CacheReuse":
        if len(self.working_set_bytes) != len(self.speedup) or not self.speedup:
            raise ValueError("working_set_bytes and speedup must have the same, non-zero length")
        if self.speedup_sigma and (len(self.speedup_sigma) != len(self.speedup)
                                   or any(not 0.0 <= x <= 20.0 for x in self.speedup_sigma)):
            raise ValueError("speedup_sigma must be empty or one value in [0, 20] per working set")
        if any(b <= 0 for b in self.working_set_bytes) or list(self.working_set_bytes) != sorted(set(self.working_set_bytes)):
            raise ValueError("working_set_bytes must be positive and strictly increasing")
        if any(not 1.0 <= x <= 20.0 for x in self.speedup):
            raise ValueError("cache speedups must lie in [1, 20]")
        return self

    def describe(self) -> str:
        """One line for `calibrate`'s summary: the speed-up at the smallest working set, the first working set read
        cold (1.0x), and the largest spread between the run's timings of the curve (where it was timed again)."""
        def mib(size: float) -> str:
            return f"{size / MIB:.0f} MiB"

        sizes, speedup, sigma = self.working_set_bytes, self.speedup, self.speedup_sigma
        cold = next((size for size, x in zip(sizes, speedup) if x <= 1.0), None)
        line = f"{speedup[0]:.2f}x at {mib(sizes[0])}, " + (
            f"cold from {mib(cold)}" if cold is not None else f"{speedup[-1]:.2f}x at {mib(sizes[-1])}")
        if sigma:
            i = max(range(len(sigma)), key=lambda j: sigma[j])
            line += f", its timings +-{sigma[i]:.2f} (1 sigma) at most, at {mib(sizes[i])}"
        return line


#: glibc's largest mmap threshold on 64-bit Linux (malloc.c DEFAULT_MMAP_THRESHOLD_MAX), which a process's dynamic
#: threshold settles at once it has freed such chunks: an allocation from this size up is mapped afresh
FRESH_ALLOCATION_BYTES = 32 * MIB
#: a point from the threshold up that cost less than this many times the largest point below it per byte was served
#: warm, in full or in part, by free heap blocks the benchmark process had left, which a model's step does not find.
#: Over the 39 fp32 profiles of the 2-core Intel Xeon VM of 2026-12-03, a fresh point cost 0.99-1.77x the largest
#: heap point per byte (warm or partly warm: 40 MiB at 27 GB/s beside 32 GB/s at 24 MiB), 2.73-3.89x (paid, the
#: 8-10 GB/s transformers' cache paid) or 8-21x (a slow fault state); at 1.5 a partly warm 48 MiB point (1.58x, 19
#: GB/s) set the rate of a full profile, which priced hf-llama-94m at batch 16 and context 4096 44 % low
WARM_SERVED_FACTOR = 2.2
#: what fresh pages cost per byte, in units of the largest heap point's cost, where no point from the threshold up
#: paid for them: the median of the fastest paid point's ratio over the 155 profiles with one, of the 2-core Intel
#: Xeon and AMD EPYC VMs of 2026-12-01..03 (p10-p90 2.9-4.9; Xeon fp32 3.2, bf16 3.1, AMD EPYC fp32 4.3)
FRESH_PAGE_FACTOR_PRIOR = 3.2


class CopyTable(SpecModel):
    """One layer's KV-cache concatenation (keys and values copied into new tensors) timed vs the size of each new
    tensor. The cost per byte depends on where the allocator finds the memory: a reused heap block, or, from glibc's
    mmap threshold up (at most 32 MiB on 64-bit Linux), fresh pages the kernel faults in and zeroes. Below the
    threshold it is priced per byte interpolated in log size between the points below it, clamped at their ends;
    from the threshold up at one cost per byte (a copy and a page fault per page, both in proportion to the size):
    that of the fastest point there, leaving out points served warm (WARM_SERVED_FACTOR; when every one was,
    FRESH_PAGE_FACTOR_PRIOR times the heap's largest point's cost). The fastest, because the
    VM's page faults have a slow state that comes and goes (48 and 64 MiB at 2.9-3.5 GB/s, 96 MiB at 9.4 GB/s in one
    full calibration on the 2-core Intel Xeon VM), and a step is measured by its undisturbed calls
    (`Timing.estimate_s`), in which transformers' cache paid 8-10 GB/s. A side with no point takes the other's."""

    allocation_bytes: FloatTuple
    bytes_moved: FloatTuple
    time_s: FloatTuple
    spread: FloatTuple

    @model_validator(mode="after")
    def _check(self) -> "CopyTable":
        n = len(self.allocation_bytes)
        if n < 1 or not (n == len(self.bytes_moved) == len(self.time_s) == len(self.spread)):
            raise ValueError("allocation_bytes, bytes_moved, time_s and spread must have the same, non-zero length")
        if list(self.allocation_bytes) != sorted(set(self.allocation_bytes)) or self.allocation_bytes[0] <= 0:
            raise ValueError("allocation_bytes must be positive and strictly increasing")
        if any(x <= 0 for x in (*self.bytes_moved, *self.time_s)) or any(s < 0 for s in self.spread):
            raise ValueError("bytes and times must be positive, spreads non-negative")
        return self

    def get_fresh_seconds_per_byte(self) -> float | None:
        """The cost per byte from the mmap threshold up (None: no point there)."""
        sizes = self.allocation_bytes
        per_byte = [t / b for t, b in zip(self.time_s, self.bytes_moved)]
        fresh = [r for size, r in zip(sizes, per_byte) if size >= FRESH_ALLOCATION_BYTES]
        if not fresh:
            return None
        heap = [r for size, r in zip(sizes, per_byte) if size < FRESH_ALLOCATION_BYTES]
        paid = [r for r in fresh if not heap or r >= WARM_SERVED_FACTOR * heap[-1]]
        # none paid: the run never saw fresh pages' cost (the VM kept them backed, or free blocks served them; its
        # re-time read warm too), which a step's cache does pay. One full calibration whose 48-96 MiB points all
        # read 26 GB/s priced hf-qwen2moe-61m at batch 16 and 2048-4096 tokens 57-58 % low at that warm rate
        return min(paid) if paid else FRESH_PAGE_FACTOR_PRIOR * heap[-1]

    def get_seconds_per_byte(self, allocation_bytes):
        import numpy as np

        sizes = np.asarray(self.allocation_bytes)
        allocation = np.maximum(np.asarray(allocation_bytes, dtype=float), 1.0)
        heap = sizes < FRESH_ALLOCATION_BYTES
        fresh_rate = self.get_fresh_seconds_per_byte()
        if not heap.any():
            return np.full_like(allocation, fresh_rate)
        rate = np.log(np.asarray(self.time_s)[heap] / np.asarray(self.bytes_moved)[heap])
        heap_rate = np.exp(np.interp(np.log(allocation), np.log(sizes[heap]), rate))
        # interpolating across the threshold would price a reused heap block at part of the fresh pages' cost
        return heap_rate if fresh_rate is None else np.where(allocation >= FRESH_ALLOCATION_BYTES, fresh_rate,
                                                             heap_rate)


class DecoderStep(SpecModel):
    """One whole synthetic decoder step as `calibrate` timed it (the median over its fresh builds): a row the in-model
    terms were fitted on, kept so they can be refitted without measuring (`fit_profile.refit_overheads`)."""

    model: str = Field(description="the calibration decoder (`calibrate.fitting.plan.DECODER_SPECS`)")
    batch: int = Field(ge=1)
    new_tokens: int = Field(ge=1, description="tokens per sequence in the step (1: decode; more: verify)")
    time_s: float = Field(gt=0)


class DtypeProfile(SpecModel):
    """Everything measured for one compute dtype."""

    gemv_bandwidth_bytes_per_s: float = Field(gt=0)
    copy_bandwidth_bytes_per_s: float = Field(gt=0)
    peak_flops_per_s: float = Field(gt=0)
    linear_overhead_s: float = Field(ge=0)
    linear: tuple[LinearTable, ...] = Field(strict=False)
    linear_shape_alignment: int = Field(
        0, ge=0, description="elements: in / out features that are a multiple of it and those that are not run "
                             "different kernels, so an uncalibrated shape is priced from calibrated shapes of its own "
                             "class (`timing.linear_tables.choose_shape_alignment`); 0: by size alone, as before it "
                             "existed")
    attention: dict[str, AffineFit] = Field(
        description="masked SDPA, keyed '<decode|multi>_d<head_dim>': one query token (decode) or several (verify)"
    )
    elementwise: dict[str, AffineFit] = Field(description=f"per op family: {', '.join(ELEMENTWISE_FAMILIES)}")
    layer_overhead_s: float = Field(ge=0, description="dispatch left per decoder layer after the per-op times")
    step_overhead_s: float = Field(ge=0, description="dispatch left per forward step (mask, embedding glue)")
    cache_reuse: Optional[CacheReuse] = Field(
        None, description="weight streaming vs the working set the weights rotate over (the tables are cold)")
    warm_linear: tuple[LinearTable, ...] = Field(
        (), strict=False,
        description="F.linear time vs M for a few small shapes with their weights warm in the last-level cache: how a "
                    "cached GEMM's time grows with M (empty in profiles measured before it existed)")
    in_model_scale: float = Field(
        1.0, ge=0.2, le=5.0,
        description="whole synthetic decoders' measured time / the sum of their per-op times measured alone: ops run "
                    "slower inside a forward pass than in a loop of their own",
    )
    in_model_layer_overhead_s: float = Field(
        0.0, ge=0,
        description="what a layer of a real model costs beyond its ops timed alone and the tiny decoders' dispatch "
                    "(rooflinesim.calibrate.fitting.fit_profile.fit_overheads); 0 in profiles measured before it existed")
    dispatch_s: Optional[float] = Field(
        None, ge=0, le=1e-3,
        description="one aten call's dispatch cost (s): a loop of tiny in-place ops timed per call "
                    "(calibrate.measure.benchmarks.implementation); prices the extra dispatches of an implementation "
                    "(`ops.implementation_ops`); absent in profiles measured before it existed")
    kv_concat: Optional[CopyTable] = Field(
        None, description="a KV cache grown by concatenation, timed vs the size of the tensors it allocates "
                          "(calibrate.measure.benchmarks.implementation); absent in profiles measured before it existed")
    decoder_steps: tuple[DecoderStep, ...] = Field(
        (), strict=False, description="the whole decoders the in-model terms were fitted on, as timed (all runs' of a "
                                      "merged profile; empty in profiles measured before they were kept)")
    residuals: dict[str, float] = Field(default_factory=dict)
    runs: Optional[int] = Field(None, ge=1, description="calibration runs pooled into this profile (`calibrate "
                                                       "--merge`); absent: one")

    @field_validator("attention")
    @classmethod
    def _attention_keys(cls, value: dict[str, AffineFit]) -> dict[str, AffineFit]:
        kinds = {parse_attention_key(key)[0] for key in value}
        missing = [kind for kind in ATTENTION_FIT_KINDS if kind not in kinds]
        if missing:
            raise ValueError(f"needs at least one {' and one '.join(repr(m + '_d<head_dim>') for m in missing)} fit "
                             f"(has {sorted(value) or 'none'})")
        return value

    @field_validator("elementwise")
    @classmethod
    def _elementwise_keys(cls, value: dict[str, AffineFit]) -> dict[str, AffineFit]:
        unknown = sorted(set(value) - set(ELEMENTWISE_FAMILIES))
        if unknown:
            raise ValueError(f"unknown op families {unknown}; known: {', '.join(ELEMENTWISE_FAMILIES)}")
        return value


class MeasuredProfile(SpecModel):
    schema_version: Literal[1] = 1
    profile_name: str
    base_hardware: str = Field(description="the shipped hardware spec this device corresponds to (warn if applied to another)")
    provenance: Provenance
    dtypes: dict[str, DtypeProfile]

    @field_validator("dtypes")
    @classmethod
    def _dtype_keys(cls, value: dict) -> dict:
        if not value:
            raise ValueError("a profile needs at least one measured dtype")
        return {normalize_dtype(k): v for k, v in value.items()}
