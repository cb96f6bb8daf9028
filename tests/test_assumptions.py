"""Stated assumptions and one set of defaults (issue 24): every output lists on an "assumed:" line what the user did
not give; the default draft shares the target's tokenizer; every command starts from the same device and k range;
inputs users have (a checkpoint folder, a Hugging Face id) get an answer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import rooflinesim
from rooflinesim.cli import build_parser, main
from rooflinesim.errors import InputError
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.scenario.inputs import DEFAULT_HARDWARE, DEFAULT_K_MAX

DATA = Path(__file__).resolve().parent / "data"


def test_the_default_draft_shares_the_targets_tokenizer():
    """A Qwen target was drafted by llama-3.2-1b (1.43x) instead of its own family's 0.5B (1.90x)."""
    scenario = build_scenario("l40s", "qwen2.5-7b")
    assert scenario.drafter.name == "qwen2.5-0.5b"
    assert "qwen2.5-0.5b" in scenario.assumed["draft"]
    assert build_scenario(model="llama-3.1-70b").drafter.name == "llama-3.2-1b"
    assert build_scenario(model="mixtral-8x7b").drafter.name == "mistral-7b"
    same = rooflinesim.predict("l40s", "qwen2.5-7b").speculative.speedup
    assert same == rooflinesim.predict("l40s", "qwen2.5-7b", draft="qwen2.5-0.5b").speculative.speedup


def test_no_default_draft_is_exit_2_with_a_suggestion(capsys):
    with pytest.raises(InputError, match="--draft"):
        build_scenario(model="llama-2-7b")
    assert main(["predict", "--model", "llama-2-7b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--draft" in err and "--drafter ngram" in err
    assert main(["predict", "--model", "llama-2-7b", "--no-speculation"]) == 0  # no draft needed without one


def test_a_padded_vocabulary_of_one_tokenizer_is_not_a_warning():
    """Qwen2.5-0.5B (151936) and 7B (152064) pad one tokenizer's embedding differently: "needs a shared tokenizer"
    was printed for a pair that shares one."""
    scenario = build_scenario("l40s", "qwen2.5-7b", draft="qwen2.5-0.5b")
    assert not [w for w in scenario.warnings if "tokenizer" in w]
    other = build_scenario("l40s", "qwen2.5-7b", draft="llama-3.2-1b")
    assert any("not known to share one" in w for w in other.warnings)


def test_every_command_has_one_default_device_and_k_range():
    parser = build_parser()
    argv = {"predict": ["predict"], "sweep": ["sweep"], "serve": ["serve"], "plot": ["plot", "speedup", "-o", "x.png"]}
    for command, args in argv.items():
        parsed = parser.parse_args(args)
        assert parsed.hw is None and parsed.model is None, command  # the scenario decides
        assert getattr(parsed, "k", None) is None, command
    assert parser.parse_args(argv["serve"]).requests is None and parser.parse_args(argv["plot"]).requests is None
    predict_ks = rooflinesim.predict().scenario.k_values
    from rooflinesim.pricing.sweep import sweep

    sweep_result = sweep(batch=[1], ctx=[1024])
    from rooflinesim import plots

    chart = plots.get_speedup_map_data(build_scenario(None, None, [1], [1024], alpha=0.8))[0]
    assert list(predict_ks) == list(sweep_result.k) == list(chart.k) == list(range(DEFAULT_K_MAX + 1))
    assert sweep_result.hardware == chart.hardware == "a100" == DEFAULT_HARDWARE
    assert rooflinesim.predict().to_dict()["hardware"]["short_name"] == DEFAULT_HARDWARE


def _run(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out, captured.err


def test_every_output_states_what_it_assumed(capsys, tmp_path):
    out, _ = _run(capsys, ["predict"])
    assert "assumed:" in out and "alpha 0.8" in out and "draft llama-3.2-1b" in out and "hardware a100" in out
    assert "engine vllm-v1" in out  # the engine profile is an input too (issue 29's default)
    out, err = _run(capsys, ["predict", "--json"])
    assert json.loads(out)["assumed"]["alpha"].startswith("0.8") and "assumed:" in err
    out, _ = _run(capsys, ["predict", "--hw", "h100", "--model", "llama-3.1-8b", "--draft", "llama-3.2-1b",
                           "--alpha", "0.7", "--k", "3", "--batch", "1", "--ctx", "4k", "--weight-dtype", "bf16",
                           "--gpu-memory-utilization", "0.9", "--memory-reserve-gib", "3", "--engine", "vllm-v1"])
    assert "assumed:" not in out  # everything was given
    out, _ = _run(capsys, ["sweep", "--batch", "1,2", "--ctx", "1k"])
    assert "assumed:" in out and "alpha 0.6, 0.8" in out
    out, _ = _run(capsys, ["sweep", "--batch", "1,2", "--ctx", "1k", "--json"])
    assert "k" in json.loads(out)["assumed"]
    out, _ = _run(capsys, ["serve", "--requests", "30", "--rate", "2", "--policy", "off"])
    assert "assumed:" in out and "prompt 1024 tokens" in out
    out, _ = _run(capsys, ["serve", "--requests", "30", "--rate", "2", "--policy", "off", "--json"])
    assert json.loads(out)["assumed"]["output"] == "128 tokens"
    out, _ = _run(capsys, ["serve", "--emit-config", "sglang"])
    assert "# assumed:" in out
    out, err = _run(capsys, ["plot", "speedup", "--batch", "1,8", "--ctx", "1k", "-o", str(tmp_path / "s.png")])
    assert "assumed:" in err and "alpha 0.8" in err


def test_a_checkpoint_folder_is_a_model(tmp_path, capsys):
    folder = tmp_path / "Qwen2.5-7B"
    folder.mkdir()
    shutil.copy(DATA / "qwen2-hf-config.json", folder / "config.json")
    assert main(["predict", "--model", str(folder), "--draft", "qwen2.5-0.5b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["num_layers"] == 28
    assert main(["predict", "--model", "qwen2.5-7b", "--draft", str(folder), "--json"]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["predict", "--model", str(empty)]) == 2
    assert "holds no config.json" in capsys.readouterr().err


def test_a_config_json_names_its_repository_and_family(tmp_path):
    config = json.loads((DATA / "qwen2-hf-config.json").read_text())
    config["_name_or_path"] = "Qwen/Qwen2.5-7B"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = rooflinesim.load_model(str(path))
    assert model.hf_id == "Qwen/Qwen2.5-7B" and model.family == "qwen2.5"
    assert build_scenario(model=str(path)).drafter.name == "qwen2.5-0.5b"


def test_a_hugging_face_id_gets_one_line_with_the_shipped_name(capsys):
    assert main(["predict", "--model", "Qwen/Qwen2.5-7B"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not downloaded" in err and "'qwen2.5-7b'" in err
    assert main(["predict", "--draft", "meta-llama/Llama-3.2-1B"]) == 2
    assert "'llama-3.2-1b'" in capsys.readouterr().err
    assert main(["show", "meta-llama/Llama-3.1-8B"]) == 2
    assert "'llama-3.1-8b'" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["roofline", "k", "breakdown"])
def test_every_chart_kind_runs_on_the_defaults_and_says_what_it_assumed(kind, tmp_path, capsys):
    """A chart given neither --hw nor --model takes the scenario's defaults (breakdown looked up a model 'None')."""
    _, err = _run(capsys, ["plot", kind, "-o", str(tmp_path / f"{kind}.png")])
    assert "assumed: hardware a100; model llama-3.1-8b" in err
