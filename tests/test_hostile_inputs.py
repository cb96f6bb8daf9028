"""Issue 26: the hostile inputs that `serve` and `acceptance` mishandled, as regression tests, and the pieces that
fixed them: bounded reads of every file input (`fileio.read_text_limited`), numerically safe workload parameters,
the serve work guard, worker failures and library warnings as one line.

Every CLI case must end in exit 2 with exactly one stderr line naming the flag or file and the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rooflinesim.cli import main
from rooflinesim.errors import InputError
from rooflinesim.fileio import FileInputError, read_text_limited
from rooflinesim.serve import guard, rates
from rooflinesim.serve.workload import LengthDistribution, get_arrival_times_s

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from rooflinesim.cli import main; sys.exit(main())"


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *fragments) -> str:
    assert code == 2, err
    assert "Traceback" not in err and "Warning:" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture()
def binary_file(tmp_path) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(bytes(range(128, 256)) * 32)  # no valid UTF-8 start byte
    return path


# --- the five cases of the issue ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, fragments", [
    (["serve", "--trace", "/dev/zero"], ("trace", "/dev/zero", "character device")),
    (["acceptance", "from-logs", "/dev/zero"], ("/dev/zero", "character device")),
])
def test_dev_zero_is_refused_at_once_in_a_subprocess(argv, fragments):
    """Before: `serve --trace /dev/zero` ran past 30 s into a BrokenProcessPool traceback and `acceptance from-logs
    /dev/zero` hung; a subprocess with a timeout turns a hang into a failure rather than a stuck test run."""
    proc = subprocess.run([sys.executable, "-c", CLI, *argv], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert_one_line_error(proc.returncode, proc.stderr, *fragments)


@pytest.mark.parametrize("cv", ["1e-300", "1e300", "0", "nan", "inf", "-1"])
def test_gamma_cv_outside_its_range_is_refused_with_the_range(cv, capsys):
    code, _, err = run_cli(["serve", "--arrivals", "gamma", "--cv", cv, "--requests", "20"], capsys)
    assert_one_line_error(code, err, "--cv", "between 0.01 and 100")


def test_binary_trace_is_one_line(binary_file, capsys):
    code, _, err = run_cli(["serve", "--trace", binary_file, "--requests", "20"], capsys)
    assert_one_line_error(code, err, "trace", str(binary_file), "not a text file")


def test_plot_serve_absurd_rate_is_refused_not_warned(tmp_path, capsys):
    out = tmp_path / "serve.png"
    code, _, err = run_cli(["plot", "serve", "-o", out, "--rate", "1e9", "--requests", "20"], capsys)
    assert_one_line_error(code, err, "--rate", "between 1e-06 and 1e+06")
    assert not out.exists() and os.listdir(tmp_path) == []


# --- bounded reads -----------------------------------------------------------------------------------------------------


def _unreadable_file() -> str | None:
    """A regular file root cannot read either (chmod 000 stops nobody running as root): a write-only sysctl
    (EACCES even for root) or the process's own memory file (EIO at offset 0)."""
    for path in ("/proc/sys/vm/compact_memory", "/proc/self/mem"):
        if os.path.isfile(path):
            return path
    return None


def test_special_files_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, reason in ((fifo, "is a FIFO"), (tmp_path, "is a folder"), (loop, "symbolic-link loop"),
                             ("/dev/zero", "is a character device"), ("/dev/urandom", "is a character device"),
                             (sock_path, "is a socket"), (tmp_path / "nope", "not found")):
            with pytest.raises(FileInputError) as info:
                read_text_limited(path, "trace")
            assert reason in str(info.value) and str(path) in str(info.value)
    finally:
        sock.close()


def test_size_and_line_limits(tmp_path):
    sparse = tmp_path / "big.log"
    with open(sparse, "wb") as f:
        f.truncate(100 * 2**20)  # 100 MB without writing it
    with pytest.raises(FileInputError, match="larger than the 64.0 MiB limit"):
        read_text_limited(sparse, "log")
    long_line = tmp_path / "long.jsonl"
    long_line.write_text("ok\n" + "x" * 5000 + "\n")
    with pytest.raises(FileInputError, match="line 2 is longer than the 4,096-character limit"):
        read_text_limited(long_line, "trace", max_line_chars=4096)
    assert read_text_limited(long_line, "trace") == "ok\n" + "x" * 5000 + "\n"


@pytest.mark.skipif(_unreadable_file() is None, reason="no unreadable /proc file here")
def test_unreadable_file_is_one_line(capsys):
    path = _unreadable_file()
    with pytest.raises(FileInputError, match="cannot read"):
        read_text_limited(path, "trace")
    code, _, err = run_cli(["acceptance", "from-logs", path], capsys)
    assert_one_line_error(code, err, path, "cannot read")


def test_long_trace_line_and_infinite_tokens_are_one_line(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": Infinity, "output_tokens": 4}\n')
    code, _, err = run_cli(["serve", "--trace", trace], capsys)
    assert_one_line_error(code, err, f"{trace}:1")
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 4, "x": "' + "y" * 10000 + '"}\n')
    code, _, err = run_cli(["serve", "--trace", trace], capsys)
    assert_one_line_error(code, err, "line 1 is longer")


# --- numerically safe workload generation ------------------------------------------------------------------------------


def test_arrival_and_length_parameters_state_their_range():
    import numpy as np

    rng = np.random.default_rng(0)
    for rate in (0.0, 1e-300, 1e300, float("nan"), -1.0):
        with pytest.raises(InputError, match="between 1e-06 and 1e\\+06"):
            get_arrival_times_s(rng, 10, rate)
    assert not get_arrival_times_s(rng, 10, float("inf")).any()  # --rate inf (issue 29): every request at t = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the extremes of the allowed ranges compute without overflow
        for cv in (0.01, 100.0):
            gaps = np.diff(get_arrival_times_s(rng, 1000, 1e6, "gamma", cv))
            assert np.isfinite(gaps).all() and (gaps >= 0).all()
        lengths = LengthDistribution.parse("lognormal:512:8", "--prompt-tokens").sample(rng, 1000)
        assert lengths.min() >= 1 and lengths.max() <= 1 << 22
    for text in ("lognormal:512:1e300", "lognormal:512:nan", "lognormal:nan:1", "uniform:5:1"):
        with pytest.raises(InputError, match="sigma <= 8"):
            LengthDistribution.parse(text, "--prompt-tokens")


# --- serve: the work guard and worker failures -------------------------------------------------------------------------


def test_serve_refuses_work_over_the_limit_with_the_estimate(capsys, monkeypatch):
    code, _, err = run_cli(["serve", "--requests", "10000000", "--output-tokens", "4096"], capsys)
    line = assert_one_line_error(code, err, "engine steps", "--requests", "GB")
    assert "4.1e+10 steps a run" in line  # 10^7 requests x (4,096 + 1) steps
    monkeypatch.setenv(guard.MAX_STEPS_ENV, "1000")
    code, _, err = run_cli(["serve", "--requests", "20", "--output-tokens", "64", "--rate", "1,2"], capsys)
    assert_one_line_error(code, err, guard.MAX_STEPS_ENV)  # 2 policies x 2 rates x 20 x 65 = 5,200 steps


def _die(*args):
    os._exit(3)  # a worker killed (out of memory, a signal): the pool breaks


@pytest.mark.skipif(sys.platform != "linux", reason="the patched worker reaches the pool by fork")
def test_a_dead_worker_is_one_line(capsys, monkeypatch):
    import multiprocessing

    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the patched worker reaches the pool by fork only")
    monkeypatch.setattr(rates, "run_one", _die)
    code, _, err = run_cli(["serve", "--requests", "20", "--rate", "1,2", "--workers", "2"], capsys)
    assert_one_line_error(code, err, "worker process died", "--workers 1")


# --- warnings ----------------------------------------------------------------------------------------------------------


def test_library_warnings_become_one_line_of_the_tool(capsys, monkeypatch):
    import numpy as np

    import rooflinesim.cli as cli

    def predict_with_a_numpy_warning(args):
        with np.errstate(over="warn"):
            np.exp(np.array([1000.0]))
        print("{}")
        return 0

    monkeypatch.setattr(cli, "cmd_predict", predict_with_a_numpy_warning)
    code, out, err = run_cli(["predict"], capsys)
    assert code == 0 and out == "{}\n"
    assert err == "warning: overflow encountered in exp\n"  # numpy warns at its caller's line

    def refused_after_a_warning(args):
        warnings.warn("something internal", UserWarning)
        raise InputError("--batch is wrong")

    monkeypatch.setattr(cli, "cmd_predict", refused_after_a_warning)
    code, _, err = run_cli(["predict"], capsys)
    assert err == "rooflinesim: error: --batch is wrong\n" and code == 2
