"""`rooflinesim explore` in a real browser: headless Chromium driven by Selenium, the system's own chromedriver.

Each view is loaded, controls are changed, and every number the page shows is compared with the API's answer for
the same parameters; a bad value must show the command line's error. Screenshots of each view go to a temporary
folder (or to $ROOFLINESIM_SCREENSHOTS). Nothing is downloaded at run time: without Chromium and chromedriver
installed (scripts/setup-dev.sh installs them with apt), or without selenium, the tests skip and say why.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from rooflinesim.cli import build_parser
from rooflinesim.cli.api import _command_parser

from .explore_helpers import get, get_json, running_server

ROOT = Path(__file__).resolve().parent.parent
PROFILE = str(Path(__file__).resolve().parent / "data" / "profiles" / "cpu-amd-epyc-2c.yaml")
LOAD_DEFAULTS = {"rate": "1..32", "policy": "off,fixed:4,dynamic", "requests": "200"}  # the page's initial state
SKIP = "browser tests need {what}: run scripts/setup-dev.sh (apt-get install chromium chromium-driver; pip selenium)"


def _find(env: str, names: tuple[str, ...]) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    return next((path for path in map(shutil.which, names) if path), None)


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason=SKIP.format(what="the selenium package"))
    from selenium.webdriver.chrome.service import Service

    binary = _find("ROOFLINESIM_CHROMIUM", ("chromium", "chromium-browser", "google-chrome"))
    driver_path = _find("ROOFLINESIM_CHROMEDRIVER", ("chromedriver",))
    if binary is None or driver_path is None:
        pytest.skip(SKIP.format(what="a Chromium browser and its chromedriver on PATH"))
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                     "--disable-gpu", "--disable-extensions", "--no-first-run"):
        options.add_argument(argument)
    options.binary_location = binary
    # an explicit driver path: Selenium Manager is never asked to download anything
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def base():
    with running_server() as url:
        yield url


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folder = Path(os.environ.get("ROOFLINESIM_SCREENSHOTS") or tmp_path_factory.mktemp("explore-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_done(driver, after: str | None = None, timeout: float = 90.0) -> str:
    """Wait until the page has finished the render after generation `after`; its state: ready or error."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state, generation = driver.execute_script(
            "return [document.body.dataset.state, document.body.dataset.generation || null]")
        if state != "loading" and generation is not None and generation != after:
            return state
        time.sleep(0.05)
    raise AssertionError(f"the page did not finish rendering in {timeout} s")


def generation(driver) -> str | None:
    return driver.execute_script("return document.body.dataset.generation || null")


def open_view(driver, base: str, query: dict) -> str:
    driver.get(f"{base}?{urlencode(query)}")
    return wait_done(driver)


def shown_numbers(driver, table_id: str) -> dict:
    cells = driver.find_elements("css selector", f"#{table_id} td[data-field]")
    assert cells, f"#{table_id} shows no numbers"
    return {cell.get_attribute("data-field"): json.loads(cell.get_attribute("data-value")) for cell in cells}


def field(data, path: str):
    for key in path.split("."):
        data = None if data is None else data.get(key)
    return data


def assert_numbers_equal_api(driver, table_id: str, answer: dict) -> None:
    shown = shown_numbers(driver, table_id)
    assert shown == {path: field(answer, path) for path in shown}


def page_query(driver) -> dict:
    return {k: v[0] for k, v in parse_qs(urlsplit(driver.current_url).query, keep_blank_values=True).items()}


def set_input(driver, name: str, value: str) -> str:
    """Type a new value into a control; returns the generation to wait past."""
    before = generation(driver)
    element = driver.find_element("name", name)
    driver.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('change', "
                          "{bubbles: true}))", element, value)
    return before


def test_roofline_view_shows_the_apis_numbers_and_follows_the_controls(browser, base, shots):
    assert open_view(browser, base, {"view": "roofline", "hw": "a100", "batch": "8", "ctx": "32k"}) == "ready"
    predict = {"hw": "a100", "model": "llama-3.1-8b", "batch": "8", "ctx": "32k", "alpha": "0.8"}
    assert page_query(browser) == {"view": "roofline", **predict, **LOAD_DEFAULTS}  # every control set is in the URL
    answer = get_json(f"{base}api/predict?{urlencode(predict)}")
    assert_numbers_equal_api(browser, "roofline-numbers", answer)
    step = browser.find_element("css selector", "#roofline-numbers td[data-field='decode.step_time_s']")
    assert step.text == f"{answer['decode']['step_time_s'] * 1e3:.4g} ms"  # what a reader sees: 31.17 ms
    charted = browser.execute_script("const d = document.getElementById('chart-roofline').data;"
                                      "return d.filter(t => t.name.endsWith('-bound ops')).map(t => t.text).flat()")
    assert sorted(charted) == sorted(op["name"] for op in answer["ops"] if op["flops"] > 0 and op["time_s"] > 0)
    browser.save_screenshot(str(shots / "roofline.png"))

    wait_done(browser, set_input(browser, "batch", "64"))
    from selenium.webdriver.support.ui import Select

    before = generation(browser)
    Select(browser.find_element("name", "hw")).select_by_value("h100")
    assert wait_done(browser, before) == "ready"
    predict.update(batch="64", hw="h100")
    assert page_query(browser) == {"view": "roofline", **predict, **LOAD_DEFAULTS}
    assert_numbers_equal_api(browser, "roofline-numbers", get_json(f"{base}api/predict?{urlencode(predict)}"))


def test_a_bad_value_shows_the_command_lines_error(browser, base, shots):
    open_view(browser, base, {"view": "roofline", "hw": "a100"})
    assert wait_done(browser, set_input(browser, "batch", "abc")) == "error"
    status, _, body = get(f"{base}api/predict?{urlencode({'hw': 'a100', 'batch': 'abc'})}")
    shown = browser.find_element("id", "error")
    assert status == 400 and shown.is_displayed()
    assert shown.text == json.loads(body)["error"] == "rooflinesim: error: batch must be a positive integer, got 'abc'"
    browser.save_screenshot(str(shots / "error.png"))
    assert wait_done(browser, set_input(browser, "batch", "2")) == "ready"
    assert not browser.find_element("id", "error").is_displayed()


def test_speculation_view_map_and_engine_configs_are_the_apis(browser, base, shots):
    query = {"view": "speculation", "hw": "h100", "batch": "4", "ctx": "8k", "alpha": "0.7"}
    assert open_view(browser, base, query) == "ready"
    flags = {"hw": "h100", "model": "llama-3.1-8b", "alpha": "0.7"}
    assert_numbers_equal_api(browser, "speculation-numbers",
                             get_json(f"{base}api/predict?{urlencode({**flags, 'batch': '4', 'ctx': '8k'})}"))
    heatmap = browser.execute_script("const t = document.getElementById('chart-speedup-map').data[0];"
                                     "return {x: t.x, y: t.y, z: t.z, type: t.type}")
    assert heatmap["type"] == "heatmap" and len(heatmap["y"]) == 64 and len(heatmap["x"]) == 16
    grid = get_json(f"{base}api/sweep/map?" + urlencode({**flags, "batch": ",".join(map(str, heatmap["y"])),
                                                         "ctx": ",".join(map(str, heatmap["x"])), "k": "0..8"}))
    assert heatmap["z"] == [[cell[0] for cell in row] for row in grid["best_speculative_speedup"]]
    names = browser.execute_script("return document.getElementById('chart-speedup-map').data.map(t => t.name)")
    assert "break-even (speedup 1)" in names and "memory limit" in names
    schedule = get_json(f"{base}api/sweep?{urlencode({**flags, 'ctx': '8k'})}")
    shown = shown_numbers(browser, "engine-schedule")
    assert shown["s.vllm.num_speculative_tokens"] == schedule["schedules"][0]["vllm"]["num_speculative_tokens"]
    assert shown["be.break_even_batch"] == schedule["break_even"][0]["break_even_batch"]
    status, headers, sglang = get(f"{base}api/serve?{urlencode({**flags, 'emit-config': 'sglang'})}")
    notes = [line for line in json.loads(headers.get("X-Rooflinesim-Stderr", "[]")) if not line.startswith("warning:")]
    assert status == 200 and browser.find_element("id", "config-sglang").text == "\n".join(notes + [sglang.strip()])
    browser.save_screenshot(str(shots / "speculation.png"))


def test_under_load_view_draws_the_serve_runs_and_crossovers(browser, base, shots):
    query = {"view": "load", "hw": "a100", "requests": "60", "rate": "1,4,16", "policy": "off,fixed:3"}
    assert open_view(browser, base, query) == "ready"
    flags = {"hw": "a100", "model": "llama-3.1-8b", "alpha": "0.8", "rate": "1,4,16", "policy": "off,fixed:3",
             "requests": "60"}
    answer = get_json(f"{base}api/serve?{urlencode(flags)}")
    lines = browser.execute_script("return document.getElementById('chart-load-latency').data.map(t => [t.name, t.y])")
    for name, latencies in lines:
        assert latencies == [r["latency_s"]["p50"] for r in answer["runs"] if r["policy"] == name]
    assert [name for name, _ in lines] == ["off", "fixed:3"]
    takes_engine = any("--engine" in a.option_strings for a in _command_parser(build_parser(), "serve")._actions)
    assert browser.find_element("name", "engines").is_displayed() == takes_engine  # the box only where it works
    rows = browser.find_elements("css selector", "#load-crossovers tbody tr")
    assert [row.find_elements("tag name", "td")[0].text for row in rows] == [c["policy"] for c in answer["crossovers"]]
    for row, crossing in zip(rows, answer["crossovers"]):
        latency = row.find_elements("tag name", "td")[1].text
        expected = crossing["latency"]
        assert (latency == "pays at every rate") if expected is None else latency.startswith(f"{expected['rate_per_s']:g} req/s")
        # serve's latency range within the engine's published speedup error, as serve --json gives it
        shown, rng = row.find_elements("tag name", "td")[2].text, crossing["latency_range"]
        assert (shown == "pays at every rate at either end") if rng["earliest"] is None else \
            shown.startswith(f"{rng['earliest']['rate_per_s']:g} req/s to ")
    shaded = browser.execute_script(
        "return (document.getElementById('chart-load-latency').layout.shapes || []).filter(s => s.type === 'rect')")
    assert len(shaded) == sum(1 for c in answer["crossovers"] if c["latency_range"]["earliest"] is not None)
    # regression: on the log rate axis the dashed crossover line sat at log10(rate) (16 req/s drawn at 1.2); it must
    # stand where the curve's point at that rate is drawn
    crossing = answer["crossovers"][0]["throughput"]
    if crossing is not None:
        x_line, x_point = browser.execute_script("""
            const gd = document.getElementById('chart-load-throughput');
            const line = gd.querySelector('.shapelayer path').getBoundingClientRect();
            const rates = gd.data[0].x, points = gd.querySelectorAll('.scatterlayer .trace')[0].querySelectorAll('.point');
            const box = points[rates.indexOf(arguments[0])].getBoundingClientRect();
            return [line.left + line.width / 2, box.left + box.width / 2];""", crossing["rate_per_s"])
        assert abs(x_line - x_point) < 3
    browser.save_screenshot(str(shots / "load.png"))


def test_calibrated_view_shows_the_profiles_intervals(browser, base, shots):
    assert open_view(browser, base, {"view": "calibrated", "hw": "cpu", "model": "tiny-llama-123m"}) == "ready"
    assert browser.find_element("id", "calibrated-none").is_displayed()  # no profile yet: it says how to load one
    assert wait_done(browser, set_input(browser, "calibration", PROFILE)) == "ready"
    assert not browser.find_element("id", "calibrated-none").is_displayed()
    flags = {"hw": "cpu", "model": "tiny-llama-123m", "alpha": "0.8", "calibration": PROFILE}
    answer = get_json(f"{base}api/predict?{urlencode(flags)}")
    shown = shown_numbers(browser, "calibrated-numbers")
    assert shown["decode.step_time_s_low"] is not None and shown["decode.step_time_s_low"] < shown["decode.step_time_s"]
    assert shown == {path: field(answer, path) for path in shown}
    browser.save_screenshot(str(shots / "calibrated.png"))

    before = generation(browser)  # another view keeps the controls: the URL carries them
    browser.find_element("css selector", "#views button[data-view='roofline']").click()
    assert wait_done(browser, before) == "ready"
    assert browser.find_element("id", "view-roofline").is_displayed()
    assert not browser.find_element("id", "view-calibrated").is_displayed()
    assert page_query(browser)["view"] == "roofline" and page_query(browser)["calibration"] == PROFILE
    assert_numbers_equal_api(browser, "roofline-numbers", answer)


def _parser_with_engines():
    """The command line's parser with an --engine flag on serve (its own, once serve has one; else a stand-in that
    the serve command ignores: the page's per-engine plumbing is what is tested)."""
    parser = build_parser(raising=True)
    serve = _command_parser(parser, "serve")
    if not any("--engine" in action.option_strings for action in serve._actions):
        serve.add_argument("--engine", choices=["vllm", "sglang"], default=None)
    return parser


def test_under_load_draws_one_set_of_curves_per_engine_when_serve_takes_engine(browser):
    engine = next(a for a in _command_parser(_parser_with_engines(), "serve")._actions
                  if "--engine" in a.option_strings)
    engines = [str(c) for c in engine.choices][:2] if engine.choices else ["vllm-v1", "sglang"]  # free text: profiles
    with running_server(parser_factory=_parser_with_engines) as url:
        flags = {"hw": "a100", "model": "llama-3.1-8b", "alpha": "0.8", "rate": "2,8", "policy": "off,fixed:2",
                 "requests": "40"}
        assert open_view(browser, url, {"view": "load", **flags, "engines": ",".join(engines)}) == "ready"
        assert browser.find_element("name", "engines").is_displayed()
        lines = dict(browser.execute_script(
            "return document.getElementById('chart-load-latency').data.map(t => [t.name, t.y])"))
        assert set(lines) == {f"{policy} ({e})" for policy in ("off", "fixed:2") for e in engines}
        for e in engines:
            runs = get_json(f"{url}api/serve?{urlencode({**flags, 'engine': e})}")["runs"]
            for policy in ("off", "fixed:2"):
                assert lines[f"{policy} ({e})"] == [r["latency_s"]["p50"] for r in runs if r["policy"] == policy]


def test_under_load_with_a_profile_draws_the_latency_intervals(browser, base):
    flags = {"hw": "cpu", "model": "tiny-llama-123m", "draft": "tiny-draft-2l", "alpha": "0.8", "calibration": PROFILE,
             "rate": "1,4", "policy": "off,fixed:2", "requests": "30"}
    assert open_view(browser, base, {"view": "load", **flags}) == "ready"
    runs = get_json(f"{base}api/serve?{urlencode(flags)}")["runs"]
    traces = browser.execute_script("return document.getElementById('chart-load-latency').data.map(t => "
                                    "[t.name, t.y, t.error_y.array, t.error_y.arrayminus])")
    for name, latencies, up, down in traces:
        bands = [r["interval"]["latency_s"]["p50"] for r in runs if r["policy"] == name]
        assert [y + u for y, u in zip(latencies, up)] == pytest.approx([high for _, high in bands], rel=1e-12)
        assert [y - d for y, d in zip(latencies, down)] == pytest.approx([low for low, _ in bands], rel=1e-12)
