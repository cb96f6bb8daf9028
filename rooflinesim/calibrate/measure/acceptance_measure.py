"""`rooflinesim acceptance measure`: acceptance of a draft model for a target model, both local Hugging Face-layout
checkpoints, measured by running speculative decoding on the local device with torch.

Each prompt is decoded for `new_tokens` tokens in speculative steps of k drafts: the draft samples k tokens one at a
time, the target scores them in one forward pass of k + 1 positions, and the exact rule of Leviathan et al. (2023) /
Chen et al. (2023) decides: draft i is accepted with probability min(1, p(x) / q(x)); at the first rejection a token
is drawn from norm(max(p - q, 0)); when all k are accepted a bonus token is drawn from the target's last position.
At temperature 0 both models are greedy and a draft is accepted when it equals the target's argmax. The output keeps
the target's distribution exactly, so what is measured is what an engine with the same rule would see.

Counts per step (how many leading drafts were accepted) give the per-position conditional acceptance with exact
intervals, E by k and the distribution of committed tokens (`acceptance.measured.from_position_counts`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ...acceptance.measured import MeasuredAcceptance, from_position_counts
from ...errors import InputError
from ..reference.hf_checkpoint import load_hf_decoder, set_rope_tables
from ..reference.sampling import probabilities

#: a prompts file line of integers separated by spaces or commas is read as token ids
MAX_PROMPTS = 10_000


@dataclass(frozen=True)
class MeasureSettings:
    k: int = 4
    temperature: float = 0.0
    new_tokens: int = 64
    seed: int = 0
    dtype: torch.dtype = torch.float32


def read_prompts(path, target_dir=None) -> list[list[int]]:
    """Prompts as token ids: one prompt per line, ids separated by spaces or commas. Text lines need the target's
    `tokenizer.json` and the `tokenizers` library (used only when installed; nothing is downloaded)."""
    path = Path(path)
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read prompts file {path}: {exc}") from None
    if not lines:
        raise InputError(f"prompts file {path} has no prompts")
    if len(lines) > MAX_PROMPTS:
        raise InputError(f"prompts file {path} has {len(lines):,} prompts; at most {MAX_PROMPTS:,}")
    prompts, text = [], []
    for number, line in enumerate(lines, 1):
        parts = line.replace(",", " ").split()
        if all(p.isdigit() for p in parts):
            prompts.append([int(p) for p in parts])
        else:
            text.append((number, line))
    if text:
        prompts += _tokenize(text, path, target_dir)
    return prompts


def _tokenize(lines, path: Path, target_dir) -> list[list[int]]:
    tokenizer_file = None if target_dir is None else Path(target_dir) / "tokenizer.json"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        Tokenizer = None
    if Tokenizer is None or tokenizer_file is None or not tokenizer_file.is_file():
        raise InputError(f"{path} line {lines[0][0]} is text: give token ids (integers separated by spaces), or "
                         "install 'tokenizers' and keep tokenizer.json in the target folder")
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    return [tokenizer.encode(line).ids for _, line in lines]


def _sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator).item())


@torch.no_grad()
def speculative_decode(target, draft, prompt: list[int], s: MeasureSettings,
                       generator: torch.Generator) -> tuple[list[int], list[int]]:
    """Decode one prompt; returns the number of accepted drafts (0..k) of each speculative step and the tokens
    committed after the prompt.

    Each model's KV cache holds the committed sequence up to its own `valid` position; a step feeds each model what
    it has not read yet (the whole prompt on the first step), and a rejection rolls back by moving `valid` (later
    writes overwrite the rejected positions before any query can see them)."""
    vocab = min(target.spec.vocab_size, draft.spec.vocab_size)
    seq = list(prompt)
    target_valid = draft_valid = 0
    accepted_per_step, produced = [], 0
    while produced < s.new_tokens:
        drafts, q_rows = [], []
        feed, at = seq[draft_valid:], draft_valid
        for _ in range(s.k):
            logits = draft(torch.tensor([feed]), torch.tensor([at]), at + len(feed))[0, -1, :vocab]
            q = probabilities(logits, s.temperature)
            drafts.append(_sample(q, generator))
            q_rows.append(q)
            at, feed = at + len(feed), [drafts[-1]]
        verify = seq[target_valid:] + drafts
        logits = target(torch.tensor([verify]), torch.tensor([target_valid]), target_valid + len(verify))
        p_rows = probabilities(logits[0, -(s.k + 1):, :vocab], s.temperature)
        n, next_token = 0, None
        for i, token in enumerate(drafts):
            p, q = p_rows[i], q_rows[i]
            if s.temperature == 0.0:
                ok = bool(p[token] > 0)  # greedy: the draft equals the target's argmax
            else:  # accept with probability min(1, p / q)
                ok = bool(torch.rand((), generator=generator, dtype=torch.float64) * q[token] < p[token])
            if not ok:
                residual = torch.clamp(p - q, min=0.0)
                next_token = _sample(residual if residual.sum() > 0 else p, generator)
                break
            n += 1
        if next_token is None:  # all k accepted: the bonus token from the target's last position
            next_token = _sample(p_rows[s.k], generator)
        accepted_per_step.append(n)
        produced += n + 1
        committed_before = len(seq)
        seq += drafts[:n] + [next_token]
        target_valid = committed_before + n  # it read the old sequence and the accepted drafts
        draft_valid = committed_before + min(n, s.k - 1)  # it never read its own last draft
    return accepted_per_step, seq[len(prompt):]


def load_pair(target_dir, draft_dir, settings: MeasureSettings, device: str, max_tokens: int):
    """Both checkpoints, checked to share a vocabulary's ids and to hold `max_tokens` positions, caches ready."""
    target, target_spec, _ = load_hf_decoder(target_dir, settings.dtype, device)
    draft, draft_spec, _ = load_hf_decoder(draft_dir, settings.dtype, device)
    for model, spec in ((target, target_spec), (draft, draft_spec)):
        if max_tokens > spec.max_context_tokens:
            raise InputError(f"{spec.name}: prompts + new tokens need {max_tokens} positions, the model has "
                             f"{spec.max_context_tokens}")
        if spec.sliding_window_tokens and max_tokens > spec.sliding_window_tokens:
            raise InputError(f"{spec.name}: {max_tokens} positions exceed its sliding window "
                             f"{spec.sliding_window_tokens}; use shorter prompts or fewer new tokens")
        set_rope_tables(model, max_tokens)
        model.setup_caches(1, max_tokens)
    return target, draft


def run_measure_command(args) -> MeasuredAcceptance:
    """`rooflinesim acceptance measure` after argument parsing: device, dtype, then `measure_acceptance`."""
    from .timers import select_device

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if args.dtype not in dtypes:
        raise InputError(f"--dtype must be one of {', '.join(dtypes)}, got {args.dtype!r}")
    device = select_device(args.device, args.threads)
    settings = MeasureSettings(k=args.k, temperature=args.temperature, new_tokens=args.new_tokens, seed=args.seed,
                               dtype=dtypes[args.dtype])
    result = measure_acceptance(args.target, args.draft, args.prompts, settings, str(device.torch_device))
    result.conditions["device_name"] = device.name
    return result


def measure_acceptance(target_dir, draft_dir, prompts_file, settings: MeasureSettings = MeasureSettings(),
                       device: str = "cpu", progress=None) -> MeasuredAcceptance:
    """Per-position acceptance of `draft_dir` for `target_dir` over the prompts (see the module docstring)."""
    if settings.k < 1 or settings.new_tokens < 1:
        raise InputError("k and new tokens must be at least 1")
    if not (settings.temperature >= 0.0) or settings.temperature > 100:
        raise InputError(f"temperature must be in [0, 100], got {settings.temperature}")
    prompts = read_prompts(prompts_file, target_dir)
    if any(not p for p in prompts):
        raise InputError(f"{prompts_file}: an empty prompt")
    max_tokens = max(len(p) for p in prompts) + settings.new_tokens + 2 * settings.k + 2
    target, draft = load_pair(target_dir, draft_dir, settings, device, max_tokens)
    warnings = []
    vocab = min(target.spec.vocab_size, draft.spec.vocab_size)
    if target.spec.vocab_size != draft.spec.vocab_size:
        warnings.append(f"vocabularies differ ({target.spec.vocab_size} vs {draft.spec.vocab_size}): only the "
                        "shared ids are compared")
    if max(max(p) for p in prompts) >= vocab:
        raise InputError(f"{prompts_file}: a token id is outside the shared vocabulary of {vocab}")
    generator = torch.Generator().manual_seed(settings.seed)
    steps: list[int] = []
    began = time.perf_counter()
    for i, prompt in enumerate(prompts):
        steps += speculative_decode(target, draft, prompt, settings, generator)[0]
        if progress is not None:
            progress(i + 1, len(prompts))
    elapsed = time.perf_counter() - began
    reached = [sum(1 for n in steps if n > i) for i in range(settings.k)]
    conditions = {"target": str(target_dir), "draft": str(draft_dir), "temperature": settings.temperature,
                  "rule": "greedy" if settings.temperature == 0 else "exact (rejection sampling)",
                  "k": settings.k, "prompts": len(prompts), "new_tokens_per_prompt": settings.new_tokens,
                  "seed": settings.seed, "device": device, "dtype": str(settings.dtype).replace("torch.", ""),
                  "elapsed_s": round(elapsed, 3)}
    engine = f"rooflinesim acceptance measure ({conditions['rule']}, T = {settings.temperature:g})"
    return from_position_counts(engine, f"{Path(draft_dir).name} -> {Path(target_dir).name}", len(steps), reached,
                                records=len(prompts), warnings=warnings, conditions=conditions)


__all__ = ["MeasureSettings", "measure_acceptance", "read_prompts", "speculative_decode", "load_pair",
           "run_measure_command"]
