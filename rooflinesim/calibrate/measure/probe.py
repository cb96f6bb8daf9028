"""The device's speed per dtype, from a few short probes (torch), for sizing a run to its budget
(`calibrate.fitting.budget`).
About 0.1-0.5 s per dtype, however slow the dtype is: every probe is a handful of calls."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from ..reference import model as M
from .benchmarks.base import BenchContext
from ..fitting.plan import DECODER_CONTEXT, OVERHEAD_MODELS, get_decoder_spec
from ..fitting.budget import DeviceSpeed

#: the cold GEMV probe's weight (16 MB in fp32) and the GEMM probe's shape
PROBE_GEMV = (2048, 2048)
PROBE_GEMM = (256, 1536, 1536)
#: elements of the fill probe (randn into a fresh tensor)
FILL_ELEMENTS = 1 << 22


def probe_speed(ctx: BenchContext) -> DeviceSpeed:
    """Cold-weight GEMV bandwidth, M = 256 GEMM throughput, one tiny op's cost, a small-M call's spread, the randn
    fill rate, building a decoder and one tiny decoder layer's forward, each from a few calls (the fastest)."""
    timer, dev, dt, size = ctx.timer, ctx.torch_device, ctx.torch_dtype, ctx.bytes
    k, n = PROBE_GEMV
    weights = ctx.rotating_weights(k, n)
    x1 = torch.randn(1, k, device=dev, dtype=dt)
    it = ctx.cold_rotation(weights)
    gemv = timer.time(lambda: F.linear(x1, next(it)), min_calls=8, min_time_s=0.0, warmup_s=0.0)
    x4 = torch.randn(4, k, device=dev, dtype=dt)
    small = timer.time(lambda: F.linear(x4, next(it)), min_calls=10, min_time_s=0.0, warmup_s=0.0)
    m, kk, nn = PROBE_GEMM
    a, w = torch.randn(m, kk, device=dev, dtype=dt), torch.randn(nn, kk, device=dev, dtype=dt)
    gemm = timer.time(lambda: F.linear(a, w), min_calls=3, min_time_s=0.0, warmup_s=0.0)
    tiny = torch.ones(16, device=dev, dtype=dt)
    call = timer.time(lambda: tiny + tiny, min_calls=50, min_time_s=0.0, warmup_s=0.0)
    fill = timer.time(lambda: torch.randn(FILL_ELEMENTS, device=dev, dtype=torch.float32), min_calls=3,
                      min_time_s=0.0, warmup_s=0.0)
    # building a decoder (nn.Linear's initialisation, the normal fill, the cast) and one tiny layer's dispatch
    # (the tiny decoder first: the first build of a process pays one-off initialisation the estimate must not scale)
    tiny_spec = get_decoder_spec(OVERHEAD_MODELS[0])
    model = M.build_decoder(tiny_spec, dt, dev)
    spec = get_decoder_spec("block-384")
    builds = []
    for _ in range(2):
        t0 = time.perf_counter()
        M.build_decoder(spec, dt, dev)
        builds.append(time.perf_counter() - t0)
    build_bytes_per_s = spec.params * 4 / min(builds)
    model.setup_caches(1, DECODER_CONTEXT + 8)
    tokens = torch.zeros(1, 1, dtype=torch.long, device=dev)
    start = torch.full((1,), DECODER_CONTEXT, device=dev)
    with torch.inference_mode():
        forward = timer.time(lambda: model(tokens, start, DECODER_CONTEXT + 1), min_calls=5, min_time_s=0.0,
                             warmup_s=0.0)
    # the fastest call of each: on a shared machine other tenants stall some calls by whole scheduler slices, and the
    # plan is sized for the device; a run that meets such stalls keeps its budget by skipping (bench.run_calibration)
    return DeviceSpeed(
        dtype=ctx.dtype,
        gemv_bandwidth_bytes_per_s=k * n * size / min(gemv.samples),
        gemm_flops_per_s=2.0 * m * kk * nn / min(gemm.samples),
        call_overhead_s=min(call.samples),
        small_m_spread=small.spread,
        fill_bytes_per_s=FILL_ELEMENTS * 4 / min(fill.samples),
        build_bytes_per_s=build_bytes_per_s,
        layer_dispatch_s=min(forward.samples) / (tiny_spec.num_layers + 1),
        last_level_cache_bytes=ctx.device.backend.last_level_cache_bytes(),
    )
