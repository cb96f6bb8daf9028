"""Drafting shapes beyond a chain, resolved for the scenario builder: draft trees (`--tree`) and their acceptance.

A tree's acceptance is one top-1 rate per depth a_d (an i.i.d. `alpha`, per-depth rates given as
`alpha_per_position`, or fitted to a measured accept length), spread over sibling ranks by the geometric model of
`acceptance.trees` (p[d, r] = a_d (1 - a_d)^r). A measured accept length (an SGLang log, a tree preset) is fitted on
the tree it was measured with where the source states it (SGLang's server_args), else on the priced tree.
Every problem is a one-line `InputError`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..acceptance.trees import TreeShape, fit_alpha_to_accept_length, get_rank_rates, parse_tree
from ..errors import InputError
from ..ops.draft_heads import HeadConfig
from ..ops.step_ops import get_kv_cache_bytes

#: the warnings of a chain-priced tree measurement that a priced tree makes moot
_CHAIN_STAND_IN_MARKERS = ("wider verify step is not priced", "prices it as a chain",
                           "per-position acceptance is taken as i.i.d.")


def resolve_tree(tree) -> TreeShape | None:
    """`--tree`: None, a `TreeShape`, 'steps,topk,num_draft_tokens' or a JSON list of paths."""
    if tree is None or isinstance(tree, TreeShape):
        return tree
    try:
        return parse_tree(tree)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def get_tree_depth(shape: TreeShape) -> int:
    return shape.static.depth if shape.static is not None else shape.steps


def get_tree_ranks(shape: TreeShape) -> int:
    """Sibling ranks the shape can hold (the columns of its rank-rate matrix)."""
    return (shape.static.max_rank if shape.static is not None else shape.topk - 1) + 1


def get_tree_rank_rates(shape: TreeShape, alpha=None, per_depth=None) -> np.ndarray:
    """p[d, r] for the shape from one rate (every depth) or per-depth rates."""
    depth = get_tree_depth(shape)
    rates = np.full(depth, float(alpha)) if per_depth is None else np.asarray(per_depth[:depth], dtype=float)
    return get_rank_rates(rates, get_tree_ranks(shape) - 1)


def get_tree_expected_tokens(shape: TreeShape, k, alpha=None, per_depth=None) -> np.ndarray:
    """E per step at k verified tree tokens (arrays broadcast; alpha an array of rates or None with per-depth
    rates): one tree per distinct rate, k = 0 is plain decoding."""
    k = np.asarray(k)
    top = int(k.max()) if k.size else 0
    if per_depth is not None:
        return shape.expected_tokens(k, get_tree_rank_rates(shape, per_depth=per_depth))
    alpha = np.asarray(alpha, dtype=float)
    values, inverse = np.unique(alpha, return_inverse=True)
    table = np.stack([shape.expected_tokens(np.arange(top + 1), get_tree_rank_rates(shape, a)) for a in values])
    index, kk = np.broadcast_arrays(inverse.reshape(alpha.shape), k)
    return table[index, kk]


def measured_tree_shape(conditions: dict) -> TreeShape | None:
    """The tree a measurement ran with, where its conditions state one (a preset's `tree`, SGLang's server_args)."""
    if conditions.get("tree"):
        try:
            return parse_tree(conditions["tree"])
        except ValueError:
            return None
    try:
        steps = int(conditions["speculative_num_steps"])
        topk = int(conditions["speculative_eagle_topk"])
        tokens = int(conditions["speculative_num_draft_tokens"])
    except (KeyError, TypeError, ValueError):
        return None
    try:
        return parse_tree(f"{steps},{topk},{tokens}")
    except ValueError:
        return None


def resolve_tree_acceptance(shape: TreeShape, measured) -> tuple[tuple[float, ...] | None,
                                                                 tuple[float, ...] | None, list[str]]:
    """(alphas, per-depth rates, warnings) for a tree from a `MeasuredAcceptance`: its per-position rates as
    per-depth top-1 rates, else the one rate whose tree has the measured accept length."""
    warnings = [w for w in measured.warnings if not any(m in w for m in _CHAIN_STAND_IN_MARKERS)]
    depth = get_tree_depth(shape)
    if measured.per_position is not None:
        if len(measured.per_position) < depth:
            raise InputError(f"{measured.source}: {len(measured.per_position)} per-position rates cannot cover a tree "
                             f"of depth {depth}")
        warnings.append(f"{measured.source}: the chain's per-position rates are taken as the tree's top-1 rate per "
                        "depth (other ranks: the geometric model)")
        return None, tuple(measured.per_position[:depth]), warnings
    on = measured_tree_shape(measured.conditions) or shape
    fitted_on = "the tree it was measured with" if on is not shape else "the priced tree"
    if on is shape and measured.conditions.get("shape") == "chain":
        on = TreeShape(measured.k, 1, measured.k + 1)
        fitted_on = f"its chain of {measured.k}"
    try:
        alpha = fit_alpha_to_accept_length(on, measured.expected_tokens)
    except ValueError as exc:
        raise InputError(f"{measured.source}: {exc}") from None
    warnings.append(f"{measured.source}: accept length {measured.expected_tokens:.2f} fitted on {fitted_on} "
                    f"({on.describe()}) as a top-1 rate of {alpha:.3f} per depth")
    return (alpha,), None, warnings


def check_tree_options(shape: TreeShape, drafter_kind: str, extra_draft_pass: bool, first_step_tokens: int) -> None:
    if extra_draft_pass or first_step_tokens != 1:
        raise InputError("a draft tree has no extra draft pass or two-token first step: leave those options off")
    if drafter_kind == "medusa" and shape.static is None:
        raise InputError("Medusa drafts a static tree: give --tree as a JSON list of paths (its medusa_choices)")


def get_tree_k_values(shape: TreeShape, chosen: int | None, k_values) -> np.ndarray:
    """Tree tokens to price: 0 (no speculation) and the shape's, plus any asked for (each at most what the shape can
    verify): the configured tree is always priced."""
    ks = {0, shape.tree_tokens} | set(k_values or ())
    if chosen is not None:
        ks.add(chosen)
    top = max(ks)
    if top > shape.max_tree_tokens:
        raise InputError(f"{top} tree tokens: the {shape.describe()} verifies at most {shape.max_tree_tokens}")
    return np.asarray(sorted(ks), dtype=np.int64)


def resolve_self_drafter(kv_budget, layer_fraction):
    """`--drafter self`: the target drafts for itself, reading at most `kv_budget` KV tokens per sequence (a
    StreamingLLM / SnapKV draft cache as in MagicDec and TriForce) and/or running `layer_fraction` of its layers
    (layer-skip self-speculation: LayerSkip, Draft & Verify). One of the two must make the draft cheaper."""
    from .inputs import Drafter, check_positive_int

    budget = None if kv_budget is None else check_positive_int(kv_budget, "--draft-kv-budget", 1 << 30)
    fraction = 1.0 if layer_fraction is None else layer_fraction
    if isinstance(fraction, str):
        try:
            fraction = float(fraction)
        except ValueError:
            fraction = None
    if not (isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and 0 < fraction <= 1):
        raise InputError(f"--draft-layer-fraction must be a number in (0, 1], got {layer_fraction!r}")
    if budget is None and fraction == 1:
        raise InputError("--drafter self drafts with the target itself: give --draft-kv-budget N (a bounded draft KV "
                         "cache) and/or --draft-layer-fraction F (layer skip), or it costs a full target step")
    return Drafter("self", kv_budget_tokens=budget, layer_fraction=float(fraction))


def with_ngram_match_fraction(drafter, fraction):
    """The drafter with `fraction` of its sequences drafting per step (an n-gram drafter only; None: all of them)."""
    if fraction is None:
        return drafter
    if drafter.kind != "ngram":
        raise InputError(f"--ngram-match-fraction belongs to --drafter ngram, not --drafter {drafter.kind}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise InputError(f"the n-gram match fraction must be a number in (0, 1], got {fraction!r}")
    return replace(drafter, match_fraction=float(fraction))


def check_self_options(kind: str, kv_budget, layer_fraction) -> None:
    if kind != "self" and (kv_budget is not None or layer_fraction is not None):
        raise InputError("--draft-kv-budget and --draft-layer-fraction belong to --drafter self")


def get_self_draft_model(target, drafter):
    """The target's shapes with the draft's layers (model_copy skips validation on purpose: a view of the target)."""
    layers = max(1, int(round(drafter.layer_fraction * target.num_layers)))
    if layers == target.num_layers:
        return target
    moe = target.moe
    if moe is not None and moe.first_dense_layers:
        moe = moe.model_copy(update={"first_dense_layers": min(moe.first_dense_layers, layers)})
    return target.model_copy(update={"num_layers": layers, "moe": moe})


def get_self_draft_context(drafter, context_tokens):
    """KV tokens a self draft step reads: min(context, budget)."""
    context = np.asarray(context_tokens)
    return context if drafter.kv_budget_tokens is None else np.minimum(context, drafter.kv_budget_tokens)


def read_head_config(path) -> HeadConfig:
    """An EAGLE-3 head's config.json (LlamaForCausalLMEagle3, as SGLang and vLLM load it): num_hidden_layers,
    draft_vocab_size (None there: the target's vocabulary), hidden_size, intermediate_size, attention heads."""
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the head config {str(path)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a head config.json is a JSON object")

    def count(key, default=None):
        value = data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InputError(f"{path}: {key} must be a positive integer, got {value!r}")
        return value

    return HeadConfig(num_layers=count("num_hidden_layers", 1), draft_vocab_size=count("draft_vocab_size"),
                      hidden_size=count("hidden_size"), intermediate_size=count("intermediate_size"),
                      num_attention_heads=count("num_attention_heads"), num_kv_heads=count("num_key_value_heads"),
                      source=str(path))


def read_mtp_config(path) -> HeadConfig:
    """The MTP modules a config.json states (DeepSeek-V3's `num_nextn_predict_layers`, in the target's own
    config.json): each is one target block with its projection; a draft deeper than the modules reuses the last."""
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the MTP config {str(path)!r}: {exc}") from None
    value = data.get("num_nextn_predict_layers") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{path}: no positive num_nextn_predict_layers (the MTP modules of DeepSeek-V3's config)")
    return HeadConfig(num_layers=value, source=str(path))


def resolve_head_drafter(kind: str, draft, head_layer_fraction) -> tuple[object, list[str]]:
    """An EAGLE head given with --draft CONFIG.json: read its shapes; a config that states draft_vocab_size or an
    Eagle3 architecture is an EAGLE-3 head whatever --drafter said (with a warning when it said eagle)."""
    import json
    from pathlib import Path

    from .inputs import Drafter

    if kind not in ("eagle", "eagle3", "mtp"):
        raise InputError(f"--draft names a draft model or a head's config.json; a {kind} drafter takes none")
    path = Path(str(draft))
    if path.suffix.lower() != ".json" or not path.exists():
        raise InputError(f"--drafter {kind}: --draft must be the head's config.json, got {str(draft)!r}")
    if kind == "mtp":
        return Drafter("mtp", head_layer_fraction=float(head_layer_fraction),
                       head_config=read_mtp_config(path)), []
    head = read_head_config(path)
    warnings = []
    try:
        architectures = json.loads(path.read_text(encoding="utf-8")).get("architectures") or []
    except (AttributeError, json.JSONDecodeError):
        architectures = []
    eagle3 = head.draft_vocab_size is not None or any("Eagle3" in str(a) for a in architectures)
    if kind == "eagle" and eagle3:
        warnings.append(f"{path}: an EAGLE-3 head (draft_vocab_size / Eagle3 architecture): priced as --drafter eagle3")
        kind = "eagle3"
    if kind == "eagle" and head.num_layers != 1:
        warnings.append(f"{path}: {head.num_layers} layers; an EAGLE-1/2 head is priced as one layer times "
                        "--head-layer-fraction")
    return Drafter(kind, head_layer_fraction=float(head_layer_fraction), head_config=head), warnings


def check_draft_context(draft_model, context_axis, allow_long_context: bool) -> list[str]:
    """A draft model past its own maximum context: refused as the target is, or a warning with allow_long_context."""
    too_long = context_axis[context_axis > draft_model.max_context_tokens]
    if not too_long.size:
        return []
    from ..units import format_count

    message = (f"context {format_count(int(too_long[-1]))} exceeds draft {draft_model.name}'s max context "
               f"{format_count(draft_model.max_context_tokens)} tokens")
    if not allow_long_context:
        raise InputError(message + " (pass allow_long_context / --allow-long-context to model it anyway)")
    return [message]


def resolve_any_drafter(model_spec, hw_spec, workload, draft, drafter, head_layer_fraction, draft_tp, draft_kv_budget,
                        draft_layer_fraction, context_axis, allow_long_context):
    """`resolve_drafter`, plus the self drafter and the draft model's own maximum context (`scenario.drafting`)."""
    from .inputs import resolve_drafter

    check_self_options(drafter, draft_kv_budget, draft_layer_fraction)
    if drafter == "self":
        if draft is not None:
            raise InputError("--drafter self drafts with the target: --draft names a separate model")
        return resolve_self_drafter(draft_kv_budget, draft_layer_fraction), None, []
    if drafter in ("eagle", "eagle3", "mtp") and draft is not None:
        spec_drafter, warnings = resolve_head_drafter(drafter, draft, head_layer_fraction)
        return spec_drafter, None, warnings
    spec_drafter, draft_workload, warnings = resolve_drafter(model_spec, hw_spec, workload, draft, drafter,
                                                             head_layer_fraction, draft_tp)
    if spec_drafter.kind == "model":
        warnings = warnings + check_draft_context(spec_drafter.model, context_axis, allow_long_context)
    return spec_drafter, draft_workload, warnings


def get_self_draft_kv_bytes(scenario, batch, context_tokens, new_tokens) -> np.ndarray:
    """A self draft's own KV cache per device: none when it reads the target's cache (layer skip alone), else the
    budget's tokens for its layers (SnapKV / TriForce keep the compressed cache apart; StreamingLLM's sink + window
    could share the target's, so this is the conservative count). The weights are the target's: never counted."""
    drafter, w = scenario.drafter, scenario.workload
    if drafter.kv_budget_tokens is None:
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(context_tokens)).shape)
    tokens = np.minimum(np.asarray(context_tokens, dtype=float) + new_tokens, drafter.kv_budget_tokens)
    return get_kv_cache_bytes(get_self_draft_model(scenario.model, drafter), w, batch, tokens)


__all__ = [
    "resolve_any_drafter", "get_self_draft_kv_bytes", "read_head_config", "read_mtp_config", "resolve_head_drafter",
    "resolve_self_drafter", "check_self_options", "get_self_draft_model", "get_self_draft_context",
    "check_draft_context", "with_ngram_match_fraction", "resolve_tree", "resolve_tree_acceptance", "get_tree_expected_tokens",
    "get_tree_rank_rates", "get_tree_k_values", "check_tree_options", "get_tree_depth", "measured_tree_shape",
]
