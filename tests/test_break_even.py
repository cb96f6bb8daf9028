"""Break-even means break-even (issue 24): where speculation stops paying is found among the batches that fit in
memory; the largest batch that fits is its own answer; "never, up to the largest batch that fits" is a verdict of its
own; the sweep's table, its engine schedules, the speedup map and `predict` agree at the same points."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rooflinesim
from rooflinesim import plots
from rooflinesim.cli import main
from rooflinesim.pricing.break_even import get_break_even_batch
from rooflinesim.pricing.sweep import sweep
from rooflinesim.scenario.builder import build_scenario

try:  # tests/ on sys.path (pytest's default rootdir/prepend import mode)
    import engine_config_parsing  # noqa: F401
except ImportError:  # tests/ imported as a package
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))

# bare kernels (engine ideal): the hand-checked speedups below are the step model's, not an engine profile's
QWEN = dict(hw="l40s", model="qwen2.5-7b", draft="qwen2.5-0.5b", engine="ideal")
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_qwen_on_l40s_at_8k_pays_up_to_the_largest_batch_that_fits():
    """The issue's reproduction: the sweep said "break-even 64", "vLLM disable at 64" and TRT-LLM {64: 0}, although
    batch 64 does not fit and the speedup at batch 32 is 1.78x."""
    result = sweep(**QWEN, batch=BATCHES, ctx=[8192], alpha=[0.6, 0.8])
    assert result.get_largest_fitting_batch() == [32]
    for row, sched in zip(result.get_break_even_table(), result.get_engine_schedules()):
        assert row["break_even_batch"] is None
        assert row["speculation_verdict"] == "pays_up_to_largest_fitting_batch"
        assert row["largest_fitting_batch"] == 32 and 32 <= row["max_batch_that_fits"] < 64
        assert sched["vllm"]["speculative_disable_by_batch_size"] is None
        schedule = sched["trtllm"]["draft_len_schedule"]
        # no k = 0 entry for a batch that does not fit; the last k holds up to the memory cap (keys: up to)
        assert max(schedule) == row["max_batch_that_fits"] and 0 not in schedule.values()
        assert max(sched["trtllm"]["draft_len_schedule_older_releases"]) <= 32
        assert sched["trtllm"]["max_concurrency"] is None


def test_sweep_text_says_never_up_to_the_largest_fitting_batch(capsys):
    assert main(["sweep", "--hw", "l40s", "--model", "qwen2.5-7b", "--draft", "qwen2.5-0.5b", "--ctx", "8k",
                 "--batch", "1..256", "--alpha", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "never, up to 32" in out and "max batch that fits" in out
    assert "64: 0" not in out and "64 / " not in out


def test_70b_tp4_at_2k_is_not_an_out_of_memory_break_even():
    result = sweep(hw="h100", model="llama-3.1-70b", draft="llama-3.1-8b", tp=4, batch=BATCHES, ctx=[2048],
                   alpha=[0.8])
    be = int(result.break_even_batch[0, 0])
    fits = result.speculation_fits[:, 0]
    if be > 0:  # a real break-even is a batch that fits, with the best speculative k losing there
        at = int(np.flatnonzero(result.batch == be)[0])
        assert fits[at] and result.best_speculative_speedup[at, 0, 0] < 1
    else:
        assert result.break_even_verdict[0, 0] == "pays_up_to_largest_fitting_batch"
    assert all(b <= result.get_break_even_table()[0]["max_batch_that_fits"]
               for b in result.get_engine_schedules()[0]["trtllm"]["draft_len_schedule"])


def test_never_pays_and_nothing_fits_are_distinct_verdicts():
    never = sweep(hw="cpu", model="llama-3.1-8b", draft="llama-3.2-1b", batch=[64, 128], ctx=[128], alpha=[0.3])
    row = never.get_break_even_table()[0]
    assert row["speculation_verdict"] == "never_pays" and row["break_even_batch"] == 64
    assert never.get_engine_schedules()[0]["trtllm"] == {
        "draft_len_schedule": {}, "draft_len_schedule_older_releases": {64: 0}, "max_concurrency": 0}
    nothing = sweep(hw="l4", model="llama-3.1-70b", draft="llama-3.2-1b", batch=[1, 2], ctx=[1024], alpha=[0.8])
    row = nothing.get_break_even_table()[0]
    assert row["speculation_verdict"] == "nothing_fits" and row["break_even_batch"] is None
    assert row["max_batch_that_fits"] == 0 and row["largest_fitting_batch"] is None
    assert nothing.get_engine_schedules()[0]["trtllm"]["draft_len_schedule"] == {}


def test_emitted_engine_configs_stop_at_the_batch_that_fits(capsys):
    """serve --emit-config priced batches up to --max-num-seqs 256 although 41 fit at 8k."""
    for engine in ("trtllm", "sglang"):
        assert main(["serve", *sum(([f"--{k}", v] for k, v in QWEN.items()), []), "--prompt-tokens", "8192",
                     "--output-tokens", "128", "--emit-config", engine]) == 0
        out = capsys.readouterr().out
        assert "up to 256" not in out
        if engine == "sglang":
            assert "every batch that fits: up to 41" in out
        else:
            from engine_config_parsing import trtllm_speculative_config

            schedule = trtllm_speculative_config(out)["draft_len_schedule"]
            assert max(schedule) <= 41 and 0 not in schedule.values()


def _chart_pixels(fig):
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())


def test_speedup_map_greys_cells_that_do_not_fit_and_its_colour_bar_works_when_every_cell_pays():
    """The colour bar was blank with overlapping ticks (0.90 over 1.00) whenever every cell paid, and cells that do
    not fit were priced and coloured as if they did."""
    fig = plots.plot_speedup_map(**QWEN, batch=BATCHES, ctx=[8192])
    ax, bar = fig.axes[0], fig.axes[1]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("does not\nfit") == 3  # batches 64, 128, 256
    assert not any(t.startswith("1.69") for t in texts)  # batch 64 was printed at 1.69x
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "does not fit in device memory" in legend and any("pays at every batch that fits" in t for t in legend)
    low, high = bar.get_ylim()
    assert low == pytest.approx(1.0) and high == pytest.approx(2.2, abs=0.01)  # spans the cells that fit
    ticks = [t for t in bar.get_yticks() if low <= t <= high]
    assert len(ticks) >= 3 and len({round(t, 2) for t in ticks}) == len(ticks)
    strip = _chart_pixels(fig)  # the bar is drawn: not a blank white strip
    assert strip.shape[0] > 0


def _predict_break_even(kwargs, batches, ctx, alpha, k_max):
    """Break-even from `predict` alone: at each batch, does the best speculative k that fits beat 1?"""
    pays, fits = [], []
    for b in batches:
        spec = rooflinesim.predict(**kwargs, batch=b, ctx=ctx, alpha=alpha, k=None, allow_long_context=True).speculative
        rows = [r for r in spec.k_table if 0 < r["k"] <= k_max and r["fits_in_memory"]]
        fits.append(bool(rows))
        pays.append(bool(rows) and max(r["speedup"] for r in rows) > 1.0)
    return pays, fits


PAIRS = [("h100", "llama-3.1-8b", "llama-3.2-1b", 1), ("l40s", "qwen2.5-7b", "qwen2.5-0.5b", 1),
         ("cpu", "llama-3.1-8b", "llama-3.2-1b", 1), ("a100", "llama-3.1-70b", "llama-3.1-8b", 4)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=st.sampled_from(PAIRS), batches=st.lists(st.sampled_from([1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256, 512]),
                                                      min_size=2, max_size=6, unique=True),
       ctx=st.sampled_from([128, 1024, 8192, 32768]), alpha=st.sampled_from([0.3, 0.6, 0.8]))
def test_sweep_chart_and_predict_agree_on_break_even(pair, batches, ctx, alpha):
    hw, model, draft, tp = pair
    batches = sorted(batches)
    kwargs = dict(hw=hw, model=model, draft=draft, tp=tp)
    result = sweep(**kwargs, batch=batches, ctx=[ctx], alpha=[alpha], k=range(0, 9))
    scenario = build_scenario(hw, model, batches, [ctx], draft=draft, tp=tp, alpha=alpha, k_values=range(0, 9),
                              allow_long_context=True)
    _, cells = plots.get_speedup_map_data(scenario)
    pays, fits = _predict_break_even(kwargs, batches, ctx, alpha, 8)
    assert list(cells["fits"][:, 0]) == fits == list(result.speculation_fits[:, 0])
    assert list(cells["pays"][:, 0]) == pays == list(result.pays[:, 0, 0])
    from_predict = int(get_break_even_batch(np.asarray(batches), np.asarray(pays), np.asarray(fits)))
    assert from_predict == int(result.break_even_batch[0, 0]) == int(cells["break_even_batch"][0])
    if from_predict > 0:  # the chart's contour sits right below the break-even row of this column
        assert fits[batches.index(from_predict)]
