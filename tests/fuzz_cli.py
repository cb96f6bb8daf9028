"""The command-line fuzzer (issue 26), shared by tests/test_fuzz_cli.py (the CI budget) and scripts/fuzz-campaign.py
(the long campaign).

It is generated from the CLI's own argparse definitions: `walk_parser` visits every subcommand (nested ones such as
`acceptance from-logs` too) and lists every flag and positional, so a flag added later is fuzzed without editing this
file. A case is one subcommand with one or two of its flags (and its required arguments) set to hostile values:
empty and whitespace strings, unicode, NaN and infinities, 1e+-300, negatives, zero, integers beyond 64 bits,
malformed lists, ranges and specs, and paths to special files (/dev/zero, /dev/urandom, a FIFO, a folder, a binary
file, a 100 MB file, an unreadable file, a symbolic-link loop, ...).

Each case runs in-process (`rooflinesim.cli.main(argv)`, stdout and stderr captured, SystemExit caught) under a time
limit, in an empty working folder, and must end one of two ways (`check_outcome`):
- exit 0 with finite output: no NaN or Infinity in the text or JSON printed, stderr only the tool's own
  'warning:' lines;
- exit 2 with exactly one stderr line, 'rooflinesim: error: ...', that names the flag or the file (or the value) it
  refuses;
and never a traceback, a raw library warning, a hang, a temporary or half-written file left behind, or (on exit 2)
any file written.

What is not run for real: `calibrate`, `validate`, `acceptance measure` and `acceptance validate` time torch
kernels or train models for minutes. Their argument checks, file reads and output checks run for real; the
measuring entry point they call once everything is validated (`LONG_WORK`) is replaced by a stub that ends the case
as "accepted", so a case costs milliseconds, not minutes. Commands that do run get cheap base arguments first
(`BASE_ARGS`: a small grid, 20 requests); the fuzzed flags come after them, and argparse keeps the last value, so
the fuzzed value is the one used. `ROOFLINESIM_SERVE_MAX_STEPS` keeps any serve sweep a case asks for small.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from rooflinesim.cli import one_line

try:  # tests/ on sys.path (the test and the campaign script put it there); make_fuzz_files and restore_fuzz_files
    # are used through this module
    from fuzz_files import FuzzFiles, clean_folder, make_fuzz_files, restore_fuzz_files, snapshot  # noqa: F401
except ImportError:
    from tests.fuzz_files import FuzzFiles, clean_folder, make_fuzz_files, restore_fuzz_files, snapshot  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

#: the measuring entry points of the torch commands (module, function): replaced by a stub (see the docstring)
LONG_WORK = [
    ("rooflinesim.calibrate.measure.bench", "run_calibration"),
    ("rooflinesim.calibrate.validators.validate", "run_validation"),
    ("rooflinesim.calibrate.validators.serve_validate", "run_serve_validation"),
    ("rooflinesim.calibrate.measure.acceptance_measure", "run_measure_command"),
    ("rooflinesim.calibrate.validators.acceptance_validate", "run_acceptance_validation"),
]

#: cheap arguments given before the fuzzed ones, per command path
BASE_ARGS = {
    ("sweep",): ["--batch", "1,8", "--ctx", "1k,4k", "--k", "0..3"],
    ("serve",): ["--requests", "20", "--rate", "4", "--policy", "off,fixed:2", "--workers", "1"],
    # one value each, so that every kind accepts them (roofline, k and breakdown take one batch or k); SVG is the
    # cheaper format to draw
    ("plot",): ["-o", "chart.svg", "--batch", "8", "--ctx", "4k", "--k", "2", "--requests", "20", "--rate", "4",
                "--policy", "off,fixed:2"],
}
#: plausible values of positionals and flags by dest, so that a hostile value meets otherwise valid arguments
PLAUSIBLE = {
    "name": ["h100", "llama-3.1-8b", "a100"],
    "file": [str(DATA / "engine-logs" / "vllm-v1.log"), str(DATA / "engine-logs" / "vllm-metrics.prom")],
    "hw": ["h100", "a100", "cpu-generic"],
    "model": ["llama-3.1-8b", "tiny-llama-123m", str(DATA / "llama-hf-config.json")],
    "draft": ["llama-3.2-1b", "tiny-draft-2l"],
    "report": [str(DATA / "validation-example.json")],
    "acceptance": ["eagle-llama3-8b-mtbench"],
}
#: the environment of every case: a serve sweep stays under 200,000 engine steps (well under a second)
CASE_ENV = {"ROOFLINESIM_SERVE_MAX_STEPS": "200000"}

NUMBERS = ["0", "-0", "1", "2", "4", "-1", "-4", "0.5", "3.7", "1e300", "-1e300", "1e-300", "-1e-300", "1e309", "nan",
           "NaN", "-nan", "inf", "-inf", "Infinity", "+inf", str(2**63), str(2**64), str(-(2**64)), str(2**200),
           "0x10", "1_000", "1e9", "4096", "99999999999", "1k", "1M", "1G", "4kk", "½", "٣", "1,5"]
BLANKS = ["", " ", "\t", "\n", "  \n ", "\x00", "\u200b", "\u3000"]
MALFORMED = [",", ",,", "1,", ",1", "1,,2", "1..", "..4", "4..1", "1..nan", "0..0", "-4..-1", "1..1e300", "1...4",
             "a..b", "1;2", "[1,2]", "1 2", "1,2,nan", "1..inf", "1e-300..1e300", ":", "::", "uniform:", "uniform:1:",
             "uniform:9:1", "uniform:0:0", "lognormal:1:2:3:4", "lognormal:512:1e300", "lognormal:0:1",
             "lognormal:512:nan", "fixed:", "fixed:-1", "fixed:1e9", "fixed:nan", "dynamic:", "dynamic:0",
             "dynamic:1e9", "adaptive:-1", "off-above:nan:2", "off-above:1:", "schedule:", "schedule:1=",
             "schedule:=4", "schedule:1=4,1=2", "schedule:0=4", "off,off", "off,,dynamic", "1=4", "fp33", "bf16,",
             "int4:0", "cuda:99", "cpu,cuda", "a" * 5000]
UNICODE = ["é", "日本語", "🚀", "\u202eevil", "ｈ１００", "Ω", "\udcff", "nul\x00byte", "../../etc/passwd", "~", "-",
           "--", "-x", "--help"]


# --- the parser, walked ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    name: str  # the option string used ("--rate"), or the positional's dest
    dest: str
    positional: bool
    takes_value: bool  # False: store_true / store_false / count
    nargs: object
    choices: tuple | None
    default: object
    metavar: str | None
    required: bool
    option_strings: tuple[str, ...] = ()

    def spellings(self) -> set[str]:
        """How an error line may name it: --max-num-seqs, max-num-seqs, max_num_seqs, the metavar."""
        bare = self.name.lstrip("-")
        names = {self.name, bare, bare.replace("-", "_"), bare.replace("-", " "), self.dest, self.dest.replace("_", " ")}
        if self.metavar:
            names.add(str(self.metavar))
        names.update(f"({o})" for o in self.option_strings)  # "request log (-o)"
        return {n for n in names if n}


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    flags: tuple[Flag, ...]

    @property
    def optionals(self) -> tuple[Flag, ...]:
        return tuple(f for f in self.flags if not f.positional)

    @property
    def positionals(self) -> tuple[Flag, ...]:
        return tuple(f for f in self.flags if f.positional)


def walk_parser(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Command]:
    """Every leaf subcommand of `parser` with its flags and positionals (help excluded)."""
    commands: list[Command] = []
    flags: list[Flag] = []
    subparsers = None
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            subparsers = action
            continue
        positional = not action.option_strings
        name = action.dest if positional else max(action.option_strings, key=len)
        takes_value = action.nargs != 0
        flags.append(Flag(name, action.dest, positional, takes_value, action.nargs,
                          tuple(action.choices) if action.choices else None, action.default,
                          action.metavar if isinstance(action.metavar, str) else None,
                          bool(action.required) if not positional else action.nargs not in ("?", "*"),
                          tuple(action.option_strings)))
    if subparsers is None:
        return [Command(path, tuple(flags))]
    for name, sub in subparsers.choices.items():
        commands.extend(walk_parser(sub, path + (name,)))
    return commands


def all_commands() -> list[Command]:
    from rooflinesim.cli import build_parser

    return walk_parser(build_parser())


# --- values --------------------------------------------------------------------------------------------------------


def hostile_values(files: FuzzFiles) -> st.SearchStrategy[str]:
    floats = st.floats(allow_nan=True, allow_infinity=True).map(repr)
    return st.one_of(
        st.sampled_from(NUMBERS), st.sampled_from(BLANKS), st.sampled_from(MALFORMED), st.sampled_from(UNICODE),
        st.sampled_from(files.values()), floats, st.integers(-(2**70), 2**70).map(str),
        st.text(max_size=12), st.lists(st.sampled_from(NUMBERS + [""]), min_size=2, max_size=4).map(",".join),
        st.tuples(st.sampled_from(NUMBERS), st.sampled_from(NUMBERS)).map("..".join),
    )


def plausible_values(flag: Flag) -> list[str]:
    values = [str(c) for c in flag.choices or ()]
    values += PLAUSIBLE.get(flag.dest, [])
    if flag.default not in (None, False, True, argparse.SUPPRESS) and not isinstance(flag.default, (list, tuple)):
        values.append(str(flag.default))
    return values


@st.composite
def flag_argv(draw, flag: Flag, files: FuzzFiles, hostile: bool = True) -> list[str]:
    """The arguments that set `flag`: hostile (mostly) or plausible values."""
    if not flag.takes_value:
        return [] if flag.positional else [flag.name]
    plausible = plausible_values(flag)
    pool = hostile_values(files)
    if plausible and (not hostile or draw(st.integers(0, 4)) == 0):
        pool = st.sampled_from(plausible)
    count = draw(st.integers(1, 3)) if flag.nargs in ("+", "*") else 1
    values = [draw(pool) for _ in range(count)]
    if flag.positional:
        return values
    if count == 1 and draw(st.booleans()):
        return [f"{flag.name}={values[0]}"]
    return [flag.name, *values]


@dataclass
class Case:
    command: Command
    argv: list[str]
    fuzzed: tuple[Flag, ...]
    values: list[str]


@st.composite
def cases(draw, command: Command, first: Flag | None, files: FuzzFiles) -> Case:
    """`command` with `first` (drawn when None) and maybe a second flag set to hostile values, its required
    positionals and options plausible or hostile, after the command's cheap base arguments."""
    fuzzed = [first] if first is not None else []
    others = [f for f in command.flags if f not in fuzzed and (f.takes_value or not f.positional)]
    if others and (not fuzzed or draw(st.booleans())):
        fuzzed.append(draw(st.sampled_from(others)))
    base = list(BASE_ARGS.get(command.path[:1], []))
    argv = list(command.path) + base
    values: list[str] = []
    positional_args: list[str] = []
    for flag in command.positionals:
        if flag.takes_value:
            given = draw(flag_argv(flag, files, hostile=flag in fuzzed))
            positional_args += given
            values += given
    options: list[str] = []
    for flag in command.optionals:
        if flag in fuzzed or (flag.required and not set(flag.option_strings) & set(base)):
            given = draw(flag_argv(flag, files, hostile=flag in fuzzed))
            options += given
            values += [v.split("=", 1)[-1] for v in given]
    if positional_args and any(p.startswith("-") for p in positional_args):
        argv += options + ["--"] + positional_args  # a value like "-x" stays a positional
    else:
        argv += positional_args + options
    return Case(command, argv, tuple(fuzzed), values)


# --- running one case ----------------------------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised in the case by the timer (a BaseException, so no `except Exception` in the code under test eats it)."""


class ReachedLongWork(BaseException):
    """Raised by the stub of a LONG_WORK entry point: the case passed every check before the long work."""


@dataclass
class Outcome:
    code: object
    out: str
    err: str
    seconds: float
    timed_out: bool = False
    reached_long_work: bool = False
    crash: str | None = None  # an exception that escaped main(): its type and message


def _stub(*args, **kwargs):
    raise ReachedLongWork()


@contextlib.contextmanager
def long_work_stubbed():
    """The LONG_WORK entry points stubbed, and the CLI's parser built once: `main` builds it on every call (about
    30 ms, a third of a typical case), and an argparse parser keeps no state between parses."""
    import functools
    import importlib

    import rooflinesim.cli as cli

    saved = [(cli, "build_parser", cli.build_parser)]
    cli.build_parser = functools.lru_cache(maxsize=1)(cli.build_parser)
    for module_name, name in LONG_WORK:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # torch missing: the command refuses itself before the long work
            continue
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, _stub)
    # `explore` checks its host and port and binds, then serves until stopped: the serving loop is its long work
    # (stubbed like the measurements), and no case may open a browser
    import webbrowser

    from rooflinesim.explore import server as explore_server

    saved += [(explore_server._Server, "serve_forever", explore_server._Server.serve_forever),
              (webbrowser, "open", webbrowser.open)]
    explore_server._Server.serve_forever = _stub
    webbrowser.open = lambda *args, **kwargs: False
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def _on_alarm(signum, frame):
    raise CaseTimeout()


def run_case(argv: list[str], workdir: Path, time_limit_s: float) -> Outcome:
    """`main(argv)` in `workdir`, output captured, under a wall-clock limit (SIGALRM: the main thread only)."""
    from rooflinesim.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_stdin = os.getcwd(), sys.stdin
    old_env = {k: os.environ.get(k) for k in CASE_ENV}
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else None
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    outcome = Outcome(None, "", "", 0.0)
    start = time.perf_counter()
    try:
        os.chdir(workdir)
        os.environ.update(CASE_ENV)
        sys.stdin = io.StringIO("")
        signal.setitimer(signal.ITIMER_REAL, time_limit_s)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                outcome.code = main(list(argv))
            except SystemExit as exc:
                outcome.code = exc.code
    except CaseTimeout:
        outcome.timed_out = True
    except ReachedLongWork:
        outcome.reached_long_work = True
    except Exception as exc:  # noqa: BLE001 - any escape is a finding
        outcome.crash = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdin = old_stdin
        os.chdir(old_cwd)
        if torch_threads is not None:  # a case's --threads must not slow the cases after it
            torch.set_num_threads(torch_threads)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    outcome.seconds = time.perf_counter() - start
    outcome.out, outcome.err = out.getvalue(), err.getvalue()
    return outcome


# --- the oracle ----------------------------------------------------------------------------------------------------

_NON_FINITE = re.compile(r"(?<![\w.])[-+]?(nan|NaN|inf|Infinity)(?![\w])")
_RAW_WARNING = re.compile(r"\b\w*(Warning|Error):|Traceback|File \"|\.py:\d+")


#: the tool's words for flags whose names are abbreviations (--ctx is "context" in messages)
SYNONYMS = {"ctx": ["context"], "hw": ["hardware", "device"], "k": ["draft length", "drafts", " k "], "tp": ["tensor"],
            "draft_tp": ["tensor", "draft"], "alpha": ["acceptance"], "cv": ["cv"], "kind": ["plot"],
            "what": ["list"], "draft": ["model", "draft"], "slo_ttft": ["slo", "ttft"], "slo_tpot": ["slo", "tpot"], "dask": ["dask"]}
#: words of a flag's name too common in messages to count as naming it
_GENERIC_WORDS = {"size", "file", "tokens", "with", "from", "first", "step", "steps", "num", "max", "per", "out"}


def _flag_words(flag: Flag) -> set[str]:
    words = {w for w in re.split(r"[-_ ]", flag.dest) if len(w) >= 4 and w not in _GENERIC_WORDS}
    return words | set(SYNONYMS.get(flag.dest, []))


def _names_its_input(line: str, case: Case) -> bool:
    """The error line names a flag given (its option string, dest or the tool's word for it), any option of the
    command with its dashes (a missing --profile), a file or value given, or is argparse's usage error."""
    lowered = line.lower()
    given = [f for f in case.command.flags
             if f.positional or f.name in case.argv or any(a.startswith(f.name + "=") for a in case.argv)]
    for flag in given:
        if any(s.lower() in lowered for s in flag.spellings() if len(s) > 1):
            return True
        if any(w.lower() in lowered for w in _flag_words(flag)):
            return True
    if any(f.name in line for f in case.command.optionals):
        return True
    for value in case.values:
        if repr(value) in line or one_line(value) in line:  # the CLI shows control characters escaped
            return True
        normalised = os.path.normpath(value) if value.strip() else value  # "a-folder/" is shown as "a-folder"
        for text in [value, value.strip(), normalised] + [part.strip() for part in re.split(r"\.\.|,|:", value)]:
            if text and (text in line or repr(text)[1:-1] in line):
                return True
    return "unrecognized arguments" in lowered or "the following arguments are required" in lowered


def check_outcome(case: Case, outcome: Outcome, before: dict, after: dict) -> list[str]:
    """The problems of one case (empty: handled). See the module docstring for the rules."""
    problems = []
    if outcome.timed_out:
        problems.append(f"hang: still running after {outcome.seconds:.1f} s")
    if outcome.crash:
        problems.append(f"crash: {outcome.crash}")
    if _RAW_WARNING.search(outcome.err.replace("rooflinesim: error:", "")):
        problems.append(f"traceback or raw warning on stderr: {outcome.err[-400:]!r}")
    leftovers = [p for p in after if p.endswith(".tmp") or ".rooflinesim-probe." in p]
    if leftovers:
        problems.append(f"temporary files left behind: {leftovers}")
    if outcome.timed_out or outcome.crash or outcome.reached_long_work:
        return problems
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    if outcome.code in (0, None):
        # the tool's own warnings and comments, the "assumed:" line (every input not given, with its value) and the
        # notes of --emit-config (why its verdict is the step model's alone)
        bad = [line for line in lines if not line.lstrip().lower().startswith(("warning", "#", "assumed:", "note:"))]
        if bad:
            problems.append(f"exit 0 with stderr lines that are not warnings: {bad[:3]}")
        printed = outcome.out
        for value in sorted(case.values, key=len, reverse=True):  # a value echoed back (a file named "Infinity")
            if value.strip():
                printed = printed.replace(value, "")
        found = _NON_FINITE.search(printed)
        if found:
            problems.append(f"non-finite number in the output: {printed[max(found.start() - 80, 0):found.end() + 40]!r}")
        if outcome.out.lstrip().startswith(("{", "[")):
            try:
                json.loads(outcome.out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            except ValueError as exc:
                if "Extra data" not in str(exc):
                    problems.append(f"stdout is not finite JSON: {exc}")
    elif outcome.code == 2:
        if len(lines) != 1 or not lines[0].startswith("rooflinesim: error: "):
            problems.append(f"exit 2 without exactly one error line: {lines[:4]}")
        elif not _names_its_input(lines[0], case):
            problems.append(f"the error names neither the flag nor the file: {lines[0]!r}")
        if after != before:
            changed = sorted(set(after.items()) ^ set(before.items()))
            problems.append(f"exit 2 but the working folder changed: {changed[:4]}")
    else:
        problems.append(f"exit code {outcome.code!r}: {outcome.err[-300:]!r}")
    return problems


def run_and_check(case: Case, workdir: Path, time_limit_s: float) -> tuple[Outcome, list[str]]:
    """Run one case in an emptied `workdir` and judge it."""
    import multiprocessing

    clean_folder(workdir)
    before = snapshot(workdir)
    outcome = run_case(case.argv, workdir, time_limit_s)
    problems = check_outcome(case, outcome, before, snapshot(workdir))
    left = multiprocessing.active_children()  # joins the finished ones; the rest outlived their command
    if left:
        problems.append(f"{len(left)} child processes still running after the command")
        for child in left:
            child.kill()
            child.join(5)
    return outcome, problems


def describe(case: Case) -> str:
    return "rooflinesim " + " ".join(repr(a) if (not a or re.search(r"[\s'\"\\]", a) or not a.isprintable()) else a
                                     for a in case.argv)
