"""Every default in one place (issue 28, item 3): no front end (cli, serve, explore, plots) writes a default the
scenario owns; each reads `scenario.inputs` / `scenario.groups`, or leaves the option unset for the groups to decide."""

import argparse
import re
from pathlib import Path

import pytest

import rooflinesim
from rooflinesim.cli import build_parser
from rooflinesim.cli.api import get_page_defaults
from rooflinesim.scenario import inputs
from rooflinesim.scenario.groups import FLAT_OPTIONS, get_default
from rooflinesim.units import format_count

PACKAGE = Path(rooflinesim.__file__).resolve().parent
FRONT_ENDS = ("cli", "serve", "explore", "plots")


# --- the command line leaves scenario options unset ------------------------------------------------------------------

def _subcommands(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


@pytest.mark.parametrize("command", ["predict", "sweep", "serve", "plot"])
def test_scenario_options_reach_the_scenario_unset(command):
    """An option of the command line that is a scenario option has no default of its own: argparse leaves it None
    (or a switch off, which is its group's default too) and the group decides."""
    parser = _subcommands(build_parser())[command]
    for action in parser._actions:
        if action.dest not in FLAT_OPTIONS:
            continue
        if action.nargs == 0:  # a switch: off is its field's default
            assert action.default is False and get_default(action.dest) is False, action.dest
        else:
            assert action.default is None, f"--{action.dest} repeats a default: {action.default!r}"


def _front_end_sources():
    for name in FRONT_ENDS:
        for path in sorted((PACKAGE / name).rglob("*")):
            if path.suffix in (".py", ".html", ".js") and "vendor" not in path.parts:
                yield path


def _literals():
    """The quoted literals a front end would write if it repeated one of the scenario's defaults."""
    strings = [inputs.DEFAULT_HARDWARE, inputs.DEFAULT_MODEL, inputs.DEFAULT_ENGINE, inputs.DEFAULT_SWEEP_BATCH,
               inputs.DEFAULT_SWEEP_CONTEXT, inputs.DEFAULT_PROMPT_TOKENS, inputs.DEFAULT_OUTPUT_TOKENS,
               f"0..{inputs.DEFAULT_K_MAX}"]
    out = [re.compile(rf"""["']{re.escape(s)}["']""") for s in strings]
    # a default written out in a help text or as a keyword default
    out += [re.compile(rf"""default[= ]["'(]?{re.escape(v)}\b""") for v in (
        f"{inputs.DEFAULT_ALPHA:g}", f"{inputs.DEFAULT_GPU_MEMORY_UTILIZATION:g}", str(inputs.DEFAULT_SERVE_REQUESTS),
        str(rooflinesim.units.DEFAULT_QUANT_GROUP_SIZE), str(inputs.DEFAULT_CONTEXT_TOKENS),
        str(inputs.DEFAULT_BLOCK_SIZE), format_count(inputs.DEFAULT_CONTEXT_TOKENS))]
    out.append(re.compile(r"\(\s*0\.6,\s*0\.7,\s*0\.8,\s*0\.9\s*\)|\[\s*0\.6,\s*0\.7,\s*0\.8,\s*0\.9\s*\]"))
    return out


def test_no_front_end_writes_a_scenario_default():
    found = []
    for path in _front_end_sources():
        text = path.read_text()
        for pattern in _literals():
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {match.group(0)}")
    assert not found, "front ends repeat the scenario's defaults (read scenario.inputs / scenario.groups):\n" + \
        "\n".join(found)


def test_the_literal_check_sees_a_repeated_default():
    text = (f'p.add_argument("--hw", default="{inputs.DEFAULT_HARDWARE}")\n'
            f'help="(default {inputs.DEFAULT_GPU_MEMORY_UTILIZATION:g})"\nalpha=(0.6, 0.7, 0.8, 0.9)\n')
    hits = [p.pattern for p in _literals() if p.search(text)]
    assert len(hits) == 3


def test_the_explore_page_gets_its_defaults_from_the_scenario():
    defaults = get_page_defaults()
    assert (defaults["hw"], defaults["model"], defaults["alpha"]) == (
        inputs.DEFAULT_HARDWARE, inputs.DEFAULT_MODEL, f"{inputs.DEFAULT_ALPHA:g}")
    assert defaults["ctx"] == format_count(inputs.DEFAULT_CONTEXT_TOKENS)
    assert defaults["attention"] == get_default("attention")
