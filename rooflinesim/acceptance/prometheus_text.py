"""Reading a Prometheus text exposition (what `/metrics` returns, or several scrapes of it appended to one file) and
totalling cumulative counters over it, restarts included.

Only the sample lines matter: `name{label="value",...} value [timestamp]`; `# HELP` / `# TYPE` comments and the
`_created` series prometheus_client adds to each counter are skipped, and a counter's `_total` suffix is dropped so
both spellings of a name match.
"""

from __future__ import annotations

import re

import numpy as np

from .measured import AcceptanceSourceError

_PROM_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_PROM_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def counter_total(values: list[float]) -> tuple[float, int]:
    """Total of a cumulative counter sampled in order: a value below the previous one is a restart from zero (the
    total so far is kept). Returns (total, number of restarts)."""
    total, resets = 0.0, 0
    for prev, cur in zip(values, values[1:]):
        if cur < prev:
            total += prev
            resets += 1
    return total + values[-1], resets


def prometheus_series(text: str, source: str, prefix: str) -> dict[str, list[tuple[dict, float]]]:
    """Samples of metrics starting with `prefix`, in file order: {name without _total: [(labels, value), ...]}."""
    series: dict[str, list[tuple[dict, float]]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith(prefix):
            continue
        m = _PROM_SAMPLE.match(line)
        if m is None:
            raise AcceptanceSourceError(f"{source}: line {number} is not a Prometheus sample: {line[:80]!r}")
        name = m.group(1)
        if name.endswith("_created"):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            raise AcceptanceSourceError(f"{source}: line {number}: {m.group(3)!r} is not a number") from None
        labels = dict(_PROM_LABEL.findall(m.group(2) or ""))
        series.setdefault(name.removesuffix("_total"), []).append((labels, value))
    return series


def total_over_series(samples: list[tuple[dict, float]], source: str, name: str, warnings: list[str]) -> float:
    """Sum over label sets (engines) of each counter's total, restarts counted as in Prometheus' increase()."""
    by_labels: dict[tuple, list[float]] = {}
    for labels, value in samples:
        if not np.isfinite(value) or value < 0:
            raise AcceptanceSourceError(f"{source}: counter {name} has the value {value:g}")
        by_labels.setdefault(tuple(sorted(labels.items())), []).append(value)
    total = 0.0
    for values in by_labels.values():
        part, resets = counter_total(values)
        total += part
        if resets:
            warnings.append(f"{source}: counter {name} went backwards {resets} time(s) (an engine restart); "
                            "counted as a reset, as Prometheus' increase() does")
    return total


__all__ = ["counter_total", "prometheus_series", "total_over_series"]
