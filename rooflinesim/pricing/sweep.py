"""The speculative model broadcast over a batch x context x k x alpha grid, plus the tables users act on.

One numpy evaluation prices the whole grid (no Python loop over grid points): the step model runs once over
(batch, context, k) and acceptance broadcasts on top. From it: best k, the break-even batch per context, and
engine-ready schedules (a vLLM-style disable-by-batch-size threshold with a number of speculative tokens, and a
TensorRT-LLM draft_len_schedule {from_batch: k} with a max_concurrency cut-off) per context bucket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from textwrap import indent

import numpy as np

from ..specs.registry import get_short_name
from ..scenario.builder import Scenario, build_scenario
from ..scenario.groups import (
    DEFAULT, FLAT_OPTIONS, Deployment, Memory, Precision, Sampling, Speculation, describe_options, get_scenario_options,
)
from ..scenario.inputs import (
    DEFAULT_K_MAX, DEFAULT_SWEEP_ALPHAS, DEFAULT_SWEEP_BATCH, DEFAULT_SWEEP_CONTEXT, SWEEP_ALLOWS_LONG_CONTEXT,
)
from .break_even import (
    VERDICT_NEVER_PAYS, VERDICT_NOTHING_FITS, VERDICT_PAYS_UP_TO_MAX_FIT, VERDICT_STOPS_PAYING, get_best_k_index,
    get_break_even_batch, get_break_even_verdict,
)
from .speculative import price_speculation
from ..errors import InputError
from .predict import JSON_SCHEMA_VERSION
from .speedup_band import SpeedupBand, get_scenario_speedup_band


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
    draft_step_time_s: np.ndarray  # (n_batch, n_ctx, n_k): the mean draft step the step time sums
    verify_step_time_s: np.ndarray  # (n_batch, n_ctx, n_k)
    fits_in_memory: np.ndarray  # (n_batch, n_ctx, n_k): target + draft weights, KV caches, verify activations
    tensor_parallel: int = 1
    draft_tensor_parallel: int | None = None
    warnings: tuple[str, ...] = ()
    engine: str = "ideal"  # the engine profile whose costs priced the grid (docs/engines.md)
    implementation: str = "reference"  # the code running the model (--impl, docs/calibration.md)
    assumed: dict = field(default_factory=dict)  # the inputs the user did not give (Scenario.assumed)
    #: (n_ctx,): the largest batch whose target + draft weights, KV caches and verify activations fit in memory at
    #: the smallest speculative k of the grid (the memory model's exact count, not a grid batch); None when unknown
    max_batch_that_fits: np.ndarray | None = None
    #: on a datasheet, the engine profile's published speedup error (`speedup_band`): the break-even then comes with
    #: the batches between which it falls within that error; None under a measured profile
    speedup_band: SpeedupBand | None = None

    @property
    def n_points(self) -> int:
        return int(np.prod(self.speedup.shape))

    @property
    def _fits4(self) -> np.ndarray:
        return np.broadcast_to(self.fits_in_memory[..., None], self.speedup.shape)

    @property
    def best_k(self) -> np.ndarray:
        """(n_batch, n_ctx, n_alpha): the k with the highest speedup among those that fit in memory (0 when
        speculation does not pay)."""
        return self.k[get_best_k_index(self.speedup, self._fits4, axis=2)]

    @property
    def best_speedup(self) -> np.ndarray:
        index = get_best_k_index(self.speedup, self._fits4, axis=2)
        return np.take_along_axis(self.speedup, index[:, :, None, :], axis=2)[:, :, 0, :]

    @property
    def best_speculative_speedup(self) -> np.ndarray:
        """Best speedup over the k >= 1 that fit in memory (NaN where none fits): below 1 means speculation, at its
        best, loses."""
        spec = self.k > 0
        if not spec.any():
            return np.full(self.best_speedup.shape, np.nan)
        feasible = np.where(self._fits4[:, :, spec, :], self.speedup[:, :, spec, :], -np.inf)
        best = feasible.max(axis=2)
        return np.where(np.isfinite(best), best, np.nan)

    @property
    def speculation_fits(self) -> np.ndarray:
        """(n_batch, n_ctx): whether some speculative k (k >= 1) of the grid fits in memory at that point."""
        spec = self.k > 0
        fits = self.fits_in_memory[:, :, spec] if spec.any() else self.fits_in_memory
        return fits.any(axis=2)

    @property
    def pays(self) -> np.ndarray:
        """(n_batch, n_ctx, n_alpha): the best speculative k that fits beats plain decoding, strictly (a tie at 1.0x
        does not pay, as in `get_speedup_verdict` and the band's ends); False where none fits."""
        with np.errstate(invalid="ignore"):
            return self.best_speculative_speedup > 1.0  # NaN (nothing fits) compares False

    @property
    def break_even_batch(self) -> np.ndarray:
        """(n_ctx, n_alpha): the first grid batch *that fits in memory* from which speculation no longer pays; -1
        where it pays at every batch that fits, or where none fits (`break_even_verdict` tells which). A batch that
        does not fit is a memory answer (`max_batch_that_fits`), never a break-even."""
        return get_break_even_batch(self.batch, self.pays, self.speculation_fits[:, :, None])

    @property
    def break_even_batch_range(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(earliest, latest), each (n_ctx, n_alpha): the break-even batch with the measured speedup at the low and at
        the high end of the engine profile's published error (`speedup_band`); -1 where that reading pays at every
        batch that fits. None without a band (a measured profile)."""
        if self.speedup_band is None:
            return None
        feasible = self.speculation_fits[:, :, None]
        return tuple(get_break_even_batch(self.batch, pays, feasible)
                     for pays in self.speedup_band.get_pays_at_ends(self.best_speculative_speedup))

    @property
    def break_even_verdict(self) -> np.ndarray:
        """(n_ctx, n_alpha) of break_even.VERDICT_* strings."""
        feasible = self.speculation_fits[:, :, None]
        return get_break_even_verdict(self.break_even_batch, feasible.any(axis=0),
                                      (self.pays & feasible).any(axis=0))

    def get_largest_fitting_batch(self) -> list[int | None]:
        """Per context: the largest *grid* batch at which some speculative k fits (None: none does)."""
        fits = self.speculation_fits
        return [int(self.batch[fits[:, j]].max()) if fits[:, j].any() else None
                for j in range(self.context_tokens.size)]

    def get_break_even_table(self) -> list[dict]:
        """Per context and alpha: where speculation stops paying (among the batches that fit), the verdict, what fits
        in memory, and the best k at the grid's first batch."""
        rows = []
        be, verdict, best_k, best_speedup = (self.break_even_batch, self.break_even_verdict, self.best_k,
                                             self.best_speedup)  # each is a grid pass
        largest = self.get_largest_fitting_batch()
        span = self.break_even_batch_range
        for j, ctx in enumerate(self.context_tokens):
            for a, alpha in enumerate(self.alpha):
                rows.append({
                    "context_tokens": int(ctx), "alpha": float(alpha),
                    "break_even_batch": int(be[j, a]) if be[j, a] > 0 else None,
                    "break_even_batch_earliest": None if span is None or span[0][j, a] <= 0 else int(span[0][j, a]),
                    "break_even_batch_latest": None if span is None or span[1][j, a] <= 0 else int(span[1][j, a]),
                    "speculation_verdict": str(verdict[j, a]),
                    "largest_fitting_batch": largest[j],
                    "max_batch_that_fits": (None if self.max_batch_that_fits is None
                                            else int(self.max_batch_that_fits[j])),
                    "first_batch": int(self.batch[0]),
                    "best_k_at_first_batch": int(best_k[0, j, a]),
                    "best_speedup_at_first_batch": float(best_speedup[0, j, a]),
                })
        return rows

    def get_engine_schedules(self) -> list[dict]:
        """Per context bucket and alpha: what to configure in a serving engine, over the batches that fit.

        vllm: disable speculation when the batch reaches `speculative_disable_by_batch_size` (the break-even batch;
        None where speculation pays up to the largest batch that fits), with `num_speculative_tokens` = the single k
        that maximises the mean speedup over the paying batches below it.
        trtllm: `draft_len_schedule` {batch: k}, each key the *last* batch its k applies to, no speculation above the
        largest key (TensorRT-LLM with PR #10860, tensorrt_llm/llmapi/llm_args.py), over the batches that fit only
        (where it pays up to the largest batch that fits, the last k holds up to `max_batch_that_fits`);
        `draft_len_schedule_older_releases`, the same with each key the batch *from which* its k applies (releases
        with PR #8194; the reading of `serve`'s schedule policy); a batch that does not fit never gets a k = 0 entry.
        `max_concurrency` = the last batch before the break-even (the stock fallback, used without a schedule; None
        where it pays at every batch that fits, 0 where it pays at none).
        vLLM V0's `speculative_disable_by_batch_size` is kept for V0 deployments; V1 ignores it (use `rooflinesim
        serve --emit-config vllm` for V1's dynamic speculative decoding config).
        """
        schedules = []
        be, verdict, best_k = self.break_even_batch, self.break_even_verdict, self.best_k
        feasible = self.speculation_fits
        for j, ctx in enumerate(self.context_tokens):
            fitting = feasible[:, j]
            for a, alpha in enumerate(self.alpha):
                stop = int(be[j, a])
                paying = fitting & ((self.batch < stop) if stop > 0 else True)
                if verdict[j, a] in (VERDICT_NEVER_PAYS, VERDICT_NOTHING_FITS):
                    paying = np.zeros_like(fitting)
                if paying.any():
                    fit_k = self.fits_in_memory[paying, j, :]
                    mean_speedup = np.where(fit_k, self.speedup[paying, j, :, a], 0.0).mean(axis=0)
                    num_tokens = int(self.k[np.argmax(mean_speedup)])
                else:
                    num_tokens = 0
                ks_fitting = [(int(self.batch[i]), int(best_k[i, j, a]) if stop < 0 or self.batch[i] < stop else 0)
                              for i in np.flatnonzero(fitting)]
                older = _from_keys(ks_fitting)
                up_to = _up_to_keys(ks_fitting)
                if verdict[j, a] == VERDICT_PAYS_UP_TO_MAX_FIT and up_to and self.max_batch_that_fits is not None:
                    last = max(up_to)  # it pays at every batch that fits: the last k holds up to the memory cap
                    up_to[max(last, int(self.max_batch_that_fits[j]))] = up_to.pop(last)
                if verdict[j, a] == VERDICT_STOPS_PAYING:
                    concurrency = int(self.batch[fitting & (self.batch < stop)].max())
                elif verdict[j, a] == VERDICT_NEVER_PAYS:
                    concurrency = 0
                else:
                    concurrency = None
                schedules.append({
                    "context_tokens": int(ctx), "alpha": float(alpha),
                    "speculation_verdict": str(verdict[j, a]),
                    "vllm": {"speculative_disable_by_batch_size": stop if stop > 0 else None,
                             "num_speculative_tokens": num_tokens},
                    "trtllm": {"draft_len_schedule": up_to, "draft_len_schedule_older_releases": older,
                               "max_concurrency": concurrency},
                })
        return schedules

    def to_columns(self) -> dict[str, np.ndarray]:
        """Long format as columns: {name: one value per grid point} (what CSV and JSON grids hold)."""
        from .gridio import get_grid_columns

        return {name: np.asarray(values).reshape(-1) for name, values in get_grid_columns(self).items()}

    def to_rows(self) -> list[dict]:
        """Long format as rows: one {name: value} per grid point (a Python dict each: for small grids; `to_columns`
        or `to_csv` for large ones)."""
        columns = self.to_columns()
        return [dict(zip(columns, values)) for values in zip(*(v.tolist() for v in columns.values()))]

    def to_csv(self) -> str:
        """The grid as CSV text: what csv.writer writes for to_columns(), formatted by numpy (see gridio)."""
        from .gridio import iter_csv

        return b"".join(iter_csv(self)).decode("ascii")

    def to_dict(self, include_grid: bool = True) -> dict:
        out = {
            "schema_version": JSON_SCHEMA_VERSION,
            "hardware": self.hardware, "model": self.model, "draft": self.draft, "engine": self.engine,
            "implementation": self.implementation,
            "tensor_parallel": self.tensor_parallel, "draft_tensor_parallel": self.draft_tensor_parallel,
            "warnings": list(self.warnings), "assumed": dict(self.assumed),
            "batch": self.batch.tolist(), "context_tokens": self.context_tokens.tolist(),
            "k": self.k.tolist(), "alpha": self.alpha.tolist(),
            "break_even": self.get_break_even_table(),
            "break_even_band_source": None if self.speedup_band is None else self.speedup_band.source,
            "schedules": self.get_engine_schedules(),
        }
        if include_grid:
            out["grid"] = {name: v.tolist() for name, v in self.to_columns().items()}
        return out

    def to_json(self, include_grid: bool = True) -> str:
        if not include_grid:
            return json.dumps(self.to_dict(include_grid), indent=1)
        from .gridio import iter_json  # the same text as json.dumps of to_dict(), without a Python list per column

        return b"".join(iter_json(self)).decode("ascii")


def sweep(
    hw=None, model=None, draft=None, batch=None, ctx=None, alpha=None, k=None, *,
    deployment: Deployment | None = None,
    precision: Precision | None = None,
    speculation: Speculation | None = None,
    memory: Memory | None = None,
    sampling: Sampling | bool = DEFAULT,
    tp=DEFAULT, draft_tp=DEFAULT, calibration=DEFAULT, engine=DEFAULT, attention=DEFAULT, implementation=DEFAULT,
    weight_dtype=DEFAULT, kv_dtype=DEFAULT, activation_dtype=DEFAULT, quant_group_size=DEFAULT, quant_kernel=DEFAULT,
    speculative=DEFAULT, drafter=DEFAULT, alpha_per_position=DEFAULT, acceptance=DEFAULT, acceptance_k=DEFAULT,
    acceptance_as_iid=DEFAULT, tree=DEFAULT, draft_kv_budget=DEFAULT, draft_layer_fraction=DEFAULT,
    head_layer_fraction=DEFAULT, extra_draft_pass=DEFAULT, draft_first_step_tokens=DEFAULT,
    ngram_match_fraction=DEFAULT,
    gpu_memory_utilization=DEFAULT, memory_reserve_bytes=DEFAULT, allow_long_context=DEFAULT,
    assumed: dict | None = None,
) -> SweepResult:
    from ..units import parse_count_range

    flat = {name: value for name, value in locals().items()
            if name in FLAT_OPTIONS and name not in ("sampling", "k") and value is not DEFAULT}  # k: the grid
    for name in ("hw", "model", "draft", "alpha"):  # positional: None is not given
        if flat[name] is None:
            del flat[name]
    if allow_long_context is DEFAULT and memory is None:
        flat["allow_long_context"] = SWEEP_ALLOWS_LONG_CONTEXT
    options = get_scenario_options(deployment, precision, speculation, memory, sampling, **flat)
    assumed = dict(assumed or {})
    if batch is None:
        batch = parse_count_range(DEFAULT_SWEEP_BATCH)
        assumed["batch"] = DEFAULT_SWEEP_BATCH
    if ctx is None:
        ctx = parse_count_range(DEFAULT_SWEEP_CONTEXT)
        assumed["context"] = DEFAULT_SWEEP_CONTEXT
    if k is None:
        k = range(0, DEFAULT_K_MAX + 1)
        assumed["k"] = f"0..{DEFAULT_K_MAX}"
    grid = {"k_values": k}
    spec = options.speculation
    if spec.acceptance is not None:  # a grid prices i.i.d. rates (see build_scenario)
        if acceptance_as_iid is DEFAULT:
            grid["acceptance_as_iid"] = True
    elif spec.alpha is None and spec.alpha_per_position is None:
        grid["alpha"] = DEFAULT_SWEEP_ALPHAS
        assumed["alpha"] = ", ".join(f"{a:g}" for a in DEFAULT_SWEEP_ALPHAS) + " (acceptance rates: measure yours " \
                                                                                "with 'rooflinesim acceptance')"
    scenario = build_scenario(None, None, batch, ctx, deployment=options.deployment, precision=options.precision,
                              speculation=replace(spec, **grid), memory=options.memory, sampling=options.sampling,
                              assumed=assumed)
    return sweep_scenario(scenario)


sweep.__doc__ = f"""Price speculation over the full grid batch x ctx x k x alpha in one vectorised evaluation.

    `k` is the grid's draft lengths (the scenario's `k_values`). The options are `predict`'s (groups or flat
    keywords, below), with the same defaults except the grid's own: batch {DEFAULT_SWEEP_BATCH}, context
    {DEFAULT_SWEEP_CONTEXT}, k 0..{DEFAULT_K_MAX}, alpha {", ".join(f"{a:g}" for a in DEFAULT_SWEEP_ALPHAS)} unless an
    `acceptance` is given (which then enters as the i.i.d. rate with the same expected tokens, unless
    acceptance_as_iid is given), and contexts above the model's maximum modelled with a warning unless
    allow_long_context or a `memory` group is given. Each default used is listed in `assumed`.

{indent(describe_options(exclude=("hw", "model", "draft", "alpha", "k", "k_values")), "    ")}
    """


def sweep_scenario(scenario: Scenario) -> SweepResult:
    """The scenario's batch x context x k x alpha grid priced at once (i.i.d. acceptance only)."""
    if scenario.drafter is None:
        raise InputError("sweep needs a drafter: speculation was switched off")
    if scenario.acceptance.alphas is None:
        raise InputError("sweep takes i.i.d. acceptance rates (alpha); per-position rates are for predict")
    batch_v, ctx_v, k_v = scenario.batch, scenario.context_tokens, scenario.k_values
    alpha_v = np.asarray(scenario.acceptance.alphas, dtype=float)
    b4, c4 = batch_v[:, None, None, None], ctx_v[None, :, None, None]
    k4, a4 = k_v[None, None, :, None], alpha_v[None, None, None, :]
    grid = price_speculation(scenario, b4, c4, k4, a4)
    shape = (batch_v.size, ctx_v.size, k_v.size, alpha_v.size)
    return SweepResult(
        hardware=get_short_name(scenario.hardware), model=get_short_name(scenario.model),
        draft=scenario.drafter.name, batch=batch_v, context_tokens=ctx_v, k=k_v, alpha=alpha_v,
        speedup=np.broadcast_to(grid.speedup, shape),
        expected_tokens=np.broadcast_to(grid.expected_tokens, shape),
        step_time_s=np.broadcast_to(grid.step_time_s, shape),
        target_decode_time_s=np.broadcast_to(grid.target_decode_time_s, shape)[:, :, 0, 0],
        draft_step_time_s=np.broadcast_to(grid.draft_step_time_s, shape)[..., 0],
        verify_step_time_s=np.broadcast_to(grid.verify_step_time_s, shape)[..., 0],
        fits_in_memory=np.broadcast_to(grid.fits_in_memory, shape)[..., 0],
        tensor_parallel=scenario.workload.tensor_parallel,
        draft_tensor_parallel=None if scenario.draft_workload is None else scenario.draft_workload.tensor_parallel,
        warnings=scenario.warnings, assumed=dict(scenario.assumed),
        engine=scenario.engine_name, implementation=scenario.workload.implementation,
        max_batch_that_fits=_max_batch_that_fits(scenario),
        speedup_band=get_scenario_speedup_band(scenario),
    )


def _from_keys(ks: list[tuple[int, int]]) -> dict[int, int]:
    """{batch: k} where each key is the batch *from which* its k applies (TensorRT-LLM before PR #10860)."""
    out: dict[int, int] = {}
    for batch, k in ks:
        if not out or list(out.values())[-1] != k:
            out[batch] = k
    return out


def _up_to_keys(ks: list[tuple[int, int]]) -> dict[int, int]:
    """{batch: k} where each key is the *last* batch its k applies to, and batches above the largest key do not
    speculate (TensorRT-LLM with PR #10860, tensorrt_llm/llmapi/llm_args.py): runs up to the last paying batch."""
    last_paying = max((i for i, (_, k) in enumerate(ks) if k > 0), default=-1)
    out: dict[int, int] = {}
    for i, (batch, k) in enumerate(ks[:last_paying + 1]):
        following = ks[i + 1][1] if i + 1 <= last_paying else None
        if following != k:
            out[batch] = k
    return out


def _max_batch_that_fits(scenario: Scenario) -> np.ndarray:
    """(n_ctx,): the memory model's largest batch per context at the smallest speculative k of the grid."""
    spec = scenario.k_values[scenario.k_values > 0]
    k = int(spec.min()) if spec.size else 0
    return np.asarray(scenario.get_max_batch(scenario.context_tokens, k), dtype=np.int64).reshape(-1)
