#!/usr/bin/env python3
"""Price the measured steps of a `validate --family` report with other profiles (no measuring): the spread of the
hold-out error over several calibrations, with the measurements held fixed.

    python scripts/reprice-holdout.py [--per-model] [--rows] [--refit] REPORT.json q1.yaml q2.yaml q3.yaml

`--per-model` adds each model's median / p90 (and signed median) under its family's line; `--rows` adds every
row's measured and priced times and signed error; `--refit` fits each profile's whole-decoder terms again from the
decoder steps it keeps (`fit_decoders.refit_overheads`) before pricing: what a change to that fit does to the
hold-out error, with neither the calibration nor the hold-out measured again.

Models are found by name among the HF hold-outs, the gpt-fast-style ones and the project's family (seed 0); rows of
`calibrate --model` models are skipped. The hf and gptfast rows are priced twice: as if the reference decoder ran
them ("as reference") and with their implementation profile (`--impl hf` / `gptfast`). Each family's line also gives
the share of its measured steps inside the profile's 90 % intervals, and their median upper half-width.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from rooflinesim.calibrate.external.gptfast_model import get_gptfast_specs  # noqa: E402
from rooflinesim.calibrate.fitting.fit_decoders import refit_overheads  # noqa: E402
from rooflinesim.errors import InputError  # noqa: E402
from rooflinesim.calibrate.fitting.holdout import make_hold_out_family  # noqa: E402
from rooflinesim.specs.profiles import load_profile  # noqa: E402
from rooflinesim.calibrate.validators.validate_family import price_row  # noqa: E402


#: the implementation profile each family's rows are priced with (`validate --family` does the same)
IMPLEMENTATION_OF_FAMILY = {"hf": "hf", "gptfast": "gptfast"}


def specs_by_name() -> dict:
    specs = {s.name: s for s in (*get_gptfast_specs(), *make_hold_out_family(0))}
    try:
        from rooflinesim.calibrate.external.hf_holdout import get_hf_specs

        specs.update({s.name: s for s in get_hf_specs()})
    except Exception:  # transformers missing: the hf rows are skipped
        pass
    return specs


def _summary(errors, inside=()) -> str:
    e = np.abs(errors)
    return (f"median {np.median(e):.1%} p90 {np.quantile(e, 0.9):.1%} (n {len(e)})"
            + (f", {np.mean([i for i, _ in inside]):.0%} inside their 90 % intervals (median width "
               f"+{np.median([w for _, w in inside]):.0%})" if len(inside) else ""))


def _inside(priced: dict, measured_s: float) -> list[tuple[bool, float]]:
    """Whether the measured step lies in the priced 90 % interval, and the interval's upper half-width relative to
    the price (log-symmetric: the lower one is narrower); [] where the profile gives none."""
    low, high = priced.get("predicted_low_s"), priced.get("predicted_high_s")
    if low is None or high is None:
        return []
    return [(low <= measured_s <= high, high / priced["predicted_s"] - 1)]


def _refit(hw, path: str):
    """`hw` with each dtype's whole-decoder terms fitted again from its kept decoder steps."""
    dtypes = {dtype: refit_overheads(dtype, prof) for dtype, prof in hw.measured.dtypes.items()}
    for dtype, prof in hw.measured.dtypes.items():
        if not prof.decoder_steps:
            print(f"{path}: {dtype} keeps no decoder steps (measured before they were kept): priced as written")
        else:
            new = dtypes[dtype]
            print(f"{path}: {dtype} refitted: in-model scale {prof.in_model_scale:.3f} -> {new.in_model_scale:.3f}, "
                  f"layer {prof.layer_overhead_s * 1e6:.1f} -> {new.layer_overhead_s * 1e6:.1f} us, in-model layer "
                  f"{prof.in_model_layer_overhead_s * 1e6:.1f} -> {new.in_model_layer_overhead_s * 1e6:.1f} us")
    return hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": dtypes})})


def main() -> int:
    flags = {a for a in sys.argv[1:] if a in ("--per-model", "--rows", "--refit")}
    args = [a for a in sys.argv[1:] if a not in flags]
    per_model, per_row = "--per-model" in flags, "--rows" in flags
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    report = json.loads(Path(args[0]).read_text())
    specs = specs_by_name()
    dtype = report["dtype"]
    print(f"measurements: {args[0]} ({report['device']}, {dtype}, {report['created']})")
    for path in args[1:]:
        hw = load_profile(path)
        if "--refit" in flags:
            try:
                hw = _refit(hw, path)
            except InputError as exc:
                print(f"{path}: {exc}", file=sys.stderr)
                return 2
        errors: dict = {}
        inside: dict = {}
        by_model: dict = {}
        for row in report["configs"]:
            spec = specs.get(row["model"])
            if spec is None or row.get("new_tokens", 1) != 1:
                continue
            impl = IMPLEMENTATION_OF_FAMILY.get(row["family"])
            if impl is not None:  # the family priced as the reference decoder, then with its implementation profile
                priced = price_row(hw, hw, spec, dtype, row["batch"], row["context_tokens"])
                errors.setdefault(f"{row['family']} (as reference)", []).append(
                    priced["predicted_s"] / row["measured_s"] - 1)
            priced = price_row(hw, hw, spec, dtype, row["batch"], row["context_tokens"], impl)
            error = priced["predicted_s"] / row["measured_s"] - 1
            if per_row:
                print(f"    {row['model']:22s} batch {row['batch']:<3d} context {row['context_tokens']:<5d} measured "
                      f"{row['measured_s'] * 1e3:8.2f} ms, priced {priced['predicted_s'] * 1e3:8.2f} ms, {error:+.1%}")
            errors.setdefault(row["family"], []).append(error)
            inside.setdefault(row["family"], []).extend(_inside(priced, row["measured_s"]))
            by_model.setdefault(row["family"], {}).setdefault(row["model"], []).append(error)
        print(f"{path}: " + ", ".join(f"{f} {_summary(e, inside.get(f, ()))}" for f, e in errors.items()))
        for family, models in by_model.items() if per_model else ():
            for model, e in models.items():
                print(f"    {family} {model}: {_summary(e)}, signed median {np.median(e):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
