"""What every calibration benchmark shares: the `Job` record and the `BenchContext` of one dtype on one device."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable

import torch

from ....errors import InputError
from ....units import get_dtype_bytes
from ...fitting.measurements import MeasurementKey, Timing
from ...fitting.plan import Plan
from ..timers import Device, Timer, get_torch_dtype


#: calls per configuration once a run has fallen behind its budget (the median of the faster half is then the best)
HURRY_CALLS = 3


@dataclass(frozen=True)
class Job:
    """One configuration to time: its key in `Results` and the callable that measures it."""

    key: MeasurementKey
    run: Callable[[], Timing]
    weight: float = 1.0  # rough cost, for the progress bar


class BenchContext:
    """The device, dtype, plan and timer of one dtype's benchmarks, and the pool of cold weights they share."""

    def __init__(self, device: Device, dtype: str, plan: Plan, timer: Timer):
        self.device, self.dtype, self.plan, self.timer = device, dtype, plan, timer
        self.torch_dtype = get_torch_dtype(dtype)
        self.bytes = get_dtype_bytes(dtype)  # per element
        self.torch_device = device.torch_device
        self._pool_buffer: torch.Tensor | None = None
        self._pool_cursor = 0  # elements: where the last cold rotation stopped reading the pool (`cold_rotation`)
        #: set by a run that has fallen behind its time budget: the fewest calls a median is still taken from
        self.hurry = False
        self._decoders: dict = {}

    def decoder(self, name: str, build: int = 0):
        """Fresh build number `build` of the synthetic decoder `name` (`plan.DECODER_SPECS`), built on first use and
        kept until `release_decoder` has been called once per token configuration: those are separate jobs, and
        building a mid-size decoder (random fill of up to 170 M parameters) costs more than timing it."""
        if (name, build) not in self._decoders:
            from ...reference import model as M
            from ...fitting.plan import get_decoder_spec

            self._decoders[(name, build)] = [M.build_decoder(get_decoder_spec(name), self.torch_dtype,
                                                             self.torch_device), 0]
        return self._decoders[(name, build)][0]

    def release_decoder(self, name: str, build: int, configurations: int) -> None:
        """One token configuration of a build is timed; after `configurations` of them its memory goes (a job timed
        again later, after drift, builds it anew)."""
        entry = self._decoders.get((name, build))
        if entry is not None:
            entry[1] += 1
            if entry[1] >= configurations:
                del self._decoders[(name, build)]

    def time(self, fn: Callable[[], object], scale: float = 1.0, before: Callable[[], object] | None = None,
             min_calls: int = 0) -> Timing:
        """Time `fn` with the plan's call count and minimum time (the latter times `scale`; `before` runs untimed
        ahead of each call, see `Timer.time`); in a hurry, 3 calls. `min_calls`: at least this many, hurried or
        not (a cheap call whose readings are bimodal)."""
        p = self.plan
        if self.hurry:
            calls = max(HURRY_CALLS, min_calls)
            return self.timer.time(fn, min_calls=calls, min_time_s=0.0, max_calls=calls, warmup_s=0.0, before=before)
        return self.timer.time(fn, min_calls=max(p.min_calls, min_calls), min_time_s=p.min_time_s * scale,
                               max_calls=400, warmup_s=0.002 if p.quick else 0.01, before=before)

    def pool(self) -> torch.Tensor:
        """One flat buffer of `rotate_bytes` that every cold-weight benchmark carves its weights from: rotating over
        all of it, far above the last-level cache, every call streams its weights from memory."""
        if self._pool_buffer is None:
            size = self.plan.rotate_bytes
            if self.device.is_cuda:
                size = max(size, 4 * self.device.l2_bytes)
            # constant contents: a GEMV's time does not depend on the values, and filling is 10x faster than randn
            self._pool_buffer = torch.full((int(size // self.bytes),), 0.01, device=self.torch_device,
                                           dtype=self.torch_dtype)
        return self._pool_buffer

    def rotating_weights(self, k: int, n: int, working_set_bytes: float | None = None) -> list[torch.Tensor]:
        """Views [n, k] into the pool; with `working_set_bytes`, only as many as fit in it (at least one)."""
        pool = self.pool()
        per = k * n
        copies = max(1, pool.numel() // per)
        if working_set_bytes is not None:
            copies = max(1, min(copies, int(working_set_bytes // (per * self.bytes))))
        if copies < 2 and working_set_bytes is None:
            raise InputError(f"the calibration pool is too small for a {n} x {k} weight; use a larger working set")
        return [pool[i * per:(i + 1) * per].view(n, k) for i in range(copies)]

    def cold_rotation(self, weights: list[torch.Tensor]) -> Iterator[torch.Tensor]:
        """`weights` (views of `rotating_weights`, whole pool) in turn, endlessly, from the first one at or after
        where the last cold rotation stopped reading the pool, so that every call reads the part of the pool read
        longest ago.

        Why: each point used to start at the pool's first view, which the points before it had just read. With few
        calls per point (--quick) on a VM whose caches held 128 MiB at 1.2x the cold rate, the quick tables priced
        the shapes they share with a full run 21-27 % faster (median; 1536 x 4096 at M = 1: 551 against 800 us,
        2-core Intel Xeon VM, fp32), and the in-model scale rose to 1.25-1.31 to make up for it."""
        per = weights[0].numel()  # view i is the pool's elements [i * per, (i + 1) * per)
        i = -(-self._pool_cursor // per) % len(weights)
        while True:
            self._pool_cursor = (i + 1) * per  # before the yield: a generator stops there for good
            yield weights[i]
            i = (i + 1) % len(weights)
