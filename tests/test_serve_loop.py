"""The measured serving loop (`calibrate/reference/serve_loop.py`) and `rooflinesim validate --serve` on tiny random models.

Functional checks only (never a timing bound: this runs on a noisy 2-core machine): every request completes with
exactly its output length, TTFT <= end-to-end latency, the scheduler's limits hold, a draft that is the target has
every draft accepted, and at temperature 0 the loop (slots moved around, prefills chunked and mixed with decodes,
speculation with rollback) emits exactly the target's greedy continuation of each prompt.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rooflinesim.calibrate.reference.model import build_decoder  # noqa: E402
from rooflinesim.calibrate.reference.serve_loop import LoopConfig, make_prompts, run_serving_loop  # noqa: E402
from rooflinesim.cli import main  # noqa: E402
from rooflinesim.specs.registry import load_model  # noqa: E402
from rooflinesim.serve import LengthDistribution, generate_requests  # noqa: E402
from rooflinesim.errors import InputError  # noqa: E402

PROFILE = "calibrate/cpu-amd-epyc-2c.yaml"


def _spec(name: str, layers: int):
    return load_model("tiny-draft-2l").model_copy(update=dict(
        name=name, aliases=[], num_layers=layers, hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16,
        intermediate_size=128, vocab_size=256))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and a shared 2-core machine stalls 2-thread calls."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def models():
    return build_decoder(_spec("tiny-target", 2), torch.float32), build_decoder(_spec("tiny-draft", 1), torch.float32,
                                                                                 seed=1)


def _requests(n=14, rate=200.0, seed=3):
    return generate_requests(n, rate, LengthDistribution.parse("uniform:3:40", "p"),
                             LengthDistribution.parse("uniform:1:12", "o"), seed=seed)


@pytest.mark.parametrize("k", [0, 2])
def test_loop_serves_every_request(models, k):
    target, draft = models
    requests = _requests()
    config = LoopConfig(max_num_seqs=4, max_num_batched_tokens=24, k=k)
    run = run_serving_loop(target, draft, requests, config)
    assert (run.generated == requests.output_tokens).all()
    assert [len(t) for t in run.tokens] == requests.output_tokens.tolist()
    result = run.to_serve_result("cpu", "tiny-target", "tiny-draft")
    assert np.all(result.ttft_s > 0) and np.all(result.ttft_s <= result.latency_s)
    assert np.all(run.first_token_s >= requests.arrival_s) and np.all(np.isfinite(run.finish_s))
    t = run.timeline
    assert t[:, 2].max() <= 4 and t[:, 6].max() <= 24  # max_num_seqs and the token budget
    assert set(t[:, 5]) <= {0, k} and (t[:, 5] == k).any()  # k = 0 in steps without decodes, as the simulator
    assert np.all(np.diff(t[:, 0]) > 0)
    summary = result.get_summary()
    assert summary["policy"] == config.policy and summary["ttft_s"]["p50"] > 0
    if k:
        assert run.accepted.size and run.accepted.max() <= k


def test_draft_equal_to_target_has_every_draft_accepted(models):
    target, _ = models
    same = build_decoder(_spec("tiny-target", 2), torch.float32)  # same seed: the same weights
    run = run_serving_loop(target, same, _requests(10), LoopConfig(max_num_seqs=3, max_num_batched_tokens=16, k=3))
    assert run.accepted.size and (run.accepted == 3).mean() > 0.99


@pytest.mark.parametrize("k", [0, 3])
def test_greedy_loop_emits_the_targets_own_continuation(models, k):
    """Temperature 0: whatever the batching, chunking, slot moves and rollbacks, each request's tokens are the
    target's greedy continuation of its prompt decoded alone."""
    target, draft = models
    requests = _requests(10, rate=500.0, seed=5)
    run = run_serving_loop(target, draft, requests, LoopConfig(3, 16, k, temperature=0.0))
    prompts = make_prompts(requests, 256, 0)
    target.setup_caches(1, 80)
    with torch.inference_mode():
        for r, prompt in enumerate(prompts):
            out, seq = [], prompt[None]
            start = 0
            for _ in range(int(requests.output_tokens[r])):
                logits = target(seq, torch.tensor([start]), start + seq.shape[1])
                start += seq.shape[1]
                seq = logits[:, -1].argmax(-1, keepdim=True)
                out.append(int(seq))
            assert run.tokens[r] == out, r


def test_request_list_is_deterministic_under_its_seed():
    a, b, c = _requests(seed=7), _requests(seed=7), _requests(seed=8)
    for name in ("arrival_s", "prompt_tokens", "output_tokens"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_loop_refuses_speculation_without_a_draft(models):
    target, _ = models
    with pytest.raises(InputError, match="draft"):
        run_serving_loop(target, None, _requests(2), LoopConfig(k=2))


def test_serve_validation_report_and_chart(tmp_path):
    from rooflinesim.calibrate.validators.serve_validate import ServeValidationSettings, run_serve_validation
    from rooflinesim.calibrate.measure.timers import select_device
    from rooflinesim.plots import load_serve_validation_report, plot_serve_validation

    settings = ServeValidationSettings(rate_per_s=100.0, requests=8, prompt_tokens="uniform:4:24",
                                       output_tokens="uniform:2:10", max_num_seqs=4, max_num_batched_tokens=24, k=2,
                                       sim_seeds=2, retries=0)
    report = run_serve_validation(PROFILE, select_device("cpu", 1), settings, _spec("tiny-target", 2),
                                  _spec("tiny-draft", 1), log=lambda *a: None)
    text = json.dumps(report, allow_nan=False)  # strict JSON: no NaN anywhere
    assert report["kind"] == "serving loop validation" and report["host_cpu"] and report["torch"]
    assert report["offered_rate_per_s"] == 100.0  # a rate given is the rate served
    assert report["offered_load"] == pytest.approx(100.0 / report["simulated_capacity_per_s"])
    assert report["threads"] == 1 and report["requests"] == 8 and report["settings"]["seed"] == 0
    assert [p["policy"] for p in report["policies"]] == ["off", "fixed:2"]
    for row in report["policies"]:
        assert set(row["comparison"]) == {"ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"}
        for c in row["comparison"].values():
            assert c["measured_s"] > 0 and c["simulated_s"] > 0 and len(c["simulated_seeds_s"]) == 2
            assert c["error"] == pytest.approx(c["simulated_s"] / c["measured_s"] - 1)
            assert c["meets_goal"] == (abs(c["error"]) <= c["goal"])
        assert len(row["requests"]["measured_ttft_s"]) == 8
        assert sum(row["batch_share"]["measured"]) == pytest.approx(1.0)
        assert 0 <= row["step_model"]["outside_models_share"] < 1
        ratio = row["at_measured_step_speed"]["step_time_ratio"]
        assert ratio == row["step_model"]["measured_over_priced_time_weighted"] and ratio > 0
        assert set(row["at_measured_step_speed"]["comparison"]) == set(row["comparison"])
        interval = row["interval"]  # the step model's 90 % interval, around the simulated percentile
        assert 0 < interval["step_rel_sigma"] < 1
        for name, c in row["comparison"].items():
            band = interval[name]
            assert band["low_s"] <= c["simulated_s"] <= band["high_s"]  # slower steps, later tokens
            assert band["measured_inside"] == (band["low_s"] <= c["measured_s"] <= band["high_s"])
        assert len(row["cpu_contended_share_of_attempts"]) == 1
        assert [b["batch"] for b in row["step_model"]["decode_by_batch"]] == sorted(
            b["batch"] for b in row["step_model"]["decode_by_batch"])
    assert report["meets_goal"] == all(c["meets_goal"] for p in report["policies"] for c in p["comparison"].values())
    # the machine-speed anchors, timed before each run and at the end (never during a run: arrivals are timed)
    assert list(report["machine_speed"]["measured_s"]) == ["before off", "before fixed:2", "end"]
    assert report["acceptance"]["k"] == 2 and 1 <= report["acceptance"]["expected_tokens"] <= 3
    path = tmp_path / "r.json"
    path.write_text(text)
    from rooflinesim.plots.serve_validation import get_serve_validation_data

    bands = get_serve_validation_data(path)["policies"][0]["intervals"]
    assert set(bands) == {"ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"}
    assert all(low < high for low, high in bands.values())
    fig = plot_serve_validation(path)
    assert len(fig.axes) == 3
    fig.savefig(tmp_path / "r.png")
    with pytest.raises(InputError, match="policies"):
        load_serve_validation_report({"policies": []})
    with pytest.raises(InputError, match="requests"):
        load_serve_validation_report({"policies": [{"comparison": {}, "requests": {}, "batch_share": {}}]})


def test_offered_rate_is_the_load_times_offs_simulated_capacity():
    from rooflinesim.calibrate.validators.serve_validate import ServeValidationSettings, get_offered_rate_per_s
    from rooflinesim.specs.profiles import load_profile

    profile, target = load_profile(PROFILE), load_model("tiny-llama-123m")
    rate, capacity = get_offered_rate_per_s(profile, target, ServeValidationSettings(load=0.5))
    assert rate == pytest.approx(0.5 * capacity) and 0.1 < capacity < 100
    rate_at_08, again = get_offered_rate_per_s(profile, target, ServeValidationSettings(load=0.8))
    assert again == capacity and rate_at_08 == pytest.approx(1.6 * rate)
    assert get_offered_rate_per_s(profile, target, ServeValidationSettings(rate_per_s=3.0))[0] == 3.0


@pytest.mark.parametrize("args, message", [
    (["--serve", "--rate", "0"], "--rate"),
    (["--serve", "--load", "0"], "--load"),
    (["--serve", "--load", "2.5"], "--load"),
    (["--serve", "--load", "0.5", "--rate", "2"], "not both"),
    (["--load", "0.5"], "--serve"),
    (["--rate", "2"], "--serve"),
    (["--serve", "--k", "0"], "k must be"),
])
def test_validate_serve_refuses_bad_input_before_measuring(tmp_path, capsys, args, message):
    assert main(["validate", "--profile", PROFILE, "--out-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not list(tmp_path.iterdir())
