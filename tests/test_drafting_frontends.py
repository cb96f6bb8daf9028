"""Trees, self-speculation, EAGLE-3 heads and closed-loop load through every front end: predict and sweep (JSON),
serve, the serving chart, the speedup chart and the emitted SGLang config."""

from __future__ import annotations

import json

import pytest

from rooflinesim.cli import main
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import ServeConfig
from rooflinesim.serve.engine_configs import emit_engine_config


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_json_with_a_tree(capsys):
    data = _json(capsys, ["predict", "--hw", "h100", "--drafter", "eagle3", "--tree", "5,4,16", "--alpha", "0.7",
                          "--json"])
    spec = data["speculative"]
    assert spec["tree"] == "tree steps 5, topk 4, num_draft_tokens 16" and spec["k"] == 15
    assert [row["k"] for row in spec["speedup_by_k"]] == [0, 15]


def test_predict_json_self_drafter(capsys):
    data = _json(capsys, ["predict", "--hw", "h200", "--drafter", "self", "--draft-kv-budget", "512", "--ctx", "32k",
                          "--batch", "16", "--alpha", "0.8", "--json"])
    assert data["speculative"]["draft"] == "self(kv 512)" and data["speculative"]["best_speedup"] > 1.4


def test_sweep_prices_tree_sizes(capsys):
    data = _json(capsys, ["sweep", "--hw", "h100", "--drafter", "eagle", "--tree", "6,10,60", "--alpha", "0.7",
                          "--batch", "1,64", "--ctx", "2k", "--k", "0,8,59", "--json"])
    assert data["draft"] == "eagle"


def test_serve_a_tree_against_a_chain_under_concurrency(capsys):
    data = _json(capsys, ["serve", "--hw", "h100", "--drafter", "eagle", "--tree", "6,10,60", "--alpha", "0.7",
                          "--policy", "chain:3,fixed:59", "--baseline", "chain:3", "--concurrency", "1,64",
                          "--requests", "150", "--prompt-tokens", "512", "--output-tokens", "64", "--workers", "1",
                          "--json"])
    (crossing,) = data["crossovers"]
    assert crossing["policy"] == "fixed:59" and crossing["latency"] == {
        "concurrency": 64, "mean_batch": pytest.approx(data["runs"][1]["mean_batch"])}


def test_sglang_config_for_a_tree():
    scenario = build_scenario("h100", "llama-3.1-8b", 1, 1024, drafter="eagle3", tree="6,10,60", alpha=0.7,
                              k_values=[0])
    text = emit_engine_config(scenario, "sglang", ServeConfig(max_num_seqs=32), 1024)
    assert "--speculative-algorithm EAGLE3" in text and "--speculative-num-steps 6" in text
    assert "--speculative-eagle-topk 10" in text and "--speculative-num-draft-tokens" in text
    tokens = int(text.split("--speculative-num-draft-tokens ")[1].split()[0])
    assert 2 <= tokens <= 60


def test_plots_take_trees_and_concurrency(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "serve.png"
    assert main(["plot", "serve", "-o", str(out), "--drafter", "eagle", "--tree", "6,10,60", "--alpha", "0.7",
                 "--policy", "chain:3,fixed:59", "--baseline", "chain:3", "--concurrency", "1,16",
                 "--requests", "60"]) == 0
    assert out.stat().st_size > 10_000
    speedup = tmp_path / "speedup.png"
    assert main(["plot", "speedup", "-o", str(speedup), "--drafter", "self", "--draft-kv-budget", "512",
                 "--batch", "1,16", "--ctx", "4k,32k", "--hw", "h200"]) == 0
    assert speedup.stat().st_size > 10_000
