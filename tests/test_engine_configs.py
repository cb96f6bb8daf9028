"""Paste-ready engine configs (issue 24): full launch lines with Hugging Face ids and the tensor-parallel degree,
the engine version each key needs, schedules that each engine's documented rules accept, and the disable threshold
that `serve` finds under load."""

from __future__ import annotations

import json
import math

import pytest

from rooflinesim.cli import main
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import ServeConfig
from rooflinesim.serve.engine_configs import emit_engine_config

try:  # tests/ on sys.path (pytest's default rootdir/prepend import mode)
    from engine_config_parsing import command_line, sglang_flags, trtllm_speculative_config, vllm_speculative_config
except ImportError:  # tests/ imported as a package
    from tests.engine_config_parsing import (
        command_line, sglang_flags, trtllm_speculative_config, vllm_speculative_config,
    )


@pytest.fixture(scope="module")
def seventy_b():
    return build_scenario("h100", "llama-3.1-70b", tp=4, draft="llama-3.2-1b", alpha=0.8, k_values=[0])


def test_launch_lines_name_hugging_face_ids_and_tensor_parallelism(seventy_b):
    """Configs used the tool's short names (llama-3.1-8b), omitted the target and --tensor-parallel-size, and the
    SGLang line lacked --model-path and --tp."""
    text = emit_engine_config(seventy_b, "vllm", ServeConfig(), 2048)
    argv = command_line(text, "vllm serve")
    assert argv[2] == "meta-llama/Llama-3.1-70B" and argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert vllm_speculative_config(text)["model"] == "meta-llama/Llama-3.2-1B"
    options = sglang_flags(emit_engine_config(seventy_b, "sglang", ServeConfig(), 2048))
    assert options["--model-path"] == "meta-llama/Llama-3.1-70B" and options["--tp"] == "4"
    assert options["--speculative-draft-model-path"] == "meta-llama/Llama-3.2-1B"
    text = emit_engine_config(seventy_b, "trtllm", ServeConfig(), 2048)
    argv = command_line(text, "trtllm-serve")
    assert argv[1] == "meta-llama/Llama-3.1-70B" and argv[argv.index("--tp_size") + 1] == "4"
    assert trtllm_speculative_config(text)["speculative_model"] == "meta-llama/Llama-3.2-1B"


@pytest.mark.parametrize("engine, needs", [("vllm", "PR #32374"), ("trtllm", "PR #10860"), ("sglang", "PR #10090")])
def test_every_config_states_the_engine_version_it_needs_and_a_fallback(seventy_b, engine, needs):
    """dynamic_config needed a vLLM version that was not stated."""
    text = emit_engine_config(seventy_b, engine, ServeConfig(), 2048)
    line = next(line for line in text.splitlines() if line.startswith("# needs:"))
    assert needs in line
    if engine != "sglang":
        assert "fallback" in line.lower()


def test_vllm_schedule_is_one_vllm_accepts(seventy_b):
    """vLLM's Dynamic SD rules: inclusive [first, last, k] ranges from batch 1, each k <= num_speculative_tokens."""
    config = vllm_speculative_config(emit_engine_config(seventy_b, "vllm", ServeConfig(max_num_seqs=128), 2048))
    ranges = config["num_speculative_tokens_per_batch_size"]
    assert config["method"] == "draft_model" and ranges[0][0] == 1
    assert all(first <= last for first, last, _ in ranges)
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(0 <= k <= config["num_speculative_tokens"] for _, _, k in ranges)
    assert config["draft_tensor_parallel_size"] == 4


def _run(capsys, argv):
    assert main(argv) == 0
    return capsys.readouterr().out


def test_configs_carry_serves_verdict_into_the_disable_threshold(capsys):
    """The TRT-LLM and SGLang outputs said speculation never stops while serve said it stops at about 9 req/s
    (batch ~77): with --rate, the threshold is serve's crossover batch."""
    common = ["serve", "--hw", "a100", "--model", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--rate", "4..16",
              "--requests", "150", "--workers", "1"]
    runs = json.loads(_run(capsys, [*common, "--json"]))
    crossover = runs["crossovers"][0]["latency"]
    assert crossover is not None  # this deployment stops paying within the rates
    stop = math.ceil(crossover["mean_batch"])
    vllm = _run(capsys, [*common, "--emit-config", "vllm"])
    assert f"off from batch {stop}" in vllm
    # the verdict line carries serve's range within the published error, as serve prints it
    earliest = runs["crossovers"][0]["latency_range"]["earliest"]
    verdict = next(line for line in vllm.splitlines() if line.startswith("# verdict:"))
    assert "within the published error (+-0.17x)" in verdict
    assert earliest is None or f"from {earliest['rate_per_s']:g} req/s" in verdict
    ranges = vllm_speculative_config(vllm)["num_speculative_tokens_per_batch_size"]
    assert all(k == 0 for first, last, k in ranges if last >= stop) and ranges[-1][2] == 0
    assert any(first == stop for first, _, k in ranges if k == 0) or stop == 1
    schedule = trtllm_speculative_config(_run(capsys, [*common, "--emit-config", "trtllm"]))["draft_len_schedule"]
    assert max(schedule) < stop  # TensorRT-LLM: no speculation above the largest key
    sglang = _run(capsys, [*common, "--emit-config", "sglang"])
    assert f"--max-running-requests {stop - 1}" in sglang
