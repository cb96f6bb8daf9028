"""The schema of the JSON report `rooflinesim validate` writes, and its loader (pydantic; no torch, no matplotlib).

`rooflinesim.calibrate.validators.validate` (torch) measures and builds the report; this module says what a report is, so that
writing it, charting it and reading it back in a test or a notebook all agree without importing torch. Every model
is frozen and rejects unknown keys. Times are seconds (`_s`), speedups and relative errors dimensionless, token
counts tokens.

A report as written holds one validated dtype at the top level (the primary one: bf16 when validated, what LLM serving
runs) and, in `by_dtype`, every validated dtype's full report, the primary one included.

`load_validation_report(path)` turns every problem (missing file, bad JSON, a field of the wrong type or a missing
one) into one `ValidationReportError` line naming the file and the field.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import InputError
from ..units import DTYPES

#: a measured or predicted time (s)
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: a relative error or spread (dimensionless, >= 0)
RelativeError = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: a speedup over plain decoding (dimensionless)
Speedup = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Batch = Annotated[int, Field(ge=1)]
StepKind = Literal["decode", "verify", "draft"]


class ValidationReportError(InputError):
    """A validation report that cannot be read or does not follow the schema. The message is meant for the user."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepRow(_Strict):
    """One measured step configuration: `new_tokens` new tokens per sequence on `context_tokens` cached ones."""

    kind: StepKind = Field(description="decode: the target, one new token; verify: the target, k + 1; draft: the "
                                       "drafter, one")
    batch: Batch
    context_tokens: int = Field(ge=0)
    new_tokens: int = Field(ge=1)
    measured_s: Seconds = Field(description="median of the faster half of the individual calls (about p25)")
    measured_spread: RelativeError = Field(description="(p90 - p10) / median of the calls")
    measured_median_s: Seconds = Field(description="plain median of the calls")
    predicted_s: Seconds = Field(description="calibrated prediction (the measured profile)")
    roofline_s: Seconds = Field(description="uncalibrated speed-of-light roofline of the datasheet spec")
    model: Optional[str] = Field(None, description="the row's model when it is not the report's target or draft: a "
                                                   "member of the randomised hold-out family")
    predicted_low_s: Optional[Seconds] = Field(None, description="90 % prediction interval, low end")
    predicted_high_s: Optional[Seconds] = Field(None, description="90 % prediction interval, high end")


class ErrorSummary(_Strict):
    """Absolute percentage errors |predicted / measured - 1| over `n` rows, as fractions."""

    median_ape: RelativeError
    p90_ape: RelativeError
    n: int = Field(ge=1)


class KindSummary(_Strict):
    calibrated: ErrorSummary
    roofline: ErrorSummary


class Coverage(_Strict):
    """How often the measurement fell inside the calibrated 90 % prediction interval (goal: >= 80 %)."""

    nominal: float = Field(gt=0, lt=1, description="the intervals' nominal coverage")
    steps: float = Field(ge=0, le=1, description="share of the step rows with low <= measured <= high")
    steps_n: int = Field(ge=0)
    speedup: Optional[float] = Field(None, ge=0, le=1, description="the same for the speculative speedups")
    speedup_n: int = Field(0, ge=0)


class Summary(_Strict):
    calibrated: ErrorSummary = Field(description="predicted_s vs measured_s")
    roofline: ErrorSummary = Field(description="roofline_s vs measured_s")
    calibrated_vs_plain_median: ErrorSummary = Field(description="predicted_s vs measured_median_s")
    by_kind: dict[StepKind, KindSummary]
    hold_out_family: Optional[KindSummary] = Field(None, description="the randomised hold-out family's rows alone")
    coverage: Optional[Coverage] = None


class SpeculativeRow(_Strict):
    """One speculative loop (k drafts + one verify per iteration) against plain decoding at the same batch."""

    batch: Batch
    context_tokens: int = Field(ge=0)
    k: int = Field(ge=1, description="drafts per iteration")
    alpha: float = Field(ge=0, le=1, description="synthetic per-draft acceptance rate")
    measured_speedup: Speedup = Field(description="E(alpha, k) x T_decode / T_iteration of the real loop")
    predicted_speedup: Speedup
    roofline_speedup: Speedup
    measured_speedup_realized: Speedup = Field(description="the same with the tokens the loop actually committed")
    realized_tokens_per_iteration: float = Field(ge=1, allow_inf_nan=False)
    expected_tokens_per_iteration: float = Field(ge=1, allow_inf_nan=False)
    measured_decode_s: Seconds
    measured_iteration_s: Seconds
    predicted_decode_s: Seconds
    predicted_iteration_s: Seconds
    predicted_speedup_low: Optional[Speedup] = Field(None, description="90 % prediction interval, low end")
    predicted_speedup_high: Optional[Speedup] = Field(None, description="90 % prediction interval, high end")


class BreakEven(_Strict):
    """The smallest grid batch from which speculation stays below 1x; None: it still pays at the largest batch."""

    measured_batch: Optional[Batch]
    predicted_batch: Optional[Batch]
    roofline_batch: Optional[Batch]
    grid: tuple[Batch, ...] = Field(description="the batches of the speculative rows")
    predicted_grid_steps_off: int = Field(ge=0, description="grid steps between measured and predicted; None "
                                                            "counts as one step past the largest batch")
    roofline_grid_steps_off: int = Field(ge=0)

    @model_validator(mode="after")
    def _batches_on_the_grid(self) -> "BreakEven":
        for name in ("measured_batch", "predicted_batch", "roofline_batch"):
            value = getattr(self, name)
            if value is not None and value not in self.grid:
                raise ValueError(f"{name} {value} is not a batch of the grid {list(self.grid)}")
        return self


class SpeedupError(_Strict):
    """The largest |predicted - measured| speedup over the speculative rows; None without rows."""

    max_abs_calibrated: Optional[RelativeError]
    max_abs_roofline: Optional[RelativeError]


class DtypeReport(_Strict):
    """The validation of one measured profile in one dtype on one device."""

    profile: str = Field(description="path of the measured profile validated")
    device: str
    dtype: str
    model: str = Field(description="the target model (a hold-out shape)")
    draft: str = Field(description="the drafter")
    created: str = Field(description="ISO 8601 time of the run")
    configs: tuple[StepRow, ...] = Field(min_length=1)
    summary: Summary
    speculative: tuple[SpeculativeRow, ...]
    break_even: BreakEven
    speedup_error: SpeedupError
    roofline_hardware: str = Field(description="the datasheet spec the uncalibrated roofline used")
    threads: int = Field(ge=1)
    quick: bool
    duration_s: float = Field(ge=0, allow_inf_nan=False)
    notes: str

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        if value not in DTYPES:
            raise ValueError(f"unknown dtype {value!r}; one of {', '.join(DTYPES)}")
        return value

    @field_validator("created")
    @classmethod
    def _iso_time(cls, value: str) -> str:
        try:
            _dt.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not an ISO 8601 time: {value!r}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "DtypeReport":
        kinds = {row.kind for row in self.configs}
        if set(self.summary.by_kind) != kinds:
            raise ValueError(f"summary.by_kind covers {sorted(self.summary.by_kind)}, the configs {sorted(kinds)}")
        batches = tuple(row.batch for row in self.speculative)
        if self.break_even.grid != batches:
            raise ValueError(f"break_even.grid {list(self.break_even.grid)} is not the speculative rows' batches "
                             f"{list(batches)}")
        return self


class ValidationReport(DtypeReport):
    """A report as `rooflinesim validate` writes it: the primary dtype's report, and every dtype's in `by_dtype`
    (absent when a single report was written as is)."""

    by_dtype: Optional[dict[str, DtypeReport]] = None

    @model_validator(mode="after")
    def _primary_is_one_of_by_dtype(self) -> "ValidationReport":
        if self.by_dtype is None:
            return self
        for key, report in self.by_dtype.items():
            if report.dtype != key:
                raise ValueError(f"by_dtype.{key} holds a {report.dtype} report")
        primary = self.by_dtype.get(self.dtype)
        # combine_reports copies the primary dtype's report to the top level: both must say the same
        if primary is None or primary.model_dump() != self.model_dump(exclude={"by_dtype"}):
            raise ValueError(f"the top level must be the {self.dtype} report of by_dtype")
        return self

    def dtype_reports(self) -> tuple[DtypeReport, ...]:
        """Every validated dtype's report (the top level alone when there is no `by_dtype`)."""
        return tuple(self.by_dtype.values()) if self.by_dtype else (self,)


def _format_validation_error(where: str, error: ValidationError) -> str:
    """One line naming the first bad field, as `registry` does for spec files."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    reason = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    more = f" (and {error.error_count() - 1} more problems)" if error.error_count() > 1 else ""
    return f"{where}: field '{field}': {reason}{more}"


def parse_validation_report(data: object, where: str = "validation report") -> ValidationReport:
    """Validate an already-parsed report (a dict); any problem is a one-line ValidationReportError naming `where`."""
    if not isinstance(data, dict):
        raise ValidationReportError(f"{where}: expected a JSON object at the top level, got {type(data).__name__}")
    try:
        return ValidationReport.model_validate(data)
    except ValidationError as exc:
        raise ValidationReportError(_format_validation_error(where, exc)) from exc


def load_validation_report(path: str | Path) -> ValidationReport:
    """Read and validate a report file; any problem is a one-line ValidationReportError naming file and field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationReportError(f"{path}: not a text file (not UTF-8 at byte {exc.start}): give a JSON "
                                    "report") from None
    except OSError as exc:
        raise ValidationReportError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationReportError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    return parse_validation_report(data, str(path))


def validation_report_json(report: ValidationReport) -> str:
    """The report as the JSON text `rooflinesim validate` writes (2-space indent, trailing newline, no NaN)."""
    data = report.model_dump(mode="json")
    if data["by_dtype"] is None:
        del data["by_dtype"]
    for one in [data] + list((data.get("by_dtype") or {}).values()):
        _drop_absent(one)
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


#: optional fields added after the first reports: written only when present, so older reports round-trip as they are
_OPTIONAL = {"configs": ("model", "predicted_low_s", "predicted_high_s"),
             "speculative": ("predicted_speedup_low", "predicted_speedup_high")}
_OPTIONAL_SUMMARY = ("hold_out_family", "coverage")


def _drop_absent(report: dict) -> None:
    for section, keys in _OPTIONAL.items():
        for row in report.get(section) or []:
            for key in keys:
                if row.get(key, 0) is None:
                    del row[key]
    for key in _OPTIONAL_SUMMARY:
        if report["summary"].get(key, 0) is None:
            del report["summary"][key]
    coverage = report["summary"].get("coverage")
    if coverage is not None and coverage.get("speedup", 0) is None:
        del coverage["speedup"]
