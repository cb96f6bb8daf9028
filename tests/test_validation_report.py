"""The `rooflinesim validate` report schema (rooflinesim.validation_report): the committed report and the test fixture
follow it, every problem is one line naming file and field, and the schema needs neither torch nor matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rooflinesim.errors import InputError
from rooflinesim.specs.validation_report import (
    ValidationReport, ValidationReportError, load_validation_report, parse_validation_report, validation_report_json,
)

ROOT = Path(__file__).resolve().parent.parent
# step-time validation reports (`validate`); a serving-loop report (`validate --serve`) has its own schema and loader
COMMITTED_REPORTS = sorted(p for p in (ROOT / "calibrate").glob("*-validation.json")
                           if not p.name.endswith("-serve-validation.json"))
SERVE_REPORTS = sorted((ROOT / "calibrate").glob("*-serve-validation.json"))
FIXTURE = ROOT / "tests" / "data" / "validation-example.json"


@pytest.mark.parametrize("path", COMMITTED_REPORTS + [FIXTURE], ids=lambda p: p.name)
def test_report_loads_through_the_schema(path):
    report = load_validation_report(path)
    assert isinstance(report, ValidationReport)
    for dtype_report in report.dtype_reports():
        assert dtype_report.configs and dtype_report.summary.calibrated.n == len(dtype_report.configs)


def test_committed_reports_exist_and_round_trip_byte_for_byte():
    """What validate writes (validation_report_json) is exactly what is committed: nothing is lost or reordered."""
    assert COMMITTED_REPORTS
    for path in COMMITTED_REPORTS:
        report = load_validation_report(path)
        assert report.by_dtype and report.dtype in report.by_dtype
        assert validation_report_json(report) == path.read_text()


def _fixture() -> dict:
    return json.loads(FIXTURE.read_text())


def _combined() -> dict:
    data = _fixture()
    return dict(data, by_dtype={"bf16": data, "fp32": dict(data, dtype="fp32")})


@pytest.mark.parametrize("mutate, field, reason", [
    (lambda d: d.pop("configs"), "configs", "Field required"),
    (lambda d: d.update(extra_key=1), "extra_key", "unknown key"),
    (lambda d: d["configs"][0].update(measured_s=-1.0), "configs.0.measured_s", "greater than 0"),
    (lambda d: d["configs"][0].update(measured_s=float("nan")), "configs.0.measured_s", "finite"),
    (lambda d: d["configs"][0].update(kind="prefill"), "configs.0.kind", "'decode', 'verify' or 'draft'"),
    (lambda d: d.update(dtype="bf17"), "dtype", "unknown dtype"),
    (lambda d: d.update(created="yesterday"), "created", "ISO 8601"),
    (lambda d: d["break_even"].update(measured_batch=3), "break_even", "not a batch of the grid"),
    (lambda d: d["summary"]["by_kind"].pop("draft"), "(top level)", "summary.by_kind covers"),
])
def test_a_malformed_report_is_one_line_naming_the_field(tmp_path, mutate, field, reason):
    data = _fixture()
    mutate(data)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValidationReportError) as info:
        load_validation_report(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert f"field '{field}'" in message, message
    assert reason in message, message
    assert isinstance(info.value, InputError)  # the CLI's user errors: one line, exit 2


def test_combined_report_checks_by_dtype():
    assert [r.dtype for r in parse_validation_report(_combined()).dtype_reports()] == ["bf16", "fp32"]
    mislabelled = _combined()
    mislabelled["by_dtype"]["fp32"] = dict(mislabelled["by_dtype"]["fp32"], dtype="fp16")
    with pytest.raises(ValidationReportError, match="by_dtype.fp32 holds a fp16 report"):
        parse_validation_report(mislabelled)
    diverged = _combined()
    diverged["threads"] = 8  # the top level must be the primary dtype's report, unchanged
    with pytest.raises(ValidationReportError, match="top level must be the bf16 report"):
        parse_validation_report(diverged)


@pytest.mark.parametrize("content, reason", [(None, "cannot read"), ("{not json", "not valid JSON"),
                                             ("[1, 2]", "expected a JSON object")])
def test_unreadable_report_is_one_line(tmp_path, content, reason):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValidationReportError, match=reason) as info:
        load_validation_report(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_schema_imports_without_torch_or_matplotlib():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['matplotlib'] = None; "
            "import rooflinesim.specs.validation_report as v; "
            f"v.load_validation_report({str(FIXTURE)!r}); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_write_report_writes_only_valid_json_atomically(tmp_path):
    pytest.importorskip("torch")
    from rooflinesim.calibrate.validators.validate import write_report

    data = _combined()
    path = write_report(data, tmp_path, "dev-validation")
    assert path == tmp_path / "dev-validation.json" and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert validation_report_json(load_validation_report(path)) == path.read_text()
    bad = dict(data, configs=[])
    with pytest.raises(ValidationReportError, match="configs"):
        write_report(bad, tmp_path, "bad-validation")
    assert not (tmp_path / "bad-validation.json").exists()


@pytest.mark.parametrize("path", SERVE_REPORTS, ids=lambda p: p.name)
def test_committed_serve_reports_load(path):
    from rooflinesim.plots import load_serve_validation_report

    report = load_serve_validation_report(path)
    assert report["policies"]
