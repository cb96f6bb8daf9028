"""The bad-input matrix (issue 15): every subcommand and the Python API, given hostile or broken input, answers with
exactly one line and exit code 2 (CLI) or one InputError / SpecError line (API), naming the file, field or flag and
the reason, never a traceback, and writes nothing: no output file appears and a good file already there is left as
it was.

Each case is (id, arguments, fragments of the error line). Arguments may name the hostile input files of `inputs`
as `{name}` and the test's own empty folder as `{out}`; every CLI case runs with that folder as the working
directory, so anything a command wrote (even relative to the working directory) is seen.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

import rooflinesim
from rooflinesim import plots
from rooflinesim.cli import main
from rooflinesim.scenario import build_scenario
from rooflinesim.specs import InputError
from rooflinesim.spec_base import SpecError
from rooflinesim.sweep import sweep
from rooflinesim.units import UnitError
from rooflinesim.validation_report import load_validation_report

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
PROFILE = ROOT / "calibrate" / "cpu-intel-xeon-2c.yaml"
GARBAGE = bytes(range(256)) * 4  # invalid UTF-8 and control characters
GOOD_CONTENT = b"a good file from an earlier run\n"
HAS_TORCH = importlib.util.find_spec("torch") is not None
USER_ERRORS = (InputError, SpecError, UnitError)


# --- the hostile input files ------------------------------------------------------------------------------------------


def _replace_line(source: Path, field: str, value: str) -> str:
    lines = source.read_text().splitlines()
    assert any(line.startswith(f"{field}:") for line in lines), (source, field)
    return "\n".join(f"{field}: {value}" if line.startswith(f"{field}:") else line for line in lines) + "\n"


def _profile_variant(data: dict, change) -> str:
    data = json.loads(json.dumps(data))  # a deep copy
    change(data["measured"]["dtypes"]["fp32"])
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def _decode_fit(dtype_data: dict) -> dict:
    return dtype_data["attention"][next(k for k in dtype_data["attention"] if k.startswith("decode"))]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("hostile")
    hf = json.loads((DATA / "llama-hf-config.json").read_text())
    profile = yaml.load(PROFILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    h100, llama = ROOT / "hardware" / "h100-sxm-80gb.yaml", ROOT / "models" / "llama-3.1-8b.yaml"
    files = {
        "garbage.yaml": GARBAGE,
        "garbage.json": GARBAGE,
        "malformed.yaml": "name: test\npeak_flops_per_s: [unclosed\n",
        "empty.yaml": "",
        "hf-zero-heads.json": json.dumps({**hf, "num_attention_heads": 0}),
        "hf-list.json": "[1, 2, 3]",
        "hf-string.json": '"a config"',
        "hf-infinity.json": json.dumps({**hf, "hidden_size": "INF"}).replace('"INF"', "Infinity"),
        "hf-4095.json": json.dumps({**{k: v for k, v in hf.items() if k != "head_dim"}, "hidden_size": 4095}),
        "hf-truncated.json": json.dumps(hf)[:100],
        "profile-attention-empty.yaml": _profile_variant(profile, lambda d: d.update(attention={})),
        "profile-attention-unknown.yaml": _profile_variant(
            profile, lambda d: d["attention"].update(sparse_d64=_decode_fit(d))),
        "profile-negative.yaml": _profile_variant(
            profile, lambda d: _decode_fit(d)["coefficients"].update(kv_bytes=-1e-9)),
        "profile-nan.yaml": _profile_variant(profile, lambda d: d.update(layer_overhead_s=float("nan"))),
        "hw-inf.yaml": _replace_line(h100, "memory_bandwidth_bytes_per_s", ".inf"),
        "hw-nan.yaml": _replace_line(h100, "memory_bandwidth_bytes_per_s", ".nan"),
        "hw-true.yaml": _replace_line(h100, "memory_bandwidth_bytes_per_s", "true"),
        "hw-string.yaml": _replace_line(h100, "memory_capacity_bytes", "80GB"),
        "hw-tiny-bandwidth.yaml": _replace_line(h100, "memory_bandwidth_bytes_per_s", "1.0e-300"),
        "hw-tiny-peak.yaml": h100.read_text().replace("bf16: 989.0e12", "bf16: 1.0e-300"),
        "profile-huge.yaml": _profile_variant(
            profile, lambda d: _decode_fit(d)["coefficients"].update(kv_bytes=1e300)),
        "model-fraction.yaml": _replace_line(llama, "hidden_size", "4096.7"),
        "model-nan.yaml": _replace_line(llama, "num_layers", ".nan"),
        "model-bool.yaml": _replace_line(llama, "vocab_size", "true"),
        "report-not-a-report.json": json.dumps({"hello": "world"}),
        "report-rows.json": json.dumps({"configs": ["decode"]}),
        "report-infinite.json": json.dumps({"configs": [{"kind": "decode", "measured_s": 1e-3, "predicted_s": 1e-3,
                                                         "roofline_s": float("inf")}]}),
    }
    paths = {}
    for name, content in files.items():
        path = folder / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        paths[name] = str(path)
    paths["missing.yaml"] = str(folder / "missing.yaml")
    paths["profile"] = str(PROFILE)
    paths["h100.yaml"] = str(h100)
    paths["llama.yaml"] = str(llama)
    return paths


def _expand(args, inputs: dict, out: Path) -> list[str]:
    names = {k.replace(".", "_").replace("-", "_"): v for k, v in inputs.items()}
    return [str(a).format(out=out, **names) for a in args]


# --- the command line -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple
    fragments: tuple  # every one must be in the error line
    keep: tuple = ()  # output files that exist (with good content) before the run and must be unchanged after
    torch: bool = False  # calibrate / validate: skipped where torch is not installed (they say so instead)


def case(id, args, *fragments, keep=(), torch=False) -> Case:
    return Case(id, tuple(args.split()) if isinstance(args, str) else tuple(args), fragments, keep, torch)


CLI_CASES = [
    # --- predict: hostile files -------------------------------------------------------------------------------------
    case("predict-hw-garbage", "predict --hw {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("predict-model-garbage", "predict --model {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("predict-model-garbage-json", "predict --model {garbage_json}", "garbage.json", "UTF-8"),
    case("predict-calibration-garbage", "predict --hw cpu-generic --calibration {garbage_yaml}", "garbage.yaml",
         "UTF-8"),
    case("predict-draft-garbage", "predict --draft {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("predict-hw-malformed", "predict --hw {malformed_yaml}", "malformed.yaml", "line 3", "malformed YAML"),
    case("predict-hw-empty", "predict --hw {empty_yaml}", "empty.yaml", "mapping"),
    case("predict-hw-missing", "predict --hw {missing_yaml}", "missing.yaml", "not found"),
    case("predict-hf-zero-heads", "predict --model {hf_zero_heads_json}", "hf-zero-heads.json",
         "num_attention_heads", "positive"),
    case("predict-hf-list", "predict --model {hf_list_json}", "hf-list.json", "list"),
    case("predict-hf-string", "predict --model {hf_string_json}", "hf-string.json", "str"),
    case("predict-hf-infinity", "predict --model {hf_infinity_json}", "hf-infinity.json", "hidden_size", "finite"),
    case("predict-hf-4095-heads", "predict --model {hf_4095_json}", "hf-4095.json", "hidden_size", "divisible"),
    case("predict-hf-truncated", "predict --model {hf_truncated_json}", "hf-truncated.json"),
    case("predict-hf-unsupported", f"predict --model {DATA / 'gpt2-hf-config.json'}", "gpt2"),
    case("predict-profile-attention-empty", "predict --hw {profile_attention_empty_yaml} --model tiny-llama-123m",
         "profile-attention-empty.yaml", "attention"),
    case("predict-profile-attention-unknown", "predict --hw {profile_attention_unknown_yaml}",
         "profile-attention-unknown.yaml", "sparse_d64"),
    case("predict-profile-negative", "predict --hw {profile_negative_yaml}", "profile-negative.yaml", "kv_bytes",
         "greater than or equal"),
    case("predict-profile-nan", "predict --hw {profile_nan_yaml}", "profile-nan.yaml", "layer_overhead_s", "finite"),
    case("predict-calibration-negative", "predict --hw cpu-generic --calibration {profile_negative_yaml}",
         "profile-negative.yaml", "kv_bytes"),
    case("predict-calibration-model-file", "predict --hw cpu-generic --calibration {llama_yaml}",
         "a model spec (or Hugging Face config), not a measured profile"),
    case("predict-calibration-hf-config", f"predict --hw cpu-generic --calibration {DATA / 'llama-hf-config.json'}",
         "not a measured profile"),
    case("predict-calibration-not-a-profile", "predict --hw cpu-generic --calibration {h100_yaml}", "measured"),
    case("predict-hw-inf", "predict --hw {hw_inf_yaml}", "memory_bandwidth_bytes_per_s", "finite"),
    case("predict-hw-nan", "predict --hw {hw_nan_yaml}", "memory_bandwidth_bytes_per_s", "finite"),
    case("predict-hw-true", "predict --hw {hw_true_yaml}", "memory_bandwidth_bytes_per_s", "number"),
    case("predict-hw-tiny-bandwidth", "predict --hw {hw_tiny_bandwidth_yaml}", "prices a prefill step",
         "far outside any physical range"),
    case("predict-hw-tiny-peak", "predict --hw {hw_tiny_peak_yaml} --json", "at inf s", "physical range"),
    case("predict-profile-huge-coefficient", "predict --hw {profile_huge_yaml} --model tiny-llama-123m "
         "--weight-dtype fp32 --draft tiny-draft-2l --json", "prices a decode/verify step", "physical range"),
    case("predict-hw-string-number", "predict --hw {hw_string_yaml}", "memory_capacity_bytes", "number"),
    case("predict-model-fraction", "predict --model {model_fraction_yaml}", "hidden_size", "integer"),
    case("predict-model-nan", "predict --model {model_nan_yaml}", "num_layers"),
    case("predict-model-as-hw", "predict --hw {llama_yaml}", "a model spec, not a hardware spec"),
    case("predict-hw-as-model", "predict --model {h100_yaml}", "a hardware spec, not a model spec"),
    # --- predict: names, units and values -------------------------------------------------------------------------
    case("predict-unknown-hw", "predict --hw h1000", "unknown hardware 'h1000'", "did you mean h100"),
    case("predict-unknown-model", "predict --model llama-3.1-7b", "unknown model", "did you mean"),
    case("predict-unknown-draft", "predict --draft llama-3.2-1c", "unknown model 'llama-3.2-1c'", "did you mean"),
    case("predict-ctx-unit", "predict --ctx 32q", "context", "32q"),
    case("predict-ctx-negative", "predict --ctx -5", "context", "-5"),
    case("predict-ctx-too-long", "predict --ctx 256k", "exceeds", "--allow-long-context"),
    case("predict-ctx-absurd", "predict --ctx 4096M --allow-long-context", "context", "at most"),
    case("predict-batch-zero", "predict --batch 0", "batch", "positive integer"),
    case("predict-batch-fraction", "predict --batch 1.5", "batch", "1.5"),
    case("predict-batch-int64-max", "predict --batch 9223372036854775807", "batch", "at most"),
    case("predict-batch-word", "predict --batch two", "batch", "two"),
    case("predict-alpha-above-1", "predict --alpha 1.5", "acceptance rate", "[0, 1]"),
    case("predict-alpha-nan", "predict --alpha nan", "acceptance rate", "[0, 1]"),
    case("predict-alpha-inf", "predict --alpha inf", "acceptance rate", "[0, 1]"),
    case("predict-alpha-per-position-empty", ["predict", "--alpha-per-position", ""], "acceptance rate"),
    case("predict-alpha-per-position-word", "predict --alpha-per-position 0.9,x", "acceptance rate", "'x'"),
    case("predict-alpha-per-position-nan", "predict --alpha-per-position 0.9,nan", "acceptance rate", "finite"),
    case("predict-alpha-and-per-position", "predict --alpha 0.8 --alpha-per-position 0.9", "either"),
    case("predict-k-negative", "predict --k -1", "k (draft length)", "non-negative"),
    case("predict-k-too-large", "predict --k 65", "k (draft length)", "at most 64"),
    case("predict-k-fraction", "predict --k 1.5", "--k", "1.5"),
    case("predict-k-beyond-per-position", "predict --alpha-per-position 0.9,0.8 --k 4", "4 per-position"),
    case("predict-head-fraction-inf", "predict --drafter head --head-layer-fraction inf", "head layer fraction",
         "finite"),
    case("predict-head-fraction-nan", "predict --drafter head --head-layer-fraction nan", "head layer fraction"),
    case("predict-head-fraction-negative", "predict --drafter head --head-layer-fraction -1", "head layer fraction"),
    case("predict-tp-fraction", "predict --tp 2.5", "--tp", "2.5"),
    case("predict-tp-zero", "predict --tp 0", "--tp", "positive integer"),
    case("predict-tp-not-dividing", "predict --tp 3", "--tp 3 does not divide", "32 attention heads"),
    case("predict-draft-tp-fraction", "predict --draft-tp 1.5", "--draft-tp", "1.5"),
    case("predict-quant-group-zero", "predict --weight-dtype int4 --quant-group-size 0", "quantisation group size"),
    case("predict-dtype-unknown", "predict --weight-dtype fp6", "unknown dtype 'fp6'"),
    case("predict-kv-dtype-unknown", "predict --kv-dtype float7", "unknown dtype 'float7'"),
    case("predict-activation-int8", "predict --activation-dtype int8", "activations cannot be int8"),
    case("predict-attention-unknown", "predict --attention sparse", "--attention", "sparse"),
    case("predict-drafter-unknown", "predict --drafter eagle", "--drafter", "eagle"),
    case("predict-unknown-flag", "predict --bogus 1", "unrecognized arguments", "--bogus"),
    # --- the usage line ------------------------------------------------------------------------------------------
    case("usage-repeated-prog", "rooflinesim", "invalid choice", "see 'rooflinesim --help'"),
    case("usage-no-command", (), "required", "see 'rooflinesim --help'"),
    case("usage-sub-command", "predict --batch", "--batch", "see 'rooflinesim predict --help'"),
    # --- sweep ---------------------------------------------------------------------------------------------------
    case("sweep-hw-garbage", "sweep --hw {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("sweep-model-hf-list", "sweep --model {hf_list_json}", "hf-list.json"),
    case("sweep-k-huge-range", "sweep --k 0..100000000", "100000001 values", "at most 10000"),
    case("sweep-k-negative-range", "sweep --k -1..2", "k (draft length)", "non-negative"),
    case("sweep-k-too-large", "sweep --k 0..65", "k (draft length)", "at most 64"),
    case("sweep-k-word", "sweep --k a..b", "integer range", "a..b"),
    case("sweep-batch-int64-max", "sweep --batch 9223372036854775807", "batch", "at most"),
    case("sweep-batch-range-empty", "sweep --batch 1..0", "1..0"),
    case("sweep-ctx-range-empty", "sweep --ctx 8k..1k", "empty"),
    case("sweep-ctx-unit", "sweep --ctx 1k..32q", "32q"),
    case("sweep-alpha-out-of-range", "sweep --alpha 0.5,1.2", "[0, 1]"),
    case("sweep-alpha-nan", "sweep --alpha 0.5,nan", "acceptance rate", "finite"),
    case("sweep-grid-too-large", ["sweep", "--batch", ",".join(str(b) for b in range(1, 2001)), "--ctx", "1..1M",
                                  "--k", "0..64"], "grid of 2,000 batches x 21 contexts x 65 k", "GB", "fewer points"),
    case("sweep-hw-tiny-bandwidth", "sweep --json --hw {hw_tiny_bandwidth_yaml} --batch 1,8 --ctx 1k",
         "physical range"),
    case("sweep-format-unknown", "sweep --format xml", "--format", "xml"),
    case("sweep-out-folder", "sweep -o {out}", "sweep output (-o)", "is a folder"),
    case("sweep-out-missing-folder", "sweep -o {out}/no/such/grid.csv", "sweep output (-o)", "does not exist"),
    case("sweep-out-under-a-file", "sweep -o {out}/grid.csv/inner.csv", "sweep output (-o)", "grid.csv",
         keep=("grid.csv",)),
    case("sweep-out-unwritable", "sweep -o /sys/rooflinesim-grid.csv --batch 1 --ctx 1k --k 0..1",
         "sweep output (-o) folder is not writable", "/sys"),
    case("sweep-out-kept-on-bad-input", "sweep -o {out}/grid.csv --batch 0", "batch", keep=("grid.csv",)),
    case("sweep-out-kept-on-bad-file", "sweep -o {out}/grid.json --hw {garbage_yaml}", "UTF-8", keep=("grid.json",)),
    # --- plot ----------------------------------------------------------------------------------------------------
    case("plot-hw-garbage", "plot roofline -o {out}/c.png --hw {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("plot-model-garbage", "plot speedup -o {out}/c.png --model {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("plot-calibration-garbage", "plot roofline -o {out}/c.png --hw cpu-generic --calibration {garbage_yaml}",
         "garbage.yaml", "UTF-8"),
    case("plot-out-folder", "plot roofline -o {out}", "chart output (-o)", "must end in .png or .svg"),
    case("plot-out-folder-named-png", "plot roofline -o {out}/dir.png", "chart output (-o)", "is a folder",
         keep=("dir.png/",)),
    case("plot-out-unwritable", "plot roofline -o /sys/rooflinesim-chart.png", "chart output (-o) folder is not writable",
         "/sys"),
    case("plot-out-missing-folder", "plot k -o {out}/no/c.png", "chart output (-o)", "does not exist"),
    case("plot-out-suffix", "plot roofline -o {out}/c.pdf", "chart output (-o)", ".png or .svg"),
    case("plot-out-kept-on-bad-input", "plot roofline -o {out}/c.png --ctx 32q", "32q", keep=("c.png",)),
    case("plot-out-kept-on-bad-k", "plot speedup -o {out}/c.svg --k 0..100000000", "at most 10000",
         keep=("c.svg",)),
    case("plot-validation-no-report", "plot validation -o {out}/c.png", "--report"),
    case("plot-validation-garbage", "plot validation -o {out}/c.png --report {garbage_json}", "garbage.json",
         "UTF-8"),
    case("plot-validation-rows-not-objects", "plot validation -o {out}/c.png --report {report_rows_json}",
         "report-rows.json", "configs[0] must be a JSON object"),
    case("plot-validation-infinite-time", "plot validation -o {out}/c.png --report {report_infinite_json}",
         "report-infinite.json", "configs[0]", "positive numbers"),
    case("plot-validation-not-a-report", "plot validation -o {out}/c.png --report {report_not_a_report_json}",
         "report-not-a-report.json"),
    case("plot-validation-missing", "plot validation -o {out}/c.png --report {missing_yaml}", "missing.yaml"),
    case("plot-k-two-batches", "plot k -o {out}/c.png --batch 1,2", "plot k takes one --batch"),
    case("plot-speedup-two-alphas", "plot speedup -o {out}/c.png --alpha 0.5,0.6", "one --alpha"),
    case("plot-speedup-alpha-nan", "plot speedup -o {out}/c.png --alpha nan", "acceptance rate", "finite"),
    case("plot-roofline-tp", "plot roofline -o {out}/c.png --tp 2.5", "--tp", "2.5"),
    case("plot-kind-unknown", "plot cake -o {out}/c.png", "invalid choice", "cake"),
    case("plot-no-output", "plot roofline", "-o/--output"),
    # --- list and show -------------------------------------------------------------------------------------------
    case("list-unknown", "list gpus", "invalid choice", "gpus"),
    case("list-nothing", "list", "what"),
    case("show-garbage", "show {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("show-garbage-json", "show {garbage_json}", "garbage.json", "UTF-8"),
    case("show-malformed", "show {malformed_yaml}", "malformed.yaml", "line 3", "malformed YAML"),
    case("show-bad-model-yaml", "show {model_fraction_yaml}", "model-fraction.yaml", "hidden_size", "integer"),
    case("show-bad-model-bool", "show {model_bool_yaml}", "model-bool.yaml", "vocab_size"),
    case("show-bad-hw-yaml", "show {hw_inf_yaml}", "hw-inf.yaml", "memory_bandwidth_bytes_per_s"),
    case("show-hf-zero-heads", "show {hf_zero_heads_json}", "hf-zero-heads.json", "num_attention_heads"),
    case("show-unknown", "show h1000", "unknown hardware or model 'h1000'", "did you mean"),
    case("show-missing", "show {missing_yaml}", "missing.yaml", "not found"),
    case("show-empty", "show {empty_yaml}", "empty.yaml"),
    # --- calibrate: refused before any measuring -----------------------------------------------------------------
    case("calibrate-out-folder", "calibrate --quick --out {out}/p.yaml", "profile (--out)", "is a folder",
         keep=("p.yaml/",), torch=True),
    case("calibrate-out-unwritable", "calibrate --quick --out /sys/rooflinesim-profile.yaml", "profile (--out) folder",
         "not writable", "/sys", torch=True),
    case("calibrate-out-under-a-file", "calibrate --quick --out {out}/p.yaml/inner.yaml", "p.yaml",
         keep=("p.yaml",), torch=True),
    case("calibrate-out-suffix", "calibrate --quick --out {out}/p.txt", "profile (--out)", ".yaml", torch=True),
    case("calibrate-threads-zero", "calibrate --quick --threads 0 --out {out}/p.yaml", "--threads", "positive",
         keep=("p.yaml",), torch=True),
    case("calibrate-dtype-unknown", "calibrate --quick --dtype fp6 --out {out}/p.yaml", "unknown dtype 'fp6'",
         torch=True),
    case("calibrate-dtype-empty", "calibrate --quick --dtype , --out {out}/p.yaml", "--dtype", torch=True),
    case("calibrate-out-new-folder-kept-absent", "calibrate --quick --device tpu --out {out}/new/p.yaml", "tpu",
         torch=True),
    case("calibrate-out-under-a-file-deeper", "calibrate --quick --out {out}/p.yaml/a/b.yaml", "cannot be created",
         keep=("p.yaml",), torch=True),
    case("calibrate-device-unknown", "calibrate --quick --device tpu --out {out}/p.yaml", "tpu", torch=True),
    # --- validate: refused before any measuring ------------------------------------------------------------------
    case("validate-out-dir-file", "validate --profile {profile} --out-dir {out}/report.json", "--out-dir",
         "is a file", keep=("report.json",), torch=True),
    case("validate-out-dir-unwritable", "validate --profile {profile} --out-dir /sys/rooflinesim-reports",
         "--out-dir", "/sys", torch=True),
    case("validate-out-dir-new-folder-not-left-behind", "validate --profile {profile} --model llama-3.1-405b "
         "--out-dir {out}/new/reports", "needs about", torch=True),
    case("validate-out-dir-under-a-file", "validate --profile {profile} --out-dir {out}/report.json/sub",
         "--out-dir", "cannot be created", keep=("report.json",), torch=True),
    case("validate-threads-zero", "validate --profile {profile} --threads 0 --out-dir {out}", "--threads",
         torch=True),
    case("validate-profile-garbage", "validate --profile {garbage_yaml} --out-dir {out}", "garbage.yaml", "UTF-8",
         torch=True),
    case("validate-profile-missing", "validate --profile {missing_yaml} --out-dir {out}", "missing.yaml",
         "not found", torch=True),
    case("validate-profile-not-measured", "validate --profile {h100_yaml} --out-dir {out}", "measured", torch=True),
    case("validate-profile-attention-empty", "validate --profile {profile_attention_empty_yaml} --out-dir {out}",
         "attention", torch=True),
    case("validate-profile-model-file", "validate --profile {llama_yaml} --out-dir {out}", "llama-3.1-8b.yaml",
         "not a measured profile", torch=True),
    case("validate-dtype-unknown", "validate --profile {profile} --dtype fp6 --out-dir {out}",
         "unknown dtype 'fp6'", torch=True),
    case("validate-model-too-large", "validate --profile {profile} --model llama-3.1-405b --out-dir {out}",
         "needs about", "GB", torch=True),
    case("validate-model-unknown", "validate --profile {profile} --model llama-9 --out-dir {out}",
         "unknown model 'llama-9'", torch=True),
]


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def _prepare(case: Case, out: Path) -> None:
    for name in case.keep:
        if name.endswith("/"):
            (out / name).mkdir()
        else:
            (out / name).write_bytes(GOOD_CONTENT)


def _check_error(case: Case, code, err: str) -> str:
    assert code == 2, (case.id, code, err)
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, (case.id, err)
    line = lines[0]
    assert line.startswith("rooflinesim: error: "), line
    for fragment in case.fragments:
        assert fragment in line, (case.id, fragment, line)
    return line


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(case, inputs, tmp_path, capsys, monkeypatch):
    if case.torch and not HAS_TORCH:
        pytest.skip("calibrate/validate need torch")
    out = tmp_path / "out"
    out.mkdir()
    _prepare(case, out)
    before = _snapshot(out)
    monkeypatch.chdir(out)  # a command that writes relative to the working directory is seen too
    try:
        code = main(_expand(case.args, inputs, out))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    _check_error(case, code, captured.err)
    assert _snapshot(out) == before, f"{case.id} wrote into the output folder"
    assert not list(Path("/sys").glob("rooflinesim-*"))


SUBPROCESS_CASES = ["predict-hw-garbage", "predict-hf-infinity", "usage-repeated-prog", "sweep-k-negative-range",
                    "sweep-out-kept-on-bad-file", "plot-out-unwritable", "show-bad-model-yaml"]


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_cli_bad_input_in_a_subprocess(case_id, inputs, tmp_path):
    """The same cases through `python -m rooflinesim.cli`: what a user sees, with the interpreter's own handling."""
    case = next(c for c in CLI_CASES if c.id == case_id)
    out = tmp_path / "out"
    out.mkdir()
    _prepare(case, out)
    before = _snapshot(out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "rooflinesim.cli", *_expand(case.args, inputs, out)],
                          capture_output=True, text=True, cwd=out, env=env, timeout=120)
    _check_error(case, proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert _snapshot(out) == before


def test_usage_line_names_the_command_once(capsys):
    """`rooflinesim rooflinesim` read as `rooflinesim rooflinesim --help` (the program name twice)."""
    with pytest.raises(SystemExit):
        main(["rooflinesim"])
    err = capsys.readouterr().err
    assert "rooflinesim rooflinesim" not in err and "see 'rooflinesim --help'" in err


# --- the Python API ---------------------------------------------------------------------------------------------------

API_CASES = [
    # (id, call, fragments of the message)
    ("predict-k-nan", lambda f: rooflinesim.predict(k=float("nan")), ("k (draft length)", "nan")),
    ("predict-k-inf", lambda f: rooflinesim.predict(k=float("inf")), ("k (draft length)", "inf")),
    ("predict-k-fraction", lambda f: rooflinesim.predict(k=2.5), ("k (draft length)", "2.5")),
    ("predict-k-string", lambda f: rooflinesim.predict(k="4"), ("k (draft length)", "'4'")),
    ("predict-k-bool", lambda f: rooflinesim.predict(k=True), ("k (draft length)", "True")),
    ("predict-two-alphas", lambda f: rooflinesim.predict(alpha=[0.5, 0.6]), ("one acceptance rate", "0.5, 0.6")),
    ("predict-alpha-nan", lambda f: rooflinesim.predict(alpha=float("nan")), ("acceptance rate", "[0, 1]")),
    ("predict-alpha-string", lambda f: rooflinesim.predict(alpha="high"), ("acceptance rate", "'high'")),
    ("predict-alpha-per-position-bad", lambda f: rooflinesim.predict(alpha_per_position="0.9,1.5"),
     ("per-position acceptance rate", "1.5")),
    ("predict-alpha-per-position-empty", lambda f: rooflinesim.predict(alpha_per_position=[]),
     ("alpha_per_position",)),
    ("predict-ctx-list-two", lambda f: rooflinesim.predict(ctx=["4k", "8k"]), ("one batch and one context",)),
    ("predict-ctx-unit", lambda f: rooflinesim.predict(ctx="32q"), ("context", "32q")),
    ("predict-ctx-nan", lambda f: rooflinesim.predict(ctx=float("nan")), ("context", "nan")),
    ("predict-ctx-bool", lambda f: rooflinesim.predict(ctx=True), ("context", "True")),
    ("predict-ctx-none", lambda f: rooflinesim.predict(ctx=None), ("context",)),
    ("predict-batch-none", lambda f: rooflinesim.predict(batch=None), ("batch",)),
    ("predict-batch-huge", lambda f: rooflinesim.predict(batch=2**63), ("batch", "at most")),
    ("predict-hw-garbage", lambda f: rooflinesim.predict(hw=f["garbage.yaml"]), ("garbage.yaml", "UTF-8")),
    ("predict-hw-number", lambda f: rooflinesim.predict(hw=3), ("unknown hardware '3'",)),
    ("predict-model-none", lambda f: rooflinesim.predict(model=None), ("model",)),
    ("predict-head-fraction-inf", lambda f: rooflinesim.predict(drafter="head", head_layer_fraction=float("inf")),
     ("head layer fraction",)),
    ("predict-head-fraction-string", lambda f: rooflinesim.predict(drafter="head", head_layer_fraction="1"),
     ("head layer fraction",)),
    ("predict-attention-none", lambda f: rooflinesim.predict(attention=None), ("attention",)),
    ("predict-weight-dtype-none", lambda f: rooflinesim.predict(weight_dtype=None), ("dtype",)),
    ("predict-calibration-garbage", lambda f: rooflinesim.predict(hw="cpu-generic", calibration=f["garbage.yaml"]),
     ("garbage.yaml",)),
    ("predict-calibration-number", lambda f: rooflinesim.predict(hw="cpu-generic", calibration=123),
     ("calibration profile", "123")),
    ("scenario-allow-long-context-string", lambda f: build_scenario(ctx="1M", allow_long_context="no"),
     ("allow_long_context must be True or False", "'no'")),
    ("scenario-speculative-string", lambda f: build_scenario(speculative="no"), ("speculative must be True or False",)),
    ("scenario-extra-draft-pass-number", lambda f: build_scenario(extra_draft_pass=2), ("extra_draft_pass",)),
    ("scenario-tp-fraction", lambda f: build_scenario(tp=2.5), ("--tp", "2.5")),
    ("scenario-tp-string", lambda f: build_scenario(tp="two"), ("--tp", "two")),
    ("scenario-batch-fraction", lambda f: build_scenario(batch=[1.5]), ("batch", "1.5")),
    ("scenario-batch-bool", lambda f: build_scenario(batch=[True]), ("batch", "True")),
    ("scenario-batch-empty", lambda f: build_scenario(batch=[]), ("batch",)),
    ("scenario-batch-2d", lambda f: build_scenario(batch=[[1, 2]]), ("batch",)),
    ("scenario-quant-group-fraction", lambda f: build_scenario(weight_dtype="int4", quant_group_size=64.5),
     ("quantisation group size", "64.5")),
    ("scenario-k-values-nan", lambda f: build_scenario(k_values=[0, float("nan")]), ("k (draft length)",)),
    ("scenario-k-values-empty", lambda f: build_scenario(k_values=[]), ("k needs at least one value",)),
    ("scenario-drafter-unknown", lambda f: build_scenario(drafter="eagle"), ("drafter", "eagle")),
    ("scenario-draft-tp-zero", lambda f: build_scenario(draft_tp=0), ("--draft-tp",)),
    ("scenario-context-too-long", lambda f: build_scenario(ctx="1M"), ("exceeds", "allow_long_context")),
    ("sweep-k-inf", lambda f: sweep(k=[0, float("inf")]), ("k (draft length)", "inf")),
    ("sweep-alpha-string-list", lambda f: sweep(alpha=["0.6", "x"]), ("acceptance rate",)),
    ("sweep-alpha-above-1", lambda f: sweep(alpha=1.5), ("acceptance rate", "1.5")),
    ("sweep-per-position", lambda f: sweep(alpha=None, alpha_per_position=[0.9, 0.8], k=[0, 1]),
     ("per-position",)),
    ("sweep-no-speculation", lambda f: sweep(speculative=False), ("drafter",)),
    ("sweep-ctx-word", lambda f: sweep(ctx=["1k", "lots"]), ("context", "lots")),
    ("sweep-batch-huge", lambda f: sweep(batch=[1, 10**30]), ("batch", "at most")),
    ("plots-roofline-garbage", lambda f: plots.get_roofline_data(plots.get_scenario(f["garbage.yaml"])),
     ("garbage.yaml", "UTF-8")),
    ("plots-roofline-k-nan", lambda f: plots.get_roofline_data(build_scenario(), k=float("nan")),
     ("verify k (draft length)", "nan")),
    ("plots-speedup-map-two-alphas", lambda f: plots.get_speedup_map_data(build_scenario(
        batch=[1, 2], ctx=[1024, 2048], alpha=[0.5, 0.6], k_values=[0, 1])), ("one acceptance rate",)),
    ("plots-speedup-vs-k-grid", lambda f: plots.get_speedup_vs_k_data(build_scenario(batch=[1, 2])),
     ("one batch and one context",)),
    ("plots-breakdown-new-tokens", lambda f: plots.get_breakdown_data(build_scenario(ctx=[1024, 2048]),
                                                                      new_tokens=0), ("new tokens",)),
    ("plots-speedup-vs-k-k-max-nan", lambda f: plots.plot_speedup_vs_k(k_max=float("nan")), ("k_max", "nan")),
    ("plots-breakdown-new-tokens-nan", lambda f: plots.get_breakdown_data(build_scenario(ctx=[1024, 2048]),
                                                                          new_tokens=float("nan")),
     ("new tokens per sequence", "nan")),
    ("plots-breakdown-new-tokens-fraction", lambda f: plots.get_breakdown_data(build_scenario(ctx=[1024, 2048]),
                                                                               new_tokens=2.5),
     ("new tokens per sequence", "2.5")),
    ("plots-validation-not-a-path", lambda f: plots.load_validation_report(5), ("JSON file path or a dict", "5")),
    ("plots-validation-by-dtype-not-object", lambda f: plots.plot_validation(
        {"configs": [{"kind": "decode", "measured_s": 1.0, "predicted_s": 1.0, "roofline_s": 1.0}],
         "by_dtype": {"fp32": 5}}), ("by_dtype.fp32 must be a JSON object",)),
    ("plots-validation-garbage", lambda f: plots.load_validation_report(f["garbage.json"]), ("garbage.json", "UTF-8")),
    ("report-schema-garbage", lambda f: load_validation_report(f["garbage.json"]), ("garbage.json", "UTF-8")),
    ("plots-validation-speculative-not-list", lambda f: plots.load_validation_report(
        {"configs": [{"kind": "decode", "measured_s": 1.0, "predicted_s": 1.0, "roofline_s": 1.0}], "speculative": 3}),
     ("'speculative' must be a JSON list",)),
    ("plots-validation-missing", lambda f: plots.load_validation_report(f["missing.yaml"]), ("missing.yaml",)),
    ("plots-speedup-map-hw-inf", lambda f: plots.plot_speedup_map(hw=f["hw-inf.yaml"]),
     ("memory_bandwidth_bytes_per_s", "finite")),
]


@pytest.mark.parametrize("call, fragments", [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES])
def test_api_bad_input_is_one_line_user_error(call, fragments, inputs):
    with pytest.raises(USER_ERRORS) as info:
        call(inputs)
    message = str(info.value)
    assert "\n" not in message and message.strip(), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# --- inputs once refused with a traceback that are valid and now accepted ---------------------------------------------


def test_alpha_per_position_as_a_string_is_parsed():
    from_string = rooflinesim.predict(alpha_per_position="0.9,0.8")
    from_list = rooflinesim.predict(alpha_per_position=[0.9, 0.8])
    assert from_string.speculative.to_dict() == from_list.speculative.to_dict()
    assert from_string.speculative.k <= 2


def test_scalar_sweep_axes_are_one_point_axes():
    scalar = sweep(batch=8, ctx="4k", alpha=0.8, k=2)
    listed = sweep(batch=[8], ctx=[4096], alpha=[0.8], k=[2])
    assert scalar.speedup.shape == (1, 1, 1, 1)
    np.testing.assert_array_equal(scalar.speedup, listed.speedup)


def test_predict_takes_a_one_value_context_list():
    assert rooflinesim.predict(ctx=["4k"]).to_dict() == rooflinesim.predict(ctx=4096).to_dict()


def test_numpy_scalars_are_accepted_like_python_numbers():
    a = rooflinesim.predict(batch=np.int64(8), ctx=np.int32(2048), k=np.int64(3), alpha=np.float32(0.5))
    b = rooflinesim.predict(batch=8, ctx=2048, k=3, alpha=0.5)
    assert a.speculative.speedup == pytest.approx(b.speculative.speedup) and math.isfinite(a.speculative.speedup)


# --- output paths: checked without being created ----------------------------------------------------------------------


def test_output_folder_is_checked_not_created(tmp_path):
    """A folder that can be created passes the check and is left to the writer: a command refused after the check
    (validate's model too large for this machine) leaves no empty folder behind."""
    from rooflinesim.fileio import check_output_dir, check_output_path, write_text_atomic

    folder = tmp_path / "a" / "b"
    assert check_output_dir(folder) == folder and not (tmp_path / "a").exists()
    target = check_output_path(folder / "p.yaml", "profile", (".yaml",), create_parent=True)
    assert not (tmp_path / "a").exists()
    write_text_atomic(target, "x: 1\n")
    assert target.read_text() == "x: 1\n" and [p.name for p in folder.iterdir()] == ["p.yaml"]
    with pytest.raises(InputError, match="folder does not exist"):  # -o of sweep and plot: the folder must exist
        check_output_path(tmp_path / "c" / "grid.csv", "sweep output (-o)")


def test_show_reports_the_model_schema_for_a_model_file(inputs, capsys):
    """`show` on a broken model YAML once reported the hardware schema's complaints (schema_version, peaks, ...)."""
    assert main(["show", inputs["model-fraction.yaml"]]) == 2
    line = capsys.readouterr().err.strip()
    assert "field 'hidden_size'" in line
    assert not any(key in line for key in ("memory_bandwidth", "peak_flops", "schema_version", "more problems"))
