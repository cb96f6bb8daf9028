"""The bad-input matrix (issue 15), command line: every subcommand, given hostile or broken input, answers with exactly
one line on stderr and exit code 2, naming the file, field or flag and the reason, never a traceback, and writes
nothing: no output file appears and a good file already there is left as it was. (The Python API: in
tests/test_bad_input_api.py.)

Each case is (id, arguments, fragments of the error line). Arguments may name the hostile input files of
`hostile_files.write_hostile_files` as `{name}` (dots and dashes as underscores) and the test's own empty folder as
`{out}`; every case runs with that folder as the working directory, so anything a command wrote (even relative to
the working directory) is seen.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rooflinesim.cli import main
from rooflinesim.errors import InputError

try:  # tests/ on sys.path (pytest's default rootdir/prepend import mode)
    from hostile_files import DATA, ROOT, expand, write_hostile_files
except ImportError:  # tests/ imported as a package
    from tests.hostile_files import DATA, ROOT, expand, write_hostile_files

GOOD_CONTENT = b"a good file from an earlier run\n"
HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    return write_hostile_files(tmp_path_factory.mktemp("hostile"))


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
    case("predict-hw-empty", "predict --hw {empty_yaml}", "empty.yaml", "the file is empty"),
    case("predict-hw-missing", "predict --hw {missing_yaml}", "missing.yaml", "not found"),
    case("predict-hf-zero-heads", "predict --model {hf_zero_heads_json}", "hf-zero-heads.json",
         "num_attention_heads", "positive"),
    case("predict-hf-list", "predict --model {hf_list_json}", "hf-list.json", "list"),
    case("predict-hf-string", "predict --model {hf_string_json}", "hf-string.json", "str"),
    case("predict-hf-infinity", "predict --model {hf_infinity_json}", "hf-infinity.json", "hidden_size", "finite"),
    case("predict-hf-4095-heads", "predict --model {hf_4095_json}", "hf-4095.json", "hidden_size", "divisible"),
    case("predict-hf-truncated", "predict --model {hf_truncated_json}", "hf-truncated.json", "not valid JSON"),
    case("predict-hf-unsupported", f"predict --model {DATA / 'gpt2-hf-config.json'}", "unsupported architecture 'gpt2'"),
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
    case("predict-calibration-not-a-profile", "predict --hw cpu-generic --calibration {h100_yaml}", "not a measured profile"),
    case("predict-hw-inf", "predict --hw {hw_inf_yaml}", "memory_bandwidth_bytes_per_s", "finite"),
    case("predict-hw-nan", "predict --hw {hw_nan_yaml}", "memory_bandwidth_bytes_per_s", "finite"),
    case("predict-hw-true", "predict --hw {hw_true_yaml}", "memory_bandwidth_bytes_per_s", "number"),
    case("predict-hw-tiny-bandwidth", "predict --hw {hw_tiny_bandwidth_yaml}", "prices a step of Llama-3.1-8B",
         "far outside any physical range"),
    case("predict-hw-tiny-peak", "predict --hw {hw_tiny_peak_yaml} --json", "at inf s", "physical range"),
    case("predict-profile-huge-coefficient", "predict --hw {profile_huge_yaml} --model tiny-llama-123m "
         "--weight-dtype fp32 --draft tiny-draft-2l --json", "prices a step of tiny-llama-123m", "physical range"),
    case("predict-hw-string-number", "predict --hw {hw_string_yaml}", "memory_capacity_bytes", "number"),
    case("predict-model-fraction", "predict --model {model_fraction_yaml}", "hidden_size", "integer"),
    case("predict-model-nan", "predict --model {model_nan_yaml}", "field 'num_layers'", "valid integer"),
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
    case("predict-alpha-per-position-empty", ["predict", "--alpha-per-position", ""], "no acceptance rate given"),
    case("predict-alpha-per-position-word", "predict --alpha-per-position 0.9,x", "acceptance rate", "'x'"),
    case("predict-alpha-per-position-nan", "predict --alpha-per-position 0.9,nan", "acceptance rate", "finite"),
    case("predict-alpha-and-per-position", "predict --alpha 0.8 --alpha-per-position 0.9", "either"),
    case("predict-k-negative", "predict --k -1", "k (draft length)", "non-negative"),
    case("predict-k-too-large", "predict --k 65", "k (draft length)", "at most 64"),
    case("predict-k-fraction", "predict --k 1.5", "--k", "1.5"),
    case("predict-k-beyond-per-position", "predict --alpha-per-position 0.9,0.8 --k 4", "4 per-position"),
    case("predict-head-fraction-inf", "predict --drafter head --head-layer-fraction inf", "head layer fraction",
         "finite"),
    case("predict-head-fraction-nan", "predict --drafter head --head-layer-fraction nan", "head layer fraction", "got nan"),
    case("predict-head-fraction-negative", "predict --drafter head --head-layer-fraction -1", "head layer fraction",
         "got -1.0"),
    case("predict-tp-fraction", "predict --tp 2.5", "--tp", "2.5"),
    case("predict-tp-zero", "predict --tp 0", "--tp", "positive integer"),
    case("predict-tp-not-dividing", "predict --tp 3", "--tp 3 does not divide", "32 attention heads"),
    case("predict-draft-tp-fraction", "predict --draft-tp 1.5", "--draft-tp", "1.5"),
    case("predict-quant-group-zero", "predict --weight-dtype int4 --quant-group-size 0", "quantisation group size",
         "positive integer"),
    case("predict-dtype-unknown", "predict --weight-dtype fp6", "unknown dtype 'fp6'"),
    case("predict-kv-dtype-unknown", "predict --kv-dtype float7", "unknown dtype 'float7'"),
    case("predict-activation-int8", "predict --activation-dtype int8", "activations cannot be int8"),
    case("predict-attention-unknown", "predict --attention sparse", "--attention", "sparse"),
    case("predict-drafter-unknown", "predict --drafter telepathy", "--drafter", "telepathy"),
    case("predict-unknown-flag", "predict --bogus 1", "unrecognized arguments: --bogus 1",
         "see 'rooflinesim predict --help'"),
    # --- the usage line ------------------------------------------------------------------------------------------
    case("usage-repeated-prog", "rooflinesim", "invalid choice", "see 'rooflinesim --help'"),
    case("usage-no-command", (), "required", "see 'rooflinesim --help'"),
    case("usage-sub-command", "predict --batch", "--batch", "see 'rooflinesim predict --help'"),
    # --- sweep ---------------------------------------------------------------------------------------------------
    case("sweep-hw-garbage", "sweep --hw {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("sweep-model-hf-list", "sweep --model {hf_list_json}", "hf-list.json", "got a list"),
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
         "at inf s", "physical range"),
    case("sweep-format-unknown", "sweep --format xml", "--format", "xml"),
    case("sweep-out-folder", "sweep -o {out}", "sweep output (-o)", "is a folder"),
    case("sweep-out-missing-folder", "sweep -o {out}/no/such/grid.csv", "sweep output (-o)", "does not exist"),
    case("sweep-out-under-a-file", "sweep -o {out}/grid.csv/inner.csv", "sweep output (-o)", "grid.csv",
         keep=("grid.csv",)),
    case("sweep-out-unwritable", "sweep -o /sys/rooflinesim-grid.csv --batch 1 --ctx 1k --k 0..1",
         "sweep output (-o) folder is not writable", "/sys"),
    case("sweep-out-kept-on-bad-input", "sweep -o {out}/grid.csv --batch 0", "batch must be a positive integer", keep=("grid.csv",)),
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
         "report-not-a-report.json", "'configs'"),
    case("plot-validation-missing", "plot validation -o {out}/c.png --report {missing_yaml}", "missing.yaml", "cannot read"),
    case("plot-k-two-batches", "plot k -o {out}/c.png --batch 1,2", "plot k takes one --batch"),
    case("plot-speedup-two-alphas", "plot speedup -o {out}/c.png --alpha 0.5,0.6", "one --alpha"),
    case("plot-speedup-alpha-nan", "plot speedup -o {out}/c.png --alpha nan", "acceptance rate", "finite"),
    case("plot-roofline-tp", "plot roofline -o {out}/c.png --tp 2.5", "--tp", "2.5"),
    case("plot-long-context", "plot roofline -o {out}/c.png --ctx 256k", "exceeds", "--allow-long-context"),
    case("plot-unknown-flag", "plot roofline -o {out}/c.png --nope", "--nope", "see 'rooflinesim plot --help'"),
    case("plot-roofline-grid-too-large", ["plot", "roofline", "-o", "{out}/c.png", "--allow-long-context",
                                          "--batch", ",".join(str(b) for b in range(1, 3001)),
                                          "--ctx", ",".join(str(c) for c in range(1, 1001))],
         "grid of 3,000 batches x 1,000 contexts", "GB", "fewer points"),
    case("plot-kind-unknown", "plot cake -o {out}/c.png", "invalid choice", "cake"),
    case("plot-no-output", "plot roofline", "-o/--output"),
    # --- list and show -------------------------------------------------------------------------------------------
    case("list-unknown", "list gpus", "invalid choice", "gpus"),
    case("list-nothing", "list", "what"),
    case("list-extra-argument", "list hardware gpus", "unrecognized arguments", "gpus"),
    case("list-unknown-flag", "list models --csv", "unrecognized arguments", "--csv"),  # (--json exists: explore)
    case("show-garbage", "show {garbage_yaml}", "garbage.yaml", "UTF-8"),
    case("show-garbage-json", "show {garbage_json}", "garbage.json", "UTF-8"),
    case("show-malformed", "show {malformed_yaml}", "malformed.yaml", "line 3", "malformed YAML"),
    case("show-bad-model-yaml", "show {model_fraction_yaml}", "model-fraction.yaml", "hidden_size", "integer"),
    case("show-bad-model-bool", "show {model_bool_yaml}", "model-bool.yaml", "vocab_size"),
    case("show-bad-hw-yaml", "show {hw_inf_yaml}", "hw-inf.yaml", "memory_bandwidth_bytes_per_s"),
    case("show-hf-zero-heads", "show {hf_zero_heads_json}", "hf-zero-heads.json", "num_attention_heads"),
    case("show-unknown", "show h1000", "unknown hardware or model 'h1000'", "did you mean"),
    case("show-missing", "show {missing_yaml}", "missing.yaml", "not found"),
    case("show-empty", "show {empty_yaml}", "empty.yaml", "the file is empty"),
    # --- calibrate: refused before any measuring -----------------------------------------------------------------
    case("calibrate-out-folder", "calibrate --quick --out {out}/p.yaml", "profile (--out)", "is a folder",
         keep=("p.yaml/",), torch=True),
    case("calibrate-out-unwritable", "calibrate --quick --out /sys/rooflinesim-profile.yaml", "profile (--out) folder",
         "not writable", "/sys", torch=True),
    case("calibrate-out-under-a-file", "calibrate --quick --out {out}/p.yaml/inner.yaml", "p.yaml", "does not exist",
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
    case("calibrate-device-unknown", "calibrate --quick --device tpu --out {out}/p.yaml", "--device must be auto, cpu or cuda",
         "tpu", torch=True),
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
    case("validate-profile-not-measured", "validate --profile {h100_yaml} --out-dir {out}", "not a measured profile",
         torch=True),
    case("validate-profile-attention-empty", "validate --profile {profile_attention_empty_yaml} --out-dir {out}",
         "attention", "decode_d", torch=True),
    case("validate-profile-model-file", "validate --profile {llama_yaml} --out-dir {out}", "llama-3.1-8b.yaml",
         "not a measured profile", torch=True),
    case("validate-dtype-unknown", "validate --profile {profile} --dtype fp6 --out-dir {out}",
         "unknown dtype 'fp6'", torch=True),
    case("validate-model-too-large", "validate --profile {profile} --model llama-3.1-405b --out-dir {out}",
         "needs about", "GB", torch=True),
    case("validate-model-moe", "validate --profile {profile} --model {tiny_moe_yaml} --out-dir {out}",
         "validate times a Llama-style decoder", "mixture-of-experts MLPs", torch=True),
    case("validate-draft-sliding-window", "validate --profile {profile} --draft mistral-7b --out-dir {out}",
         "Mistral-7B-v0.1 has a sliding attention window", torch=True),
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
        code = main(expand(case.args, inputs, out))
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
    proc = subprocess.run([sys.executable, "-m", "rooflinesim.cli", *expand(case.args, inputs, out)],
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


def test_plot_takes_the_allow_long_context_flag_its_error_names(tmp_path, capsys):
    """plot's context error told the user to pass --allow-long-context, which plot did not accept."""
    out = tmp_path / "long.png"
    assert main(["plot", "roofline", "-o", str(out), "--ctx", "256k", "--allow-long-context"]) == 0
    assert out.stat().st_size > 0
