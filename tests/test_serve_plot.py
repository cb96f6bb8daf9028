"""The serving chart: its numbers come from get_serve_data (rooflinesim serve's runs), drawing is separate."""

import pytest

pytest.importorskip("matplotlib")

from rooflinesim.cli import main  # noqa: E402
from rooflinesim.plots import get_serve_data, plot_serve  # noqa: E402
from rooflinesim.scenario.builder import build_scenario  # noqa: E402
from rooflinesim.serve import LengthDistribution  # noqa: E402
from rooflinesim.serve.rates import WorkloadSpec  # noqa: E402

WORKLOAD = WorkloadSpec(LengthDistribution.parse("512", "p"), LengthDistribution.parse("64", "o"), requests=120)


def test_serve_data_and_chart():
    scenario = build_scenario("h100", "llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k_values=[0])
    data = get_serve_data(scenario, [2, 64], ["off", "fixed:4"], WORKLOAD, max_workers=1)
    assert [r["policy"] for r in data["runs"]] == ["off", "off", "fixed:4", "fixed:4"]
    assert [c["policy"] for c in data["crossovers"]] == ["fixed:4"]
    fig = plot_serve(scenario, data=data)
    curve, tpot = fig.axes[:2]
    assert len(curve.lines) == 2 and tpot.get_xlabel().startswith("request rate")
    # on a datasheet: the latency crossover within vllm-v1's published error, shaded where its low end stops paying
    [crossing] = data["crossovers"]
    assert crossing["latency_range"]["error_x"] > 0
    shaded = crossing["latency_range"]["earliest"] is not None
    assert len(tpot.patches) == int(shaded)
    assert sum("within the published error" in t.get_text() for t in tpot.get_legend().get_texts()) == int(shaded)


def test_cli_plot_serve_writes_a_png(tmp_path, capsys):
    out = tmp_path / "serve.png"
    code = main(["plot", "serve", "-o", str(out), "--model", "llama-3.1-8b", "--draft", "llama-3.2-1b",
                 "--rate", "2,32", "--policy", "off,dynamic", "--requests", "80"])
    assert code == 0 and out.stat().st_size > 10_000
