"""`rooflinesim calibrate`: torch microbenchmarks on the local device, fitted into a measured profile.

What is measured, per dtype (all with the thread count recorded, per-call medians with the spread kept):

* streaming bandwidth: a copy and a weight-streaming GEMV (F.linear with M = 1) over working sets of >= 1 GiB
  (`--quick`: 256 MiB, stated in the profile), i.e. far above the last-level cache;
* F.linear time vs M (1..4096, log-spaced, dense below 16 where CPU kernels saw-tooth) over generic weight shapes
  (square, GQA-narrow, MLP-wide and -tall, vocabulary-wide) with the weights rotated over copies that together
  exceed the last-level cache, so every call streams cold weights as a model's forward pass does. Points above a
  FLOP budget per call are skipped and extrapolated as compute-bound;
* masked SDPA with enable_gqa (the decoder's own `attend`, on its own cache layout) vs batch, context and query
  tokens (1 = decode, > 1 = verify);
* the decoder's elementwise building blocks (RMSNorm, RoPE, SwiGLU, residual add, KV-cache write, embedding) vs size;
* whole decoders timed as forward passes: tiny ones (hidden 64, 2 and 8 layers) pin the per-layer and per-step
  dispatch overhead; mid-size ones of generic shapes (hidden 768 and 1536) pin the in-model scale, how much slower
  ops run inside a forward pass than alone (`fit_overheads`).

None of the calibrated weight shapes is a shape of the validation models (tiny-llama-123m, tiny-draft-2l): see
`LINEAR_SHAPES` and `check_hold_out`. Configurations are shuffled and, outside --quick, measured in two interleaved
passes; a reference GEMV is timed at the start, middle and end to detect drift.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..ops import get_step_ops
from ..specs import (AffineFit, CacheReuse, DtypeProfile, Efficiency, HardwareSpec, InputError, LinearTable,
                     MeasuredProfile, ModelSpec, Provenance)
from ..units import get_dtype_bytes, normalize_dtype
from . import model as M
from .fit import fit_affine, fit_roofline
from .profile import MeasuredTiming
from .timers import Device, Timer, Timing, get_torch_dtype

#: (in_features K, out_features N) of the calibrated F.linear weights: square, GQA-narrow (N = K / 4), MLP-wide
#: (N = 8/3 K), MLP-tall, vocabulary-wide. Deliberately none is a shape of the hold-out validation models.
LINEAR_SHAPES = (
    (384, 384), (768, 768), (1536, 1536), (2560, 2560),
    (768, 192), (1536, 384), (384, 96),
    (768, 2048), (1536, 4096), (384, 1024),
    (2048, 768), (4096, 1536), (1024, 384),
    (384, 24576), (768, 49152), (1536, 24576),
)
QUICK_LINEAR_SHAPES = ((384, 384), (1536, 1536), (768, 192), (1536, 4096), (4096, 1536), (384, 1024), (1024, 384),
                       (384, 24576), (1536, 24576))
M_GRID = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512, 768,
          1024, 2048, 4096)
QUICK_M_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 160, 256, 512)
HOLD_OUT_MODELS = ("tiny-llama-123m", "tiny-draft-2l")

#: attention configurations: (heads, kv_heads, head_dim).
ATTENTION_HEADS = ((12, 3, 64), (24, 4, 64), (24, 8, 128))
QUICK_ATTENTION_HEADS = ((12, 3, 64), (24, 8, 128))
ATTENTION_BATCH = (1, 3, 12, 40)
ATTENTION_CONTEXT = (96, 400, 1500, 3000)
ATTENTION_Q = (1, 3, 6, 10)
QUICK_ATTENTION_BATCH = (1, 12, 40)
QUICK_ATTENTION_CONTEXT = (96, 1500)
QUICK_ATTENTION_Q = (1, 6)

#: synthetic layer specs for the elementwise families: (hidden, heads, kv_heads, intermediate).
ELEMENTWISE_SPECS = ((768, 12, 4, 2048), (1536, 24, 8, 4096))
ELEMENTWISE_TOKENS = (1, 6, 40, 256)

DRIFT_FLAG = 0.15

#: the weight of the cache-reuse benchmark (in, out features): 16 MB in fp32, 8 MB in bf16
CACHE_SHAPE = (2048, 2048)
CACHE_WORKING_SETS = tuple(int(x * 2**20) for x in (16, 32, 64, 96, 128, 192, 256, 384))
QUICK_CACHE_WORKING_SETS = tuple(int(x * 2**20) for x in (16, 64, 128, 256))


def _synthetic_spec(name, hidden, heads, kv_heads, inter, layers=1, vocab=4096, head_dim=None) -> ModelSpec:
    return ModelSpec(schema_version=1, name=name, architecture="llama", num_layers=layers, hidden_size=hidden,
                     num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                     intermediate_size=inter, vocab_size=vocab, max_context_tokens=8192)


def check_hold_out(shapes=LINEAR_SHAPES) -> None:
    """Raise if a calibrated weight shape equals a weight shape of the hold-out models."""
    from ..registry import load_model

    shapes = set(shapes)
    for name in DECODER_SPECS:
        shapes |= {(int(op.dims["k"]), int(op.dims["n"])) for op in get_step_ops(get_decoder_spec(name), 1, 1, 1)
                   if op.kind == "linear"}
    held = set()
    for name in HOLD_OUT_MODELS:
        spec = load_model(name)
        for op in get_step_ops(spec, 1, 1, 1):
            if op.kind == "linear":
                held.add((int(op.dims["k"]), int(op.dims["n"])))
    clash = held.intersection(shapes)
    if clash:
        raise AssertionError(f"calibration shapes {sorted(clash)} are hold-out shapes")


@dataclass
class Plan:
    quick: bool
    dtypes: tuple[str, ...]
    linear_shapes: tuple
    m_grid: tuple
    passes: int
    min_calls: int
    min_time_s: float
    bandwidth_bytes: int
    rotate_bytes: int
    max_call_flops: float
    attention: tuple
    elementwise_tokens: tuple
    block_models: tuple  # mid-size decoders timed for the in-model scale
    block_tokens: tuple  # their (batch, new tokens)
    cache_working_sets: tuple  # bytes, for the cache-reuse curve

    @classmethod
    def make(cls, quick: bool, dtypes, device: Device, tiny: bool = False) -> "Plan":
        if tiny:  # the CI smoke test: a few seconds, not a usable profile
            return cls(True, dtypes, ((384, 384), (1536, 1536), (384, 24576)), (1, 4, 16, 64), 1, 2, 0.0,
                       64 * 2**20, 128 * 2**20, 1e9, (((12, 3, 64),), (1, 4), (96, 400), (1, 5)), (1, 40),
                       ("block-384", "block-1536"), ((1, 1),), (int(16 * 2**20),))
        if quick:
            return cls(True, dtypes, QUICK_LINEAR_SHAPES, QUICK_M_GRID, 1, 3, 0.004, 256 * 2**20, 512 * 2**20,
                       1.5e9 if not device.is_cuda else 5e11,
                       (QUICK_ATTENTION_HEADS, QUICK_ATTENTION_BATCH, QUICK_ATTENTION_CONTEXT, QUICK_ATTENTION_Q),
                       (1, 40, 256), ("block-384", "block-768", "block-2048"), ((1, 1), (8, 1)),
                       QUICK_CACHE_WORKING_SETS)
        return cls(False, dtypes, LINEAR_SHAPES, M_GRID, 2, 5, 0.03, 2**30, 2**30,
                   2e10 if not device.is_cuda else 5e12,
                   (ATTENTION_HEADS, ATTENTION_BATCH, ATTENTION_CONTEXT, ATTENTION_Q), ELEMENTWISE_TOKENS,
                   BLOCK_MODELS, ((1, 1), (4, 1), (16, 1), (1, 5)), CACHE_WORKING_SETS)


@dataclass
class Job:
    key: tuple
    run: Callable[[], Timing]
    weight: float = 1.0  # rough cost, for the progress bar


@dataclass
class Results:
    samples: dict = field(default_factory=dict)

    def add(self, key, timing: Timing) -> None:
        self.samples.setdefault(key, []).extend(timing.samples)

    def timing(self, key) -> Timing:
        return Timing(tuple(self.samples[key]))


class Bench:
    """The microbenchmarks of one dtype on one device."""

    def __init__(self, device: Device, dtype: str, plan: Plan, timer: Timer):
        self.device, self.dtype, self.plan, self.timer = device, dtype, plan, timer
        self.tdtype = get_torch_dtype(dtype)
        self.bytes = get_dtype_bytes(dtype)
        self.dev = device.torch_device
        self._pool_buffer: torch.Tensor | None = None

    # -- helpers
    def _time(self, fn, scale: float = 1.0) -> Timing:
        p = self.plan
        return self.timer.time(fn, min_calls=p.min_calls, min_time_s=p.min_time_s * scale, max_calls=400,
                               warmup_s=0.002 if p.quick else 0.01)

    def _pool(self) -> torch.Tensor:
        """One flat buffer of `rotate_bytes` that every cold-weight benchmark carves its weights from: rotating over
        all of it, far above the last-level cache, every call streams its weights from memory."""
        if self._pool_buffer is None:
            size = self.plan.rotate_bytes
            if self.device.is_cuda:
                size = max(size, 4 * self.device.l2_bytes)
            # constant contents: a GEMV's time does not depend on the values, and filling is 10x faster than randn
            self._pool_buffer = torch.full((int(size // self.bytes),), 0.01, device=self.dev, dtype=self.tdtype)
        return self._pool_buffer

    def _rotating_weights(self, k: int, n: int, working_set_bytes: float | None = None) -> list[torch.Tensor]:
        """Views [n, k] into the pool; with `working_set_bytes`, only as many as fit in it (at least one)."""
        pool = self._pool()
        per = k * n
        copies = max(1, pool.numel() // per)
        if working_set_bytes is not None:
            copies = max(1, min(copies, int(working_set_bytes // (per * self.bytes))))
        if copies < 2 and working_set_bytes is None:
            raise InputError(f"the calibration pool is too small for a {n} x {k} weight; use a larger working set")
        return [pool[i * per:(i + 1) * per].view(n, k) for i in range(copies)]

    # -- streaming
    def copy_bandwidth(self) -> tuple[float, Timing]:
        n = self.plan.bandwidth_bytes // 2 // int(self.bytes)
        src = torch.ones(n, device=self.dev, dtype=self.tdtype)
        dst = torch.empty_like(src)
        t = self._time(lambda: dst.copy_(src), scale=2)
        return 2 * n * self.bytes / t.estimate_s, t

    def gemv_bandwidth(self) -> tuple[float, Timing]:
        """Weight-streaming bandwidth: GEMVs (M = 1) over the whole cold pool, timed as one call per sweep."""
        k = n = 4096 if not self.plan.quick else 2048
        weights = self._rotating_weights(k, n)
        x = torch.randn(1, k, device=self.dev, dtype=self.tdtype)

        def run():
            for w in weights:
                F.linear(x, w)

        t = self._time(run, scale=2)
        return len(weights) * k * n * self.bytes / t.estimate_s, t

    def reference(self) -> Timing:
        """The drift reference: a cold-weight GEMV of one fixed shape."""
        weights = self._rotating_weights(1536, 1536)
        x = torch.randn(1, 1536, device=self.dev, dtype=self.tdtype)
        it = itertools.cycle(weights)
        return self.timer.time(lambda: F.linear(x, next(it)), min_calls=20, min_time_s=0.05, max_calls=200)

    # -- cache reuse: the same GEMV with its weights rotating over working sets from a few MB to the whole pool
    def cache_jobs(self) -> list[Job]:
        sizes = [s for s in self.plan.cache_working_sets if s < self.plan.rotate_bytes] + [self.plan.rotate_bytes]
        return [Job(("cache", int(size)), self._cache_runner(int(size))) for size in sizes]

    def _cache_runner(self, working_set_bytes: int):
        def run():
            k, n = CACHE_SHAPE
            weights = self._rotating_weights(k, n, working_set_bytes)
            x = torch.randn(1, k, device=self.dev, dtype=self.tdtype)
            for w in weights * 2:  # bring the whole working set into the caches it fits in
                F.linear(x, w)
            it = itertools.cycle(weights)
            return self.timer.time(lambda: F.linear(x, next(it)), min_calls=max(2 * len(weights), 10),
                                   min_time_s=self.plan.min_time_s, max_calls=max(4 * len(weights), 400),
                                   warmup_s=0.0, warmup_calls=0)
        return run

    # -- linear
    def linear_jobs(self) -> list[Job]:
        jobs = []
        for k, n in self.plan.linear_shapes:
            for m in self.plan.m_grid:
                if 2.0 * m * k * n > self.plan.max_call_flops and m > 16:
                    continue
                jobs.append(Job(("linear", k, n, m), self._linear_runner(k, n, m), 1.0))
        return jobs

    def _linear_runner(self, k, n, m):
        def run():
            weights = self._rotating_weights(k, n)
            x = torch.randn(m, k, device=self.dev, dtype=self.tdtype)
            it = itertools.cycle(weights)
            return self._time(lambda: F.linear(x, next(it)))
        return run

    # -- attention
    def attention_jobs(self) -> list[Job]:
        head_configs, batches, contexts, qs = self.plan.attention
        jobs = []
        for heads, kv_heads, d in head_configs:
            for b in batches:
                for s in contexts:
                    for q in qs:
                        if b * s * kv_heads * d * 2 * self.bytes > 1.5e9:
                            continue
                        jobs.append(Job(("attention", heads, kv_heads, d, b, s, q), self._attention_runner(heads, kv_heads, d, b, s, q)))
        return jobs

    def _attention_runner(self, heads, kv_heads, d, b, s, q):
        def run():
            max_tokens = s + q + 16  # the decoder slices a longer cache, as here
            per = 2 * b * kv_heads * max_tokens * d * self.bytes
            copies = max(1, min(8, math.ceil(self.plan.rotate_bytes / per))) if not self.device.is_cuda else 1
            # constant contents: SDPA's time does not depend on the values, and filling is 10x faster than randn
            caches = [tuple(torch.full((b, kv_heads, max_tokens, d), 0.01 * (i + 1), device=self.dev, dtype=self.tdtype)
                            for _ in range(2)) for i in range(copies)]
            xq = torch.randn(b, heads, q, d, device=self.dev, dtype=self.tdtype)
            positions = torch.full((b, 1), s, device=self.dev) + torch.arange(q, device=self.dev)[None, :]
            mask = M.causal_mask(positions, s + q)
            it = itertools.cycle(caches)

            def call():
                kc, vc = next(it)
                return M.attend(xq, kc, vc, s + q, mask)
            return self._time(call)
        return run

    # -- elementwise families (timed with the decoder's own functions; bytes from rooflinesim.ops)
    def elementwise_jobs(self) -> list[Job]:
        jobs = []
        for hidden, heads, kv_heads, inter in ELEMENTWISE_SPECS:
            for tokens in self.plan.elementwise_tokens:
                for family in ("norm", "rope", "mlp_act", "residual", "kv_cache_write", "embedding"):
                    jobs.append(Job(("elementwise", family, hidden, heads, kv_heads, inter, tokens),
                                    self._elementwise_runner(family, hidden, heads, kv_heads, inter, tokens)))
        return jobs

    def _elementwise_runner(self, family, hidden, heads, kv_heads, inter, tokens):
        def run():
            dev, dt = self.dev, self.tdtype
            d = hidden // heads
            b, q = (tokens, 1) if tokens <= 40 else (tokens // 8, 8)
            if family == "norm":
                x, w = torch.randn(b, q, hidden, device=dev, dtype=dt), torch.ones(hidden, device=dev, dtype=dt)
                fn = lambda: M.rms_norm(x, w)
            elif family == "rope":
                xq = torch.randn(b, q, heads, d, device=dev, dtype=dt)
                xk = torch.randn(b, q, kv_heads, d, device=dev, dtype=dt)
                cos_t, sin_t = M.rope_tables(4096, d, dt, dev)
                pos = torch.full((b, 1), 1000, device=dev) + torch.arange(q, device=dev)[None, :]

                def fn():
                    c, s = cos_t[pos], sin_t[pos]
                    return M.apply_rope(xq, c, s), M.apply_rope(xk, c, s)
            elif family == "mlp_act":
                g, u = (torch.randn(b, q, inter, device=dev, dtype=dt) for _ in range(2))
                fn = lambda: M.swiglu(g, u)
            elif family == "residual":
                x, y = (torch.randn(b, q, hidden, device=dev, dtype=dt) for _ in range(2))
                fn = lambda: x + y
            elif family == "kv_cache_write":
                cache = M.KVCache(b, 1100, kv_heads, d, dt, dev)
                k, v = (torch.randn(b, q, kv_heads, d, device=dev, dtype=dt) for _ in range(2))
                pos = torch.full((b, 1), 1000, device=dev) + torch.arange(q, device=dev)[None, :]
                fn = lambda: cache.update(pos, k, v)
            else:
                table = torch.randn(32768, hidden, device=dev, dtype=dt)
                ids = torch.randint(0, 32768, (b, q), device=dev)
                fn = lambda: F.embedding(ids, table)
            return self._time(fn)
        return run

    # -- whole decoders: dispatch overhead (tiny, hidden 64) and the in-model scale (mid-size, generic shapes)
    def decoder_jobs(self) -> list[Job]:
        jobs = [Job(("decoder", name, b, q), self._decoder_runner(name, b, q))
                for name, b, q in itertools.product(("overhead-2l", "overhead-8l"), (1,), (1, 4))]
        for name in self.plan.block_models:
            jobs += [Job(("decoder", name, b, q), self._decoder_runner(name, b, q), 4.0)
                     for b, q in self.plan.block_tokens]
        return jobs

    def _decoder_runner(self, name, batch, q):
        def run():
            spec = get_decoder_spec(name)
            model = M.build_decoder(spec, self.tdtype, self.dev)
            model.setup_caches(batch, DECODER_CONTEXT + q + 8)
            tokens = torch.zeros(batch, q, dtype=torch.long, device=self.dev)
            start = torch.full((batch,), DECODER_CONTEXT, device=self.dev)
            with torch.inference_mode():
                return self._time(lambda: model(tokens, start, DECODER_CONTEXT + q), scale=2)
        return run


#: whole decoders timed by calibrate: (hidden, heads, kv_heads, intermediate, layers, vocab). The tiny ones measure
#: dispatch; the mid-size ones (generic shapes, none a hold-out shape) how much slower ops run inside a forward pass.
#: The mid-size ones span weight working sets of about 25-600 MB in fp32 (half in bf16).
DECODER_SPECS = {
    "overhead-2l": (64, 4, 2, 128, 2, 256),
    "overhead-8l": (64, 4, 2, 128, 8, 256),
    "block-384": (384, 6, 2, 1024, 2, 8192),
    "block-768": (768, 12, 4, 2048, 4, 8192),
    "block-1536": (1536, 24, 8, 4096, 2, 8192),
    "block-2048": (2048, 16, 4, 5632, 3, 8192),
}
BLOCK_MODELS = ("block-384", "block-768", "block-1536", "block-2048")
DECODER_CONTEXT = 256


def get_decoder_spec(name: str) -> ModelSpec:
    hidden, heads, kv_heads, inter, layers, vocab = DECODER_SPECS[name]
    return _synthetic_spec(name, hidden, heads, kv_heads, inter, layers=layers, vocab=vocab)


# --- fitting -----------------------------------------------------------------------------------------------------------


def _elementwise_bytes(family, hidden, heads, kv_heads, inter, tokens, dtype) -> float:
    """Bytes of one instance of the op family, as rooflinesim.ops counts them."""
    b, q = (tokens, 1) if tokens <= 40 else (tokens // 8, 8)
    spec = _synthetic_spec("elementwise", hidden, heads, kv_heads, inter)
    name = {"norm": "attn_norm", "residual": "attn_residual"}.get(family, family)
    for op in get_step_ops(spec, b, 1000, q, dtype, dtype, dtype):
        if op.name == name:
            return float(op.bytes)
    raise KeyError(name)


def fit_dtype(dtype: str, results: Results, copy_bw: float, gemv_bw: float, plan: Plan) -> DtypeProfile:
    """Fit one dtype's measurements into a DtypeProfile (overheads from the tiny decoders fitted last)."""
    wb = get_dtype_bytes(dtype)
    # linear tables
    tables = []
    fl, by, ts = [], [], []
    for k, n in plan.linear_shapes:
        rows = sorted((key[3], results.timing(key)) for key in results.samples if key[:3] == ("linear", k, n))
        if not rows:
            continue
        ms = tuple(int(m) for m, _ in rows)
        times = tuple(float(t.estimate_s) for _, t in rows)
        tables.append(LinearTable(in_features=k, out_features=n, m=ms, time_s=times,
                                  spread=tuple(round(float(t.spread), 4) for _, t in rows)))
        for m, t in zip(ms, times):
            fl.append(2.0 * m * k * n)
            by.append(k * n * wb + m * (k + n) * wb)
            ts.append(t)
    # the analytic roofline is fitted on its two asymptotes: weight streaming (M = 1) and the compute-bound points
    # (the top quarter of FLOPs per call); the tables carry everything in between
    fl, by, ts = np.array(fl), np.array(by), np.array(ts)
    envelope = (fl / by <= 2.0 / wb * 1.01) | (fl >= np.quantile(fl, 0.75))
    roof = fit_roofline(fl[envelope], by[envelope], ts[envelope], bandwidth_guess=gemv_bw)
    all_points = float(np.median(np.abs(roof.predict(fl, by) - ts) / ts))

    # attention: decode (q = 1) and multi (q > 1), per head_dim
    attention = {}
    head_dims = sorted({key[3] for key in results.samples if key[0] == "attention"})
    for (label, select), hd in itertools.product((("decode", lambda q: q == 1), ("multi", lambda q: q > 1)), head_dims):
        feats = {"kv_bytes": [], "flops": [], "scores": []}
        times = []
        for key in results.samples:
            if key[0] != "attention" or not select(key[6]) or key[3] != hd:
                continue
            _, heads, kv_heads, d, b, s, q = key
            spec = _synthetic_spec("attn", heads * d, heads, kv_heads, 256, head_dim=d)
            op = next(o for o in get_step_ops(spec, b, s, q, dtype, dtype, dtype) if o.kind == "attention")
            feats["kv_bytes"].append(float(op.kv_read_bytes))
            feats["flops"].append(float(op.flops))
            feats["scores"].append(float(b * heads * q * float(op.dims["kv_tokens"])))
            times.append(results.timing(key).estimate_s)
        if times:
            r = fit_affine({k: np.array(v) for k, v in feats.items()}, np.array(times))
            attention[f"{label}_d{hd}"] = AffineFit(overhead_s=r.overhead_s, coefficients=r.coefficients,
                                         median_abs_rel_residual=r.median_abs_rel_residual, points=r.points)

    elementwise = {}
    families = sorted({key[1] for key in results.samples if key[0] == "elementwise"})
    for family in families:
        xs, times = [], []
        for key in results.samples:
            if key[0] == "elementwise" and key[1] == family:
                xs.append(_elementwise_bytes(family, *key[2:], dtype))
                times.append(results.timing(key).estimate_s)
        r = fit_affine({"bytes": np.array(xs)}, np.array(times))
        elementwise[family] = AffineFit(overhead_s=r.overhead_s, coefficients=r.coefficients,
                                        median_abs_rel_residual=r.median_abs_rel_residual, points=r.points)

    cache_reuse = None
    cache_rows = sorted((key[1], results.timing(key).estimate_s) for key in results.samples if key[0] == "cache")
    if len(cache_rows) >= 2:
        # speedup of the weight-streaming part of the call (its fixed per-call cost taken out)
        fixed = min(roof.overhead_s, 0.5 * min(r[1] for r in cache_rows))
        cold = cache_rows[-1][1] - fixed  # the whole pool
        sizes = np.array([r[0] for r in cache_rows], dtype=float)
        speedup = np.maximum(cold / (np.array([r[1] for r in cache_rows]) - fixed), 1.0)
        speedup = np.maximum.accumulate(speedup[::-1])[::-1]  # never faster for a larger working set
        k, n = CACHE_SHAPE
        warm_bandwidth = k * n * wb / (cache_rows[0][1] - fixed)
        cache_reuse = CacheReuse(working_set_bytes=tuple(float(x) for x in sizes),
                                 speedup=tuple(float(min(x, 20.0)) for x in speedup),
                                 warm_bandwidth_bytes_per_s=float(warm_bandwidth))

    residuals = {
        "linear_roofline_median_abs_rel_envelope": roof.median_abs_rel_residual,
        "linear_roofline_median_abs_rel_all_points": all_points,
        "linear_roofline_bandwidth_bytes_per_s": roof.bandwidth_bytes_per_s,
        "linear_table_median_spread": float(np.median([s for t in tables for s in t.spread])),
    }
    profile = DtypeProfile(
        gemv_bandwidth_bytes_per_s=gemv_bw, copy_bandwidth_bytes_per_s=copy_bw,
        peak_flops_per_s=roof.peak_flops_per_s, linear_overhead_s=roof.overhead_s, linear=tuple(tables),
        attention=attention, elementwise=elementwise, layer_overhead_s=0.0, step_overhead_s=0.0, cache_reuse=cache_reuse,
        residuals=residuals,
    )
    return fit_overheads(dtype, profile, results)


def fit_overheads(dtype: str, profile: DtypeProfile, results: Results) -> DtypeProfile:
    """Whole decoders: t = scale x (sum of their per-op times, cache reuse included) + layers x per-layer overhead
    + per-step overhead, all >= 0, on relative residuals: the tiny decoders pin the overheads, the mid-size ones the
    scale."""
    hw = _placeholder_hw({dtype: profile.model_copy(update={"in_model_scale": 1.0})})
    timing = MeasuredTiming.from_spec(hw)
    rows = []
    for key in results.samples:
        if key[0] != "decoder":
            continue
        _, name, batch, q = key
        spec = get_decoder_spec(name)
        ops = get_step_ops(spec, batch, DECODER_CONTEXT, q, dtype, dtype, dtype)
        step_timing = timing.for_step(ops)
        predicted = sum(float(step_timing.get_op_time(op, dtype).time_s) for op in ops)
        rows.append((predicted, spec.num_layers, results.timing(key).estimate_s, name))
    if not rows:
        return profile
    per_op = np.array([r[0] for r in rows])
    layers = np.array([r[1] for r in rows], dtype=float)
    measured = np.array([r[2] for r in rows])
    fit = fit_affine({"per_op": per_op, "layers": layers}, measured)
    scale = min(max(fit.coefficients["per_op"], 0.2), 5.0)
    predicted = scale * per_op + fit.coefficients["layers"] * layers + fit.overhead_s
    residuals = dict(profile.residuals)
    residuals["decoder_fit_rows"] = float(len(rows))
    residuals["decoder_fit_median_abs_rel"] = float(np.median(np.abs(predicted - measured) / measured))
    residuals["decoder_per_op_only_median_abs_rel"] = float(np.median(np.abs(per_op - measured) / measured))
    return profile.model_copy(update={
        "layer_overhead_s": float(fit.coefficients["layers"]), "step_overhead_s": float(fit.overhead_s),
        "in_model_scale": float(scale),
        "residuals": residuals,
    })


def _placeholder_hw(dtypes: dict) -> HardwareSpec:
    first = next(iter(dtypes.values()))
    prov = Provenance(device_kind="cpu", device_name="fit", host_cpu="fit", torch_version=torch.__version__,
                      dtypes=tuple(dtypes), threads=1, date="", command="", duration_s=0.0, quick=True, drift=0.0,
                      drift_flagged=False)
    return HardwareSpec(
        schema_version=1, name="fit", kind="cpu", vendor="fit",
        peak_flops_per_s={d: p.peak_flops_per_s for d, p in dtypes.items()},
        memory_bandwidth_bytes_per_s=first.gemv_bandwidth_bytes_per_s, memory_capacity_bytes=1e9,
        last_level_cache_bytes=0, efficiency=Efficiency(memory_fraction=1, compute_fraction=1, kernel_overhead_s=0),
        sources={"peak_flops_per_s": "fit", "memory_bandwidth_bytes_per_s": "fit", "memory_capacity_bytes": "fit"},
        measured=MeasuredProfile(profile_name="fit", base_hardware="fit", provenance=prov, dtypes=dtypes),
    )


# --- the whole run -------------------------------------------------------------------------------------------------------


def _memory_capacity(device: Device) -> float:
    if device.is_cuda:
        return float(torch.cuda.get_device_properties(device.torch_device).total_memory)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 16e9


def _llc_bytes(device: Device) -> float:
    if device.is_cuda:
        return float(device.l2_bytes)
    import glob

    best = 0.0
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            text = open(path).read().strip().upper()
            value = float(text.rstrip("KMG")) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1], 1)
            best = max(best, value)
        except (OSError, ValueError):
            continue
    return best or 32 * 2**20


def _base_hardware(device: Device) -> str:
    if not device.is_cuda:
        return "cpu-generic"
    name = device.name.lower()
    for key, alias in (("h200", "h200"), ("h100", "h100"), ("a100", "a100"), ("l40s", "l40s"), ("l4", "l4"),
                       ("a10g", "a10g"), ("4090", "rtx4090"), ("b200", "b200")):
        if key in name:
            return alias
    return device.slug


def run_calibration(device: Device, dtypes, quick: bool, command: str, seed: int = 0, progress: bool = True,
                    plan: Plan | None = None) -> HardwareSpec:
    """Measure, fit and return the profile (a HardwareSpec with a `measured` block); writing is the caller's."""
    check_hold_out()
    dtypes = tuple(normalize_dtype(d) for d in dtypes)
    for d in dtypes:
        get_torch_dtype(d)
    plan = plan or Plan.make(quick, dtypes, device)
    timer = Timer(device)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    started = time.perf_counter()
    benches = {d: Bench(device, d, plan, timer) for d in dtypes}
    results = {d: Results() for d in dtypes}
    reference: list[float] = []
    bandwidth = {}

    jobs: list[tuple[str, Job]] = []
    for d, bench in benches.items():
        for job in (bench.linear_jobs() + bench.attention_jobs() + bench.elementwise_jobs() + bench.decoder_jobs()
                    + bench.cache_jobs()):
            jobs.append((d, job))
    total = len(jobs) * plan.passes + 2 * len(dtypes) + 3

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    ref_bench = benches[dtypes[0]]
    with Progress(TextColumn("[bold]calibrate[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), disable=not progress, transient=False,
                  console=Console(stderr=True)) as bar:
        task = bar.add_task(f"{device.name} {','.join(dtypes)}", total=total)
        reference.append(ref_bench.reference().estimate_s)
        bar.advance(task)
        for d, bench in benches.items():
            bandwidth[d] = {"copy": bench.copy_bandwidth()[0]}
            bar.advance(task)
            bandwidth[d]["gemv"] = bench.gemv_bandwidth()[0]
            bar.advance(task)
        for p in range(plan.passes):
            order = list(jobs)
            rng.shuffle(order)
            half = len(order) // 2
            for i, (d, job) in enumerate(order):
                if p == plan.passes - 1 and i == half:
                    reference.append(ref_bench.reference().estimate_s)
                    bar.advance(task)
                results[d].add(job.key, job.run())
                bar.advance(task)
        reference.append(ref_bench.reference().estimate_s)
        bar.advance(task)

    profiles = {d: fit_dtype(d, results[d], bandwidth[d]["copy"], bandwidth[d]["gemv"], plan) for d in dtypes}
    duration = time.perf_counter() - started
    ref = np.array(reference)
    drift = float((ref.max() - ref.min()) / np.median(ref))
    return build_profile_spec(device, profiles, plan, command, duration, drift, tuple(float(r) for r in ref))


def build_profile_spec(device: Device, profiles: dict, plan: Plan, command: str, duration: float, drift: float,
                       reference: tuple) -> HardwareSpec:
    from .timers import get_host_cpu_model

    dtypes = tuple(profiles)
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    quick_note = ("--quick: bandwidth working sets of 256 MiB (not >= 1 GiB), fewer shapes and M points, one pass. "
                  if plan.quick else "")
    prov = Provenance(
        device_kind=device.kind, device_name=device.name, host_cpu=get_host_cpu_model(),
        torch_version=torch.__version__, dtypes=dtypes, threads=device.threads, date=now, command=command,
        duration_s=round(duration, 2), quick=plan.quick, drift=round(drift, 4), drift_flagged=drift > DRIFT_FLAG,
        reference_s=reference,
        notes=quick_note + f"calibrated weight shapes exclude the hold-out models {', '.join(HOLD_OUT_MODELS)}",
    )
    measured = MeasuredProfile(profile_name=device.slug, base_hardware=_base_hardware(device), provenance=prov,
                               dtypes=profiles)
    gemv = max(p.gemv_bandwidth_bytes_per_s for p in profiles.values())
    first = profiles[dtypes[0]]
    where = f"measured by rooflinesim calibrate on {device.name}, torch {torch.__version__}, {now}"
    return HardwareSpec(
        schema_version=1,
        name=f"{device.name}, measured",
        aliases=(device.slug,),
        kind="gpu" if device.is_cuda else "cpu",
        vendor=device.name.split()[0],
        peak_flops_per_s={d: p.peak_flops_per_s for d, p in profiles.items()},
        memory_bandwidth_bytes_per_s=gemv,
        memory_capacity_bytes=_memory_capacity(device),
        last_level_cache_bytes=_llc_bytes(device),
        efficiency=Efficiency(memory_fraction=1.0, compute_fraction=1.0, kernel_overhead_s=first.linear_overhead_s),
        sources={
            "peak_flops_per_s": f"{where}: effective GEMM peak fitted (least squares) to F.linear time vs M",
            "memory_bandwidth_bytes_per_s": f"{where}: weight-streaming GEMV over cold weights (best dtype)",
            "memory_capacity_bytes": "device memory reported by the OS / CUDA",
            "last_level_cache_bytes": "from sysfs (CPU) or the CUDA device properties",
            "efficiency": "fractions 1.0: the peaks above are measured effective figures; overhead = fitted per-linear cost",
        },
        notes=("A measured profile: expected times come from the `measured` tables (rooflinesim.calibrate.profile), "
               "the datasheet-like fields hold fitted effective numbers."),
        measured=measured,
    )
