"""Measured profiles: the timing model built from them, atomic writing, loading and applying to another spec.

numpy / scipy / pyyaml only: this module is on the `rooflinesim predict` path and must never import torch.

A profile is a HardwareSpec YAML (datasheet-like fields hold the *fitted effective* numbers) plus a `measured` block
(`rooflinesim.specs.MeasuredProfile`). `MeasuredTiming` implements the `TimingModel` protocol of `roofline`:

* linear ops: the measured time of F.linear vs M per calibrated weight shape, interpolated log-log in M; for a
  weight shape that was not calibrated, the ratio measured / fitted-roofline of the calibrated shapes is averaged
  with Gaussian weights over the distance in (log2 in_features, log2 out_features) and applied to the fitted
  roofline of the asked shape (so nothing depends on the shape being one that was measured);
* attention: the fitted masked-SDPA model, c + a x KV bytes + b x FLOPs + s x score elements, for one query token
  ('decode') and several ('multi');
* elementwise ops (norms, RoPE, activation, residuals, KV-cache write, embedding): per family c + bytes / bandwidth;
* the linear tables are cold (weights rotating over a pool far above the last-level cache); a model whose weights
  per step fit in the caches streams them faster between steps: the weight-streaming share of each linear is divided
  by the measured cache-reuse speedup at the step's weight working set (`for_step` binds a step; `with_co_resident`
  adds another model's weights, e.g. the target's for the drafter in a speculative loop);
* every per-op time is multiplied by the profile's in-model scale (whole synthetic decoders timed as forward passes
  vs the sum of their ops timed alone);
* per-layer and per-step dispatch left over after the per-op times, via `get_step_overhead_s`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import yaml

from ..ops import ATTENTION_KINDS, OpCost
from ..roofline import OpTime
from ..specs import DtypeProfile, HardwareSpec, InputError, LinearTable
from ..units import get_dtype_bytes, normalize_dtype

#: Width (in log2 units of in/out features) of the Gaussian that weighs calibrated weight shapes.
SHAPE_KERNEL_LOG2 = 0.75

#: op name -> elementwise family measured by `rooflinesim calibrate`.
ELEMENTWISE_FAMILY = {
    "attn_norm": "norm", "mlp_norm": "norm", "final_norm": "norm",
    "rope": "rope", "mlp_act": "mlp_act", "attn_residual": "residual", "mlp_residual": "residual",
    "kv_cache_write": "kv_cache_write", "embedding": "embedding",
}


def _spec_error(message: str):
    from ..registry import SpecError

    return SpecError(message)


# --- linear tables -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    k: int
    n: int
    log_m: np.ndarray
    log_t: np.ndarray

    @classmethod
    def from_spec(cls, table: LinearTable) -> "_Table":
        return cls(table.in_features, table.out_features, np.log(np.asarray(table.m, dtype=float)),
                   np.log(np.asarray(table.time_s, dtype=float)))

    def time_s(self, m) -> np.ndarray:
        """Log-log interpolation in M; constant below the first M, linear in M (compute-bound) above the last."""
        lm = np.log(np.maximum(np.asarray(m, dtype=float), 1.0))
        inside = np.interp(lm, self.log_m, self.log_t)
        above = self.log_t[-1] + (lm - self.log_m[-1])
        return np.exp(np.where(lm > self.log_m[-1], above, inside))


@dataclass
class LinearModel:
    """Per-call F.linear time for any (M, K, N) of one dtype from the calibrated tables."""

    tables: list[_Table]
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    overhead_s: float
    weight_bytes_per_element: float
    kernel_log2: float = SHAPE_KERNEL_LOG2

    def roofline_s(self, m, k, n) -> np.ndarray:
        m = np.asarray(m, dtype=float)
        flops = 2.0 * m * k * n
        weight = k * n * self.weight_bytes_per_element
        return np.maximum(flops / self.peak_flops_per_s, weight / self.bandwidth_bytes_per_s) + self.overhead_s

    def time_s(self, m, k, n) -> np.ndarray:
        m = np.asarray(m, dtype=float)
        base = self.roofline_s(m, k, n)
        if not self.tables:
            return base
        log_ratios, weights = [], []
        for table in self.tables:
            d2 = (np.log2(k) - np.log2(table.k)) ** 2 + (np.log2(n) - np.log2(table.n)) ** 2
            weights.append(np.exp(-d2 / (2 * self.kernel_log2**2)))
            log_ratios.append(np.log(table.time_s(m)) - np.log(self.roofline_s(m, table.k, table.n)))
        w = np.asarray(weights)
        if w.sum() < 1e-12:  # far from every calibrated shape: fall back to the nearest one's ratio
            w = (w == w.max()).astype(float)
        ratio = sum(wi * lr for wi, lr in zip(w, log_ratios)) / w.sum()
        return base * np.exp(ratio)


# --- the timing model ----------------------------------------------------------------------------------------------


@dataclass
class _DtypeModel:
    profile: DtypeProfile
    linear: LinearModel


@dataclass
class MeasuredTiming:
    """TimingModel from a measured profile (see the module docstring)."""

    hw: HardwareSpec
    models: dict[str, _DtypeModel]
    profile_name: str
    name: str = "measured"
    step_weight_bytes: np.ndarray | None = None
    co_resident_weight_bytes: float = 0.0
    _last_dtype: str | None = field(default=None, repr=False)

    @classmethod
    def from_spec(cls, hw: HardwareSpec) -> "MeasuredTiming":
        if hw.measured is None:
            raise InputError(f"{hw.name} carries no measured profile")
        models = {}
        for dtype, prof in hw.measured.dtypes.items():
            linear = LinearModel(
                [_Table.from_spec(t) for t in prof.linear], prof.peak_flops_per_s, prof.gemv_bandwidth_bytes_per_s,
                prof.linear_overhead_s, get_dtype_bytes(dtype),
            )
            models[dtype] = _DtypeModel(prof, linear)
        return cls(hw, models, hw.measured.profile_name, name=f"measured:{hw.measured.profile_name}")

    def for_step(self, ops: list[OpCost]) -> "MeasuredTiming":
        """Bound to one step: the weights its ops read (plus any co-resident model's) are its cache working set."""
        weight_bytes = sum(op.count * np.asarray(op.weight_bytes, dtype=float) for op in ops)
        return replace(self, step_weight_bytes=np.asarray(weight_bytes, dtype=float) + self.co_resident_weight_bytes)

    def with_co_resident(self, weight_bytes: float) -> "MeasuredTiming":
        """Another model's weights pass through the caches between this model's steps (draft and target in a
        speculative loop), so they count in the working set."""
        return replace(self, co_resident_weight_bytes=float(weight_bytes))

    def _cache_warmth(self, prof: DtypeProfile):
        """How much of the step's weight working set is served from the caches: 0 (cold) .. 1 (as warm as the
        smallest calibrated working set), from the measured cache-reuse curve."""
        reuse = prof.cache_reuse
        if reuse is None or self.step_weight_bytes is None or max(reuse.speedup) <= 1.0:
            return 0.0
        x = np.log(np.maximum(self.step_weight_bytes, 1.0))
        speedup = np.interp(x, np.log(np.asarray(reuse.working_set_bytes)), np.asarray(reuse.speedup))
        return (speedup - 1.0) / (max(reuse.speedup) - 1.0)

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
        self._last_dtype = dtype
        return self.models[dtype]

    def get_linear_time_s(self, m, k, n, compute_dtype: str) -> np.ndarray:
        """One F.linear call of x[M, K] @ W[N, K]^T (per instance)."""
        return self._model(compute_dtype).linear.time_s(m, k, n)

    def get_op_time(self, op: OpCost, compute_dtype: str) -> OpTime:
        dm = self._model(compute_dtype)
        prof = dm.profile
        compute = op.count * op.flops / prof.peak_flops_per_s
        memory = op.count * op.bytes / prof.gemv_bandwidth_bytes_per_s
        if op.kind == "linear":
            per = dm.linear.time_s(op.dims["m"], op.dims["k"], op.dims["n"])
            # the tables are cold; weights that stay cached between steps stream at the warm bandwidth whatever the
            # shape (a shape's own cold inefficiency is a memory-side effect that the cache removes too), but the
            # cache cannot take away more than the cold weight streaming (compute-bound calls keep their time)
            if prof.cache_reuse is not None:
                warmth = self._cache_warmth(prof)
                weight = np.asarray(op.weight_bytes, dtype=float)
                cached = np.maximum(prof.linear_overhead_s + weight / prof.cache_reuse.warm_bandwidth_bytes_per_s,
                                    per - weight / prof.gemv_bandwidth_bytes_per_s)
                per = per * (1.0 - warmth) + np.minimum(per, cached) * warmth
        elif op.kind == "attention":
            per = self._attention_s(prof, op)
        elif op.name in ELEMENTWISE_FAMILY and ELEMENTWISE_FAMILY[op.name] in prof.elementwise:
            fit = prof.elementwise[ELEMENTWISE_FAMILY[op.name]]
            per = fit.overhead_s + fit.coefficients.get("bytes", 0.0) * op.bytes
        else:  # unfused attention pieces and anything not calibrated: the fitted roofline + one linear's overhead
            per = np.maximum(op.flops / prof.peak_flops_per_s, op.bytes / prof.gemv_bandwidth_bytes_per_s)
            per = per + prof.linear_overhead_s
        time = op.count * np.asarray(per, dtype=float) * prof.in_model_scale
        time = np.broadcast_to(time, np.broadcast(time, compute).shape).astype(float)
        overhead = np.maximum(time - np.maximum(compute, memory), 0.0)
        return OpTime(compute + 0 * time, memory + 0 * time, overhead, time, compute > memory)

    @staticmethod
    def _attention_features(op: OpCost) -> dict[str, np.ndarray]:
        d = op.dims
        scores = np.asarray(d["batch"], dtype=float) * d["heads"] * np.asarray(d["q"], dtype=float) * d["kv_tokens"]
        return {"kv_bytes": op.kv_read_bytes, "flops": op.flops, "scores": scores}

    @staticmethod
    def _attention_fit(prof: DtypeProfile, label: str, head_dim: int):
        """The fit for 'decode' / 'multi' at the calibrated head_dim nearest (in log2) to the op's."""
        fits = {}
        for key, fit in prof.attention.items():
            name, _, d = key.partition("_d")
            fits.setdefault(name, []).append((abs(np.log2(int(d or head_dim)) - np.log2(head_dim)), key, fit))
        candidates = fits.get(label) or next(iter(fits.values()))
        return min(candidates, key=lambda c: (c[0], c[1]))[2]

    def _attention_s(self, prof: DtypeProfile, op: OpCost) -> np.ndarray:
        features = self._attention_features(op)
        out = {}
        for label in ("decode", "multi"):
            fit = self._attention_fit(prof, label, int(op.dims["head_dim"]))
            out[label] = fit.overhead_s + sum(fit.coefficients.get(n, 0.0) * v for n, v in features.items())
        return np.where(np.asarray(op.dims["q"]) <= 1, out["decode"], out["multi"])

    def get_step_overhead_s(self, num_layers: int) -> float:
        dtype = self._last_dtype or next(iter(self.models))
        prof = self.models[dtype].profile
        return max(num_layers * prof.layer_overhead_s + prof.step_overhead_s, 0.0)


# --- reading, writing, applying --------------------------------------------------------------------------------------


def load_profile(path: str | Path) -> HardwareSpec:
    """A measured profile from YAML; any problem (missing, truncated, corrupted, not a profile) is a SpecError."""
    from ..registry import load_spec_file

    path = Path(path)
    if not path.is_file():
        raise _spec_error(f"calibration profile not found: {path}")
    spec = load_spec_file(path, HardwareSpec)
    if spec.measured is None:
        raise _spec_error(f"{path}: not a measured profile (no 'measured' block); write one with 'rooflinesim calibrate'")
    return spec


def dump_profile_yaml(spec: HardwareSpec) -> str:
    data = spec.model_dump(mode="json", exclude_none=True)
    header = (
        "# Measured profile written by `rooflinesim calibrate`: the HardwareSpec schema with fitted effective\n"
        "# numbers, plus the `measured` block (provenance, fitted parameters, residuals, tables).\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, width=120)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write via a temporary file in the same folder + fsync + os.replace: the target is never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the result is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_profile(spec: HardwareSpec, path: str | Path) -> Path:
    """Validate (round-trip through the schema) and write a profile atomically."""
    if spec.measured is None:
        raise ValueError("write_profile needs a spec with a measured block")
    text = dump_profile_yaml(spec)
    HardwareSpec.model_validate(yaml.safe_load(text))  # never write what cannot be read back
    return write_text_atomic(path, text)


def _matches(hw: HardwareSpec, base: str) -> bool:
    keys = {hw.name.lower(), *(a.lower() for a in hw.aliases)}
    return base.lower() in keys


def apply_calibration(hw_spec: HardwareSpec, path: str | Path) -> tuple[HardwareSpec, list[str]]:
    """`--hw NAME --calibration FILE`: NAME's spec with FILE's measured block (its datasheet roofline is kept).

    Warns when the profile was measured on a different device than NAME.
    """
    profile = load_profile(path)
    measured = profile.measured
    warnings = []
    if not (_matches(hw_spec, measured.base_hardware) or hw_spec.name == profile.name
            or (hw_spec.measured is not None and hw_spec.measured.profile_name == measured.profile_name)):
        warnings.append(
            f"calibration profile {measured.profile_name} was measured on {measured.provenance.device_name} "
            f"({measured.base_hardware}), not on {hw_spec.name}: its measured times are applied as they are"
        )
    return hw_spec.model_copy(update={"measured": measured}), warnings


__all__ = [
    "MeasuredTiming", "LinearModel", "load_profile", "write_profile", "write_text_atomic", "apply_calibration",
    "dump_profile_yaml", "ATTENTION_KINDS",
]
