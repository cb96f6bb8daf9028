"""The chart of `rooflinesim acceptance validate`: its numbers come from the report, bad reports are input errors."""

from __future__ import annotations

import numpy as np
import pytest

from rooflinesim.plots import get_acceptance_validation_data, plot_acceptance_validation
from rooflinesim.errors import InputError


def _report():
    rows = []
    for batch, measured, predicted in ((1, 0.9, 1.0), (4, 1.1, 1.05), (16, 0.7, 0.72)):
        rows.append({"batch": batch, "k": 4, "measured_speedup": measured, "predicted_speedup": predicted,
                     "predicted_speedup_low": predicted * 0.9, "predicted_speedup_high": predicted * 1.1,
                     "measured_iteration_s": 4e-3, "predicted_iteration_s": 3.8e-3, "measured_decode_s": 1.5e-3,
                     "predicted_decode_s": 1.4e-3, "measured_drafts_s": 1.5e-3, "predicted_drafts_s": 1.4e-3,
                     "measured_verify_s": 2.2e-3, "predicted_verify_s": 2.1e-3, "measured_rule_s": 0.3e-3,
                     "predicted_rule_s": 0.3e-3})
    return {"speculative": rows, "goal_abs_speedup_error": 0.15, "device_name": "test CPU",
            "acceptance": {"expected_tokens": 2.1}}


def test_data_reads_the_report():
    data = get_acceptance_validation_data(_report())
    assert data["batch"].tolist() == [1.0, 4.0, 16.0]
    assert np.allclose(data["predicted_high"], [1.1, 1.155, 0.792])
    assert data["measured_rule_s"].tolist() == [0.3e-3] * 3
    assert data["device"] == "test CPU" and data["k"] == 4


def test_chart_draws_two_panels():
    fig = plot_acceptance_validation(_report())
    assert len(fig.axes) == 2
    assert fig.axes[0].get_ylabel().startswith("speedup")


@pytest.mark.parametrize("bad", [{}, {"speculative": []}, {"speculative": [{"batch": 1}]},
                                 {"speculative": [{**_report()["speculative"][0], "measured_speedup": float("nan")}]},
                                 {"speculative": [{**_report()["speculative"][0], "batch": True}]}])
def test_bad_reports_are_input_errors(bad):
    with pytest.raises(InputError):
        get_acceptance_validation_data(bad)


def test_unreadable_file_is_an_input_error(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{not json")
    with pytest.raises(InputError):
        get_acceptance_validation_data(path)


def test_chart_title_states_the_machine_speed_check():
    report = {**_report(), "machine_speed": {"median_ratio": {"gemm": 1.16, "forward": 1.02}, "tolerance": 0.1,
                                             "matches_profile": False}}
    fig = plot_acceptance_validation(report)
    title = fig._suptitle.get_text()
    assert "gemm 1.16x, forward 1.02x, OUTSIDE +-10%" in title
    # no check (an older report), or one against a profile without anchors: nothing added
    assert "machine speed" not in plot_acceptance_validation(_report())._suptitle.get_text()
    unchecked = {**_report(), "machine_speed": {"median_ratio": None, "matches_profile": None}}
    assert "machine speed" not in plot_acceptance_validation(unchecked)._suptitle.get_text()
