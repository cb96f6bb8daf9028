"""Quantised weights as (format, kernel): per-device defaults, the kernel's efficiency on the linears, by batch."""

import json
from pathlib import Path

import numpy as np
import pytest

from rooflinesim.cli import main
from rooflinesim.pricing.predict import predict_scenario
from rooflinesim.specs.registry import load_hardware
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.errors import InputError
from rooflinesim.timing.quant_kernels import KERNELS

# numbers of the bare-kernel model (hand-computed or checked against published rows before engine profiles):
# priced with engine "ideal" (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("ideal_engine")

#: a frozen copy of a measured CPU profile (tests never read the committed, recalibrated ones)
PROFILE = Path(__file__).resolve().parent / "data" / "profiles" / "cpu-intel-xeon-2c.yaml"
SHIPPED = ["a100", "h100", "h200", "b200", "l4", "l40s", "a10g", "rtx4090", "mi300x", "v5e", "cpu"]


def _tokens_per_s(hw="a100", batch=1, weight="int4", kernel=None, **kw):
    s = build_scenario(hw, "llama-3.1-8b", batch, 1024, weight_dtype=weight, quant_kernel=kernel, speculative=False,
                       **kw)
    return batch / predict_scenario(s).decode.step_time_s


def test_every_kernel_names_its_source_and_every_default_exists():
    for kernel in KERNELS.values():
        assert kernel.source and 0 < kernel.memory_efficiency <= 1 and 0 < kernel.compute_efficiency <= 1
    for name in SHIPPED:
        hw = load_hardware(name)
        for dtype, kernel in hw.quant_kernels.items():
            assert dtype in KERNELS[kernel].weight_dtypes, (name, dtype)
        if hw.quant_kernels:
            assert hw.sources.get("quant_kernels"), name


def test_defaults_resolved_in_the_scenario():
    assert build_scenario("a100", weight_dtype="int4", speculative=False).quant_kernel == "marlin"
    assert build_scenario("a100", weight_dtype="int8", speculative=False).quant_kernel == "int8-weight-only"
    assert build_scenario("h100", weight_dtype="fp8", speculative=False).quant_kernel == "generic"  # W8A8
    assert build_scenario("mi300x", weight_dtype="int4", speculative=False).quant_kernel == "generic"
    assert build_scenario("a100", speculative=False).quant_kernel is None  # bf16 weights


def test_linears_slow_down_by_the_kernel_efficiency_by_hand():
    """tinygemm scales both fractions of the linears by its efficiency (and keeps the device's overlap), so its linears
    take 1 / efficiency of the generic kernel's time (the per-kernel overhead aside)."""
    marlin = build_scenario("a100", "llama-3.1-8b", 1, 1024, weight_dtype="int4", quant_kernel="generic",
                            speculative=False)
    tiny = build_scenario("a100", "llama-3.1-8b", 1, 1024, weight_dtype="int4", quant_kernel="tinygemm",
                          speculative=False)
    rows = {r.name: r for r in predict_scenario(marlin).ops}
    tiny_rows = {r.name: r for r in predict_scenario(tiny).ops}
    overhead = 32 * load_hardware("a100").efficiency.kernel_overhead_s  # the per-kernel overhead does not scale
    efficiency = KERNELS["tinygemm"].memory_efficiency
    assert KERNELS["tinygemm"].compute_efficiency == efficiency
    assert tiny_rows["down_proj"].time_s - overhead == pytest.approx((rows["down_proj"].time_s - overhead) / efficiency)
    assert tiny_rows["attention"].time_s == pytest.approx(rows["attention"].time_s)  # not a quantised linear


def test_marlin_keeps_int4_speedup_to_batch_16_then_falls_off():
    """Marlin README: close to the ideal speedup up to 16-32 tokens; the roofline then makes int4 compute-bound and
    the speedup falls towards 1 (bf16 GEMMs near the ridge hide part of their loads, Marlin all: 1.2x left at 256)."""
    speedup = {b: _tokens_per_s(batch=b, kernel="marlin") / _tokens_per_s(batch=b, weight="bf16")
               for b in (1, 16, 64, 128, 256)}
    assert speedup[1] > 2.2 and speedup[16] > 0.85 * speedup[1]
    assert speedup[64] < 0.75 * speedup[1] and speedup[256] < speedup[128] < speedup[64] and speedup[256] < 1.3
    tiny = [_tokens_per_s(batch=b, kernel="tinygemm") / _tokens_per_s(batch=b, kernel="marlin") for b in (1, 64)]
    assert all(t < 1 for t in tiny)  # tinygemm never beats marlin


def test_bad_kernel_choices_are_one_line_errors():
    for kwargs in (dict(weight_dtype="int4", quant_kernel="nope"), dict(weight_dtype="int8", quant_kernel="marlin"),
                   dict(weight_dtype="bf16", quant_kernel="marlin")):
        with pytest.raises(InputError) as err:
            build_scenario("a100", speculative=False, **kwargs)
        assert "\n" not in str(err.value)


def test_cli_flag_and_json(capsys):
    assert main(["predict", "--json", "--weight-dtype", "int4", "--quant-kernel", "tinygemm", "--drafter",
                 "ngram"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["quant_kernel"] == "tinygemm"
    assert main(["predict", "--weight-dtype", "int4", "--quant-kernel", "bogus"]) == 2


def test_measured_profile_keeps_its_rule_and_says_so():
    s = build_scenario(str(PROFILE), "tiny-llama-123m", 1, 256, weight_dtype="int8",
                       activation_dtype="fp32", quant_kernel="int8-weight-only", speculative=False)
    assert any("not applied" in w for w in s.warnings)
    assert getattr(s.timing, "quant_kernel", None) is None
