"""The measured timing model: per-op times from a calibration profile's tables and fits (numpy only, no torch).

A profile is a HardwareSpec whose `measured` block (`rooflinesim.specs.MeasuredProfile`) holds, per compute dtype:

* linear ops (`timing.linear_tables`): the measured time of F.linear vs M per calibrated weight shape, interpolated
  log-log in M (above the last measured M each further row adds its FLOPs at the fitted peak); for a weight shape that was not calibrated,
  the ratio measured / fitted-roofline of the calibrated shapes is averaged with Gaussian weights over the distance
  in (log2 in_features, log2 out_features) and applied to the fitted roofline of the asked shape (so nothing
  depends on the shape being one that was measured);
* attention: the fitted masked-SDPA model, c + a x KV bytes + b x FLOPs + s x score elements, for one query token
  ('decode') and several ('multi'); several query tokens are never priced below one (they read the same KV cache
  and do more work), which keeps the multi-token fit from undercutting decode where it extrapolates;
* elementwise ops (norms, RoPE, activation, residuals, KV-cache write, embedding): per family c + bytes / bandwidth;
* the linear tables are cold (weights rotating over a pool far above the last-level cache); a model whose weights
  per step fit in the caches streams them faster between steps: each linear moves from its cold price towards its
  cache-warm price by the step's warmth on the measured cache-reuse curve (`for_step` binds a step; `with_co_resident`
  adds another model's weights, e.g. the target's for the drafter in a speculative loop). The warm price takes the
  weight streaming off at the warm bandwidth; with the profile's `warm_linear` tables (small shapes timed with
  cache-warm weights vs M) it also grows from its one-row price as those tables grow with M (`get_warm_growth`),
  which the cold tables hid behind streaming; never above the cold price;
* weights stored narrower than the compute dtype (int8 / int4 / fp8 weight-only) were not measured: such a linear is
  priced from the compute dtype's measurement with its weight streaming scaled to the stored bytes (never below the
  call's compute time), and `get_warnings` says so;
* every per-op time is multiplied by the profile's in-model scale (whole synthetic decoders timed as forward passes
  vs the sum of their ops timed alone), except the sampler and acceptance rule, which run after the forward pass;
* per-layer and per-step dispatch left over after the per-op times, via `get_step_overhead_s`;
* how far to trust each op time (`get_relative_sigmas`, see `get_profile_sigmas`).

The model is immutable: `for_step` and `with_co_resident` return bound copies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ops.op_cost import OpCost
from ..specs.measured import DtypeProfile
from ..specs.hardware import HardwareSpec
from ..errors import InputError
from ..units import get_dtype_bytes, normalize_dtype
from .base import AFTER_FORWARD_OPS, ELEMENTWISE_FAMILY, OpTime, RelativeSigmas, is_outside_in_model_scale
from .linear_tables import LinearModel, get_warm_growth
from .sigmas import get_profile_sigmas

@dataclass(frozen=True)
class _DtypeModel:
    profile: DtypeProfile
    linear: LinearModel
    sigmas: RelativeSigmas
    warm: LinearModel | None = None  # the cache-warm small-shape tables, for how a cached GEMM grows with M


@dataclass(frozen=True)
class MeasuredTiming:
    """TimingModel from a measured profile (see the module docstring). Immutable."""

    hw: HardwareSpec
    models: dict[str, _DtypeModel]
    profile_name: str
    name: str = "measured"
    step_weight_bytes: np.ndarray | None = None
    co_resident_weight_bytes: float = 0.0
    model_terms: dict | None = None  # dtype -> ModelTerms of the model being priced (`calibrate --model`)

    @classmethod
    def from_spec(cls, hw: HardwareSpec) -> "MeasuredTiming":
        if hw.measured is None:
            raise InputError(f"{hw.name} carries no measured profile")
        models = {}
        for dtype, prof in hw.measured.dtypes.items():
            linear = LinearModel.from_tables(prof.linear, prof.peak_flops_per_s, prof.gemv_bandwidth_bytes_per_s,
                                             prof.linear_overhead_s, get_dtype_bytes(dtype),
                                             prof.linear_shape_alignment)
            warm = (LinearModel.from_tables(prof.warm_linear, prof.peak_flops_per_s, prof.gemv_bandwidth_bytes_per_s,
                                            prof.linear_overhead_s, get_dtype_bytes(dtype))
                    if prof.warm_linear else None)
            models[dtype] = _DtypeModel(prof, linear, get_profile_sigmas(prof, linear, hw.measured.provenance.drift),
                                        warm)
        return cls(hw, models, hw.measured.profile_name, name=f"measured:{hw.measured.profile_name}")

    def for_step(self, ops: list[OpCost]) -> "MeasuredTiming":
        """Bound to one step: the weights its ops read (plus any co-resident model's) are its cache working set."""
        weight_bytes = sum(op.count * np.asarray(op.weight_bytes, dtype=float) for op in ops)
        return replace(self, step_weight_bytes=np.asarray(weight_bytes, dtype=float) + self.co_resident_weight_bytes)

    def for_model(self, model) -> "MeasuredTiming":
        """Bound to one model: its own fitted terms (`calibrate --model`), where the profile has them."""
        terms = (self.hw.measured.provenance.model_terms or {}).get(getattr(model, "name", None)) or None
        return self if terms is self.model_terms else replace(self, model_terms=terms)

    def _terms(self, compute_dtype: str):
        return (self.model_terms or {}).get(normalize_dtype(compute_dtype))

    def with_co_resident(self, weight_bytes: float) -> "MeasuredTiming":
        """Another model's weights pass through the caches between this model's steps (draft and target in a
        speculative loop), so they count in the working set."""
        return replace(self, co_resident_weight_bytes=float(weight_bytes))

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(self.models)

    def _model(self, compute_dtype: str) -> _DtypeModel:
        dtype = normalize_dtype(compute_dtype)
        if dtype not in self.models:
            raise InputError(
                f"calibration profile {self.profile_name} measured {', '.join(self.models)} only, not {dtype}; "
                f"run 'rooflinesim calibrate --dtype {dtype}' or predict in a measured dtype"
            )
        return self.models[dtype]

    def _cache_warmth(self, prof: DtypeProfile):
        """How much of the step's weight working set is served from the caches: 0 (cold) .. 1 (as warm as the
        smallest calibrated working set), from the measured cache-reuse curve."""
        reuse = prof.cache_reuse
        if reuse is None or self.step_weight_bytes is None or max(reuse.speedup) <= 1.0:
            return 0.0
        x = np.log(np.maximum(self.step_weight_bytes, 1.0))
        speedup = np.interp(x, np.log(np.asarray(reuse.working_set_bytes)), np.asarray(reuse.speedup))
        return (speedup - 1.0) / (max(reuse.speedup) - 1.0)

    def _cache_warmth_sigma(self, prof: DtypeProfile):
        """1-sigma of `_cache_warmth`: the curve's spread between its timings at the step's working set, in units of
        the curve's range (0 without a spread or a bound step)."""
        reuse = prof.cache_reuse
        if reuse is None or not reuse.speedup_sigma or self.step_weight_bytes is None or max(reuse.speedup) <= 1.0:
            return 0.0
        x = np.log(np.maximum(self.step_weight_bytes, 1.0))
        sigma = np.interp(x, np.log(np.asarray(reuse.working_set_bytes)), np.asarray(reuse.speedup_sigma))
        return np.minimum(sigma / (max(reuse.speedup) - 1.0), 1.0)

    def get_cache_sigma_s(self, expected: list[OpTime], num_layers: int, compute_dtype: str):
        """How far (s, 1 sigma) the step priced as `expected` moves as the cache-reuse curve does: the warmth's
        sigma times what fully warm weights take off the step (its linears' `warm_saving_s` and the in-model
        per-layer cost, which `get_step_overhead_s` charges cold steps only)."""
        prof = self._model(compute_dtype).profile
        sigma = self._cache_warmth_sigma(prof)
        if not np.any(sigma):
            return 0.0
        terms = self._terms(compute_dtype)
        in_model = num_layers * prof.in_model_layer_overhead_s * (1.0 if terms is None else terms.scale)
        return sigma * (sum(t.warm_saving_s for t in expected) + in_model)

    def get_cache_warmth(self, compute_dtype: str):
        """How warm the bound step's weights are on the measured cache-reuse curve: 0 (cold, streamed from memory)
        .. 1 (as warm as the smallest calibrated working set); 0 without a curve or a bound step."""
        return self._cache_warmth(self._model(compute_dtype).profile)

    def get_linear_time_s(self, m, k, n, compute_dtype: str) -> np.ndarray:
        """One F.linear call of x[M, K] @ W[N, K]^T with weights in the compute dtype (per instance)."""
        return self._model(compute_dtype).linear.time_s(m, k, n)

    @staticmethod
    def _cold_linear_s(dm: _DtypeModel, m, k, n, weight) -> np.ndarray:
        """One call from the cold tables, its weight streaming scaled to narrower stored weights."""
        prof, linear = dm.profile, dm.linear
        per = linear.time_s(m, k, n)
        measured_weight = k * n * linear.weight_bytes_per_element
        if np.any(weight < measured_weight * (1 - 1e-9)):
            # narrower stored weights: the measured call streamed k x n compute-dtype elements; only the bytes
            # differ, so take the difference off at the measured bandwidth, never below the call's compute time
            floor = 2.0 * np.asarray(m, dtype=float) * k * n / prof.peak_flops_per_s + prof.linear_overhead_s
            per = np.maximum(per - (measured_weight - weight) / prof.gemv_bandwidth_bytes_per_s,
                             np.minimum(per, floor))
        return per

    def _linear_s(self, dm: _DtypeModel, op: OpCost) -> tuple[np.ndarray, np.ndarray]:
        """One call's price and what fully warm weights would take off it, against fully cold ones (s)."""
        per, warm = self._linear_cold_warm_s(dm, op.dims["m"], op.dims["k"], op.dims["n"],
                                             np.asarray(op.weight_bytes, dtype=float))
        return self._blend(dm, per, warm), per - warm

    def _grouped_experts_s(self, dm: _DtypeModel, op: OpCost) -> tuple[np.ndarray, np.ndarray]:
        """One GEMM per hit expert at its own rows and weights from the linear tables, and an empty GEMM (one
        dispatch) for each expert of the layer that received no token (`ops.implementation_ops`); and what fully
        warm weights would take off them."""
        hit = np.asarray(op.dims["experts"], dtype=float)
        weight = np.asarray(op.weight_bytes, dtype=float) / np.maximum(hit, 1e-300)
        per, warm = self._linear_cold_warm_s(dm, op.dims["m"], op.dims["k"], op.dims["n"], weight)
        empty = np.maximum(op.dims["expert_calls"] - hit, 0.0) * self._dispatch_s(dm.profile)
        return hit * self._blend(dm, per, warm) + empty, hit * (per - warm)

    def _blend(self, dm: _DtypeModel, cold, warm) -> np.ndarray:
        """A call's price at the bound step's warmth on the cache-reuse curve."""
        warmth = self._cache_warmth(dm.profile)
        return cold * (1.0 - warmth) + warm * warmth

    def _linear_cold_warm_s(self, dm: _DtypeModel, m, k, n, weight) -> tuple[np.ndarray, np.ndarray]:
        """One call with fully cold and with fully cached weights (the cold price again without a curve)."""
        prof = dm.profile
        per = self._cold_linear_s(dm, m, k, n, weight)
        if prof.cache_reuse is None:
            return per, per
        # the tables are cold; weights that stay cached between steps stream at the warm bandwidth whatever the
        # shape (a shape's own cold inefficiency is a memory-side effect that the cache removes too), but the cache
        # cannot take away more than `_cache_saving_s` (compute-bound calls keep their time)
        warm_bw, saved = prof.cache_reuse.warm_bandwidth_bytes_per_s, self._cache_saving_s(prof, weight)
        cached = np.maximum(prof.linear_overhead_s + weight / warm_bw, per - saved)
        if dm.warm is not None:
            # with cached weights a small GEMM's time grows with M as the measured warm tables do (the GEMV-to-GEMM
            # switch at M = 2, then the small-M compute rate), which the cold tables hide behind weight streaming:
            # the cached price at one row (what the decoder fit's dispatch terms were pinned with) times that growth
            one = self._cold_linear_s(dm, 1, k, n, weight)
            at_one = np.minimum(one, np.maximum(prof.linear_overhead_s + weight / warm_bw, one - saved))
            cached = np.maximum(cached, at_one * get_warm_growth(dm.warm, m, k, n))
        return per, np.minimum(per, cached)

    @staticmethod
    def _cache_saving_s(prof: DtypeProfile, weight) -> np.ndarray:
        """The most that cached weights take off a call's cold time: its weight streaming at the cold bandwidth.
        (`scripts/try-warm-curve.py` tries keeping that streaming at the warm bandwidth instead.)"""
        return weight / prof.gemv_bandwidth_bytes_per_s

    def get_op_time(self, op: OpCost, compute_dtype: str) -> OpTime:
        dm = self._model(compute_dtype)
        prof = dm.profile
        compute = op.count * op.flops / prof.peak_flops_per_s
        memory = op.count * op.bytes / prof.gemv_bandwidth_bytes_per_s
        warm_saving = 0.0  # per call: what fully warm weights would take off it, against fully cold ones
        if op.kind == "linear":
            per, warm_saving = self._linear_s(dm, op)
        elif op.kind == "attention":
            per = self._attention_s(prof, op)
        elif op.name in ("kv_concat", "kv_repeat") and prof.kv_concat is not None:
            # per byte as measured for tensors of this size (reused heap or fresh pages: `CopyTable`)
            per = op.bytes * prof.kv_concat.get_seconds_per_byte(op.dims["allocation_bytes"])
        elif op.name in ELEMENTWISE_FAMILY and ELEMENTWISE_FAMILY[op.name] in prof.elementwise:
            fit = prof.elementwise[ELEMENTWISE_FAMILY[op.name]]
            per = fit.overhead_s + fit.coefficients.get("bytes", 0.0) * op.bytes
        elif op.kind == "dispatch":
            per = op.dims["calls"] * self._dispatch_s(prof)
        elif op.kind == "expert_linear" and "expert_calls" in op.dims:
            per, warm_saving = self._grouped_experts_s(dm, op)
        elif op.name in ("kv_concat", "kv_repeat"):
            # a profile measured before the fresh-allocation copy was timed: its copy bandwidth (a copy into an
            # existing buffer, so without the new allocation's page faults: a lower bound) + one call's overhead
            per = op.bytes / prof.copy_bandwidth_bytes_per_s + prof.linear_overhead_s
        else:  # unfused attention pieces, MoE experts, anything not calibrated: the fitted roofline + one overhead
            per = np.maximum(op.flops / prof.peak_flops_per_s, op.bytes / prof.gemv_bandwidth_bytes_per_s)
            per = per + prof.linear_overhead_s
        scale = 1.0 if is_outside_in_model_scale(op) else prof.in_model_scale
        terms = self._terms(compute_dtype)
        if terms is not None and op.name not in AFTER_FORWARD_OPS:
            scale = scale * terms.scale
            if op.kind == "attention":  # the model's cache handling, in proportion to the cache it reads
                per = per + terms.kv_cache_s_per_byte * np.asarray(op.kv_read_bytes, dtype=float) / scale
        time = op.count * np.asarray(per, dtype=float) * scale
        time = np.broadcast_to(time, np.broadcast(time, compute).shape).astype(float)
        overhead = np.maximum(time - np.maximum(compute, memory), 0.0)
        return OpTime(compute + 0 * time, memory + 0 * time, overhead, time, compute > memory,
                      op.count * np.asarray(warm_saving, dtype=float) * scale)

    @staticmethod
    def _dispatch_s(prof: DtypeProfile) -> float:
        """One aten call's cost: measured, or (older profiles) the fitted per-layer overhead spread over the
        reference decoder's calls per layer."""
        if prof.dispatch_s is not None:
            return prof.dispatch_s
        from ..specs.implementation import get_reference_implementation

        return prof.layer_overhead_s / get_reference_implementation().dispatches_per_layer.value

    @staticmethod
    def _attention_features(op: OpCost) -> dict[str, np.ndarray]:
        d = op.dims
        scores = np.asarray(d["batch"], dtype=float) * d["heads"] * np.asarray(d["q"], dtype=float) * d["kv_tokens"]
        return {"kv_bytes": op.kv_read_bytes, "flops": op.flops, "scores": scores}

    @staticmethod
    def _one_token_features(op: OpCost) -> dict[str, np.ndarray]:
        """The same attention for one query token on the same cached context: S + 1 keys instead of S + q (per
        query-key pair the FLOPs are the same, so they scale with the pairs: S + 1 vs q S + q (q + 1) / 2)."""
        d = op.dims
        q = np.asarray(d["q"], dtype=float)
        s = np.asarray(d["kv_tokens"], dtype=float) - q
        pairs_q, pairs_1 = q * s + q * (q + 1) / 2, s + 1
        return {"kv_bytes": op.kv_read_bytes * pairs_1 / (s + q), "flops": op.flops * pairs_1 / pairs_q,
                "scores": np.asarray(d["batch"], dtype=float) * d["heads"] * pairs_1}

    @staticmethod
    def _attention_fit(prof: DtypeProfile, label: str, head_dim: int):
        """The fit for 'decode' / 'multi' at the calibrated head_dim nearest (in log2) to the op's."""
        fits = {}
        for key, fit in prof.attention.items():
            name, _, d = key.partition("_d")
            fits.setdefault(name, []).append((abs(np.log2(int(d or head_dim)) - np.log2(head_dim)), key, fit))
        candidates = fits.get(label) or [c for group in fits.values() for c in group]
        return min(candidates, key=lambda c: (c[0], c[1]))[2]

    def _attention_s(self, prof: DtypeProfile, op: OpCost) -> np.ndarray:
        head_dim = int(op.dims["head_dim"])
        q = np.asarray(op.dims["q"], dtype=float)

        def fitted(label, features):
            fit = self._attention_fit(prof, label, head_dim)
            return fit.overhead_s + sum(fit.coefficients.get(n, 0.0) * v for n, v in features.items())

        features = self._attention_features(op)
        decode, multi = fitted("decode", features), fitted("multi", features)
        # several query tokens read the same KV cache as one and do more work: never cheaper than one token on the
        # same context (the two fits have different slopes, so far outside the measured range they can cross)
        one_token = fitted("decode", self._one_token_features(op))
        return np.where(q <= 1, decode, np.maximum(multi, one_token))

    def get_relative_sigmas(self, compute_dtype: str) -> RelativeSigmas:
        return self._model(compute_dtype).sigmas

    def get_step_overhead_s(self, num_layers: int, compute_dtype: str) -> float:
        prof = self._model(compute_dtype).profile
        # the in-model per-layer cost comes from weights streaming through the caches: none for a model whose bound
        # step's weights stay cached (the acceptance loop's 2.4 MB pair), all of it for a cold one
        in_model = prof.in_model_layer_overhead_s * (1.0 - np.asarray(self._cache_warmth(prof), dtype=float))
        total = np.maximum(num_layers * (prof.layer_overhead_s + in_model) + prof.step_overhead_s, 0.0)
        terms = self._terms(compute_dtype)
        if terms is not None:  # the model's own: the fit priced its whole step as scale x price + overhead
            total = total * terms.scale + terms.step_overhead_s
        return float(total.reshape(-1)[0]) if total.size == 1 else total

    def get_warnings(self, ops: list[OpCost], compute_dtype: str) -> list[str]:
        warnings = []
        dm = self._model(compute_dtype)
        narrow = [op.name for op in ops if op.kind == "linear" and np.any(
            np.asarray(op.weight_bytes, dtype=float)
            < op.dims["k"] * op.dims["n"] * dm.linear.weight_bytes_per_element * (1 - 1e-9))]
        if narrow:
            warnings.append(
                f"profile {self.profile_name} measured {normalize_dtype(compute_dtype)} weights only: narrower stored "
                "weights are priced from that measurement with their weight streaming scaled to the stored bytes "
                "(the dequantising kernel's own efficiency was not measured)")
        far = sorted({op.name for op in ops if op.kind == "linear" and dm.linear.tables
                      and dm.linear.get_shape_weights(op.dims["k"], op.dims["n"]).max() < 1e-3})
        if far:
            warnings.append(
                f"profile {self.profile_name}: the weight shapes of {', '.join(far)} are far from every calibrated "
                "shape (more than ~3 log2 steps): priced from the nearest calibrated shape's efficiency")
        largest_m = max((float(np.exp(t.log_m[-1])) for t in dm.linear.tables), default=None)
        if largest_m is not None:
            m_max = max(float(np.max(op.dims["m"])) for op in ops if op.kind == "linear")
            if m_max > largest_m:
                warnings.append(
                    f"profile {self.profile_name}: linears with up to {m_max:,.0f} rows exceed the largest measured "
                    f"M ({largest_m:,.0f}): extrapolated as compute-bound (each further row at the fitted peak)")
        calibrated = sorted({int(key.partition("_d")[2]) for key in dm.profile.attention if key.partition("_d")[2]})
        for op in ops:
            if op.kind == "attention" and calibrated:
                head_dim = int(op.dims["head_dim"])
                nearest = min(calibrated, key=lambda d: abs(np.log2(d) - np.log2(head_dim)))
                if abs(np.log2(nearest) - np.log2(head_dim)) > 1:
                    warnings.append(
                        f"profile {self.profile_name}: attention over head_dim {head_dim} is priced from the fit "
                        f"measured at head_dim {nearest} (never below one query token on the same context)")
        return warnings


__all__ = ["MeasuredTiming", "ELEMENTWISE_FAMILY", "get_profile_sigmas"]
