"""`rooflinesim acceptance validate`: speculative speedup on real acceptance, measured vs predicted, per batch.

Two small models are trained on the spot (`acceptance_models`: a draft that agrees with its target partially), their
acceptance is measured with `acceptance_measure` (batch 1, the exact rule at temperature T), and then a batched
speculative loop runs on the local device with the same rule: k draft steps, one verify of k + 1 tokens, the rule
per sequence, rollback by position. Its speedup over a plain decode loop of the same models (both sampling their
tokens) is compared, per batch, with the speedup `price_speculation` predicts from the measured acceptance and a
calibrated profile of this device.

Measured speedup = committed tokens per iteration (realised in the loop) x T_decode step / T_speculative iteration,
times as medians over iterations. The loop's first draft step reads the last two committed tokens (q = 2), so a
sequence whose k drafts were all accepted catches up without an extra pass; the model prices it as q = 1.
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
from ..speculative import price_speculation
from .acceptance_measure import MeasureSettings, load_pair, measure_acceptance
from .acceptance_models import corpus, hf_config, trained_pair
from .measurements import Timing
from .sampling import exact_rule, probabilities, sample

GOAL_SPEEDUP_ERROR = 0.15
PROMPT_TOKENS = 64


@torch.no_grad()
def batched_loops(target, draft, prompts: torch.Tensor, k: int, temperature: float, iterations: int,
                  generator: torch.Generator, sync=lambda: None) -> dict:
    """A plain decode loop and a speculative loop (exact rule per sequence) over the prompts [B, P]."""
    b, p = prompts.shape
    rows = torch.arange(b)
    # plain decoding: one target step per token, each token sampled from the target
    target(prompts[:, :-1], torch.zeros(b, dtype=torch.long), p - 1)
    last, length = prompts[:, -1:], torch.full((b,), p - 1)
    decode_times = []
    for i in range(iterations + 2):
        sync()
        began = time.perf_counter()
        probs = probabilities(target(last, length, int(length.max()) + 1)[:, -1], temperature)
        last = sample(probs, generator)[:, None]
        sync()
        if i >= 2:
            decode_times.append(time.perf_counter() - began)
        length = length + 1

    # speculative decoding over the same prompts
    target(prompts[:, :-1], torch.zeros(b, dtype=torch.long), p - 1)
    draft(prompts[:, :-2], torch.zeros(b, dtype=torch.long), p - 2)
    cur = torch.full((b,), p - 1)  # position of `last`, the newest committed token neither model has read
    prev, last = prompts[:, -2], prompts[:, -1]
    iteration_times, committed, accepted = [], [], []
    for i in range(iterations + 2):
        sync()
        began = time.perf_counter()
        feed, at, drafts, q_rows = torch.stack([prev, last], 1), cur - 1, [], []
        for _ in range(k):
            q = probabilities(draft(feed, at, int(at.max()) + feed.shape[1])[:, -1], temperature)
            token = sample(q, generator)[:, None]
            drafts.append(token[:, 0])
            q_rows.append(q)
            at, feed = at + feed.shape[1], token
        d = torch.stack(drafts, 1)  # [B, k]
        p_rows = probabilities(target(torch.cat([last[:, None], d], 1), cur, int(cur.max()) + k + 1), temperature)
        n, next_token = exact_rule(p_rows, torch.stack(q_rows, 1), d, generator)  # per sequence
        prev = torch.where(n > 0, d[rows, (n - 1).clamp(min=0)], last)
        last, cur = next_token, cur + n + 1
        sync()
        if i >= 2:
            iteration_times.append(time.perf_counter() - began)
            committed.append(float((n + 1).double().mean()))
            accepted.extend(n.tolist())
    return {"decode": Timing(tuple(decode_times)), "iteration": Timing(tuple(iteration_times)),
            "tokens_per_iteration": float(np.mean(committed)), "accepted": accepted}


def run_acceptance_validation(profile_path, work_dir, device: str = "cpu", batches=(1, 4, 16), k: int = 4,
                              temperature: float = 1.0, iterations: int = 20, seed: int = 0) -> dict:
    """Train the pair under `work_dir`, measure its acceptance, time the loops per batch, compare with predictions."""
    work = Path(work_dir)
    target_cfg = hf_config(hidden=256, layers=4, heads=4, kv_heads=2)
    draft_cfg = hf_config(hidden=64, layers=1, heads=2, kv_heads=1)
    target_dir, draft_dir, prompts_file = trained_pair(work, target_cfg, draft_cfg)
    settings = MeasureSettings(k=k, temperature=temperature, new_tokens=64, seed=seed)
    measured: MeasuredAcceptance = measure_acceptance(target_dir, draft_dir, prompts_file, settings, device)
    hw = load_profile(str(profile_path))
    max_tokens = PROMPT_TOKENS + (iterations + 3) * (k + 1) + 8
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
                                  acceptance=measured, k=k, allow_long_context=True)
        grid = price_speculation(scenario, batch, PROMPT_TOKENS, k)
        t_dec, t_it = run["decode"].estimate_s, run["iteration"].estimate_s
        measured_speedup = run["tokens_per_iteration"] * t_dec / t_it
        predicted = float(np.asarray(grid.speedup).reshape(-1)[0])
        rows.append({"batch": batch, "context_tokens": PROMPT_TOKENS, "k": k,
                     "measured_speedup": measured_speedup, "predicted_speedup": predicted,
                     "abs_error": abs(predicted - measured_speedup),
                     "realized_tokens_per_iteration": run["tokens_per_iteration"],
                     "expected_tokens_from_measured_acceptance": measured.expected_tokens,
                     "measured_decode_s": t_dec, "measured_iteration_s": t_it,
                     "predicted_decode_s": float(np.asarray(grid.target_decode_time_s).reshape(-1)[0]),
                     "predicted_iteration_s": float(np.asarray(grid.step_time_s).reshape(-1)[0])})
    worst = max(r["abs_error"] for r in rows)
    return {"kind": "speculative validation on measured acceptance", "profile": str(profile_path),
            "device": device, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "temperature": temperature,
            "acceptance": measured.to_dict(), "speculative": rows, "max_abs_speedup_error": worst,
            "goal_abs_speedup_error": GOAL_SPEEDUP_ERROR, "meets_goal": worst <= GOAL_SPEEDUP_ERROR,
            "notes": ("measured_speedup = realised committed tokens per iteration x median decode step / median "
                      "speculative iteration; predicted from the measured acceptance and the calibrated profile. "
                      "CPU timings on a shared machine are noisy (about 10 % between runs).")}


__all__ = ["batched_loops", "run_acceptance_validation", "GOAL_SPEEDUP_ERROR"]
