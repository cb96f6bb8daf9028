"""`rooflinesim validate`'s randomised hold-out family (`calibrate.fitting.holdout`) measured and priced (torch): one decode
step per (model, batch, context), timed as the named hold-out models are, against the calibrated prediction with
its 90 % interval and the uncalibrated roofline. Models are built one at a time, so memory holds one of them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...scenario.builder import build_scenario
from ...step import get_step_cost
from ..reference import model as M
from ..fitting.holdout import make_hold_out_family
from ..measure.timers import Device, Timer, get_torch_dtype


@dataclass(frozen=True)
class FamilyGrid:
    count: int  # family members measured (the archetypes in order)
    first: int  # index of the first archetype (the CI smoke test measures one small model)
    batches: tuple[int, ...]
    contexts: tuple[int, ...]

    @classmethod
    def make(cls, quick: bool, tiny: bool = False) -> "FamilyGrid":
        if tiny:
            return cls(1, 1, (1,), (256,))
        if quick:
            return cls(6, 0, (1, 8), (512,))
        return cls(6, 0, (1, 4, 16), (256, 2048))


def price_row(hw, base, spec, dtype: str, batch: int, context: int, implementation: str | None = None) -> dict:
    """The calibrated prediction (with its interval) and the base device's roofline of one decode step, of the
    model run by `implementation` (None: the reference decoder; `specs.implementation`)."""
    options = dict(weight_dtype=dtype, kv_dtype=dtype, activation_dtype=dtype, speculative=False,
                   allow_long_context=True, engine="ideal",  # bare forward passes were timed: no engine's costs
                   implementation=implementation)
    calibrated = build_scenario(hw, spec, batch, context, **options)
    step = get_step_cost(calibrated.hardware, spec, calibrated.workload, 1, calibrated.timing, context, batch)
    roof = build_scenario(base, spec, batch, context, **options)
    roofline = get_step_cost(roof.hardware, spec, roof.workload, 1, roof.timing, context, batch)
    return {
        "predicted_s": float(step.step_time_s), "roofline_s": float(roofline.roofline_step_time_s),
        "predicted_low_s": None if step.sigmas is None else float(step.step_time_s_low),
        "predicted_high_s": None if step.sigmas is None else float(step.step_time_s_high),
    }


def measure_family(hw, base, device: Device, dtype: str, grid: FamilyGrid, timer: Timer, min_calls: int,
                   min_time_s: float, seed: int = 0, advance=lambda: None) -> list[dict]:
    """Report rows (`validation_report.StepRow`, with `model`) for the family's decode steps."""
    family = make_hold_out_family(seed)[grid.first:grid.first + grid.count]
    tdtype, dev = get_torch_dtype(dtype), device.torch_device
    rows = []
    for i, spec in enumerate(family):
        decoder = M.build_decoder(spec, tdtype, dev, seed=100 + i)
        max_tokens = max(grid.contexts) + 8
        for batch in grid.batches:
            decoder.setup_caches(batch, max_tokens)
            for context in grid.contexts:
                tokens = torch.randint(0, spec.vocab_size, (batch, 1), device=dev)
                start = torch.full((batch,), context, device=dev)
                with torch.inference_mode():
                    t = timer.time(lambda: decoder(tokens, start, context + 1), min_calls=min_calls,
                                   min_time_s=min_time_s, max_calls=50, warmup_s=0.0, warmup_calls=1)
                rows.append({"kind": "decode", "model": spec.name, "batch": batch, "context_tokens": context,
                             "new_tokens": 1, "measured_s": t.estimate_s, "measured_spread": t.spread,
                             "measured_median_s": t.median_s, **price_row(hw, base, spec, dtype, batch, context)})
                advance()
        decoder = None  # one family member in memory at a time
    return rows


def price_row_with_impl(hw, base, spec, dtype: str, batch: int, context: int, implementation: str) -> dict:
    """`price_row` with `implementation`, plus the row's implementation and its price as if the reference decoder
    ran it (`predicted_reference_s`): what the implementation profile changes, in the same report."""
    row = price_row(hw, base, spec, dtype, batch, context, implementation)
    reference = price_row(hw, base, spec, dtype, batch, context)["predicted_s"]
    return {**row, "implementation": implementation, "predicted_reference_s": reference}
