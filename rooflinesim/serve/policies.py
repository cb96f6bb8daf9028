"""Speculation policies: how many draft tokens k the decoding requests of a step get, decided once per step from the
number of decoding requests (the batch) and their mean cached context, as serving engines decide it.

- `off`: never speculate (no draft deployed: its weights and KV cache take no memory).
- `fixed:K`: always K drafts (with a draft tree: K tree tokens, SGLang's speculative_num_draft_tokens - 1).
- `chain:K`: K drafts in a chain even where the scenario drafts a tree (to compare the two shapes under load).
- `off-above:B:K`: K drafts while at most B requests decode, none above (vLLM V0's
  `speculative_disable_by_batch_size`, TensorRT-LLM's `max_concurrency`).
- `schedule:1=K1,B2=K2,...`: K_i drafts from batch B_i on (TensorRT-LLM's `draft_len_schedule` as releases with
  PR #8194 read it, keys = the batch sizes from which each draft length applies; releases with PR #10860 read each
  key as the *last* batch of its k, see serve/engine_configs.py; batch 1 must be given; `B=0` switches speculation
  off).
- `dynamic[:KMAX]`: k* = argmax over k <= KMAX of E(k) / step_time(batch, context, k), E from the scenario's
  acceptance (vLLM's dynamic speculative decoding rule, with the step-time table from the model).
- `adaptive[:KMAX]`: the same argmax with the acceptance re-estimated online from the accept / reject outcomes the
  simulation samples (i.i.d. rate: accepted / attempted draft positions, starting from a prior of 0.5 worth
  ADAPTIVE_PRIOR_POSITIONS positions), so it needs no acceptance supplied up front.

`dynamic` and `adaptive` never lose to their own options (`off` and every `fixed:k`), which the per-step argmax alone
does not ensure: at saturation speculation takes token budget from the prompts waiting to be prefilled, and a
deployed draft model prefills every prompt too, work `off` never does. So, at saturation (requests left waiting
after the last step's admissions) they choose k = 0, and their draft model runs on demand: prompts are prefilled
by the target alone while speculation is off, and the draft catches up on the tokens it missed (one prefill of
them) when a step speculates again (`draft_on_demand`; serve/engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..acceptance.closed_form import get_expected_tokens
from ..scenario.inputs import MAX_K_LIMIT, check_k, check_positive_int
from ..errors import InputError

DEFAULT_MAX_K = 8
ADAPTIVE_PRIOR_ALPHA = 0.5
ADAPTIVE_PRIOR_POSITIONS = 20.0


@dataclass
class Policy:
    """Base: `choose_k(batch, context, pricer)` per step; `observe` receives the sampled outcomes."""

    name: str
    max_k: int
    #: set by the simulator before each decision: requests were left waiting after the last step's admissions
    #: (a class default, not a field: the fields stay positional as they were)
    saturated = False
    #: set by the simulator: recent prefill time / recent decode time (how much prefill work a draft model that
    #: prefills every prompt would add, relative to the decodes speculation speeds up)
    prefill_per_decode = 0.0
    #: the draft model prefills and follows the target only while speculating, catching up when it resumes
    draft_on_demand = False
    #: k is a function of the batch size alone (so a run of decode steps at one batch keeps one k)
    k_depends_on_batch_only = True
    #: the policy's decisions can be planned ahead over a run of decode steps (no state learnt from outcomes)
    plannable = True
    #: the policy drafts a chain even where the scenario drafts a tree (`chain:K`)
    drops_tree = False

    @property
    def deployed(self) -> bool:
        """Whether a draft is deployed at all (its weights and KV cache take memory even when k = 0)."""
        return self.max_k > 0

    def choose_k(self, batch: int, context_tokens: float, pricer) -> int:
        raise NotImplementedError

    def observe(self, k: int, accepted: np.ndarray) -> None:
        """`accepted`: the drafts accepted per decoding request in a step that drafted k."""


@dataclass
class OffPolicy(Policy):
    def choose_k(self, batch, context_tokens, pricer) -> int:
        return 0


@dataclass
class SchedulePolicy(Policy):
    """k by batch as TensorRT-LLM schedules it: `ks[i]` drafts from batch `starts[i]` on (starts[0] = 1), and none
    above `max_concurrency` (when given)."""

    starts: tuple[int, ...] = (1,)
    ks: tuple[int, ...] = (0,)
    max_concurrency: int | None = None

    def choose_k(self, batch, context_tokens, pricer) -> int:
        if self.max_concurrency is not None and batch > self.max_concurrency:
            return 0
        k = 0
        for start, value in zip(self.starts, self.ks):
            if batch < start:
                break
            k = value
        return k


@dataclass
class ChainPolicy(SchedulePolicy):
    """`chain:K`: K drafts in a chain, beside a scenario that drafts a tree (the narrow shape to compare it with)."""

    drops_tree = True


@dataclass
class DynamicPolicy(Policy):
    """argmax_k E(k) / step_time(batch, context, k) with E from the scenario's acceptance (cached per bucket)."""

    k_depends_on_batch_only = False
    draft_on_demand = True

    _cache: dict = field(default_factory=dict, repr=False)

    def get_expected_tokens(self, pricer) -> np.ndarray:
        return pricer.expected_tokens[: self.max_k + 1]

    def choose_k(self, batch, context_tokens, pricer) -> int:
        if self.saturated:  # speculation would take budget from the waiting prompts
            return 0
        load = round(self.prefill_per_decode, 1)
        key = (batch, int(context_tokens) >> 4, load)
        if key not in self._cache:
            times = pricer.get_decode_step_s(batch, context_tokens)[: self.max_k + 1]
            self._cache[key] = _best_k(self.get_expected_tokens(pricer), times, pricer, load)
        return self._cache[key]


@dataclass
class AdaptivePolicy(DynamicPolicy):
    """DynamicPolicy with E(k) from an online estimate of the i.i.d. acceptance rate."""

    plannable = False

    accepted: float = ADAPTIVE_PRIOR_ALPHA * ADAPTIVE_PRIOR_POSITIONS
    attempted: float = ADAPTIVE_PRIOR_POSITIONS

    @property
    def alpha_estimate(self) -> float:
        return self.accepted / self.attempted

    @property
    def alpha_optimistic(self) -> float:
        """The estimate plus one standard error's worth of doubt, 1 / sqrt(positions tried) (an upper confidence
        bound): a policy that decided from the plain estimate of its prior could price speculation as not paying,
        never draft, and so never learn that it does."""
        return min(self.alpha_estimate + 1.0 / np.sqrt(self.attempted), 1.0)

    def get_expected_tokens(self, pricer) -> np.ndarray:
        return get_expected_tokens(np.arange(self.max_k + 1), self.alpha_optimistic)

    def choose_k(self, batch, context_tokens, pricer) -> int:
        # the estimate moves every step: re-decide from the cached step times (the argmax is over max_k + 1 values)
        if self.saturated:
            return 0
        key = (batch, int(context_tokens) >> 4)
        if key not in self._cache:
            self._cache[key] = pricer.get_decode_step_s(batch, context_tokens)[: self.max_k + 1]
        return _best_k(self.get_expected_tokens(pricer), self._cache[key], pricer, self.prefill_per_decode)

    def observe(self, k: int, accepted: np.ndarray) -> None:
        if k == 0 or accepted.size == 0:
            return
        # a chain stops at its first rejection: n accepted drafts mean n accepts out of n + 1 positions tried (k when
        # all were accepted) -- the maximum-likelihood estimate of an i.i.d. rate from truncated chains
        self.accepted += float(accepted.sum())
        self.attempted += float(np.minimum(accepted + 1, k).sum())


def _best_k(expected_tokens: np.ndarray, step_times_s: np.ndarray, pricer, prefill_per_decode: float = 0.0) -> int:
    """argmax_k E(k) / T(k), where a k > 0 also pays for its draft model prefilling the prompts: the draft's prefill
    cost relative to the target's x the recent prefill time per unit of decode time (0 for heads, and for a
    decode-only load)."""
    goodput = np.asarray(expected_tokens, dtype=float) / np.asarray(step_times_s, dtype=float)
    goodput[1:] /= 1.0 + getattr(pricer, "draft_prefill_ratio", 0.0) * prefill_per_decode
    return int(np.argmax(goodput))


def _parse_k(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{what}: {text!r} is not an integer") from None
    return check_k(value, what)


def parse_policy(text: str, acceptance_positions: int | None = None) -> Policy:
    """One policy from its text (see the module docstring). `acceptance_positions`: how many per-position rates the
    scenario has (None: i.i.d.), which bounds k."""
    text = str(text).strip()
    name, _, rest = text.partition(":")
    limit = MAX_K_LIMIT if acceptance_positions is None else acceptance_positions

    def bounded(k: int) -> int:
        if k > limit:
            raise InputError(f"policy {text!r}: k = {k} needs {k} per-position acceptance rates, got {limit}")
        return k

    if name == "off" and not rest:
        return OffPolicy(text, 0)
    if name == "fixed" and rest:
        k = bounded(_parse_k(rest, "fixed:K"))
        return SchedulePolicy(text, k, (1,), (k,))
    if name == "chain" and rest:
        k = _parse_k(rest, "chain:K")
        return ChainPolicy(text, k, (1,), (k,))
    if name == "off-above" and rest.count(":") == 1:
        batch, k = rest.split(":")
        k = bounded(_parse_k(k, "off-above:B:K"))
        return SchedulePolicy(text, k, (1,), (k,), check_positive_int(batch, "off-above batch"))
    if name == "schedule" and rest:
        pairs = []
        for item in rest.split(","):
            batch, eq, k = item.partition("=")
            if not eq:
                raise InputError(f"policy {text!r}: write the schedule as schedule:1=4,16=2,64=0")
            pairs.append((check_positive_int(batch.strip(), "schedule batch"), bounded(_parse_k(k.strip(), "k"))))
        pairs.sort()
        if pairs[0][0] != 1:
            raise InputError(f"policy {text!r}: a draft_len_schedule starts at batch 1 (e.g. schedule:1=4,16=2)")
        return SchedulePolicy(text, max(k for _, k in pairs), tuple(b for b, _ in pairs), tuple(k for _, k in pairs))
    if name in ("dynamic", "adaptive"):
        k = bounded(_parse_k(rest, f"{name}:KMAX")) if rest else min(DEFAULT_MAX_K, limit)
        return (DynamicPolicy if name == "dynamic" else AdaptivePolicy)(text, k)
    raise InputError(f"unknown policy {text!r}: use off, fixed:K, off-above:B:K, schedule:B=K,..., dynamic[:KMAX] "
                     "or adaptive[:KMAX]")


def parse_policies(text: str, acceptance_positions: int | None = None) -> list[Policy]:
    """A comma-separated list, e.g. 'off,fixed:4,dynamic'; a schedule's own commas stay with it."""
    items: list[str] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if items and items[-1].startswith("schedule:") and "=" in part and ":" not in part:
            items[-1] += "," + part
        else:
            items.append(part)
    if not items:
        raise InputError("--policy needs at least one policy, e.g. off,fixed:4,dynamic")
    return [parse_policy(item, acceptance_positions) for item in items]



def get_policy_k_bound(scenario) -> int | None:
    """The largest k a policy may ask for in `scenario` (a `scenario.builder.Scenario`): the tree tokens a tree can verify, the per-position rates of a chain, else
    None (any k up to MAX_K_LIMIT)."""
    if scenario.tree is not None:
        return scenario.tree.max_tree_tokens
    acceptance = scenario.acceptance
    return None if acceptance is None or acceptance.per_position is None else len(acceptance.per_position)

__all__ = ["get_policy_k_bound", "Policy", "OffPolicy", "SchedulePolicy", "ChainPolicy", "DynamicPolicy", "AdaptivePolicy", "parse_policy",
           "parse_policies", "DEFAULT_MAX_K"]
