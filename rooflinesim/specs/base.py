"""The pydantic base every spec file model shares (frozen, unknown keys rejected, strict and finite) and the one-line
SpecError every unreadable or invalid spec file becomes.

Strict: a YAML `true` or `"3e12"` is not a number and `4096.7` is not an integer (pydantic would otherwise coerce
the first two and reject only the fractional part of the third); YAML integers are still accepted where a float
is expected. Finite: `.inf` and `.nan` are rejected everywhere, dict values and tuple items included, so no spec
number can turn a prediction into NaN or Infinity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..fileio import FileInputError, check_regular_file, read_text_limited
from ..units import MIB


class FrozenModel(BaseModel):
    """Frozen, unknown keys rejected; values are coerced as pydantic does by default (used by Workload, which the
    front ends build from already-parsed arguments)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class SpecModel(FrozenModel):
    """A model read from a spec or profile file: strict types and finite numbers."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


# YAML and JSON have no tuples: tuple fields take a list (the field is not strict) but their items stay strict.
StrTuple = Annotated[tuple[Annotated[str, Strict()], ...], Field(strict=False)]
FloatTuple = Annotated[tuple[Annotated[float, Strict()], ...], Field(strict=False)]
IntTuple = Annotated[tuple[Annotated[int, Strict()], ...], Field(strict=False)]


def field_error(model: type[BaseModel] | str, field: str, message: str, value: Any) -> ValidationError:
    """A ValidationError located at `field` (raise it from a model validator): the registry then reports
    "file: field 'x': reason" instead of a reason at the top level. `field` may be dotted ('moe.num_experts')."""
    title = model if isinstance(model, str) else model.__name__
    # braces in the message are literal, not PydanticCustomError template slots
    error = PydanticCustomError("value_error", message.replace("{", "(").replace("}", ")"))
    loc = tuple(field.split("."))
    return ValidationError.from_exception_data(title, [InitErrorDetails(type=error, loc=loc, input=value)])


class SpecError(ValueError):
    """A spec that cannot be found, parsed or validated. The message is meant for the user as is: one line naming
    the file, the field where there is one, and the reason."""


def format_validation_error(path: Path | str, error: ValidationError) -> str:
    """'file: field 'a.b': reason (and N more problems)' from the first of a ValidationError's problems."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    reason = first["msg"]
    if first["type"] == "extra_forbidden":
        reason = "unknown key"
    more = f" (and {error.error_count() - 1} more problems)" if error.error_count() > 1 else ""
    return f"{path}: field '{field}': {one_line(reason)}{more}"


def one_line(text: object) -> str:
    """Messages from parsers (PyYAML, json) may span lines; a user-facing error is one line."""
    return " ".join(str(text).split())


#: no spec, profile or config file is larger (the largest shipped profile is well under 1 MB)
MAX_SPEC_BYTES = 16 * MIB


def read_spec_text(path: Path, what: str = "spec file") -> str:
    """The text of a spec file, read within `fileio`'s limits: missing, not a regular file (a folder, /dev/zero, a
    FIFO), too large, too long a line, unreadable or not UTF-8 text (binary garbage) is a one-line SpecError."""
    try:
        return read_text_limited(path, what, MAX_SPEC_BYTES)
    except FileInputError as exc:
        raise SpecError(_file_error_message(exc)) from None


def check_spec_file(path: Path, what: str = "spec file") -> Path:
    """`path` when it names an existing regular file; otherwise a one-line SpecError (not found, a folder, a
    device or FIFO, a symbolic-link loop)."""
    try:
        check_regular_file(path, what)
    except FileInputError as exc:
        raise SpecError(_file_error_message(exc)) from None
    return path


def _file_error_message(exc: FileInputError) -> str:
    """Spec errors start with the file ('file: reason'); a missing file says which kind of file was looked for."""
    if exc.reason == "not found":
        return f"{exc.what} not found: {exc.path}"
    reason = exc.reason.removeprefix("is ")
    hint = ": give a YAML or JSON spec" if reason.startswith("not a text file") else ""
    return f"{exc.path}: {reason}{hint}"
