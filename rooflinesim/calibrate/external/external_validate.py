"""`rooflinesim validate --family hf,gptfast,project`: decode steps of hold-out implementations against a profile.

Families:

* `hf`: Hugging Face `transformers` decoders over their own DynamicCache (`calibrate.hf_holdout`; needs the `hf`
  extra);
* `gptfast`: the gpt-fast-style decoder (`calibrate.gptfast_model`);
* `project`: the project's own randomised hold-out family on its reference decoder (`calibrate.validate_family`),
  for comparison on the same machine in the same minutes;
* `model`: the user's model of `calibrate --model` (validate's `--model`) at the points that calibration did not
  time, priced with its fitted terms (`calibrate.model_terms`).

`hf` rows are priced with the `hf` implementation profile and `gptfast` rows with `gptfast` (`specs.implementation`:
what that code does beyond the reference decoder); each row also carries its price as if the reference decoder ran
it (`predicted_reference_s`), summarised as the family's `reference_impl` errors.

Each family's summary has the median and p90 absolute error of the calibrated prediction (and of the uncalibrated
roofline), the share of measurements inside their 90 % interval, and the interval's median half-width relative to
the prediction (the issue's goal: >= 80 % inside, no wider than +-25 %).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from pathlib import Path

import numpy as np
import torch

from ...errors import InputError
from ...fileio import write_text_atomic
from ...specs.registry import load_hardware
from ...specs.profiles import load_profile
from ..measure.timers import Device, Timer
from ..validators.validate_summary import ape, summarise

FAMILIES = ("hf", "gptfast", "project", "model")


def parse_families(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FAMILIES]
    if unknown or not names:
        raise InputError(f"--family takes a comma-separated list of {', '.join(FAMILIES)}; got {text!r}")
    return names


def summarise_family(rows: list[dict]) -> dict:
    """Errors, interval coverage and interval width of one family's rows."""
    out = {"calibrated": summarise([ape(r["predicted_s"], r["measured_s"]) for r in rows]),
           "roofline": summarise([ape(r["roofline_s"], r["measured_s"]) for r in rows]),
           "median_signed_error": float(np.median([r["predicted_s"] / r["measured_s"] - 1 for r in rows])),
           "coverage": None, "interval_half_width": None}
    with_reference = [r for r in rows if r.get("predicted_reference_s") is not None]
    if with_reference:  # the same rows priced as if the reference decoder ran them: before the implementation profile
        out["reference_impl"] = summarise([ape(r["predicted_reference_s"], r["measured_s"]) for r in with_reference])
    remeasured = [r for r in rows if r.get("remeasured_s") is not None]
    if remeasured:  # validate --remeasure: the machine's own floor under the errors, and the errors on the second pass
        out["repeatability"] = get_repeatability(remeasured)
        out["calibrated_remeasured"] = summarise([ape(r["predicted_s"], r["remeasured_s"]) for r in remeasured])
    with_interval = [r for r in rows if r.get("predicted_low_s") is not None]
    if with_interval:
        out["coverage"] = float(np.mean([r["predicted_low_s"] <= r["measured_s"] <= r["predicted_high_s"]
                                         for r in with_interval]))
        out["interval_half_width"] = float(np.median([(r["predicted_high_s"] - r["predicted_low_s"]) / 2
                                                      / r["predicted_s"] for r in with_interval]))
    return out


def get_repeatability(rows: list[dict]) -> dict:
    """How far two measurements of the same steps lie apart: |second / first - 1| per row (`measured_s`, then
    `remeasured_s`), as a median / p90 summary. A prediction's error below it cannot be told from the machine's
    own movement between the two."""
    return summarise([ape(r["remeasured_s"], r["measured_s"]) for r in rows])


def row_key(row: dict) -> tuple:
    """What identifies a measured step within one validation: its family, model and (batch, context, new tokens)."""
    return row["family"], row["model"], row["batch"], row["context_tokens"], row["new_tokens"]


def pair_remeasured(first: list[dict], second: list[dict]) -> list[dict]:
    """The first pass's rows, each with the second pass's measurement of the same step as `remeasured_s`."""
    again = {row_key(r): r["measured_s"] for r in second}
    if len(again) != len(second) or {row_key(r) for r in first} != set(again):
        raise RuntimeError("validate --remeasure: the second pass measured other steps than the first")
    return [{**r, "remeasured_s": again[row_key(r)]} for r in first]


def speed_factor(anchor_report: dict | None) -> float | None:
    """How much slower the machine ran than when its profile was measured: the geometric mean of the anchors' time
    ratios (gemm: compute-bound, forward: dispatch-bound, stream: weight streaming; a profile measured before an
    anchor existed lacks it); None without anchors. Multiplying a prediction by it separates the machine's state
    from the model's error, roughly: a contended machine slows the three unevenly."""
    ratios = (anchor_report or {}).get("median_ratio") or {}
    parts = [value for value in ratios.values() if value]
    return float(np.exp(np.mean(np.log(parts)))) if parts else None


def get_speed_direction(median_ratio: dict) -> str:
    """'slower', 'faster' or 'at another speed' (some anchors each way), from the anchors' time ratios now / then."""
    ratios = [value for value in median_ratio.values() if value]
    if ratios and all(value >= 1.0 for value in ratios):
        return "slower"
    if ratios and all(value <= 1.0 for value in ratios):
        return "faster"
    return "at another speed"


def _base_hardware(hw):
    try:
        return load_hardware(hw.measured.base_hardware)
    except Exception:  # no shipped spec for this device: the profile's own fitted peaks
        return hw


def run_external_validation(profile_path: str, device: Device, dtype: str | None, families=("hf",),
                            quick: bool = False, tiny: bool = False, seed: int = 0, progress: bool = True,
                            hf_overrides: dict | None = None, hf_entries=None, gptfast_specs=None,
                            model_source: str | None = None, remeasure: bool = False) -> dict:
    """Measure the families' decode steps on `device` and compare with the profile's predictions. With `remeasure`,
    every family is measured a second time after the first pass, in the same order, so each step's two measurements
    lie one pass apart (`remeasured_s`, `repeatability`)."""
    from .hf_holdout import HF_HOLD_OUTS, require_transformers

    hw = load_profile(profile_path)
    measured = hw.measured
    dtype = dtype or measured.provenance.dtypes[0]
    if dtype not in measured.dtypes:
        raise InputError(f"{profile_path} measured {', '.join(measured.dtypes)}, not {dtype}")
    if measured.provenance.device_kind != device.kind:
        raise InputError(f"{profile_path} was measured on {measured.provenance.device_name}, not on a {device.kind} "
                         "device: validate it where it was measured")
    if "hf" in families:
        require_transformers()
    base = _base_hardware(hw)
    started = time.perf_counter()
    log = print if progress else (lambda *a, **k: None)
    from ..measure.anchor import Anchor, compare_anchor

    anchor = Anchor(device) if not tiny else None  # is the machine as fast now as when the profile was measured?
    anchors = [anchor.time_s()] if anchor else []
    measure = dict(hw=hw, base=base, device=device, dtype=dtype, families=families, quick=quick, tiny=tiny,
                   seed=seed, hf_entries=hf_entries or HF_HOLD_OUTS, hf_overrides=hf_overrides,
                   gptfast_specs=gptfast_specs, model_source=model_source, log=log)
    rows = _measure_families(**measure)
    remeasure_gap_s = None
    if remeasure:
        remeasure_gap_s = time.perf_counter() - started
        log("validate --family: the same steps again (--remeasure)")
        rows = pair_remeasured(rows, _measure_families(**measure))
    if anchor:
        anchors.append(anchor.time_s())
    summary = {f: summarise_family([r for r in rows if r["family"] == f]) for f in families}
    reference_s, against = get_anchor_reference(hw, families, model_source, dtype)
    anchor_report = compare_anchor(reference_s, anchors, ["start", "end"]) if anchors else None
    if anchor_report is not None:
        anchor_report["against"] = against
    factor = speed_factor(anchor_report)
    if factor is not None:  # a diagnostic for contended runs, not the accuracy figure
        for f in families:
            summary[f]["speed_adjusted"] = summarise([ape(r["predicted_s"] * factor, r["measured_s"])
                                                      for r in rows if r["family"] == f])
            summary[f]["speed_factor"] = factor
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    return {
        "kind": "external-hold-out",
        "profile": str(profile_path), "device": device.name, "threads": device.threads, "dtype": dtype,
        "profile_quick": bool(measured.provenance.quick),
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "families": list(families), "quick": quick, "configs": rows, "summary": summary,
        "by_model": {m: summarise_family(rs) for m, rs in by_model.items()},
        "anchor": anchor_report,
        "duration_s": round(time.perf_counter() - started, 1),
        "remeasure_gap_s": None if remeasure_gap_s is None else round(remeasure_gap_s, 1),
        "notes": "measured_s: median of the faster half of the individual step calls (measured_median_s: plain "
                 "median); predicted_low_s / _high_s: the calibrated 90 % interval; interval_half_width: median of "
                 "(high - low) / 2 / predicted. With --remeasure: remeasured_s, the same step measured again one "
                 "pass (remeasure_gap_s) later; repeatability, |remeasured / measured - 1|; calibrated_remeasured, "
                 "the prediction's errors against the second measurement.",
    }


def _measure_families(hw, base, device, dtype, families, quick, tiny, seed, hf_entries, hf_overrides, gptfast_specs,
                      model_source, log) -> list[dict]:
    """One pass over the families: their rows, each family's models built and timed afresh."""
    from .hf_holdout import HfGrid, measure_hf_family
    from .gptfast_model import measure_gptfast_family
    from ..validators.validate_family import FamilyGrid, measure_family

    grid = HfGrid.make(quick, tiny)
    timer = Timer(device)
    rows: list[dict] = []
    with torch.inference_mode():
        for family in families:
            t0 = time.perf_counter()
            if family == "hf":
                rows += measure_hf_family(hw, base, device, dtype, grid, timer, hf_entries,
                                          config_overrides=hf_overrides)
            elif family == "gptfast":
                rows += measure_gptfast_family(hw, base, device, dtype, grid, timer, gptfast_specs)
            elif family == "model":
                from .model_terms import measure_model_family

                rows += measure_model_family(hw, base, model_source, device, dtype, timer, tiny)
            else:
                own = measure_family(hw, base, device, dtype, FamilyGrid.make(quick, tiny), timer,
                                     grid.min_calls, grid.min_time_s, seed)
                rows += [{**r, "family": "project"} for r in own]
            log(f"validate --family: {family} measured in {time.perf_counter() - t0:.0f} s")
    return rows


def get_anchor_reference(hw, families, model_source: str | None, dtype: str) -> tuple[dict | None, str]:
    """(the anchor timings a validation's are compared with, what they are: "profile" or "model terms"). A
    validation of the model family alone compares with the anchors its `calibrate --model` terms were timed with,
    where they have them: the terms absorbed the machine's state of that moment, not of the profile's."""
    if tuple(families) == ("model",) and model_source:
        from .model_terms import get_model_terms

        terms = get_model_terms(hw, model_source, dtype)
        if terms is not None and terms.anchor_s:
            return terms.anchor_s, "model terms"
    return hw.measured.provenance.anchor_s, "profile"


def print_external_report(report: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(Console().width, 150))  # model names and 9 columns, unabridged in logs
    table = Table(title=f"validate --family ({report['dtype']}) on {report['device']}: {report['profile']}")
    table.add_column("family / model", no_wrap=True)
    for col in ("n", "median err", "p90 err", "signed", "as reference impl", "roofline median", "in 90 % interval",
                "interval +-"):
        table.add_column(col, justify="right")

    def add(name, s):
        cov = "-" if s["coverage"] is None else f"{s['coverage']:.0%}"
        width = "-" if s["interval_half_width"] is None else f"{s['interval_half_width']:.0%}"
        ref = s.get("reference_impl")
        ref = "-" if ref is None else f"{ref['median_ape']:.1%} / {ref['p90_ape']:.1%}"
        table.add_row(name, str(s["calibrated"]["n"]), f"{s['calibrated']['median_ape']:.1%}",
                      f"{s['calibrated']['p90_ape']:.1%}", f"{s['median_signed_error']:+.1%}", ref,
                      f"{s['roofline']['median_ape']:.1%}", cov, width)
    for family, s in report["summary"].items():
        add(f"[bold]{family}[/]", s)
        for model in dict.fromkeys(r["model"] for r in report["configs"] if r["family"] == family):
            add(f"  {model}", report["by_model"][model])
    console.print(table)
    anchor = report.get("anchor")
    if anchor and anchor.get("median_ratio"):
        ratios = ", ".join(f"{k} {v:.2f}x" for k, v in anchor["median_ratio"].items())
        then = "the model's terms were" if anchor.get("against") == "model terms" else "the profile was"
        verdict = "" if anchor["matches_profile"] else f" (outside tolerance: the machine ran " \
            f"{get_speed_direction(anchor['median_ratio'])} than when {then} measured; errors measure the machine's " \
            "state as much as the model)"
        console.print(f"machine speed vs {'the model terms' if anchor.get('against') == 'model terms' else 'the profile'}"
                      f" (anchor time now / then): {ratios}{verdict}")
        for family, summary in report["summary"].items():
            if "speed_adjusted" in summary:
                adj = summary["speed_adjusted"]
                console.print(f"  {family}: predictions x {summary['speed_factor']:.2f} (the machine's speed now "
                              "against then): "
                              f"median {adj['median_ape']:.1%}, p90 {adj['p90_ape']:.1%} (a diagnostic only)")
    print_repeatability(report, console)


def print_repeatability(report: dict, console) -> None:
    """validate --remeasure's lines: per family, how far the two measurements of each step lie apart, and the
    prediction's errors against each."""
    for family, s in report["summary"].items():
        if "repeatability" not in s:
            continue
        rep, first, second = s["repeatability"], s["calibrated"], s["calibrated_remeasured"]
        console.print(f"  {family}: the same {rep['n']} steps measured again {report['remeasure_gap_s']:.0f} s later "
                      f"differ by {rep['median_ape']:.1%} (median), {rep['p90_ape']:.1%} (p90), errors of that size "
                      "cannot be told from the machine's movement; prediction against the first pass "
                      f"{first['median_ape']:.1%} / {first['p90_ape']:.1%}, against the second "
                      f"{second['median_ape']:.1%} / {second['p90_ape']:.1%}")


def combine_external_reports(reports: list[dict]) -> dict:
    first = dict(reports[0])
    first["by_dtype"] = {r["dtype"]: r for r in reports}
    return first


def write_external_report(report: dict, out_dir, stem: str) -> Path:
    return write_text_atomic(Path(out_dir) / f"{stem}.json", json.dumps(report, indent=1) + "\n")
