"""Hostile spec files (issue 15): only finite numbers, no silent coercion, no truncation; every problem is one
SpecError line naming the file, the field and the reason.

Each case mutates one field of a valid shipped spec or measured profile and checks that the schema rejects it at
that field, and that the registry turns it into one line.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rooflinesim.specs.registry import SpecError, load_hardware, load_model, load_spec_file, load_yaml
from rooflinesim.specs.measured import AffineFit, DtypeProfile, LinearTable
from rooflinesim.specs.hardware import HardwareSpec
from rooflinesim.specs.model import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
PROFILE_FILE = ROOT / "tests" / "data" / "profiles" / "cpu-intel-xeon-2c.yaml"


def _data(path: Path) -> dict:
    return load_yaml(path.read_text())


def _set(data: dict, dotted: str, value) -> dict:
    data = copy.deepcopy(data)
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return data


def _first_error(spec_type, data) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        spec_type.model_validate(data)
    first = info.value.errors()[0]
    return ".".join(str(p) for p in first["loc"]), first["msg"]


NAN, INF = float("nan"), float("inf")

HARDWARE_CASES = [
    ("memory_bandwidth_bytes_per_s", INF, "finite"),
    ("memory_bandwidth_bytes_per_s", NAN, "finite"),
    ("memory_bandwidth_bytes_per_s", -INF, "finite"),
    ("memory_bandwidth_bytes_per_s", True, "number"),
    ("memory_bandwidth_bytes_per_s", "3.35e12", "number"),
    ("memory_capacity_bytes", NAN, "finite"),
    ("last_level_cache_bytes", INF, "finite"),
    ("last_level_cache_bytes", -1, "greater than or equal"),
    ("peak_flops_per_s.bf16", INF, "finite"),
    ("peak_flops_per_s.bf16", NAN, "finite"),
    ("peak_flops_per_s.bf16", True, "number"),
    ("peak_flops_per_s.bf16", "1e15", "number"),
    ("efficiency.memory_fraction", NAN, "finite"),
    ("efficiency.kernel_overhead_s", INF, "finite"),
    ("efficiency.compute_fraction", True, "number"),
    ("interconnect.latency_s", INF, "finite"),
    ("interconnect.bandwidth_bytes_per_s_per_direction", NAN, "finite"),
    ("interconnect.bandwidth_bytes_per_s_per_direction", False, "number"),
    ("interconnect.kind", 7, "string"),
    ("name", 100, "string"),
    ("aliases", ["h100", 4090], "string"),
    ("sources.memory_capacity_bytes", 80, "string"),
]


@pytest.mark.parametrize("field, value, reason", HARDWARE_CASES, ids=[f"{c[0]}={c[1]!r}" for c in HARDWARE_CASES])
def test_hardware_schema_rejects(field, value, reason):
    data = _set(_data(ROOT / "hardware" / "h100-sxm-80gb.yaml"), field, value)
    loc, msg = _first_error(HardwareSpec, data)
    assert loc == field or loc.startswith(f"{field}."), loc  # a list item: 'aliases.1'
    assert reason in msg


def test_hardware_schema_still_takes_yaml_ints_for_floats():
    data = _set(_data(ROOT / "hardware" / "h100-sxm-80gb.yaml"), "memory_capacity_bytes", 80_000_000_000)
    data = _set(data, "peak_flops_per_s.bf16", 989_000_000_000_000)
    spec = HardwareSpec.model_validate(data)
    assert spec.memory_capacity_bytes == 80e9 and spec.peak_flops_per_s["bf16"] == 989e12


MODEL_CASES = [
    ("hidden_size", 4096.7, "integer"),
    ("hidden_size", True, "integer"),
    ("hidden_size", "4096", "integer"),
    ("num_layers", 32.5, "integer"),
    ("num_layers", False, "integer"),
    ("vocab_size", INF, "integer"),
    ("max_context_tokens", NAN, "integer"),
    ("published_params", INF, "finite"),
    ("published_params", NAN, "finite"),
    ("published_params", True, "number"),
    ("gated_mlp", "yes", "boolean"),
    ("gated_mlp", 1, "boolean"),
    ("tie_word_embeddings", "false", "boolean"),
    ("attention_bias", 0, "boolean"),
    ("num_kv_heads", 5, "multiple"),
    ("head_dim", 127.9, "integer"),
]


@pytest.mark.parametrize("field, value, reason", MODEL_CASES, ids=[f"{c[0]}={c[1]!r}" for c in MODEL_CASES])
def test_model_schema_rejects(field, value, reason):
    data = _set(_data(ROOT / "models" / "llama-3.1-8b.yaml"), field, value)
    loc, msg = _first_error(ModelSpec, data)
    assert loc == field and reason in msg


def test_model_without_head_dim_needs_divisible_hidden_size():
    data = _data(ROOT / "models" / "llama-3.1-8b.yaml")
    data.pop("head_dim", None)
    data["hidden_size"] = 4095
    loc, msg = _first_error(ModelSpec, data)
    assert loc == "head_dim" and "4095" in msg and "32" in msg
    data["head_dim"] = 128
    assert ModelSpec.model_validate(data).head_dim_resolved == 128


# --- measured profiles ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profile_data() -> dict:
    return _data(PROFILE_FILE)


def _profile_dtype(data: dict) -> str:
    return next(iter(data["measured"]["dtypes"]))


def _decode_key(data: dict) -> str:
    return next(k for k in data["measured"]["dtypes"][_profile_dtype(data)]["attention"] if k.startswith("decode"))


PROFILE_CASES = [
    # (path below measured.dtypes.<dtype>, value, expected loc suffix, reason)
    ("attention.{decode}.coefficients.kv_bytes", -1e-9, "coefficients.kv_bytes", "greater than or equal"),
    ("attention.{decode}.coefficients.kv_bytes", NAN, "coefficients.kv_bytes", "finite"),
    ("attention.{decode}.coefficients.flops", INF, "coefficients.flops", "finite"),
    ("attention.{decode}.overhead_s", NAN, "overhead_s", "finite"),
    ("attention.{decode}.overhead_s", -1e-6, "overhead_s", "greater than or equal"),
    ("attention.{decode}.points", 3.5, "points", "integer"),
    ("elementwise.norm.coefficients.bytes", -1.0, "coefficients.bytes", "greater than or equal"),
    ("gemv_bandwidth_bytes_per_s", INF, "gemv_bandwidth_bytes_per_s", "finite"),
    ("gemv_bandwidth_bytes_per_s", True, "gemv_bandwidth_bytes_per_s", "number"),
    ("layer_overhead_s", NAN, "layer_overhead_s", "finite"),
    ("step_overhead_s", -1e-3, "step_overhead_s", "greater than or equal"),
    ("in_model_scale", NAN, "in_model_scale", "finite"),
    ("residuals.linear_table_median_spread", NAN, "residuals.linear_table_median_spread", "finite"),
    ("linear.0.in_features", 768.5, "linear.0.in_features", "integer"),
    ("cache_reuse.warm_bandwidth_bytes_per_s", INF, "cache_reuse.warm_bandwidth_bytes_per_s", "finite"),
]


@pytest.mark.parametrize("field, value, loc_suffix, reason", PROFILE_CASES,
                         ids=[f"{c[0]}={c[1]!r}" for c in PROFILE_CASES])
def test_profile_schema_rejects(profile_data, field, value, loc_suffix, reason):
    dtype = _profile_dtype(profile_data)
    field = field.replace("{decode}", _decode_key(profile_data))
    data = _set(profile_data, f"measured.dtypes.{dtype}.{field}", value)
    loc, msg = _first_error(HardwareSpec, data)
    assert loc.startswith(f"measured.dtypes.{dtype}.") and loc.endswith(loc_suffix) and reason in msg, (loc, msg)


def _attention_fit() -> AffineFit:
    return AffineFit(overhead_s=1e-5, coefficients={"kv_bytes": 1e-10}, median_abs_rel_residual=0.0, points=3)


@pytest.mark.parametrize("attention, reason", [
    ({}, "decode_d"),
    ({"decode_d64": 0}, "multi_d"),
    ({"multi_d64": 0}, "decode_d"),
    ({"decode_d64": 0, "multi_d64": 0, "prefill_d64": 0}, "prefill_d64"),
    ({"decode_d0": 0, "multi_d64": 0}, "decode_d0"),
    ({"decode_dx": 0, "multi_d64": 0}, "decode_dx"),
    ({"decode": 0, "multi_d64": 0}, "'decode'"),
])
def test_profile_attention_keys_name_decode_and_multi_fits_per_head_dim(attention, reason):
    """attention: {} gave a StopIteration at predict time and an unknown key a ValueError."""
    data = _profile_dtype_data()
    data["attention"] = {key: _attention_fit() for key in attention}
    with pytest.raises(ValidationError, match=reason):
        DtypeProfile.model_validate(data)


def test_profile_elementwise_families_are_known_ones():
    data = _profile_dtype_data()
    data["elementwise"] = {"norm": _attention_fit(), "softmax": _attention_fit()}
    with pytest.raises(ValidationError, match="softmax"):
        DtypeProfile.model_validate(data)


def _profile_dtype_data() -> dict:
    table = LinearTable(in_features=8, out_features=8, m=(1, 2), time_s=(1e-6, 2e-6), spread=(0.0, 0.0))
    return dict(gemv_bandwidth_bytes_per_s=1e10, copy_bandwidth_bytes_per_s=1e10, peak_flops_per_s=1e11,
                linear_overhead_s=1e-6, linear=(table,), attention={"decode_d64": _attention_fit(),
                                                                  "multi_d64": _attention_fit()},
                elementwise={}, layer_overhead_s=0.0, step_overhead_s=0.0)


def test_valid_profile_dtype_data_loads():
    assert DtypeProfile.model_validate(_profile_dtype_data()).attention


@pytest.mark.parametrize("field, value", [("m", (1, True)), ("time_s", (1e-6, NAN)), ("spread", (0.0, -0.1)),
                                          ("m", (0, 2))])
def test_linear_table_rejects(field, value):
    data = dict(in_features=8, out_features=8, m=(1, 2), time_s=(1e-6, 2e-6), spread=(0.0, 0.0))
    data[field] = value
    with pytest.raises(ValidationError):
        LinearTable.model_validate(data)


# --- through the registry: one line naming file, field and reason ----------------------------------------------------


@pytest.mark.parametrize("kind, source, field, text", [
    ("hardware", "hardware/h100-sxm-80gb.yaml", "memory_bandwidth_bytes_per_s", ".inf"),
    ("hardware", "hardware/h100-sxm-80gb.yaml", "memory_bandwidth_bytes_per_s", ".nan"),
    ("hardware", "hardware/h100-sxm-80gb.yaml", "memory_bandwidth_bytes_per_s", "true"),
    ("models", "models/llama-3.1-8b.yaml", "hidden_size", "4096.7"),
    ("models", "models/llama-3.1-8b.yaml", "num_layers", "yes"),
])
def test_registry_reports_one_line(tmp_path, kind, source, field, text):
    lines = [f"{field}: {text}" if line.startswith(f"{field}:") else line
             for line in (ROOT / source).read_text().splitlines()]
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError) as info:
        (load_hardware if kind == "hardware" else load_model)(str(path))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: field '{field}': ")


def test_profile_with_negative_coefficient_is_one_line(tmp_path, profile_data):
    dtype = _profile_dtype(profile_data)
    data = _set(profile_data, f"measured.dtypes.{dtype}.attention.{_decode_key(profile_data)}.coefficients.kv_bytes",
                -1.0)
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"^.*profile\.yaml: field 'measured\.dtypes\..*kv_bytes': .*greater"):
        load_spec_file(path, HardwareSpec)
