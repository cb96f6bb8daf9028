"""The command-line fuzzer in CI (issue 26): every subcommand and every flag of the CLI's own argparse parser, set to
hostile values one or two at a time, must end in exit 0 with finite output or exit 2 with one line naming the flag
or file; never a traceback, a raw warning, a hang or a half-written file. The harness, the hostile values and the
oracle are in tests/fuzz_cli.py (read its docstring for what is stubbed and why: calibrate, validate, acceptance
measure and acceptance validate stop before their torch measurements; the other commands run for real on small
base arguments).

Budget: ROOFLINESIM_FUZZ_CASES cases (default 2,000; about 2-4 minutes on a 2-core VM), seed ROOFLINESIM_FUZZ_SEED
(default 26), ROOFLINESIM_FUZZ_TIME_LIMIT_S seconds per case (default 30). The long campaign is
scripts/fuzz-campaign.py; each failure it finds gets a case in REGRESSIONS below.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# tests/ on the path: pytest's rootdir import mode does not always put it there
import fuzz_campaign  # noqa: E402
import fuzz_cli  # noqa: E402

CASES = int(os.environ.get("ROOFLINESIM_FUZZ_CASES", "2000"))
SEED = int(os.environ.get("ROOFLINESIM_FUZZ_SEED", "26"))
TIME_LIMIT_S = float(os.environ.get("ROOFLINESIM_FUZZ_TIME_LIMIT_S", "30"))

#: failures the fuzzer found, as argv with {name} for a file of fuzz_cli.make_fuzz_files; each failed before its fix
REGRESSIONS = [
    # the long campaign on main (seed 2028): a host name of a zero-width space was a TypeError from the resolver
    ["explore", "--host=\u200b", "--allow-remote"],
    # ... and an --acceptance of 300 characters was an OSError (file name too long) from the path check
    ["predict", "--acceptance=" + "a" * 300],
    # (seed 2031) show --json of a spec whose bandwidth is 1e-300 B/s: its ridge point was an infinity in the JSON
    ["show", "{spec:hw-tiny-bandwidth.yaml}", "--json"],
    # argparse hands an option whose value is "--" an empty list: float([]) was a TypeError traceback
    ["serve", "--memory-reserve-gib=--"],
    ["predict", "--batch=--"],
    # an empty --profile was Path("") = ".": "'.: a folder, not a file", naming no flag
    ["acceptance", "validate", "--profile", ""],
    # validate without --profile on a device without a profile: the error now says to give --profile
    ["validate", "--quick"],
    # an output path that is a device: the atomic rename would have replaced /dev/null itself (as root)
    ["sweep", "-o", "/dev/null", "--batch", "1", "--ctx", "1k", "--k", "0..1"],
    ["serve", "--requests", "5", "--policy", "off", "-o", "{fifo}"],
    # an output name the file system refuses: ENAMETOOLONG and a NUL byte were OSError / ValueError tracebacks
    ["serve", "--requests", "5", "--policy", "off", "--output=" + "a" * 300],
    ["sweep", "-o", "grid\x00.csv", "--batch", "1", "--ctx", "1k", "--k", "0..1"],
    ["validate", "--out-dir", "out\x00dir"],
    # --threads beyond a C long long: torch.set_num_threads raised "Overflow when unpacking long long"
    ["validate", "--threads=" + str(2**200)],
    ["acceptance", "measure", "--target", "t", "--draft", "d", "--prompts", "{prompts.txt}", "--threads", str(2**70)],
    # --workers was not capped at the number of runs: with fork, ProcessPoolExecutor launches every worker at once
    ["serve", "--workers", "4096", "--requests", "5", "--rate", "1,2"],
    # an empty --k was "range '' is empty: the end is below the start", naming no flag
    ["sweep", "--k="],
    ["plot", "k", "-o", "k.png", "--k", " "],
    # YAML nested 100,000 deep: libyaml's C composer overflowed the C stack, a segmentation fault that ended the
    # first 20,000-case campaign at case 8,000 (seed 2026)
    ["predict", "--hw", "{deep.json}"],
    ["predict", "--hw", "h100", "--calibration", "{deep.json}"],
    ["show", "{deep-dash.yaml}"],
    ["calibrate", "--merge", "{deep.json}", "{deep-dash.yaml}", "--out", "merged.yaml"],
    # a blank --alpha-per-position was "no acceptance rate given", naming no flag (campaign seed 2026)
    ["predict", "--alpha-per-position", ","],
    ["predict", "--alpha-per-position=\t"],
    # found by the 20,000-case campaign of seed 2026 (after the crash fix above):
    # an unrecognised argument with a line break made a two-line error
    ["calibrate", "--merge", "-21", "  \n ", "-4047"],
    # the error line collapsed the value's whitespace, so it no longer showed what was given
    ["show", "  \n "],
    # plot serve did not check --requests: numpy's "negative dimensions are not allowed" traceback
    ["plot", "serve", "-o", "chart.svg", "--requests", "-1707", "--rate", "4"],
    # a token budget of 1.4e11 made the engine allocate 1 TiB (MemoryError)
    ["serve", "--max-num-batched-tokens", "141526285499", "--requests", "5"],
    ["serve", "--max-num-seqs", str(2**40), "--max-num-batched-tokens", str(2**41), "--requests", "5"],
    # found by the campaign of seed 2027: a control character in a file name (\x1c, \x0b; str.splitlines and some
    # terminals break lines there) split the error line; non-printable characters are now shown escaped
    ["serve", "--calibration", "a\x1cb\x0bc", "--requests", "5"],
    ["validate", "--profile=\x1dh\x98", "--quick"],
    ["acceptance", "validate", "--profile", "s\x0b;f)"],
    # a folder given with a trailing slash is named without it (the oracle now normalises the path; seed 2027)
    ["sweep", "--hw", "{folder-slash}", "--tp", "{deep-dash.yaml}"],
    # campaign seed 2029: "~user/..." for a user that does not exist made Path.expanduser raise RuntimeError
    ["serve", "--model", "~\x13\x04nobody\n/1", "--requests", "5"],
    ["predict", "--hw", "~no-such-user-26/h100.yaml"],
    # ... and a name shown escaped in the error is recognised by the oracle
    ["calibrate", "--shapes-of", "\u00d3\x16\\"],
    # campaign seed 2030: '³' passed str.isdigit() and then failed int() (a ValueError traceback); a negative --k
    # for plot breakdown was refused as "new tokens per sequence", naming no flag
    ["plot", "speedup", "-o", "s.svg", "--draft-tp=\u00b3"],
    ["plot", "breakdown", "-o", "b.svg", "--k", "-350"],
    ["plot", "breakdown", "-o", "b.svg", "--k=2415911065584"],
    # invisible or empty names: the error quotes the value given
    ["serve", "--draft=\u3000"],
    ["show", ""],
    # the five cases of the issue (also in tests/test_hostile_inputs.py)
    ["serve", "--trace", "{dev-zero}"],
    ["acceptance", "from-logs", "{dev-zero}"],
    ["serve", "--arrivals", "gamma", "--cv", "1e-300"],
    ["serve", "--arrivals", "gamma", "--cv", "1e300"],
    ["serve", "--trace", "{binary.jsonl}"],
    ["plot", "serve", "-o", "chart.png", "--rate", "1e9", "--requests", "20"],
    # special and oversized files for every kind of file input
    ["predict", "--hw", "{fifo}"],
    ["predict", "--model", "{loop}"],
    ["predict", "--calibration", "{big}"],
    ["predict", "--acceptance", "{unreadable}"],
    ["show", "{socket}"],
    ["plot", "validation", "-o", "v.png", "--report", "{deep.json}"],
    ["acceptance", "from-logs", "{long-line.log}"],
    ["predict", "--acceptance", "{nan.json}"],
    ["serve", "--trace", "{trace-inf.jsonl}"],
    ["calibrate", "--merge", "{dev-urandom}", "{folder}", "--out", "merged.yaml"],
]


@pytest.fixture(scope="module")
def fuzz_files(tmp_path_factory):
    files = fuzz_cli.make_fuzz_files(tmp_path_factory.mktemp("fuzz-inputs"))
    yield files
    files.close()


def _expand(argv: list[str], files: fuzz_cli.FuzzFiles) -> list[str] | None:
    out = []
    for arg in argv:
        if arg.startswith("{") and arg.endswith("}"):
            name = arg[1:-1]
            if name not in files.paths:
                return None  # e.g. no unreadable /proc file on this system
            arg = files.paths[name]
        out.append(arg)
    return out


@pytest.mark.parametrize("argv", REGRESSIONS, ids=[" ".join(a)[:60] for a in REGRESSIONS])
def test_fuzzer_findings_stay_fixed(argv, fuzz_files, tmp_path):
    argv = _expand(argv, fuzz_files)
    if argv is None:
        pytest.skip("the file of this case does not exist here")
    command = next(c for c in fuzz_cli.all_commands() if tuple(argv[:len(c.path)]) == c.path)
    case = fuzz_cli.Case(command, argv, (), [a.split("=", 1)[-1] for a in argv[len(command.path):]])
    with fuzz_cli.long_work_stubbed():
        outcome, problems = fuzz_cli.run_and_check(case, tmp_path, TIME_LIMIT_S)
    assert not problems, (fuzz_cli.describe(case), problems, outcome.err)


def test_the_walk_finds_every_subcommand_and_flag():
    """The fuzzer is generated from the parser: nested subcommands and flags added later are found."""
    commands = {" ".join(c.path): c for c in fuzz_cli.all_commands()}
    assert {"predict", "sweep", "serve", "plot", "list", "show", "calibrate", "validate", "acceptance from-logs",
            "acceptance measure", "acceptance validate"} <= set(commands)
    assert {"--cv", "--trace", "--rate", "--workers", "--seed"} <= {f.name for f in commands["serve"].optionals}
    assert [f.dest for f in commands["acceptance from-logs"].positionals] == ["file"]
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers().add_parser("new")
    sub.add_argument("--brand-new-flag", type=float)
    assert [f.name for f in fuzz_cli.walk_parser(parser)[0].flags] == ["--brand-new-flag"]


def test_the_oracle_catches_what_it_must(tmp_path):
    """The oracle is not vacuous: a traceback, a raw warning, two error lines, NaN output and a leftover temporary
    file are each reported."""
    command = next(c for c in fuzz_cli.all_commands() if c.path == ("predict",))
    case = fuzz_cli.Case(command, ["predict", "--batch", "x"], (), ["x"])
    bad = [
        fuzz_cli.Outcome(1, "", "Traceback (most recent call last):\n  ZeroDivisionError: float division by zero\n", 0.1),
        fuzz_cli.Outcome(0, "1.0\n", "/x/plots/serve.py:60: UserWarning: identical low and high xlims\n", 0.1),
        fuzz_cli.Outcome(2, "", "rooflinesim: error: --batch is bad\nmore\n", 0.1),
        fuzz_cli.Outcome(0, '{"step_time_s": NaN}\n', "", 0.1),
        fuzz_cli.Outcome(2, "", "rooflinesim: error: float division by zero\n", 0.1),
        fuzz_cli.Outcome(None, "", "", 30.0, timed_out=True),
    ]
    for outcome in bad:
        assert fuzz_cli.check_outcome(case, outcome, {}, {}), outcome
    good = fuzz_cli.Outcome(2, "", "rooflinesim: error: --batch 'x': not a count\n", 0.1)
    assert fuzz_cli.check_outcome(case, good, {}, {}) == []
    assert fuzz_cli.check_outcome(case, fuzz_cli.Outcome(0, "ok\n", "", 0.1), {}, {".grid.csv.x.tmp": (1, 1)})


def test_fuzz_every_flag(tmp_path):
    """The CI budget: CASES generated cases over every subcommand and flag, 0 mishandled."""
    report = fuzz_campaign.run_campaign(CASES, SEED, tmp_path, TIME_LIMIT_S)
    print(f"fuzz: {report.cases} cases, seed {SEED}, {report.seconds:.0f} s, {len(report.findings)} findings; "
          f"slowest {report.slowest[0]:.1f} s: {report.slowest[1]}")
    assert report.cases >= CASES
    if CASES >= len(report.all_flags()):  # the first round gives every flag a case
        assert report.flags_fuzzed >= report.all_flags(), report.all_flags() - report.flags_fuzzed
    findings = "\n".join(f"{f.argv}\n    {'; '.join(f.problems)}" for f in report.findings[:20])
    assert not report.findings, f"{len(report.findings)} mishandled cases (seed {SEED}):\n{findings}"
