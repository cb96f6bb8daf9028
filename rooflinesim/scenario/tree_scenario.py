"""The speculative part of a scenario that drafts a tree: its acceptance per depth, the draft lengths it prices and
its drafter (`scenario.drafting` resolves each; `build_scenario` calls `with_tree` once it has the chain-free
scenario)."""

from __future__ import annotations

from dataclasses import replace

from ..errors import InputError
from .checks import check_grid_size
from .drafting import (
    check_tree_options, get_tree_depth, get_tree_k_values, resolve_any_drafter, resolve_tree_acceptance,
)
from .inputs import Acceptance, _as_list, check_k, resolve_acceptance


def with_tree(scenario, shape, model_spec, hw_spec, workload, warnings, draft, drafter, head_layer_fraction,
               draft_tp, alpha, alpha_per_position, acceptance, acceptance_k, k, k_values, extra_draft_pass,
               batch_axis, context_axis, draft_kv_budget=None, draft_layer_fraction=None,
               allow_long_context=False):
    """The speculative part of a scenario that drafts a tree (see `scenario.drafting`); `warnings` is extended."""
    if acceptance is not None:
        if alpha is not None or alpha_per_position is not None:
            raise InputError("give a measured or preset acceptance or alpha / alpha_per_position, not both")
        from ..acceptance.sources import load_acceptance

        measured = load_acceptance(acceptance, k=acceptance_k)
        alphas, per_depth, more = resolve_tree_acceptance(shape, measured)
        warnings += more
        from .inputs import PRESET_DRAFTER_KINDS

        resolved = Acceptance(alphas=alphas, per_position=per_depth, source=measured.describe(),
                              drafter_kind=PRESET_DRAFTER_KINDS.get(measured.conditions.get("method")))
    else:
        if acceptance_k is not None:
            raise InputError("acceptance_k (--acceptance-k) is the draft length of an --acceptance file; none given")
        resolved = resolve_acceptance(alpha, alpha_per_position)
        depth = get_tree_depth(shape)
        if resolved.per_position is not None and len(resolved.per_position) < depth:
            raise InputError(f"a tree of depth {depth} needs {depth} per-depth acceptance rates, got "
                             f"{len(resolved.per_position)}")
    chosen = None if k is None else check_k(k)
    ks = get_tree_k_values(shape, chosen, None if k_values is None else
                           [check_k(x) for x in _as_list(k_values)])
    check_grid_size(batch_axis, context_axis, ks, len(resolved.alphas or (0,)))
    spec_drafter, draft_workload, drafter_warnings = resolve_any_drafter(
        model_spec, hw_spec, workload, draft, drafter, head_layer_fraction, draft_tp, draft_kv_budget,
        draft_layer_fraction, context_axis, allow_long_context)
    warnings += drafter_warnings
    check_tree_options(shape, spec_drafter.kind, extra_draft_pass, scenario.draft_first_step_tokens)
    return replace(scenario, drafter=spec_drafter, draft_workload=draft_workload, acceptance=resolved, k_values=ks,
                   k=chosen if chosen is not None else (shape.tree_tokens if k_values is None else None), tree=shape)


__all__ = ["with_tree"]
