"""One resolved scenario: the deployment and the workload grid, with every default, check and warning decided here.

`build_scenario` is the only place that turns user inputs (names, paths, strings, numbers) into the objects the
model prices: the hardware spec with its calibration applied, the target model, the drafter and its own tensor
parallelism, dtypes, attention kind, quantisation group, the batch and context axes, the acceptance and the draft
lengths. `predict`, `sweep`, every chart, `validate` and any later front end take a `Scenario`; none of them
re-derives a default. Warnings travel with the scenario (`Scenario.warnings`) and every front end shows them.

Every problem with the inputs is an `InputError` (or a `SpecError` for a file) with a one-line message.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..ops.draft_heads import HEAD_KINDS, get_head_weight_bytes
from ..ops.step_ops import ATTENTION_MODES, get_kv_cache_bytes
from ..specs.registry import load_hardware, load_model
from ..specs.hardware import HardwareSpec
from ..errors import InputError
from ..specs.model import ModelSpec
from ..specs.workload import Workload
from ..step import MemoryFit, StepCost, check_tensor_parallel, get_memory_fit, get_step_cost
from ..timing import DatasheetTiming, TimingModel, get_timing_model
from ..timing.quant_kernels import get_quant_kernel
from ..timing.engine import with_engine
from ..specs.engine import EngineSpec
from ..units import format_count

from ..acceptance.trees import TreeShape
from .drafting import get_self_draft_kv_bytes, resolve_any_drafter, resolve_tree, with_ngram_match_fraction
from .inputs import (
    DEFAULT_ALPHA, DEFAULT_BATCH, DEFAULT_CONTEXT_TOKENS, DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_HARDWARE,
    DEFAULT_MEMORY_RESERVE_BYTES, DEFAULT_MODEL, DEFAULT_WEIGHT_DTYPE, MAX_K, Acceptance,
    Drafter, _as_list, check_batch_axis, check_context_axis,
    check_draft_first_step_tokens, check_k, check_positive_int, resolve_acceptance, resolve_acceptance_source,
    resolve_dtypes, resolve_memory_options, resolve_quant_kernel,
)
from .inputs import resolve_engine
from .groups import DEFAULT, Deployment, Memory, Precision, Sampling, Speculation, get_scenario_options
from .implementation import resolve_implementation
from .tree_scenario import with_tree
from .checks import check_finite_prices, check_grid_size, get_memory_warnings, get_pricing_warnings


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
    #: tokens the first draft step of an iteration reads: 1, or 2 when the loop re-reads the last two committed tokens
    #: so that a sequence whose k drafts were all accepted catches up without gpt-fast's extra pass
    draft_first_step_tokens: int = 1
    warnings: tuple[str, ...] = ()
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    memory_reserve_bytes: float = DEFAULT_MEMORY_RESERVE_BYTES
    quant_kernel: str | None = None  # the kernel running the quantised linears (None: weights are not quantised)
    #: a draft tree (`acceptance.trees.TreeShape`; None: a chain). With one, k counts the tree's verified draft tokens
    #: (SGLang's speculative_num_draft_tokens - 1) and the acceptance rates are top-1 rates per depth
    tree: TreeShape | None = None
    #: the engine whose per-iteration costs `timing` carries (`timing.engine`); None only for a Scenario built by
    #: hand, which then prices bare kernels like the ideal engine
    engine: EngineSpec | None = None

    @property
    def engine_name(self) -> str:
        """The engine this scenario prices, as outputs name it ('ideal' for bare kernels)."""
        return "ideal" if self.engine is None else self.engine.short_name
    #: every input the user did not give and the value assumed for it, e.g. {"alpha": "0.8"}: printed on each
    #: output's "assumed:" line and as JSON `assumed`
    assumed: dict = field(default_factory=dict)
    #: what was already priced for this scenario (`remember`); not an input, so `replace` (e.g. `at`) starts an empty
    #: one
    _priced: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def remember(self, key: str, compute):
        """`compute()`, worked out once per scenario: steps and weights that depend only on what the scenario fixes
        (its deployment, drafter and grid) and that the checks and the pricing read more than once."""
        if key not in self._priced:
            self._priced[key] = compute()
        return self._priced[key]

    def get_largest_steps(self) -> tuple[StepCost, StepCost]:
        """The target's largest prefill and verify steps: the prompt of the largest context (context 0, the last
        token's logits, as `predict` prices a prefill) and k_max + 1 tokens on the largest context, both at the
        largest batch. The build checks and warns about these (`scenario.checks`); for a point they are `predict`'s
        prefill and, without speculation (k_max = 0), its decode. Priced once per scenario."""
        return self.remember("largest steps", self._price_largest_steps)

    def _price_largest_steps(self) -> tuple[StepCost, StepCost]:
        b, s = int(self.batch.max()), int(self.context_tokens.max())
        q = int(self.k_values.max()) + 1
        hw, model, w, timing = self.hardware, self.model, self.workload, self.timing
        with np.errstate(over="ignore", invalid="ignore"):  # a spec far off pricing to inf is refused by a check
            prefill = get_step_cost(hw, model, w, max(s, 1), timing, context_tokens=0, batch=b,
                                    logits_for_all_tokens=False)
            verify = get_step_cost(hw, model, w, q, timing, context_tokens=s, batch=b)
        return prefill, verify

    def get_assumed_line(self) -> str:
        """`assumed: alpha 0.8, draft qwen2.5-0.5b (...)`, or '' when the user gave every input."""
        return format_assumed(self.assumed)

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
        fit = get_memory_fit(self.hardware, self.model, w, q, b, s)
        # not `dataclasses.replace`: its generic copy costs more than a new fit
        fit = MemoryFit(fit.weight_bytes, fit.kv_cache_bytes, fit.activation_bytes, self.usable_memory_bytes)
        if self.drafter is not None and self.drafter.kind in HEAD_KINDS + ("head",):
            # a head's own weights (a Medusa head each per draft position); its one layer's KV cache is left out
            kind = "eagle" if self.drafter.kind == "head" else self.drafter.kind
            per_head = self.remember(f"{kind} head weight bytes", lambda: get_head_weight_bytes(
                kind, self.model, w, head=self.drafter.head_config))
            heads = np.maximum(np.asarray(k), 1) if kind == "medusa" else 1
            if kind == "medusa" and self.tree is not None:  # one head per depth of the tree, whatever its width
                heads = self.tree.static.depth if self.tree.static is not None else self.tree.steps
            return MemoryFit(fit.weight_bytes + heads * per_head, fit.kv_cache_bytes, fit.activation_bytes,
                             fit.capacity_bytes)
        if self.drafter is not None and self.drafter.kind == "self":
            return MemoryFit(fit.weight_bytes, fit.kv_cache_bytes + get_self_draft_kv_bytes(self, b, s, q),
                             fit.activation_bytes, fit.capacity_bytes)
        if self.drafter is None or self.drafter.kind != "model":
            return fit
        d = self.draft_workload
        draft_weights = self.drafter.model.get_weight_bytes(d.weight_dtype, d.quant_group_size) / d.tensor_parallel
        draft_kv = get_kv_cache_bytes(self.drafter.model, d, b, np.asarray(s, dtype=float) + q)
        return MemoryFit(fit.weight_bytes + draft_weights, fit.kv_cache_bytes + draft_kv, fit.activation_bytes,
                         fit.capacity_bytes)

    def get_max_batch(self, context_tokens=None, k=0) -> np.ndarray:
        """The one max-batch function: the largest batch whose memory fit (`get_memory_fit`: weights, KV cache for
        S + k + 1 positions, the verify step's activations, a draft's weights and cache) stays within the *usable*
        memory (`usable_memory_bytes`: capacity x gpu_memory_utilization - memory_reserve_bytes), 0 when even one
        sequence does not fit. The whole device is `gpu_memory_utilization=1.0, memory_reserve_bytes=0`. Memory is
        linear in the batch, so this is floor((usable - weights) / bytes per sequence), capped at 2**53 (the largest
        exact float count) so an absurd capacity cannot wrap around in the int64 cast."""
        one = self.get_memory_fit(1, context_tokens, k)
        free = one.capacity_bytes - one.weight_bytes
        fitting = np.floor(free / (one.kv_cache_bytes + one.activation_bytes))
        return np.clip(fitting, 0, float(1 << 53)).astype(np.int64)


def format_assumed(assumed: dict) -> str:
    """The "assumed:" line of `Scenario.assumed` ({input: value as text}; '' when nothing was assumed)."""
    return ("assumed: " + "; ".join(f"{name.replace('_', ' ')} {value}" for name, value in assumed.items())
            if assumed else "")


def build_scenario(
    hw: str | HardwareSpec | None = None,
    model: str | ModelSpec | None = None,
    batch=None,
    ctx=None,
    *,
    deployment: Deployment | None = None,
    precision: Precision | None = None,
    speculation: Speculation | None = None,
    memory: Memory | None = None,
    sampling: Sampling | bool = DEFAULT,
    assumed: dict | None = None,
    **flat,
) -> Scenario:
    """Resolve every user input into one Scenario (see the module docstring).

    `batch` and `ctx` are one value or several (a grid); ctx accepts 4096, '4k', '32K', '128k', '1M'. Every other
    input comes in its group (`scenario.groups`: `Deployment`, `Precision`, `Speculation`, `Memory`, `Sampling`, each
    field documented there with its unit and its one default); `hw` and `model` are `Deployment`'s first two fields.
    Flat keywords (`k=3`, `draft="llama-3.2-1b"`, `sampling=True`, ...; `groups.FLAT_OPTIONS`) are one convenience,
    mapped onto the groups by `groups.get_scenario_options` (a flat keyword wins over its group's field).
    Every input left at None takes the one default of `scenario.inputs` and is listed in `Scenario.assumed` (with
    `assumed`, what a front end assumed itself, e.g. a sweep's grid).
    """
    if hw is not None:
        flat["hw"] = hw
    if model is not None:
        flat["model"] = model
    options = get_scenario_options(deployment, precision, speculation, memory, sampling, **flat)
    d, p, s, m = options.deployment, options.precision, options.speculation, options.memory
    hw, model, tp, draft_tp, calibration, engine, attention = (d.hardware, d.model, d.tp, d.draft_tp, d.calibration,
                                                               d.engine, d.attention)
    weight_dtype, kv_dtype, activation_dtype, quant_group_size, quant_kernel = (
        p.weight_dtype, p.kv_dtype, p.activation_dtype, p.quant_group_size, p.quant_kernel)
    speculative, draft, drafter, alpha, alpha_per_position, acceptance, acceptance_k, acceptance_as_iid = (
        s.enabled, s.draft, s.drafter, s.alpha, s.alpha_per_position, s.acceptance, s.acceptance_k,
        s.acceptance_as_iid)
    k, k_values, tree, draft_kv_budget, draft_layer_fraction, head_layer_fraction = (
        s.k, s.k_values, s.tree, s.draft_kv_budget, s.draft_layer_fraction, s.head_layer_fraction)
    extra_draft_pass, draft_first_step_tokens = s.extra_draft_pass, s.draft_first_step_tokens
    ngram_match_fraction, implementation = s.ngram_match_fraction, d.implementation
    gpu_memory_utilization, memory_reserve_bytes, allow_long_context = (
        m.gpu_memory_utilization, m.memory_reserve_bytes, m.allow_long_context)
    sampling = options.sampling.priced
    warnings: list[str] = []
    assumed = dict(assumed or {})
    if hw is None:
        hw = assumed["hardware"] = DEFAULT_HARDWARE
    if model is None:
        model = assumed["model"] = DEFAULT_MODEL
    if batch is None:
        batch = assumed["batch"] = DEFAULT_BATCH
    if ctx is None:
        ctx = DEFAULT_CONTEXT_TOKENS
        assumed["context"] = f"{format_count(ctx)} tokens"
    if weight_dtype is None:
        weight_dtype = assumed["weights"] = DEFAULT_WEIGHT_DTYPE
    for name, flag in (("allow_long_context", allow_long_context), ("speculative", speculative),
                       ("extra_draft_pass", extra_draft_pass), ("sampling", sampling)):
        if not isinstance(flag, (bool, np.bool_)):  # a string such as "no" would silently mean True
            raise InputError(f"{name} must be True or False, got {flag!r}")
    hw_spec = load_hardware(hw)
    if calibration is not None:
        from ..specs.profiles import apply_calibration

        hw_spec, calibration_warnings = apply_calibration(hw_spec, calibration)
        warnings += calibration_warnings
    if hw_spec.measured is not None:  # a profile from another host is legitimate, but say whose numbers these are
        from ..specs.profiles import get_host_notice

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
                        quant_group_size=group, sampling=bool(sampling),
                        implementation=resolve_implementation(implementation, hw_spec, model_spec, warnings))
    timing = get_timing_model(hw_spec)
    kernel, kernel_warnings = resolve_quant_kernel(quant_kernel, weight, hw_spec)
    warnings += kernel_warnings
    if kernel is not None and isinstance(timing, DatasheetTiming):
        timing = timing.with_quant_kernel(get_quant_kernel(kernel, weight))
    engine_spec = resolve_engine(engine)
    if hw_spec.kind != "gpu" and not engine_spec.is_ideal:
        # engine profiles describe GPU serving engines (CUDA graphs, kernel launches): a CPU, TPU or ASIC is priced
        # by its own spec alone
        if engine is not None:
            warnings.append(f"engine {engine_spec.short_name} describes a GPU engine: {hw_spec.name} ({hw_spec.kind}) "
                            "is priced with engine ideal (bare kernels)")
        engine_spec = resolve_engine("ideal")
    if engine is None:
        assumed["engine"] = engine_spec.short_name
    timing = with_engine(timing, engine_spec)
    utilization, reserve = resolve_memory_options(gpu_memory_utilization, memory_reserve_bytes, hw_spec)
    if gpu_memory_utilization is None:
        assumed["gpu_memory_utilization"] = f"{utilization:g}"
    if memory_reserve_bytes is None:
        assumed["memory_reserve"] = f"{reserve / (1 << 30):g} GiB"
    scenario = Scenario(hw_spec, model_spec, workload, batch_axis, context_axis, timing,
                        k_values=np.asarray([0]), extra_draft_pass=bool(extra_draft_pass),
                        draft_first_step_tokens=check_draft_first_step_tokens(draft_first_step_tokens,
                                                                              extra_draft_pass),
                        gpu_memory_utilization=utilization, memory_reserve_bytes=reserve, quant_kernel=kernel,
                        engine=engine_spec)
    tree_shape = resolve_tree(tree)
    if tree_shape is not None and not speculative:
        raise InputError("a draft tree needs speculation on")
    if ngram_match_fraction is not None and (tree_shape is not None or not speculative):
        raise InputError("an n-gram match fraction applies to a speculative chain drafted by --drafter ngram")
    if speculative and tree_shape is not None:
        scenario = with_tree(scenario, tree_shape, model_spec, hw_spec, workload, warnings, draft, drafter,
                              head_layer_fraction, draft_tp, alpha, alpha_per_position, acceptance, acceptance_k, k,
                              k_values, bool(extra_draft_pass), batch_axis, context_axis, draft_kv_budget,
                              draft_layer_fraction, bool(allow_long_context))
    elif speculative:
        if acceptance is None:
            if acceptance_k is not None:
                raise InputError("acceptance_k (--acceptance-k) is the draft length of an --acceptance file; none given")
            acceptance = resolve_acceptance(alpha, alpha_per_position)
            if alpha is None and alpha_per_position is None:
                assumed["alpha"] = f"{DEFAULT_ALPHA:g} (acceptance rate: measure yours with 'rooflinesim acceptance')"
        elif alpha is not None or alpha_per_position is not None:
            raise InputError("give a measured or preset acceptance or alpha / alpha_per_position, not both")
        else:
            acceptance, acceptance_warnings = resolve_acceptance_source(acceptance, acceptance_k, acceptance_as_iid)
            warnings += acceptance_warnings
        chosen = None if k is None else check_k(k)
        if k_values is None:
            top = min(MAX_K, acceptance.max_k) if chosen is None else max(min(MAX_K, acceptance.max_k), chosen)
            ks = np.arange(top + 1, dtype=np.int64)
            if chosen is None:
                assumed["k"] = f"the best of 0..{top}"
        else:
            ks = np.asarray(sorted({check_k(x) for x in _as_list(k_values)}), dtype=np.int64)
            if ks.size == 0:
                raise InputError("k needs at least one value")
        if ks[-1] > acceptance.max_k:
            raise InputError(f"k = {int(ks[-1])} drafts need {int(ks[-1])} per-position acceptance rates, got "
                             f"{acceptance.max_k}")
        check_grid_size(batch_axis, context_axis, ks, len(acceptance.alphas or (0,)))
        spec_drafter, draft_workload, drafter_warnings = resolve_any_drafter(
            model_spec, hw_spec, workload, draft, drafter, head_layer_fraction, draft_tp, draft_kv_budget,
            draft_layer_fraction, context_axis, allow_long_context)
        warnings += drafter_warnings
        spec_drafter = with_ngram_match_fraction(spec_drafter, ngram_match_fraction)
        if draft is None and spec_drafter.kind == "model":
            assumed["draft"] = (f"{spec_drafter.name} (the smallest shipped {spec_drafter.model.family} model; "
                                "--draft to change)")
        if scenario.draft_first_step_tokens != 1 and spec_drafter.kind != "model":
            raise InputError(f"a first draft step of {scenario.draft_first_step_tokens} tokens needs a draft model, "
                             f"not a {spec_drafter.kind} drafter")
        if acceptance.drafter_kind not in (None, spec_drafter.kind):
            warnings.append(f"the acceptance was measured with a {acceptance.drafter_kind} drafter but a "
                            f"{spec_drafter.kind} drafter ({spec_drafter.name}) is priced: pass --drafter "
                            f"{acceptance.drafter_kind} to price the drafter that was measured")
        scenario = replace(scenario, drafter=spec_drafter, draft_workload=draft_workload, acceptance=acceptance,
                           k_values=ks, k=chosen)
    else:  # the charts price a decode and a verify step over batch x context without a drafter
        check_grid_size(batch_axis, context_axis, np.asarray([0, 1]), 1)
    check_finite_prices(scenario)
    warnings += get_memory_warnings(scenario)
    warnings += get_pricing_warnings(scenario)
    resolved = replace(scenario, warnings=tuple(dict.fromkeys(warnings)), assumed=assumed)
    resolved._priced.update(scenario._priced)  # the same deployment and grid: the checked steps stand
    return resolved


__all__ = [
    "Scenario", "build_scenario", "format_assumed",
]

