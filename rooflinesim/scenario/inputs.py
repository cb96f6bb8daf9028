"""The inputs of a scenario, checked and resolved one by one: the default values, the axes (batch, context, draft
lengths), acceptance (i.i.d., per position, or from an engine log / a preset), dtypes, the drafter and its tensor
parallelism, the quantised kernel and the memory options. `scenario.build_scenario` composes them; nothing else
should call them with user input. Every problem is a one-line `InputError`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..specs.registry import get_short_name, list_models, load_model
from ..specs.hardware import HardwareSpec
from ..errors import InputError
from ..specs.model import ModelSpec
from ..specs.workload import Workload
from ..step import check_tensor_parallel
from ..timing.quant_kernels import GENERIC, get_quant_kernel
from ..units import UnitError, format_count, normalize_dtype, parse_count, parse_float_list


#: One set of defaults for every command (predict, sweep, serve, plot) and the Python API; each output lists the
#: ones it used on its "assumed:" line (`Scenario.assumed`).
DEFAULT_HARDWARE = "a100"
DEFAULT_MODEL = "llama-3.1-8b"
#: weights (and so the KV cache and activations) in bf16 unless a dtype is given
DEFAULT_WEIGHT_DTYPE = "bf16"
DEFAULT_ALPHA = 0.8
#: a sweep prices the default acceptance and a pessimistic one
DEFAULT_SWEEP_ALPHAS = (0.6, DEFAULT_ALPHA)
#: the acceptance rates `plot k` (speedup vs draft length) draws
DEFAULT_CHART_ALPHAS = (0.6, 0.7, DEFAULT_ALPHA, 0.9)
#: predict's point and the sweep's grid when none is given
DEFAULT_BATCH = 1
DEFAULT_CONTEXT_TOKENS = 4096
DEFAULT_SWEEP_BATCH = "1..256"
DEFAULT_SWEEP_CONTEXT = "1k..128k"
#: a sweep models contexts above the model's maximum (with a warning) rather than refusing the whole grid
SWEEP_ALLOWS_LONG_CONTEXT = True
#: serve's and `plot serve`'s workload when none is given
DEFAULT_SERVE_REQUESTS = 1000
#: serve's open-loop request rate when neither --rate, --concurrency nor a trace is given (requests per second)
DEFAULT_SERVE_RATE_PER_S = 4.0
#: a serving instance's scheduling when neither the command nor its engine profile sets it (`serve.ServeConfig`)
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # vLLM V1's default for online serving with chunked prefill
DEFAULT_BLOCK_SIZE = 16  # vLLM's default KV block size (tokens)
DEFAULT_PROMPT_TOKENS = "1024"
DEFAULT_OUTPUT_TOKENS = "128"
#: the draft lengths every command prices by default: 0..DEFAULT_K_MAX (the best is reported); no draft length
#: beyond MAX_K_LIMIT is priced anywhere.
DEFAULT_K_MAX = 8
MAX_K = DEFAULT_K_MAX
MAX_K_LIMIT = 64
#: an EAGLE/Medusa-style head costs about one decoder layer per draft token (see `Drafter`)
DEFAULT_HEAD_LAYER_FRACTION = 1.0
#: a separate draft model drafts unless another drafter kind is given
DEFAULT_DRAFTER = "model"
DRAFTER_KINDS = ("model", "ngram", "head", "eagle", "eagle3", "medusa", "mtp", "self")
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
#: The engine every command prices unless told otherwise (`engines/*.yaml`, docs/engines.md): vLLM V1, the engine
#: `serve`'s scheduler follows and the most deployed open engine. `ideal` prices bare kernels (the model before
#: engine profiles); every output names the engine it priced.
DEFAULT_ENGINE = "vllm-v1"


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
    #: kind 'self' (the target drafting for itself, `scenario.drafting`): the KV tokens its draft steps read
    #: (StreamingLLM / SnapKV budget; None: the whole context) and the share of the target's layers they run
    kv_budget_tokens: int | None = None
    layer_fraction: float = 1.0
    #: an EAGLE-3 head's own shapes from its config.json (`ops.draft_heads.HeadConfig`; None: the defaults)
    head_config: object | None = None
    #: kind 'ngram': the share of sequences that find an n-gram match and draft in a step; the others propose nothing
    #: and verify one token (vLLM's NgramProposer); 1: every sequence drafts k
    match_fraction: float = 1.0

    @property
    def name(self) -> str:
        if self.kind == "model":
            return get_short_name(self.model)
        if self.kind == "self":
            parts = ([f"kv {self.kv_budget_tokens}"] if self.kv_budget_tokens is not None else []) + (
                [f"{self.layer_fraction:g} of layers"] if self.layer_fraction != 1 else [])
            return f"self({', '.join(parts)})" if parts else "self"
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
    #: a measured acceptance's confidence interval (Clopper-Pearson per position, or the i.i.d. rate's): the low and
    #: high rates, in the form of `alphas` (one pair) or of `per_position` (a pair per position); None: given as numbers
    alphas_ci: tuple[float, float] | None = None
    per_position_ci: tuple[tuple[float, float], ...] | None = None

    @property
    def max_k(self) -> int:
        return len(self.per_position) if self.per_position is not None else MAX_K_LIMIT



def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_positive_int(value, what: str, maximum: int | None = None) -> int:
    """An integer >= 1 given as int or numeric string; 2.5, True, NaN and 'abc' are refused, not rounded."""
    if isinstance(value, str) and value.strip().lstrip("+").isdecimal():
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
        try:
            parsed = _parse_rates(alpha_per_position, "acceptance rate")
        except InputError as exc:  # name the option: "no acceptance rate given" alone does not say which
            raise InputError(f"alpha_per_position: {exc}") from None
        rates = tuple(check_alpha(a, "per-position acceptance rate") for a in parsed)
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
    from ..acceptance.measured import MeasuredAcceptance
    from ..acceptance.sources import load_acceptance

    measured = acceptance if isinstance(acceptance, MeasuredAcceptance) else load_acceptance(acceptance, k=acceptance_k)
    warnings = list(measured.warnings)
    kind = PRESET_DRAFTER_KINDS.get(measured.conditions.get("method"))
    if measured.per_position is not None and not as_iid:
        return Acceptance(per_position=measured.per_position, source=measured.describe(), drafter_kind=kind,
                          per_position_ci=measured.per_position_ci), warnings
    if measured.per_position is not None:
        warnings.append(f"{measured.source}: this grid prices i.i.d. rates, so the measured per-position acceptance "
                        f"enters as alpha = {measured.iid_alpha:.3f} (the same E = {measured.expected_tokens:.3f} at "
                        f"k = {measured.k})")
    return Acceptance(alphas=(measured.iid_alpha,), source=measured.describe(), drafter_kind=kind,
                      alphas_ci=measured.iid_alpha_ci), warnings


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
    kind = drafter or DEFAULT_DRAFTER
    if kind not in DRAFTER_KINDS:
        raise InputError(f"unknown drafter kind {kind!r}; use one of {', '.join(DRAFTER_KINDS)}")
    if kind != "model":
        if not (_is_number(head_layer_fraction) and math.isfinite(head_layer_fraction) and head_layer_fraction > 0):
            raise InputError(f"head layer fraction must be a positive finite number, got {head_layer_fraction!r}")
        return Drafter(kind, head_layer_fraction=float(head_layer_fraction)), None, []
    draft_model = load_model(draft) if draft is not None else get_default_draft(target)
    if draft_model is None:
        raise InputError(no_default_draft_message(target))
    warnings = []
    same_family = target.family is not None and draft_model.family == target.family
    if draft_model.vocab_size != target.vocab_size and not same_family:
        warnings.append(f"draft {draft_model.name} has vocabulary {draft_model.vocab_size} but target {target.name} "
                        f"has {target.vocab_size}: speculation needs a shared tokenizer, and these are not known to "
                        f"share one (family {draft_model.family or 'unknown'} vs {target.family or 'unknown'})")
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


def get_default_draft(target: ModelSpec) -> ModelSpec | None:
    """The smallest shipped model of the target's tokenizer family (`ModelSpec.family`) that is smaller than the
    target; None where the family is unknown or has no smaller member."""
    if target.family is None:
        return None
    candidates = [m for m in list_models() if m.family == target.family and m.params < target.params]
    return min(candidates, key=lambda m: m.params) if candidates else None


def no_default_draft_message(target: ModelSpec) -> str:
    family = (f"no smaller shipped model shares its tokenizer (family {target.family})" if target.family else
              "its tokenizer family is unknown")
    return (f"{target.name} has no default draft model: {family}. Pass --draft NAME_OR_CONFIG (a smaller model with "
            "the same tokenizer), or --drafter ngram / eagle / medusa / mtp, or --no-speculation")


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




def check_draft_first_step_tokens(value, extra_draft_pass: bool) -> int:
    """1 (the default) or 2 (the first draft step re-reads the last two committed tokens); 2 and gpt-fast's extra draft
    pass are two answers to the same catch-up, so not both."""
    if isinstance(value, bool) or value not in (1, 2):
        raise InputError(f"the first draft step reads 1 or 2 tokens, got {value!r}")
    if value == 2 and extra_draft_pass:
        raise InputError("a two-token first draft step and the extra draft pass both catch up after k accepted "
                         "drafts: choose one")
    return int(value)


def resolve_engine(engine):
    """The EngineSpec for a name, alias, path or spec (None: DEFAULT_ENGINE); an unknown name is a one-line error
    that suggests close ones (`specs.registry.load_engine`)."""
    from ..specs.base import SpecError
    from ..specs.registry import load_engine

    if engine is None:
        engine = DEFAULT_ENGINE
    if not isinstance(engine, str) and not hasattr(engine, "launch"):
        raise InputError(f"engine must be a name such as {DEFAULT_ENGINE!r}, got {engine!r}")
    try:
        return load_engine(engine)
    except SpecError as exc:
        raise InputError(str(exc)) from None

