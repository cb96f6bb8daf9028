"""vLLM V0's scheduling in serve: multi-step scheduling (`--num-scheduler-steps`, `scheduling.multi_step`: a decode
window keeps its batch for multi_step iterations, so a prompt that arrives inside it waits for the window's end) and
the asynchronous output processor (`scheduling.async_output`: a step's tokens are streamed one step late)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rooflinesim.errors import InputError
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, Requests, ServeConfig, StepPricer, generate_requests, simulate
from rooflinesim.serve.engine import get_window_left
from rooflinesim.serve.output import StreamedOutput
from rooflinesim.specs.registry import load_engine


@pytest.mark.parametrize("left, steps, multi_step, expected", [
    (0, 1, 10, 9),   # a decode step with no window open starts one: 9 of its 10 steps are left
    (9, 1, 10, 8),
    (1, 1, 10, 0),   # the window's last step
    (0, 10, 10, 0),  # exactly one whole window
    (0, 11, 10, 9),  # one window, then the first step of the next
    (3, 5, 10, 8),   # 3 steps close the window, 2 open the next
    (0, 7, 1, 0),    # multi_step 1: never a window
])
def test_window_left_goldens(left, steps, multi_step, expected):
    assert get_window_left(left, steps, multi_step) == expected


@given(st.integers(1, 16), st.lists(st.integers(1, 40), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_a_run_of_steps_leaves_what_steps_one_by_one_leave(multi_step, runs):
    """The fast path (a planned run of n decode steps) and the per-step path agree on the window."""
    by_run = by_step = 0
    for n in runs:
        by_run = get_window_left(by_run, n, multi_step)
        for _ in range(n):
            by_step = get_window_left(by_step, 1, multi_step)
        assert by_run == by_step and 0 <= by_run < multi_step


def test_the_multi_step_profile_reaches_the_serving_config():
    assert ServeConfig.for_engine(load_engine("vllm-v0-multistep")).multi_step == 10
    assert ServeConfig.for_engine(load_engine("vllm-v0")).multi_step == 1
    with pytest.raises(InputError, match="multi_step"):
        ServeConfig(multi_step=0).check()


def test_a_prompt_arriving_inside_a_window_waits_for_its_end():
    """Hand-computed: request A (prompt 512, output 200) arrives at t = 0 and is prefilled alone in p seconds; its
    first decode step opens a window. Request B arrives half-way through that step. With one step per window B is
    prefilled right after the step (TTFT = d/2 + its prefill); with 10 it waits for 9 more decode steps of A, so its
    TTFT grows by exactly 9 batch-1 decode steps (9 d, context 512-522: d moves by < 0.1 % over them)."""
    scenario = build_scenario("h100", "llama-3.1-8b", speculative=False, engine="vllm-v0")
    pricer = StepPricer(scenario, 4, 4096, 2048, 0)
    p = pricer.get_step_time_s(0, 0.0, 0, [0], [512], 1, False)
    d = pricer.get_decode_time_s(1, 513.0, 0)
    requests = Requests(np.asarray([0.0, p + 0.5 * d]), np.asarray([512, 512]), np.asarray([200, 200]))
    ttft = {}
    for steps in (1, 10):
        config = ServeConfig(max_num_seqs=4, max_num_batched_tokens=4096, step_policy="prefill-first",
                             multi_step=steps)
        ttft[steps] = simulate(scenario, requests, "off", config, pricer=pricer).ttft_s
    assert ttft[1][0] == pytest.approx(p, rel=1e-9) and ttft[10][0] == pytest.approx(p, rel=1e-9)
    assert ttft[1][1] == pytest.approx(0.5 * d + p, rel=1e-3)
    assert ttft[10][1] - ttft[1][1] == pytest.approx(9 * d, rel=1e-3)


def test_multi_step_raises_ttft_under_load_and_every_request_finishes():
    scenario = build_scenario("a100", "llama-3.1-8b", speculative=False, engine="vllm-v0-multistep")
    requests = generate_requests(300, 4.0, LengthDistribution.parse("uniform:64:512", "prompt"),
                                 LengthDistribution.parse("uniform:16:400", "output"), seed=1)
    one = simulate(scenario, requests, "off", ServeConfig.for_engine(load_engine("vllm-v0")))
    ten = simulate(scenario, requests, "off", ServeConfig.for_engine(scenario.engine))
    assert np.isfinite(ten.finish_s).all() and (ten.output_tokens == requests.output_tokens).all()
    assert np.median(ten.ttft_s) > 1.5 * np.median(one.ttft_s)


def test_streamed_output_goldens():
    first, finish = np.full(2, np.nan), np.full(2, np.nan)
    now = StreamedOutput(first, finish, delayed=False)
    now.produced(np.asarray([0]), np.asarray([], dtype=int), 1.0)
    assert first[0] == 1.0
    first[:], finish[:] = np.nan, np.nan
    late = StreamedOutput(first, finish, delayed=True)
    late.produced(np.asarray([0]), np.asarray([], dtype=int), 1.0)
    assert np.isnan(first[0])
    late.step_runs(1.0, 1.5)  # the next step starts as the first ends: the token is streamed when it ends
    assert first[0] == 1.5
    late.produced(np.asarray([1]), np.asarray([0]), 1.5)
    late.step_runs(2.0, 2.5)  # the engine idled from 1.5 to 2.0: processed at once, not with the next step
    assert (first[1], finish[0]) == (1.5, 1.5)
    late.produced(np.asarray([], dtype=int), np.asarray([1]), 2.5)
    late.flush()
    assert finish[1] == 2.5


def test_async_output_delays_the_first_token_by_one_decode_step():
    """One request (prompt 512, output 50) alone: prefilled in p, then decoding in steps of d. Streamed at once its
    TTFT is p; with the asynchronous output processor the first token goes out while the first decode step runs, so
    TTFT = p + d (hand-computed from the same step prices). Its last token is streamed at once (no step follows)."""
    scenario = build_scenario("h100", "llama-3.1-8b", speculative=False, engine="vllm-v0")
    pricer = StepPricer(scenario, 4, 4096, 2048, 0)
    p = pricer.get_step_time_s(0, 0.0, 0, [0], [512], 1, False)
    d = pricer.get_decode_time_s(1, 512.0, 0)  # its first decode step reads the 512 prompt tokens
    requests = Requests(np.asarray([0.0]), np.asarray([512]), np.asarray([50]))
    runs = {}
    for delayed in (False, True):
        config = ServeConfig(max_num_seqs=4, max_num_batched_tokens=4096, step_policy="prefill-first",
                             async_output=delayed)
        runs[delayed] = simulate(scenario, requests, "off", config, pricer=pricer)
    assert runs[False].ttft_s[0] == pytest.approx(p, rel=1e-9)
    assert runs[True].ttft_s[0] == pytest.approx(p + d, rel=1e-6)
    assert runs[True].latency_s[0] == pytest.approx(runs[False].latency_s[0], rel=1e-12)
    assert ServeConfig.for_engine(load_engine("vllm-v0-multistep")).async_output
    assert not ServeConfig.for_engine(load_engine("vllm-v1")).async_output


def test_the_front_end_delays_the_scheduler_by_frontend_s():
    """A request reaches the scheduler frontend_s after it is sent: alone, its TTFT and latency grow by exactly that
    (hand-computed: the same steps, shifted), and the sglang-0.3 profile's fitted 4 ms reaches ServeConfig."""
    scenario = build_scenario("a100", "llama-3.1-8b", speculative=False, engine="sglang-0.3")
    pricer = StepPricer(scenario, 4, 4096, 2048, 0)
    requests = Requests(np.asarray([0.0, 5.0]), np.asarray([256, 256]), np.asarray([20, 20]))
    runs = [simulate(scenario, requests, "off", ServeConfig(max_num_seqs=4, max_num_batched_tokens=4096,
                                                            frontend_s=f), pricer=pricer) for f in (0.0, 0.004)]
    assert np.allclose(runs[1].ttft_s - runs[0].ttft_s, 0.004, rtol=0, atol=1e-9)
    assert np.allclose(runs[1].latency_s - runs[0].latency_s, 0.004, rtol=0, atol=1e-9)
    assert ServeConfig.for_engine(load_engine("sglang-0.3")).frontend_s == pytest.approx(0.004)
    with pytest.raises(InputError, match="frontend_s"):
        ServeConfig(frontend_s=-1.0).check()
