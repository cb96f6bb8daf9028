"""The one orchestration entry: (hardware, model, workload[, draft]) -> a typed Prediction.

The CLI, notebooks and tests all call `predict`; `Prediction.to_dict()` is exactly what `rooflinesim predict --json`
prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .ops import COLLECTIVE_KINDS
from .registry import get_short_name, load_hardware, load_model
from .roofline import DatasheetTiming, TimingModel
from .specs import HardwareSpec, InputError, ModelSpec, Workload
from .step import StepCost, check_tensor_parallel, get_max_batch, get_workload_memory_fit, get_workload_step
from .units import DEFAULT_QUANT_GROUP_SIZE, UnitError, format_count, normalize_dtype, parse_count


FLOAT_DTYPES = ("fp32", "bf16", "fp16")


def get_default_activation_dtype(weight_dtype: str) -> str:
    """Float weights compute in their own dtype; quantised weights dequantise to bf16."""
    return weight_dtype if weight_dtype in FLOAT_DTYPES else "bf16"


def get_timing_model(hw: HardwareSpec) -> TimingModel:
    """The expected-time model: a calibration profile's measured tables when present, else the datasheet fractions."""
    if hw.measured is not None:
        from .calibrate.profile import MeasuredTiming  # numpy only; no torch on this path

        return MeasuredTiming.from_spec(hw)
    return DatasheetTiming.expected(hw)


def _scalar(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


@dataclass(frozen=True)
class StepSummary:
    """Scalar totals of one step, for reports and JSON."""

    step_time_s: float
    roofline_step_time_s: float
    tokens_per_s: float
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

    @classmethod
    def from_step(cls, step: StepCost, new_tokens: int, context_tokens: int) -> "StepSummary":
        total_bytes = _scalar(step.bytes)
        return cls(
            step_time_s=_scalar(step.step_time_s),
            roofline_step_time_s=_scalar(step.roofline_step_time_s),
            tokens_per_s=_scalar(step.tokens_per_s),
            flops=_scalar(step.flops),
            bytes=total_bytes,
            weight_bytes=_scalar(step.weight_bytes),
            kv_read_bytes=_scalar(step.kv_read_bytes),
            kv_write_bytes=_scalar(step.kv_write_bytes),
            activation_bytes=_scalar(step.activation_bytes),
            arithmetic_intensity=_scalar(step.arithmetic_intensity_flops_per_byte),
            bound="compute" if bool(np.asarray(step.compute_bound).reshape(-1)[0]) else "memory",
            weight_share_of_bytes=_scalar(step.weight_bytes) / total_bytes,
            kv_share_of_bytes=(_scalar(step.kv_read_bytes) + _scalar(step.kv_write_bytes)) / total_bytes,
            new_tokens_per_sequence=new_tokens,
            context_tokens=context_tokens,
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
                arithmetic_intensity=_scalar(op.arithmetic_intensity_flops_per_byte),
                bound=("interconnect" if op.kind in COLLECTIVE_KINDS
                       else "compute" if bool(np.asarray(t.compute_bound).reshape(-1)[0]) else "memory"),
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
    ops: list[OpRow]
    warnings: list[str] = field(default_factory=list)
    speculative: Any = None  # a SpeculativeResult when a drafter and acceptance are given

    def to_dict(self) -> dict:
        hw, model, w = self.hardware, self.model, self.workload
        compute_dtype = hw.get_compute_dtype(w.compute_dtype)
        out = {
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
            },
            "memory": dict(self.memory),
            "prefill": self.prefill.__dict__.copy(),
            "decode": self.decode.__dict__.copy(),
            "ops": [row.__dict__.copy() for row in self.ops],
            "warnings": list(self.warnings),
        }
        if self.speculative is not None:
            out["speculative"] = self.speculative.to_dict()
        return out


def parse_context(ctx) -> int:
    try:
        value = parse_count(ctx)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if value < 0:
        raise InputError(f"context must be >= 0, got {ctx}")
    return value


def check_batch(batch) -> int:
    try:
        value = int(batch) if isinstance(batch, (int, np.integer)) else int(str(batch).strip())
    except ValueError as exc:
        raise InputError(f"batch must be a positive integer, got {batch!r}") from exc
    if value <= 0:
        raise InputError(f"batch must be a positive integer, got {batch!r}")
    return value


def build_workload(
    model: ModelSpec, batch, ctx, weight_dtype="bf16", kv_dtype=None, activation_dtype=None, attention="flash",
    allow_long_context: bool = False, tp: int = 1, quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE,
    hw: HardwareSpec | None = None,
) -> tuple[Workload, list[str]]:
    """Validate the user's workload (every problem is an InputError with a one-line message).

    Default dtypes: activations follow float weights; quantised weights dequantise to bf16, except fp8 weights on a
    device with an fp8 peak, which compute in fp8 (W8A8). The KV cache defaults to the float dtype of the weights.
    """
    batch = check_batch(batch)
    context = parse_context(ctx)
    warnings: list[str] = []
    if context > model.max_context_tokens:
        message = (
            f"context {format_count(context)} exceeds {model.name}'s max context "
            f"{format_count(model.max_context_tokens)} tokens"
        )
        if not allow_long_context:
            raise InputError(message + " (pass allow_long_context / --allow-long-context to model it anyway)")
        warnings.append(message)
    try:
        weight_dtype = normalize_dtype(weight_dtype)
        kv_dtype = normalize_dtype(kv_dtype) if kv_dtype else get_default_activation_dtype(weight_dtype)
        if activation_dtype:
            activation_dtype = normalize_dtype(activation_dtype)
        elif weight_dtype == "fp8" and hw is not None and "fp8" in hw.peak_flops_per_s:
            activation_dtype = "fp8"
        else:
            activation_dtype = get_default_activation_dtype(weight_dtype)
    except UnitError as exc:
        raise InputError(str(exc)) from exc
    if attention not in ("flash", "unfused"):
        raise InputError(f"attention must be 'flash' or 'unfused', got {attention!r}")
    tp = check_tensor_parallel(model, tp, hw)
    if int(quant_group_size) != quant_group_size or quant_group_size <= 0:
        raise InputError(f"quantisation group size must be a positive integer, got {quant_group_size}")
    workload = Workload(
        batch=batch, context_tokens=context, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
        activation_dtype=activation_dtype, attention=attention, tensor_parallel=tp,
        quant_group_size=int(quant_group_size),
    )
    return workload, warnings


def predict(
    hw: str | HardwareSpec = "a100",
    model: str | ModelSpec = "llama-3.1-8b",
    batch: int = 1,
    ctx: int | str = 4096,
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    activation_dtype: str | None = None,
    attention: str = "flash",
    allow_long_context: bool = False,
    tp: int = 1,
    draft_tp: int | None = None,
    quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE,
    calibration: str | None = None,
    speculative: bool = True,
    draft: str | ModelSpec | None = None,
    alpha: float | None = None,
    alpha_per_position: list[float] | None = None,
    k: int | None = None,
    drafter: str | None = None,
    head_layer_fraction: float = 1.0,
    extra_draft_pass: bool = False,
) -> Prediction:
    """Predict prefill and decode for `batch` sequences at context `ctx` (tokens already cached when decoding).

    ctx accepts 4096, '4k', '32K', '128k', '1M'. dtypes: fp32, bf16, fp16, fp8, int8, int4 for weights and KV;
    activations default to the weight dtype (bf16 for quantised weights). Returns a Prediction; `.to_dict()` is the
    `--json` output. Unless `speculative=False`, it adds the speculative-decoding analysis: a drafter (`draft`
    model, default llama-3.2-1b; or `drafter='ngram'|'head'`), acceptance `alpha` (default 0.8) or
    `alpha_per_position`, draft length `k` (default: the best k over 0..16).
    """
    hw_spec = load_hardware(hw)
    warnings: list[str] = []
    if calibration is not None:
        from .calibrate.profile import apply_calibration

        hw_spec, calibration_warnings = apply_calibration(hw_spec, calibration)
        warnings += calibration_warnings
    model_spec = load_model(model)
    workload, workload_warnings = build_workload(
        model_spec, batch, ctx, weight_dtype, kv_dtype, activation_dtype, attention, allow_long_context, tp,
        quant_group_size, hw_spec,
    )
    warnings += workload_warnings
    timing = get_timing_model(hw_spec)
    s = workload.context_tokens

    decode = get_workload_step(hw_spec, model_spec, workload, 1, timing)
    prefill = get_workload_step(
        hw_spec, model_spec, workload, max(s, 1), timing, context_tokens=0, logits_for_all_tokens=False
    )
    fit = get_workload_memory_fit(hw_spec, model_spec, workload)
    max_batch = int(get_max_batch(
        hw_spec, model_spec, s, 1, workload.weight_dtype, workload.kv_dtype, workload.activation_dtype,
        workload.attention, workload.tensor_parallel, workload.quant_group_size,
    ))
    fits = bool(fit.fits_in_memory)
    memory = {
        "weight_bytes": fit.weight_bytes,
        "kv_cache_bytes": _scalar(fit.kv_cache_bytes),
        "activation_bytes": _scalar(fit.activation_bytes),
        "total_bytes": _scalar(fit.total_bytes),
        "capacity_bytes": fit.capacity_bytes,
        "fits_in_memory": fits,
        "max_batch": max_batch,
    }
    if not fits:
        warnings.append(
            f"infeasible: needs {_scalar(fit.total_bytes) / 1e9:.1f} GB but {hw_spec.name} has "
            f"{hw_spec.memory_capacity_bytes / 1e9:.0f} GB (max batch at this context: {max_batch}); "
            "times are shown as if it fitted"
        )
    speculation = None
    if speculative:
        from .speculative import analyse_speculation

        speculation, spec_warnings = analyse_speculation(
            hw_spec, model_spec, workload, timing, draft=draft, drafter=drafter, alpha=alpha,
            alpha_per_position=alpha_per_position, k=k, head_layer_fraction=head_layer_fraction,
            extra_draft_pass=extra_draft_pass, draft_tp=draft_tp,
        )
        warnings += spec_warnings
    return Prediction(
        hardware=hw_spec,
        model=model_spec,
        workload=workload,
        timing_model=timing.name,
        memory=memory,
        prefill=StepSummary.from_step(prefill, max(s, 1), 0),
        decode=StepSummary.from_step(decode, 1, s),
        ops=get_op_rows(decode),
        warnings=warnings,
        speculative=speculation,
    )
