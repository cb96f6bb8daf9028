#!/usr/bin/env python3
"""The long fuzz campaign of the command line (issue 26): the generator and oracle of tests/fuzz_cli.py, run for many
more cases than CI's budget, printing its seed and count, and every mishandled case with its command line.

    python scripts/fuzz-campaign.py --cases 20000 --seed 2026 [--time-limit 30] [--json findings.json]

Exit status 0 when no case was mishandled, 1 otherwise. Each finding becomes a case in tests/test_fuzz_cli.py's
REGRESSIONS once fixed. See docs/bad-input.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import fuzz_campaign  # noqa: E402
import fuzz_cli  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per case (default 30)")
    parser.add_argument("--json", default=None, help="write the findings here")
    parser.add_argument("--every", type=int, default=500, help="print progress every this many cases")
    args = parser.parse_args()
    machine = f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()})"
    print(f"fuzz campaign: {args.cases} cases, seed {args.seed}, {args.time_limit:g} s per case, on {machine}",
          flush=True)
    start = time.perf_counter()

    def progress(report, case, outcome, problems):
        if problems:
            print(f"FINDING {fuzz_cli.describe(case)}\n    {'; '.join(problems)}", flush=True)
        if report.cases % args.every == 0:
            print(f"  {report.cases} cases, {len(report.findings)} findings, {time.perf_counter() - start:.0f} s",
                  flush=True)

    with tempfile.TemporaryDirectory(prefix="rooflinesim-fuzz-") as folder:
        report = fuzz_campaign.run_campaign(args.cases, args.seed, Path(folder), args.time_limit, progress)
    flags = report.all_flags()
    print(f"done: {report.cases} cases, seed {args.seed}, {report.seconds:.0f} s, {len(report.findings)} findings; "
          f"{len(report.flags_fuzzed & flags)} of {len(flags)} flags fuzzed")
    for command, (count, seconds) in sorted(report.by_command.items()):
        print(f"  {command:22s} {count:6d} cases {seconds:8.1f} s")
    print(f"slowest case {report.slowest[0]:.1f} s: {report.slowest[1]}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "cases": report.cases, "seed": args.seed, "seconds": report.seconds, "machine": machine,
            "findings": [vars(f) for f in report.findings]}, indent=1, default=str))
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
