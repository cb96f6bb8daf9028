"""validate's randomised hold-out family (`calibrate.fitting.holdout`, torch-free) and the report's interval coverage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibrate.fitting.holdout import make_hold_out_family
from rooflinesim.calibrate.fitting.plan import check_hold_out, get_calibrated_shapes, get_linear_weight_shapes


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_the_family_spans_the_shapes_the_issue_asks_for_and_none_was_calibrated(seed):
    family = make_hold_out_family(seed)
    assert len(family) >= 6 and len({f.name for f in family}) == len(family)
    ratios = {f.num_attention_heads // f.num_kv_heads for f in family}
    assert 1 in ratios and 8 in ratios and min(ratios) >= 1 and max(ratios) <= 8
    assert min(f.vocab_size for f in family) >= 32000 and max(f.vocab_size for f in family) >= 100000
    assert max(f.vocab_size for f in family) <= 152000
    layers = [f.num_layers for f in family]
    assert min(layers) == 2 and 16 <= max(layers) <= 24
    wide = max(family, key=lambda f: f.hidden_size)
    narrow = min(family, key=lambda f: f.hidden_size)
    assert wide.num_layers < narrow.num_layers  # wide and shallow, narrow and deep
    calibrated = get_calibrated_shapes()
    for spec in family:
        assert not get_linear_weight_shapes(spec) & calibrated, spec.name
    check_hold_out(models=family)


def test_the_family_is_seeded():
    assert make_hold_out_family(3) == make_hold_out_family(3)
    assert make_hold_out_family(3) != make_hold_out_family(4)


def test_check_hold_out_fails_on_a_calibrated_shape():
    from rooflinesim.calibrate.fitting.plan import synthetic_spec

    with pytest.raises(AssertionError, match="hold-out shapes"):
        check_hold_out(models=[synthetic_spec("clash", 384, 6, 2, 1024, vocab=32000)])


def test_coverage_counts_measurements_inside_their_interval():
    from rooflinesim.calibrate.validators.validate_summary import coverage

    rows = [{"measured_s": m, "predicted_low_s": 1.0, "predicted_high_s": 2.0} for m in (0.5, 1.0, 1.5, 2.0, 3.0)]
    spec = [{"measured_speedup": 1.5, "predicted_speedup_low": 1.2, "predicted_speedup_high": 1.4}]
    result = coverage(rows, spec)
    assert result["steps"] == pytest.approx(3 / 5) and result["steps_n"] == 5
    assert result["speedup"] == 0.0 and result["nominal"] == 0.9
    assert coverage([{"measured_s": 1.0, "predicted_low_s": None, "predicted_high_s": None}], []) is None
