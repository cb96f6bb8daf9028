"""Usable memory: capacity x gpu_memory_utilization - reserve decides memory fit and max batch (hand-computed)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.cli import main
from rooflinesim.scenario.inputs import DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_MEMORY_RESERVE_BYTES
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.errors import InputError

GIB = 1 << 30
KV_PER_TOKEN = 131072  # Llama-3.1-8B bf16: 2 x 32 layers x 8 KV heads x 128 x 2 bytes


def test_defaults_are_vllms():
    assert DEFAULT_GPU_MEMORY_UTILIZATION == 0.9
    assert DEFAULT_MEMORY_RESERVE_BYTES == 3 * GIB


def test_max_batch_by_hand_on_an_a100_80gb():
    s = build_scenario("a100", "llama-3.1-8b", 8, "32k", speculative=False)
    usable = 81920 * 2**20 * 0.9 - 3 * GIB  # 74.09e9
    assert s.usable_memory_bytes == pytest.approx(usable)
    # (74.09e9 - 16.06e9 weights) / (32769 tokens x 131072 B + activations) = 13.5
    assert int(s.get_max_batch()[0]) == 13
    full = build_scenario("a100", "llama-3.1-8b", 8, "32k", speculative=False, gpu_memory_utilization=1.0,
                          memory_reserve_bytes=0)
    assert int(full.get_max_batch()[0]) == 16
    assert full.usable_memory_bytes == 81920 * 2**20


@settings(max_examples=30, deadline=None)
@given(st.floats(0.3, 1.0), st.floats(0, 8 * GIB))
def test_max_batch_fits_and_one_more_does_not(utilization, reserve):
    s = build_scenario("h100", "llama-3.1-8b", 1, "8k", speculative=False, gpu_memory_utilization=utilization,
                       memory_reserve_bytes=reserve)
    b = int(s.get_max_batch()[0])
    assert not bool(np.all(s.get_memory_fit(b + 1).fits_in_memory))
    if b > 0:
        assert bool(np.all(s.get_memory_fit(b).fits_in_memory))


def test_less_utilization_never_more_batch():
    batches = [int(build_scenario("h100", "llama-3.1-8b", 1, "32k", speculative=False,
                                  gpu_memory_utilization=u).get_max_batch()[0]) for u in (0.5, 0.7, 0.9, 0.95, 1.0)]
    assert batches == sorted(batches) and batches[0] < batches[-1]


@pytest.mark.parametrize("kwargs", [dict(gpu_memory_utilization=0), dict(gpu_memory_utilization=1.5),
                                    dict(gpu_memory_utilization="x"), dict(gpu_memory_utilization=float("nan")),
                                    dict(memory_reserve_bytes=-1), dict(memory_reserve_bytes=True)])
def test_bad_memory_options_are_one_line_errors(kwargs):
    with pytest.raises(InputError) as err:
        build_scenario(speculative=False, **kwargs)
    assert "\n" not in str(err.value)


def test_cli_flags_and_json_report_total_and_usable(capsys):
    assert main(["predict", "--json", "--batch", "8", "--ctx", "32k", "--gpu-memory-utilization", "0.95",
                 "--memory-reserve-gib", "1", "--drafter", "ngram"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["capacity_bytes"] == 81920 * 2**20
    assert memory["usable_capacity_bytes"] == pytest.approx(81920 * 2**20 * 0.95 - GIB)
    assert memory["gpu_memory_utilization"] == 0.95 and memory["memory_reserve_bytes"] == GIB
    assert main(["predict", "--gpu-memory-utilization", "2"]) == 2
    assert main(["predict", "--memory-reserve-gib", "lots"]) == 2


def test_a_cpu_keeps_its_whole_memory_unless_told():
    cpu = build_scenario("cpu", "llama-3.2-1b", 1, "1k", speculative=False)
    assert cpu.gpu_memory_utilization == 1.0 and cpu.memory_reserve_bytes == 0
    assert cpu.usable_memory_bytes == cpu.hardware.memory_capacity_bytes
    told = build_scenario("cpu", "llama-3.2-1b", 1, "1k", speculative=False, gpu_memory_utilization=0.5)
    assert told.usable_memory_bytes == 0.5 * cpu.hardware.memory_capacity_bytes
