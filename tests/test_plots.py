"""Charts: every plot function draws a labelled, non-empty figure for shipped configurations; `rooflinesim plot`
writes valid PNG and SVG files and turns bad input into exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from rooflinesim import load_hardware, plots  # noqa: E402
from rooflinesim.specs.workload import Workload  # noqa: E402
from rooflinesim.cli import main  # noqa: E402
from rooflinesim.errors import InputError  # noqa: E402
from rooflinesim.step import get_step_cost  # noqa: E402

REPORT = Path(__file__).parent / "data" / "validation-example.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _has_data(ax) -> bool:
    return bool(ax.lines or ax.collections or ax.patches or ax.images)


def _check_figure(fig, n_axes_with_data: int = 1) -> None:
    axes = [ax for ax in fig.axes if _has_data(ax) and ax.get_xlabel()]
    assert len(axes) >= n_axes_with_data
    for ax in axes:
        assert ax.get_xlabel() and ax.get_ylabel(), "axis labels"
        assert ax.get_title() or fig._suptitle is not None, "a title stating the configuration"
        assert ax.get_legend() is not None, "a legend"
    # units in the labels (the colorbar axis of a heatmap carries its own label)
    labels = " ".join(ax.get_xlabel() + " " + ax.get_ylabel() for ax in axes)
    assert "(" in labels
    fig.canvas.draw()  # renders without error


@pytest.mark.parametrize("hw, model", [("a100", "llama-2-70b"), ("h100", "llama-3.1-8b"), ("cpu", "tiny-llama-123m")])
def test_roofline(hw, model):
    fig = plots.plot_roofline(hw, model, batch=[1, 16], ctx=[1024], per_op=True)
    _check_figure(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    title = ax.get_title()
    assert model in title and hw in title
    labels = [line.get_label() for line in ax.lines]
    assert any(label.startswith("memory") for label in labels)
    assert any("bf16" in label and "ridge" in label for label in labels)
    assert any(label.startswith("prefill") for label in labels)
    assert any(label.startswith("verify") for label in labels)


def test_roofline_points_lie_under_the_datasheet_roofline():
    hw = load_hardware("a100")
    fig = plots.plot_roofline(hw, "llama-3.1-8b", batch=[1, 8, 64, 256], ctx=[1024, 32768], prefill=False)
    bw, peak = hw.memory_bandwidth_bytes_per_s, hw.get_peak_flops_per_s("bf16")
    for line in fig.axes[0].lines:
        if line.get_label().startswith(("decode", "verify")):
            x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
            assert np.all(y <= np.minimum(bw * x, peak) * (1 + 1e-9))


def test_roofline_refuses_a_calibration_that_is_not_a_profile():
    from rooflinesim.specs.registry import SpecError

    hw = load_hardware("cpu")
    with pytest.raises(SpecError, match="not a measured profile"):
        plots.plot_roofline("cpu", "tiny-llama-123m", batch=[1, 4], ctx=[256], calibration=hw)
    # a spec without per-dtype measurements falls back to its own figures
    assert plots.get_measured_ceilings(hw)[0][1] == hw.memory_bandwidth_bytes_per_s


def test_roofline_draws_a_measured_profile():
    profile = Path(__file__).resolve().parent / "data" / "profiles" / "cpu-intel-xeon-2c.yaml"
    fig = plots.plot_roofline("cpu", "tiny-llama-123m", batch=[1, 4], ctx=[256], calibration=str(profile))
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert any(label.startswith("measured") for label in labels)


@pytest.mark.parametrize("hw, model, draft", [("h100", "llama-3.1-8b", "llama-3.2-1b"),
                                              ("a100", "llama-3.1-70b", "llama-3.1-8b")])
def test_speedup_map(hw, model, draft):
    fig = plots.plot_speedup_map(hw, model, draft, alpha=0.8, batch=[1, 4, 64, 512, 1024], ctx=[512, 4096, 131072])
    _check_figure(fig)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    # issue 24: a cell that does not fit is labelled so (it was priced and labelled as if it fitted)
    assert len(texts) == 15 and all("k=" in t or t == "does not\nfit" for t in texts)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("speedup = 1" in t or "break-even" in t for t in legend)
    # regression: the legend's entries side by side were wider than the figure, and the layout collapsed the map
    # to a sliver ("constrained_layout not applied because axes sizes collapsed to zero")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.canvas.draw()


def test_speedup_map_draws_the_break_even_boundary():
    # A100 x4, 70B + 8B draft at short context: speculation stops paying between batch 256 and 512 (see sweep
    # tests). Issue 24 changed this test on purpose: on one A100 nothing fits, and the boundary it found was drawn
    # through cells priced as if they fitted
    fig = plots.plot_speedup_map("a100", "llama-3.1-70b", "llama-3.1-8b", tp=4, batch=[1, 64, 256, 512, 1024],
                                 ctx=[512, 131072])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "speedup = 1 boundary (break-even)" in legend


def test_tensor_parallel_reaches_every_chart():
    """--tp prices the sharded model: a 70B + 8B draft in bf16 exceeds one 80 GB A100 and fits four; every chart
    says TP in its title."""
    kwargs = dict(batch=[1, 8], ctx=[4096])
    one = plots.plot_speedup_map("a100", "llama-3.1-70b", "llama-3.1-8b", **kwargs)
    four = plots.plot_speedup_map("a100", "llama-3.1-70b", "llama-3.1-8b", tp=4, **kwargs)
    assert "exceeds device memory everywhere" in one.axes[0].get_title()
    assert "x4 (tensor parallel)" in four.axes[0].get_title() and "exceeds" not in four.axes[0].get_title()
    for fig in (plots.plot_speedup_vs_k("h100", "llama-3.1-70b", "llama-3.1-8b", tp=4, k_max=4),
                plots.plot_roofline("h100", "llama-3.1-70b", batch=[1, 8], ctx=[4096], tp=4),
                plots.plot_step_breakdown("h100", "llama-3.1-70b", ctx=[1024, 4096], tp=4)):
        assert "x4 (tensor parallel)" in fig.axes[0].get_title()
    with pytest.raises(InputError):
        plots.plot_roofline("h100", "llama-3.1-70b", tp=3)  # 64 heads do not split 3 ways


def test_speedup_map_rejects_several_alphas():
    with pytest.raises(InputError):
        plots.plot_speedup_map(alpha=[0.6, 0.8])


def _model_and_closed_curves(**options):
    fig = plots.plot_speedup_vs_k("h100", "llama-3.1-8b", alpha=[0.6, 0.8], batch=1, ctx=1024, k_max=8, **options)
    _check_figure(fig)
    lines = fig.axes[0].lines
    model_lines = [line for line in lines if line.get_label().startswith("alpha")]
    assert len(model_lines) == 2
    # the dashed closed form sits right after each model curve
    pairs = [(line, lines[lines.index(line) + 1]) for line in model_lines]
    assert all(closed.get_linestyle() == "--" for _, closed in pairs)
    return [(np.asarray(m.get_ydata()), np.asarray(c.get_ydata())) for m, c in pairs]


def test_speedup_vs_k_matches_leviathan_at_batch_1():
    """With bare kernels (engine ideal) a verify at batch 1 costs about one decode step, Leviathan's assumption."""
    for model, closed in _model_and_closed_curves(engine="ideal"):
        assert np.allclose(model, closed, rtol=0.05)


def test_speedup_vs_k_falls_below_leviathan_by_vllms_proposer_work():
    """vLLM V1's per-iteration proposer work (1.14 ms, engines/vllm-v1.yaml) sits on every verify: the step model
    lies below the closed form at every k >= 1, which leaves it out."""
    for model, closed in _model_and_closed_curves(engine="vllm-v1"):
        assert np.all(model[1:] < closed[1:])


def test_step_breakdown_components_sum_to_the_step_time():
    hw, model = load_hardware("h100"), "llama-3.1-8b"
    from rooflinesim import load_model

    ctx = np.array([256.0, 4096.0, 131072.0])
    step = get_step_cost(hw, load_model(model), Workload(batch=8, context_tokens=0), 1, context_tokens=ctx)
    parts = plots.get_step_breakdown(step)
    assert set(parts) == {name for name, _ in plots.BREAKDOWN_COMPONENTS}
    assert not parts["interconnect"].any()  # one device: no collectives
    assert np.allclose(sum(parts.values()), step.step_time_s, rtol=1e-12)
    assert np.all(np.diff(parts["KV traffic"]) > 0)  # KV traffic grows with context
    assert np.allclose(parts["weight traffic"], parts["weight traffic"][0])  # weights do not


def test_step_breakdown_plot():
    fig = plots.plot_step_breakdown("h100", "llama-3.1-8b", batch=16, new_tokens=5)
    _check_figure(fig)
    assert "verify" in fig.axes[0].get_title()


def test_validation_plot_from_the_fixture():
    fig = plots.plot_validation(REPORT)
    _check_figure(fig, n_axes_with_data=2)
    legend = " ".join(t.get_text() for t in fig.axes[0].get_legend().get_texts())
    assert "median APE" in legend


def test_validation_plot_without_speculative_rows():
    data = json.loads(REPORT.read_text())
    data.pop("speculative")
    data.pop("summary")
    fig = plots.plot_validation(data)
    _check_figure(fig)


@pytest.mark.parametrize("mutate", [lambda d: d.pop("configs"), lambda d: d["configs"][0].pop("measured_s"),
                                    lambda d: d["configs"][0].update(predicted_s=-1.0)])
def test_validation_rejects_a_malformed_report(mutate):
    data = json.loads(REPORT.read_text())
    mutate(data)
    with pytest.raises(InputError):
        plots.plot_validation(data)


# --- CLI ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["roofline", "--hw", "a100", "--batch", "1,64", "--ctx", "1k"],
    ["speedup", "--batch", "1,16,256", "--ctx", "1k,32k"],
    ["k", "--alpha", "0.7,0.9"],
    ["breakdown", "--ctx", "1k..32k"],
    ["breakdown", "--weight-dtype", "int4", "--quant-group-size", "32", "--tp", "2", "--ctx", "1k,4k"],
    ["speedup", "--hw", "h100", "--model", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--tp", "4", "--batch", "1,64",
     "--ctx", "4k"],
    ["validation", "--report", str(REPORT)],
])
def test_cli_writes_a_png(argv, tmp_path, capsys):
    out = tmp_path / "chart.png"
    assert main(["plot", *argv, "-o", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 400 and height >= 300
    assert len(data) > 20_000


def test_cli_writes_an_svg(tmp_path, capsys):
    out = tmp_path / "chart.svg"
    assert main(["plot", "roofline", "--hw", "h200", "-o", str(out)]) == 0
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    assert len(list(root.iter())) > 100


@pytest.mark.parametrize("argv", [
    ["roofline", "-o", "{tmp}/x.jpg"],
    ["roofline", "--hw", "no-such-gpu", "-o", "{tmp}/x.png"],
    ["roofline", "--batch", "abc", "-o", "{tmp}/x.png"],
    ["roofline", "--weight-dtype", "fp7", "-o", "{tmp}/x.png"],
    ["speedup", "--alpha", "0.6,0.8", "-o", "{tmp}/x.png"],
    ["k", "--alpha", "1.5", "-o", "{tmp}/x.png"],
    ["k", "--batch", "1,2", "-o", "{tmp}/x.png"],
    ["validation", "-o", "{tmp}/x.png"],
    ["validation", "--report", "{tmp}/missing.json", "-o", "{tmp}/x.png"],
    ["breakdown", "-o", "{tmp}/no/such/folder/x.png"],
    ["nonsense", "-o", "{tmp}/x.png"],
])
def test_cli_bad_input_exits_2_with_one_line(argv, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        code = main(["plot", *argv])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.glob("x.*"))


def test_predict_never_imports_matplotlib():
    code = ("import sys; from rooflinesim.cli import main; main(['predict', '--json']); "
            "assert 'matplotlib' not in sys.modules and 'rooflinesim.plots' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_importing_plots_does_not_import_matplotlib():
    code = "import sys, rooflinesim.plots; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_quant_group_size_reaches_the_charts():
    """Smaller int4 groups mean more scale bytes per weight: a slower decode step in the breakdown chart."""
    fine = plots.plot_step_breakdown("h100", "llama-3.1-8b", ctx=[1024, 4096], weight_dtype="int4", quant_group_size=32)
    coarse = plots.plot_step_breakdown("h100", "llama-3.1-8b", ctx=[1024, 4096], weight_dtype="int4",
                                       quant_group_size=256)

    def top(fig):  # the highest point of the stacked step time
        return max(float(np.max(c.get_paths()[0].vertices[:, 1])) for c in fig.axes[0].collections)

    assert top(fine) > top(coarse)


def test_validation_plot_draws_a_row_per_validated_dtype():
    data = json.loads(REPORT.read_text())
    combined = dict(data, by_dtype={"fp32": dict(data, dtype="fp32"), "bf16": dict(data, dtype="bf16")})
    fig = plots.plot_validation(combined)
    titles = [ax.get_title() for ax in fig.axes]
    assert len(fig.axes) == 4 and titles[0].startswith("fp32:") and titles[2].startswith("bf16:")
    _check_figure(fig, n_axes_with_data=4)


def test_roofline_marks_the_steps_that_do_not_fit():
    """Issue 24 (every chart kind): the roofline placed steps that exceed device memory like any other."""
    fig = plots.plot_roofline("a100", "llama-3.1-8b", batch=[1, 256], ctx=[32768])
    data = plots.get_roofline_data(plots.get_scenario("a100", "llama-3.1-8b", [1, 256], [32768], speculative=False))
    assert data["fits"]["decode"][:, 0].tolist() == [True, False]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("does not fit in device memory" in t for t in legend)
    fitting = plots.plot_roofline("a100", "llama-3.1-8b", batch=[1, 8], ctx=[1024])
    assert not any("does not fit" in t.get_text() for t in fitting.axes[0].get_legend().get_texts())
