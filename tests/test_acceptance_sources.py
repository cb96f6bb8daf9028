"""--acceptance FILE_OR_PRESET through build_scenario and the CLI (predict, sweep, acceptance from-logs, list
acceptance), and the preset library's schema and conversions."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rooflinesim.acceptance import expected_tokens_iid
from rooflinesim.acceptance.measured import AcceptanceSourceError
from rooflinesim.acceptance.presets import get_preset, list_presets, load_preset_library
from rooflinesim.acceptance.sources import load_acceptance
from rooflinesim.cli import main
from rooflinesim.pricing.predict import predict
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.errors import InputError

LOGS = Path(__file__).parent / "data" / "engine-logs"


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- build_scenario ---------------------------------------------------------------------------------------------------


def test_measured_acceptance_resolves_to_per_position_rates():
    scenario = build_scenario(acceptance=str(LOGS / "vllm-metrics.prom"))
    assert scenario.acceptance.per_position == pytest.approx((0.78, 2800 / 3900, 1900 / 2800, 1200 / 1900))
    assert scenario.acceptance.alphas is None
    assert list(scenario.k_values) == [0, 1, 2, 3, 4]  # k runs up to the measured length
    assert "vLLM Prometheus" in scenario.acceptance.source


def test_mean_only_acceptance_resolves_to_iid_alpha_with_its_warning():
    scenario = build_scenario(acceptance=str(LOGS / "sglang.log"))
    (alpha,) = scenario.acceptance.alphas
    assert float(expected_tokens_iid(alpha, 3)) == pytest.approx(2.82)
    assert any("only a mean acceptance length" in w for w in scenario.warnings)


def test_grid_front_ends_get_the_iid_equivalent():
    scenario = build_scenario(acceptance=str(LOGS / "vllm-v1.log"), acceptance_as_iid=True, k_values=range(9))
    (alpha,) = scenario.acceptance.alphas
    assert float(expected_tokens_iid(alpha, 3)) == pytest.approx(1 + 4138 / 3000)
    assert any("enters as alpha" in w for w in scenario.warnings)


@pytest.mark.parametrize("extra", [{"alpha": 0.7}, {"alpha_per_position": "0.9,0.8"}])
def test_acceptance_is_exclusive_with_alpha(extra):
    with pytest.raises(InputError, match="not both"):
        build_scenario(acceptance="eagle3-llama3.1-8b-mtbench-chain7-t1", **extra)


def test_unknown_acceptance_suggests_presets():
    with pytest.raises(InputError, match="did you mean eagle3-llama3.1-8b-mtbench-chain7-t1"):
        build_scenario(acceptance="eagle3-llama3.1-8b-mtbench")


def test_predict_prices_the_measured_rates():
    p = predict(acceptance=str(LOGS / "vllm-metrics.prom"), batch=1, ctx=4096)
    s = p.speculative
    assert s.alpha_per_position == pytest.approx([0.78, 2800 / 3900, 1900 / 2800, 1200 / 1900])
    rows = {r["k"]: r for r in s.k_table}
    assert rows[4]["expected_tokens"] == pytest.approx(2.96)
    assert s.best_k in rows and s.acceptance_source.startswith("vLLM Prometheus")
    assert p.to_dict()["speculative"]["acceptance_source"] == s.acceptance_source


# --- CLI ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture, shown", [("vllm-v1.log", "per position 0.708, 0.591, 0.604"),
                                            ("vllm-metrics.prom", "per position 0.780, 0.718, 0.679, 0.632"),
                                            ("sglang.log", "i.i.d. alpha 0.770")])
def test_predict_with_acceptance_prints_it_and_the_best_k(capsys, fixture, shown):
    code, out, _ = run_cli(capsys, "predict", "--acceptance", str(LOGS / fixture))
    assert code == 0
    flat = " ".join(out.split())
    assert shown in flat and "best k =" in flat


def test_predict_json_with_acceptance(capsys):
    code, out, err = run_cli(capsys, "predict", "--json", "--acceptance", str(LOGS / "vllm-v1.log"))
    assert code == 0
    spec = json.loads(out)["speculative"]
    assert len(spec["alpha_per_position"]) == 3 and spec["acceptance_source"]


def test_sweep_with_acceptance(capsys):
    code, out, _ = run_cli(capsys, "sweep", "--json", "--batch", "1,8", "--ctx", "4k", "--k", "0..4",
                           "--acceptance", str(LOGS / "vllm-metrics.prom"))
    assert code == 0
    d = json.loads(out)
    assert len(d["alpha"]) == 1 and any("enters as alpha" in w for w in d["warnings"])


def test_from_logs_text_and_json(capsys):
    code, out, _ = run_cli(capsys, "acceptance", "from-logs", str(LOGS / "vllm-v1.log"))
    assert code == 0 and "Per-position acceptance" in out and "2124 / 3000" in out.replace(",", "")
    assert "What it implies for other k" in out
    code, out, err = run_cli(capsys, "acceptance", "from-logs", str(LOGS / "trtllm-metrics.prom"), "--k", "3",
                             "--json")
    d = json.loads(out)
    assert code == 0 and d["k"] == 3 and d["expected_tokens"] == pytest.approx(2.4) and "warning:" in err


def test_from_logs_json_reads_back_as_acceptance(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "acceptance", "from-logs", str(LOGS / "vllm-metrics.prom"), "--json")
    saved = tmp_path / "acc.json"
    saved.write_text(out)
    again = load_acceptance(str(saved))
    assert again.per_position == pytest.approx((0.78, 2800 / 3900, 1900 / 2800, 1200 / 1900))
    code, out, _ = run_cli(capsys, "acceptance", "from-logs", str(LOGS / "sglang.log"), "--json")
    saved.write_text(out)
    again = load_acceptance(str(saved))
    assert again.expected_tokens == pytest.approx(2.82) and again.per_position is None
    assert sum("only a mean acceptance length" in w for w in again.warnings) == 1


@pytest.mark.parametrize("args, message", [
    (["acceptance", "from-logs", "nope.log"], "acceptance file not found"),
    (["acceptance", "from-logs", str(LOGS / "trtllm-metrics.prom")], "do not state the draft length"),
    (["predict", "--acceptance", str(LOGS / "sglang.log"), "--alpha", "0.7"], "not both"),
    (["predict", "--acceptance", "no-such-preset"], "neither an existing file nor a preset"),
])
def test_bad_acceptance_is_one_line_exit_2(args, message):
    proc = subprocess.run([sys.executable, "-m", "rooflinesim.cli", *args], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_list_acceptance(capsys):
    code, out, _ = run_cli(capsys, "list", "acceptance")
    assert code == 0 and "eagle3-llama3.1-8b-mtbench-chain7-t1" in out.replace("\n", "")


# --- presets --------------------------------------------------------------------------------------------------------


def test_shipped_presets_load_with_their_conditions():
    presets = list_presets()
    assert len(presets) >= 10
    assert {p.method for p in presets} >= {"eagle", "eagle3", "medusa", "mtp", "draft-model", "ngram"}
    for p in presets:
        m = p.to_measured()
        assert 1.0 <= m.expected_tokens <= p.k + 1 and p.source.url.startswith("https://")
        assert p.name in m.warnings[0] and p.source.url in m.warnings[0]  # the conditions are always stated


def test_preset_golden_numbers():
    m = get_preset("eagle3-llama3.1-8b-mtbench-chain7-t1").to_measured()
    assert (m.k, m.expected_tokens) == (7, 2.77) and float(expected_tokens_iid(m.iid_alpha, 7)) == pytest.approx(2.77)
    # E at k = 1..7 published: a_1 = E_1 - 1 = 0.83, a_2 = (E_2 - E_1) / (E_1 - 1) = 0.62 / 0.83
    rates = get_preset("eagle3-llama4-maverick-humaneval-chain7-t0.6").per_position_rates()
    assert rates[:2] == pytest.approx((0.83, 0.62 / 0.83))
    assert 1 + sum(__import__("numpy").cumprod(rates)) == pytest.approx(3.62)
    tree = get_preset("medusa-vicuna-7b-specbench-tree4-t0").to_measured()
    assert any("tree" in w and "optimistic" in w for w in tree.warnings)


BASE = """schema_version: 1
presets:
  - name: x
    method: eagle3
    target: t/t
    draft: d/d
    task: mt-bench
    shape: chain
    k: 3
    temperature: 0.0
    engine: vLLM
    expected_tokens: 2.5
    source: {title: some card, url: "https://example.org/card", confidence: primary}
"""


@pytest.mark.parametrize("edit, field", [
    (lambda s: s.replace("    temperature: 0.0\n", ""), "temperature"),
    (lambda s: s.replace("    shape: chain\n", ""), "shape"),
    (lambda s: s.replace("    task: mt-bench\n", ""), "task"),
    (lambda s: s.replace("confidence: primary", "confidence: sure"), "confidence"),
    (lambda s: s.replace("https://example.org/card", "example.org"), "url"),
    (lambda s: s.replace("expected_tokens: 2.5", "expected_tokens: 4.5"), "k + 1"),
    (lambda s: s.replace("expected_tokens: 2.5", "per_position: [0.9, 0.8, 0.7]\n    expected_tokens: 2.5"),
     "exactly one"),
    (lambda s: s.replace("shape: chain", "shape: tree").replace("expected_tokens: 2.5", "per_position: [0.9, 0.8, 0.7]"),
     "tree"),
    (lambda s: s.replace("expected_tokens: 2.5", "expected_tokens_by_k: {1: 1.5, 2: 2.2, 3: 2.9}"), "non-increasing"),
    (lambda s: s.replace("    engine: vLLM\n", "    engine: vLLM\n    batch: 1\n"), "unknown key"),
])
def test_preset_schema_rejects_missing_or_inconsistent_conditions(edit, field):
    assert load_preset_library(BASE).presets[0].expected_tokens == 2.5
    with pytest.raises(AcceptanceSourceError, match=field.replace("+", r"\+")):
        load_preset_library(edit(BASE), where="test.yaml")


def test_preset_drafter_kind_mismatch_is_warned():
    mismatch = build_scenario(acceptance="medusa-vicuna-7b-specbench-tree4-t0")
    assert any("measured with a head drafter but a model drafter" in w for w in mismatch.warnings)
    matched = build_scenario(acceptance="medusa-vicuna-7b-specbench-tree4-t0", drafter="head")
    assert not any("drafter but" in w for w in matched.warnings)
    ngram = build_scenario(acceptance="pld-vicuna-7b-specbench-chain10-t0", drafter="ngram")
    assert ngram.acceptance.drafter_kind == "ngram" and not any("drafter but" in w for w in ngram.warnings)


def test_acceptance_k_needs_an_acceptance_file_and_plot_refuses_both(tmp_path):
    with pytest.raises(InputError, match="--acceptance-k"):
        build_scenario(acceptance_k=3)
    proc = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "plot", "speedup", "-o", str(tmp_path / "x.png"),
                           "--acceptance", str(LOGS / "sglang.log"), "--alpha", "0.7"], capture_output=True, text=True)
    assert proc.returncode == 2 and "not both" in proc.stderr
