"""When each request's first and last token reach the client (serve/engine.py).

A synchronous engine streams a step's tokens when the step ends. vLLM V0's asynchronous output processor (v0.6,
vllm-project/vllm PR #7049; the v0.6.0 blog: "performing the processing of the n-th step output while executing the
n+1-th step") processes, and so streams, a step's tokens while the next step runs: they reach the client when that
next step ends, or at once when no step follows (the engine idles). TTFT and the end-to-end latency grow by about
one step; TPOT, the gap between the two, hardly moves.
"""

from __future__ import annotations

import numpy as np


class StreamedOutput:
    """Writes first-token and finish times into the simulator's arrays, at once or one step late (`delayed`)."""

    def __init__(self, first_token_s: np.ndarray, finish_s: np.ndarray, delayed: bool):
        self.first_token_s, self.finish_s, self.delayed = first_token_s, finish_s, delayed
        self._pending = None  # (first-token ids, finished ids, end of the step that produced them)

    def step_runs(self, start_s: float, end_s: float) -> None:
        """A step runs from start_s to end_s: what the previous step produced is streamed at its end, or when it was
        produced if the engine idled in between."""
        if self._pending is not None:
            first, finished, produced_s = self._pending
            at = end_s if produced_s >= start_s else produced_s
            self.first_token_s[first] = at
            self.finish_s[finished] = at
            self._pending = None

    def produced(self, first: np.ndarray, finished: np.ndarray, end_s: float) -> None:
        """A step ending at end_s produced the first token of `first` and the last token of `finished`."""
        if self.delayed:
            self._pending = (first, finished, end_s)
        else:
            self.first_token_s[first] = end_s
            self.finish_s[finished] = end_s

    def flush(self) -> None:
        """No step follows: what is left is streamed when it was produced."""
        if self._pending is not None:
            first, finished, produced_s = self._pending
            self.first_token_s[first] = produced_s
            self.finish_s[finished] = produced_s
            self._pending = None


__all__ = ["StreamedOutput"]
