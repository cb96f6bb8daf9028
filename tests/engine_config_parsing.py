"""Parse the launch text `serve --emit-config` prints, as each engine's own command line would: the flags of the
command (shlex, as a shell splits them) and the JSON / YAML speculative config, checked against the keys the
engines document (`engine_configs.DOCUMENTED_KEYS`)."""

from __future__ import annotations

import json
import re
import shlex

import yaml

from rooflinesim.serve.engine_configs import DOCUMENTED_KEYS


def command_line(text: str, program: str) -> list[str]:
    """The argv of the one line that runs `program` (comments and the here-document skipped)."""
    lines = [line for line in text.splitlines() if line.startswith(program)]
    assert len(lines) == 1, f"one {program} line expected in:\n{text}"
    return shlex.split(lines[0])


def flags(argv: list[str], first: int) -> dict[str, str]:
    """--flag value pairs after the first `first` words; every flag takes one value here."""
    rest = argv[first:]
    assert len(rest) % 2 == 0, rest
    pairs = dict(zip(rest[::2], rest[1::2]))
    assert all(key.startswith("--") for key in pairs), pairs
    return pairs


def vllm_speculative_config(text: str) -> dict:
    argv = command_line(text, "vllm serve")
    options = flags(argv, 3)
    assert set(options) <= DOCUMENTED_KEYS["vllm_flags"], set(options) - DOCUMENTED_KEYS["vllm_flags"]
    config = json.loads(options["--speculative-config"])
    assert set(config) <= DOCUMENTED_KEYS["vllm_speculative_config"], set(config)
    return config


def trtllm_speculative_config(text: str) -> dict:
    argv = command_line(text, "trtllm-serve")
    options = flags(argv, 2)
    assert set(options) <= DOCUMENTED_KEYS["trtllm_flags"], set(options) - DOCUMENTED_KEYS["trtllm_flags"]
    body = re.search(r"<<'EOF'\n(.*?)\nEOF\n", text, flags=re.S)
    assert body and options["--extra_llm_api_options"] == "spec.yaml"
    config = yaml.safe_load(body.group(1))["speculative_config"]
    assert set(config) <= DOCUMENTED_KEYS["trtllm_speculative_config"], set(config)
    return config


def sglang_flags(text: str) -> dict[str, str]:
    argv = command_line(text, "python -m sglang.launch_server")
    options = flags(argv, 3)
    assert set(options) <= DOCUMENTED_KEYS["sglang_flags"], set(options) - DOCUMENTED_KEYS["sglang_flags"]
    return options
