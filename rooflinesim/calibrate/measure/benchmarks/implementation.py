"""What other implementations do that the reference decoder does not (`rooflinesim.ops.implementation_ops`), timed so
that a measured profile prices them from this device:

* 'kv_concat': one layer's step of a KV cache that grows by concatenation, as transformers' `DynamicLayer.update`
  runs it (`self.keys = torch.cat([self.keys, key_states], dim=-2)`, then the values): both caches of `size` bytes
  read (cold: the calls rotate over copies beyond the last-level cache, as a model's weights evict the cache
  between steps) and written into new allocations that replace them, the old ones freed some calls later (below
  the mmap threshold: `get_free_delay`), under the allocator
  limits of a process that never tuned glibc's malloc (`timers.default_process_heap`). The new tensors are fresh
  allocations each call, so the call pays what the allocator and the kernel's page faults cost on this machine,
  which an in-place write or a copy into an existing buffer does not (on the shared 2-core AMD EPYC VM this
  dominated transformers' decode steps at long context). Fitted as c + bytes / bandwidth over the op's bytes (`fit_profile`).
* 'dispatch': `size` tiny aten calls in a Python loop (an in-place add, a view, an in-place multiply and a slice, in
  turn, on a one-element tensor): the cost of one call through the dispatcher, the unit an implementation with more
  calls per layer than the reference pays for each (`DtypeProfile.dispatch_s`, the slope between two counts).
"""

from __future__ import annotations

import collections
import itertools

import torch

from ....specs.measured import FRESH_ALLOCATION_BYTES
from ...fitting.budget import get_kv_concat_copies
from ...fitting.measurements import ImplementationKey
from ...fitting.plan import CONCAT_CALLS, KV_CONCAT_HEAD_DIM as HEAD_DIM, KV_CONCAT_HEADS as KV_HEADS, \
    get_kv_concat_allocation_bytes, get_kv_concat_positions
from ..timers import default_process_heap
from .base import BenchContext, Job


def implementation_jobs(ctx: BenchContext) -> list[Job]:
    return [Job(key, _runner(ctx, key), weight=0.2) for key in ctx.plan.implementation_keys()]


def _runner(ctx: BenchContext, key: ImplementationKey):
    def run():
        return _time_concat(ctx, key.size) if key.kind == "kv_concat" else _time_dispatch(ctx, key.size)
    return run


def _time_concat(ctx: BenchContext, size_bytes: int):
    positions = get_kv_concat_positions(size_bytes, ctx.dtype)
    # each cache holds one position more than the point's, so that dropping its oldest keeps its size from call to
    # call while the concatenation reads `positions` and allocates `positions + 1` as the point says
    shape = (1, KV_HEADS, positions + 1, HEAD_DIM)
    # in a model's step the weights stream through the caches between one layer's concatenation and the next
    # step's, so the cache is read cold: the calls rotate over copies that together exceed the last-level cache
    copies = get_kv_concat_copies(size_bytes, ctx.device.backend.last_level_cache_bytes())
    # the values do not matter to a copy: filled, not drawn (a memset is several times faster than randn)
    caches = [(torch.full(shape, 0.5, device=ctx.torch_device, dtype=ctx.torch_dtype),
               torch.full(shape, -0.5, device=ctx.torch_device, dtype=ctx.torch_dtype)) for _ in range(copies)]
    new_key = torch.randn(1, KV_HEADS, 1, HEAD_DIM, device=ctx.torch_device).to(ctx.torch_dtype)
    new_value = torch.randn_like(new_key)
    turn = itertools.cycle(range(copies))
    replaced = collections.deque()
    delay = get_free_delay(get_kv_concat_allocation_bytes(size_bytes, ctx.dtype), copies)

    def step():  # as `DynamicLayer.update`: the new tensors replace the cache, which is freed
        i = next(turn)
        keys, values = caches[i]
        caches[i] = (torch.cat([keys[:, :, 1:], new_key], dim=-2), torch.cat([values[:, :, 1:], new_value], dim=-2))
        # ... `delay` calls later. Freed at once, the next call's new tensors take the block this call has just read,
        # still in the last-level cache, where a model's layer takes a block last touched a layer's weights ago
        replaced.append((keys, values))
        while len(replaced) > delay:
            replaced.popleft()

    # under the allocator limits of a user's process, where transformers runs (`default_process_heap`)
    with default_process_heap():
        # A model's steps map the pages the previous step freed (transformers' cache paid 8-10 GB/s there), so one
        # turn over the copies runs first, untimed, at every size. From the mmap threshold up every call maps its new
        # tensors afresh; on a VM whose guest hands freed memory back to the host (virtio-balloon free page
        # reporting), a page the guest has not used lately faults through the host: on the 2-core Intel Xeon VM,
        # allocating and filling 4-8 GiB ran at 1.2 GB/s, 2 GiB right after freeing as much at 5.7 GB/s, and a
        # 48 MiB point over 10 copies read 1.4-1.5 GB/s for its first turn, then 10 GB/s. Below the threshold the
        # first calls fault too (the block starts with `malloc_trim`, which hands the heap's free pages back): in
        # two --quick runs of five the 0.5 MiB point took 740-840 us in 7 of its 10 calls (about the fault rate),
        # 60-68 us in the others and in every call of the other runs, and those two profiles priced transformers'
        # steps 12-21 % slow
        for _ in range(copies):
            step()
        # Some states stay bimodal after the turn. Below the threshold: 800-925 us in 2 of 3 calls of a hurried
        # --quick run, 70 us in the third. Above it, pages the host has taken back fault slowly in runs of calls:
        # with 3 calls, the quick plans' 48 MiB point read 2.5-7.8 GB/s in 15 of 36 runs against the 8-10 GB/s that
        # transformers' steps pay; with 12, 8.5-8.7 GB/s in 3 of 3. Enough calls, then, that the faster half
        # (`Timing.estimate_s`) is the state a model's steps reach (tenths of a second at these sizes)
        return ctx.time(step, min_calls=CONCAT_CALLS)


def get_free_delay(allocation_bytes: float, copies: int) -> int:
    """Calls a 'kv_concat' point keeps the caches it replaced before freeing them: half its copies below the mmap
    threshold, so the heap block a call's new tensors take was last read half the pool (at least the last-level
    cache) ago; none from the threshold up, where every new tensor is mapped afresh wherever the old one went.

    Why: with the replaced caches freed at once, the 6-16 MiB points wrote into the block their previous call had
    just read, warm. On the 2-core Intel Xeon VM (fp32, 2 threads) a 6 MiB point read 34 GB/s that way and
    26-28 GB/s with the free put off by 4-16 calls, and hf-llama-94m's own step spent 580 us per 6 MiB concatenation
    at batch 4 and 2048 tokens (22 GB/s), timed inside `generate`'s step without the profiler."""
    if allocation_bytes >= FRESH_ALLOCATION_BYTES:
        return 0
    return copies // 2


def _time_dispatch(ctx: BenchContext, calls: int):
    x = torch.zeros(1, device=ctx.torch_device, dtype=ctx.torch_dtype)
    rounds = max(1, calls // 4)

    def loop():
        for _ in range(rounds):
            x.add_(1.0)
            x.view(-1)
            x.mul_(1.0)
            x[:1]
    return ctx.time(loop)

