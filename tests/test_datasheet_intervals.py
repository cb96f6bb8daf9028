"""An interval on every number (issue 24): a datasheet prediction carries the band of the published measurements on
its device (wider and flagged where the device has none); a measured acceptance's confidence interval reaches E and
the speedup."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rooflinesim
from rooflinesim.cli import main
from rooflinesim.pricing.speedup_band import get_speedup_band
from rooflinesim.specs.registry import load_hardware
from rooflinesim.timing import error_bands
from rooflinesim.timing.datasheet_band import get_datasheet_band

LOG = Path(__file__).resolve().parent / "data" / "engine-logs" / "vllm-v1.log"


def test_datasheet_steps_carry_the_published_band():
    """Datasheet predictions carried no interval, although `show l40s` admits its efficiencies are assumptions."""
    d = rooflinesim.predict("a100").to_dict()
    band = get_datasheet_band(load_hardware("a100"))
    lo, hi, n = error_bands.BANDS["a100"]
    assert n >= error_bands.MIN_ROWS and band.device_rows
    for step in ("decode", "prefill"):
        t = d[step]["step_time_s"]
        assert d[step]["step_time_s_low"] == pytest.approx(t * min(1, np.exp(-hi)))
        assert d[step]["step_time_s_high"] == pytest.approx(t * max(1, np.exp(-lo)))
        assert d[step]["step_time_s_low"] <= t <= d[step]["step_time_s_high"]
    spec = d["speculative"]
    for key in ("draft_step_time_s", "verify_step_time_s", "step_time_s"):
        assert spec[f"{key}_low"] <= spec[key] <= spec[f"{key}_high"]
    assert "66 published measurements on a100" in d["interval_source"] or "published measurements on a100" in \
        d["interval_source"]


def test_a_device_without_published_rows_gets_a_wider_flagged_band():
    own, none = get_datasheet_band(load_hardware("a100")), get_datasheet_band(load_hardware("l4"))
    assert not none.device_rows and "FLAGGED" in none.source
    assert none.high_factor / none.low_factor > own.high_factor / own.low_factor
    assert "FLAGGED" in rooflinesim.predict("l4", model="llama-3.2-1b", draft="llama-3.2-1b").to_dict()[
        "interval_source"]


def test_the_bands_are_what_the_published_rows_say():
    """The shipped bands are regenerated from the table, not typed in (benchmarks/error_bands.py)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from error_bands import get_bands

    bands, pooled = get_bands()
    assert set(bands) == set(error_bands.BANDS)
    for hw, (lo, hi, n) in bands.items():
        assert error_bands.BANDS[hw] == (pytest.approx(lo, abs=1e-4), pytest.approx(hi, abs=1e-4), n)
    assert error_bands.POOLED[2] == pooled[2]


def test_a_measured_acceptance_interval_reaches_e_and_the_speedup(capsys):
    """The Clopper-Pearson interval of an acceptance measured from logs was not carried into the speedup (by hand:
    1.46x becomes 1.42-1.51x)."""
    p = rooflinesim.predict(acceptance=str(LOG)).speculative
    (e_low, e_high), (s_low, s_high) = p.expected_tokens_interval, p.speedup_interval
    assert e_low < p.expected_tokens < e_high and s_low < p.speedup < s_high
    from rooflinesim.acceptance.sources import load_acceptance

    measured = load_acceptance(str(LOG))
    lows = ",".join(str(lo) for lo, _ in measured.per_position_ci)
    at_low = rooflinesim.predict(alpha_per_position=lows, k=p.k).speculative
    # the speedup's low end is the low acceptance's speedup less the engine profile's published error (its 95th
    # percentile of predicted - measured; pricing/speedup_band.py, added in JSON contract 3)
    band = get_speedup_band("vllm-v1")
    assert at_low.expected_tokens == pytest.approx(e_low)
    assert at_low.speedup - band.high_error_x == pytest.approx(s_low)
    assert main(["predict", "--acceptance", str(LOG), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["speculative"]
    assert d["speedup_low"] == pytest.approx(s_low) and d["expected_tokens_high"] == pytest.approx(e_high)
    assert "acceptance" in d["interval_source"]


def test_show_states_the_band_a_datasheet_is_read_with(capsys):
    """`show l40s` admitted its efficiencies are assumptions but gave no band."""
    assert main(["show", "l4", "--json"]) == 0
    band = json.loads(capsys.readouterr().out)["derived"]["datasheet_error_band"]
    assert band["flagged"] and band["step_time_low_factor"] < 1 < band["step_time_high_factor"]
