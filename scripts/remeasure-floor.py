"""How far two `validate --family` reports' measurements of the same steps lie apart: the machine's floor under
a prediction's errors. Measures nothing. Steps pair by (family, model, batch, context, new tokens) within a dtype.
`validate --family ... --remeasure` gives the same figure within one run.

    python scripts/remeasure-floor.py A.json B.json
        per family and model: median and p90 of |B / A - 1|, beside each report's prediction errors (each with its
        own profile's prices)
    python scripts/remeasure-floor.py --scan DIR [--within SECONDS] [--family hf]
        every pair of reports under DIR from the same machine folder, in the same dtype, measured at most SECONDS
        apart (default 600) with at least 30 steps of the family in common: a line each; a line for each report
        of `validate --remeasure`, its two passes; then per machine folder the median of the pairs' figures
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from rooflinesim.calibrate.external.external_validate import get_repeatability, pair_remeasured, row_key  # noqa: E402
from rooflinesim.calibrate.validators.validate_summary import ape, summarise  # noqa: E402

MIN_COMMON = 30


def by_dtype(report: dict) -> dict:
    return report.get("by_dtype") or {report["dtype"]: report}


def compare(path_a: str, path_b: str) -> None:
    a, b = (json.load(open(p)) for p in (path_a, path_b))
    print(f"A: {path_a} ({a['created']}, profile {a['profile']})\nB: {path_b} ({b['created']}, profile {b['profile']})")
    for dtype, ra in by_dtype(a).items():
        rb = by_dtype(b).get(dtype)
        if rb is None:
            print(f"{dtype}: only in A")
            continue
        common = {row_key(r) for r in ra["configs"]} & {row_key(r) for r in rb["configs"]}
        first = [r for r in ra["configs"] if row_key(r) in common]
        second = {row_key(r): r for r in rb["configs"] if row_key(r) in common}
        paired = pair_remeasured(first, list(second.values()))
        print(f"{dtype}: {len(paired)} steps in both")
        groups: dict = {}
        for r in paired:
            groups.setdefault(r["family"], []).append(r)
            groups.setdefault(f"  {r['family']}/{r['model']}", []).append(r)
        for name in sorted(groups, key=lambda n: (n.strip().split("/")[0], n.startswith(" "), n)):
            rows = groups[name]
            rep = get_repeatability(rows)
            err_a = summarise([ape(r["predicted_s"], r["measured_s"]) for r in rows])
            err_b = summarise([ape(second[row_key(r)]["predicted_s"], r["remeasured_s"]) for r in rows])
            print(f"  {name:<32} n {rep['n']:>3}  B vs A {rep['median_ape']:6.1%} / {rep['p90_ape']:6.1%}   "
                  f"A's error {err_a['median_ape']:6.1%} / {err_a['p90_ape']:6.1%}   "
                  f"B's error {err_b['median_ape']:6.1%} / {err_b['p90_ape']:6.1%}")


def scan(root: str, within_s: float, family: str) -> None:
    reports, within = [], []
    for path in sorted(Path(root).rglob("*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict) or report.get("kind") != "external-hold-out":
            continue
        for dtype, r in by_dtype(report).items():
            rows = [row for row in r["configs"] if row["family"] == family]
            if rows:
                machine = path.relative_to(root).parts[0]  # calibrate/<machine>/...
                reports.append((machine, path, dtype, dt.datetime.fromisoformat(r["created"]), rows))
            again = [row for row in rows if row.get("remeasured_s") is not None]
            if len(again) >= MIN_COMMON or (again and len(again) == len(rows)):  # validate --remeasure, in one run
                rep = get_repeatability(again)
                ratio = float(np.median([row["remeasured_s"] / row["measured_s"] for row in again]))
                within.append((path.relative_to(root).parts[0], dtype, r["created"], r.get("remeasure_gap_s"), rep,
                               ratio, path.name))
    per_folder: dict = {}
    for (machine, pa, da, ta, ra), (other, pb, db, tb, rb) in itertools.combinations(reports, 2):
        if da != db or machine != other:
            continue
        if tb < ta:
            (pa, ta, ra), (pb, tb, rb) = (pb, tb, rb), (pa, ta, ra)
        gap_s = (tb - ta).total_seconds()
        common = {row_key(r) for r in ra} & {row_key(r) for r in rb}
        if not 0 < gap_s <= within_s or len(common) < MIN_COMMON:
            continue
        paired = pair_remeasured([r for r in ra if row_key(r) in common], [r for r in rb if row_key(r) in common])
        rep = get_repeatability(paired)
        ratio = float(np.median([r["remeasured_s"] / r["measured_s"] for r in paired]))
        per_folder.setdefault(machine, []).append(rep)
        print(f"{machine:<22} {da} {ta:%Y-%m-%d %H:%M} -> {tb:%H:%M} ({gap_s:3.0f} s) n {rep['n']}: "
              f"|B/A - 1| {rep['median_ape']:5.1%} / {rep['p90_ape']:5.1%} (median / p90), B/A {ratio:.3f}  "
              f"{pa.name} | {pb.name}")
    for machine, dtype, created, gap_s, rep, ratio, name in within:
        print(f"{machine:<22} {dtype} {created[:16].replace('T', ' ')} measured twice ({gap_s:.0f} s apart) n "
              f"{rep['n']}: |B/A - 1| {rep['median_ape']:5.1%} / {rep['p90_ape']:5.1%}, B/A {ratio:.3f}  {name}")
    for machine, reps in per_folder.items():
        med = [r["median_ape"] for r in reps]
        p90 = [r["p90_ape"] for r in reps]
        print(f"{machine}: {len(reps)} pairs; per pair median {min(med):.1%}-{max(med):.1%} (median of them "
              f"{np.median(med):.1%}), p90 {min(p90):.1%}-{max(p90):.1%} (median of them {np.median(p90):.1%})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="*")
    parser.add_argument("--scan", default=None, metavar="DIR")
    parser.add_argument("--within", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--family", default="hf")
    args = parser.parse_args(argv)
    if args.scan:
        scan(args.scan, args.within, args.family)
    elif len(args.reports) == 2:
        compare(*args.reports)
    else:
        parser.error("give two reports, or --scan DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
