"""Device selection and timers for the calibration microbenchmarks (torch; imported only by calibrate/validate).

A timer returns a `measurements.Timing` (the individual call times and their statistics, torch-free).

Timing practice:
* CPU: a fixed thread count (`torch.set_num_threads`), recorded in the profile; wall clock (`perf_counter_ns`) around
  each individual call; medians of the individual calls, with the spread (p90 / p10 - 1) kept.
* CUDA: CUDA events around each call, `torch.cuda.synchronize()` before reading them, and the L2 cache flushed
  between calls (a write over a buffer twice the L2 size) unless the benchmark rotates its own cold buffers.
* Warm-up by time before measuring; calls are repeated until both a minimum count and a minimum time are reached.
* Host memory: freed memory is kept by the process (`keep_freed_host_memory`), as a CPU inference engine's
  allocator keeps it (vLLM's CPU backend asks for TCMalloc).
"""

from __future__ import annotations

import ctypes
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch

from ...specs.profiles import get_host_cpu_isa, get_host_cpu_model, host_cpu_has_bf16
from ...errors import InputError
from .backends import CpuBackend, CudaBackend, DeviceBackend
from ..fitting.measurements import Timing
from ...units import MILLI, NANO

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Device:
    """Where the benchmarks run and how they are timed."""

    kind: str  # "cpu" | "cuda"
    name: str  # human device name, e.g. "AMD EPYC (2 threads)" or "NVIDIA H200"
    slug: str  # file-name friendly, e.g. "cpu-amd-epyc-2c"
    threads: int
    torch_device: torch.device
    l2_bytes: int = 0
    backend: DeviceBackend = field(default_factory=CpuBackend)  # timing primitives and device queries
    host_memory_kept: bool = False  # `keep_freed_host_memory` took effect in this process

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def synchronize(self) -> None:
        self.backend.synchronize()


def _slugify(text: str) -> str:
    out = []
    for ch in text.lower():
        out.append(ch if ch.isalnum() else "-")
    slug = "-".join(part for part in "".join(out).split("-") if part)
    for noise in ("-processor", "-cpu", "-r-", "-tm-"):
        slug = slug.replace(noise, "-")
    return slug.strip("-")


def cuda_device(backend: CudaBackend) -> Device:
    """The Device of a CUDA backend (its name, L2 size and index from the device properties)."""
    return Device("cuda", backend.name, _slugify(backend.name), torch.get_num_threads(), backend.torch_device,
                  backend.l2_bytes(), backend)


#: glibc mallopt parameters (malloc.h) and the values set by `keep_freed_host_memory`
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest accepted value on 64-bit hosts
_TRIM_THRESHOLD_BYTES = 1 << 30


def keep_freed_host_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse instead of handing it back to the kernel; False where the C
    library is not glibc (nothing changed).

    By default glibc serves an allocation above 128 kB with a fresh mmap and returns the heap's free top beyond a trim
    threshold, so a loop that allocates the same large temporaries every step (the sampler's float64 probabilities
    over a 32k vocabulary, a wide step's activations) page-faults them in again on every call, and on a VM each fault
    costs what the host's load makes it cost. On the 2-core AMD EPYC VM, `sampling.sample_and_advance` over 32,000
    logits took 1.4 / 2.9 / 4.3 ms at batch 4 / 8 / 16 by default and 0.25 / 0.48 / 0.84 ms with freed memory
    kept (p25 of 30 calls, 2 threads; batch 1, under the threshold: 0.13 ms either way)."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                     _TRIM_THRESHOLD_BYTES))


#: the trim threshold a process that never calls mallopt converges to: glibc raises it to twice the mmap threshold
#: whenever an mmapped chunk up to DEFAULT_MMAP_THRESHOLD_MAX (32 MiB on 64-bit) is freed (malloc.c, `free`)
_DEFAULT_PROCESS_TRIM_BYTES = 2 * _MMAP_THRESHOLD_BYTES


@contextmanager
def default_process_heap():
    """Within the block, glibc hands freed heap memory back as a process that never called mallopt does once its
    dynamic thresholds have settled (mmap threshold 32 MiB, trim threshold 64 MiB), and the block starts with the
    heap's free top released; outside it, `keep_freed_host_memory`'s settings. A no-op where the C library is not
    glibc.

    Why: another implementation's step that allocates large tensors (transformers' DynamicCache grows each layer's
    keys and values by `torch.cat` into new tensors) costs what those allocations cost, and that depends on whether
    the heap still holds enough freed memory to serve them warm. With the calibration's 1 GiB trim threshold that
    depends on what the process ran before (on the 2-core AMD EPYC VM a Qwen2-MoE decode step at batch 4 and 4k
    context took 69 ms after a large heap had been freed and 162 ms without); a user's process runs with these
    limits, under which a step allocating more than the trim threshold faults in fresh pages."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt, malloc_trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        yield
        return
    mallopt(_M_TRIM_THRESHOLD, _DEFAULT_PROCESS_TRIM_BYTES)
    malloc_trim(0)
    try:
        yield
    finally:
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)


#: more CPU threads than any host has cores (torch's own limit is a C int: a larger number was an OverflowError)
MAX_THREADS = 1024


def select_device(requested: str = "auto", threads: int | None = None) -> Device:
    """Resolve --device auto|cpu|cuda; asking for CUDA where none is present is a one-line InputError."""
    requested = (requested or "auto").lower()
    if requested not in ("auto", "cpu", "cuda"):
        raise InputError(f"--device must be auto, cpu or cuda, got {requested!r}")
    if requested == "cuda" and not torch.cuda.is_available():
        raise InputError(
            f"--device cuda was asked for but torch {torch.__version__} sees no CUDA device "
            "(CPU-only build or no GPU); use --device cpu"
        )
    use_cuda = requested == "cuda" or (requested == "auto" and torch.cuda.is_available())
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise InputError(f"--threads must be a positive integer up to {MAX_THREADS}, got {threads}")
    if use_cuda:
        return cuda_device(CudaBackend(torch.cuda.current_device()))
    n = threads or torch.get_num_threads() or os.cpu_count() or 1
    torch.set_num_threads(n)
    kept = keep_freed_host_memory()
    cpu = get_host_cpu_model()
    return Device("cpu", f"{cpu} ({n} threads)", get_cpu_slug(cpu, get_host_cpu_isa(), n), n, torch.device("cpu"),
                  host_memory_kept=kept)


def get_default_calibration_dtypes(device: Device) -> tuple[str, ...]:
    """What `calibrate` measures unless --dtype says: fp32, and bf16 where the device computes it natively (CUDA, or
    a CPU with bf16 dot products). A CPU without them runs bf16 by conversion, a dtype nobody serves there, and its
    bf16 tables would take most of a time budget."""
    return ("fp32", "bf16") if device.is_cuda or host_cpu_has_bf16() else ("fp32",)


def get_cpu_slug(cpu_model: str, isa: str, threads: int) -> str:
    """The folder and profile name of a CPU: model, vector extension unless AVX-512, threads. The first profiles
    (calibrate/) were all measured on AVX-512 hosts and are named without it; a host of the same model name without
    AVX-512 (a Zen 3 "AMD EPYC" beside a Zen 4 one) runs other kernels and gets its own name, e.g.
    cpu-amd-epyc-avx2-2c."""
    tag = f"-{isa}" if isa and isa != "avx512" else ""
    return f"cpu-{_slugify(cpu_model)}{tag}-{threads}c"


class Timer:
    """Times a zero-argument callable on a Device: per-call samples, warm-up by time, L2 flush on CUDA."""

    def __init__(self, device: Device, flush_l2: bool = True):
        self.device = device
        self.backend = device.backend
        self.flush_l2 = flush_l2 and self.backend.has_events()
        # an L2 flush between calls on devices timed with events (CUDA): twice the L2, written over
        self._flush_buffer = self.backend.flush_buffer(2 * self.backend.l2_bytes()) if self.flush_l2 else None

    def _flush(self) -> None:
        if self._flush_buffer is not None:
            self._flush_buffer.zero_()

    def time(self, fn: Callable[[], object], min_calls: int = 5, min_time_s: float = 0.05, max_calls: int = 200,
             warmup_s: float = 0.01, warmup_calls: int = 1, before: Callable[[], object] | None = None) -> Timing:
        """Per-call times of `fn`. `before`, when given, runs untimed ahead of every call (warm-up included), for
        a call whose cost depends on what ran just before it (a sampler right after a forward pass)."""
        dev = self.device
        before = before or (lambda: None)
        start = time.perf_counter()
        calls = 0
        while calls < warmup_calls or time.perf_counter() - start < warmup_s:
            before()
            fn()
            calls += 1
            if calls > 1000:
                break
        dev.synchronize()
        samples: list[float] = []
        begin = time.perf_counter()
        if self.backend.has_events():
            while len(samples) < max_calls and (len(samples) < min_calls or time.perf_counter() - begin < min_time_s):
                self._flush()
                before()
                s, e = self.backend.new_event(), self.backend.new_event()
                s.record()
                fn()
                e.record()
                self.backend.synchronize()  # events are read only once the device has reached them
                samples.append(s.elapsed_time(e) * MILLI)
        else:
            clock = time.perf_counter_ns
            while len(samples) < max_calls and (len(samples) < min_calls or time.perf_counter() - begin < min_time_s):
                before()
                t0 = clock()
                fn()
                samples.append((clock() - t0) * NANO)
        return Timing(tuple(samples))


def get_torch_dtype(dtype: str) -> torch.dtype:
    try:
        return TORCH_DTYPES[dtype]
    except KeyError:
        raise InputError(f"dtype {dtype!r} cannot be calibrated; use one of {', '.join(TORCH_DTYPES)}") from None
