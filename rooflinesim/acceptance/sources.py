"""`--acceptance FILE_OR_PRESET`: one name -> a `MeasuredAcceptance`, from an engine's log or metrics file, a JSON
written by `rooflinesim acceptance from-logs --json` / `acceptance measure --json`, or the preset library.

A path that exists is read as a file; anything else must be a preset name (close names are suggested).
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from ..errors import InputError
from ..fileio import read_text_limited
from ..units import MIB
from .measured import AcceptanceSourceError, MeasuredAcceptance, from_mean_length, from_position_counts


#: an acceptance JSON holds a few numbers per draft position
MAX_JSON_BYTES = MIB


def load_acceptance(value, k: int | None = None, fmt: str = "auto") -> MeasuredAcceptance:
    """A measured or published acceptance named by a file path or a preset name. `k` is the engine's draft length
    for files that do not state it; `fmt` one of `engines.FORMATS`."""
    if isinstance(value, MeasuredAcceptance):
        return value
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise AcceptanceSourceError(f"acceptance must be a log or metrics file or a preset name, got {value!r}")
    path = Path(value)
    try:
        is_path = path.exists()
    except (OSError, ValueError):  # a name too long for a path, or holding a NUL: not a file, so maybe a preset
        is_path = False
    if is_path:
        if path.suffix.lower() == ".json":
            return _read_json(path)
        from .engines import read_engine_acceptance

        return read_engine_acceptance(path, fmt, k)
    from .presets import get_preset, list_presets

    names = [p.name for p in list_presets()]
    if str(value) in names:
        if k is not None:
            raise AcceptanceSourceError(f"preset {value} states its own k; --acceptance-k is for engine files")
        return get_preset(str(value)).to_measured()
    close = difflib.get_close_matches(str(value), names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see 'rooflinesim list acceptance'"
    raise AcceptanceSourceError(f"acceptance {value!r} is neither an existing file nor a preset{hint}")


def _read_json(path: Path) -> MeasuredAcceptance:
    """A result written by `acceptance from-logs --json` or `acceptance measure --json`, rebuilt from its counts
    (per position) or its E at k, so the numbers are recomputed rather than trusted."""
    try:
        data = json.loads(read_text_limited(path, "acceptance JSON", MAX_JSON_BYTES))
    except InputError as exc:
        raise AcceptanceSourceError(str(exc)) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise AcceptanceSourceError(f"{path}: not a readable acceptance JSON ({reason})") from None
    if not isinstance(data, dict) or "k" not in data or "expected_tokens" not in data:
        raise AcceptanceSourceError(f"{path}: not an acceptance JSON (needs k and expected_tokens; write one with "
                                    "'rooflinesim acceptance from-logs FILE --json')")
    engine = f"{data.get('engine', 'a measurement')} via {path.name}"
    try:
        if data.get("n_drafts") and data.get("reached"):
            return from_position_counts(engine, str(path), int(data["n_drafts"]), data["reached"],
                                        records=int(data.get("records", 1)), warnings=data.get("warnings", ()),
                                        conditions=data.get("conditions"))
        return from_mean_length(engine, str(path), float(data["expected_tokens"]), int(data["k"]),
                                records=int(data.get("records", 1)), n_drafts=data.get("n_drafts"),
                                warnings=data.get("warnings", ()), conditions=data.get("conditions"),
                                say_iid=False)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, AcceptanceSourceError):
            raise
        raise AcceptanceSourceError(f"{path}: malformed acceptance JSON ({exc})") from None


__all__ = ["load_acceptance"]
