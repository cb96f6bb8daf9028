"""Acceptance read from what serving engines already log and export.

Formats, as the engines write them (source files named so the formats can be checked again):

* **vLLM V0** (`vllm/spec_decode/metrics.py`, `vllm/engine/metrics.py`, up to v0.9): one line per interval,
  ``Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598, Number of speculative tokens: 3,
  Number of accepted tokens: 8547, Number of draft tokens: 13311, Number of emitted tokens: 10616.`` The counts are
  cumulative since the engine started. System efficiency = emitted / (draft tokens / k x (k + 1)), so
  E = emitted / (draft tokens / k). Its "accepted tokens" count every draft the verifier accepted even after an
  earlier rejection, so they are not used. No per-position data: E at k only.
* **vLLM V1** (`vllm/v1/spec_decode/metrics.py` @ 016a858): one line per interval, counts reset after each,
  ``SpecDecoding metrics: Mean acceptance length: 2.35, Accepted throughput: ..., Drafted throughput: ...,
  Accepted: 1350 tokens, Drafted: 3000 tokens, Per-position acceptance rate: 0.700, 0.400, 0.250, Avg Draft
  acceptance rate: 45.0%``. Mean length = 1 + accepted / drafts; the per-position rate i is accepted-at-i / drafts,
  *unconditional*. Counts per position are rebuilt as rate x drafts (drafts = drafted / k), checked against the
  logged totals, and summed over lines.
* **vLLM Prometheus** (same file): counters ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``,
  ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos{position="i"}`` (exposed with ``_total``),
  cumulative; a counter that goes backwards is an engine restart (as Prometheus' ``increase`` treats it).
* **SGLang** (`python/sglang/srt/managers/scheduler_metrics_mixin.py` @ 01bb3c8): decode log lines
  ``Decode batch, #running-req: 8, ..., accept len: 2.85, accept rate: 0.46, ...`` where accept len = (accepted
  drafts + steps) / steps per interval, and the gauge ``sglang:spec_accept_length``. k is read from the logged
  ``server_args`` (``speculative_num_steps``, ``speculative_eagle_topk``) or must be given.
* **TensorRT-LLM** (`tensorrt_llm/metrics/collector.py` @ 050f80d): gauge ``trtllm_spec_decode_acceptance_length``
  = (accepted drafts + requests) / requests of the last iteration; k must be given.

Mean-only sources (vLLM V0, SGLang, TensorRT-LLM) give E at k and an i.i.d. alpha inferred from it, with a warning
saying so. Bad or incomplete input gives a one-line `AcceptanceSourceError`, or a stated warning when the rest of
the file still gives a trustworthy number; never a silently wrong number.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..fileio import read_text_limited
from ..units import MIB
from .formats import FORMATS
from .measured import AcceptanceSourceError, MeasuredAcceptance, from_mean_length, from_position_counts
from .prometheus_text import counter_total, prometheus_series, total_over_series

ENGINE_NAMES = {"vllm-v0": "vLLM V0 log", "vllm-v1": "vLLM V1 log", "prometheus": "vLLM Prometheus metrics",
                "sglang": "SGLang", "trtllm": "TensorRT-LLM metrics"}
#: a log this large is not a metrics dump or a log worth reading whole: refuse it rather than stall
MAX_FILE_BYTES = 256 * MIB

_NUM = r"(\d+(?:\.\d+)?|nan)"
_V0 = re.compile(
    r"Speculative metrics: Draft acceptance rate: " + _NUM + r", System efficiency: " + _NUM +
    r", Number of speculative tokens: (\d+), Number of accepted tokens: (\d+), Number of draft tokens: (\d+), "
    r"Number of emitted tokens: (\d+)\.")
_V1_MEAN = re.compile(r"Mean acceptance length: " + _NUM + r",")
_V1_ACCEPTED = re.compile(r"Accepted: (\d+) tokens,")
_V1_DRAFTED = re.compile(r"Drafted: (\d+) tokens,")
# the rate list ends where the next field starts (", Avg Draft ...") or at the end of the line
_V1_RATES = re.compile(r"Per-position acceptance rate: ((?:\d+\.\d+)(?:, \d+\.\d+)*)(?=, [A-Z]|\s*$)")
_SGLANG_LEN = re.compile(r"accept len: (\d+\.\d{2}),")
_SGLANG_RUNNING = re.compile(r"#running-req: (\d+),")
_SGLANG_ARG = re.compile(r"\b(speculative_num_steps|speculative_eagle_topk|speculative_num_draft_tokens|"
                         r"speculative_algorithm)=('?[\w.-]+'?)")

_MARKERS = {"vllm-v1": "SpecDecoding metrics:", "vllm-v0": "Speculative metrics:",
            "prometheus": "vllm:spec_decode_num_drafts", "trtllm": "trtllm_spec_decode_acceptance_length"}


def read_engine_acceptance(path, fmt: str = "auto", k: int | None = None) -> MeasuredAcceptance:
    """Acceptance from an engine's log or metrics file (see the module docstring for the formats)."""
    # a few undecodable bytes in a log are replaced, not refused; a special file, a file over the size limit (cut
    # out the speculative-decoding lines with grep) or an endless line is refused before or while reading
    try:
        text = read_text_limited(Path(path), "acceptance file", MAX_FILE_BYTES, errors="replace")
    except InputError as exc:
        hint = "; cut out the speculative-decoding lines (grep) and read those" if "limit" in str(exc) else ""
        raise AcceptanceSourceError(f"{exc}{hint}") from None
    return parse_engine_acceptance(text, fmt, k, source=str(path))


def detect_format(text: str, source: str = "<text>") -> str:
    found = [fmt for fmt, marker in _MARKERS.items() if marker in text]
    if "sglang:spec_accept_length" in text or ("Decode batch" in text and "accept len:" in text):
        found.append("sglang")
    if not found:
        raise AcceptanceSourceError(
            f"{source}: no speculative-decoding metrics found (looked for vLLM 'Speculative metrics:' / "
            "'SpecDecoding metrics:' lines, vllm:spec_decode_* counters, SGLang 'accept len:' / "
            "sglang:spec_accept_length, trtllm_spec_decode_acceptance_length)")
    if len(found) > 1:
        raise AcceptanceSourceError(f"{source}: holds several formats ({', '.join(found)}): pass --format")
    return found[0]


def parse_engine_acceptance(text: str, fmt: str = "auto", k: int | None = None,
                            source: str = "<text>") -> MeasuredAcceptance:
    """Acceptance from the text of an engine log or a Prometheus exposition. `k` is the engine's draft length, needed
    only where the source does not state it (SGLang without its server_args line, TensorRT-LLM)."""
    if fmt not in FORMATS:
        raise AcceptanceSourceError(f"unknown acceptance format {fmt!r}; use one of {', '.join(FORMATS)}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise AcceptanceSourceError(f"the engine's draft length k must be a positive integer, got {k!r}")
    fmt = detect_format(text, source) if fmt == "auto" else fmt
    parser = {"vllm-v0": _parse_vllm_v0, "vllm-v1": _parse_vllm_v1, "prometheus": _parse_vllm_prometheus,
              "sglang": _parse_sglang, "trtllm": _parse_trtllm}[fmt]
    return parser(text, source, k)


# --- helpers --------------------------------------------------------------------------------------------------------


def _last_k_segment(records: list, source: str, what: str = "lines") -> tuple[list, list[str]]:
    """Records are (line number, k, ...); keep the run after the last change of k, and say so."""
    changes = [i for i in range(1, len(records)) if records[i][1] != records[i - 1][1]]
    if not changes:
        return records, []
    start = changes[-1]
    ks = list(dict.fromkeys(r[1] for r in records))
    return records[start:], [
        f"{source}: k changes mid-log ({' -> '.join(str(x) for x in ks)}, last at line {records[start][0]}); only "
        f"the {len(records) - start} {what} with k = {records[start][1]} after it are used"]


def _skipped(source: str, lines: list[int], why: str) -> list[str]:
    if not lines:
        return []
    shown = ", ".join(str(n) for n in lines[:5]) + (", ..." if len(lines) > 5 else "")
    return [f"{source}: {len(lines)} {why} skipped (line {shown})"]


def _check_k_given(k_logged: int, k_given: int | None, source: str) -> list[str]:
    if k_given is not None and k_given != k_logged:
        raise AcceptanceSourceError(f"{source}: the log states k = {k_logged} but k = {k_given} was given")
    return []


# --- vLLM V0 --------------------------------------------------------------------------------------------------------


def _parse_vllm_v0(text: str, source: str, k_given: int | None) -> MeasuredAcceptance:
    records, broken = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if "Speculative metrics:" not in line:
            continue
        m = _V0.search(line)
        if m is None:
            broken.append(number)
            continue
        records.append((number, int(m.group(3)), int(m.group(5)), int(m.group(6)), m.group(2)))
    warnings = _skipped(source, broken, "incomplete or truncated 'Speculative metrics' lines")
    if not records:
        raise AcceptanceSourceError(f"{source}: no complete vLLM V0 'Speculative metrics' line"
                                    + (f" ({len(broken)} truncated)" if broken else ""))
    records, more = _last_k_segment(records, source)
    warnings += more
    k = records[0][1]
    warnings += _check_k_given(k, k_given, source)
    drafts_tokens, resets = counter_total([float(r[2]) for r in records])
    emitted, emitted_resets = counter_total([float(r[3]) for r in records])
    if resets or emitted_resets:
        warnings.append(f"{source}: the cumulative counters went back {max(resets, emitted_resets)} time(s) (engine "
                        "restarts); the runs before each restart are added")
    if drafts_tokens <= 0:
        raise AcceptanceSourceError(f"{source}: vLLM V0 counted no draft tokens yet (Number of draft tokens: 0)")
    if drafts_tokens % k:
        warnings.append(f"{source}: {drafts_tokens:.0f} draft tokens is not a multiple of k = {k} (variable draft "
                        "lengths): E per step is approximate")
    n_drafts = drafts_tokens / k
    expected = emitted / n_drafts
    logged = records[-1][4]
    if not resets and logged != "nan" and abs(float(logged) * (k + 1) - expected) > 0.0006 * (k + 1) + 1e-9:
        warnings.append(f"{source}: the logged system efficiency {logged} disagrees with the logged counts "
                        f"(E = {expected:.3f}); the counts are used")
    return from_mean_length(ENGINE_NAMES["vllm-v0"], source, expected, k, records=len(records),
                            n_drafts=int(round(n_drafts)), warnings=warnings)


# --- vLLM V1 log ----------------------------------------------------------------------------------------------------


def _v1_line_counts(line: str) -> tuple[int, int, list[int], list[str]] | None:
    """(k, drafts, accepted per position, warnings) from one V1 line, or None when a field is missing or the fields
    disagree (a truncated or garbled line)."""
    mean, acc, drafted, rates = (r.search(line) for r in (_V1_MEAN, _V1_ACCEPTED, _V1_DRAFTED, _V1_RATES))
    if not (mean and acc and drafted and rates) or mean.group(1) == "nan":
        return None
    mean_length, accepted, drafted = float(mean.group(1)), int(acc.group(1)), int(drafted.group(1))
    values = [float(x) for x in rates.group(1).split(", ")]
    k = len(values)
    warnings = []
    if drafted % k == 0 and abs(1 + (accepted / (drafted / k) if drafted else 0) - mean_length) <= 0.0051:
        n = drafted // k
    elif mean_length > 1.0:
        n = int(round(accepted / (mean_length - 1.0)))
        warnings.append("drafts shorter than k (drafted tokens != drafts x k): the number of drafts is rebuilt from "
                        "the rounded mean length, and later positions under-count acceptance")
    else:
        return None
    if n <= 0:
        return None
    reached = [int(round(v * n)) for v in values]
    # each rebuilt count is off by at most 0.0005 n (rate rounding) + 0.5 (count rounding)
    if abs(sum(reached) - accepted) > k * (0.0005 * n + 0.5) + 1e-9 or any(r > n for r in reached):
        return None  # the per-position list does not add up to the accepted total: cut short or garbled
    return k, n, reached, warnings


def _parse_vllm_v1(text: str, source: str, k_given: int | None) -> MeasuredAcceptance:
    records, broken, notes = [], [], []
    for number, line in enumerate(text.splitlines(), 1):
        if "SpecDecoding metrics:" not in line:
            continue
        parsed = _v1_line_counts(line)
        if parsed is None:
            broken.append(number)
            continue
        records.append((number, *parsed[:3]))
        notes += parsed[3]
    warnings = _skipped(source, broken, "incomplete, truncated or inconsistent 'SpecDecoding metrics' lines")
    warnings += [f"{source}: {n}" for n in dict.fromkeys(notes)]
    if not records:
        raise AcceptanceSourceError(f"{source}: no complete vLLM V1 'SpecDecoding metrics' line"
                                    + (f" ({len(broken)} incomplete or truncated)" if broken else ""))
    records, more = _last_k_segment(records, source)
    warnings += more
    k = records[0][1]
    warnings += _check_k_given(k, k_given, source)
    n_drafts = sum(r[2] for r in records)
    reached = np.sum([r[3] for r in records], axis=0)
    spread = 0.0005 * n_drafts  # a rate rounded to 3 decimals, times the drafts it was logged over
    if spread >= 0.5:  # below half a count the rebuilt integer counts are exact: nothing to say
        warnings.append(f"{source}: per-position counts are rebuilt from rates logged to 3 decimals "
                        f"(about +-{spread:.0f} per position over {n_drafts:,} drafts)")
    return from_position_counts(ENGINE_NAMES["vllm-v1"], source, n_drafts, reached, records=len(records),
                                warnings=warnings)


# --- Prometheus -----------------------------------------------------------------------------------------------------


def _parse_vllm_prometheus(text: str, source: str, k_given: int | None) -> MeasuredAcceptance:
    series = prometheus_series(text, source, "vllm:spec_decode_")
    base = "vllm:spec_decode_num_"
    if base + "drafts" not in series or base + "accepted_tokens_per_pos" not in series:
        raise AcceptanceSourceError(f"{source}: needs the counters {base}drafts and {base}accepted_tokens_per_pos")
    warnings: list[str] = []
    models = {labels.get("model_name") for labels, _ in series[base + "drafts"]} - {None}
    if len(models) > 1:
        warnings.append(f"{source}: counters of several models ({', '.join(sorted(models))}) are added together")
    n_drafts = total_over_series(series[base + "drafts"], source, base + "drafts", warnings)
    by_position: dict[int, list] = {}
    for labels, value in series[base + "accepted_tokens_per_pos"]:
        if "position" not in labels or not labels["position"].isdigit():
            raise AcceptanceSourceError(f"{source}: a per-position counter has no numeric position label")
        rest = {key: v for key, v in labels.items() if key != "position"}
        by_position.setdefault(int(labels["position"]), []).append((rest, value))
    k = max(by_position) + 1
    if sorted(by_position) != list(range(k)):
        raise AcceptanceSourceError(f"{source}: per-position counters for positions {sorted(by_position)} leave gaps")
    warnings += _check_k_given(k, k_given, source)
    reached = [total_over_series(by_position[i], source, f"{base}accepted_tokens_per_pos{{position={i}}}",
                                  warnings) for i in range(k)]
    for name, expected in (("draft_tokens", n_drafts * k), ("accepted_tokens", sum(reached))):
        if base + name in series:
            got = total_over_series(series[base + name], source, base + name, [])
            if abs(got - expected) > 0.5:
                warnings.append(f"{source}: {base}{name} = {got:.0f} but the other counters imply {expected:.0f}"
                                + (" (drafts shorter than k: later positions under-count acceptance)"
                                   if name == "draft_tokens" else ""))
    return from_position_counts(ENGINE_NAMES["prometheus"], source, int(round(n_drafts)),
                                [int(round(r)) for r in reached], warnings=dict.fromkeys(warnings))


# --- mean-length sources: SGLang and TensorRT-LLM ---------------------------------------------------------------------


def _mean_with_interval(values, weights) -> tuple[float, tuple[float, float] | None]:
    """Weighted mean of per-interval mean lengths; a t interval from their spread (Kish effective sample size)."""
    x, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    mean = float((w * x).sum() / w.sum())
    n_eff = w.sum() ** 2 / (w ** 2).sum()
    if x.size < 2 or n_eff < 2:
        return mean, None
    var = float((w * (x - mean) ** 2).sum() / w.sum()) * n_eff / (n_eff - 1)
    from scipy import stats  # here, not at the top: the CLI parser imports this module, scipy.stats is slow to load

    half = stats.t.ppf(0.975, n_eff - 1) * np.sqrt(var / n_eff)
    return mean, (mean - half, mean + half)


def _gauge_mean(series, name: str, source: str, k: int | None, engine: str, k_hint: str) -> MeasuredAcceptance:
    samples = [v for _, v in series.get(name, [])]
    usable = [v for v in samples if np.isfinite(v) and v >= 1.0]
    if not usable:
        raise AcceptanceSourceError(f"{source}: no {name} sample of at least 1 (speculation off, or no decode yet)")
    if k is None:
        raise AcceptanceSourceError(f"{source}: {engine} do not state the draft length: pass --k / --acceptance-k "
                                    f"({k_hint})")
    mean, ci = _mean_with_interval(usable, np.ones(len(usable)))
    warnings = [f"{source}: {name} is a gauge of the last logging interval only; {len(usable)} sample(s) averaged"]
    if len(usable) < len(samples):
        warnings.append(f"{source}: {len(samples) - len(usable)} {name} sample(s) below 1 or not finite skipped")
    return from_mean_length(engine, source, mean, k, records=len(usable), expected_tokens_ci=ci, warnings=warnings)


def _parse_sglang(text: str, source: str, k_given: int | None) -> MeasuredAcceptance:
    if "sglang:spec_accept_length" in text and "accept len:" not in text:
        return _gauge_mean(prometheus_series(text, source, "sglang:"), "sglang:spec_accept_length", source, k_given,
                           ENGINE_NAMES["sglang"] + " metrics", "the server's --speculative-num-steps")
    records, broken, off, args = [], [], [], {}
    for number, line in enumerate(text.splitlines(), 1):
        if "server_args" in line and "speculative_" in line:
            args = dict(_SGLANG_ARG.findall(line))
        if "Decode batch" not in line:
            continue
        if "accept len:" not in line:
            continue
        m = _SGLANG_LEN.search(line)
        if m is None:
            broken.append(number)
            continue
        value = float(m.group(1))
        if value < 1.0:
            off.append(number)
            continue
        running = _SGLANG_RUNNING.search(line)
        steps = args.get("speculative_num_steps", "None").strip("'")
        k_line = int(steps) if steps.isdigit() else k_given
        records.append((number, k_line, value, int(running.group(1)) if running else 1,
                        args.get("speculative_eagle_topk", "None").strip("'")))
    warnings = _skipped(source, broken, "truncated 'accept len' fields")
    warnings += _skipped(source, off, "intervals with accept len below 1 (no speculative step)")
    if not records:
        raise AcceptanceSourceError(f"{source}: no complete SGLang 'Decode batch ... accept len' line")
    records, more = _last_k_segment(records, source)
    warnings += more
    k = records[0][1]
    if k is None:
        raise AcceptanceSourceError(f"{source}: the log has no server_args line with speculative_num_steps: pass --k / "
                                    "--acceptance-k (the server's --speculative-num-steps)")
    if k_given is not None and k_given != k:
        raise AcceptanceSourceError(f"{source}: server_args state speculative_num_steps = {k} but k = {k_given} "
                                    "was given")
    topk = records[-1][4]
    if topk.isdigit() and int(topk) > 1:
        tokens = args.get("speculative_num_draft_tokens", "TOKENS").strip("'")
        warnings.append(f"{source}: speculative_eagle_topk = {topk} drafts a tree: its accept length is not a "
                        f"chain's, and the i.i.d. alpha below prices it as a chain of depth {k} (pass --tree "
                        f"{k},{topk},{tokens} to price the tree)")
    mean, ci = _mean_with_interval([r[2] for r in records], [r[3] for r in records])
    if ci is not None:
        warnings.append(f"{source}: the interval on E comes from the spread over {len(records)} logged intervals, "
                        "weighted by #running-req (SGLang does not log its step counts)")
    return from_mean_length(ENGINE_NAMES["sglang"] + " log", source, mean, k, records=len(records),
                            expected_tokens_ci=ci, warnings=warnings,
                            conditions={key: v.strip("'") for key, v in args.items()})


def _parse_trtllm(text: str, source: str, k_given: int | None) -> MeasuredAcceptance:
    return _gauge_mean(prometheus_series(text, source, "trtllm_"), "trtllm_spec_decode_acceptance_length", source,
                       k_given, ENGINE_NAMES["trtllm"], "the engine's max_draft_len")


__all__ = ["FORMATS", "read_engine_acceptance", "parse_engine_acceptance", "detect_format"]
