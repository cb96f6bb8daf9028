"""docs/quickstart.md's three commands run as written and give what the page says they give: a verdict, an interval
and a launch line (issue 24's newcomer path)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from rooflinesim.cli import main

DOC = Path(__file__).resolve().parent.parent / "docs" / "quickstart.md"


def test_the_quickstart_commands_reach_a_pasteable_config_with_its_verdict_and_interval(capsys):
    commands = re.findall(r"^rooflinesim (.+)$", DOC.read_text(encoding="utf-8"), flags=re.M)
    runnable = [c for c in commands if not c.startswith(("plot", "list"))]
    assert len(runnable) == 3
    outputs = []
    for command in runnable:
        assert main(shlex.split(command)) == 0, command
        outputs.append(capsys.readouterr().out)
    predict, sweep, config = outputs
    assert "best k = " in predict and "90 % interval" in predict and "assumed:" in predict
    assert "never, up to" in sweep and "max batch that fits" in sweep
    assert "# verdict: serve:" in config and "# at batch 1:" in config and "# needs:" in config
    assert re.search(r"^vllm serve Qwen/Qwen2\.5-7B --tensor-parallel-size 1 ", config, flags=re.M)
