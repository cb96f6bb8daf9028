"""The one home of unit constants, dtype sizes, count parsing and human formatting.

Everything inside rooflinesim is SI: seconds, bytes, FLOPs, FLOP/s, bytes/s. GB means 1e9 bytes (decimal), as
datasheets quote memory bandwidth and capacity; GiB (2**30) is only used where a file says so.
"""

from __future__ import annotations

import math
import re

NANO, MICRO, MILLI = 1e-9, 1e-6, 1e-3
KILO, MEGA, GIGA, TERA, PETA = 1e3, 1e6, 1e9, 1e12, 1e15
KIB, MIB, GIB = 2**10, 2**20, 2**30

#: Storage size of one element, in bytes. int4 packs two values per byte.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,  # stored as fp32; only the tensor-core math is reduced precision
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
DTYPES = tuple(DTYPE_BYTES)

#: Weight-only quantisation (int8, int4) stores one fp16 scale per group of weights; int4 adds a packed 4-bit zero point
#: (GPTQ/AWQ layout). fp8 uses per-tensor scales, which cost nothing measurable.
DEFAULT_QUANT_GROUP_SIZE = 128
QUANT_GROUP_OVERHEAD_BYTES = {"int8": 2.0, "int4": 2.5}

_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "f32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "float8": "fp8", "fp8_e4m3": "fp8", "e4m3": "fp8", "float8_e4m3fn": "fp8",
}


class UnitError(ValueError):
    """A value or unit string that cannot be understood. The message is meant for the user as is."""


def normalize_dtype(name: str) -> str:
    """Canonical dtype name ('bfloat16' -> 'bf16'); raises UnitError naming the supported ones."""
    if type(name) is str and name in _NORMALIZED:  # a point asks some 20 times
        return _NORMALIZED[name]
    key = str(name).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise UnitError(f"unknown dtype {name!r}; supported: {', '.join(DTYPES)}")
    if type(name) is str and len(_NORMALIZED) < 256:  # what was asked, bounded: names come from users
        _NORMALIZED[name] = key
    return key


#: the names `normalize_dtype` has answered, as given -> canonical
_NORMALIZED: dict[str, str] = {}


def get_dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype (int4 = 0.5)."""
    return DTYPE_BYTES[normalize_dtype(name)]


def get_weight_bytes_per_element(name: str, group_size: int = DEFAULT_QUANT_GROUP_SIZE) -> float:
    """Stored bytes per weight, including the group scale (and zero point) of int8/int4 weight-only quantisation."""
    dtype = normalize_dtype(name)
    return DTYPE_BYTES[dtype] + QUANT_GROUP_OVERHEAD_BYTES.get(dtype, 0.0) / group_size


_COUNT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*$")
_COUNT_SCALE = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_count(text: str | int) -> int:
    """Parse a token or sequence count: '4096', '4k' (= 4096), '32K', '128k', '1M' (= 1048576).

    Context lengths are powers of two in practice, so k/M are binary (1k = 1024), as in "32k context".
    """
    if isinstance(text, bool):  # bool is an int subclass; True is not a count of 1
        raise UnitError(f"cannot parse count {text!r}: expected a whole number, got a boolean")
    if isinstance(text, int):
        if text < 0:
            raise UnitError(f"count {text} must not be negative")
        return text
    if isinstance(text, float):
        if not math.isfinite(text) or text < 0 or not text.is_integer():
            raise UnitError(f"count {text!r} is not a whole, non-negative number")
        return int(text)
    match = _COUNT_RE.match(str(text))
    if not match:
        raise UnitError(f"cannot parse count {text!r}: use an integer with an optional k or M suffix (4096, 4k, 1M)")
    value = float(match.group(1)) * _COUNT_SCALE[match.group(2).lower()]
    if value != int(value):
        raise UnitError(f"count {text!r} is not a whole number")
    return int(value)


def parse_count_range(text: str) -> list[int]:
    """Parse a sweep range: '1..256' (powers of two from 1 to 256), '1k..128k', '1,2,8,64' or a single count."""
    text = str(text).strip()
    if ".." in text:
        lo_text, hi_text = text.split("..", 1)
        lo, hi = parse_count(lo_text), parse_count(hi_text)
        if lo <= 0 or hi <= 0:
            raise UnitError(f"range {text!r} must be positive")
        if hi < lo:
            raise UnitError(f"range {text!r} is empty: the end is below the start")
        values, v = [], lo
        while v <= hi:
            values.append(v)
            v *= 2
        if values[-1] != hi:
            values.append(hi)
        return values
    return [parse_count(part) for part in text.split(",") if part.strip()]


#: The most values an integer range may expand to (a guard against '0..100000000' filling memory).
MAX_RANGE_VALUES = 10_000


def parse_int_range(text: str, max_values: int = MAX_RANGE_VALUES, what: str | None = None) -> list[int]:
    """Parse an integer range with unit steps: '0..8' -> [0, 1, ..., 8], or '1,2,4'; at most `max_values` values
    (counted before the list is built). `what` (a flag such as '--k') starts the error messages."""
    try:
        return _parse_int_range(str(text).strip(), max_values)
    except UnitError as exc:
        raise UnitError(f"{what}: {exc}" if what else str(exc)) from None


def _parse_int_range(text: str, max_values: int) -> list[int]:
    try:
        if ".." in text:
            lo_text, hi_text = text.split("..", 1)
            lo, hi = int(lo_text), int(hi_text)
            size = max(hi - lo + 1, 0)
            if size > max_values:
                raise UnitError(f"range {text!r} has {size} values; at most {max_values} are allowed")
            values = list(range(lo, hi + 1))
        else:
            values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        if isinstance(exc, UnitError):
            raise
        raise UnitError(f"cannot parse integer range {text!r}: use '0..8' or '1,2,4'") from exc
    if not values and ".." not in text:
        raise UnitError(f"integer range {text!r} is empty: use '0..8' or '1,2,4'")
    if not values:
        raise UnitError(f"range {text!r} is empty: the end is below the start")
    if len(values) > max_values:
        raise UnitError(f"list {text!r} has {len(values)} values; at most {max_values} are allowed")
    return values


def parse_float_list(text: str, what: str = "value") -> list[float]:
    """Parse '0.6,0.8' into floats; raises UnitError with the offending item."""
    values = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError as exc:
            raise UnitError(f"cannot parse {what} {part!r} as a number") from exc
        if not math.isfinite(value):
            raise UnitError(f"{what} {part!r} is not a finite number")
        values.append(value)
    if not values:
        raise UnitError(f"no {what} given")
    return values


def _format_si(value: float, unit: str, base: float = 1000.0) -> str:
    prefixes = ["", "K", "M", "G", "T", "P", "E"]
    magnitude = abs(value)
    i = 0
    while magnitude >= base and i < len(prefixes) - 1:
        magnitude /= base
        value /= base
        i += 1
    return f"{value:.3g} {prefixes[i]}{unit}"


def format_bytes(value: float) -> str:
    """Decimal: 1.4e11 -> '140 GB'."""
    return _format_si(float(value), "B")


def format_flops(value: float) -> str:
    return _format_si(float(value), "FLOP")


def format_rate(value: float, unit: str) -> str:
    """format_rate(2.039e12, 'B/s') -> '2.04 TB/s'."""
    return _format_si(float(value), unit)


def format_seconds(value: float) -> str:
    value = float(value)
    if value != value:  # NaN
        return "n/a"
    if value == 0:
        return "0 s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def format_count(value: float) -> str:
    """Token counts: 4096 -> '4k', 131072 -> '128k', 1000 -> '1000'."""
    value = int(value)
    if value >= 1024**2 and value % 1024**2 == 0:
        return f"{value // 1024**2}M"
    if value >= 1024 and value % 1024 == 0:
        return f"{value // 1024}k"
    return str(value)
