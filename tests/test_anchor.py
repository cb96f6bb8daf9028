"""The machine-speed anchors: stored in a profile's provenance, compared by the measured validations."""

from __future__ import annotations

import pytest

from rooflinesim.specs.measured import Provenance

PROV = dict(device_kind="cpu", device_name="x", host_cpu="x", torch_version="x", dtypes=("fp32",), threads=2,
            date="d", command="c", duration_s=1.0, quick=True, drift=0.0, drift_flagged=False)


def test_provenance_takes_anchors_and_rejects_bad_ones():
    assert Provenance(**PROV).anchor_s is None  # profiles measured before anchors existed still load
    assert Provenance(**PROV, anchor_s={"gemm": 1e-3, "forward": 2e-4}).anchor_s["gemm"] == 1e-3  # before 'stream'
    assert Provenance(**PROV, anchor_s={"gemm": 1e-3, "forward": 2e-4, "stream": 6e-4}).anchor_s["stream"] == 6e-4
    for bad in ({"gemm": -1.0}, {"gemm": float("nan")}, {"gemv": 1e-3}, {"forward": 0.0}):
        with pytest.raises(ValueError):
            Provenance(**PROV, anchor_s=bad)


def test_compare_anchor_by_hand():
    torch = pytest.importorskip("torch")  # noqa: F841  (anchor.py builds torch models)
    from rooflinesim.calibrate.measure.anchor import compare_anchor, describe_anchor

    profile = {"gemm": 2.0e-3, "forward": 5.0e-4}
    same = compare_anchor(profile, [{"gemm": 2.1e-3, "forward": 4.8e-4}, {"gemm": 1.9e-3, "forward": 5.2e-4}])
    assert same["ratios"]["t0"]["gemm"] == pytest.approx(1.05) and same["ratios"]["t1"]["forward"] == pytest.approx(1.04)
    # medians over the run: gemm (1.05, 0.95) -> 1.00, forward (0.96, 1.04) -> 1.00
    assert same["median_ratio"] == pytest.approx({"gemm": 1.0, "forward": 1.0})
    assert same["max_abs_change"] == pytest.approx(0.0, abs=1e-12) and same["matches_profile"] is True
    assert "within" in describe_anchor(same)
    # one spike does not flag a run; a run slow for most of its timings does
    spike = compare_anchor(profile, [{"gemm": 2.0e-3, "forward": 5.0e-4}, {"gemm": 3.2e-3, "forward": 5.0e-4},
                                     {"gemm": 2.0e-3, "forward": 5.0e-4}])
    assert spike["matches_profile"] is True and "range 1.00-1.60" in describe_anchor(spike)
    slow = compare_anchor(profile, [{"gemm": 2.6e-3, "forward": 5.0e-4}, {"gemm": 2.6e-3, "forward": 5.0e-4}],
                          ["start", "end"])
    assert slow["max_abs_change"] == pytest.approx(0.30) and slow["matches_profile"] is False
    assert "OUTSIDE" in describe_anchor(slow) and "gemm 1.30x" in describe_anchor(slow)
    old = compare_anchor(None, [{"gemm": 2e-3, "forward": 5e-4}])
    assert old["matches_profile"] is None and "not checked" in describe_anchor(old)


def test_anchor_times_its_three_calls():
    torch = pytest.importorskip("torch")
    from rooflinesim.calibrate.measure.anchor import Anchor
    from rooflinesim.calibrate.measure.timers import select_device

    threads = torch.get_num_threads()
    try:
        timings = Anchor(select_device("cpu", 1)).time_s()
    finally:
        torch.set_num_threads(threads)
    assert set(timings) == {"gemm", "forward", "stream"}
    assert 1e-6 < timings["forward"] < 1.0 and 1e-5 < timings["gemm"] < 10.0
    # one GEMV streams a 16 MiB fp32 weight: between 1 TB/s and 0.5 GB/s on any machine that runs the tests
    assert 16 * 2**20 / 1e12 < timings["stream"] < 16 * 2**20 / 0.5e9
