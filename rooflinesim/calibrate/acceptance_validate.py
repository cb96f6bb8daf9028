"""`rooflinesim acceptance validate`: speculative speedup on real acceptance, measured vs predicted, per batch.

Two small models are trained on the spot (`acceptance_models`: a draft that agrees with its target partially), their
acceptance is measured with `acceptance_measure` (batch 1, the exact rule at temperature T), and then a batched
speculative loop runs on the local device with the same rule: k draft steps, one verify of k + 1 tokens, the rule
per sequence, rollback by position. Its speedup over a plain decode loop of the same models (both sampling their
tokens) is compared, per batch, with the speedup `price_speculation` predicts from the measured acceptance and a
calibrated profile of this device.

Measured speedup = committed tokens per iteration (realised in the loop) x T_decode step / T_speculative iteration,
times as medians over iterations, taken in rounds that alternate the two loops (`ROUNDS`), each restarting from the
prompts, so that the machine's speed drifting during a run weighs on both alike. The loop's first draft step reads the last two committed tokens (q = 2), so a
sequence whose k drafts were all accepted catches up without an extra pass; the prediction prices that step at q = 2
(`draft_first_step_tokens=2`) and the sampler and acceptance rule the loops run (`sampling=True`, from the profile's
'sample' and 'accept_rule' fits of `calibrate.sampling`, the functions the loops call).
"""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path

import numpy as np
import torch

from ..acceptance.measured import MeasuredAcceptance
from ..profiles import load_profile
from ..scenario import build_scenario
from ..speculative import get_acceptance_rule_time_s, price_speculation
from ..timing import Z90
from .acceptance_measure import MeasureSettings, load_pair, measure_acceptance
from .acceptance_models import corpus, hf_config, trained_pair
from .measurements import Timing
from .sampling import exact_rule, probabilities, sample_step

GOAL_SPEEDUP_ERROR = 0.15
PROMPT_TOKENS = 64


#: timed rounds each loop is split into, alternating plain and speculative decoding, so that the machine's speed
#: drifting over a run (5-20 % over minutes on a shared VM) weighs on both sides of the speedup alike
ROUNDS = 8


@torch.no_grad()
def batched_loops(target, draft, prompts: torch.Tensor, k: int, temperature: float, iterations: int,
                  generator: torch.Generator, sync=lambda: None, rounds: int = ROUNDS) -> dict:
    """A plain decode loop and a speculative loop (exact rule per sequence) over the prompts [B, P], `iterations`
    timed steps of each in `rounds` alternating rounds (each round restarts from the prompts, first step untimed)."""
    per_round = max(1, -(-iterations // rounds))
    decode_times, iteration_times, committed, accepted = [], [], [], []
    parts = {"drafts": [], "verify": [], "rule": []}  # where an iteration's time goes (same clock, same iterations)
    for _ in range(rounds):
        decode_times += _plain_round(target, prompts, temperature, per_round, generator, sync)
        _speculative_round(target, draft, prompts, k, temperature, per_round, generator, sync, iteration_times,
                           parts, committed, accepted)
    return {"decode": Timing(tuple(decode_times)), "iteration": Timing(tuple(iteration_times)),
            "parts": {name: Timing(tuple(times)) for name, times in parts.items()},
            "tokens_per_iteration": float(np.mean(committed)), "accepted": accepted}


def _plain_round(target, prompts, temperature, steps, generator, sync) -> list[float]:
    """Plain decoding from the prompts: one target step per token, each token sampled from the target."""
    b, p = prompts.shape
    target(prompts[:, :-1], torch.zeros(b, dtype=torch.long), p - 1)
    last, length = prompts[:, -1:], torch.full((b,), p - 1)
    times = []
    for i in range(steps + 1):
        sync()
        began = time.perf_counter()
        last = sample_step(target(last, length, int(length.max()) + 1), temperature, generator)[0][:, None]
        sync()
        if i >= 1:
            times.append(time.perf_counter() - began)
        length = length + 1
    return times


def _speculative_round(target, draft, prompts, k, temperature, iterations, generator, sync, iteration_times, parts,
                       committed, accepted) -> None:
    """Speculative decoding from the same prompts; appends each timed iteration's time, parts and tokens."""
    b, p = prompts.shape
    rows = torch.arange(b)
    target(prompts[:, :-1], torch.zeros(b, dtype=torch.long), p - 1)
    draft(prompts[:, :-2], torch.zeros(b, dtype=torch.long), p - 2)
    cur = torch.full((b,), p - 1)  # position of `last`, the newest committed token neither model has read
    prev, last = prompts[:, -2], prompts[:, -1]
    for i in range(iterations + 1):
        sync()
        began = time.perf_counter()
        feed, at, drafts, q_rows = torch.stack([prev, last], 1), cur - 1, [], []
        for _ in range(k):
            token, q = sample_step(draft(feed, at, int(at.max()) + feed.shape[1])[:, -1:], temperature, generator)
            drafts.append(token)
            q_rows.append(q[:, 0])
            at, feed = at + feed.shape[1], token[:, None]
        d = torch.stack(drafts, 1)  # [B, k]
        sync()
        drafted = time.perf_counter()
        p_rows = probabilities(target(torch.cat([last[:, None], d], 1), cur, int(cur.max()) + k + 1), temperature)
        sync()
        verified = time.perf_counter()
        n, next_token = exact_rule(p_rows, torch.stack(q_rows, 1), d, generator)
        prev = torch.where(n > 0, d[rows, (n - 1).clamp(min=0)], last)
        last, cur = next_token, cur + n + 1
        sync()
        if i >= 1:
            ended = time.perf_counter()
            iteration_times.append(ended - began)
            parts["drafts"].append(drafted - began)
            parts["verify"].append(verified - drafted)
            parts["rule"].append(ended - verified)
            committed.append(float((n + 1).double().mean()))
            accepted.extend(n.tolist())


def run_acceptance_validation(profile_path, work_dir, device: str = "cpu", batches=(1, 4, 16), k: int = 4,
                              temperature: float = 1.0, iterations: int = 40, seed: int = 0) -> dict:
    """Train the pair under `work_dir`, measure its acceptance, time the loops per batch, compare with predictions."""
    work = Path(work_dir)
    target_cfg = hf_config(hidden=256, layers=4, heads=4, kv_heads=2)
    draft_cfg = hf_config(hidden=64, layers=1, heads=2, kv_heads=1)
    target_dir, draft_dir, prompts_file = trained_pair(work, target_cfg, draft_cfg)
    settings = MeasureSettings(k=k, temperature=temperature, new_tokens=64, seed=seed)
    measured: MeasuredAcceptance = measure_acceptance(target_dir, draft_dir, prompts_file, settings, device)
    hw = load_profile(str(profile_path))
    max_tokens = PROMPT_TOKENS + (-(-iterations // ROUNDS) + 3) * (k + 1) + 8
    rows = []
    for batch in batches:
        target, draft = load_pair(target_dir, draft_dir, settings, device, max_tokens)
        target.setup_caches(batch, max_tokens)
        draft.setup_caches(batch, max_tokens)
        prompts = corpus(batch, PROMPT_TOKENS, seed + 100 + batch).to(device)
        run = batched_loops(target, draft, prompts, k, temperature, iterations,
                            torch.Generator().manual_seed(seed + batch))
        scenario = build_scenario(hw, str(target_dir / "config.json"), batch, PROMPT_TOKENS, weight_dtype="fp32",
                                  kv_dtype="fp32", activation_dtype="fp32", draft=str(draft_dir / "config.json"),
                                  acceptance=measured, k=k, allow_long_context=True, sampling=True,
                                  draft_first_step_tokens=2)
        grid = price_speculation(scenario, batch, PROMPT_TOKENS, k)
        rule = get_acceptance_rule_time_s(scenario, scenario.timing, batch, k)
        t_dec, t_it = run["decode"].estimate_s, run["iteration"].estimate_s
        measured_speedup = run["tokens_per_iteration"] * t_dec / t_it
        first = lambda name: float(np.asarray(getattr(grid, name)).reshape(-1)[0])
        predicted = first("speedup")
        sigma = first("speedup_rel_sigma") if grid.speedup_rel_sigma is not None else 0.0
        rows.append({"batch": batch, "context_tokens": PROMPT_TOKENS, "k": k,
                     "measured_speedup": measured_speedup, "predicted_speedup": predicted,
                     "predicted_speedup_low": predicted * (1 - Z90 * sigma),
                     "predicted_speedup_high": predicted * (1 + Z90 * sigma),
                     "abs_error": abs(predicted - measured_speedup),
                     "realized_tokens_per_iteration": run["tokens_per_iteration"],
                     "expected_tokens_from_measured_acceptance": measured.expected_tokens,
                     "measured_decode_s": t_dec, "measured_iteration_s": t_it,
                     "measured_drafts_s": run["parts"]["drafts"].estimate_s,
                     "measured_verify_s": run["parts"]["verify"].estimate_s,
                     "measured_rule_s": run["parts"]["rule"].estimate_s,
                     "predicted_decode_s": first("target_decode_time_s"),
                     "predicted_iteration_s": first("step_time_s"),
                     "predicted_drafts_s": first("draft_step_time_s") * k,
                     "predicted_verify_s": first("verify_step_time_s") - float(np.asarray(rule).reshape(-1)[0]),
                     "predicted_rule_s": float(np.asarray(rule).reshape(-1)[0])})
    worst = max(r["abs_error"] for r in rows)
    return {"kind": "speculative validation on measured acceptance", "profile": str(profile_path),
            "device": device, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "temperature": temperature,
            "acceptance": measured.to_dict(), "speculative": rows, "max_abs_speedup_error": worst,
            "goal_abs_speedup_error": GOAL_SPEEDUP_ERROR, "meets_goal": worst <= GOAL_SPEEDUP_ERROR,
            "notes": ("measured_speedup = realised committed tokens per iteration x median decode step / median "
                      "speculative iteration; predicted from the measured acceptance and the calibrated profile, "
                      "pricing what the loops run: the sampler after every step, the exact rule after each verify "
                      "and a first draft step of two tokens; predicted_speedup_low/high is the 90 % interval. An "
                      "iteration's parts (medians of their own, so they need not add up exactly): drafts = the k "
                      "draft steps with their sampling, verify = the target's forward of k + 1 tokens and its "
                      "probabilities, rule = the acceptance rule and the commit. CPU timings on a shared machine "
                      "are noisy (about 10 % between runs).")}


__all__ = ["batched_loops", "run_acceptance_validation", "GOAL_SPEEDUP_ERROR"]
