"""The measurement data committed under calibrate/ (the one test module that reads it: every other test uses the
frozen copies under tests/data/, so a recalibration changes no unit-test input).

Layout (calibrate/README.md): calibrate/<device>/ holds the device's profile, quick profile, validation reports and
charts, and logs/; calibrate/<device>/history/<YYYY-MM-DD>/ holds earlier runs, each dated folder with one index line
in calibrate/README.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rooflinesim.specs.profiles import load_profile
from rooflinesim.specs.validation_report import load_validation_report, validation_report_json

ROOT = Path(__file__).resolve().parent.parent
CALIBRATE = ROOT / "calibrate"
DEVICES = sorted(p for p in CALIBRATE.iterdir() if p.is_dir())
#: the current profiles (full and quick) of every device, history left out
PROFILES = sorted(p for device in DEVICES for p in device.glob("*.yaml"))
#: `validate --family` reports: <profile stem>-<families joined by '-'>-validation.json
FAMILY_REPORT = re.compile(r"(?P<stem>.+?)-(?P<families>(?:hf|gptfast|project)(?:-(?:hf|gptfast|project))*)"
                           r"-validation\.json")
FAMILY_REPORTS = sorted(p for device in DEVICES for p in device.glob("*-validation.json")
                        if FAMILY_REPORT.fullmatch(p.name))
REPORTS = sorted(p for device in DEVICES for p in device.glob("*-validation.json")
                 if not p.name.endswith("-serve-validation.json") and p not in FAMILY_REPORTS)
SERVE_REPORTS = sorted(p for device in DEVICES for p in device.glob("*-serve-validation.json"))
HISTORY = sorted(p for device in DEVICES for p in (device / "history").glob("*") if p.is_dir())


def test_calibrate_holds_one_folder_per_device_and_nothing_loose():
    assert DEVICES, "no device folder under calibrate/"
    loose = [p.name for p in CALIBRATE.iterdir() if p.is_file() and p.name != "README.md"]
    assert not loose, f"measurement files outside a device folder: {loose}"
    for device in DEVICES:
        assert (device / f"{device.name}.yaml").is_file(), f"{device.name}/ has no {device.name}.yaml"


def test_a_measured_profile_and_its_validation_report_are_committed():
    """Per device, every profile has a validation report (JSON + PNG) with provenance, and calibrated beats the
    datasheet roofline in it."""
    from rooflinesim.plots import load_validation_report as load_report_dict

    assert PROFILES, "no measured profile under calibrate/<device>/"
    for path in PROFILES:
        prov = load_profile(path).measured.provenance
        assert prov.device_name and prov.torch_version and prov.date and prov.threads >= 1
        report_path = path.with_name(path.stem + "-validation.json")
        assert report_path.is_file() and report_path.with_suffix(".png").is_file()
        report = load_report_dict(report_path)
        for dtype_report in report["by_dtype"].values():
            summary = dtype_report["summary"]
            assert summary["calibrated"]["median_ape"] < summary["roofline"]["median_ape"]


@pytest.mark.parametrize("path", PROFILES, ids=[p.name for p in PROFILES])
def test_committed_profile_predicts(path):
    from rooflinesim.pricing.predict import predict

    hw = load_profile(path)
    dtype = hw.measured.provenance.dtypes[0]
    p = predict(hw=str(path), model="tiny-llama-123m", batch=4, ctx=1024, weight_dtype=dtype,
                draft="tiny-draft-2l", alpha=0.8, k=4)
    d = p.to_dict()
    assert d["hardware"]["calibration_profile"] == hw.measured.profile_name
    assert d["hardware"]["timing_model"].startswith("measured")
    assert 1e-4 < d["decode"]["step_time_s"] < 10
    assert d["decode"]["step_time_s"] > d["decode"]["roofline_step_time_s"]


def test_committed_reports_exist_and_round_trip_byte_for_byte():
    """What validate writes (validation_report_json) is exactly what is committed: nothing is lost or reordered."""
    assert REPORTS
    for path in REPORTS:
        report = load_validation_report(path)
        assert report.by_dtype and report.dtype in report.by_dtype
        assert validation_report_json(report) == path.read_text()


@pytest.mark.parametrize("path", FAMILY_REPORTS, ids=lambda p: p.name)
def test_committed_family_reports_summarise_their_own_rows(path):
    """A `validate --family` report belongs to a profile committed beside it, and each dtype's per-family median and p90
    are those of its own rows (recomputed here, not read back)."""
    import json

    import numpy as np

    match = FAMILY_REPORT.fullmatch(path.name)
    assert path.with_name(f"{match['stem']}.yaml").is_file(), f"{path.name}: no profile {match['stem']}.yaml beside it"
    report = json.loads(path.read_text())
    families = match["families"].split("-")
    for dtype, one in report["by_dtype"].items():
        assert one["dtype"] == dtype and one["families"] == families
        for family in families:
            rows = [r for r in one["configs"] if r["family"] == family]
            assert rows, f"{path.name} {dtype}: no {family} rows"
            errors = np.abs(np.array([r["predicted_s"] for r in rows]) / np.array([r["measured_s"] for r in rows]) - 1)
            summary = one["summary"][family]["calibrated"]
            assert summary["n"] == len(rows)
            assert summary["median_ape"] == pytest.approx(float(np.median(errors)), rel=1e-9)
            assert summary["p90_ape"] == pytest.approx(float(np.quantile(errors, 0.9)), rel=1e-9)


@pytest.mark.parametrize("path", SERVE_REPORTS, ids=lambda p: p.name)
def test_committed_serve_reports_load(path):
    from rooflinesim.plots import load_serve_validation_report

    report = load_serve_validation_report(path)
    assert report["policies"]


def test_history_is_dated_and_indexed():
    """Earlier runs sit in calibrate/<device>/history/<YYYY-MM-DD>/, and calibrate/README.md has an index line for each
    dated folder (its path in backticks)."""
    index = (CALIBRATE / "README.md").read_text()
    for folder in HISTORY:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", folder.name), f"{folder} is not a dated folder"
        assert any(folder.iterdir()), f"{folder} is empty"
        relative = folder.relative_to(CALIBRATE).as_posix()
        assert f"`{relative}/`" in index, f"calibrate/README.md has no index line for {relative}/"


def test_the_frozen_test_profiles_are_measured_profiles():
    frozen = sorted((ROOT / "tests" / "data" / "profiles").glob("*.yaml"))
    assert frozen and all(load_profile(p).measured is not None for p in frozen)
