"""Acceptance from engine logs and metrics: hand-computed goldens on the real-format fixtures, the unconditional ->
conditional conversion, intervals, round trips through the engines' own formats, and every edge case (truncated
lines, k changing, counter resets, mean-only sources) as a one-line error or a stated warning."""

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.acceptance import expected_tokens_iid
from rooflinesim.acceptance.engines import detect_format, parse_engine_acceptance, read_engine_acceptance
from rooflinesim.acceptance.measured import AcceptanceSourceError, clopper_pearson, from_position_counts
from rooflinesim.errors import InputError

LOGS = Path(__file__).parent / "data" / "engine-logs"


def _v1_line(n_drafts: int, reached, elapsed_s: float = 10.0) -> str:
    """One line exactly as vllm/v1/spec_decode/metrics.py (016a858) formats it."""
    k = len(reached)
    accepted, drafted = sum(reached), n_drafts * k
    rates = ", ".join(f"{r / n_drafts:.3f}" for r in reached)
    return ("INFO 06-10 12:00:10 [metrics.py:82] SpecDecoding metrics: "
            f"Mean acceptance length: {1 + accepted / n_drafts:.2f}, Accepted throughput: {accepted / elapsed_s:.2f} "
            f"tokens/s, Drafted throughput: {drafted / elapsed_s:.2f} tokens/s, Accepted: {accepted} tokens, "
            f"Drafted: {drafted} tokens, Per-position acceptance rate: {rates}, "
            f"Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%")


def _prom(n_drafts, reached, engine="0") -> str:
    labels = f'engine="{engine}",model_name="m"'
    lines = [f"vllm:spec_decode_num_drafts_total{{{labels}}} {float(n_drafts)}",
             f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {float(n_drafts * len(reached))}",
             f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {float(sum(reached))}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {float(r)}'
              for i, r in enumerate(reached)]
    return "\n".join(lines) + "\n"


# --- goldens on the fixtures --------------------------------------------------------------------------------------


def test_vllm_v1_log_golden():
    m = read_engine_acceptance(LOGS / "vllm-v1.log")
    # three intervals: drafts 1000 + 800 + 1200; accepted at position 1: 700 + 584 + 840 = 2124, 2: 400 + 352 + 504
    # = 1256, 3: 250 + 208 + 300 = 758 (rate x drafts per line)
    assert (m.k, m.n_drafts, m.reached, m.records) == (3, 3000, (2124, 1256, 758), 3)
    assert m.per_position == pytest.approx((2124 / 3000, 1256 / 2124, 758 / 1256))
    assert m.expected_tokens == pytest.approx(1 + (2124 + 1256 + 758) / 3000)  # 2.3793
    assert float(expected_tokens_iid(m.iid_alpha, 3)) == pytest.approx(m.expected_tokens)
    for rate, (low, high) in zip(m.per_position, m.per_position_ci):
        assert low < rate < high and high - low < 0.06  # ~ 2 x 1.96 sqrt(p (1 - p) / n)
    assert m.expected_tokens_ci[0] < m.expected_tokens < m.expected_tokens_ci[1]


def test_vllm_v0_log_golden():
    m = read_engine_acceptance(LOGS / "vllm-v0.log")
    # cumulative counters: the last line holds the totals; E = emitted / (draft tokens / k) = 10616 / 4437
    assert (m.k, m.n_drafts, m.per_position) == (3, 4437, None)
    assert m.expected_tokens == pytest.approx(10616 / 4437)
    assert m.expected_tokens == pytest.approx(0.598 * 4, abs=0.002)  # the logged system efficiency x (k + 1)
    assert float(expected_tokens_iid(m.iid_alpha, 3)) == pytest.approx(10616 / 4437)
    assert any("only a mean acceptance length" in w for w in m.warnings)


def test_vllm_prometheus_golden():
    m = read_engine_acceptance(LOGS / "vllm-metrics.prom")
    assert (m.k, m.n_drafts, m.reached) == (4, 5000, (3900, 2800, 1900, 1200))
    assert m.per_position == pytest.approx((0.78, 2800 / 3900, 1900 / 2800, 1200 / 1900))
    assert m.expected_tokens == pytest.approx(1 + 9800 / 5000)
    assert not m.warnings  # totals agree: draft tokens = 4 x drafts, accepted = sum over positions


def test_sglang_log_golden():
    m = read_engine_acceptance(LOGS / "sglang.log")
    # k from server_args (speculative_num_steps=3, topk 1); E weighted by #running-req: (8 x 2.85 + 8 x 2.91 +
    # 16 x 2.78 + 16 x 2.80) / 48 = 2.82
    assert m.k == 3 and m.expected_tokens == pytest.approx(2.82)
    assert m.conditions["speculative_algorithm"] == "EAGLE3"
    assert m.expected_tokens_ci[0] < 2.82 < m.expected_tokens_ci[1]
    assert any("i.i.d." in w for w in m.warnings)


@pytest.mark.parametrize("name, value", [("sglang-metrics.prom", 2.85), ("trtllm-metrics.prom", 2.4)])
def test_mean_length_gauges_need_k(name, value):
    with pytest.raises(AcceptanceSourceError, match="do not state the draft length"):
        read_engine_acceptance(LOGS / name)
    m = read_engine_acceptance(LOGS / name, k=3)
    assert m.expected_tokens == pytest.approx(value)
    assert float(expected_tokens_iid(m.iid_alpha, 3)) == pytest.approx(value)


def test_clopper_pearson_golden():
    low, high = clopper_pearson(0, 10)  # upper bound 1 - 0.025^(1/10)
    assert low == 0 and high == pytest.approx(1 - 0.025 ** 0.1)
    low, high = clopper_pearson(10, 10)
    assert low == pytest.approx(0.025 ** 0.1) and high == 1


def test_unconditional_rates_become_conditional():
    # vLLM's per-position rates 0.8, 0.6, 0.3 of 1000 drafts are P(first i accepted); conditional: 0.8, 0.75, 0.5
    m = parse_engine_acceptance(_v1_line(1000, [800, 600, 300]))
    assert m.per_position == pytest.approx((0.8, 0.75, 0.5))
    assert m.expected_tokens == pytest.approx(2.7)
    pmf = m.committed_tokens_pmf  # 1 token: 20 %, 2: 20 %, 3: 30 %, 4: 30 %
    assert pmf == pytest.approx([0.2, 0.2, 0.3, 0.3])


# --- properties: the engines' own formats round-trip -----------------------------------------------------------------


@st.composite
def _counts(draw):
    k = draw(st.integers(1, 6))
    n = draw(st.integers(50, 100_000))
    reached, top = [], n
    for _ in range(k):
        top = draw(st.integers(0, top))
        reached.append(top)
    return n, reached


def _usable(reached) -> int:
    return next((i for i in range(1, len(reached)) if reached[i - 1] == 0), len(reached))


@settings(max_examples=60, deadline=None)
@given(_counts())
def test_prometheus_round_trip_is_exact(counts):
    n, reached = counts
    m = parse_engine_acceptance(_prom(n, reached))
    kept = reached[:_usable(reached)]  # positions no draft reached carry no evidence and are dropped
    assert m.reached == tuple(kept) and m.n_drafts == n
    assert m.expected_tokens == pytest.approx(1 + sum(kept) / n)


@settings(max_examples=60, deadline=None)
@given(_counts())
def test_v1_log_round_trip_within_rounding(counts):
    n, reached = counts
    if reached[0] == 0:
        return
    usable = _usable(reached)
    m = parse_engine_acceptance(_v1_line(n, reached))
    assert m.n_drafts == n
    for got, true in zip(m.reached, reached[:usable]):
        assert abs(got - true) <= 0.0005 * n + 1
    # each count is rate (3 decimals) x drafts, rounded: off by at most 0.0005 n + 0.5
    assert m.expected_tokens == pytest.approx(1 + sum(reached[:usable]) / n, abs=usable * (0.0005 + 0.5 / n) + 1e-9)


# --- edge cases ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "INFO just a log line\n", "vllm:num_requests_running 3.0\n"])
def test_no_speculative_metrics_is_one_line_error(text):
    with pytest.raises(AcceptanceSourceError, match="no speculative-decoding metrics"):
        parse_engine_acceptance(text)
    assert issubclass(AcceptanceSourceError, InputError)


def test_truncated_v1_line_is_skipped_with_a_warning():
    good = [_v1_line(1000, [700, 400, 250]), _v1_line(800, [584, 352, 208])]
    cut = _v1_line(1200, [840, 504, 300])
    # cut inside a rate, inside a count, and inside the rate list (fewer positions): the cross-checks catch each
    for truncated in (cut[: cut.index("0.250") + 3], cut[: cut.index("Drafted:") + 12], cut[: cut.index("0.420") + 4]):
        m = parse_engine_acceptance("\n".join(good[:1] + [truncated] + good[1:]))
        assert m.n_drafts == 1800 and m.reached == (1284, 752, 458)  # the cut line contributes nothing
        assert any("truncated" in w and "line 2" in w for w in m.warnings)
    with pytest.raises(AcceptanceSourceError, match="no complete"):
        parse_engine_acceptance(cut[: cut.index("0.250") + 3])
    # a line cut after its last needed field still carries consistent counts: it is used
    assert parse_engine_acceptance(cut[:-30]).reached == (840, 504, 300)


def test_truncated_v0_line_is_skipped():
    text = (LOGS / "vllm-v0.log").read_text()
    lines = text.splitlines()
    lines[2] = lines[2][:-12]  # "Number of emitted tokens: 10616." loses its digits: not a wrong total
    m = parse_engine_acceptance("\n".join(lines))
    assert m.expected_tokens == pytest.approx(3539 / 1479)
    assert any("truncated" in w for w in m.warnings)


def test_k_changing_mid_log_uses_the_last_run_and_says_so():
    text = "\n".join([_v1_line(1000, [700, 400, 250]), _v1_line(500, [400, 300, 200, 100]),
                      _v1_line(500, [420, 320, 220, 120])])
    m = parse_engine_acceptance(text)
    assert m.k == 4 and m.n_drafts == 1000 and m.reached == (820, 620, 420, 220)
    assert any("k changes mid-log (3 -> 4" in w for w in m.warnings)


def test_prometheus_counter_reset_is_counted_as_a_restart():
    text = _prom(5000, [3900, 2800]) + _prom(200, [150, 100])  # a second scrape after an engine restart
    m = parse_engine_acceptance(text)
    assert m.n_drafts == 5200 and m.reached == (4050, 2900)
    assert any("went backwards" in w for w in m.warnings)


def test_prometheus_sums_engines():
    m = parse_engine_acceptance(_prom(1000, [800, 500], engine="0") + _prom(3000, [2000, 1000], engine="1"))
    assert m.n_drafts == 4000 and m.reached == (2800, 1500)


def test_prometheus_malformed_and_gaps_are_one_line_errors():
    with pytest.raises(AcceptanceSourceError, match="not a number"):
        parse_engine_acceptance(_prom(10, [5]).replace("10.0", "ten"))
    with pytest.raises(AcceptanceSourceError, match="leave gaps"):
        parse_engine_acceptance(_prom(10, [5, 4, 3]).replace('position="1"', 'position="5"'))


def test_never_reached_positions_are_dropped():
    m = from_position_counts("x", "src", 100, [0, 0, 0])
    assert m.k == 1 and m.per_position == (0.0,) and m.expected_tokens == 1.0
    assert any("no evidence" in w for w in m.warnings)


def test_mean_length_outside_range_is_refused():
    text = (LOGS / "sglang.log").read_text().replace("speculative_num_steps=3", "speculative_num_steps=1")
    with pytest.raises(AcceptanceSourceError, match=r"outside \[1, k \+ 1\]"):
        parse_engine_acceptance(text)


def test_sglang_tree_and_k_conflicts():
    text = (LOGS / "sglang.log").read_text()
    m = parse_engine_acceptance(text.replace("speculative_eagle_topk=1", "speculative_eagle_topk=4"))
    assert any("drafts a tree" in w for w in m.warnings)
    with pytest.raises(AcceptanceSourceError, match="but k = 5 was given"):
        parse_engine_acceptance(text, k=5)
    no_args = "\n".join(line for line in text.splitlines() if "server_args" not in line)
    with pytest.raises(AcceptanceSourceError, match="no server_args"):
        parse_engine_acceptance(no_args)
    assert parse_engine_acceptance(no_args, k=3).expected_tokens == pytest.approx(2.82)


def test_mixed_formats_need_an_explicit_format():
    text = (LOGS / "vllm-v1.log").read_text() + (LOGS / "vllm-metrics.prom").read_text()
    with pytest.raises(AcceptanceSourceError, match="several formats"):
        parse_engine_acceptance(text)
    assert parse_engine_acceptance(text, fmt="prometheus").k == 4
    assert detect_format((LOGS / "vllm-v0.log").read_text()) == "vllm-v0"


def test_unreadable_files_are_one_line_errors(tmp_path):
    with pytest.raises(AcceptanceSourceError, match="not found"):
        read_engine_acceptance(tmp_path / "missing.log")
    with pytest.raises(AcceptanceSourceError, match="is a folder"):
        read_engine_acceptance(tmp_path)


def test_implied_expected_tokens_for_other_k():
    m = read_engine_acceptance(LOGS / "vllm-metrics.prom")
    rows = {r["k"]: r for r in m.expected_tokens_by_k(8)}
    assert rows[2]["expected_tokens"] == pytest.approx(1 + 0.78 + 0.56) and rows[2]["basis"] == "measured"
    assert rows[4]["expected_tokens"] == pytest.approx(m.expected_tokens)
    assert rows[6]["basis"] == "i.i.d. extrapolation"
    assert rows[6]["expected_tokens"] == pytest.approx(float(expected_tokens_iid(m.iid_alpha, 6)))
    assert all(not math.isnan(r["expected_tokens"]) for r in rows.values())
    assert np.all(np.diff([r["expected_tokens"] for r in rows.values()]) >= 0)
