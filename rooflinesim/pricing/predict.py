"""One point of a Scenario -> a typed Prediction: prefill, decode, per-op rows, memory, speculation, warnings.

The CLI, notebooks and tests call `predict` (which builds the scenario) or `predict_scenario`;
`Prediction.to_dict()` is exactly what `rooflinesim predict --json` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from textwrap import indent

import numpy as np

from ..ops.op_cost import COLLECTIVE_KINDS
from ..specs.registry import get_short_name
from ..scenario.builder import Scenario, build_scenario
from ..scenario.groups import DEFAULT, Deployment, Memory, Precision, Sampling, Speculation, describe_options
from .sensitivity import add_intervals
from .speculative import analyse_speculation, get_loop_decode
from .speculative_result import SpeculativeResult
from ..timing.datasheet_band import get_datasheet_band
from ..specs.hardware import HardwareSpec
from ..errors import InputError
from ..specs.model import ModelSpec
from ..specs.workload import Workload
from ..step import StepCost, get_step_cost


#: the version of the JSON contract of `predict --json` and `sweep --json` (docs/cli-and-json.md). 2: throughput keys
#: say what they count (`tokens_per_s` is the batch's aggregate everywhere, `tokens_per_s_per_sequence` one
#: sequence's), break-even rows carry a verdict and the memory cap, `best_*_at_first_batch`, `assumed`.
JSON_SCHEMA_VERSION = 3


def _scalar(x) -> float:
    if type(x) is np.float64 or type(x) is float:  # one point's ops and times (`ops.op_cost.make_op`)
        return float(x)
    return float(np.asarray(x).reshape(-1)[0])


def _flag(x) -> bool:
    if type(x) is np.bool_:
        return bool(x)
    return bool(np.asarray(x).reshape(-1)[0])


def _intensity(op) -> float:
    """`op.arithmetic_intensity_flops_per_byte` at the point, without an array evaluation for one op's scalars."""
    flops, total = op.flops, op.bytes
    if type(flops) is np.float64 and type(total) is np.float64:
        return float(flops / max(total, 1e-300)) if total > 0 else 0.0
    return _scalar(op.arithmetic_intensity_flops_per_byte)


@dataclass(frozen=True)
class StepSummary:
    """Scalar totals of one step, for reports and JSON."""

    step_time_s: float
    roofline_step_time_s: float
    tokens_per_s: float  # the whole batch's tokens per second (aggregate)
    tokens_per_s_per_sequence: float  # one sequence's tokens per second
    flops: float
    bytes: float
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    activation_bytes: float
    arithmetic_intensity: float
    bound: str
    weight_share_of_bytes: float
    kv_share_of_bytes: float
    new_tokens_per_sequence: int
    context_tokens: int
    # the 90 % prediction interval of step_time_s (s) under a measured profile; None under the datasheet roofline
    step_time_s_low: float | None = None
    step_time_s_high: float | None = None
    #: what the engine adds beyond the ops: kernel launches in its mode + the host time it waits for (0: ideal)
    engine_s: float = 0.0

    @classmethod
    def from_step(cls, step: StepCost, new_tokens: int, context_tokens: int, band=None) -> "StepSummary":
        """`band`: a datasheet's error band (`timing.datasheet_band`), the interval where no profile gives one."""
        total_bytes = _scalar(step.bytes)
        if step.sigmas is not None:
            low, high = _scalar(step.step_time_s_low), _scalar(step.step_time_s_high)
        else:
            low, high = (None, None) if band is None else band.apply(_scalar(step.step_time_s))
        return cls(
            step_time_s=_scalar(step.step_time_s),
            roofline_step_time_s=_scalar(step.roofline_step_time_s),
            tokens_per_s=_scalar(step.tokens_per_s),
            tokens_per_s_per_sequence=new_tokens / _scalar(step.step_time_s),
            flops=_scalar(step.flops),
            bytes=total_bytes,
            weight_bytes=_scalar(step.weight_bytes),
            kv_read_bytes=_scalar(step.kv_read_bytes),
            kv_write_bytes=_scalar(step.kv_write_bytes),
            activation_bytes=_scalar(step.activation_bytes),
            arithmetic_intensity=_scalar(step.arithmetic_intensity_flops_per_byte),
            bound="compute" if _flag(step.compute_bound) else "memory",
            weight_share_of_bytes=_scalar(step.weight_bytes) / total_bytes,
            kv_share_of_bytes=(_scalar(step.kv_read_bytes) + _scalar(step.kv_write_bytes)) / total_bytes,
            new_tokens_per_sequence=new_tokens,
            context_tokens=context_tokens,
            step_time_s_low=low,
            step_time_s_high=high,
            engine_s=_scalar(np.asarray(step.engine_s, dtype=float)),
        )


@dataclass(frozen=True)
class OpRow:
    name: str
    kind: str
    count: int
    flops: float
    bytes: float
    weight_bytes: float
    act_read_bytes: float
    act_write_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    comm_bytes: float
    arithmetic_intensity: float
    bound: str
    time_s: float
    roofline_time_s: float


def get_op_rows(step: StepCost) -> list[OpRow]:
    rows = []
    for op, t, sol in zip(step.ops, step.expected, step.roofline):
        rows.append(
            OpRow(
                name=op.name, kind=op.kind, count=op.count,
                flops=op.count * _scalar(op.flops), bytes=op.count * _scalar(op.bytes),
                weight_bytes=op.count * _scalar(op.weight_bytes),
                act_read_bytes=op.count * _scalar(op.act_read_bytes),
                act_write_bytes=op.count * _scalar(op.act_write_bytes),
                kv_read_bytes=op.count * _scalar(op.kv_read_bytes),
                kv_write_bytes=op.count * _scalar(op.kv_write_bytes),
                comm_bytes=op.count * _scalar(op.comm_bytes),
                arithmetic_intensity=_intensity(op),
                bound=("interconnect" if op.kind in COLLECTIVE_KINDS
                       else "compute" if _flag(t.compute_bound) else "memory"),
                time_s=_scalar(t.time_s), roofline_time_s=_scalar(sol.time_s),
            )
        )
    return rows


@dataclass(frozen=True)
class Prediction:
    hardware: HardwareSpec
    model: ModelSpec
    workload: Workload
    timing_model: str
    memory: dict
    prefill: StepSummary
    decode: StepSummary
    #: the priced decode step whose per-op rows `ops` lists (the rows are built when first read: a loop over
    #: thousands of deployments that reads step times does not pay for them)
    decode_step: StepCost = field(repr=False, compare=False)
    warnings: list[str] = field(default_factory=list)
    speculative: SpeculativeResult | None = None  # when the scenario has a drafter
    scenario: Scenario | None = None
    #: where the step times' intervals come from on a datasheet (the published-measurement band); None under a
    #: measured profile, whose own intervals are used
    interval_source: str | None = None

    @property
    def ops(self) -> list[OpRow]:
        """The decode step's ops, one row each (FLOPs, bytes by kind, intensity, bound, time)."""
        return get_op_rows(self.decode_step)

    @property
    def engine(self) -> str:
        """The engine profile whose costs priced the steps ('ideal': bare kernels; docs/engines.md)."""
        return self.scenario.engine_name if self.scenario is not None else "ideal"

    def to_dict(self) -> dict:
        hw, model, w = self.hardware, self.model, self.workload
        compute_dtype = hw.get_compute_dtype(w.compute_dtype)
        out = {
            "schema_version": JSON_SCHEMA_VERSION,
            "engine": self.engine,
            "hardware": {
                "name": hw.name,
                "short_name": get_short_name(hw),
                "kind": hw.kind,
                "compute_dtype": compute_dtype,
                "bandwidth_bytes_per_s": hw.memory_bandwidth_bytes_per_s,
                "peak_flops_per_s": hw.peak_flops_per_s[compute_dtype],
                "ridge_point_flops_per_byte": hw.get_ridge_point_flops_per_byte(w.compute_dtype),
                "memory_capacity_bytes": hw.memory_capacity_bytes,
                "peak_flops_per_s_by_dtype": dict(hw.peak_flops_per_s),
                "ridge_point_flops_per_byte_by_dtype": hw.ridge_points_flops_per_byte,
                "efficiency": hw.efficiency.model_dump(),
                "timing_model": self.timing_model,
                "calibration_profile": hw.measured.profile_name if hw.measured is not None else None,
            },
            "model": {
                "name": model.name,
                "short_name": get_short_name(model),
                "params": model.params,
                "active_params": model.active_params,
                "weight_bytes": model.get_weight_bytes(w.weight_dtype, w.quant_group_size),
                "num_layers": model.num_layers,
                "hidden_size": model.hidden_size,
                "kv_bytes_per_token": model.get_kv_bytes_per_token(w.kv_dtype),
                "max_context_tokens": model.max_context_tokens,
            },
            "workload": {
                "batch": w.batch,
                "context_tokens": w.context_tokens,
                "weight_dtype": w.weight_dtype,
                "kv_dtype": w.kv_dtype,
                "activation_dtype": w.activation_dtype,
                "attention": w.attention,
                "tensor_parallel": w.tensor_parallel,
                "quant_group_size": w.quant_group_size,
                "quant_kernel": self.scenario.quant_kernel if self.scenario is not None else None,
                "implementation": w.implementation,
            },
            "memory": dict(self.memory),
            "prefill": self.prefill.__dict__.copy(),
            "decode": self.decode.__dict__.copy(),
            "ops": [row.__dict__.copy() for row in self.ops],
            "warnings": list(self.warnings),
            "interval_source": self.interval_source,
            "assumed": dict(self.scenario.assumed) if self.scenario is not None else {},
        }
        if self.speculative is not None:
            out["speculative"] = self.speculative.to_dict()
        return out


def predict(
    hw: str | HardwareSpec | None = None,
    model: str | ModelSpec | None = None,
    batch: int | None = None,
    ctx: int | str | None = None,
    *,
    deployment: Deployment | None = None,
    precision: Precision | None = None,
    speculation: Speculation | None = None,
    memory: Memory | None = None,
    sampling: Sampling | bool = DEFAULT,
    tp=DEFAULT, draft_tp=DEFAULT, calibration=DEFAULT, engine=DEFAULT, attention=DEFAULT, implementation=DEFAULT,
    weight_dtype=DEFAULT, kv_dtype=DEFAULT, activation_dtype=DEFAULT, quant_group_size=DEFAULT, quant_kernel=DEFAULT,
    speculative=DEFAULT, draft=DEFAULT, drafter=DEFAULT, alpha=DEFAULT, alpha_per_position=DEFAULT,
    acceptance=DEFAULT, acceptance_k=DEFAULT, acceptance_as_iid=DEFAULT, k=DEFAULT, k_values=DEFAULT, tree=DEFAULT,
    draft_kv_budget=DEFAULT, draft_layer_fraction=DEFAULT, head_layer_fraction=DEFAULT, extra_draft_pass=DEFAULT,
    draft_first_step_tokens=DEFAULT, ngram_match_fraction=DEFAULT,
    gpu_memory_utilization=DEFAULT, memory_reserve_bytes=DEFAULT, allow_long_context=DEFAULT,
) -> Prediction:
    given = {name: value for name, value in locals().items() if value is not DEFAULT}
    return predict_scenario(build_scenario(**given))


predict.__doc__ = f"""Predict prefill and decode for `batch` sequences at context `ctx` (tokens cached when decoding).

    ctx accepts 4096, '4k', '32K', '128k', '1M'. The options come in groups (`rooflinesim.scenario.groups`) or as
    the flat keywords below, each one field of a group (a flat keyword wins over its group's field); a keyword left
    at DEFAULT takes the default in brackets, and every default the scenario resolves is listed in `assumed`.
    `.to_dict()` is the `--json` output. Example::

        from rooflinesim.scenario.groups import Deployment, Speculation
        predict(batch=8, ctx="32k", deployment=Deployment("h100", "llama-3.1-70b", tp=4),
                speculation=Speculation(k=4, alpha=0.7))

{indent(describe_options(exclude=("hw", "model")), "    ")}
    """


def predict_scenario(scenario: Scenario) -> Prediction:
    """Prefill, decode, memory and (when the scenario has a drafter) speculation at the scenario's one point."""
    if not scenario.is_point:
        raise InputError("predict takes one batch and one context; use sweep for grids")
    alphas = scenario.acceptance.alphas if scenario.acceptance is not None else None
    if alphas is not None and len(alphas) != 1:
        raise InputError(f"predict takes one acceptance rate, got {len(alphas)} "
                         f"({', '.join(f'{a:g}' for a in alphas)}); use sweep for several")
    hw_spec, model_spec, workload, timing = scenario.hardware, scenario.model, scenario.workload, scenario.timing
    s = workload.context_tokens
    speculation = analyse_speculation(scenario) if scenario.speculative else None
    at_point = (workload.batch, s) == (scenario.batch[0], scenario.context_tokens[0])
    # the steps the build priced to check them (`Scenario.get_largest_steps`) are this point's own: the same numbers
    checked_prefill, checked_verify = scenario.get_largest_steps() if at_point else (None, None)
    if speculation is not None and at_point:
        decode = get_loop_decode(scenario)  # the speculative loop's own decode step: the same numbers, priced once
    elif at_point and int(scenario.k_values.max()) == 0:
        decode = checked_verify  # a verify of one token on the point's context is its decode
    else:
        decode = get_step_cost(hw_spec, model_spec, workload, 1, timing)
    prefill = checked_prefill if at_point else get_step_cost(
        hw_spec, model_spec, workload, max(s, 1), timing, context_tokens=0, logits_for_all_tokens=False
    )
    band = get_datasheet_band(hw_spec) if decode.sigmas is None else None  # a profile brings its own intervals
    if speculation is not None:
        speculation = add_intervals(speculation, scenario, band)
    k = 0 if speculation is None else speculation.k  # memory holds the lookahead of the draft length reported
    fit = scenario.get_memory_fit(k=k)
    memory = {
        "weight_bytes": _scalar(fit.weight_bytes),
        "kv_cache_bytes": _scalar(fit.kv_cache_bytes),
        "activation_bytes": _scalar(fit.activation_bytes),
        "total_bytes": _scalar(fit.total_bytes),
        "capacity_bytes": hw_spec.memory_capacity_bytes,  # the device's total
        "usable_capacity_bytes": fit.capacity_bytes,  # total x gpu_memory_utilization - reserve: what fit uses
        "gpu_memory_utilization": scenario.gpu_memory_utilization,
        "memory_reserve_bytes": scenario.memory_reserve_bytes,
        "fits_in_memory": bool(np.all(fit.fits_in_memory)),
        "max_batch": int(_scalar(scenario.get_max_batch(k=k))),
        "at_k": k,
        "includes_draft": scenario.drafter is not None and scenario.drafter.kind == "model",
    }
    return Prediction(
        hardware=hw_spec,
        model=model_spec,
        workload=workload,
        timing_model=timing.name,
        memory=memory,
        prefill=StepSummary.from_step(prefill, max(s, 1), 0, band),
        decode=StepSummary.from_step(decode, 1, s, band),
        interval_source=None if band is None else band.source,
        decode_step=decode,
        warnings=list(scenario.warnings),
        speculative=speculation,
        scenario=scenario,
    )
