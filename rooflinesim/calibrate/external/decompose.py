"""What a hold-out's decode step is made of, measured (torch.profiler) beside what rooflinesim prices for it.

The profiler's per-op self times of one step (averaged over calls) are put into buckets that line up with the
step model's op families:

==============  =================================================  ==========================================
bucket          aten ops (measured)                                priced ops (rooflinesim)
==============  =================================================  ==========================================
linear          addmm, mm, mv, bmm, matmul, linear (lm_head apart)  q/k/v/o, gate/up/down projections, experts
lm_head         the linear whose output width is the vocabulary     lm_head
attention       scaled_dot_product_attention and its kernels       attention
kv_cache        cat (DynamicCache grows by concatenation),         kv_cache_write
                index_copy_, index_put_
norm            rms_norm, pow, mean, rsqrt                         attn_norm, mlp_norm, final_norm
rope            neg, view_as_complex, polar, stack, mul on rotary  rope
                inputs (not separable from other muls: see below)
elementwise     mul, add, silu, sigmoid, softmax, topk, ...        mlp_act, residuals, router, embedding
views           view, reshape, transpose, slice, expand, select,   (no price: part of the dispatch overhead)
                unsqueeze, as_strided, contiguous, empty, to ...
framework       wall time - the sum of every aten op's self time   per-layer and per-step overhead
                (Python, nn.Module calls, mask building)
==============  =================================================  ==========================================

`dispatches` counts aten calls per step (every op the dispatcher routes, views included): the per-op overhead an
eager implementation pays whatever the op does. RoPE's multiplications cannot be told from the MLP's by name, so
`rope` holds only the ops unique to rotary embeddings; the rest lands in `elementwise`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from ...units import MICRO, MILLI

LINEAR_OPS = {"aten::addmm", "aten::mm", "aten::mv", "aten::bmm", "aten::matmul", "aten::linear",
              "aten::_addmm_activation", "aten::baddbmm", "aten::_grouped_mm"}
ATTENTION_PREFIXES = ("aten::scaled_dot_product", "aten::_scaled_dot_product", "aten::_flash_attention",
                      "aten::_efficient_attention", "aten::_cudnn_attention")
KV_CACHE_OPS = {"aten::cat", "aten::index_copy_", "aten::index_copy", "aten::index_put_", "aten::_index_put_impl_"}
NORM_OPS = {"aten::rms_norm", "aten::_fused_rms_norm", "aten::pow", "aten::mean", "aten::rsqrt", "aten::layer_norm",
            "aten::native_layer_norm"}
ROPE_OPS = {"aten::neg", "aten::view_as_complex", "aten::view_as_real", "aten::polar", "aten::stack",
            "aten::flatten"}
VIEW_OPS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::transpose", "aten::slice", "aten::expand",
            "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::as_strided", "aten::contiguous",
            "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::to", "aten::_to_copy", "aten::t",
            "aten::detach", "aten::alias", "aten::split", "aten::split_with_sizes", "aten::narrow",
            "aten::unflatten", "aten::permute", "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg",
            "aten::_unsafe_view", "aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::zeros",
            "aten::zero_", "aten::fill_", "aten::copy_", "aten::arange", "aten::full", "aten::ones", "aten::scalar_tensor",
            "aten::result_type", "aten::clone", "aten::__and__", "aten::__or__", "aten::view_as", "aten::new_ones"}
BUCKETS = ("linear", "lm_head", "attention", "kv_cache", "norm", "rope", "elementwise", "views", "framework")


def bucket_of(name: str, output_width: int | None = None, vocab: int | None = None) -> str:
    if name in LINEAR_OPS:
        return "lm_head" if vocab and output_width == vocab else "linear"
    if name.startswith(ATTENTION_PREFIXES):
        return "attention"
    if name in KV_CACHE_OPS:
        return "kv_cache"
    if name in NORM_OPS:
        return "norm"
    if name in ROPE_OPS:
        return "rope"
    if name in VIEW_OPS:
        return "views"
    return "elementwise"


#: priced op name -> bucket (anything else, e.g. MoE experts and the router, is `linear` or `elementwise` by kind)
PRICED_BUCKET = {"lm_head": "lm_head", "attention": "attention", "kv_cache_write": "kv_cache", "attn_norm": "norm",
                 "mlp_norm": "norm", "final_norm": "norm", "rope": "rope",
                 # what an implementation profile adds (`ops.implementation_ops`): the concatenation is aten::cat
                 # (kv_cache), repeat_kv a copy, RoPE's extra passes muls and adds, dispatches host time
                 "kv_concat": "kv_cache", "kv_repeat": "kv_cache", "rope_extra_pass": "elementwise",
                 "extra_dispatches": "framework"}


@dataclass
class Decomposition:
    measured_s: dict  # bucket -> seconds per step
    dispatches: dict  # bucket -> aten calls per step
    priced_s: dict  # bucket -> seconds the step model prices
    wall_s: float  # measured step time under the profiler (per call)
    plain_s: float  # measured step time without the profiler (per call, median)
    predicted_s: float  # the step model's total

    def rows(self) -> list[tuple[str, float, float, float]]:
        return [(b, self.measured_s.get(b, 0.0), self.priced_s.get(b, 0.0), self.dispatches.get(b, 0.0))
                for b in BUCKETS]


def _output_width(event) -> int | None:
    """The last dim of a linear's weight (mm / addmm: the second matrix's columns; linear: the weight's rows)."""
    shapes = getattr(event, "input_shapes", None) or []
    try:
        if event.name == "aten::linear" and len(shapes) >= 2 and len(shapes[1]) == 2:
            return int(shapes[1][0])
        if event.name in ("aten::mm", "aten::addmm") and shapes:
            mat = shapes[-1] if event.name == "aten::mm" else shapes[2]
            return int(mat[-1]) if mat else None
    except (IndexError, TypeError, ValueError):
        return None
    return None


def profile_step(fn, calls: int = 5, before=None, vocab: int | None = None) -> tuple[dict, dict, float, float]:
    """Per-bucket self time (s per call) and aten calls per call of `fn` under torch.profiler; the wall time per call
    under the profiler, and the plain median per call without it."""
    import statistics

    from torch.profiler import ProfilerActivity, profile

    before = before or (lambda: None)
    plain = []
    for _ in range(calls + 1):
        before()
        t0 = time.perf_counter()
        fn()
        plain.append(time.perf_counter() - t0)
    plain_s = statistics.median(plain[1:])
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        wall = 0.0
        for _ in range(calls):
            before()
            t0 = time.perf_counter()
            fn()
            wall += time.perf_counter() - t0
    seconds, counts = defaultdict(float), defaultdict(float)
    total_self = 0.0
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        b = bucket_of(event.name, _output_width(event), vocab)
        # only the outermost aten call counts as a dispatch; self time is counted for every level (no double count)
        self_s = event.self_cpu_time_total * MICRO
        seconds[b] += self_s
        total_self += self_s
        if event.cpu_parent is None or not event.cpu_parent.name.startswith("aten::"):
            counts[b] += 1
    per_call = {b: s / calls for b, s in seconds.items()}
    per_call["framework"] = max(wall - total_self, 0.0) / calls
    return per_call, {b: c / calls for b, c in counts.items()}, wall / calls, plain_s


def priced_buckets(step) -> dict:
    """A StepCost's expected op times in the same buckets; the per-layer / per-step overhead as `framework`."""
    out = defaultdict(float)
    for op, t in zip(step.ops, step.expected):
        if op.name in PRICED_BUCKET:
            b = PRICED_BUCKET[op.name]
        elif op.kind == "linear" or "expert" in op.name:
            b = "linear"
        else:
            b = "elementwise"
        out[b] += float(t.time_s.reshape(-1)[0]) if hasattr(t.time_s, "reshape") else float(t.time_s)
    out["framework"] += float(step.step_overhead_s.reshape(-1)[0]) if hasattr(step.step_overhead_s, "reshape") else (
        float(step.step_overhead_s))
    return dict(out)


def decompose(fn, step, calls: int = 5, before=None, vocab: int | None = None) -> Decomposition:
    measured, counts, wall, plain = profile_step(fn, calls, before, vocab)
    return Decomposition(measured, counts, priced_buckets(step), wall, plain, float(step.step_time_s.reshape(-1)[0])
                         if hasattr(step.step_time_s, "reshape") else float(step.step_time_s))


def format_table(title: str, d: Decomposition, layers: int) -> str:
    """A plain-text table: measured (profiled, scaled to the plain step time) vs priced, per bucket."""
    scale = d.plain_s / d.wall_s if d.wall_s > 0 else 1.0  # the profiler's own overhead taken out proportionally
    lines = [title, f"{'bucket':<12} {'measured ms':>11} {'priced ms':>10} {'diff ms':>9} {'aten calls':>10} "
                    f"{'calls/layer':>11}"]
    for bucket, meas, priced, calls in d.rows():
        m = meas * scale / MILLI
        lines.append(f"{bucket:<12} {m:11.3f} {priced / MILLI:10.3f} {m - priced / MILLI:+9.3f} {calls:10.0f} "
                     f"{calls / max(layers, 1):11.1f}")
    lines.append(f"{'total':<12} {d.plain_s / MILLI:11.3f} {d.predicted_s / MILLI:10.3f} "
                 f"{(d.plain_s - d.predicted_s) / MILLI:+9.3f} {sum(d.dispatches.values()):10.0f} "
                 f"{sum(d.dispatches.values()) / max(layers, 1):11.1f}")
    return "\n".join(lines)
