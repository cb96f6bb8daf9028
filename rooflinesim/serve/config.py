"""What one serving instance is configured with (`ServeConfig`): the engine's sequence limit, token budget per step,
KV block size, step formation and admission, with the ranges every value is checked against."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..scenario.inputs import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS




STEP_POLICIES = ("mixed", "prefill-first")
ADMISSIONS = ("evict", "no-evict")

#: far above any engine's setting; the simulation allocates arrays of these sizes (a budget of 1.4e11 tokens asked
#: for 1 TiB, and a step's cost grows with the budget: 3.4 million tokens made 20 requests take 18 s)
CONFIG_MAXIMA = {"max_num_seqs": 1 << 16, "max_num_batched_tokens": 1 << 20, "block_size": 1 << 16,
                 "multi_step": 1 << 10}


@dataclass(frozen=True)
class ServeConfig:
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    block_size: int = DEFAULT_BLOCK_SIZE
    seed: int = 0
    #: the engine's step formation (specs.engine.Scheduling): 'mixed' chunked steps (vLLM V1, TensorRT-LLM) or
    #: 'prefill-first' (a step with prompts to prefill runs them alone and the decodes wait: SGLang without mixed
    #: chunking, vLLM V0)
    step_policy: str = "mixed"
    #: 'evict' (admit while blocks are free, preempt by recompute when they run out) or 'no-evict' (admit only a
    #: request whose prompt, whole output and draft slots fit: TensorRT-LLM's GUARANTEED_NO_EVICT)
    admission: str = "evict"
    #: decode iterations scheduled at once (vLLM V0 `--num-scheduler-steps`): once a decode step starts a window, the
    #: next multi_step - 1 steps decode the same batch; prompts that arrive or wait meanwhile are prefilled only after
    #: the window (so TTFT pays for it), and the host work is paid once per window (timing/engine.py)
    multi_step: int = 1
    #: an asynchronous output processor (vLLM V0 v0.6): a step's tokens are streamed while the next step runs, one
    #: step late (serve/output.py); not while speculating (vLLM turns it off for speculative decoding)
    async_output: bool = False
    #: seconds from a request's send to the scheduler (the API server: tokenization, hand-over to the engine process);
    #: TTFT and latency count it, the engine's steps do not (specs.engine.Host.frontend_s)
    frontend_s: float = 0.0

    @classmethod
    def for_engine(cls, engine, max_num_seqs=None, max_num_batched_tokens=None, block_size=DEFAULT_BLOCK_SIZE,
                   seed=0) -> "ServeConfig":
        """The config an engine profile runs with by default (`scheduling` block); given values override it."""
        def given(value, default):
            return default if value is None else value

        if engine is None:
            return cls(given(max_num_seqs, DEFAULT_MAX_NUM_SEQS),
                       given(max_num_batched_tokens, DEFAULT_MAX_NUM_BATCHED_TOKENS), block_size, seed)
        s = engine.scheduling
        return cls(given(max_num_seqs, s.max_num_seqs), given(max_num_batched_tokens, s.max_num_batched_tokens),
                   block_size, seed, s.policy, s.admission, s.multi_step, s.async_output, engine.host.frontend_s)

    def check(self) -> "ServeConfig":
        for name, most in CONFIG_MAXIMA.items():
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or not 1 <= value <= most:
                raise InputError(f"{name} must be a positive integer up to {most:,}, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise InputError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.step_policy not in STEP_POLICIES:
            raise InputError(f"step_policy must be one of {', '.join(STEP_POLICIES)}, got {self.step_policy!r}")
        if self.admission not in ADMISSIONS:
            raise InputError(f"admission must be one of {', '.join(ADMISSIONS)}, got {self.admission!r}")
        if isinstance(self.frontend_s, bool) or not isinstance(self.frontend_s, (int, float)) or \
                not 0.0 <= self.frontend_s <= 60.0:
            raise InputError(f"frontend_s must be between 0 and 60 seconds, got {self.frontend_s!r}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise InputError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_num_seqs "
                             f"({self.max_num_seqs}): every running request needs a token per step")
        return self
