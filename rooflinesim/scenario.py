"""One resolved scenario: the deployment and the workload grid, with every default, check and warning decided here.

`build_scenario` is the only place that turns user inputs (names, paths, strings, numbers) into the objects the
model prices: the hardware spec with its calibration applied, the target model, the drafter and its own tensor
parallelism, dtypes, attention kind, quantisation group, the batch and context axes, the acceptance and the draft
lengths. `predict`, `sweep`, every chart, `validate` and any later front end take a `Scenario`; none of them
re-derives a default. Warnings travel with the scenario (`Scenario.warnings`) and every front end shows them.

Every problem with the inputs is an `InputError` (or a `SpecError` for a file) with a one-line message.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from .ops import get_kv_cache_bytes, get_step_ops
from .registry import get_short_name, load_hardware, load_model
from .specs import HardwareSpec, InputError, ModelSpec, Workload
from .step import MemoryFit, check_tensor_parallel, get_memory_fit
from .timing import TimingModel, get_timing_model
from .units import DEFAULT_QUANT_GROUP_SIZE, GIGA, UnitError, format_count, normalize_dtype, parse_count, parse_float_list

DEFAULT_HARDWARE = "a100"
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_DRAFT = "llama-3.2-1b"
DEFAULT_ALPHA = 0.8
#: predict's table of draft lengths runs 0..MAX_K; no draft length beyond MAX_K_LIMIT is priced anywhere.
MAX_K = 16
MAX_K_LIMIT = 64
#: an EAGLE/Medusa-style head costs about one decoder layer per draft token (see `Drafter`)
DEFAULT_HEAD_LAYER_FRACTION = 1.0
DRAFTER_KINDS = ("model", "ngram", "head")
FLOAT_DTYPES = ("fp32", "bf16", "fp16")
#: sanity limits of the axes: far above any real deployment, low enough that arithmetic stays exact and bounded.
MAX_BATCH = 10_000_000
MAX_CONTEXT_TOKENS = 1 << 30
#: a grid whose pricing would hold more than this many float64 values in memory at once is refused up front.
MAX_GRID_VALUES = 400_000_000


@dataclass(frozen=True)
class Drafter:
    """What proposes the k draft tokens.

    kind 'model': a separate draft model run at the same batch and context as the target, sharded over its own
    `tensor_parallel` devices. kind 'ngram': a model-free drafter (n-gram / prompt lookup), whose cost on the
    accelerator is taken as zero. kind 'head': a self-drafting head on the target whose cost per draft token is
    `head_layer_fraction` of one target decoder layer's decode time.
    """

    kind: str
    model: ModelSpec | None = None
    head_layer_fraction: float = DEFAULT_HEAD_LAYER_FRACTION
    tensor_parallel: int = 1

    @property
    def name(self) -> str:
        if self.kind == "model":
            return get_short_name(self.model)
        if self.kind == "head":
            return f"head({self.head_layer_fraction:g} layer)"
        return "ngram"


@dataclass(frozen=True)
class Acceptance:
    """Acceptance of draft tokens: i.i.d. rates `alphas` (one per scenario for a point, several for a sweep) or one
    list of conditional per-position rates."""

    alphas: tuple[float, ...] | None = None
    per_position: tuple[float, ...] | None = None

    @property
    def max_k(self) -> int:
        return len(self.per_position) if self.per_position is not None else MAX_K_LIMIT


@dataclass(frozen=True)
class Scenario:
    """A resolved deployment and workload grid. Axes are sorted 1-D integer arrays; a point has one of each."""

    hardware: HardwareSpec  # with its calibration applied
    model: ModelSpec
    workload: Workload  # the target's dtypes, attention, TP and quantisation (batch and context: the first point)
    batch: np.ndarray
    context_tokens: np.ndarray
    timing: TimingModel
    drafter: Drafter | None = None
    draft_workload: Workload | None = None
    acceptance: Acceptance | None = None
    k_values: np.ndarray = field(default_factory=lambda: np.asarray([0]))
    k: int | None = None  # the draft length asked for (None: the best one)
    extra_draft_pass: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def is_point(self) -> bool:
        return self.batch.size == 1 and self.context_tokens.size == 1

    @property
    def speculative(self) -> bool:
        return self.drafter is not None

    def at(self, batch: int, context_tokens: int) -> "Scenario":
        """The same deployment at one (batch, context) point of its grid."""
        return replace(self, batch=np.asarray([int(batch)]), context_tokens=np.asarray([int(context_tokens)]),
                       workload=self.workload.model_copy(update={"batch": int(batch),
                                                                 "context_tokens": int(context_tokens)}))

    def get_memory_fit(self, batch=None, context_tokens=None, k=0) -> MemoryFit:
        """Per device: the target's weights, KV cache for S + k + 1 positions and the verify step's activations, plus
        a draft model's weights and KV cache on its own shards (a deployed draft is resident even at k = 0)."""
        b = self.batch if batch is None else batch
        s = self.context_tokens if context_tokens is None else context_tokens
        q = np.asarray(k) + 1
        w = self.workload
        fit = get_memory_fit(self.hardware, self.model, b, s, q, w.weight_dtype, w.kv_dtype, w.activation_dtype,
                             w.attention, w.tensor_parallel, w.quant_group_size)
        if self.drafter is None or self.drafter.kind != "model":
            return fit
        d = self.draft_workload
        draft_weights = self.drafter.model.get_weight_bytes(d.weight_dtype, d.quant_group_size) / d.tensor_parallel
        draft_kv = get_kv_cache_bytes(self.drafter.model, b, np.asarray(s, dtype=float) + q, d.kv_dtype,
                                      d.tensor_parallel)
        return MemoryFit(fit.weight_bytes + draft_weights, fit.kv_cache_bytes + draft_kv, fit.activation_bytes,
                         fit.capacity_bytes)

    def get_max_batch(self, context_tokens=None, k=0) -> np.ndarray:
        """Largest batch that fits (0 when even one sequence does not): memory is linear in the batch."""
        one = self.get_memory_fit(1, context_tokens, k)
        free = one.capacity_bytes - one.weight_bytes
        return np.maximum(np.floor(free / (one.kv_cache_bytes + one.activation_bytes)), 0).astype(np.int64)


# --- checking user values ------------------------------------------------------------------------------------------


def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_positive_int(value, what: str, maximum: int | None = None) -> int:
    """An integer >= 1 given as int or numeric string; 2.5, True, NaN and 'abc' are refused, not rounded."""
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        value = int(value.strip())
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        value = int(value)
    if not (isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool)) or value <= 0:
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    if maximum is not None and value > maximum:
        raise InputError(f"{what} must be at most {maximum:,}, got {value:,}")
    return int(value)


def _as_list(values) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray, range, set, tuple)):
        return [values]
    return list(np.asarray(values).reshape(-1)) if isinstance(values, np.ndarray) else list(values)


def check_batch_axis(batch) -> np.ndarray:
    values = sorted({check_positive_int(b, "batch", MAX_BATCH) for b in _as_list(batch)})
    if not values:
        raise InputError("batch needs at least one value")
    return np.asarray(values, dtype=np.int64)


def parse_context(ctx) -> int:
    if isinstance(ctx, bool) or (isinstance(ctx, (float, np.floating)) and not float(ctx).is_integer()):
        raise InputError(f"context must be a whole number of tokens, got {ctx!r}")
    try:
        value = parse_count(ctx.item() if isinstance(ctx, np.generic) else ctx)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"context: {exc}") from None
    if value < 0:
        raise InputError(f"context must be >= 0, got {ctx}")
    if value > MAX_CONTEXT_TOKENS:
        raise InputError(f"context must be at most {format_count(MAX_CONTEXT_TOKENS)} tokens, got {ctx}")
    return value


def check_context_axis(ctx) -> np.ndarray:
    values = sorted({parse_context(c) for c in _as_list(ctx)})
    if not values:
        raise InputError("context needs at least one value")
    return np.asarray(values, dtype=np.int64)


def check_k(k, what: str = "k (draft length)") -> int:
    if not _is_number(k) and not isinstance(k, np.integer) or not math.isfinite(float(k)) or int(k) != k or k < 0:
        raise InputError(f"{what} must be a non-negative integer, got {k!r}")
    if k > MAX_K_LIMIT:
        raise InputError(f"{what} must be at most {MAX_K_LIMIT}, got {k}")
    return int(k)


def check_alpha(alpha, what: str = "acceptance rate alpha") -> float:
    if not (_is_number(alpha) or isinstance(alpha, np.floating)) or not 0.0 <= float(alpha) <= 1.0:
        raise InputError(f"{what} must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


def _parse_rates(values, what: str) -> list:
    if isinstance(values, str):
        try:
            return parse_float_list(values, what)
        except UnitError as exc:
            raise InputError(str(exc)) from None
    return _as_list(values)


def resolve_acceptance(alpha, alpha_per_position) -> Acceptance:
    if alpha is not None and alpha_per_position is not None:
        raise InputError("give either alpha or alpha_per_position, not both")
    if alpha_per_position is not None:
        rates = tuple(check_alpha(a, "per-position acceptance rate") for a in
                      _parse_rates(alpha_per_position, "acceptance rate"))
        if not rates:
            raise InputError("alpha_per_position needs at least one rate: e.g. 0.9,0.85,0.8")
        return Acceptance(per_position=rates)
    alphas = _parse_rates(DEFAULT_ALPHA if alpha is None else alpha, "acceptance rate")
    values = tuple(sorted({check_alpha(a) for a in alphas}))
    if not values:
        raise InputError("alpha needs at least one value")
    return Acceptance(alphas=values)


def resolve_dtypes(weight_dtype, kv_dtype, activation_dtype, hw: HardwareSpec) -> tuple[str, str, str]:
    """Default dtypes: activations follow float weights; quantised weights dequantise to bf16, except fp8 weights
    on a device with an fp8 peak, which compute in fp8 (W8A8). The KV cache defaults to the float dtype of the
    weights (bf16 for quantised ones)."""
    try:
        weight = normalize_dtype(weight_dtype)
        float_of_weights = weight if weight in FLOAT_DTYPES else "bf16"
        kv = normalize_dtype(kv_dtype) if kv_dtype else float_of_weights
        if activation_dtype:
            activation = normalize_dtype(activation_dtype)
        elif weight == "fp8" and "fp8" in hw.peak_flops_per_s:
            activation = "fp8"
        else:
            activation = float_of_weights
    except (UnitError, AttributeError, TypeError) as exc:
        raise InputError(f"dtype: {exc}") from None
    if activation in ("int8", "int4"):
        raise InputError(f"activations cannot be {activation}: use fp32, bf16, fp16 or fp8")
    return weight, kv, activation


def resolve_drafter(target: ModelSpec, hw: HardwareSpec, workload: Workload, draft, drafter, head_layer_fraction,
                    draft_tp) -> tuple[Drafter, Workload | None, list[str]]:
    """The drafter and, for a draft model, its workload. Draft TP: as given, else the target's when it divides
    the draft's heads, else 1 (with a warning); time and memory both use it."""
    kind = drafter or "model"
    if kind not in DRAFTER_KINDS:
        raise InputError(f"unknown drafter kind {kind!r}; use one of {', '.join(DRAFTER_KINDS)}")
    if kind != "model":
        if not (_is_number(head_layer_fraction) and math.isfinite(head_layer_fraction) and head_layer_fraction > 0):
            raise InputError(f"head layer fraction must be a positive finite number, got {head_layer_fraction!r}")
        return Drafter(kind, head_layer_fraction=float(head_layer_fraction)), None, []
    draft_model = load_model(draft if draft is not None else DEFAULT_DRAFT)
    warnings = []
    if draft_model.vocab_size != target.vocab_size:
        warnings.append(f"draft {draft_model.name} has vocabulary {draft_model.vocab_size} but target {target.name} "
                        f"has {target.vocab_size}: speculation needs a shared tokenizer")
    if draft_tp is not None:
        tp = check_tensor_parallel(draft_model, check_positive_int(draft_tp, "--draft-tp"), hw)
    elif draft_model.num_attention_heads % workload.tensor_parallel == 0:
        tp = workload.tensor_parallel
    else:
        tp = 1
        warnings.append(f"draft {draft_model.name}'s {draft_model.num_attention_heads} heads do not divide over "
                        f"--tp {workload.tensor_parallel}: the draft runs unsharded (draft TP 1; set --draft-tp)")
    draft_workload = workload.model_copy(update={"tensor_parallel": tp})
    return Drafter("model", draft_model, tensor_parallel=tp), draft_workload, warnings


def _check_grid_size(batch, context, k_values, alphas) -> None:
    # pricing holds ~20 ops x 8 arrays over (batch, context, k) and ~10 result arrays over the full grid
    values = batch.size * context.size * (k_values.size * 160 + 10 * k_values.size * alphas)
    if values > MAX_GRID_VALUES:
        raise InputError(
            f"grid of {batch.size:,} batches x {context.size:,} contexts x {k_values.size:,} k x {alphas:,} alphas "
            f"would need about {values * 8 / GIGA:,.0f} GB to price; at most {MAX_GRID_VALUES * 8 / GIGA:.1f} GB is "
            "allowed: use fewer points")


def _memory_warnings(scenario: Scenario) -> list[str]:
    fit = scenario.get_memory_fit(scenario.batch[:, None], scenario.context_tokens[None, :], 0)
    fits = np.broadcast_to(fit.fits_in_memory, (scenario.batch.size, scenario.context_tokens.size))
    if fits.all():
        return []
    hw = scenario.hardware
    if scenario.is_point:
        need = float(np.asarray(fit.total_bytes).reshape(-1)[0])
        max_batch = int(np.asarray(scenario.get_max_batch(scenario.context_tokens[0])).reshape(-1)[0])
        return [f"infeasible: needs {need / GIGA:.1f} GB but {hw.name} has {hw.memory_capacity_bytes / GIGA:.1f} GB "
                f"(max batch at this context: {max_batch}); times are shown as if it fitted"]
    return [f"{int((~fits).sum())} of {fits.size} (batch, context) points do not fit in {hw.name}'s memory even "
            "without speculation; they never count as paying"]


def build_scenario(
    hw: str | HardwareSpec = DEFAULT_HARDWARE,
    model: str | ModelSpec = DEFAULT_MODEL,
    batch=1,
    ctx=4096,
    *,
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    activation_dtype: str | None = None,
    attention: str = "flash",
    tp=1,
    draft_tp=None,
    quant_group_size=DEFAULT_QUANT_GROUP_SIZE,
    calibration=None,
    allow_long_context: bool = False,
    speculative: bool = True,
    draft: str | ModelSpec | None = None,
    drafter: str | None = None,
    alpha=None,
    alpha_per_position=None,
    k=None,
    k_values=None,
    head_layer_fraction: float = DEFAULT_HEAD_LAYER_FRACTION,
    extra_draft_pass: bool = False,
) -> Scenario:
    """Resolve every user input into one Scenario (see the module docstring).

    batch and ctx are one value or several (a grid); ctx accepts 4096, '4k', '32K', '128k', '1M'. `k` is the draft
    length to report (default: the best); `k_values` the draft lengths to price (default 0..16, or 0..the number of
    per-position rates). `alpha` is one i.i.d. acceptance rate or several; `alpha_per_position` (a list or
    '0.9,0.8') the conditional rate per draft position instead. `speculative=False` leaves the drafter out.
    """
    warnings: list[str] = []
    hw_spec = load_hardware(hw)
    if calibration is not None:
        from .profiles import apply_calibration

        hw_spec, calibration_warnings = apply_calibration(hw_spec, calibration)
        warnings += calibration_warnings
    if hw_spec.measured is not None:  # a profile from another host is legitimate, but say whose numbers these are
        from .profiles import get_host_notice

        warnings += get_host_notice(hw_spec.measured)
    model_spec = load_model(model)
    batch_axis, context_axis = check_batch_axis(batch), check_context_axis(ctx)
    too_long = context_axis[context_axis > model_spec.max_context_tokens]
    if too_long.size:
        message = (f"context {format_count(int(too_long[-1]))} exceeds {model_spec.name}'s max context "
                   f"{format_count(model_spec.max_context_tokens)} tokens")
        if not allow_long_context:
            raise InputError(message + " (pass allow_long_context / --allow-long-context to model it anyway)")
        warnings.append(message)
    weight, kv, activation = resolve_dtypes(weight_dtype, kv_dtype, activation_dtype, hw_spec)
    if attention not in ("flash", "unfused"):
        raise InputError(f"attention must be 'flash' or 'unfused', got {attention!r}")
    tp = check_tensor_parallel(model_spec, check_positive_int(tp, "--tp", 4096), hw_spec)
    group = check_positive_int(quant_group_size, "quantisation group size", 1 << 20)
    workload = Workload(batch=int(batch_axis[0]), context_tokens=int(context_axis[0]), weight_dtype=weight,
                        kv_dtype=kv, activation_dtype=activation, attention=attention, tensor_parallel=tp,
                        quant_group_size=group)
    timing = get_timing_model(hw_spec)
    scenario = Scenario(hw_spec, model_spec, workload, batch_axis, context_axis, timing,
                        k_values=np.asarray([0]), extra_draft_pass=bool(extra_draft_pass))
    if speculative:
        acceptance = resolve_acceptance(alpha, alpha_per_position)
        chosen = None if k is None else check_k(k)
        if k_values is None:
            top = min(MAX_K, acceptance.max_k) if chosen is None else max(min(MAX_K, acceptance.max_k), chosen)
            ks = np.arange(top + 1, dtype=np.int64)
        else:
            ks = np.asarray(sorted({check_k(x) for x in _as_list(k_values)}), dtype=np.int64)
            if ks.size == 0:
                raise InputError("k needs at least one value")
        if ks[-1] > acceptance.max_k:
            raise InputError(f"k = {int(ks[-1])} drafts need {int(ks[-1])} per-position acceptance rates, got "
                             f"{acceptance.max_k}")
        _check_grid_size(batch_axis, context_axis, ks, len(acceptance.alphas or (0,)))
        spec_drafter, draft_workload, drafter_warnings = resolve_drafter(
            model_spec, hw_spec, workload, draft, drafter, head_layer_fraction, draft_tp)
        warnings += drafter_warnings
        scenario = replace(scenario, drafter=spec_drafter, draft_workload=draft_workload, acceptance=acceptance,
                           k_values=ks, k=chosen)
    warnings += _memory_warnings(scenario)
    warnings += _pricing_warnings(scenario)
    return replace(scenario, warnings=tuple(dict.fromkeys(warnings)))


def _pricing_warnings(scenario: Scenario) -> list[str]:
    """What the timing model says about the largest steps the scenario prices (e.g. outside a measured range)."""
    w = scenario.workload
    q = int(scenario.k_values.max()) + 1
    ops = get_step_ops(scenario.model, scenario.batch.max(), scenario.context_tokens.max(), q, w.weight_dtype,
                       w.kv_dtype, w.activation_dtype, w.attention, True, w.tensor_parallel, w.quant_group_size)
    return scenario.timing.get_warnings(ops, w.activation_dtype)


__all__ = [
    "Scenario", "Drafter", "Acceptance", "build_scenario", "resolve_dtypes", "resolve_drafter", "resolve_acceptance",
    "check_positive_int", "check_k", "check_alpha", "parse_context", "DEFAULT_DRAFT", "DEFAULT_ALPHA", "MAX_K",
    "MAX_K_LIMIT", "DRAFTER_KINDS", "DEFAULT_HEAD_LAYER_FRACTION",
]
