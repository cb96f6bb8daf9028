"""CPU smoke test of the whole calibration loop: measure (tiny plan), write, read back, predict, validate.

Sane ranges only, never a tight error bound: this runs on a noisy 2-core CI machine. The one comparative check is
the issue's: the calibrated model beats the uncalibrated roofline on the hold-out decoder's step times.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from rooflinesim.calibrate.measure.bench import run_calibration  # noqa: E402
from rooflinesim.calibrate.fitting.plan import Plan  # noqa: E402
from rooflinesim.specs.profiles import load_profile, write_profile  # noqa: E402
from rooflinesim.calibrate.measure.timers import select_device  # noqa: E402
from rooflinesim.calibrate.validators.validate import plot_report, run_validation, write_report  # noqa: E402
from rooflinesim.specs.validation_report import load_validation_report  # noqa: E402


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrate")
    device = select_device("cpu", threads=2)
    plan = Plan.make(True, ("fp32",), device, tiny=True)
    spec = run_calibration(device, ("fp32",), True, "pytest smoke", progress=False, plan=plan)
    path = write_profile(spec, out / f"{device.slug}.yaml")
    report = run_validation(str(path), device, "fp32", tiny=True, progress=False)
    json_path = write_report(report, out, "smoke-validation")
    # write_report writes only the JSON; the chart is drawn from the written file
    png_path = plot_report(json_path, json_path.with_suffix(".png"))
    return device, path, report, (json_path, png_path)


def test_profile_is_written_and_reads_back(smoke):
    device, path, _, _ = smoke
    spec = load_profile(path)
    prov = spec.measured.provenance
    assert prov.device_kind == "cpu" and prov.threads == 2 and prov.dtypes == ("fp32",)
    assert prov.torch_version == torch.__version__ and prov.date
    # start, about every eighth of the jobs (calibrate.drift), the middle of the last pass, end (+ one after a re-time)
    assert len(prov.reference_s) >= 3 and all(r > 0 for r in prov.reference_s)
    assert set(prov.anchor_s) == {"gemm", "forward", "stream"} and all(v > 0 for v in prov.anchor_s.values())
    assert "Machine-speed anchors" in prov.notes and "Implementation costs" in prov.notes
    fp32 = spec.measured.dtypes["fp32"]
    # sane ranges for any CPU that can run the tests: 0.5-2000 GB/s streaming, 1 GFLOP/s-100 TFLOP/s
    assert 0.5e9 < fp32.gemv_bandwidth_bytes_per_s < 2e12
    assert 0.5e9 < fp32.copy_bandwidth_bytes_per_s < 2e12
    assert 1e9 < fp32.peak_flops_per_s < 1e14
    assert fp32.linear and fp32.attention and fp32.elementwise
    assert {"sample", "accept_rule"} <= set(fp32.elementwise)  # the sampler benchmark ran and was fitted
    # what other implementations do (ops.implementation_ops): a concatenating KV cache and per-call dispatch
    assert fp32.kv_concat is not None and len(fp32.kv_concat.allocation_bytes) >= 2
    assert fp32.dispatch_s is not None and 0 < fp32.dispatch_s < 1e-3
    assert not list(path.parent.glob(".*.tmp"))  # the atomic writer left no temporary file


def test_predict_cli_uses_the_profile(smoke):
    _, path, _, _ = smoke
    out = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "predict", "--hw", str(path), "--model",
                          "tiny-llama-123m", "--weight-dtype", "fp32", "--ctx", "256", "--no-speculation", "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["hardware"]["calibration_profile"] == load_profile(path).measured.profile_name
    assert 1e-4 < data["decode"]["step_time_s"] < 10
    assert data["decode"]["step_time_s"] != data["decode"]["roofline_step_time_s"]


def test_validation_report_is_sane_and_calibrated_beats_roofline(smoke):
    _, _, report, paths = smoke
    assert {r["kind"] for r in report["configs"]} == {"decode", "verify", "draft"}
    for row in report["configs"]:
        assert row["measured_s"] > 0 and row["predicted_s"] > 0 and row["roofline_s"] > 0
        assert 0.2 < row["predicted_s"] / row["measured_s"] < 5, row
    for row in report["speculative"]:
        assert 0.05 < row["measured_speedup"] < 5 and 0.05 < row["predicted_speedup"] < 5
    summary = report["summary"]
    assert summary["calibrated"]["median_ape"] < summary["roofline"]["median_ape"]
    json_path, png_path = paths
    assert json.loads(json_path.read_text())["summary"] == json.loads(json.dumps(summary))
    assert load_validation_report(json_path).summary.calibrated.n == len(report["configs"])
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
