"""A self-drafting head's forward passes inside an engine's speculative iteration: one draft forward, and the
draft-extend pass an EAGLE-style engine runs over the tokens the verify just checked (`speculative.draft_extend` in
an engine profile; docs/engines.md)."""

from __future__ import annotations

import numpy as np

from ..ops.draft_heads import get_draft_select_ops, get_head_ops, get_head_vocab_size
from ..ops.sections import get_sampler_ops
from ..scenario.builder import Scenario
from ..step import get_ops_time_s
from ..timing import TimingModel
from ..timing.engine import EngineTiming
from ..units import get_dtype_bytes


def get_head_forward_time_s(scenario: Scenario, timing: TimingModel, batch, context_tokens, first_step: bool,
                            new_tokens=1, launch_batch=None) -> np.ndarray:
    """One forward of a self-drafting head over `new_tokens` rows per sequence, logits for the last row of each: its
    own op list (one decoder layer and the vocabulary projection for EAGLE / MTP, a residual block and its lm_head
    for a Medusa head), priced like any step; 'head' is the EAGLE-style preset."""
    drafter = scenario.drafter
    kind = "eagle" if drafter.kind == "head" else drafter.kind
    w = scenario.workload
    layer, rest = get_head_ops(kind, scenario.model, w, batch, context_tokens, drafter.head_config, first_step,
                               new_tokens)
    vocab = get_head_vocab_size(kind, scenario.model, drafter.head_config)
    if uses_draft_softmax_topk(scenario):  # the engine's own selection over the head's logits, at any temperature
        rest = rest + get_draft_select_ops(batch, vocab, get_dtype_bytes(w.activation_dtype))
    elif w.sampling:  # the head's draft token is sampled from its logits (its own vocabulary) like a model's
        rest = rest + get_sampler_ops(scenario.model.model_copy(update={"vocab_size": vocab}), batch)
    hw, dtype = scenario.hardware, w.activation_dtype
    graph_batch = batch if launch_batch is None else launch_batch
    layer_time = get_ops_time_s(hw, layer, dtype, timing, 1, graph_batch) if layer else 0.0
    rest_time = get_ops_time_s(hw, rest, dtype, timing, 0, graph_batch)
    shape = np.broadcast(np.asarray(batch), np.asarray(context_tokens), np.asarray(new_tokens)).shape
    return np.broadcast_to(drafter.head_layer_fraction * layer_time + rest_time, shape)


#: drafters an engine's draft-extend pass applies to: EAGLE-style heads that draft from the target's features
DRAFT_EXTEND_KINDS = ("head", "eagle", "eagle3", "mtp")


def uses_draft_extend(scenario: Scenario) -> bool:
    """Whether the scenario's engine runs a draft-extend pass for its drafter (`speculative.draft_extend`)."""
    engine = scenario.engine
    return bool(engine is not None and not engine.is_ideal and isinstance(scenario.timing, EngineTiming)
                and engine.speculative.draft_extend and scenario.drafter.kind in DRAFT_EXTEND_KINDS)


def uses_draft_softmax_topk(scenario: Scenario) -> bool:
    """Whether the scenario's engine picks an EAGLE-style head's draft tokens with its own fp32 softmax and top-k on
    every draft forward (`speculative.draft_softmax_topk`; SGLang's eagle_worker.py), in place of the sampler."""
    engine = scenario.engine
    return bool(engine is not None and not engine.is_ideal and isinstance(scenario.timing, EngineTiming)
                and engine.speculative.draft_softmax_topk and scenario.drafter.kind in DRAFT_EXTEND_KINDS)


def get_draft_extend_time_s(scenario: Scenario, timing: TimingModel, batch, context_tokens,
                            verified_tokens) -> np.ndarray:
    """An engine's draft-extend pass: one head forward over the `verified_tokens` rows per sequence the verify just
    checked, from the target's features, with logits for the last row of each sequence only. It yields the first
    draft token, so it takes the place of the first of the k draft forwards:

    - SGLang (eagle_worker.py `forward_draft_extend_after_decode`): speculative_num_steps + 1 rows per request,
      `CaptureHiddenMode.LAST`; `draft_forward` then runs only num_steps - 1 forwards ("we get 1 token from draft
      prefill and (#spec steps - 1) tokens here");
    - vLLM V1 (v1/spec_decode/eagle.py `EagleProposer.propose`): the first draft forward runs over the verified
      tokens, logits at `last_token_indices`, then k - 1 single-token forwards.

    The rows run in the graph captured for the batch of sequences."""
    return get_head_forward_time_s(scenario, timing, batch, context_tokens, True, verified_tokens, launch_batch=batch)


__all__ = ["DRAFT_EXTEND_KINDS", "get_draft_extend_time_s", "get_head_forward_time_s", "uses_draft_extend",
           "uses_draft_softmax_topk"]
