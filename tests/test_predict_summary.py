"""One screen by default (issue 24): predict's text is a summary a terminal shows whole; --ops and --k-table expand
it; the speedup is shown at alpha -+ 0.1 with the k that is robust across them; labels and numbers mean what they
say."""

from __future__ import annotations

import json

import numpy as np
import pytest

import rooflinesim
from rooflinesim.cli import main
from rooflinesim.cli.calibration import format_layer_overheads


def _out(capsys, *argv):
    assert main(["predict", *argv]) == 0
    return capsys.readouterr().out


def test_predict_fits_one_screen_and_expands_on_request(capsys):
    """Every predict printed an 18-row op table and a 17-row k table (about 60 lines)."""
    out = _out(capsys)
    assert len(out.splitlines()) <= 24
    assert "q_proj" not in out and "E[tokens]" not in out
    for text in ("Deployment", "Decode", "Memory", "Speculation", "best k", "assumed:", "--ops", "--k-table"):
        assert text in out
    full = _out(capsys, "--ops", "--k-table")
    assert "q_proj" in full and "E[tokens]" in full and "more:" not in full


def test_speedup_is_shown_at_alpha_plus_minus_0_1_with_a_robust_k(capsys):
    spec = rooflinesim.predict().speculative
    assert [row["alpha"] for row in spec.speedup_by_alpha] == pytest.approx([0.7, 0.8, 0.9])
    middle = spec.speedup_by_alpha[1]
    assert middle["best_k"] == spec.best_k and middle["best_speedup"] == pytest.approx(spec.best_speedup)
    for row in spec.speedup_by_alpha:  # each row is predict at that alpha
        at = rooflinesim.predict(alpha=row["alpha"]).speculative
        assert (row["best_k"], row["best_speedup"]) == (at.best_k, pytest.approx(at.best_speedup))
    # the robust k's worst share of each alpha's best speedup is the highest any k reaches
    shares = []
    for k in range(9):
        shares.append(min(rooflinesim.predict(alpha=row["alpha"], k=k).speculative.speedup / row["best_speedup"]
                          for row in spec.speedup_by_alpha))
    assert spec.robust_k == int(np.argmax(shares)) and spec.robust_k_worst_share == pytest.approx(max(shares))
    out = _out(capsys)
    assert "alpha 0.7:" in out and "alpha 0.9:" in out and f"robust k = {spec.robust_k}" in out
    d = json.loads(_out(capsys, "--json"))["speculative"]
    assert d["robust_k"] == spec.robust_k and len(d["speedup_by_alpha"]) == 3


def test_per_position_acceptance_has_no_alpha_to_move():
    spec = rooflinesim.predict(alpha_per_position="0.9,0.8,0.7").speculative
    assert spec.speedup_by_alpha is None and spec.robust_k is None


def test_a_fitted_zero_overhead_is_not_printed():
    """calibrate printed "per-layer overhead 0 us + 0 us in a model's layers"."""
    assert format_layer_overheads(0.0, 0.0) == ""
    assert format_layer_overheads(3.2e-6, 0.0) == "per-layer overhead 3.2 us, "
    assert format_layer_overheads(0.0, 4.5e-7) == "per-layer overhead 0.45 us in a model's layers, "


def test_exact_rebuilt_counts_carry_no_plus_minus_0_warning():
    """A short vLLM V1 log said "about +-0 per position": rates to 3 decimals over < 1000 drafts rebuild exact
    counts."""
    from rooflinesim.acceptance.engines import parse_engine_acceptance

    line = ("INFO 06-10 12:00:10 [metrics.py:82] SpecDecoding metrics: Mean acceptance length: 2.35, Accepted "
            "throughput: 135.00 tokens/s, Drafted throughput: 300.00 tokens/s, Accepted: {a} tokens, Drafted: {d} "
            "tokens, Per-position acceptance rate: 0.700, 0.400, 0.250, Avg Draft acceptance rate: 45.0%\n")
    small = parse_engine_acceptance(line.format(a=135, d=300), "vllm-v1")
    assert not [w for w in small.warnings if "+-0 " in w or "rebuilt from rates" in w]
    large = parse_engine_acceptance(line.format(a=135000, d=300000), "vllm-v1")
    assert any("about +-50 per position" in w for w in large.warnings)


def test_best_k_is_labelled_with_the_batch_it_is_at(capsys):
    """"best k @ b=1" and `best_speedup_at_batch_1` showed the grid's smallest batch, which need not be 1."""
    assert main(["sweep", "--batch", "4..64", "--ctx", "1k", "--alpha", "0.8"]) == 0
    out = capsys.readouterr().out
    assert "best k @ b=4" in out and "b=1" not in out
    assert main(["sweep", "--batch", "4..64", "--ctx", "1k", "--alpha", "0.8", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["break_even"][0]
    assert row["first_batch"] == 4 and "best_k_at_first_batch" in row and "best_k_at_batch_1" not in row
    spec = rooflinesim.predict(batch=4, ctx=1024).speculative
    assert (row["best_k_at_first_batch"], row["best_speedup_at_first_batch"]) == (spec.best_k,
                                                                                pytest.approx(spec.best_speedup))


def test_to_rows_returns_rows_and_to_columns_columns():
    from rooflinesim.pricing.sweep import sweep

    result = sweep(batch=[1, 2], ctx=[1024], alpha=[0.8], k=[0, 1])
    rows, columns = result.to_rows(), result.to_columns()
    assert len(rows) == 4 and set(rows[0]) == set(columns) and rows[3]["k"] == 1 and rows[3]["batch"] == 2
    assert all(len(v) == 4 for v in columns.values())


def test_predict_does_not_import_scipy_stats():
    """The parser imported the acceptance command, whose module imported scipy.stats at load: seconds on every
    `predict` (the project's rule: predict imports neither torch, matplotlib nor scipy.stats)."""
    import subprocess
    import sys

    code = ("import sys; from rooflinesim.cli import main; main(['predict', '--json']); "
            "bad = [m for m in ('scipy.stats', 'torch', 'matplotlib') if m in sys.modules]; "
            "sys.stderr.write(repr(bad)); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-500:]


def test_a_peak_at_the_probe_bound_says_contention_only_when_the_run_was_contended():
    """Regression: on a quiet 2-core Xeon VM (CPU pressure 0 %) every --quick run fitted its GEMM peak at half the
    device probe's and was told its compute-bound points 'were measured under contention'; the quick plan's GEMMs
    (M <= 256) do not reach the peak there, and a full run fitted 311-359 against 144-186 GFLOP/s."""
    from rooflinesim.cli.calibration import get_fit_warnings
    from tests.synthetic_profiles import make_profile

    def profile(residuals, notes):
        hw = make_profile()
        prof = hw.measured.dtypes["fp32"].model_copy(update={"residuals": residuals})
        prov = hw.measured.provenance.model_copy(update={"notes": notes})
        return hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {"fp32": prof},
                                                                                "provenance": prov})})

    assert get_fit_warnings(profile({"linear_peak_at_probe_bound": 0.0}, "")) == []
    quiet = get_fit_warnings(profile({"linear_peak_at_probe_bound": 1.0}, "CPU pressure 0 % / 0 %."))
    assert len(quiet) == 1 and "contention" not in quiet[0] and "full calibration" in quiet[0]
    busy = get_fit_warnings(profile({"linear_peak_at_probe_bound": 1.0},
                                    "above 25 %: other tenants stalled calls, re-run in a quiet window. "))
    assert len(busy) == 1 and "measured under contention" in busy[0]
    kept = get_fit_warnings(profile({"decoder_fit_scale_prior": 1.0}, ""))
    assert kept == [
        "warning: fp32: no mid-size decoder streamed its weights from memory; the in-model scale is kept at 1"]
