"""Measured profile files: the schema, atomic writing, loading, applying a profile to a device, and predicting
with one from the command line (one-line errors, exit 2)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rooflinesim.fileio import write_text_atomic
from rooflinesim.specs.profiles import apply_calibration, load_profile, write_profile
from rooflinesim.specs.registry import SpecError, load_hardware
from rooflinesim.errors import InputError

from .synthetic_profiles import make_profile

ROOT = Path(__file__).resolve().parent.parent
#: a frozen copy of a measured profile (the committed ones under calibrate/ are checked by test_committed_artifacts)
PROFILE = ROOT / "tests" / "data" / "profiles" / "cpu-intel-xeon-2c.yaml"


# --- schema, writing, loading -----------------------------------------------------------------------------------------


def test_profile_round_trips(tmp_path):
    spec = make_profile(("fp32", "bf16"))
    path = write_profile(spec, tmp_path / "p.yaml")
    loaded = load_profile(path)
    assert loaded == spec
    assert loaded.measured.dtypes["bf16"].linear[0].m == spec.measured.dtypes["bf16"].linear[0].m


def test_profile_schema_rejects_unknown_keys(tmp_path):
    data = yaml.safe_load(write_profile(make_profile(), tmp_path / "p.yaml").read_text())
    data["measured"]["dtypes"]["fp32"]["surprise"] = 1
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="bad.yaml.*surprise|surprise.*bad.yaml|bad.yaml"):
        load_profile(tmp_path / "bad.yaml")


def test_truncated_profile_is_a_clear_error(tmp_path):
    text = write_profile(make_profile(), tmp_path / "p.yaml").read_text()
    for cut in (len(text) // 3, len(text) // 2, len(text) - 40):
        bad = tmp_path / f"truncated-{cut}.yaml"
        bad.write_text(text[:cut])
        with pytest.raises(SpecError) as info:
            load_profile(bad)
        assert bad.name in str(info.value)


def test_corrupted_profile_is_a_clear_error(tmp_path):
    bad = tmp_path / "garbage.yaml"
    bad.write_bytes(b"measured: [\x00\x01 {{{\n  - :")
    with pytest.raises(SpecError, match="garbage.yaml"):
        load_profile(bad)
    plain = tmp_path / "plain.yaml"
    plain.write_text((ROOT / "hardware" / "cpu-generic.yaml").read_text())
    with pytest.raises(SpecError, match="not a measured profile"):
        load_profile(plain)
    with pytest.raises(SpecError, match="not found"):
        load_profile(tmp_path / "missing.yaml")


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "p.yaml"
    write_profile(make_profile(name="old"), target)
    before = target.read_text()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(InputError, match="disk full"):  # one line for the user, not a traceback
        write_profile(make_profile(name="new"), target)
    assert target.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.yaml"]  # no temporary file left behind


def test_atomic_write_survives_a_killed_writer(tmp_path):
    """A writer SIGKILLed after writing but before the rename leaves the old, loadable profile in place."""
    target = tmp_path / "p.yaml"
    write_profile(make_profile(name="old"), target)
    script = f"""
import os, signal
import rooflinesim.fileio as p
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
p.write_text_atomic({str(target)!r}, "half: [written" * 1000)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    assert load_profile(target).measured.profile_name == "old"


def test_write_text_atomic_makes_an_ordinary_file(tmp_path):
    umask = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "p.yaml", "x: 1\n")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_write_text_atomic_creates_folders(tmp_path):
    path = write_text_atomic(tmp_path / "a" / "b.json", "{}")
    assert json.loads(path.read_text()) == {}


def test_apply_calibration_warns_on_another_device(tmp_path):
    path = write_profile(make_profile(), tmp_path / "p.yaml")
    same, warnings = apply_calibration(load_hardware("cpu"), path)
    assert warnings == [] and same.measured is not None and same.name == load_hardware("cpu").name
    other, warnings = apply_calibration(load_hardware("h100"), path)
    assert len(warnings) == 1 and "not on" in warnings[0] and other.measured.profile_name == "synthetic"


# --- the committed profile through predict -----------------------------------------------------------------------------


def test_cli_predict_with_calibration_flag():
    path = PROFILE
    dtype = load_profile(path).measured.provenance.dtypes[0]
    out = subprocess.run(
        [sys.executable, "-m", "rooflinesim.cli", "predict", "--hw", "cpu", "--calibration", str(path), "--model",
         "tiny-llama-123m", "--weight-dtype", dtype, "--ctx", "1k", "--draft", "tiny-draft-2l", "--json"],
        cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["hardware"]["calibration_profile"] == load_profile(path).measured.profile_name
    # the only warning is the one-line host notice, and only when this machine is not the profile's host
    from rooflinesim.specs.profiles import get_host_cpu_model

    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning")]
    foreign = load_profile(path).measured.provenance.host_cpu != get_host_cpu_model()
    assert [("describes" in line) for line in warnings] == ([True] if foreign else [])
    other = subprocess.run(
        [sys.executable, "-m", "rooflinesim.cli", "predict", "--hw", "h100", "--calibration", str(path), "--model",
         "tiny-llama-123m", "--weight-dtype", dtype, "--ctx", "1k", "--json", "--no-speculation"],
        cwd=ROOT, capture_output=True, text=True)
    assert other.returncode == 0 and "measured on" in other.stderr


def test_cli_unmeasured_dtype_is_one_line_exit_2(tmp_path):
    path = write_profile(make_profile(("fp32",)), tmp_path / "p.yaml")
    out = subprocess.run(
        [sys.executable, "-m", "rooflinesim.cli", "predict", "--hw", str(path), "--model", "tiny-llama-123m",
         "--weight-dtype", "bf16", "--ctx", "1k", "--no-speculation"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "not bf16" in out.stderr


def test_cli_corrupted_calibration_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nname: [unterminated\n")
    out = subprocess.run(
        [sys.executable, "-m", "rooflinesim.cli", "predict", "--hw", "cpu", "--calibration", str(bad), "--model",
         "tiny-llama-123m", "--no-speculation"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "bad.yaml" in out.stderr


