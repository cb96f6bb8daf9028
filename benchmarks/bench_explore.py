"""How fast is `rooflinesim explore`? Prints, with the machine: the time from the command to the page being served,
a predict answer, a 64 x 16 speedup map, and (where Chromium and selenium are installed) the time a browser takes
from asking for the page to showing the numbers.

A benchmark, not a test: run `python benchmarks/bench_explore.py` (goals: page up within 1 s of the command, a
predict answer in <= 200 ms, a 64 x 16 speedup map in <= 1 s). Wall times on a shared machine vary: the load average
is printed with them.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlencode

from rooflinesim.specs.profiles import get_host_cpu_model

MAP_BATCHES = [round(512 ** (i / 63)) for i in range(64)]
MAP_CONTEXTS = [round(256 * 512 ** (i / 15)) for i in range(16)]  # 256 .. 131072


def _distinct(values: list[int]) -> list[int]:
    out: list[int] = []
    for v in values:
        out.append(v if not out or v > out[-1] else out[-1] + 1)
    return out


def fetch(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        response.read()
        assert response.status == 200
    return time.perf_counter() - start


def time_page_up() -> tuple[subprocess.Popen, str, float, float]:
    """Start the command; seconds until the URL is printed and until the page and its scripts are served."""
    start = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "rooflinesim.cli", "explore", "--no-browser", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = re.search(r"http://\S+/", server.stdout.readline()).group(0)
    printed = time.perf_counter() - start
    for path in ("", "static/app.js", "static/style.css", "static/vendor/plotly-cartesian.min.js"):
        fetch(url + path)
    return server, url, printed, time.perf_counter() - start


def startup_cpu_s() -> float:
    """CPU seconds a fresh interpreter spends importing the command line and building its parser (what `explore`
    does before it prints the URL): the figure contention does not inflate."""
    probe = ("import time; start = time.process_time(); from rooflinesim.cli import build_parser; build_parser(); "
             "print(time.process_time() - start)")
    return float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)


def time_answers(url: str, query: dict, repeats: int) -> list[float]:
    fetch(url + "?" + urlencode(query))  # the first answer loads the specs
    return [fetch(url + "?" + urlencode(query)) for _ in range(repeats)]


def time_browser(url: str) -> float | None:
    """Seconds from asking headless Chromium for the Roofline view to its numbers being shown (None: no browser)."""
    binary, driver_path = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    if binary is None or driver_path is None:
        return None
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.binary_location = binary
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.get("about:blank")
        start = time.perf_counter()
        driver.get(url + "?view=roofline&hw=a100&batch=8&ctx=32k")
        while driver.execute_script("return document.body.dataset.state") == "loading":
            time.sleep(0.01)
        return time.perf_counter() - start
    finally:
        driver.quit()


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {get_host_cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average "
          f"{load:.1f} (a shared machine's wall times vary)")
    server, url, printed, served = time_page_up()
    try:
        print(f"page up:         URL printed {printed:.2f} s after the command, page and scripts served at "
              f"{served:.2f} s (goal 1 s); the start costs {startup_cpu_s():.2f} s of CPU")
        predict = time_answers(url + "api/predict", {"hw": "a100", "batch": 8, "ctx": "32k"}, repeats=10)
        print(f"predict answer:  median {statistics.median(predict) * 1e3:.0f} ms, max {max(predict) * 1e3:.0f} ms "
              f"over {len(predict)} (goal 200 ms)")
        query = {"hw": "h100", "alpha": 0.8, "k": "0..8", "batch": ",".join(map(str, _distinct(MAP_BATCHES))),
                 "ctx": ",".join(map(str, _distinct(MAP_CONTEXTS)))}
        speedup_map = time_answers(url + "api/sweep/map", query, repeats=5)
        print(f"64 x 16 map:     median {statistics.median(speedup_map) * 1e3:.0f} ms, max "
              f"{max(speedup_map) * 1e3:.0f} ms over {len(speedup_map)} (k = 0..8; goal 1 s)")
        shown = time_browser(url)
        print("browser:         no Chromium/selenium, skipped" if shown is None else
              f"browser:         Roofline view shown {shown:.2f} s after the browser asked for it")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
