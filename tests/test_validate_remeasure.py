"""`validate --family ... --remeasure`: every step measured a second time one pass later, and how far the two
measurements lie apart (the machine's floor under the prediction's errors)."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rooflinesim.calibrate.external import external_validate as X  # noqa: E402
from rooflinesim.calibrate.fitting.plan import synthetic_spec  # noqa: E402

PROFILE = str(Path(__file__).resolve().parent / "data" / "profiles" / "cpu-amd-epyc-2c-quick.yaml")


def row(model, batch, measured_s, predicted_s=1.0, **extra):
    return {"family": "gptfast", "model": model, "batch": batch, "context_tokens": 256, "new_tokens": 1,
            "measured_s": measured_s, "predicted_s": predicted_s, "roofline_s": 0.5 * predicted_s, **extra}


def test_repeatability_by_hand():
    rows = [row("a", 1, 0.010, remeasured_s=0.011), row("a", 4, 0.020, remeasured_s=0.017),
            row("b", 1, 0.040, remeasured_s=0.040)]
    rep = X.get_repeatability(rows)
    # |11/10 - 1| = 0.10, |17/20 - 1| = 0.15, 0: median 0.10; p90 between 0.10 and 0.15 at 0.8 of the way
    assert rep["n"] == 3
    assert rep["median_ape"] == pytest.approx(0.10)
    assert rep["p90_ape"] == pytest.approx(0.14)


def test_second_pass_pairs_by_step_not_by_position():
    first = [row("a", 1, 0.010), row("a", 4, 0.020), row("b", 1, 0.040)]
    second = [row("b", 1, 0.044), row("a", 4, 0.018), row("a", 1, 0.012)]
    paired = X.pair_remeasured(first, second)
    assert [r["measured_s"] for r in paired] == [0.010, 0.020, 0.040]
    assert [r["remeasured_s"] for r in paired] == [0.012, 0.018, 0.044]
    with pytest.raises(RuntimeError, match="other steps"):
        X.pair_remeasured(first, second[:2] + [row("c", 1, 0.012)])
    with pytest.raises(RuntimeError, match="other steps"):
        X.pair_remeasured(first, second + [row("a", 1, 0.013)])


def test_family_summary_has_the_floor_only_when_remeasured():
    plain = [row("a", 1, 0.010, predicted_s=0.012), row("a", 4, 0.020, predicted_s=0.020)]
    assert "repeatability" not in X.summarise_family(plain)
    again = [{**plain[0], "remeasured_s": 0.0125}, {**plain[1], "remeasured_s": 0.016}]
    s = X.summarise_family(again)
    # against the first pass: |12/10 - 1| = 0.2 and 0; against the second: |12/12.5 - 1| = 0.04, |20/16 - 1| = 0.25
    assert s["calibrated"]["median_ape"] == pytest.approx(0.10)
    assert s["calibrated_remeasured"]["median_ape"] == pytest.approx(0.145)
    assert s["repeatability"]["median_ape"] == pytest.approx((0.25 + 0.2) / 2)


def fake_gptfast_family(times):
    """A stand-in for the gpt-fast family's measuring: two models x two batches, their measured times drawn in
    turn from `times` (no timing), and the number of passes it was called for."""
    calls = []

    def measure(hw, base, device, dtype, grid, timer, specs=None):
        calls.append(dtype)
        return [row(m, b, next(times), predicted_s=0.010, predicted_low_s=0.008, predicted_high_s=0.012)
                for m in ("g1", "g2") for b in (1, 4)]
    return measure, calls


def test_validate_measures_each_family_twice_and_reports_the_floor(monkeypatch):
    from rooflinesim.calibrate.external import gptfast_model
    from rooflinesim.calibrate.measure.timers import select_device

    times = iter([0.010, 0.011, 0.012, 0.013, 0.010, 0.0121, 0.0108, 0.013])
    measure, calls = fake_gptfast_family(times)
    monkeypatch.setattr(gptfast_model, "measure_gptfast_family", measure)
    report = X.run_external_validation(PROFILE, select_device("cpu", 1), "fp32", ("gptfast",), tiny=True,
                                       progress=False, remeasure=True)
    assert len(calls) == 2
    rows = report["configs"]
    assert [r["measured_s"] for r in rows] == [0.010, 0.011, 0.012, 0.013]
    assert [r["remeasured_s"] for r in rows] == [0.010, 0.0121, 0.0108, 0.013]
    rep = report["summary"]["gptfast"]["repeatability"]
    assert rep["n"] == 4 and rep["median_ape"] == pytest.approx(0.05)  # 0, 0.1, 0.1, 0
    assert report["by_model"]["g2"]["repeatability"]["median_ape"] == pytest.approx(0.05)  # 0.1 and 0
    assert report["remeasure_gap_s"] is not None and report["remeasure_gap_s"] >= 0

    from rich.console import Console

    out = io.StringIO()
    X.print_external_report(report, Console(file=out, width=200))
    assert "the same 4 steps measured again" in out.getvalue() and "differ by 5.0% (median)" in out.getvalue()


def test_without_remeasure_one_pass_and_no_floor(monkeypatch):
    from rooflinesim.calibrate.external import gptfast_model
    from rooflinesim.calibrate.measure.timers import select_device

    measure, calls = fake_gptfast_family(itertools.cycle([0.010]))
    monkeypatch.setattr(gptfast_model, "measure_gptfast_family", measure)
    report = X.run_external_validation(PROFILE, select_device("cpu", 1), "fp32", ("gptfast",), tiny=True,
                                       progress=False)
    assert len(calls) == 1
    assert report["remeasure_gap_s"] is None
    assert "repeatability" not in report["summary"]["gptfast"]
    assert all("remeasured_s" not in r for r in report["configs"])


def test_remeasure_on_a_real_tiny_decoder():
    """The real gpt-fast-style decoder, timed twice (no timing asserted): every step has two positive measurements."""
    from rooflinesim.calibrate.measure.timers import select_device

    tiny = (synthetic_spec("tiny-gf", 96, 3, 1, 160, layers=2, vocab=500),)
    report = X.run_external_validation(PROFILE, select_device("cpu", 1), "fp32", ("gptfast",), tiny=True,
                                       progress=False, gptfast_specs=tiny, remeasure=True)
    assert report["configs"] and all(r["measured_s"] > 0 and r["remeasured_s"] > 0 for r in report["configs"])
    assert report["summary"]["gptfast"]["repeatability"]["n"] == len(report["configs"])


@pytest.mark.parametrize("argv", [["--remeasure"], ["--serve", "--remeasure"], ["--serve", "--tiny"]])
def test_remeasure_belongs_to_validate_family(argv, capsys):
    from rooflinesim.cli import main

    assert main(["validate", "--profile", PROFILE, *argv]) == 2
    flag = argv[-1]
    assert f"{flag} belongs to 'validate --family'" in capsys.readouterr().err


def write_report(path, created, measured, remeasured=None):
    import json

    rows = [{**row(f"m{i % 2}", 1 + i, t, predicted_s=t), "family": "hf"} for i, t in enumerate(measured)]
    if remeasured is not None:
        rows = [{**r, "remeasured_s": t} for r, t in zip(rows, remeasured)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"kind": "external-hold-out", "dtype": "fp32", "created": created, "profile": "p.yaml",
                                "configs": rows, "remeasure_gap_s": 60.0 if remeasured else None}))


def test_floor_script_pairs_reports_of_one_machine_within_the_window(tmp_path):
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "scripts" / "remeasure-floor.py"
    a = [0.010 * (1 + i / 40) for i in range(40)]
    b = [t * (1.1 if i % 2 else 1.0) for i, t in enumerate(a)]  # half the steps 10 % slower: median 5 %, p90 10 %
    write_report(tmp_path / "vm-a" / "h" / "1.json", "2026-12-07T10:00:00+00:00", a)
    write_report(tmp_path / "vm-a" / "h" / "2.json", "2026-12-07T10:05:00+00:00", b)
    write_report(tmp_path / "vm-a" / "h" / "late.json", "2026-12-07T11:00:00+00:00", b)  # outside 600 s
    write_report(tmp_path / "vm-b" / "1.json", "2026-12-07T10:01:00+00:00", b)  # another machine
    write_report(tmp_path / "vm-b" / "again.json", "2026-12-07T12:00:00+00:00", a, remeasured=b)
    out = subprocess.run([sys.executable, str(script), "--scan", str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout
    assert "vm-a: 1 pairs" in out and "vm-b: " not in out  # no pair across machines or past the window
    pair = next(line for line in out.splitlines() if line.startswith("vm-a") and "(300 s)" in line)
    assert "|B/A - 1|  5.0% / 10.0%" in pair
    twice = next(line for line in out.splitlines() if "measured twice (60 s apart)" in line)
    assert twice.startswith("vm-b") and "5.0% / 10.0%" in twice
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "vm-a" / "h" / "1.json"),
                          str(tmp_path / "vm-a" / "h" / "2.json")], capture_output=True, text=True, check=True).stdout
    assert "hf " in out and "B vs A   5.0% /  10.0%" in out
