"""Step costs: per-op times summed into prefill / decode / verify(k + 1) steps; memory fit and max batch.

Everything is vectorised over the workload grid, so sweeps and the scalar `predict` share one implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .ops.op_cost import OpCost
from .ops.step_ops import get_activation_bytes, get_kv_cache_bytes, get_step_ops
from .timing import Z90, DatasheetTiming, OpTime, RelativeSigmas, TimingModel, get_op_family
from .timing.datasheet import get_ops_times
from .timing.engine import get_engine_ops_s, get_engine_step_s
from .specs.hardware import HardwareSpec
from .errors import InputError
from .specs.model import ModelSpec
from .specs.workload import Workload


@dataclass(frozen=True)
class StepCost:
    """One forward step: its ops, each op's expected and speed-of-light time, and the totals."""

    # the totals below are cached on first use (a summary reads each several times): treat them as read-only
    ops: list[OpCost]
    expected: list[OpTime]
    hw: HardwareSpec  # whose peaks price the speed-of-light `roofline`
    compute_dtype: str
    tokens: np.ndarray  # new tokens in the step (B x q)
    step_overhead_s: float  # the timing model's per-step dispatch
    sigmas: RelativeSigmas | None = None  # a measured model's relative errors; None: no interval (datasheet)
    #: what the engine adds to the step (`timing.engine`): kernel launches in its mode + the host time it waits for
    #: (0 under the ideal engine)
    engine_s: np.ndarray | float = 0.0
    #: how far (s, 1 sigma) the step moves with the measured cache-reuse curve (`TimingModel.get_cache_sigma_s`)
    cache_sigma_s: np.ndarray | float = 0.0

    @cached_property
    def roofline(self) -> list[OpTime]:
        """Each op's speed-of-light time (the datasheet peaks, no overhead), priced when first asked for: most steps
        the pricing runs need only their expected times."""
        sol = DatasheetTiming.speed_of_light(self.hw)
        return get_ops_times(sol, self.hw, self.ops, self.compute_dtype)

    @cached_property
    def step_time_s(self) -> np.ndarray:
        return sum(t.time_s for t in self.expected) + self.step_overhead_s + self.engine_s

    # --- the prediction interval ---------------------------------------------------------------------------------
    # An op's `count` instances (the same projection in every layer) are priced by the same table point or fit, so
    # their errors add linearly; different ops are priced by different points (another weight shape, another M) and
    # their errors add in quadrature (root-sum-square), each with its family's relative error; the shared term
    # (drift, the in-model scale) moves the whole step. A step's relative 1-sigma error is therefore
    #     sqrt(sum_op (T_op sigma_family(op))^2) / T  (+)  sigma_shared,
    # and its 90 % interval T exp(-/+ 1.645 sigma): log-symmetric, as the errors are ratios and times stay positive.

    @property
    def priced_time_s(self) -> dict[tuple[str, str], np.ndarray]:
        """Expected time of each op (all its instances), keyed by (family, op name): the units whose errors are
        independent (s). Where the cache-reuse curve moved between its timings, ("cache", "warmth") is the step's
        1-sigma move with it (its family's relative error is 1: `get_profile_sigmas`); it moves every linear of
        the step together."""
        parts = {(get_op_family(op), op.name): t.time_s for op, t in zip(self.ops, self.expected)}
        if np.any(self.cache_sigma_s):
            parts[("cache", "warmth")] = self.cache_sigma_s
        return parts

    @property
    def rel_sigma(self) -> np.ndarray | None:
        """The step time's relative 1-sigma error; None where the timing model has no interval."""
        if self.sigmas is None:
            return None
        return get_rel_sigma(self.priced_time_s, self.step_time_s, self.sigmas)

    @property
    def step_time_s_low(self) -> np.ndarray | None:
        """Lower end of the 90 % prediction interval (s); None without one."""
        return None if self.sigmas is None else self.step_time_s * np.exp(-Z90 * self.rel_sigma)

    @property
    def step_time_s_high(self) -> np.ndarray | None:
        """Upper end of the 90 % prediction interval (s); None without one."""
        return None if self.sigmas is None else self.step_time_s * np.exp(Z90 * self.rel_sigma)

    @cached_property
    def roofline_step_time_s(self) -> np.ndarray:
        return sum(t.time_s for t in self.roofline)

    def _total(self, attribute: str) -> np.ndarray:
        if self._point_ops:
            return self._point_totals[attribute]
        return sum(op.count * getattr(op, attribute) for op in self.ops)

    @cached_property
    def _point_ops(self) -> bool:
        """Whether every op's quantities are float64 scalars (one point: `ops.op_cost.make_op`)."""
        return all(type(op.flops) is np.float64 for op in self.ops)

    @cached_property
    def _point_totals(self) -> dict[str, np.float64]:
        """Every `_total` of a point in one pass over the ops: `sum`'s additions in its order (0 + the first op's
        term + the next ...) on Python floats, which are IEEE doubles as float64 is, kept as float64 at the end. An
        explicit loop, not `sum`, whose float fast path compensates the rounding from Python 3.12 on."""
        flops = weight = act_read = act_write = kv_read = kv_write = total = 0
        for op in self.ops:
            count = op.count
            flops += count * float(op.flops)
            weight += count * float(op.weight_bytes)
            act_read += count * float(op.act_read_bytes)
            act_write += count * float(op.act_write_bytes)
            kv_read += count * float(op.kv_read_bytes)
            kv_write += count * float(op.kv_write_bytes)
            total += count * float(op.bytes)
        return {"flops": np.float64(flops), "weight_bytes": np.float64(weight), "act_read_bytes": np.float64(act_read),
                "act_write_bytes": np.float64(act_write), "kv_read_bytes": np.float64(kv_read),
                "kv_write_bytes": np.float64(kv_write), "bytes": np.float64(total)}

    @cached_property
    def _point_times(self) -> bool:
        """Whether every op's expected time is a float64 scalar (one point priced by the batched datasheet)."""
        return all(type(t.time_s) is np.float64 and type(t.compute_bound) is np.bool_ for t in self.expected)

    @cached_property
    def flops(self) -> np.ndarray:
        return self._total("flops")

    @cached_property
    def bytes(self) -> np.ndarray:
        return self._total("bytes")

    @cached_property
    def weight_bytes(self) -> np.ndarray:
        return self._total("weight_bytes")

    @cached_property
    def kv_read_bytes(self) -> np.ndarray:
        return self._total("kv_read_bytes")

    @cached_property
    def kv_write_bytes(self) -> np.ndarray:
        return self._total("kv_write_bytes")

    @property
    def activation_bytes(self) -> np.ndarray:
        return self._total("act_read_bytes") + self._total("act_write_bytes")

    @property
    def arithmetic_intensity_flops_per_byte(self) -> np.ndarray:
        return self.flops / self.bytes

    @property
    def compute_time_s(self) -> np.ndarray:
        return sum(t.compute_time_s for t in self.expected)

    @property
    def memory_time_s(self) -> np.ndarray:
        return sum(t.memory_time_s for t in self.expected)

    @property
    def compute_bound_time_s(self) -> np.ndarray:
        """Expected time spent in compute-bound ops; the step is called compute-bound when this dominates."""
        if self._point_times:  # np.where's choice, without an array evaluation per op
            return sum(t.time_s if t.compute_bound else 0.0 for t in self.expected)
        return sum(np.where(t.compute_bound, t.time_s, 0.0) for t in self.expected)

    @property
    def compute_bound(self) -> np.ndarray:
        return self.compute_bound_time_s > 0.5 * sum(t.time_s for t in self.expected)

    @property
    def tokens_per_s(self) -> np.ndarray:
        return self.tokens / self.step_time_s


def get_rel_sigma(priced_time_s: dict[tuple[str, str], np.ndarray], total_s, sigmas: RelativeSigmas) -> np.ndarray:
    """Relative 1-sigma error of a time made of these independently priced parts ((family, name) -> s: one step's
    ops, or those of the k draft steps and the verify of a speculative step, where the same op of the same model
    is one part): sqrt(sum_part (T_part sigma_family)^2) / T (+) sigma_shared."""
    absolute = sum((sigmas.by_family.get(key[0], 0.0) * t) ** 2 for key, t in priced_time_s.items())
    return np.hypot(np.sqrt(absolute) / total_s, sigmas.shared)


def get_ratio_rel_sigma(num_parts: dict, num_s, den_parts: dict, den_s, sigmas: RelativeSigmas) -> np.ndarray:
    """Relative 1-sigma error of num / den (e.g. the speculative speedup E x T_decode / T_step). The shared term
    cancels; a part's fit error (the same weight shape in both) moves both by its share of each,
    d ln(ratio) = sum_part e_part (share_num - share_den); per-call noise is independent between the two and adds
    in quadrature."""
    keys = dict.fromkeys([*num_parts, *den_parts])  # an ordered union: a set's order follows the hash seed
    share_num = {key: num_parts.get(key, 0.0) / num_s for key in keys}
    share_den = {key: den_parts.get(key, 0.0) / den_s for key in keys}
    fit = sum((sigmas.fit(key[0]) * (share_num[key] - share_den[key])) ** 2 for key in keys)
    noise = sum(sigmas.noise_by_family.get(key[0], 0.0) ** 2 * (share_num[key] ** 2 + share_den[key] ** 2)
                for key in keys)
    return np.sqrt(fit + noise)


def get_step_cost(hw: HardwareSpec, model: ModelSpec, workload: Workload, new_tokens, timing: TimingModel | None = None,
                  context_tokens=None, batch=None, logits_for_all_tokens: bool = True) -> StepCost:
    """Cost of one forward step of `batch` sequences (default the workload's) adding `new_tokens` each on
    `context_tokens` (default the workload's) cached ones, in the workload's dtypes, attention mode, sharding and
    quantisation; arrays broadcast, so one call prices a grid. The workload's `sampling` adds the sampler over its
    logits; `timing` defaults to the spec's datasheet roofline.

    With tensor parallelism the ops are one device's share plus the collectives; all devices run in lockstep.
    """
    batch = workload.batch if batch is None else batch
    activation_dtype = workload.activation_dtype
    ops = get_step_ops(model, workload, new_tokens, batch=batch, context_tokens=context_tokens,
                       logits_for_all_tokens=logits_for_all_tokens)
    timing = (timing or DatasheetTiming.expected(hw)).for_step(ops)  # a measured model reads the cache working set
    if hasattr(timing, "for_model"):  # a profile with this model's own terms (`calibrate --model`)
        timing = timing.for_model(model)
    link_fraction = hw.efficiency.interconnect_fraction
    tokens = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float)
    expected = get_ops_times(timing, hw, ops, activation_dtype, link_fraction)
    step_overhead_s = timing.get_step_overhead_s(model.num_layers, activation_dtype)
    work_s = sum(t.time_s for t in expected) + step_overhead_s
    sigmas = timing.get_relative_sigmas(activation_dtype)
    return StepCost(
        ops=ops,
        expected=expected,
        hw=hw,
        compute_dtype=activation_dtype,
        tokens=tokens,
        step_overhead_s=step_overhead_s,
        sigmas=sigmas,
        engine_s=get_engine_step_s(timing, model.num_layers, batch, new_tokens, work_s),
        cache_sigma_s=0.0 if sigmas is None else timing.get_cache_sigma_s(expected, model.num_layers,
                                                                          activation_dtype),
    )


def get_ops_time_s(hw: HardwareSpec, ops: list[OpCost], activation_dtype: str, timing: TimingModel,
                   num_layers: int = 1, batch=1) -> np.ndarray:
    """Expected time of a bare op list (a draft head's) run as one forward of `num_layers` layers: its ops priced
    like a step's, plus the timing model's per-step dispatch overhead and the engine's launches (at `batch`)."""
    timing = timing.for_step(ops)
    link_fraction = hw.efficiency.interconnect_fraction
    total = sum((t.time_s for t in get_ops_times(timing, hw, ops, activation_dtype, link_fraction)), np.asarray(0.0))
    return (total + timing.get_step_overhead_s(num_layers, activation_dtype)
            + get_engine_ops_s(timing, ops, num_layers, batch))


@dataclass(frozen=True)
class MemoryFit:
    weight_bytes: float
    kv_cache_bytes: np.ndarray
    activation_bytes: np.ndarray
    capacity_bytes: float

    @property
    def total_bytes(self) -> np.ndarray:
        return self.weight_bytes + self.kv_cache_bytes + self.activation_bytes

    @property
    def fits_in_memory(self) -> np.ndarray:
        return self.total_bytes <= self.capacity_bytes


def get_memory_fit(hw: HardwareSpec, model: ModelSpec, workload: Workload, new_tokens=1, batch=None,
                   context_tokens=None) -> MemoryFit:
    """Per device: its share of the weights + KV cache for B x (S + q) positions + the step's activations, for
    `batch` and `context_tokens` (default the workload's) in the workload's dtypes, attention and sharding."""
    w, tp = workload, workload.tensor_parallel
    b = w.batch if batch is None else batch
    s = np.asarray(w.context_tokens if context_tokens is None else context_tokens, dtype=float)
    q = np.asarray(new_tokens, dtype=float)
    return MemoryFit(
        weight_bytes=model.get_weight_bytes(w.weight_dtype, w.quant_group_size) / tp,
        kv_cache_bytes=get_kv_cache_bytes(model, w, b, s + q),
        activation_bytes=get_activation_bytes(model, w, b, q, s),
        capacity_bytes=hw.memory_capacity_bytes,
    )


def check_tensor_parallel(model: ModelSpec, tp, hw: HardwareSpec | None = None) -> int:
    try:
        tp = int(tp)
    except (TypeError, ValueError) as exc:
        raise InputError(f"--tp must be a positive integer, got {tp!r}") from exc
    if tp <= 0:
        raise InputError(f"--tp must be a positive integer, got {tp}")
    if model.num_attention_heads % tp:
        raise InputError(f"--tp {tp} does not divide {model.name}'s {model.num_attention_heads} attention heads")
    if tp > 1 and hw is not None and hw.interconnect is None:
        raise InputError(f"{hw.name} has no interconnect in its spec: --tp {tp} cannot be modelled")
    return tp
