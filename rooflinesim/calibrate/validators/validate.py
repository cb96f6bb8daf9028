"""`rooflinesim validate`: a real decoder's measured step times and speculative loop vs rooflinesim's predictions.

The models are hold-out shapes (default target tiny-llama-123m, drafter tiny-draft-2l): none of their weight shapes
was calibrated (`plan.check_hold_out`). Measured:

* decode steps (q = 1) over batch x context; verify steps over k = 1..8 (q = k + 1); the drafter's decode steps;
* a speculative loop: k draft steps, one verify over k + 1 tokens, accept/reject per position with a synthetic
  acceptance rate a (seeded RNG, as serving engines' synthetic samplers do), per-sequence KV-cache rollback by
  moving each sequence's length; and a plain decode loop at the same batch and context;
* a randomised, seeded family of six more hold-out decoders (`calibrate.fitting.holdout`: wide and shallow, narrow and
  deep, GQA 1-8, vocabularies 32k-150k, 2-24 layers) in decode (`calibrate.validators.validate_family`).

Every calibrated prediction carries its 90 % interval; the report's `summary.coverage` is the share of
measurements inside it. Summaries, charts and printing are in `calibrate.validators.validate_summary`.

Predictions come from rooflinesim's own path: `step.get_step_cost` and `speculative.price_speculation` with the
profile's `MeasuredTiming` (calibrated), and `DatasheetTiming.speed_of_light` of the shipped datasheet spec the
profile corresponds to (`cpu-generic` on a CPU: its effective peaks and bandwidth, no overheads) as the
uncalibrated roofline.

The measured speedup is E(a, k) x T_decode / T_speculative_iteration with E = (1 - a^(k+1)) / (1 - a): the timing of
the real loop, at the expected acceptance (the synthetic acceptance itself is not what is being validated). The
realised acceptance of the loop is reported next to it.
"""

from __future__ import annotations

import datetime as _dt
import random
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from ...specs.registry import load_hardware, load_model
from ...scenario.builder import Scenario, build_scenario
from ...errors import InputError
from ...acceptance.closed_form import get_expected_tokens
from ...pricing.speculative import price_speculation
from ...pricing.speculative_result import get_interval
from ...step import get_step_cost
from ...timing import DatasheetTiming
from ..reference import model as M
from ..fitting.measurements import Timing
from ..fitting.plan import check_hold_out
from ...specs.profiles import load_profile
from ..measure.timers import Device, Timer, get_torch_dtype
from .validate_family import FamilyGrid, measure_family
from .validate_summary import (
    ape, break_even, combine_reports, coverage, grid_steps_between, plot_report, print_report, summarise,
    summarise_rows, write_report,
)

SPEC_BATCHES = (1, 2, 4, 8, 16, 32)
SPEC_CONTEXT = 1024
SPEC_K = 4
SPEC_ALPHA = 0.8


@dataclass
class Grid:
    decode_batches: tuple
    decode_contexts: tuple
    verify_k: tuple
    verify_batches: tuple
    draft_batches: tuple
    draft_contexts: tuple
    spec_batches: tuple
    spec_iterations: int
    passes: int
    min_calls: int
    min_time_s: float

    @classmethod
    def make(cls, quick: bool, tiny: bool = False) -> "Grid":
        if tiny:  # the CI smoke test
            return cls((1, 4), (256,), (4,), (1,), (1, 4), (256,), (1, 4), 2, 1, 2, 0.0)
        if quick:
            return cls((1, 4, 16), (1024,), (1, 4, 8), (1,), (1, 4, 16), (1024,), (1, 4, 16), 4, 1, 3, 0.03)
        return cls(SPEC_BATCHES, (256, 1024, 2048), tuple(range(1, 9)), (1, 8), SPEC_BATCHES, (256, 1024, 2048),
                   SPEC_BATCHES, 10, 2, 5, 0.15)


class Runner:
    def __init__(self, device: Device, dtype: str, target_spec, draft_spec, max_batch: int, max_tokens: int):
        self.device = device
        self.tdtype = get_torch_dtype(dtype)
        dev = device.torch_device
        self.target = M.build_decoder(target_spec, self.tdtype, dev, seed=1)
        self.draft = M.build_decoder(draft_spec, self.tdtype, dev, seed=2)
        self.max_tokens = max_tokens
        self._caches: dict = {}

    def use(self, which: str, batch: int) -> M.Decoder:
        model = self.target if which == "target" else self.draft
        key = (which, batch)
        if key not in self._caches:
            self._caches[key] = model.new_caches(batch, self.max_tokens)
        model.set_caches(self._caches[key])
        return model

    def step_fn(self, which: str, batch: int, context: int, q: int):
        dev = self.device.torch_device
        tokens = torch.randint(0, 32000, (batch, q), device=dev)
        start = torch.full((batch,), context, device=dev)

        def fn():
            model = self.use(which, batch)
            return model(tokens, start, context + q)
        return fn

    def speculative_loop(self, batch: int, context: int, k: int, alpha: float, iterations: int, seed: int) -> dict:
        """Plain decode loop and speculative loop at one batch; per-iteration times (s)."""
        dev = self.device.torch_device
        vocab = self.target.spec.vocab_size
        rng = np.random.default_rng(seed)
        sync = self.device.synchronize

        # plain decoding: one target step per token, positions advancing
        target = self.use("target", batch)
        lengths = np.full(batch, context)
        decode_times = []
        token = torch.randint(0, vocab, (batch, 1), device=dev)
        for i in range(iterations + 2):
            sync()
            t0 = time.perf_counter()
            target(token, torch.as_tensor(lengths, device=dev), int(lengths.max()) + 1)
            sync()
            if i >= 2:
                decode_times.append(time.perf_counter() - t0)
            lengths += 1

        # speculative decoding: k draft steps + one verify of k + 1 tokens; synthetic acceptance; rollback by length
        t_len = np.full(batch, context)  # tokens in the target's cache (the pending token not yet included)
        d_len = np.full(batch, context)
        pending = torch.randint(0, vocab, (batch, 1), device=dev)
        iteration_times, committed = [], []
        for i in range(iterations + 2):
            sync()
            t0 = time.perf_counter()
            draft = self.use("draft", batch)
            x = pending
            drafted = []
            for j in range(k):
                draft(x, torch.as_tensor(d_len + j, device=dev), int(d_len.max()) + j + 1)
                # synthetic sampler: the drafted token id is drawn, not argmaxed (its value does not matter)
                x = torch.as_tensor(rng.integers(0, vocab, (batch, 1)), device=dev)
                drafted.append(x)
            target = self.use("target", batch)
            verify_tokens = torch.cat([pending] + drafted, dim=1)
            target(verify_tokens, torch.as_tensor(t_len, device=dev), int(t_len.max()) + k + 1)
            accept = rng.random((batch, k)) < alpha
            n_accepted = np.cumprod(accept, axis=1).sum(axis=1)  # first rejection stops
            # commit pending + accepted drafts; the target's correction/bonus token becomes the next pending one
            t_len = t_len + n_accepted + 1
            d_len = d_len + np.minimum(n_accepted + 1, k)  # the drafter's cache rolls back past rejected drafts
            d_len = np.where(n_accepted == k, t_len, d_len)  # all accepted: the last draft's slot is skipped
            pending = torch.as_tensor(rng.integers(0, vocab, (batch, 1)), device=dev)
            sync()
            if i >= 2:
                iteration_times.append(time.perf_counter() - t0)
                committed.append(float(np.mean(n_accepted + 1)))
        return {"decode": Timing(tuple(decode_times)), "iteration": Timing(tuple(iteration_times)),
                "tokens_per_iteration": float(np.mean(committed))}


def run_validation(profile_path: str, device: Device, dtype: str | None = None, quick: bool = False,
                   target: str = "tiny-llama-123m", draft: str = "tiny-draft-2l", seed: int = 0,
                   progress: bool = True, tiny: bool = False, roofline_hw: str | None = None) -> dict:
    """Measure the hold-out decoder on `device` and compare with the predictions; returns the report dict."""
    check_hold_out()
    hw = load_profile(profile_path)
    measured = hw.measured
    dtype = dtype or measured.provenance.dtypes[0]
    if dtype not in measured.dtypes:
        raise InputError(f"{profile_path} measured {', '.join(measured.dtypes)}, not {dtype}; "
                         f"run 'rooflinesim calibrate --dtype {dtype}' first")
    if measured.provenance.device_kind != device.kind:
        raise InputError(f"{profile_path} was measured on {measured.provenance.device_name}, not on a {device.kind} "
                         "device: validate it where it was measured")
    base_name = roofline_hw or measured.base_hardware
    try:
        base = load_hardware(base_name)
    except Exception:
        base = hw  # no shipped spec for this device: the profile's own fitted peaks
        base_name = f"{hw.measured.profile_name} (fitted peaks)"
    target_spec, draft_spec = load_model(target), load_model(draft)
    ctx = SPEC_CONTEXT if not tiny else 256

    def scenarios(b) -> tuple[Scenario, Scenario]:
        """The calibrated scenario at batch b and the same deployment priced at the base device's speed of light."""
        calibrated = build_scenario(hw, target_spec, b, ctx, weight_dtype=dtype, kv_dtype=dtype, activation_dtype=dtype,
                                    draft=draft_spec, alpha=SPEC_ALPHA, k=SPEC_K, allow_long_context=True,
                                    engine="ideal")  # bare forward passes were timed: no engine's costs
        roof = build_scenario(base, target_spec, b, ctx, weight_dtype=dtype, kv_dtype=dtype, activation_dtype=dtype,
                              draft=draft_spec, alpha=SPEC_ALPHA, k=SPEC_K, allow_long_context=True, engine="ideal")
        return calibrated, replace(roof, timing=DatasheetTiming.speed_of_light(base))
    grid = Grid.make(quick, tiny)
    started = time.perf_counter()
    max_ctx = max(grid.decode_contexts + grid.draft_contexts + (SPEC_CONTEXT,))
    max_batch = max(grid.decode_batches + grid.verify_batches + grid.draft_batches + grid.spec_batches)
    runner = Runner(device, dtype, target_spec, draft_spec, max_batch,
                    max_ctx + (grid.spec_iterations + 3) * (SPEC_K + 1) + 16)
    timer = Timer(device)

    configs = []
    for b in grid.decode_batches:
        for s in grid.decode_contexts:
            configs.append(("decode", b, s, 1))
    for b in grid.verify_batches:
        for k in grid.verify_k:
            configs.append(("verify", b, SPEC_CONTEXT if not tiny else 256, k + 1))
    for b in grid.draft_batches:
        for s in grid.draft_contexts:
            configs.append(("draft", b, s, 1))
    samples: dict = {}
    rng = random.Random(seed)
    spec_runs: dict = {}

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    family_grid = FamilyGrid.make(quick, tiny)
    family_rows: list[dict] = []
    total = (len(configs) * grid.passes + len(grid.spec_batches)
             + family_grid.count * len(family_grid.batches) * len(family_grid.contexts))
    with torch.inference_mode(), Progress(
            TextColumn("[bold]validate[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(), disable=not progress, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"{target_spec.name} + {draft_spec.name} {dtype}", total=total)
        spec_order = list(grid.spec_batches)
        for p in range(grid.passes):
            order = list(configs)
            rng.shuffle(order)
            # the speculative loops are spread over the first pass, between step measurements
            slots = {int(i * len(order) / max(len(spec_order), 1)): b for i, b in enumerate(spec_order)} if p == 0 else {}
            for i, (kind, b, s, q) in enumerate(order):
                if i in slots:
                    b_spec = slots[i]
                    spec_runs[b_spec] = runner.speculative_loop(b_spec, SPEC_CONTEXT if not tiny else 256, SPEC_K,
                                                                SPEC_ALPHA, grid.spec_iterations, seed + b_spec)
                    bar.advance(task)
                which = "draft" if kind == "draft" else "target"
                fn = runner.step_fn(which, b, s, q)
                t = timer.time(fn, min_calls=grid.min_calls, min_time_s=grid.min_time_s, max_calls=50,
                               warmup_s=0.0, warmup_calls=1)
                samples.setdefault((kind, b, s, q), []).extend(t.samples)
                bar.advance(task)
        for b in spec_order:
            if b not in spec_runs:
                spec_runs[b] = runner.speculative_loop(b, SPEC_CONTEXT if not tiny else 256, SPEC_K, SPEC_ALPHA,
                                                       grid.spec_iterations, seed + b)
                bar.advance(task)
        del runner  # the family's models are built one at a time, after the named ones are gone
        family_rows = measure_family(hw, base, device, dtype, family_grid, timer, grid.min_calls, grid.min_time_s,
                                     seed, advance=lambda: bar.advance(task))

    rows = []
    for kind, b, s, q in configs:
        t = Timing(tuple(samples[(kind, b, s, q)]))
        priced = []
        for sc in scenarios(b):
            spec, workload = ((sc.drafter.model, sc.draft_workload) if kind == "draft" else (sc.model, sc.workload))
            priced.append(get_step_cost(sc.hardware, spec, workload, q, sc.timing, s, b))
        calibrated, uncalibrated = priced
        rows.append({
            "kind": kind, "batch": b, "context_tokens": s, "new_tokens": q,
            "measured_s": t.estimate_s, "measured_spread": t.spread, "measured_median_s": t.median_s,
            "predicted_s": float(calibrated.step_time_s), "roofline_s": float(uncalibrated.roofline_step_time_s),
            "predicted_low_s": None if calibrated.sigmas is None else float(calibrated.step_time_s_low),
            "predicted_high_s": None if calibrated.sigmas is None else float(calibrated.step_time_s_high),
        })
    rows += family_rows

    spec_rows = []
    expected = float(get_expected_tokens(SPEC_K, SPEC_ALPHA))
    for b in grid.spec_batches:
        run = spec_runs[b]
        pred, roof = (price_speculation(sc, b, ctx, SPEC_K, SPEC_ALPHA) for sc in scenarios(b))
        t_dec, t_it = run["decode"].estimate_s, run["iteration"].estimate_s
        predicted_speedup = float(np.asarray(pred.speedup).reshape(-1)[0])
        interval = get_interval(predicted_speedup, None if pred.speedup_rel_sigma is None
                                else float(np.asarray(pred.speedup_rel_sigma).reshape(-1)[0])) or (None, None)
        spec_rows.append({
            "batch": b, "context_tokens": ctx, "k": SPEC_K, "alpha": SPEC_ALPHA,
            "measured_speedup": expected * t_dec / t_it,
            "predicted_speedup": predicted_speedup,
            "predicted_speedup_low": interval[0], "predicted_speedup_high": interval[1],
            "roofline_speedup": float(np.asarray(roof.speedup).reshape(-1)[0]),
            "measured_speedup_realized": run["tokens_per_iteration"] * t_dec / t_it,
            "realized_tokens_per_iteration": run["tokens_per_iteration"],
            "expected_tokens_per_iteration": expected,
            "measured_decode_s": t_dec, "measured_iteration_s": t_it,
            "predicted_decode_s": float(np.asarray(pred.target_decode_time_s).reshape(-1)[0]),
            "predicted_iteration_s": float(np.asarray(pred.step_time_s).reshape(-1)[0]),
        })

    batches = [r["batch"] for r in spec_rows]
    be_measured = break_even(batches, [r["measured_speedup"] for r in spec_rows])
    be_predicted = break_even(batches, [r["predicted_speedup"] for r in spec_rows])
    be_roofline = break_even(batches, [r["roofline_speedup"] for r in spec_rows])
    speedup_errors = [abs(r["predicted_speedup"] - r["measured_speedup"]) for r in spec_rows]
    report = {
        "profile": str(profile_path),
        "device": device.name,
        "dtype": dtype,
        "model": target_spec.name,
        "draft": draft_spec.name,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "configs": rows,
        "summary": {
            "calibrated": summarise([ape(r["predicted_s"], r["measured_s"]) for r in rows]),
            "roofline": summarise([ape(r["roofline_s"], r["measured_s"]) for r in rows]),
            "calibrated_vs_plain_median": summarise([ape(r["predicted_s"], r["measured_median_s"]) for r in rows]),
            "by_kind": {kind: summarise_rows([r for r in rows if r["kind"] == kind])
                        for kind in sorted({r["kind"] for r in rows})},
            "hold_out_family": summarise_rows(family_rows) if family_rows else None,
            "coverage": coverage(rows, spec_rows),
        },
        "speculative": spec_rows,
        "break_even": {
            "measured_batch": be_measured,
            "predicted_batch": be_predicted,
            "roofline_batch": be_roofline,
            "grid": batches,
            "predicted_grid_steps_off": grid_steps_between(batches, be_measured, be_predicted),
            "roofline_grid_steps_off": grid_steps_between(batches, be_measured, be_roofline),
        },
        "speedup_error": {
            "max_abs_calibrated": float(max(speedup_errors)) if speedup_errors else None,
            "max_abs_roofline": float(max(abs(r["roofline_speedup"] - r["measured_speedup"]) for r in spec_rows))
            if spec_rows else None,
        },
        "roofline_hardware": base_name,
        "threads": device.threads,
        "quick": quick,
        "duration_s": round(time.perf_counter() - started, 1),
        "notes": ("measured_s: median of the faster half of the individual step calls (about p25; the plain median is measured_median_s, robust to other tenants' stalls); measured_speedup: E(alpha, k) x T_decode / "
                  "T_iteration of the real loop (realised acceptance in measured_speedup_realized); break-even: the "
                  "smallest grid batch from which the speedup stays below 1 (null: pays at the largest batch). roofline: "
                  f"DatasheetTiming.speed_of_light of {base_name}. Rows with a model are the randomised hold-out "
                  f"family (seed {seed}; calibrate.fitting.holdout), included in the summary; predicted_low_s / _high_s: "
                  "the calibrated 90 % prediction interval, summary.coverage the share of measurements inside it."),
    }
    return report


#: the break-even definition validate uses, under the name tests have imported it by
_break_even = break_even

#: the report helpers live in `validate_summary`; these names are also importable from here
__all__ = ["run_validation", "Grid", "Runner", "combine_reports", "plot_report", "print_report", "write_report"]
