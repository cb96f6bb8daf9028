"""The command line: JSON contract, bad input (one line, exit 2, no traceback), fast imports, HF configs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rooflinesim
from rooflinesim.cli import main
from rooflinesim.specs.registry import model_from_hf_config

DATA = Path(__file__).parent / "data"
HARDWARE_DIR = Path(__file__).parent.parent / "hardware"


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_bare_predict_json_contract(capsys):
    code, out, _ = run_cli(capsys, "predict", "--json")
    assert code == 0
    d = json.loads(out)
    for key in ("name", "bandwidth_bytes_per_s", "peak_flops_per_s", "ridge_point_flops_per_byte"):
        assert key in d["hardware"]
    for key in ("name", "params", "weight_bytes"):
        assert key in d["model"]
    for key in ("kv_cache_bytes", "fits_in_memory", "max_batch"):
        assert key in d["memory"]
    for key in ("step_time_s", "roofline_step_time_s", "tokens_per_s", "flops", "bytes", "weight_bytes",
                "kv_read_bytes", "arithmetic_intensity", "bound"):
        assert key in d["decode"]
    assert d["ops"] and all({"name", "flops", "bytes", "arithmetic_intensity", "bound", "time_s"} <= set(op) for op in d["ops"])
    for key in ("draft", "k", "alpha", "expected_tokens", "draft_step_time_s", "verify_step_time_s", "step_time_s",
                "speedup", "best_k", "best_speedup"):
        assert key in d["speculative"]
    # bare predict: a100, llama-3.1-8b, bf16, batch 1, ctx 4k, draft llama-3.2-1b at alpha 0.8, k = best k
    assert d["hardware"]["name"] == "NVIDIA A100 SXM4 80GB" and d["model"]["name"] == "Llama-3.1-8B"
    assert d["workload"] == {**d["workload"], "batch": 1, "context_tokens": 4096, "weight_dtype": "bf16"}
    assert d["speculative"]["draft"] == "llama-3.2-1b" and d["speculative"]["alpha"] == 0.8
    assert d["speculative"]["k"] == d["speculative"]["best_k"]
    # the ops plus what the default engine (vllm-v1) adds: its launches and host time
    assert d["engine"] == "vllm-v1" and d["decode"]["engine_s"] > 0
    assert sum(op["time_s"] for op in d["ops"]) + d["decode"]["engine_s"] == pytest.approx(d["decode"]["step_time_s"])


def test_api_to_dict_equals_json_output(capsys):
    # issue 24: llama-2-7b has no default draft (no smaller shipped llama-2): the draft is given
    args = dict(hw="h100", model="llama-2-7b", batch=8, ctx="32k", kv_dtype="fp8", attention="unfused",
                draft="tiny-draft-2l")
    code, out, _ = run_cli(capsys, "predict", "--hw", "h100", "--model", "llama-2-7b", "--batch", "8", "--ctx", "32k",
                           "--kv-dtype", "fp8", "--attention", "unfused", "--allow-long-context", "--draft",
                           "tiny-draft-2l", "--json")
    assert code == 0
    api = rooflinesim.predict(**args, allow_long_context=True).to_dict()
    assert json.loads(out) == json.loads(json.dumps(api))


def test_human_output_has_the_sections(capsys):
    # issue 24: the op table and the k table are printed on request (--ops, --k-table); the summary names the
    # deployment ("Deployment" replaced "Hardware" and "Model") and the speculation ("Speculation")
    code, out, _ = run_cli(capsys, "predict", "--hw", "h200", "--batch", "8", "--ctx", "32k", "--ops", "--k-table")
    assert code == 0
    for text in ("Deployment", "ridge", "Decode step ops", "q_proj", "Decode:", "Prefill", "Memory",
                 "Speculative decoding", "Speculation"):
        assert text in out


def test_infeasible_is_reported_not_crashed(capsys):
    code, out, err = run_cli(capsys, "predict", "--hw", "l4", "--model", "llama-2-70b", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["memory"]["fits_in_memory"] is False and d["memory"]["max_batch"] == 0
    assert "infeasible" in err


def test_list_and_show(capsys):
    code, out, _ = run_cli(capsys, "list", "hardware")
    assert code == 0 and "a100" in out and "mi300x" in out and "tpu-v5e" in out
    code, out, _ = run_cli(capsys, "list", "models")
    assert code == 0 and "llama-3.1-405b" in out
    code, out, _ = run_cli(capsys, "show", "h100", "--json")
    d = json.loads(out)
    assert d["derived"]["ridge_point_flops_per_byte"]["bf16"] == pytest.approx(989e12 / 3.35e12)
    code, out, _ = run_cli(capsys, "show", "llama-2-70b")
    assert code == 0 and "params" in out


def _bad(tmp_path):
    """(arguments, a fragment the error line must contain) for each kind of bad input."""
    malformed = tmp_path / "malformed.yaml"
    malformed.write_text("name: [unclosed\n")
    good = (HARDWARE_DIR / "h100-sxm-80gb.yaml").read_text()
    zero_bw = tmp_path / "zero-bw.yaml"
    zero_bw.write_text(good.replace("memory_bandwidth_bytes_per_s: 3.35e12", "memory_bandwidth_bytes_per_s: 0"))
    negative_bw = tmp_path / "negative-bw.yaml"
    negative_bw.write_text(good.replace("memory_bandwidth_bytes_per_s: 3.35e12", "memory_bandwidth_bytes_per_s: -1.0e12"))
    unknown_key = tmp_path / "unknown-key.yaml"
    unknown_key.write_text(good + "\nflux_capacitor: 1.21e9\n")
    return [
        (["predict", "--hw", "a10"], "did you mean"),
        (["predict", "--hw", "h1000"], "did you mean h100"),
        (["predict", "--model", "llama-3.1-7b"], "did you mean"),
        (["predict", "--hw", str(malformed)], "malformed.yaml"),
        (["predict", "--hw", str(zero_bw)], "memory_bandwidth_bytes_per_s"),
        (["predict", "--hw", str(negative_bw)], "greater than 0"),
        (["predict", "--hw", str(unknown_key)], "flux_capacitor"),
        (["predict", "--model", str(DATA / "gpt2-hf-config.json")], "unsupported architecture 'gpt2'"),
        (["predict", "--model", str(tmp_path / "missing.json")], "not found"),
        (["predict", "--ctx", "32q"], "32q"),
        (["predict", "--batch", "0"], "batch"),
        (["predict", "--batch", "-4"], "batch"),
        (["predict", "--batch", "two"], "batch"),
        (["predict", "--weight-dtype", "fp6"], "unknown dtype"),
        (["predict", "--kv-dtype", "float7"], "unknown dtype"),
        (["predict", "--ctx", "256k"], "exceeds"),
        (["predict", "--alpha", "1.5"], "[0, 1]"),
        (["predict", "--alpha", "-0.1"], "[0, 1]"),
        (["predict", "--k", "-1"], "non-negative"),
        (["predict", "--alpha-per-position", "0.9,0.8", "--k", "4"], "4 per-position"),
        (["predict", "--alpha-per-position", "0.9,1.8"], "[0, 1]"),
        (["predict", "--alpha-per-position", "0.9,x"], "x"),
        (["predict", "--attention", "sparse"], "invalid choice"),
        (["sweep", "--batch", "1..0"], "1..0"),
        (["sweep", "--ctx", "8k..1k"], "empty"),
        (["sweep", "--k", "4..1"], "empty"),
        (["sweep", "--alpha", "0.5,1.2"], "[0, 1]"),
        (["show", "nonexistent-device"], "unknown"),
    ]


def test_bad_input_in_process(tmp_path, capsys):
    for args, fragment in _bad(tmp_path):
        with pytest.raises(SystemExit) as exc_info:
            code = main(args)
            raise SystemExit(code)
        out, err = capsys.readouterr()
        assert exc_info.value.code == 2, (args, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, (args, err)
        assert fragment in lines[0], (args, lines[0])
        assert "Traceback" not in err


@pytest.mark.parametrize("case", range(4))
def test_bad_input_in_a_subprocess_has_no_traceback(tmp_path, case):
    args, fragment = [_bad(tmp_path)[i] for i in (0, 3, 9, 15)][case]
    proc = subprocess.run([sys.executable, "-m", "rooflinesim.cli", *args], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and fragment in proc.stderr


def test_long_context_warns_when_allowed(capsys):
    code, out, err = run_cli(capsys, "predict", "--ctx", "256k", "--allow-long-context", "--json")
    assert code == 0 and "exceeds" in err


def test_draft_with_another_vocabulary_warns(capsys):
    code, out, err = run_cli(capsys, "predict", "--model", "qwen2.5-7b", "--draft", "llama-3.2-1b", "--json")
    assert code == 0 and "shared tokenizer" in err


def test_predict_imports_neither_torch_nor_matplotlib():
    code = (
        "import sys; from rooflinesim.cli import main; main(['predict', '--json']); "
        "bad = [m for m in ('torch', 'matplotlib') if m in sys.modules]; "
        "sys.stderr.write(repr(bad)); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "config, params, window",
    [("llama-hf-config.json", 1.236e9, None), ("qwen2-hf-config.json", 7.616e9, None), ("mistral-hf-config.json", 7.24e9, 4096)],
)
def test_hf_config_import(config, params, window, capsys):
    spec = model_from_hf_config(DATA / config)
    assert spec.params == pytest.approx(params, rel=0.01)
    assert spec.sliding_window_tokens == window
    code, out, _ = run_cli(capsys, "predict", "--model", str(DATA / config), "--json", "--no-speculation")
    assert code == 0 and json.loads(out)["model"]["params"] == spec.params
