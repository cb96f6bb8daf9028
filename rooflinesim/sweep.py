"""The speculative model broadcast over a batch x context x k x alpha grid, plus the tables users act on.

One numpy evaluation prices the whole grid (no Python loop over grid points): the step model runs once over
(batch, context, k) and acceptance broadcasts on top. From it: best k, the break-even batch per context, and
engine-ready schedules (a vLLM-style disable-by-batch-size threshold with a number of speculative tokens, and a
TensorRT-LLM-style draft_len_schedule {max_batch: k}) per context bucket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .ops import get_kv_cache_bytes
from .predict import build_workload, get_timing_model
from .registry import get_short_name, load_hardware, load_model
from .speculative import DEFAULT_DRAFT, Drafter, check_alpha, price_speculation, resolve_drafter
from .specs import InputError
from .step import get_workload_memory_fit


@dataclass(frozen=True)
class SweepResult:
    """Arrays of shape (n_batch, n_ctx, n_k, n_alpha); times in seconds."""

    hardware: str
    model: str
    draft: str
    batch: np.ndarray
    context_tokens: np.ndarray
    k: np.ndarray
    alpha: np.ndarray
    speedup: np.ndarray
    expected_tokens: np.ndarray
    step_time_s: np.ndarray
    target_decode_time_s: np.ndarray  # (n_batch, n_ctx)
    draft_step_time_s: np.ndarray  # (n_batch, n_ctx)
    verify_step_time_s: np.ndarray  # (n_batch, n_ctx, n_k)
    fits_in_memory: np.ndarray  # (n_batch, n_ctx, n_k)
    tensor_parallel: int = 1

    @property
    def n_points(self) -> int:
        return int(np.prod(self.speedup.shape))

    @property
    def best_k(self) -> np.ndarray:
        """(n_batch, n_ctx, n_alpha): the k with the highest speedup (0 when speculation does not pay)."""
        return self.k[np.argmax(self.speedup, axis=2)]

    @property
    def best_speedup(self) -> np.ndarray:
        return np.max(self.speedup, axis=2)

    @property
    def best_speculative_speedup(self) -> np.ndarray:
        """Best speedup over k >= 1 only: below 1 means speculation, at its best, loses."""
        spec = self.k > 0
        if not spec.any():
            return np.full(self.best_speedup.shape, np.nan)
        return np.max(self.speedup[:, :, spec, :], axis=2)

    @property
    def break_even_batch(self) -> np.ndarray:
        """(n_ctx, n_alpha): the first grid batch from which speculation no longer pays (-1: pays at all batches).

        A speedup below 1 at some batch followed by a recovery (e.g. a GEMM-shape artefact) does not count: the
        break-even is the first batch after the last batch at which speculation still pays.
        """
        pays = self.best_speculative_speedup >= 1.0  # (n_batch, n_ctx, n_alpha)
        n = pays.shape[0]
        any_pays = pays.any(axis=0)
        last = n - 1 - np.argmax(pays[::-1], axis=0)
        first_loss = np.where(any_pays, last + 1, 0)
        return np.where(first_loss < n, self.batch[np.minimum(first_loss, n - 1)], -1)

    def get_break_even_table(self) -> list[dict]:
        rows = []
        be = self.break_even_batch
        for j, ctx in enumerate(self.context_tokens):
            for a, alpha in enumerate(self.alpha):
                rows.append({
                    "context_tokens": int(ctx), "alpha": float(alpha), "break_even_batch": int(be[j, a]),
                    "best_k_at_batch_1": int(self.best_k[0, j, a]),
                    "best_speedup_at_batch_1": float(self.best_speedup[0, j, a]),
                })
        return rows

    def get_engine_schedules(self) -> list[dict]:
        """Per context bucket and alpha: what to configure in a serving engine.

        vllm: disable speculation when the batch reaches `speculative_disable_by_batch_size` (the break-even batch),
        with `num_speculative_tokens` = the single k that maximises the mean speedup over the batches below it.
        trtllm: `draft_len_schedule` {max_batch: k}, the best k for batches up to each key (0 = off), merged runs.
        """
        schedules = []
        be = self.break_even_batch
        for j, ctx in enumerate(self.context_tokens):
            for a, alpha in enumerate(self.alpha):
                paying = self.batch < be[j, a] if be[j, a] > 0 else np.ones_like(self.batch, dtype=bool)
                if be[j, a] == self.batch[0]:
                    paying[:] = False
                if paying.any():
                    mean_speedup = self.speedup[paying, j, :, a].mean(axis=0)
                    num_tokens = int(self.k[np.argmax(mean_speedup)])
                else:
                    num_tokens = 0
                best = self.best_k[:, j, a]
                schedule: dict[int, int] = {}
                for i, b in enumerate(self.batch):
                    if i + 1 == len(self.batch) or best[i + 1] != best[i]:
                        schedule[int(b)] = int(best[i])
                schedules.append({
                    "context_tokens": int(ctx), "alpha": float(alpha),
                    "vllm": {"speculative_disable_by_batch_size": int(be[j, a]) if be[j, a] > 0 else None,
                             "num_speculative_tokens": num_tokens},
                    "trtllm": {"draft_len_schedule": schedule},
                })
        return schedules

    def to_rows(self):
        """Long format: one row per grid point (for CSV)."""
        from .gridio import get_grid_columns

        return {name: np.asarray(values).reshape(-1) for name, values in get_grid_columns(self).items()}

    def to_csv(self) -> str:
        """The grid as CSV text: what csv.writer writes for to_rows(), formatted by numpy (see gridio)."""
        from .gridio import iter_csv

        return b"".join(iter_csv(self)).decode("ascii")

    def to_dict(self, include_grid: bool = True) -> dict:
        out = {
            "hardware": self.hardware, "model": self.model, "draft": self.draft,
            "tensor_parallel": self.tensor_parallel,
            "batch": self.batch.tolist(), "context_tokens": self.context_tokens.tolist(),
            "k": self.k.tolist(), "alpha": self.alpha.tolist(),
            "break_even": self.get_break_even_table(),
            "schedules": self.get_engine_schedules(),
        }
        if include_grid:
            out["grid"] = {name: v.tolist() for name, v in self.to_rows().items()}
        return out

    def to_json(self, include_grid: bool = True) -> str:
        if not include_grid:
            return json.dumps(self.to_dict(include_grid), indent=1)
        from .gridio import iter_json  # the same text as json.dumps of to_dict(), without a Python list per column

        return b"".join(iter_json(self)).decode("ascii")


def sweep(
    hw="h100", model="llama-3.1-8b", draft=DEFAULT_DRAFT, batch=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    ctx=(1024, 4096, 16384, 65536, 131072), alpha=(0.6, 0.8), k=tuple(range(0, 9)), weight_dtype="bf16",
    kv_dtype=None, activation_dtype=None, attention="flash", drafter=None, head_layer_fraction=1.0,
    extra_draft_pass=False, calibration=None, tp=1, draft_tp=None, quant_group_size=128,
) -> SweepResult:
    """Price speculation over the full grid batch x ctx x k x alpha in one vectorised evaluation."""
    hw_spec = load_hardware(hw)
    if calibration is not None:
        from .calibrate.profile import apply_calibration

        hw_spec, _ = apply_calibration(hw_spec, calibration)
    target = load_model(model)
    batch_v = np.asarray(sorted(set(int(b) for b in batch)), dtype=np.int64)
    ctx_v = np.asarray(sorted(set(int(c) for c in ctx)), dtype=np.int64)
    k_v = np.asarray(sorted(set(int(x) for x in k)), dtype=np.int64)
    alpha_v = check_alpha(sorted(set(float(a) for a in alpha)))
    if batch_v.size == 0 or ctx_v.size == 0 or k_v.size == 0 or alpha_v.size == 0:
        raise InputError("every sweep axis needs at least one value")
    if batch_v[0] <= 0:
        raise InputError("batch sizes must be positive")
    if k_v[0] < 0:
        raise InputError("k must be >= 0")
    if ctx_v[0] < 0:
        raise InputError("context must be >= 0")
    workload, _ = build_workload(target, 1, int(ctx_v.max()), weight_dtype, kv_dtype, activation_dtype, attention,
                                 allow_long_context=True, tp=tp, quant_group_size=quant_group_size, hw=hw_spec)
    spec_drafter, _ = resolve_drafter(target, draft, drafter, head_layer_fraction, draft_tp, hw_spec)
    timing = get_timing_model(hw_spec)
    b4, c4 = batch_v[:, None, None, None], ctx_v[None, :, None, None]
    k4, a4 = k_v[None, None, :, None], alpha_v[None, None, None, :]
    grid = price_speculation(hw_spec, target, workload, spec_drafter, timing, b4, c4, k4, a4,
                             extra_draft_pass=extra_draft_pass)
    shape = (batch_v.size, ctx_v.size, k_v.size, alpha_v.size)
    fits = _get_fits(hw_spec, target, workload, spec_drafter, b4[..., 0], c4[..., 0], k4[..., 0])
    return SweepResult(
        hardware=get_short_name(hw_spec), model=get_short_name(target), draft=spec_drafter.name,
        batch=batch_v, context_tokens=ctx_v, k=k_v, alpha=alpha_v,
        speedup=np.broadcast_to(grid.speedup, shape),
        expected_tokens=np.broadcast_to(grid.expected_tokens, shape),
        step_time_s=np.broadcast_to(grid.step_time_s, shape),
        target_decode_time_s=np.broadcast_to(grid.target_decode_time_s, shape)[:, :, 0, 0],
        draft_step_time_s=np.broadcast_to(grid.draft_step_time_s, shape)[:, :, 0, 0],
        verify_step_time_s=np.broadcast_to(grid.verify_step_time_s, shape)[..., 0],
        fits_in_memory=fits,
        tensor_parallel=workload.tensor_parallel,
    )


def _get_fits(hw, target, workload, drafter: Drafter, batch, ctx, k):
    """Target and draft weights + both KV caches + the verify step's activations fit in device memory."""
    fit = get_workload_memory_fit(hw, target, workload, k + 1, batch, ctx)
    total = fit.total_bytes
    if drafter.kind == "model":
        draft_tp = drafter.tensor_parallel or 1
        total = total + drafter.model.get_weight_bytes(workload.weight_dtype) / draft_tp + get_kv_cache_bytes(
            drafter.model, batch, ctx + k + 1, workload.kv_dtype, draft_tp)
    return np.broadcast_to(total <= hw.memory_capacity_bytes, np.broadcast(batch, ctx, k).shape)
