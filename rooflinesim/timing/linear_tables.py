"""Per-call F.linear time from a profile's measured tables (numpy only, no torch).

The cold tables (`LinearModel`): time vs M per calibrated weight shape, interpolated log-log in M (above the last
measured M each further row adds its FLOPs at the fitted peak). A calibrated shape is priced from its own table (the
shapes of the models a profile was calibrated for, `calibrate --shapes-of`, and the generic ones); a shape that was
not calibrated takes the Gaussian-weighted (over log2 in/out features) ratio measured / fitted roofline of the
calibrated shapes. Where a profile found that a dimension's divisibility changes the kernel
(`linear_shape_alignment`, chosen by `choose_shape_alignment`), shapes of the other class weigh as if farther. The
cache-warm small-shape tables give how a cached GEMM's time grows with M (`get_warm_growth`). `MeasuredTiming`
(timing.measured) prices a step's linears with both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..specs.measured import LinearTable

#: Width (in log2 units of in/out features) of the Gaussian that weighs calibrated weight shapes.
SHAPE_KERNEL_LOG2 = 0.75
#: A weight dimension that is a multiple of the profile's alignment (elements) and one that is not run different
#: kernels. With fp32 on the 2-core Intel Xeon VM (MKL), a cold F.linear grew 1.2-2.0x from M = 1 to 4 when its in or
#: out features were a multiple of 256, 1.4-3.2x when neither was (324 shapes, docs/calibration.md section 3); in
#: bf16 it grew 0.85-1.4x either way. A calibrated shape of the other class, per dimension, counts as this much
#: farther (squared log2 units; at the kernel's width it then weighs 0.03 of a same-class shape at the same size).
SHAPE_CLASS_PENALTY_LOG2SQ = 4.0
SHAPE_ALIGNMENT_CANDIDATES = (128, 256, 512)
#: an alignment is kept only where it lowers the tables' own leave-one-shape-out error at SMALL_M by this fraction.
#: Tables with no classes and +-5 % random noise per point gained at most 9 % over 200 draws (tests/
#: test_shape_classes.py); the full fp32 profiles of the Intel Xeon gained 15-25 %
SHAPE_ALIGNMENT_MIN_GAIN = 0.12
#: the rows where the kernel a shape gets differs most (decode batches; M = 1 is a GEMV for every shape)
SMALL_M = (2.0, 16.0)

@dataclass(frozen=True)
class _Table:
    k: int
    n: int
    log_m: np.ndarray
    log_t: np.ndarray
    exact_only: bool = False  # priced for its own shape only (`LinearTable.exact_only`)

    @classmethod
    def from_spec(cls, table: LinearTable) -> "_Table":
        return cls(table.in_features, table.out_features, np.log(np.asarray(table.m, dtype=float)),
                   np.log(np.asarray(table.time_s, dtype=float)), table.exact_only)

    def time_s(self, m, row_s: float) -> np.ndarray:
        """Log-log interpolation in M; constant below the first M. Above the last measured M every further row adds
        `row_s` (its FLOPs at the fitted peak): the call already streams its weights once, whatever M, so a table
        that stops where the call is still bound by weight streaming (a budget plan caps the FLOPs per call) is not
        scaled up in proportion to M from there; far above, the time grows as the compute-bound roofline's."""
        m = np.maximum(np.asarray(m, dtype=float), 1.0)
        lm = np.log(m)
        inside = np.exp(np.interp(lm, self.log_m, self.log_t))
        above = np.exp(self.log_t[-1]) + (m - np.exp(self.log_m[-1])) * row_s
        return np.where(lm > self.log_m[-1], above, inside)


@dataclass(frozen=True)
class LinearModel:
    """Per-call F.linear time for any (M, K, N) of one dtype from the calibrated tables."""

    tables: tuple[_Table, ...]
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    overhead_s: float
    weight_bytes_per_element: float
    kernel_log2: float = SHAPE_KERNEL_LOG2
    #: 0: shapes blend by size alone; else `SHAPE_CLASS_PENALTY_LOG2SQ` per dimension of the other class
    shape_alignment: int = 0
    #: (K, N) -> `get_shape_weights`, filled as shapes are priced (not an input: `replace` starts a new one)
    _weights_by_shape: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_tables(cls, tables, peak_flops_per_s: float, bandwidth_bytes_per_s: float, overhead_s: float,
                    weight_bytes_per_element: float, shape_alignment: int = 0) -> "LinearModel":
        """From a profile's LinearTable records and its fitted roofline."""
        return cls(tuple(_Table.from_spec(t) for t in tables), peak_flops_per_s, bandwidth_bytes_per_s, overhead_s,
                   weight_bytes_per_element, shape_alignment=shape_alignment)

    def roofline_s(self, m, k, n) -> np.ndarray:
        m = np.asarray(m, dtype=float)
        flops = 2.0 * m * k * n
        weight = k * n * self.weight_bytes_per_element
        return np.maximum(flops / self.peak_flops_per_s, weight / self.bandwidth_bytes_per_s) + self.overhead_s

    def get_row_s(self, k, n) -> float:
        """What one more row of x costs a (K, N) weight far above the measured M: its FLOPs at the fitted peak."""
        return 2.0 * k * n / self.peak_flops_per_s

    def get_shape_weights(self, k, n) -> np.ndarray:
        """Gaussian weight of each calibrated shape for a (K, N) weight (worked out once per shape; read-only)."""
        key = (k, n) if type(k) in (int, float) and type(n) in (int, float) else None
        weights = self._weights_by_shape.get(key) if key is not None else None
        if weights is None:
            d2 = np.array([(np.log2(k) - np.log2(t.k)) ** 2 + (np.log2(n) - np.log2(t.n)) ** 2 for t in self.tables])
            if self.shape_alignment:
                a = self.shape_alignment
                d2 = d2 + SHAPE_CLASS_PENALTY_LOG2SQ * np.array(
                    [((k % a == 0) != (t.k % a == 0)) + ((n % a == 0) != (t.n % a == 0)) for t in self.tables])
            weights = np.exp(-d2 / (2 * self.kernel_log2**2))
            if key is not None:
                weights.setflags(write=False)
                self._weights_by_shape[key] = weights
        return weights

    def time_s(self, m, k, n) -> np.ndarray:
        m = np.asarray(m, dtype=float)
        base = self.roofline_s(m, k, n)
        if not self.tables:
            return base
        for t in self.tables:  # a calibrated shape is priced from its own table, not blended with its neighbours
            if (t.k, t.n) == (k, n):
                return t.time_s(m, self.get_row_s(k, n)) * np.ones_like(base)
        blended = [not t.exact_only for t in self.tables]
        if not any(blended):
            return base
        w = self.get_shape_weights(k, n)[blended]
        if w.sum() < 1e-12:  # far from every calibrated shape: fall back to the nearest one's ratio
            w = (w == w.max()).astype(float)
        log_ratios = [np.log(t.time_s(m, self.get_row_s(t.k, t.n))) - np.log(self.roofline_s(m, t.k, t.n))
                      for t, b in zip(self.tables, blended) if b]
        ratio = sum(wi * lr for wi, lr in zip(w, log_ratios)) / w.sum()
        return base * np.exp(ratio)


def get_shape_loo_error(linear: LinearModel) -> float:
    """Median |relative error| of each calibrated shape's table predicted from the other shapes alone (leave one
    shape out): how well the tables price a weight shape that was not calibrated."""
    errors = []
    blended = tuple(t for t in linear.tables if not t.exact_only)
    linear = replace(linear, tables=blended)
    for i, table in enumerate(blended):
        others = replace(linear, tables=blended[:i] + blended[i + 1:])
        if not others.tables:
            continue
        m = np.exp(table.log_m)
        errors.extend(np.abs(others.time_s(m, table.k, table.n) / np.exp(table.log_t) - 1.0))
    return float(np.median(errors)) if errors else 0.0


def get_small_m_loo_error(linear: LinearModel) -> float:
    """Mean |relative error| at the tables' rows within SMALL_M of each calibrated shape predicted from the other
    shapes alone: how well the blend transfers the small-M growth, where kernels differ by shape class."""
    errors = []
    blended = tuple(t for t in linear.tables if not t.exact_only)
    linear = replace(linear, tables=blended)
    for i, table in enumerate(blended):
        m = np.exp(table.log_m)
        rows = (m >= SMALL_M[0]) & (m <= SMALL_M[1])
        if len(blended) < 2 or not rows.any():
            continue
        others = replace(linear, tables=blended[:i] + blended[i + 1:])
        errors.extend(np.abs(others.time_s(m[rows], table.k, table.n) / np.exp(table.log_t[rows]) - 1.0))
    return float(np.mean(errors)) if errors else 0.0


def choose_shape_alignment(linear: LinearModel) -> tuple[int, float, float]:
    """The alignment class (0: none) that best predicts the calibrated shapes from each other at small M, and that
    error without and with it: (alignment, error by size alone, error with the alignment)."""
    plain = get_small_m_loo_error(replace(linear, shape_alignment=0))
    best, best_error = 0, plain
    for alignment in SHAPE_ALIGNMENT_CANDIDATES:
        error = get_small_m_loo_error(replace(linear, shape_alignment=alignment))
        if error < best_error:
            best, best_error = alignment, error
    if best_error > (1.0 - SHAPE_ALIGNMENT_MIN_GAIN) * plain:
        return 0, plain, plain
    return best, plain, best_error


def get_warm_growth(warm: LinearModel, m, k, n) -> np.ndarray:
    """t(M) / t(1) of a cache-warm F.linear of weight (K, N): the warm tables' growth from one row (log-log in M),
    Gaussian-weighted over their shapes as the cold tables are (the nearest shape's where none is near)."""
    w = warm.get_shape_weights(k, n)
    if w.sum() < 1e-12:
        w = (w == w.max()).astype(float)
    m = np.asarray(m, dtype=float)
    logs = [np.log(t.time_s(m, warm.get_row_s(t.k, t.n))) - np.log(t.time_s(1.0, warm.get_row_s(t.k, t.n)))
            for t in warm.tables]
    return np.exp(sum(wi * lg for wi, lg in zip(w, logs)) / w.sum())


__all__ = ["LinearModel", "SHAPE_KERNEL_LOG2", "choose_shape_alignment", "get_shape_loo_error", "get_small_m_loo_error",
           "get_warm_growth"]
