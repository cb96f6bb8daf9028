"""`rooflinesim explore`'s JSON API answers exactly what the command line prints, refuses what it must, and the server
listens on this machine only unless told otherwise. No browser needed (tests/test_explore_browser.py has those)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest

from rooflinesim.cli import main
from rooflinesim.errors import InputError
from rooflinesim.explore.server import is_local_host, make_server

from .explore_helpers import get, get_json, running_server

ROOT = Path(__file__).resolve().parent.parent
PROFILE = str(Path(__file__).resolve().parent / "data" / "profiles" / "cpu-amd-epyc-2c.yaml")


@pytest.fixture(scope="module")
def base():
    with running_server() as url:
        yield url


def cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_error(capsys, *argv) -> str:
    """The one line the command line prints for a bad command (argparse errors exit, handler errors return 2)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) if _exits(argv) else _NoRaise():
        assert main(list(argv)) == 2
    return capsys.readouterr().err.strip()


class _NoRaise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _exits(argv) -> bool:
    try:
        from rooflinesim.cli import build_parser

        build_parser(raising=True).parse_args(list(argv))
    except InputError:
        return True
    return False


def test_the_done_when_command_serves_predict_byte_for_byte():
    """The issue's check, end to end in subprocesses: `rooflinesim explore --no-browser --port P` serves the page and
    /api/predict?hw=a100&batch=8&ctx=32k is what `rooflinesim predict --hw a100 --batch 8 --ctx 32k --json` prints."""
    command = [sys.executable, "-c", "import sys; from rooflinesim.cli import main; sys.exit(main())"]
    server = subprocess.Popen([*command, "explore", "--no-browser", "--port", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = server.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        status, headers, page = get(url)
        assert status == 200 and "app.js" in page and headers["Content-Type"].startswith("text/html")
        status, headers, body = get(url + "api/predict?hw=a100&batch=8&ctx=32k")
        assert status == 200 and headers["Content-Type"] == "application/json"
    finally:
        server.terminate()
        server.wait(timeout=30)
    printed = subprocess.run([*command, "predict", "--hw", "a100", "--batch", "8", "--ctx", "32k", "--json"],
                             capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert body == printed
    assert json.loads(body)["workload"]["batch"] == 8


@pytest.mark.parametrize("endpoint, query, argv", [
    ("predict", {"hw": "h100", "model": "llama-3.2-3b", "batch": "4", "ctx": "2k", "k": "3", "alpha": "0.7",
                 "weight-dtype": "fp8", "sampling": "1", "no-speculation": "0"},
     ["predict", "--hw", "h100", "--model", "llama-3.2-3b", "--batch", "4", "--ctx", "2k", "--k", "3", "--alpha",
      "0.7", "--weight-dtype", "fp8", "--sampling", "--json"]),
    ("sweep", {"hw": "a100", "batch": "1,8,64", "ctx": "1k,32k", "k": "0..4", "alpha": "0.6,0.9"},
     ["sweep", "--hw", "a100", "--batch", "1,8,64", "--ctx", "1k,32k", "--k", "0..4", "--alpha", "0.6,0.9", "--json"]),
    ("serve", {"requests": "40", "rate": "2,8", "policy": "off,fixed:2"},
     ["serve", "--requests", "40", "--rate", "2,8", "--policy", "off,fixed:2", "--workers", "1", "--json"]),
    ("serve", {"emit-config": "trtllm", "alpha": "0.7"}, ["serve", "--emit-config", "trtllm", "--alpha", "0.7"]),
    ("serve", {"emit-config": "vllm"}, ["serve", "--emit-config", "vllm"]),
    ("list/hardware", {}, ["list", "hardware", "--json"]),
    ("list/models", {}, ["list", "models", "--json"]),
    ("list/acceptance", {}, ["list", "acceptance", "--json"]),
])
def test_each_endpoint_answers_what_the_command_prints(base, capsys, endpoint, query, argv):
    status, headers, body = get(f"{base}api/{endpoint}?{urlencode(query)}")
    code, out, err = cli(capsys, *argv)
    assert status == 200 and code == 0, body
    assert body == out
    assert json.loads(headers.get("X-Rooflinesim-Stderr", "[]")) == err.splitlines()
    plain_text = query.get("emit-config") in ("trtllm", "sglang", "vllm")  # vllm: a launch line
    assert headers["Content-Type"] == ("text/plain" if plain_text else "application/json")
    if not plain_text:
        json.loads(body)


def test_warnings_travel_in_a_header_as_the_cli_prints_them(base, capsys):
    query = {"hw": "a100", "calibration": PROFILE}
    status, headers, body = get(f"{base}api/predict?{urlencode(query)}")
    code, out, err = cli(capsys, "predict", "--hw", "a100", "--calibration", PROFILE, "--json")
    assert status == 200 and body == out
    lines = json.loads(headers["X-Rooflinesim-Stderr"])
    assert lines == err.splitlines() and any("calibration profile" in line for line in lines)


@pytest.mark.parametrize("query, argv", [
    ({"hw": "a10000"}, ["--hw", "a10000"]),  # the handler's InputError, with its suggestion
    ({"batch": "abc"}, ["--batch", "abc"]),
    ({"drafter": "bogus"}, ["--drafter", "bogus"]),  # argparse's own error, one line
    ({"k": "x"}, ["--k", "x"]),
    ({"frobnicate": "1"}, ["--frobnicate=1"]),  # an unknown flag
])
def test_bad_parameters_are_400_with_the_cli_line(base, capsys, query, argv):
    status, _, body = get(f"{base}api/predict?{urlencode(query)}")
    assert status == 400
    assert json.loads(body)["error"] == cli_error(capsys, "predict", *argv, "--json")


@pytest.mark.parametrize("endpoint, query, wording", [
    ("predict", "bat=8", "unrecognized arguments: --bat=8 (see 'rooflinesim predict --help'); did you mean batch?"),
    ("predict", "json=1", "--json is not available in explore's API"),
    ("predict", "help=1", "--help is not available"),
    ("sweep", "output=grid.csv", "--output is not available in explore's API: it writes a file"),
    ("serve", "workers=4", "--workers is not available"),
    ("serve", "trace=t.jsonl", "--trace is not available"),
    ("predict", "batch=1&batch=2", "parameter batch given twice"),
    ("predict", "sampling=maybe", "--sampling is a switch: give sampling=1 or sampling=0"),
    ("serve", "requests=100000&rate=1..32", "explore answers up to 4,000,000"),
    ("list/models", "x=1", "unrecognized arguments: --x=1 (see 'rooflinesim list --help')"),
])
def test_unknown_refused_and_oversized_parameters_are_400(base, endpoint, query, wording):
    status, _, body = get(f"{base}api/{endpoint}?{query}")
    assert status == 400
    error = json.loads(body)["error"]
    assert error.startswith("rooflinesim: error: ") and wording in error and "\n" not in error


def test_unknown_endpoints_pages_and_paths_outside_static_are_404(base):
    assert get(base + "api/predcit")[0] == 404
    assert "did you mean /api/predict" in json.loads(get(base + "api/predcit")[2])["error"]
    assert get(base + "nothing")[0] == 404
    assert get(base + "static/../server.py")[0] == 404
    assert get(base + "static/%2e%2e/server.py")[0] == 404
    status, headers, body = get(base + "static/vendor/plotly-cartesian.min.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript") and "plotly.js" in body[:200]


def test_sweep_map_is_the_sweep_results_own_numbers(base):
    """The speedup map agrees with `sweep --json` for the same flags: its break-even table is the same, and its best
    speedup at batch 1 is the table's."""
    query = {"hw": "h100", "batch": "1,2,4,8,16,32,64,128,256,512", "ctx": "1k,8k,64k", "k": "0..6", "alpha": "0.7"}
    grid = get_json(f"{base}api/sweep/map?{urlencode(query)}")
    table = get_json(f"{base}api/sweep?{urlencode(query)}")
    assert grid["break_even"] == table["break_even"] and grid["schedules"] == table["schedules"]
    for j, row in enumerate(table["break_even"]):
        assert grid["best_speedup"][0][j][0] == row["best_speedup_at_first_batch"]
        assert grid["best_k"][0][j][0] == row["best_k_at_first_batch"]
        be = row["break_even_batch"]
        for i, batch in enumerate(grid["batch"]):  # below the break-even batch speculation pays, from it on it does not
            best = grid["best_speculative_speedup"][i][j][0]
            if not grid["speculation_fits_in_memory"][i][j]:  # a batch that does not fit is a memory answer
                continue
            if be is None or batch < be:
                assert best is not None and best >= 1.0
            else:
                assert best is None or best < 1.0 or not grid["speculation_fits_in_memory"][i][j]
    assert len(grid["batch"]) == 10 and len(grid["speculation_fits_in_memory"][0]) == 3


def test_the_servers_calibration_applies_where_a_request_names_none(capsys):
    with running_server(calibration=PROFILE) as url:
        config = get_json(url + "api/config")
        status, _, body = get(url + "api/predict?hw=cpu&model=tiny-llama-123m")
        own = get_json(url + "api/predict?hw=cpu&model=tiny-llama-123m&calibration=" + PROFILE)
    assert config["calibration"] == PROFILE and "predict" in config["endpoints"]
    code, out, _ = cli(capsys, "predict", "--hw", "cpu", "--model", "tiny-llama-123m", "--calibration", PROFILE, "--json")
    assert status == 200 and body == out
    assert json.loads(body)["decode"]["step_time_s_low"] is not None  # the intervals the Calibrated view shows
    assert own == json.loads(out)


def test_config_lists_each_endpoints_parameters_from_the_parser(base):
    """The page builds its choice lists from these: a choice added to a command reaches it without a page change."""
    from rooflinesim.cli import build_parser
    from rooflinesim.cli.api import _command_parser

    parameters = get_json(base + "api/config")["parameters"]
    assert set(parameters) == {"predict", "sweep", "sweep/map", "serve", "list/hardware", "list/models",
                               "list/acceptance"}
    drafter = next(a for a in _command_parser(build_parser(), "predict")._actions
                   if a.dest == "drafter")
    assert parameters["predict"]["drafter"]["choices"] == list(drafter.choices)
    assert parameters["predict"]["sampling"]["switch"] and not parameters["predict"]["batch"]["switch"]
    assert parameters["predict"]["batch"]["default"] is None and "help" not in parameters["predict"]
    assert not {"output", "json", "workers", "dask", "trace"} & set(parameters["serve"])
    assert parameters["list/models"] == {}


def test_requests_addressed_to_another_host_name_are_refused(base):
    """DNS rebinding: a page elsewhere whose name resolves to 127.0.0.1 sends its own Host header."""
    status, _, body = get(base + "api/list/models", headers={"Host": "evil.example:8765"})
    assert status == 403 and "--allow-remote" in json.loads(body)["error"]
    assert get(base + "api/list/models", headers={"Host": "localhost:1"})[0] == 200


@pytest.mark.parametrize("host, local", [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True), ("127.3.2.1", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.10", False), ("example.com", False), ("", False),
])
def test_only_loopback_counts_as_local(host, local):
    assert is_local_host(host) is local


def test_a_non_local_address_is_refused_without_allow_remote(capsys):
    with pytest.raises(InputError, match="no login.*--allow-remote"):
        make_server(object(), host="0.0.0.0", port=0)
    code, out, err = cli(capsys, "explore", "--host", "0.0.0.0", "--port", "0", "--no-browser")
    assert code == 2 and out == ""
    assert err.startswith("rooflinesim: error: refusing to listen on 0.0.0.0: explore has no login") and \
        err.count("\n") == 1
    server = make_server(object(), host="0.0.0.0", port=0, allow_remote=True)  # said explicitly: allowed
    server.server_close()


def test_a_port_in_use_is_one_line_not_a_traceback(base, capsys):
    port = int(base.rsplit(":", 1)[1].strip("/"))
    code, _, err = cli(capsys, "explore", "--port", str(port), "--no-browser")
    assert code == 2 and err.startswith(f"rooflinesim: error: cannot listen on 127.0.0.1:{port}") and "--port 0" in err


def test_explore_imports_nothing_of_the_command_line():
    """The server gets the API handed in (tests/test_layers.py checks every import; this is the quick statement)."""
    probe = "import sys, rooflinesim.explore.server; print(any(m.startswith('rooflinesim.cli') for m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                          check=True).stdout.strip() == "False"


def test_starting_the_command_line_loads_no_scipy_stats():
    """scipy.stats takes seconds to import on a busy 2-core machine: the parser every command builds (explore's page
    is up when its URL is printed) must not pull it in (acceptance imports it where an interval is computed)."""
    probe = ("import sys; from rooflinesim.cli import build_parser; build_parser(); "
             "print(sorted(m for m in sys.modules if m.startswith(('scipy.stats', 'torch', 'matplotlib'))))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                          check=True).stdout.strip() == "[]"
