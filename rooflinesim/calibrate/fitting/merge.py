"""`rooflinesim calibrate --merge A.yaml B.yaml --out C.yaml`: profiles of the same device pooled into one (numpy and
pydantic only; no torch, nothing is measured).

How each part is pooled, per dtype (a dtype only one profile measured is kept as it is):

* linear tables: per weight shape and M, the median of the profiles' times (and of their spreads); an M only one
  profile measured keeps its time;
* attention and elementwise fits: coefficients, overhead and residual averaged weighted by the points each was
  fitted on (the points add up);
* effective peaks, bandwidths, overheads, in-model scale and the other residuals: averaged weighted by the runs each
  profile already pools; the cache-reuse curve likewise where both measured the same working sets;
* `runs` adds up (the per-call noise and drift terms of the prediction interval shrink as 1 / sqrt(runs)); the drift
  is recomputed over every reference measurement of every run, so a device that moved between the runs says so;
* provenance lists every run (date, command, duration, drift) in its notes.

Profiles of different devices (device kind, name or thread count) are refused with one line.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

from ...specs.profiles import load_profile, write_profile
from ...specs.measured import AffineFit, CacheReuse, CopyTable, DtypeProfile, LinearTable
from ...specs.hardware import HardwareSpec
from ...errors import InputError
from ...timing.linear_tables import LinearModel, choose_shape_alignment, get_shape_loo_error
from ...units import get_dtype_bytes
from .measurements import DRIFT_FLAG


def _weighted(values, weights) -> float:
    return float(np.average(np.asarray(values, dtype=float), weights=np.asarray(weights, dtype=float)))


def _merge_tables(profiles: list[DtypeProfile], field: str = "linear") -> tuple[LinearTable, ...]:
    by_shape: dict[tuple[int, int], dict[int, list[tuple[float, float]]]] = {}
    exact_only: set[tuple[int, int]] = set()
    for prof in profiles:
        for table in getattr(prof, field):
            if table.exact_only:
                exact_only.add((table.in_features, table.out_features))
            rows = by_shape.setdefault((table.in_features, table.out_features), defaultdict(list))
            for m, t, s in zip(table.m, table.time_s, table.spread):
                rows[m].append((t, s))
    tables = []
    for (k, n), rows in by_shape.items():
        ms = sorted(rows)
        tables.append(LinearTable(in_features=k, out_features=n, m=tuple(ms),
                                  time_s=tuple(float(np.median([t for t, _ in rows[m]])) for m in ms),
                                  spread=tuple(round(float(np.median([s for _, s in rows[m]])), 4) for m in ms),
                                  exact_only=(k, n) in exact_only))
    return tuple(tables)


def _merge_fits(fits: list[dict[str, AffineFit]]) -> dict[str, AffineFit]:
    merged = {}
    for key in dict.fromkeys(k for f in fits for k in f):
        group = [f[key] for f in fits if key in f]
        weights = [max(g.points, 1) for g in group]
        names = dict.fromkeys(n for g in group for n in g.coefficients)
        merged[key] = AffineFit(
            overhead_s=_weighted([g.overhead_s for g in group], weights),
            coefficients={n: _weighted([g.coefficients.get(n, 0.0) for g in group], weights) for n in names},
            median_abs_rel_residual=_weighted([g.median_abs_rel_residual for g in group], weights),
            points=int(sum(g.points for g in group)))
    return merged


def _same_grid(profiles: list[DtypeProfile], runs: list[int], table: str, grid: str) -> tuple[list, list]:
    """The profiles' `table`s measured on the same `grid` as the first one that has it, and their runs (the
    weights of an average); ([], []) when none has it."""
    tables = [(getattr(p, table), r) for p, r in zip(profiles, runs) if getattr(p, table) is not None]
    if not tables:
        return [], []
    first = getattr(tables[0][0], grid)
    same = [(t, r) for t, r in tables if getattr(t, grid) == first]
    return [t for t, _ in same], [r for _, r in same]


def _merge_cache(profiles: list[DtypeProfile], runs: list[int]) -> CacheReuse | None:
    curves, weights = _same_grid(profiles, runs, "cache_reuse", "working_set_bytes")
    if not curves:
        return None
    first = curves[0]
    same = list(zip(curves, weights))
    curves_speedup = np.array([c.speedup for c, _ in same])
    speedup = np.average(curves_speedup, axis=0, weights=weights)
    # how far the curve moves: within each run (its repeated timings) and between the runs' curves; a step priced
    # later meets the machine in one state, so pooling runs does not narrow it
    within = np.average(np.array([c.speedup_sigma or (0.0,) * len(c.speedup) for c, _ in same]) ** 2, axis=0,
                        weights=weights)
    between = np.average((curves_speedup - speedup) ** 2, axis=0, weights=weights) * len(same) / max(len(same) - 1, 1)
    sigma = np.sqrt(within + between)
    return CacheReuse(working_set_bytes=first.working_set_bytes, speedup=tuple(float(x) for x in speedup),
                      warm_bandwidth_bytes_per_s=_weighted([c.warm_bandwidth_bytes_per_s for c, _ in same], weights),
                      speedup_sigma=tuple(float(min(x, 20.0)) for x in sigma)
                      if len(same) > 1 or any(c.speedup_sigma for c, _ in same) else ())


def merge_dtype(dtype: str, profiles: list[DtypeProfile]) -> DtypeProfile:
    """One dtype's profiles pooled (see the module docstring)."""
    runs = [p.runs or 1 for p in profiles]

    def avg(name: str) -> float:
        return _weighted([getattr(p, name) for p in profiles], runs)

    residuals = {}
    for key in dict.fromkeys(k for p in profiles for k in p.residuals):
        have = [(p.residuals[key], r) for p, r in zip(profiles, runs) if key in p.residuals]
        residuals[key] = _weighted([v for v, _ in have], [r for _, r in have])
    tables = _merge_tables(profiles)
    # the shape-interpolation error and the shape classes are properties of the pooled tables: recomputed
    linear = LinearModel.from_tables(tables, avg("peak_flops_per_s"), avg("gemv_bandwidth_bytes_per_s"),
                                     avg("linear_overhead_s"), get_dtype_bytes(dtype))
    alignment, by_size, by_class = choose_shape_alignment(linear)
    residuals.update(linear_small_m_loo_by_size=by_size, linear_small_m_loo_by_class=by_class,
                     linear_shape_loo_median_abs_rel=get_shape_loo_error(replace(linear, shape_alignment=alignment)))
    return DtypeProfile(
        gemv_bandwidth_bytes_per_s=avg("gemv_bandwidth_bytes_per_s"),
        copy_bandwidth_bytes_per_s=avg("copy_bandwidth_bytes_per_s"), peak_flops_per_s=avg("peak_flops_per_s"),
        linear_overhead_s=avg("linear_overhead_s"), linear=tables, linear_shape_alignment=alignment,
        attention=_merge_fits([p.attention for p in profiles]),
        elementwise=_merge_fits([p.elementwise for p in profiles]),
        layer_overhead_s=avg("layer_overhead_s"), step_overhead_s=avg("step_overhead_s"),
        cache_reuse=_merge_cache(profiles, runs), in_model_scale=avg("in_model_scale"),
        in_model_layer_overhead_s=avg("in_model_layer_overhead_s"), residuals=residuals,
        warm_linear=_merge_tables(profiles, "warm_linear"), dispatch_s=_merge_optional(profiles, runs, "dispatch_s"),
        kv_concat=_merge_copy(profiles, runs), decoder_steps=tuple(s for p in profiles for s in p.decoder_steps),
        runs=sum(runs))


def _merge_copy(profiles: list[DtypeProfile], runs: list[int]) -> CopyTable | None:
    """The concatenation tables of the runs that measured the same sizes as the first one, times averaged."""
    tables, weights = _same_grid(profiles, runs, "kv_concat", "allocation_bytes")
    if not tables:
        return None
    first = tables[0]
    same = list(zip(tables, weights))
    mean = lambda name: tuple(float(x) for x in np.average(np.array([getattr(t, name) for t, _ in same]), axis=0,
                                                           weights=weights))
    return CopyTable(allocation_bytes=first.allocation_bytes, bytes_moved=first.bytes_moved, time_s=mean("time_s"),
                     spread=mean("spread"))


def _merge_optional(profiles: list[DtypeProfile], runs: list[int], name: str) -> float | None:
    """A field older profiles lack, averaged over the runs that have it (None when none has)."""
    have = [(getattr(p, name), r) for p, r in zip(profiles, runs) if getattr(p, name) is not None]
    return _weighted([v for v, _ in have], [r for _, r in have]) if have else None


def _merge_anchors(provs) -> dict[str, float] | None:
    """The runs' machine-speed anchors averaged (each run's is already the mean of its start and end); None when a
    run has none (a profile measured before anchors existed)."""
    if any(not p.anchor_s for p in provs):
        return None
    names = [name for name in provs[0].anchor_s if all(name in p.anchor_s for p in provs)]  # older runs lack some
    return {name: float(np.mean([p.anchor_s[name] for p in provs])) for name in names} or None


def _device(spec: HardwareSpec) -> tuple:
    prov = spec.measured.provenance
    return prov.device_kind, prov.device_name, prov.threads


def merge_profiles(specs: list[HardwareSpec], names: list[str] | None = None) -> HardwareSpec:
    """Profiles of one device pooled into one; an InputError (one line) when they describe different devices."""
    names = names or [s.measured.profile_name for s in specs]
    first = specs[0]
    for spec, name in zip(specs[1:], names[1:]):
        if _device(spec) != _device(first):
            raise InputError(f"cannot merge {name} ({spec.measured.provenance.device_name}, "
                             f"{spec.measured.provenance.threads} threads) into {names[0]} "
                             f"({first.measured.provenance.device_name}, {first.measured.provenance.threads} "
                             "threads): profiles of different devices")
    dtypes = list(dict.fromkeys(d for s in specs for d in s.measured.dtypes))
    merged = {d: merge_dtype(d, [s.measured.dtypes[d] for s in specs if d in s.measured.dtypes]) for d in dtypes}
    provs = [s.measured.provenance for s in specs]
    reference = tuple(r for p in provs for r in p.reference_s)
    drift = float((max(reference) - min(reference)) / np.median(reference)) if reference else max(p.drift for p in provs)
    runs = "; ".join(f"{n}: {p.date}, '{p.command}', {p.duration_s:.0f} s, drift {p.drift:.1%}"
                     for n, p in zip(names, provs))
    prov = provs[0].model_copy(update={
        "torch_version": " + ".join(dict.fromkeys(p.torch_version for p in provs)),
        "dtypes": tuple(dtypes), "date": max(p.date for p in provs),
        "command": "rooflinesim calibrate --merge " + " ".join(names),
        "duration_s": float(sum(p.duration_s for p in provs)), "quick": any(p.quick for p in provs),
        "drift": round(drift, 4), "drift_flagged": drift > DRIFT_FLAG, "reference_s": reference,
        "budget_s": None, "planned_s": None, "anchor_s": _merge_anchors(provs),
        "shapes_of": tuple(dict.fromkeys(name for p in provs for name in p.shapes_of)),
        "notes": f"merged from {len(specs)} runs ({runs}). " + provs[0].notes,
    })
    measured = first.measured.model_copy(update={"provenance": prov, "dtypes": merged})
    return first.model_copy(update={
        "peak_flops_per_s": {d: p.peak_flops_per_s for d, p in merged.items()},
        "memory_bandwidth_bytes_per_s": max(p.gemv_bandwidth_bytes_per_s for p in merged.values()),
        "measured": measured,
    })


def merge_profile_files(paths, out) -> HardwareSpec:
    """Load, merge and write (atomically) profiles of one device."""
    specs = [load_profile(p) for p in paths]
    spec = merge_profiles(specs, [Path(p).name for p in paths])
    spec = HardwareSpec.model_validate(spec.model_dump())  # every merged number goes through the schema
    write_profile(spec, out)
    return spec
