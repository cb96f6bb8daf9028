"""A fuzz campaign over the command line: the cases of tests/fuzz_cli.py drawn for every flag, run and judged, the
findings collected (used by tests/test_fuzz_cli.py and scripts/fuzz-campaign.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st

try:  # tests/ on sys.path (the test and the campaign script put it there)
    from fuzz_cli import (Command, Flag, all_commands, cases, describe, long_work_stubbed, make_fuzz_files,
                          restore_fuzz_files, run_and_check, snapshot)
except ImportError:
    from tests.fuzz_cli import (Command, Flag, all_commands, cases, describe, long_work_stubbed, make_fuzz_files,
                                restore_fuzz_files, run_and_check, snapshot)


@dataclass
class Finding:
    argv: str
    problems: list[str]
    code: object
    err: str
    seconds: float


@dataclass
class Report:
    seed: int
    cases: int = 0
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    flags_fuzzed: set = field(default_factory=set)
    by_command: dict = field(default_factory=dict)  # command: (cases, seconds)
    slowest: tuple = (0.0, "")

    def all_flags(self) -> set:
        return {(c.path, f.name) for c in all_commands() for f in c.flags if f.takes_value or not f.positional}


def run_campaign(n_cases: int, seed: int, folder: Path, time_limit_s: float = 30.0, progress=None) -> Report:
    """At least `n_cases` cases. Every flag of every command (in an order shuffled by `seed`) gets its own small
    hypothesis run, seeded from `seed` and its position, of about n_cases / (number of flags) cases, in which it is
    set to hostile values and a second flag of the same command is drawn half of the time; rounds repeat (with new
    seeds) until `n_cases` are done. So every flag is fuzzed, whatever the draw. Findings are collected, not
    raised, so one campaign reports them all."""
    import random

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    commands = all_commands()
    pairs = [(c, f) for c in commands for f in c.flags if f.takes_value or not f.positional]
    random.Random(seed).shuffle(pairs)
    workdir = folder / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    state = {"files": make_fuzz_files(folder / "inputs")}
    state["reference"] = snapshot(state["files"].folder)
    report = Report(seed)
    start = time.perf_counter()

    def fuzz_one_flag(command: Command, flag: Flag, examples: int, run_seed: int) -> None:
        @hypothesis_seed(run_seed)
        @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def one(data):
            case = data.draw(cases(command, flag, state["files"]))
            outcome, problems = run_and_check(case, workdir, time_limit_s)
            report.cases += 1
            for f in case.fuzzed:
                report.flags_fuzzed.add((command.path, f.name))
            name = " ".join(command.path)
            count, seconds = report.by_command.get(name, (0, 0.0))
            report.by_command[name] = (count + 1, round(seconds + outcome.seconds, 3))
            if outcome.seconds > report.slowest[0]:
                report.slowest = (outcome.seconds, describe(case))
            if problems:
                report.findings.append(Finding(describe(case), problems, outcome.code, outcome.err[-600:],
                                               outcome.seconds))
            state["files"], state["reference"] = restore_fuzz_files(state["files"], state["reference"])
            if progress is not None:
                progress(report, case, outcome, problems)

        one()

    with long_work_stubbed():
        try:
            round_number = 0
            while report.cases < n_cases:
                left = n_cases - report.cases
                base, extra = divmod(left, len(pairs))  # every flag gets a case whenever left >= the flags
                for index, (command, flag) in enumerate(pairs):
                    examples = base + (index < extra)
                    if examples and report.cases < n_cases:
                        fuzz_one_flag(command, flag, examples, seed * 1_000_003 + round_number * 10_007 + index)
                round_number += 1
        finally:
            state["files"].close()
    report.seconds = time.perf_counter() - start
    return report
