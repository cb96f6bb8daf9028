"""`rooflinesim acceptance measure`: HF-layout checkpoints loaded faithfully, the speculative loop's exact rule and
greedy rule, on two small models trained in the test (seconds on a CPU)."""

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from scipy import stats  # noqa: E402

from rooflinesim.calibrate.reference.acceptance_models import (
    VOCAB, corpus, hf_config, train_checkpoint, trained_pair, write_prompts,
)
from rooflinesim.acceptance.sources import load_acceptance  # noqa: E402
from rooflinesim.calibrate.measure.acceptance_measure import MeasureSettings, load_pair, measure_acceptance, speculative_decode
from rooflinesim.calibrate.reference.hf_checkpoint import (
    _hf_to_interleaved, load_hf_decoder, rope_inverse_frequencies, set_rope_tables,
)
from rooflinesim.calibrate.reference.model import apply_rope  # noqa: E402
from rooflinesim.cli import main  # noqa: E402
from rooflinesim.errors import InputError  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield trained_pair(tmp_path_factory.mktemp("acceptance-models"))
    finally:
        torch.set_num_threads(threads)


def _logits(model, tokens):
    set_rope_tables(model, 64)
    model.setup_caches(1, 64)
    return model(tokens, torch.zeros(1, dtype=torch.long), tokens.shape[1])


@pytest.mark.parametrize("config", [
    hf_config(),
    hf_config("qwen2", tie_word_embeddings=True, rope_theta=1e6),
    hf_config("llama", rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
])
def test_checkpoint_round_trip_gives_the_same_logits(tmp_path, config):
    model = train_checkpoint(tmp_path / "m", config, steps=3, seed=0)
    loaded, spec, _ = load_hf_decoder(tmp_path / "m")
    assert spec.attention_bias == (config["model_type"] == "qwen2")
    tokens = corpus(1, 20, 5)
    model.inv_freq = loaded.inv_freq  # the trained model used the same config's frequencies only through them
    assert torch.allclose(_logits(loaded, tokens), _logits(model, tokens), atol=1e-5)


def test_hf_rotate_half_convention_matches_interleaved_rope():
    """transformers applies q * cos + rotate_half(q) * sin with cos = cat(freqs, freqs) on HF-layout rows; the
    loader's row permutation must turn that into model.py's adjacent-pair rotation."""
    heads, d, positions = 2, 8, 5
    q_hf = torch.randn(positions, heads, d, dtype=torch.float64)
    inv_freq = rope_inverse_frequencies({"rope_theta": 10000.0}, d, "x")
    angles = torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)
    cos, sin = torch.cat([angles.cos()] * 2, -1)[:, None], torch.cat([angles.sin()] * 2, -1)[:, None]
    rotate_half = torch.cat([-q_hf[..., d // 2:], q_hf[..., : d // 2]], -1)
    hf_rotated = q_hf * cos + rotate_half * sin
    ours = apply_rope(_hf_to_interleaved(q_hf.reshape(positions, -1).T, heads).T.reshape(1, positions, heads, d),
                      angles.cos()[None], angles.sin()[None])[0]
    expected = _hf_to_interleaved(hf_rotated.reshape(positions, -1).T, heads).T.reshape(positions, heads, d)
    assert torch.allclose(ours, expected)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_draft_identical_to_its_target_is_always_accepted(pair, temperature):
    target, _, prompts = pair
    m = measure_acceptance(target, target, prompts, MeasureSettings(k=3, temperature=temperature, new_tokens=24))
    assert m.per_position == (1.0, 1.0, 1.0) and m.expected_tokens == 4.0


def test_partial_agreement_is_measured_and_reproducible(pair):
    target, draft, prompts = pair
    settings = MeasureSettings(k=4, temperature=1.0, new_tokens=48, seed=3)
    m = measure_acceptance(target, draft, prompts, settings)
    again = measure_acceptance(target, draft, prompts, settings)
    assert m.reached == again.reached and m.n_drafts == again.n_drafts
    assert 1.2 < m.expected_tokens < 4.5
    assert all(0.05 < a < 0.995 for a in m.per_position)
    assert sum(m.committed_tokens_pmf) == pytest.approx(1.0)
    assert m.conditions["rule"].startswith("exact") and m.conditions["k"] == 4
    greedy = measure_acceptance(target, draft, prompts, MeasureSettings(k=4, temperature=0.0, new_tokens=48))
    assert 1.2 < greedy.expected_tokens < 5.0 and greedy.per_position[0] < 0.95


def test_exact_rule_keeps_the_target_distribution(pair):
    """The first committed token of a speculative step must follow the target's softmax, whatever the draft."""
    target, draft, _ = pair
    settings = MeasureSettings(k=1, temperature=1.0, new_tokens=1)
    prompt = corpus(1, 5, 11)[0].tolist()
    t_model, d_model = load_pair(target, draft, settings, "cpu", 16)
    p = torch.softmax(t_model(torch.tensor([prompt]), torch.zeros(1, dtype=torch.long), 5)[0, -1].double(), -1)
    generator = torch.Generator().manual_seed(0)
    n = 1500
    counts = np.bincount([speculative_decode(t_model, d_model, prompt, settings, generator)[1][0] for _ in range(n)],
                         minlength=VOCAB)
    expected = p.numpy() * n
    big = expected >= 5  # pool the rare tokens into one bin for the chi-square test
    observed = np.append(counts[big], counts[~big].sum())
    wanted = np.append(expected[big], expected[~big].sum())
    assert stats.chisquare(observed, wanted).pvalue > 1e-3


def test_measure_cli_json_feeds_predict(pair, tmp_path, capsys):
    target, draft, prompts = pair
    code = main(["acceptance", "measure", "--target", str(target), "--draft", str(draft), "--prompts", str(prompts),
                 "--temperature", "1", "--k", "3", "--new-tokens", "24", "--device", "cpu", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    saved = tmp_path / "measured.json"
    saved.write_text(out)
    data = json.loads(out)
    assert data["k"] == 3 and len(data["per_position"]) == 3 and data["conditions"]["temperature"] == 1.0
    assert load_acceptance(str(saved)).per_position == pytest.approx(tuple(data["per_position"]))
    code = main(["predict", "--acceptance", str(saved), "--drafter", "ngram"])
    out, _ = capsys.readouterr()
    assert code == 0 and "best k =" in " ".join(out.split())


def test_bad_checkpoints_and_prompts_are_one_line_errors(pair, tmp_path):
    target, draft, prompts = pair
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        load_hf_decoder(tmp_path / "empty")
    bad = tmp_path / "gpt2"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(InputError, match="not supported"):
        load_hf_decoder(bad)
    no_weights = tmp_path / "noweights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text(json.dumps(hf_config()))
    with pytest.raises(InputError, match="no model.safetensors"):
        load_hf_decoder(no_weights)
    (tmp_path / "text.txt").write_text("hello world\n")
    with pytest.raises(InputError, match="is text"):
        measure_acceptance(target, draft, tmp_path / "text.txt")
    (tmp_path / "oov.txt").write_text(f"1 2 {VOCAB + 5}\n")
    with pytest.raises(InputError, match="outside the shared vocabulary"):
        measure_acceptance(target, draft, tmp_path / "oov.txt")
    proc = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "acceptance", "measure", "--target",
                           str(tmp_path / "missing"), "--draft", str(draft), "--prompts", str(prompts)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "not found" in proc.stderr and "Traceback" not in proc.stderr
    assert write_prompts(tmp_path / "p.txt").read_text().count("\n") == 8


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_loop_commits_k_plus_1_when_the_draft_is_the_target(pair, temperature):
    from rooflinesim.calibrate.validators.acceptance_validate import batched_loops

    target, _, _ = pair
    settings = MeasureSettings(k=3, temperature=temperature)
    t_model, d_model = load_pair(target, target, settings, "cpu", 128)
    for model in (t_model, d_model):
        model.setup_caches(4, 128)
    run = batched_loops(t_model, d_model, corpus(4, 16, 3), 3, temperature, 8, torch.Generator().manual_seed(0))
    assert run["tokens_per_iteration"] == 4.0 and set(run["accepted"]) == {3}


def test_batched_loop_realises_the_measured_acceptance(pair):
    """The batched loop (per-sequence rule and rollback) commits what `measure` predicts, within sampling noise."""
    from rooflinesim.calibrate.validators.acceptance_validate import batched_loops

    target, draft, prompts = pair
    settings = MeasureSettings(k=3, temperature=1.0, new_tokens=64, seed=1)
    measured = measure_acceptance(target, draft, prompts, settings)
    t_model, d_model = load_pair(target, draft, settings, "cpu", 400)
    for model in (t_model, d_model):
        model.setup_caches(4, 400)
    run = batched_loops(t_model, d_model, corpus(4, 32, 4), 3, 1.0, 60, torch.Generator().manual_seed(2))
    steps = np.asarray(run["accepted"]) + 1
    noise = 4 * steps.std() / np.sqrt(steps.size) + 4 * (measured.expected_tokens_ci[1] - measured.expected_tokens)
    assert abs(steps.mean() - measured.expected_tokens) < noise


def test_acceptance_validate_refuses_a_bad_profile(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "acceptance", "validate", "--profile",
                           str(tmp_path / "none.yaml")], capture_output=True, text=True)
    assert proc.returncode == 2 and "not found" in proc.stderr and "Traceback" not in proc.stderr


def test_interleaved_loops_time_every_batch_in_turn(pair):
    """Several batches share one pair (their own caches); each gets its timed steps and the anchor is timed at the
    start and the end; a draft equal to its target commits k + 1 tokens per iteration in every batch."""
    from rooflinesim.calibrate.validators.acceptance_validate import ROUND_STEPS, interleaved_loops

    class FakeAnchor:
        calls = 0

        def time_s(self):
            FakeAnchor.calls += 1
            return {"gemm": 1e-3, "forward": 1e-4}

    target, _, _ = pair
    settings = MeasureSettings(k=2, temperature=1.0)
    t_model, d_model = load_pair(target, target, settings, "cpu", 128)
    setups = [(t_model, d_model, (t_model.new_caches(b, 128), d_model.new_caches(b, 128)), corpus(b, 16, b),
               torch.Generator().manual_seed(b)) for b in (1, 3)]
    runs, anchors, ran_s = interleaved_loops(setups, 2, 1.0, 0.0, ROUND_STEPS + 1, FakeAnchor())
    assert len(runs) == 2 and len(anchors) == FakeAnchor.calls == 2 and ran_s > 0
    for run in runs:
        assert run["rounds"] == 2 and len(run["iteration"].samples) == len(run["decode"].samples) == 2 * ROUND_STEPS
        assert run["tokens_per_iteration"] == 3.0


def test_acceptance_validate_refuses_bad_loop_options(tmp_path):
    for option in (["--duration", "nan"], ["--duration", "-1"], ["--iterations", "0"]):
        proc = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "acceptance", "validate", "--profile",
                               str(tmp_path / "none.yaml"), *option], capture_output=True, text=True)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "--duration" in proc.stderr or "--iterations" in proc.stderr


def test_central_mean_by_hand():
    """The central 80 % of 10 samples: the lowest and highest cut, the rest averaged; a stall does not move it."""
    from rooflinesim.calibrate.validators.acceptance_validate import central_mean_s
    from rooflinesim.calibrate.fitting.measurements import Timing

    assert central_mean_s(Timing((1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 100.0))) == pytest.approx(5.5)
    # a two-state mixture: the median jumps between states with the mixture, the central mean moves with it
    fast, slow = (1.0,) * 11, (1.3,) * 9
    assert central_mean_s(Timing(fast + slow)) == pytest.approx((1.0 * 9 + 1.3 * 7) / 16)
    assert central_mean_s(Timing((2.0,))) == 2.0
