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

from .draft_heads import HEAD_KINDS, get_head_weight_bytes
from .ops import ATTENTION_MODES, get_kv_cache_bytes, get_step_ops
from .registry import get_short_name, load_hardware, load_model
from .specs import HardwareSpec, InputError, ModelSpec, Workload
from .step import MemoryFit, check_tensor_parallel, get_memory_fit
from .timing import DatasheetTiming, TimingModel, get_timing_model
from .timing.quant_kernels import GENERIC, get_quant_kernel
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
DRAFTER_KINDS = ("model", "ngram", "head", "eagle", "medusa", "mtp")
FLOAT_DTYPES = ("fp32", "bf16", "fp16")
QUANTISED_WEIGHT_DTYPES = ("int8", "int4", "fp8")
#: sanity limits of the axes: far above any real deployment, low enough that arithmetic stays exact and bounded.
MAX_BATCH = 10_000_000
MAX_CONTEXT_TOKENS = 1 << 30
#: a grid whose pricing would hold more than this many float64 values in memory at once is refused up front.
MAX_GRID_VALUES = 400_000_000
#: Share of the device memory an engine lets itself use: vLLM's `--gpu-memory-utilization` defaults to 0.9 (vLLM
#: engine arguments; its log: "the current vLLM instance can use total_gpu_memory (79.22GiB) x
#: gpu_memory_utilization (0.90) = 71.29GiB", vllm-project/vllm PR #12126, 2025-01-16).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: Memory an engine holds beyond weights, KV cache and our per-step activations: CUDA context, cuBLAS workspaces,
#: NCCL / custom all-reduce buffers and CUDA graphs ("non_torch_memory 1.79GiB") plus the profiled peak activation of
#: a max-size prefill chunk ("PyTorch activation peak memory 1.26GiB"): vLLM serving Llama-3-8B on an H100
#: (vllm-project/vllm PR #10511, 2024-12-14). 3 GiB, the sum rounded.
DEFAULT_MEMORY_RESERVE_BYTES = 3 * (1 << 30)


@dataclass(frozen=True)
class Drafter:
    """What proposes the k draft tokens.

    kind 'model': a separate draft model run at the same batch and context as the target, sharded over its own
    `tensor_parallel` devices. kind 'ngram': a model-free drafter (n-gram / prompt lookup: Saxena 2023, vLLM's
    `ngram` method), whose cost on the accelerator is taken as zero. Self-drafting heads on the target, each priced
    from its own op list (`draft_heads`, with sources): 'eagle' (one decoder layer + fc + the target's lm_head per
    draft token), 'mtp' (DeepSeek-V3's module: one target block + projection + shared head), 'medusa' (a residual
    block + its own lm_head per head); 'head' is the EAGLE-style preset with `head_layer_fraction` x the decoder
    layer (the vocabulary projection is always paid).
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
        if self.kind == "ngram":
            return "ngram"
        return self.kind if self.head_layer_fraction == 1 else f"{self.kind}({self.head_layer_fraction:g} layer)"


@dataclass(frozen=True)
class Acceptance:
    """Acceptance of draft tokens: i.i.d. rates `alphas` (one per scenario for a point, several for a sweep) or one
    list of conditional per-position rates."""

    alphas: tuple[float, ...] | None = None
    per_position: tuple[float, ...] | None = None
    source: str | None = None  # where a measured or published acceptance came from (None: given as numbers)
    drafter_kind: str | None = None  # the kind of drafter a preset was measured with ('model', 'head', 'ngram')

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
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    memory_reserve_bytes: float = DEFAULT_MEMORY_RESERVE_BYTES
    quant_kernel: str | None = None  # the kernel running the quantised linears (None: weights are not quantised)

    @property
    def usable_memory_bytes(self) -> float:
        """What the engine leaves for weights, KV cache and step activations on one device: capacity x the usable
        fraction - the reserve (never below 0)."""
        total = self.hardware.memory_capacity_bytes
        return max(total * self.gpu_memory_utilization - self.memory_reserve_bytes, 0.0)

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
        fit = replace(fit, capacity_bytes=self.usable_memory_bytes)
        if self.drafter is not None and self.drafter.kind in HEAD_KINDS + ("head",):
            # a head's own weights (a Medusa head each per draft position); its one layer's KV cache is left out
            kind = "eagle" if self.drafter.kind == "head" else self.drafter.kind
            per_head = get_head_weight_bytes(kind, self.model, w)
            heads = np.maximum(np.asarray(k), 1) if kind == "medusa" else 1
            return replace(fit, weight_bytes=fit.weight_bytes + heads * per_head)
        if self.drafter is None or self.drafter.kind != "model":
            return fit
        d = self.draft_workload
        draft_weights = self.drafter.model.get_weight_bytes(d.weight_dtype, d.quant_group_size) / d.tensor_parallel
        draft_kv = get_kv_cache_bytes(self.drafter.model, b, np.asarray(s, dtype=float) + q, d.kv_dtype,
                                      d.tensor_parallel)
        return MemoryFit(fit.weight_bytes + draft_weights, fit.kv_cache_bytes + draft_kv, fit.activation_bytes,
                         fit.capacity_bytes)

    def get_max_batch(self, context_tokens=None, k=0) -> np.ndarray:
        """Largest batch that fits (0 when even one sequence does not): memory is linear in the batch. Capped at
        2**53 (the largest exact float count), so an absurd capacity cannot wrap around in the int64 cast."""
        one = self.get_memory_fit(1, context_tokens, k)
        free = one.capacity_bytes - one.weight_bytes
        fitting = np.floor(free / (one.kv_cache_bytes + one.activation_bytes))
        return np.clip(fitting, 0, float(1 << 53)).astype(np.int64)


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


def resolve_acceptance_source(acceptance, acceptance_k=None, as_iid: bool = False) -> tuple[Acceptance, list[str]]:
    """A measured or published acceptance (an engine log or metrics file, a preset name, or an already read
    `MeasuredAcceptance`) -> the same `Acceptance` numbers give, with its warnings. Per-position rates are kept
    (k then runs up to the measured length), except where the front end prices a grid of i.i.d. rates (`as_iid`:
    sweeps and charts), which gets the i.i.d. alpha with the same E at the measured k, with a warning."""
    from .acceptance.measured import MeasuredAcceptance
    from .acceptance.sources import load_acceptance

    measured = acceptance if isinstance(acceptance, MeasuredAcceptance) else load_acceptance(acceptance, k=acceptance_k)
    warnings = list(measured.warnings)
    kind = PRESET_DRAFTER_KINDS.get(measured.conditions.get("method"))
    if measured.per_position is not None and not as_iid:
        return Acceptance(per_position=measured.per_position, source=measured.describe(), drafter_kind=kind), warnings
    if measured.per_position is not None:
        warnings.append(f"{measured.source}: this grid prices i.i.d. rates, so the measured per-position acceptance "
                        f"enters as alpha = {measured.iid_alpha:.3f} (the same E = {measured.expected_tokens:.3f} at "
                        f"k = {measured.k})")
    return Acceptance(alphas=(measured.iid_alpha,), source=measured.describe(), drafter_kind=kind), warnings


#: the drafter that a published method's acceptance was measured with (a preset's `method`)
PRESET_DRAFTER_KINDS = {"draft-model": "model", "ngram": "ngram", "eagle": "head", "eagle2": "head",
                        "eagle3": "head", "medusa": "head", "mtp": "head"}


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


def resolve_quant_kernel(quant_kernel, weight_dtype: str, hw: HardwareSpec) -> tuple[str | None, list[str]]:
    """The kernel of quantised weights: as given, else the device's default for the weight dtype, else 'generic'.
    None for float weights (a kernel given for them is refused)."""
    if weight_dtype not in QUANTISED_WEIGHT_DTYPES:
        if quant_kernel is not None:
            raise InputError(f"--quant-kernel {quant_kernel} needs int8, int4 or fp8 weights, not {weight_dtype}")
        return None, []
    name = quant_kernel if quant_kernel is not None else hw.quant_kernels.get(weight_dtype, GENERIC)
    kernel = get_quant_kernel(name, weight_dtype).name
    if hw.measured is not None and quant_kernel is not None:
        return kernel, [f"{hw.name} is priced by its measured profile, which keeps its own rule for narrow weights: "
                        f"--quant-kernel {kernel} is not applied"]
    return kernel, []


def resolve_memory_options(gpu_memory_utilization, memory_reserve_bytes, hw: HardwareSpec | None = None
                           ) -> tuple[float, float]:
    """The usable fraction of device memory (0, 1] and the reserve in bytes (>= 0), defaults resolved here: the
    engine defaults above on GPUs and TPUs; on a CPU or an SRAM-resident ASIC system the whole memory."""
    on_cpu = hw is not None and hw.kind in ("cpu", "asic")  # no GPU serving engine's reservation to copy
    default_utilization, default_reserve = (1.0, 0.0) if on_cpu else (DEFAULT_GPU_MEMORY_UTILIZATION,
                                                                       DEFAULT_MEMORY_RESERVE_BYTES)
    utilization = default_utilization if gpu_memory_utilization is None else gpu_memory_utilization
    if isinstance(utilization, str):
        try:
            utilization = float(utilization)
        except ValueError:
            raise InputError(f"GPU memory utilisation must be a number in (0, 1], got {utilization!r}") from None
    if not (_is_number(utilization) and math.isfinite(utilization) and 0 < utilization <= 1):
        raise InputError(f"GPU memory utilisation must be a number in (0, 1], got {utilization!r}")
    reserve = default_reserve if memory_reserve_bytes is None else memory_reserve_bytes
    if not (_is_number(reserve) and math.isfinite(reserve) and reserve >= 0):
        raise InputError(f"memory reserve must be a non-negative number of bytes, got {reserve!r}")
    return float(utilization), float(reserve)


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
        return [f"infeasible: needs {need / GIGA:.1f} GB but {hw.name} leaves {scenario.usable_memory_bytes / GIGA:.1f} GB "
                f"of its {hw.memory_capacity_bytes / GIGA:.1f} GB usable (max batch at this context: {max_batch}); times "
                "are shown as if it fitted"]
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
    gpu_memory_utilization=None,
    memory_reserve_bytes=None,
    quant_kernel: str | None = None,
    acceptance=None,
    acceptance_k=None,
    acceptance_as_iid: bool = False,
) -> Scenario:
    """Resolve every user input into one Scenario (see the module docstring).

    batch and ctx are one value or several (a grid); ctx accepts 4096, '4k', '32K', '128k', '1M'. `k` is the draft
    length to report (default: the best); `k_values` the draft lengths to price (default 0..16, or 0..the number of
    per-position rates). `alpha` is one i.i.d. acceptance rate or several; `alpha_per_position` (a list or
    '0.9,0.8') the conditional rate per draft position instead; `acceptance` (an engine log or metrics file, a preset
    name, or a `MeasuredAcceptance`) a measured or published acceptance instead of either, `acceptance_k` the
    engine's draft length where its file does not state it (see `resolve_acceptance_source`).
    `speculative=False` leaves the drafter out.
    `gpu_memory_utilization` (default 0.9, vLLM's) and `memory_reserve_bytes` (default 3 GiB; on a CPU 1 and 0) set
    what memory fit and max batch may use: capacity x utilisation - reserve.
    """
    warnings: list[str] = []
    for name, flag in (("allow_long_context", allow_long_context), ("speculative", speculative),
                       ("extra_draft_pass", extra_draft_pass)):
        if not isinstance(flag, (bool, np.bool_)):  # a string such as "no" would silently mean True
            raise InputError(f"{name} must be True or False, got {flag!r}")
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
    if attention not in ATTENTION_MODES:
        raise InputError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got {attention!r}")
    tp = check_tensor_parallel(model_spec, check_positive_int(tp, "--tp", 4096), hw_spec)
    group = check_positive_int(quant_group_size, "quantisation group size", 1 << 20)
    workload = Workload(batch=int(batch_axis[0]), context_tokens=int(context_axis[0]), weight_dtype=weight,
                        kv_dtype=kv, activation_dtype=activation, attention=attention, tensor_parallel=tp,
                        quant_group_size=group)
    timing = get_timing_model(hw_spec)
    kernel, kernel_warnings = resolve_quant_kernel(quant_kernel, weight, hw_spec)
    warnings += kernel_warnings
    if kernel is not None and isinstance(timing, DatasheetTiming):
        timing = timing.with_quant_kernel(get_quant_kernel(kernel, weight))
    utilization, reserve = resolve_memory_options(gpu_memory_utilization, memory_reserve_bytes, hw_spec)
    scenario = Scenario(hw_spec, model_spec, workload, batch_axis, context_axis, timing,
                        k_values=np.asarray([0]), extra_draft_pass=bool(extra_draft_pass),
                        gpu_memory_utilization=utilization, memory_reserve_bytes=reserve, quant_kernel=kernel)
    if speculative:
        if acceptance is None:
            if acceptance_k is not None:
                raise InputError("acceptance_k (--acceptance-k) is the draft length of an --acceptance file; none given")
            acceptance = resolve_acceptance(alpha, alpha_per_position)
        elif alpha is not None or alpha_per_position is not None:
            raise InputError("give a measured or preset acceptance or alpha / alpha_per_position, not both")
        else:
            acceptance, acceptance_warnings = resolve_acceptance_source(acceptance, acceptance_k, acceptance_as_iid)
            warnings += acceptance_warnings
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
        if acceptance.drafter_kind not in (None, spec_drafter.kind):
            warnings.append(f"the acceptance was measured with a {acceptance.drafter_kind} drafter but a "
                            f"{spec_drafter.kind} drafter ({spec_drafter.name}) is priced: pass --drafter "
                            f"{acceptance.drafter_kind} to price the drafter that was measured")
        scenario = replace(scenario, drafter=spec_drafter, draft_workload=draft_workload, acceptance=acceptance,
                           k_values=ks, k=chosen)
    else:  # the charts price a decode and a verify step over batch x context without a drafter
        _check_grid_size(batch_axis, context_axis, np.asarray([0, 1]), 1)
    _check_finite_prices(scenario)
    warnings += _memory_warnings(scenario)
    warnings += _pricing_warnings(scenario)
    return replace(scenario, warnings=tuple(dict.fromkeys(warnings)))


def _check_finite_prices(scenario: Scenario) -> None:
    """Refuse a deployment whose largest steps price to an infinite or undefined time.

    Every spec number is finite and positive, but a hand-written spec or profile can still be off by hundreds of
    orders of magnitude (`1.0e-300` B/s, a coefficient of 1e300 s per byte): the times then overflow and every
    output would carry Infinity or NaN. Step time grows with batch, context and new tokens, so pricing the largest
    prefill and verify steps of the grid (in one broadcast evaluation) and the largest draft step decides for all of
    them; a speculative step sums up to k + 2 of them (k drafts, the verify, gpt-fast's extra draft pass), so that
    sum must stay finite too.
    """
    from .step import get_workload_step  # here, not at the top: keeps this change apart from the import block

    w, b, s = scenario.workload, scenario.batch.max(), scenario.context_tokens.max()
    q = int(scenario.k_values.max()) + 1
    steps = [(scenario.model, w, np.asarray([max(int(s), 1), q]), np.asarray([0, s]))]  # prefill, verify
    if scenario.drafter is not None and scenario.drafter.kind == "model":
        steps.append((scenario.drafter.model, scenario.draft_workload, 1, s + q))
    for model, workload, new_tokens, context in steps:
        with np.errstate(over="ignore", invalid="ignore"):  # the one line below says it, not numpy's warnings
            step = get_workload_step(scenario.hardware, model, workload, new_tokens, scenario.timing, context, b)
            worst = max(float(np.max(step.step_time_s)), float(np.max(step.roofline_step_time_s)))
        if not math.isfinite(worst * (q + 1)):
            raise InputError(
                f"{scenario.hardware.name} prices a step of {model.name} (batch {b}, context up to {s}) at "
                f"{worst:.3g} s: a number in the hardware spec or profile is far outside any physical range")


def _pricing_warnings(scenario: Scenario) -> list[str]:
    """What the timing model says about the largest steps the scenario prices (e.g. outside a measured range)."""
    w = scenario.workload
    q = int(scenario.k_values.max()) + 1
    ops = get_step_ops(scenario.model, scenario.batch.max(), scenario.context_tokens.max(), q, w.weight_dtype,
                       w.kv_dtype, w.activation_dtype, w.attention, True, w.tensor_parallel, w.quant_group_size)
    return scenario.timing.get_warnings(ops, w.activation_dtype)


__all__ = [
    "Scenario", "Drafter", "Acceptance", "build_scenario", "resolve_dtypes", "resolve_drafter", "resolve_acceptance",
    "resolve_acceptance_source",
    "check_positive_int", "check_k", "check_alpha", "parse_context", "DEFAULT_DRAFT", "DEFAULT_ALPHA", "MAX_K",
    "MAX_K_LIMIT", "DRAFTER_KINDS", "DEFAULT_HEAD_LAYER_FRACTION", "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MEMORY_RESERVE_BYTES", "resolve_memory_options", "resolve_quant_kernel",
]
