"""Is the machine as fast now as when its profile was measured? Three short reference timings, taken by `calibrate`
(stored in the profile's provenance as `anchor_s`) and again by every measured validation at its start, between
its parts and at its end.

A measured validation compares a run of now with a profile of then. On a shared or virtualised CPU the two can
differ: on the 2-vCPU AMD EPYC VM of this project a tiny decoder's forward moved by 20-40 % within minutes, with
nothing else running and CPU pressure at 0 %, sometimes for compute-bound multi-threaded calls only, sometimes for
dispatch-bound ones. The profile's drift reference (a cache-resident GEMV) did not see it. A validation that misses
its goal in such a state says nothing about the model; one that passes in it may be luck. So each report states how
far the machine's speed was from the profile's while it ran, and flags a run whose median anchor time moved by
more than `ANCHOR_TOLERANCE`:

* 'gemm': F.linear of x [256, 1024] by W [1024, 1024] in fp32 at the profile's thread count (0.5 GFLOP per call,
  compute-bound, every thread busy);
* 'forward': one decode step (batch 1, one token on 64 cached) of the `overhead-2l` calibration decoder in fp32:
  dispatch-bound, a single thread's host speed, as the small models of the measured loops are;
* 'stream': fp32 GEMVs (M = 1) of 2048 x 2048 weights taken in turn from a STREAM_POOL_BYTES pool: weight
  streaming, what bounds a decode step of the measured loops' target (tiny-llama-123m: 0.49 GB of fp32 weights).
  The pool is sized like that model, not far above the cache: on the 2-vCPU Xeon VM sysfs reports a 480 MB
  last-level cache shared with other tenants, so how much of a model of that size stays cached between steps, and
  with it the step time, moves with the neighbours. Neither of the other anchors sees that: a serving loop 45
  minutes after its calibration ran its steps 1.15x their prices with the 'gemm' anchor at 1.05x.

Each is the median of its calls ('stream' at least two sweeps of its pool), the three timed three times
interleaved and the median of those kept.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
import torch.nn.functional as F

from ...specs.measured import ANCHOR_NAMES
from ..reference.model import build_decoder, one_token_step
from ..fitting.plan import get_decoder_spec
from .timers import Device, Timer
from ...units import MIB

ANCHOR_TOLERANCE = 0.10
_REPEATS = 3
STREAM_POOL_BYTES = 512 * MIB
_STREAM_SHAPE = 2048


class Anchor:
    """The reference calls built once on a device, timed on demand (`time_s`)."""

    def __init__(self, device: Device):
        self.device = device
        self.timer = Timer(device, flush_l2=False)
        dev = device.torch_device
        g = torch.Generator().manual_seed(0)
        self._x = torch.randn(256, 1024, generator=g).to(dev)
        self._w = torch.randn(1024, 1024, generator=g).to(dev)
        self._step = one_token_step(build_decoder(get_decoder_spec("overhead-2l"), torch.float32, dev), 64)
        per = _STREAM_SHAPE * _STREAM_SHAPE
        pool = torch.full((STREAM_POOL_BYTES // 4,), 0.01, device=dev)  # fp32: 4 bytes per element
        weights = [pool[i * per:(i + 1) * per].view(_STREAM_SHAPE, _STREAM_SHAPE) for i in range(pool.numel() // per)]
        self._stream_weights = len(weights)
        self._stream = itertools.cycle(weights)
        self._x1 = torch.randn(1, _STREAM_SHAPE, generator=g).to(dev)

    @torch.no_grad()
    def time_s(self) -> dict[str, float]:
        calls = {"gemm": lambda: F.linear(self._x, self._w),
                 "forward": self._step,
                 "stream": lambda: F.linear(self._x1, next(self._stream))}
        samples = {name: [] for name in ANCHOR_NAMES}
        for _ in range(_REPEATS):
            for name in ANCHOR_NAMES:
                calls_min = 2 * self._stream_weights if name == "stream" else 20
                samples[name].append(self.timer.time(calls[name], min_calls=calls_min, min_time_s=0.03,
                                                     max_calls=max(100, calls_min)).estimate_s)
        return {name: float(np.median(values)) for name, values in samples.items()}


def compare_anchor(profile_s: dict[str, float] | None, measured: list[dict[str, float]],
                   labels: list[str] | None = None) -> dict:
    """The anchor timings of a validation (at its start, between parts, at its end) against the profile's: each
    time / the profile's, their median per anchor (the machine's typical speed during the run: single timings catch
    one of its speed states), the largest |median - 1| and whether it stays within `ANCHOR_TOLERANCE`. A profile
    without anchors (measured before they existed) gives ratios of None and `matches_profile` None."""
    labels = labels or [f"t{i}" for i in range(len(measured))]
    if not profile_s:
        return {"profile_s": None, "measured_s": dict(zip(labels, measured)), "ratios": None, "median_ratio": None,
                "max_abs_change": None, "tolerance": ANCHOR_TOLERANCE, "matches_profile": None}
    ratios = {label: {name: t[name] / profile_s[name] for name in ANCHOR_NAMES if name in t and name in profile_s}
              for label, t in zip(labels, measured)}
    names = [name for name in ANCHOR_NAMES if any(name in r for r in ratios.values())]
    median = {name: float(np.median([r[name] for r in ratios.values() if name in r])) for name in names}
    worst = max((abs(r - 1.0) for r in median.values()), default=0.0)
    return {"profile_s": dict(profile_s), "measured_s": dict(zip(labels, measured)), "ratios": ratios,
            "median_ratio": median, "max_abs_change": worst, "tolerance": ANCHOR_TOLERANCE,
            "matches_profile": worst <= ANCHOR_TOLERANCE}


def describe_anchor(check: dict) -> str:
    """One line for the CLI: how the machine's speed compared with the profile's during the run."""
    if check["ratios"] is None:
        return "machine speed vs profile: not checked (the profile has no anchor timings; re-calibrate to get them)"
    spans = ", ".join(
        f"{name} {median:.2f}x (range {min(r[name] for r in check['ratios'].values() if name in r):.2f}-"
        f"{max(r[name] for r in check['ratios'].values() if name in r):.2f})"
        for name, median in check["median_ratio"].items())
    verdict = ("within" if check["matches_profile"] else "OUTSIDE") + f" +-{check['tolerance']:.0%}"
    note = "" if check["matches_profile"] else (
        ": the machine ran at another speed than when the profile was measured, so this comparison does not test "
        "the model alone; re-run, or re-calibrate and validate in one window")
    return f"machine speed vs profile (time now / then, median over the run): {spans}, {verdict}{note}"


__all__ = ["Anchor", "ANCHOR_NAMES", "ANCHOR_TOLERANCE", "compare_anchor", "describe_anchor"]
