"""An engine's per-iteration costs on top of a timing model (`specs.engine.EngineSpec`).

`with_engine(timing, engine)` wraps a timing model so that every step priced through it (prefill, decode, verify,
draft; predict, sweep, serve and the charts all price steps through `step.get_step_cost`) also pays:

- launch: kernels x the per-kernel cost of the step's mode. A decode-like step (batch <= graph_max_batch, query
  <= graph_max_query_tokens, batch x query <= graph_max_tokens) replays a captured CUDA graph; any other step
  launches eagerly. Kernels = kernels_per_layer x layers + kernels_outside_layers: the engine's fusion, not the op
  model's op count. Under a datasheet timing model the engine's launch costs replace the hardware spec's fitted
  per-op overhead (a per-GPU constant); a measured profile keeps its own measured dispatch, and no launch cost is
  added to it;
- host: constant + per sequence x B + per token x B x q of CPU work per iteration, divided over the engine's
  multi-step count; with an overlap scheduler only the part longer than the GPU's work shows
  (max(gpu, host) = gpu + max(0, host - gpu)), without one all of it.

A wrapped model has a role: 'iteration' (a whole engine iteration: plain decode or prefill, host paid), 'inner'
(a forward inside a speculative iteration, the draft steps: no host) and 'speculative' (the verify that closes a
speculative iteration: the host work of the iteration plus the speculative extras, with the overlap scheduler off
where the engine turns it off). The `ideal` engine returns the timing model unchanged: bare kernels, the numbers of
the model before engines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ops.op_cost import OpCost
from ..specs.engine import EngineSpec
from .base import OpTime, RelativeSigmas, TimingModel
from .datasheet import DatasheetTiming

ROLES = ("iteration", "inner", "speculative")


@dataclass(frozen=True)
class EngineTiming:
    """A timing model with an engine's launch and host costs (see the module docstring). Immutable."""

    base: TimingModel
    engine: EngineSpec
    role: str = "iteration"
    prices_launch: bool = True  # False under a measured profile: its tables already hold the host's dispatch

    @property
    def name(self) -> str:
        return f"{self.base.name}+{self.engine.short_name}"

    # --- the TimingModel protocol: the base model's op times --------------------------------------------------------
    def for_step(self, ops: list[OpCost]) -> "EngineTiming":
        return self._with_base(self.base.for_step(ops))

    def with_co_resident(self, weight_bytes: float) -> "EngineTiming":
        return self._with_base(self.base.with_co_resident(weight_bytes))

    def _with_base(self, base: TimingModel) -> "EngineTiming":
        # a datasheet's base is the same for every step: no copy (`replace` costs more than pricing an op)
        return self if base is self.base else replace(self, base=base)

    def get_op_time(self, op: OpCost, compute_dtype: str) -> OpTime:
        return self.base.get_op_time(op, compute_dtype)

    def get_ops_times(self, ops: list[OpCost], compute_dtype: str) -> list[OpTime] | None:
        """The base model's batched op times, where it has them (`datasheet.get_ops_times`)."""
        batched = getattr(self.base, "get_ops_times", None)
        return None if batched is None else batched(ops, compute_dtype)

    def get_step_overhead_s(self, num_layers: int, compute_dtype: str) -> float:
        return self.base.get_step_overhead_s(num_layers, compute_dtype)

    def get_warnings(self, ops: list[OpCost], compute_dtype: str) -> list[str]:
        return self.base.get_warnings(ops, compute_dtype)

    def get_relative_sigmas(self, compute_dtype: str) -> RelativeSigmas | None:
        return self.base.get_relative_sigmas(compute_dtype)

    def get_cache_sigma_s(self, expected: list[OpTime], num_layers: int, compute_dtype: str):
        return self.base.get_cache_sigma_s(expected, num_layers, compute_dtype)

    # --- the engine's terms ----------------------------------------------------------------------------------------
    def with_role(self, role: str) -> "EngineTiming":
        if role not in ROLES:
            raise ValueError(f"unknown engine role {role!r}")
        return replace(self, role=role)

    def get_kernel_s(self, batch, new_tokens) -> np.ndarray:
        """Fixed cost of one kernel in a step of `batch` sequences x `new_tokens` query tokens (arrays broadcast):
        the graph cost inside the capture range, the eager cost outside it."""
        launch = self.engine.launch
        b, q = np.asarray(batch, dtype=float), np.asarray(new_tokens, dtype=float)
        captured = (b <= launch.graph_max_batch) & (q <= launch.graph_max_query_tokens) & (b * q <= launch.graph_max_tokens)
        return np.where(captured, launch.kernel_s_graph, launch.kernel_s_eager)

    def get_launch_s(self, kernels, batch, new_tokens) -> np.ndarray:
        """Launch cost of `kernels` kernels in one step (0 under a measured profile)."""
        if not self.prices_launch:
            return np.zeros(np.broadcast(np.asarray(batch), np.asarray(new_tokens)).shape)
        return np.asarray(kernels, dtype=float) * self.get_kernel_s(batch, new_tokens)

    def get_step_kernels(self, num_layers: int) -> float:
        launch = self.engine.launch
        return launch.kernels_per_layer * num_layers + launch.kernels_outside_layers

    def get_host_s(self, batch, new_tokens) -> np.ndarray:
        """CPU work of one iteration in this role (before any overlap): 0 for an inner forward."""
        b, q = np.asarray(batch, dtype=float), np.asarray(new_tokens, dtype=float)
        if self.role == "inner":
            return np.zeros(np.broadcast(b, q).shape)
        host, spec = self.engine.host, self.engine.speculative
        time = (host.constant_s + host.per_sequence_s * b + host.per_token_s * b * q) / self.engine.scheduling.multi_step
        if self.role == "speculative":
            time = time + spec.per_iteration_s + spec.per_sequence_s * b
        return np.broadcast_to(time, np.broadcast(b, q).shape)

    @property
    def overlaps_host(self) -> bool:
        overlap = self.engine.host.overlap
        return overlap and not (self.role == "speculative" and self.engine.speculative.disables_overlap)

    def get_exposed_host_s(self, batch, new_tokens, gpu_time_s) -> np.ndarray:
        """The host time the iteration waits for: all of it, or with an overlap scheduler what exceeds the GPU's."""
        host = self.get_host_s(batch, new_tokens)
        if self.overlaps_host:
            return np.maximum(host - np.asarray(gpu_time_s), 0.0)
        return host


def with_engine(timing: TimingModel, engine: EngineSpec | None) -> TimingModel:
    """`timing` with `engine`'s costs; the ideal engine (or None) leaves it unchanged."""
    if engine is None or engine.is_ideal:
        return timing
    base, prices_launch = timing, True
    if isinstance(timing, DatasheetTiming):
        if not engine.launch.use_hardware_overhead:
            base = replace(timing, kernel_overhead_s=0.0)  # the engine's launch costs replace the per-GPU constant
        else:
            prices_launch = False
    else:  # a measured profile: its per-op tables and dispatch terms were timed on the host, launches included
        prices_launch = False
    return EngineTiming(base, engine, prices_launch=prices_launch)


def with_role(timing: TimingModel, role: str) -> TimingModel:
    """The same model in another role (a timing model without an engine has no roles and is returned as is)."""
    return timing.with_role(role) if isinstance(timing, EngineTiming) else timing


def get_engine(timing: TimingModel) -> EngineSpec | None:
    return timing.engine if isinstance(timing, EngineTiming) else None


def get_engine_step_s(timing: TimingModel, num_layers: int, batch, new_tokens, gpu_time_s) -> np.ndarray | float:
    """What the engine adds to one full forward step (launches + exposed host); 0.0 without an engine."""
    if not isinstance(timing, EngineTiming):
        return 0.0
    if type(batch) in _POINT_TYPES and type(new_tokens) in _POINT_TYPES and type(gpu_time_s) in _POINT_TYPES:
        return _get_point_engine_step_s(timing, num_layers, batch, new_tokens, gpu_time_s)
    launch = timing.get_launch_s(timing.get_step_kernels(num_layers), batch, new_tokens)
    return launch + timing.get_exposed_host_s(batch, new_tokens, np.asarray(gpu_time_s) + launch)


#: the types of one point's batch, new tokens and GPU time that `get_engine_step_s` prices on Python floats
_POINT_TYPES = frozenset({int, float, np.int64, np.float64})


def _get_point_engine_step_s(timing: EngineTiming, num_layers: int, batch, new_tokens, gpu_time_s) -> np.float64:
    """`get_engine_step_s` at one point: the same operations in the same order on Python floats (IEEE doubles, as
    the 0-d arrays' float64), without a numpy evaluation each; a float64 as the array path returns."""
    b, q = float(batch), float(new_tokens)
    launch = 0.0
    if timing.prices_launch:
        spec = timing.engine.launch
        captured = b <= spec.graph_max_batch and q <= spec.graph_max_query_tokens and b * q <= spec.graph_max_tokens
        launch = float(timing.get_step_kernels(num_layers)) * (spec.kernel_s_graph if captured else spec.kernel_s_eager)
    host = 0.0
    if timing.role != "inner":
        costs, spec = timing.engine.host, timing.engine.speculative
        host = ((costs.constant_s + costs.per_sequence_s * b + costs.per_token_s * b * q)
                / timing.engine.scheduling.multi_step)
        if timing.role == "speculative":
            host = host + spec.per_iteration_s + spec.per_sequence_s * b
    if timing.overlaps_host:  # np.maximum(host - gpu, 0): NaN stays NaN
        exposed = host - (float(gpu_time_s) + launch)
        host = exposed if exposed != exposed or exposed > 0.0 else 0.0
    return np.float64(launch + host)


def get_engine_ops_s(timing: TimingModel, ops: list[OpCost], num_layers: int, batch=1) -> np.ndarray | float:
    """Launch cost of a bare op list run inside an iteration (a draft head's layer or its vocabulary projection):
    kernels_per_layer x num_layers, or one kernel per op outside the layers. Never host time."""
    if not isinstance(timing, EngineTiming):
        return 0.0
    kernels = (timing.engine.launch.kernels_per_layer * num_layers if num_layers
               else sum(op.count for op in ops))
    return timing.get_launch_s(kernels, batch, 1)


__all__ = ["EngineTiming", "ROLES", "with_engine", "with_role", "get_engine", "get_engine_step_s",
           "get_engine_ops_s"]
