"""The pydantic base every spec file model shares: frozen, unknown keys rejected, strict and finite.

Strict: a YAML `true` or `"3e12"` is not a number and `4096.7` is not an integer (pydantic would otherwise coerce
the first two and reject only the fractional part of the third); YAML integers are still accepted where a float
is expected. Finite: `.inf` and `.nan` are rejected everywhere, dict values and tuple items included, so no spec
number can turn a prediction into NaN or Infinity.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


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
