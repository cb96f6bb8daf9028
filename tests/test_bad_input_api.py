"""The bad-input matrix (issue 15), Python API: `rooflinesim.predict`, `sweep.sweep`, `scenario.build_scenario` and
the charts (`plots.*`), given bad values, raise one InputError / SpecError line naming the argument or file and the
reason, never a bare ValueError / TypeError / OverflowError from deeper down. Inputs once refused with a traceback
that are valid (a per-position string, scalar sweep axes, a one-value context list) are accepted.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import rooflinesim
from rooflinesim import plots
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.base import SpecError
from rooflinesim.errors import InputError
from rooflinesim.pricing.sweep import sweep
from rooflinesim.specs.validation_report import load_validation_report

try:  # tests/ on sys.path (pytest's default rootdir/prepend import mode)
    from hostile_files import write_hostile_files
except ImportError:  # tests/ imported as a package
    from tests.hostile_files import write_hostile_files

USER_ERRORS = (InputError, SpecError)  # what the API documents (a UnitError is for the parsers)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    return write_hostile_files(tmp_path_factory.mktemp("hostile"))


API_CASES = [
    # (id, call, fragments of the message)
    ("predict-k-nan", lambda f: rooflinesim.predict(k=float("nan")), ("k (draft length)", "nan")),
    ("predict-k-inf", lambda f: rooflinesim.predict(k=float("inf")), ("k (draft length)", "inf")),
    ("predict-k-fraction", lambda f: rooflinesim.predict(k=2.5), ("k (draft length)", "2.5")),
    ("predict-k-string", lambda f: rooflinesim.predict(k="4"), ("k (draft length)", "'4'")),
    ("predict-k-bool", lambda f: rooflinesim.predict(k=True), ("k (draft length)", "True")),
    ("predict-two-alphas", lambda f: rooflinesim.predict(alpha=[0.5, 0.6]), ("one acceptance rate", "0.5, 0.6")),
    ("predict-alpha-nan", lambda f: rooflinesim.predict(alpha=float("nan")), ("acceptance rate", "[0, 1]")),
    ("predict-alpha-string", lambda f: rooflinesim.predict(alpha="high"), ("acceptance rate", "'high'")),
    ("predict-alpha-per-position-bad", lambda f: rooflinesim.predict(alpha_per_position="0.9,1.5"),
     ("per-position acceptance rate", "1.5")),
    ("predict-alpha-per-position-empty", lambda f: rooflinesim.predict(alpha_per_position=[]),
     ("alpha_per_position",)),
    ("predict-ctx-list-two", lambda f: rooflinesim.predict(ctx=["4k", "8k"]), ("one batch and one context",)),
    ("predict-ctx-unit", lambda f: rooflinesim.predict(ctx="32q"), ("context", "32q")),
    ("predict-ctx-nan", lambda f: rooflinesim.predict(ctx=float("nan")), ("context", "nan")),
    ("predict-ctx-bool", lambda f: rooflinesim.predict(ctx=True), ("context", "True")),
    # issue 24: None now means "not given" (the scenario's default, listed in `assumed`); an empty value is bad input
    ("predict-ctx-empty", lambda f: rooflinesim.predict(ctx=[]), ("context",)),
    ("predict-batch-empty", lambda f: rooflinesim.predict(batch=[]), ("batch",)),
    ("predict-batch-huge", lambda f: rooflinesim.predict(batch=2**63), ("batch", "at most")),
    ("predict-hw-garbage", lambda f: rooflinesim.predict(hw=f["garbage.yaml"]), ("garbage.yaml", "UTF-8")),
    ("predict-hw-number", lambda f: rooflinesim.predict(hw=3), ("unknown hardware '3'",)),
    ("predict-model-empty", lambda f: rooflinesim.predict(model=""), ("model",)),
    ("predict-head-fraction-inf", lambda f: rooflinesim.predict(drafter="head", head_layer_fraction=float("inf")),
     ("head layer fraction",)),
    ("predict-head-fraction-string", lambda f: rooflinesim.predict(drafter="head", head_layer_fraction="1"),
     ("head layer fraction",)),
    ("predict-attention-none", lambda f: rooflinesim.predict(attention=None), ("attention",)),
    ("predict-weight-dtype-empty", lambda f: rooflinesim.predict(weight_dtype=""), ("dtype",)),
    ("predict-calibration-garbage", lambda f: rooflinesim.predict(hw="cpu-generic", calibration=f["garbage.yaml"]),
     ("garbage.yaml",)),
    ("predict-calibration-number", lambda f: rooflinesim.predict(hw="cpu-generic", calibration=123),
     ("calibration profile", "123")),
    ("scenario-allow-long-context-string", lambda f: build_scenario(ctx="1M", allow_long_context="no"),
     ("allow_long_context must be True or False", "'no'")),
    ("scenario-speculative-string", lambda f: build_scenario(speculative="no"), ("speculative must be True or False",)),
    ("scenario-extra-draft-pass-number", lambda f: build_scenario(extra_draft_pass=2), ("extra_draft_pass",)),
    ("scenario-tp-fraction", lambda f: build_scenario(tp=2.5), ("--tp", "2.5")),
    ("scenario-tp-string", lambda f: build_scenario(tp="two"), ("--tp", "two")),
    ("scenario-batch-fraction", lambda f: build_scenario(batch=[1.5]), ("batch", "1.5")),
    ("scenario-batch-bool", lambda f: build_scenario(batch=[True]), ("batch", "True")),
    ("scenario-batch-empty", lambda f: build_scenario(batch=[]), ("batch",)),
    ("scenario-batch-2d", lambda f: build_scenario(batch=[[1, 2]]), ("batch",)),
    ("scenario-quant-group-fraction", lambda f: build_scenario(weight_dtype="int4", quant_group_size=64.5),
     ("quantisation group size", "64.5")),
    ("scenario-k-values-nan", lambda f: build_scenario(k_values=[0, float("nan")]), ("k (draft length)",)),
    ("scenario-k-values-empty", lambda f: build_scenario(k_values=[]), ("k needs at least one value",)),
    ("scenario-drafter-unknown", lambda f: build_scenario(drafter="telepathy"), ("drafter", "telepathy")),
    ("scenario-draft-tp-zero", lambda f: build_scenario(draft_tp=0), ("--draft-tp",)),
    ("scenario-context-too-long", lambda f: build_scenario(ctx="1M"), ("exceeds", "allow_long_context")),
    ("sweep-k-inf", lambda f: sweep(k=[0, float("inf")]), ("k (draft length)", "inf")),
    ("sweep-alpha-string-list", lambda f: sweep(alpha=["0.6", "x"]), ("acceptance rate",)),
    ("sweep-alpha-above-1", lambda f: sweep(alpha=1.5), ("acceptance rate", "1.5")),
    ("sweep-per-position", lambda f: sweep(alpha=None, alpha_per_position=[0.9, 0.8], k=[0, 1]),
     ("per-position",)),
    ("sweep-no-speculation", lambda f: sweep(speculative=False), ("drafter",)),
    ("sweep-ctx-word", lambda f: sweep(ctx=["1k", "lots"]), ("context", "lots")),
    ("sweep-batch-huge", lambda f: sweep(batch=[1, 10**30]), ("batch", "at most")),
    ("plots-roofline-garbage", lambda f: plots.get_roofline_data(plots.get_scenario(f["garbage.yaml"])),
     ("garbage.yaml", "UTF-8")),
    ("plots-roofline-k-nan", lambda f: plots.get_roofline_data(build_scenario(), k=float("nan")),
     ("verify k (draft length)", "nan")),
    ("plots-speedup-map-two-alphas", lambda f: plots.get_speedup_map_data(build_scenario(
        batch=[1, 2], ctx=[1024, 2048], alpha=[0.5, 0.6], k_values=[0, 1])), ("one acceptance rate",)),
    ("plots-speedup-vs-k-grid", lambda f: plots.get_speedup_vs_k_data(build_scenario(batch=[1, 2])),
     ("one batch and one context",)),
    ("plots-breakdown-new-tokens", lambda f: plots.get_breakdown_data(build_scenario(ctx=[1024, 2048]),
                                                                      new_tokens=0), ("new tokens",)),
    ("plots-speedup-vs-k-k-max-nan", lambda f: plots.plot_speedup_vs_k(k_max=float("nan")), ("k_max", "nan")),
    ("plots-breakdown-new-tokens-nan", lambda f: plots.get_breakdown_data(build_scenario(ctx=[1024, 2048]),
                                                                          new_tokens=float("nan")),
     ("new tokens per sequence", "nan")),
    ("plots-breakdown-new-tokens-fraction", lambda f: plots.get_breakdown_data(build_scenario(ctx=[1024, 2048]),
                                                                               new_tokens=2.5),
     ("new tokens per sequence", "2.5")),
    ("plots-validation-not-a-path", lambda f: plots.load_validation_report(5), ("JSON file path or a dict", "5")),
    ("plots-validation-by-dtype-not-object", lambda f: plots.plot_validation(
        {"configs": [{"kind": "decode", "measured_s": 1.0, "predicted_s": 1.0, "roofline_s": 1.0}],
         "by_dtype": {"fp32": 5}}), ("by_dtype.fp32 must be a JSON object",)),
    ("plots-validation-garbage", lambda f: plots.load_validation_report(f["garbage.json"]), ("garbage.json", "UTF-8")),
    ("report-schema-garbage", lambda f: load_validation_report(f["garbage.json"]), ("garbage.json", "UTF-8")),
    ("plots-validation-speculative-not-list", lambda f: plots.load_validation_report(
        {"configs": [{"kind": "decode", "measured_s": 1.0, "predicted_s": 1.0, "roofline_s": 1.0}], "speculative": 3}),
     ("'speculative' must be a JSON list",)),
    ("plots-validation-missing", lambda f: plots.load_validation_report(f["missing.yaml"]), ("missing.yaml",)),
    ("plots-speedup-map-hw-inf", lambda f: plots.plot_speedup_map(hw=f["hw-inf.yaml"]),
     ("memory_bandwidth_bytes_per_s", "finite")),
]


@pytest.mark.parametrize("call, fragments", [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES])
def test_api_bad_input_is_one_line_user_error(call, fragments, inputs):
    with pytest.raises(USER_ERRORS) as info:
        call(inputs)
    message = str(info.value)
    assert "\n" not in message and message.strip(), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# --- inputs once refused with a traceback that are valid and now accepted ---------------------------------------------


def test_alpha_per_position_as_a_string_is_parsed():
    from_string = rooflinesim.predict(alpha_per_position="0.9,0.8")
    from_list = rooflinesim.predict(alpha_per_position=[0.9, 0.8])
    assert from_string.speculative.to_dict() == from_list.speculative.to_dict()
    assert from_string.speculative.k <= 2


def test_scalar_sweep_axes_are_one_point_axes():
    scalar = sweep(batch=8, ctx="4k", alpha=0.8, k=2)
    listed = sweep(batch=[8], ctx=[4096], alpha=[0.8], k=[2])
    assert scalar.speedup.shape == (1, 1, 1, 1)
    np.testing.assert_array_equal(scalar.speedup, listed.speedup)


def test_predict_takes_a_one_value_context_list():
    assert rooflinesim.predict(ctx=["4k"]).to_dict() == rooflinesim.predict(ctx=4096).to_dict()


def test_numpy_scalars_are_accepted_like_python_numbers():
    a = rooflinesim.predict(batch=np.int64(8), ctx=np.int32(2048), k=np.int64(3), alpha=np.float32(0.5))
    b = rooflinesim.predict(batch=8, ctx=2048, k=3, alpha=0.5)
    assert a.speculative.speedup == pytest.approx(b.speculative.speedup) and math.isfinite(a.speculative.speedup)
