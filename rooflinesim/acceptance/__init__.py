"""Acceptance math for speculative decoding.

This package answers "how many tokens does one speculative step commit?" from three directions:

1. Closed forms (:mod:`.closed_form`).  With per-position *conditional* acceptance rates ``a_1..a_k`` (``a_i``
   is the probability that draft ``i`` is accepted given that drafts ``1..i-1`` were), one speculative step
   commits ``n = 1..k+1`` tokens: ``n - 1`` accepted drafts followed either by one token resampled at the
   first rejected position, or, when all ``k`` drafts were accepted, by the "bonus" token the target model
   sampled from its last verified position.  The i.i.d. case (every ``a_i`` equal to ``alpha``) gives the
   Leviathan et al. (2023) formula ``E = (1 - alpha^(k+1)) / (1 - alpha)``.

2. Acceptance from distributions (:mod:`.distributions`).  Under the exact speculative-sampling rule the
   probability of accepting a draft sampled from ``q`` when the target distribution is ``p`` is
   ``sum_x min(p(x), q(x)) = 1 - TV(p, q)``.

3. Acceptance rules (:mod:`.rules`) and a Monte Carlo step simulator (:mod:`.simulate`), vectorised over many
   trials, used to check the formulas and to quantify lossy rules such as Medusa's typical acceptance.
   :mod:`.synthetic` makes distributions with a prescribed acceptance for them.

4. Measured and published acceptance (imported on use, not by this ``__init__``: they need scipy.stats and
   pydantic): :mod:`.measured` (the typed result and its intervals), :mod:`.engines` (vLLM, SGLang and
   TensorRT-LLM logs and metrics, with :mod:`.prometheus_text`), :mod:`.presets` (the sourced library in
   ``presets.yaml``) and :mod:`.sources` (``--acceptance FILE_OR_PRESET``).

Modules import in that order (``_checks`` <- ``closed_form``, ``distributions`` <- ``rules`` <- ``simulate``;
``synthetic`` needs only ``_checks``); none imports this ``__init__``.  The public API is flat: import every
name from ``rooflinesim.acceptance``.

Conventions
-----------
* "Tokens" are integer ids in ``[0, vocab)``.  Distributions are float arrays whose last axis is the
  vocabulary; leading axes are batch axes (positions, contexts, ...).
* Monte Carlo functions put the trial axis first: results have shape ``(n_trials, *batch_shape)``.
* All randomness comes from an explicit ``numpy.random.Generator``.
* Probabilities are dimensionless numbers in ``[0, 1]``; token counts are tokens per speculative step
  (one draft-then-verify cycle of the target model).

Only numpy is required (no torch, no matplotlib), so the analytic performance model can import this anywhere.
"""

from __future__ import annotations

from .closed_form import (
    alpha_from_expected_tokens_iid, committed_tokens_distribution, draft_acceptance_rate,
    draft_acceptance_rate_from_mean_acceptance_length, expected_tokens_iid, expected_tokens_per_position,
    get_expected_tokens,
    leviathan_arithmetic_operations_factor, leviathan_walltime_improvement, mean_acceptance_length,
    mean_acceptance_length_from_draft_acceptance_rate,
)
from .distributions import (
    MEDUSA_POSTERIOR_ALPHA, MEDUSA_POSTERIOR_THRESHOLD, acceptance_rate, acceptance_rate_from_logits, entropy,
    greedy_draft_acceptance_rate, one_hot_argmax, residual_distribution, softmax_with_temperature, total_variation,
    typical_acceptance_emitted_distribution, typical_acceptance_probability, typical_acceptance_threshold,
)
from .rules import (
    ACCEPTANCE_RULES, RuleStepResult, exact_rejection_step, greedy_draft_step, sample_categorical,
    typical_acceptance_step,
)
from .simulate import SpeculativeSimulationResult, simulate_speculative_steps
from .synthetic import synthetic_distributions, synthetic_logit_pair

__all__ = [
    # 1. closed forms
    "get_expected_tokens",
    "expected_tokens_iid",
    "expected_tokens_per_position",
    "committed_tokens_distribution",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "draft_acceptance_rate_from_mean_acceptance_length",
    "mean_acceptance_length_from_draft_acceptance_rate",
    "alpha_from_expected_tokens_iid",
    "leviathan_walltime_improvement",
    "leviathan_arithmetic_operations_factor",
    # 2. acceptance from distributions
    "MEDUSA_POSTERIOR_THRESHOLD",
    "MEDUSA_POSTERIOR_ALPHA",
    "acceptance_rate",
    "total_variation",
    "entropy",
    "softmax_with_temperature",
    "acceptance_rate_from_logits",
    "residual_distribution",
    "one_hot_argmax",
    "greedy_draft_acceptance_rate",
    "typical_acceptance_threshold",
    "typical_acceptance_probability",
    "typical_acceptance_emitted_distribution",
    # 3. rules and Monte Carlo
    "sample_categorical",
    "RuleStepResult",
    "exact_rejection_step",
    "greedy_draft_step",
    "typical_acceptance_step",
    "ACCEPTANCE_RULES",
    "SpeculativeSimulationResult",
    "simulate_speculative_steps",
    "synthetic_distributions",
    "synthetic_logit_pair",
]
