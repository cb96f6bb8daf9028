"""The JSON contract (issue 24): one key, one unit; a versioned contract; every key documented with its unit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rooflinesim.cli import main
from rooflinesim.pricing.predict import JSON_SCHEMA_VERSION

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli-and-json.md"
PROFILE = Path(__file__).resolve().parent / "data" / "profiles" / "cpu-intel-xeon-2c.yaml"


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_throughput_is_aggregate_in_tokens_per_s_and_per_sequence_where_named(capsys):
    """At batch 16 speculative.tokens_per_s read 55.6 (one sequence) against decode.tokens_per_s 467.7 (the batch):
    an apparent 8x slowdown from a 1.5x speedup."""
    d = _json(capsys, ["predict", "--batch", "16", "--json"])
    dec, spec = d["decode"], d["speculative"]
    assert spec["tokens_per_s"] / dec["tokens_per_s"] == pytest.approx(spec["speedup"], rel=1e-9)
    assert spec["tokens_per_s_per_sequence"] / dec["tokens_per_s_per_sequence"] == pytest.approx(spec["speedup"])
    assert dec["tokens_per_s"] == pytest.approx(16 * dec["tokens_per_s_per_sequence"])
    assert spec["tokens_per_s"] == pytest.approx(16 * spec["tokens_per_s_per_sequence"])
    pre = d["prefill"]
    assert pre["tokens_per_s"] == pytest.approx(16 * pre["tokens_per_s_per_sequence"])


def test_predict_and_sweep_json_carry_the_contract_version(capsys):
    assert _json(capsys, ["predict", "--json"])["schema_version"] == JSON_SCHEMA_VERSION
    assert _json(capsys, ["sweep", "--batch", "1,2", "--ctx", "1k", "--json"])["schema_version"] == JSON_SCHEMA_VERSION


def _keys(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _keys(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        for item in value:
            yield from _keys(item, prefix + "[]")
    else:
        yield prefix


def _documented(command: str) -> set[str]:
    """Every `key` in the first column of the tables under docs/cli-and-json.md's "`<command> --json`" heading."""
    sections = re.split(r"^### ", DOC.read_text(encoding="utf-8"), flags=re.M)
    text = "".join(s for s in sections if s.startswith(f"`{command} --json`"))
    return set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.M))


@pytest.mark.parametrize("argv", [
    ["predict", "--batch", "16", "--json"],
    ["predict", "--hw", "cpu-generic", "--calibration", str(PROFILE), "--model", "tiny-llama-123m", "--draft",
     "tiny-draft-2l", "--ctx", "256", "--json"],
    ["sweep", "--batch", "1,2", "--ctx", "1k", "--json"],
])
def test_every_json_key_is_documented_with_a_unit(capsys, argv):
    data = _json(capsys, argv)
    keys = {re.sub(r"\.(fp32|tf32|bf16|fp16|fp8|int8|int4)$", ".<dtype>", k) for k in _keys(data)}
    keys = {re.sub(r"^(schedules\[\]\.trtllm\.draft_len_schedule(_older_releases)?)\..*", r"\1", k) for k in keys}
    keys = {re.sub(r"^assumed\..*", "assumed", k) for k in keys}  # one object: input -> value assumed
    missing = keys - _documented(argv[0])
    assert not missing, f"undocumented {argv[0]} JSON keys: {sorted(missing)}"
