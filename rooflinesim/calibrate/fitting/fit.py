"""Least-squares fits of the calibration measurements (numpy + scipy only; no torch).

* `fit_roofline`: t = max(F / P, B / BW) + c over many (flops, bytes, time) points -> effective peak P, bandwidth BW
  and per-call overhead c, fitted on relative (log) residuals with a robust loss.
* `fit_affine`: t = c + sum_j a_j x_j with every coefficient >= 0, on relative residuals (each point weighs by 1 / t):
  used for attention (KV bytes, FLOPs, score elements) and the elementwise op families (bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, lsq_linear


@dataclass(frozen=True)
class RooflineFit:
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    overhead_s: float
    median_abs_rel_residual: float

    def predict(self, flops, bytes_) -> np.ndarray:
        return np.maximum(np.asarray(flops) / self.peak_flops_per_s,
                          np.asarray(bytes_) / self.bandwidth_bytes_per_s) + self.overhead_s


def _median_abs_rel(pred, t) -> float:
    t = np.asarray(t, dtype=float)
    return float(np.median(np.abs(np.asarray(pred) - t) / t)) if t.size else 0.0


def fit_roofline(flops, bytes_, time_s, peak_guess=None, bandwidth_guess=None, peak_bounds=None) -> RooflineFit:
    """Fit max(F/P, B/BW) + c to measured times (log residuals, soft-L1 loss, log-parametrised, c >= 0).
    `peak_bounds` (low, high) FLOP/s: a prior on P (from the device probe), which the fit cannot leave."""
    f, b, t = (np.asarray(x, dtype=float).ravel() for x in (flops, bytes_, time_s))
    if not (f.size == b.size == t.size) or t.size < 3:
        raise ValueError("fit_roofline needs at least 3 points of flops, bytes and time")
    p0 = peak_guess or float(np.max(f / t))
    bw0 = bandwidth_guess or float(np.max(b / t))
    c0 = max(float(np.min(t)) * 0.1, 1e-7)

    def model(theta):
        p, bw, c = np.exp(theta)
        return np.maximum(f / p, b / bw) + c

    def residual(theta):
        return np.log(model(theta)) - np.log(t)

    if peak_bounds is not None:
        p0 = min(max(p0, peak_bounds[0] * 1.001), peak_bounds[1] * 0.999)
    theta0 = np.log([p0, bw0, c0])
    lower = theta0 - np.array([8.0, 8.0, 20.0])
    upper = theta0 + np.array([8.0, 8.0, 8.0])
    if peak_bounds is not None:
        lower[0], upper[0] = np.log(peak_bounds[0]), np.log(peak_bounds[1])
    sol = least_squares(residual, theta0, bounds=(lower, upper), loss="soft_l1", f_scale=0.05)
    p, bw, c = np.exp(sol.x)
    return RooflineFit(float(p), float(bw), float(c), _median_abs_rel(model(sol.x), t))


@dataclass(frozen=True)
class AffineResult:
    overhead_s: float
    coefficients: dict[str, float]
    median_abs_rel_residual: float
    points: int

    def predict(self, features: dict[str, np.ndarray]) -> np.ndarray:
        out = self.overhead_s
        for name, a in self.coefficients.items():
            out = out + a * np.asarray(features[name], dtype=float)
        return np.asarray(out, dtype=float)


def fit_affine(features: dict[str, np.ndarray], time_s, bounds: dict[str, tuple[float, float]] | None = None
               ) -> AffineResult:
    """t = c + sum a_j x_j, all >= 0, minimising relative residuals (rows scaled by 1 / t); `bounds`: a (low, high)
    range for named coefficients (low == high fixes one)."""
    t = np.asarray(time_s, dtype=float).ravel()
    names = list(features)
    columns = [np.ones_like(t)] + [np.asarray(features[n], dtype=float).ravel() for n in names]
    a = np.stack(columns, axis=1)
    scale = np.max(np.abs(a), axis=0)
    scale[scale == 0] = 1.0
    weighted = (a / scale) / t[:, None]
    lower, upper = np.zeros(len(columns)), np.full(len(columns), np.inf)
    target = np.ones_like(t)
    fixed = {}
    for name, (lo, hi) in (bounds or {}).items():
        j = names.index(name) + 1
        if hi <= lo:  # a fixed coefficient leaves the fit: its part of each time is taken off the target
            fixed[j] = lo
            target = target - lo * a[:, j] / t
        else:
            lower[j], upper[j] = lo * scale[j], hi * scale[j]
    free = [j for j in range(len(columns)) if j not in fixed]
    sol = lsq_linear(weighted[:, free], target, bounds=(lower[free], upper[free]), method="bvls")
    x = np.zeros(len(columns))
    x[free] = sol.x / scale[free]
    for j, value in fixed.items():
        x[j] = value
    # bvls can leave a coefficient at its bound a rounding error below it (-1e-23): times are never priced with a
    # negative coefficient, and the profile schema rejects one
    params = np.maximum(x, 0.0)
    result = AffineResult(float(params[0]), {n: float(v) for n, v in zip(names, params[1:])}, 0.0, int(t.size))
    pred = result.predict({n: features[n] for n in names})
    return AffineResult(result.overhead_s, result.coefficients, _median_abs_rel(pred, t), int(t.size))
