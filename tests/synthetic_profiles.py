"""Synthetic measured profiles for the calibration tests: known linear rooflines (peak P_TRUE, bandwidth BW_TRUE,
per-call overhead C_TRUE), so a fit or a price can be checked against the numbers that made them."""

from __future__ import annotations

from rooflinesim.specs.hardware import Efficiency, HardwareSpec
from rooflinesim.specs.measured import AffineFit, CacheReuse, DtypeProfile, LinearTable, MeasuredProfile, Provenance

# --- synthetic profiles ----------------------------------------------------------------------------------------------

P_TRUE, BW_TRUE, C_TRUE = 400e9, 20e9, 20e-6


def linear_time(m, k, n, wb=4.0):
    return max(2.0 * m * k * n / P_TRUE, k * n * wb / BW_TRUE) + C_TRUE


def make_profile(dtypes=("fp32",), shapes=((768, 768), (1536, 1536), (768, 3072)), name="synthetic") -> HardwareSpec:
    ms = (1, 2, 4, 8, 16, 64, 256, 1024)
    profiles = {}
    for d in dtypes:
        tables = tuple(
            LinearTable(in_features=k, out_features=n, m=ms, time_s=tuple(linear_time(m, k, n) for m in ms),
                        spread=tuple(0.02 for _ in ms))
            for k, n in shapes
        )
        fit = AffineFit(overhead_s=10e-6, coefficients={"kv_bytes": 1 / 10e9, "flops": 0.0, "scores": 0.0},
                        median_abs_rel_residual=0.01, points=10)
        elementwise = {f: AffineFit(overhead_s=2e-6, coefficients={"bytes": 1 / 30e9}, median_abs_rel_residual=0.0,
                                    points=4)
                       for f in ("norm", "rope", "mlp_act", "residual", "kv_cache_write", "embedding")}
        profiles[d] = DtypeProfile(
            gemv_bandwidth_bytes_per_s=BW_TRUE, copy_bandwidth_bytes_per_s=25e9, peak_flops_per_s=P_TRUE,
            linear_overhead_s=C_TRUE, linear=tables, attention={"decode_d64": fit, "multi_d64": fit},
            elementwise=elementwise, layer_overhead_s=100e-6, step_overhead_s=50e-6, residuals={"x": 0.1},
        )
    prov = Provenance(device_kind="cpu", device_name="Test CPU (2 threads)", host_cpu="Test CPU", torch_version="0",
                      dtypes=tuple(dtypes), threads=2, date="2026-01-01T00:00:00+00:00", command="test",
                      duration_s=1.0, quick=True, drift=0.01, drift_flagged=False, reference_s=(1e-3, 1e-3))
    return HardwareSpec(
        schema_version=1, name="Test CPU, measured", aliases=(name,), kind="cpu", vendor="Test",
        peak_flops_per_s={d: P_TRUE for d in dtypes}, memory_bandwidth_bytes_per_s=BW_TRUE,
        memory_capacity_bytes=16e9, last_level_cache_bytes=32 * 2**20,
        efficiency=Efficiency(memory_fraction=1.0, compute_fraction=1.0, kernel_overhead_s=C_TRUE),
        sources={"peak_flops_per_s": "measured by rooflinesim calibrate on Test CPU",
                 "memory_bandwidth_bytes_per_s": "measured by rooflinesim calibrate on Test CPU",
                 "memory_capacity_bytes": "OS"},
        measured=MeasuredProfile(profile_name=name, base_hardware="cpu-generic", provenance=prov, dtypes=profiles),
    )


WARM_BW = 3 * BW_TRUE


def with_cache(hw, sizes, speedups):
    """The profile with a cache-reuse curve on its fp32 part (warm bandwidth WARM_BW)."""
    prof = hw.measured.dtypes["fp32"].model_copy(update={"cache_reuse": CacheReuse(
        working_set_bytes=sizes, speedup=speedups, warm_bandwidth_bytes_per_s=WARM_BW)})
    return hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {"fp32": prof}})})
