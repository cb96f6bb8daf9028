"""Hostile files given to the registry (issue 15): binary garbage, broken Hugging Face configs, a spec of the wrong
kind. Each must be one SpecError line naming the file and the reason (and the field where there is one), never a
traceback from deeper down (UnicodeDecodeError, ZeroDivisionError, AttributeError, OverflowError, ...)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rooflinesim.specs.profiles import load_profile
from rooflinesim.specs.registry import (
    SpecError, load_any_spec, load_hardware, load_model, load_spec_file, model_from_hf_config,
)
from rooflinesim.specs.hardware import HardwareSpec
from rooflinesim.specs.model import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
GARBAGE = bytes(range(256)) * 4  # invalid UTF-8 (0x80..0xff) and control characters


def _one_line(info: pytest.ExceptionInfo, path: Path) -> str:
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"{path}"), message
    return message


# --- binary garbage ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".yml"])
@pytest.mark.parametrize("loader", [load_hardware, load_model, load_any_spec, load_profile,
                                    lambda p: load_spec_file(p, HardwareSpec)],
                         ids=["hardware", "model", "any", "profile", "spec_file"])
def test_binary_garbage_is_one_line(tmp_path, loader, suffix):
    path = tmp_path / f"garbage{suffix}"
    path.write_bytes(GARBAGE)
    with pytest.raises(SpecError) as info:
        loader(str(path))
    assert "UTF-8" in _one_line(info, path)


def test_yaml_with_control_characters_is_one_line(tmp_path):
    """Valid UTF-8 that YAML refuses (a NUL byte): PyYAML's message spans two lines."""
    path = tmp_path / "nul.yaml"
    path.write_bytes(b"name: a\x00b\n")
    with pytest.raises(SpecError) as info:
        load_hardware(str(path))
    assert "YAML" in _one_line(info, path)


# --- Hugging Face config.json ---------------------------------------------------------------------------------------


def _config(name: str = "llama-hf-config.json") -> dict:
    return json.loads((DATA / name).read_text())


def _write(tmp_path: Path, config, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return path


HF_CASES = [
    # (case id, base config, changes (None: delete the key), expected message after "<path>: ")
    ("zero-heads", "llama", {"num_attention_heads": 0}, "field 'num_attention_heads': must be positive, got 0"),
    ("negative-layers", "llama", {"num_hidden_layers": -2}, "field 'num_hidden_layers': must be positive, got -2"),
    ("infinite-hidden", "llama", {"hidden_size": float("inf")}, "field 'hidden_size': not a finite number"),
    ("nan-vocab", "llama", {"vocab_size": float("nan")}, "field 'vocab_size': not a finite number"),
    ("fractional", "llama", {"hidden_size": 4096.7}, "field 'hidden_size': expected a whole number, got 4096.7"),
    ("bool-number", "llama", {"num_hidden_layers": True}, "field 'num_hidden_layers': expected an integer, got a boolean"),
    ("string-number", "llama", {"intermediate_size": "8192"}, "field 'intermediate_size': expected an integer, got a string"),
    ("list-number", "llama", {"vocab_size": [1]}, "field 'vocab_size': expected an integer, got a list"),
    ("missing", "llama", {"vocab_size": None}, "field 'vocab_size': missing from the config"),
    ("not-divisible", "llama", {"hidden_size": 4095, "head_dim": None},
     "field 'hidden_size': 4095 is not divisible by num_attention_heads (32); the config must give head_dim"),
    ("bool-flag-as-string", "llama", {"tie_word_embeddings": "false"},
     "field 'tie_word_embeddings': expected true or false, got a string"),
    ("infinite-window", "mistral", {"sliding_window": float("inf")}, "field 'sliding_window': not a finite number"),
    ("zero-experts", "mixtral", {"num_local_experts": 0}, "field 'num_local_experts': must be positive, got 0"),
    ("top-k-above-experts", "mixtral", {"num_experts_per_tok": 9},
     "field 'moe.num_experts_per_token': 9 exceeds num_experts (8)"),
    ("fractional-rank", "deepseek", {"kv_lora_rank": 511.5}, "field 'kv_lora_rank': expected a whole number"),
    ("model-type-not-text", "llama", {"model_type": 7}, "field 'model_type': expected a string"),
]
_BASES = {"llama": "llama-hf-config.json", "mistral": "mistral-hf-config.json", "mixtral": "mixtral-config.json",
          "deepseek": "deepseek-v2-lite-config.json"}


@pytest.mark.parametrize("base, changes, expected", [c[1:] for c in HF_CASES], ids=[c[0] for c in HF_CASES])
def test_hf_config_problems_are_one_line_with_the_field(tmp_path, base, changes, expected):
    config = _config(_BASES[base])
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path = _write(tmp_path, config)
    with pytest.raises(SpecError) as info:
        model_from_hf_config(path)
    message = _one_line(info, path)
    assert message.startswith(f"{path}: {expected}"), message


def test_hf_head_dim_given_makes_any_hidden_size_fine(tmp_path):
    config = _config()
    config.update(hidden_size=4095, head_dim=64)
    assert model_from_hf_config(_write(tmp_path, config)).head_dim_resolved == 64


def test_hf_integral_float_is_taken_as_the_integer(tmp_path):
    config = _config()
    config["intermediate_size"] = 8192.0
    assert model_from_hf_config(_write(tmp_path, config)).intermediate_size == 8192


@pytest.mark.parametrize("text, reason", [
    ("[1, 2, 3]", "expected a JSON object of config fields at the top level, got a list"),
    ('"llama"', "expected a JSON object of config fields at the top level, got a string"),
    ("null", "expected a JSON object of config fields at the top level, got null"),
    ('{"model_type": "llama", "hidden_size": 2048,', "not valid JSON"),
    ('{"model_type": "llama", "hidden_size": Infinity}', "field 'hidden_size': not a finite number"),
])
def test_hf_config_top_level_problems(tmp_path, text, reason):
    path = _write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_model(str(path))
    assert _one_line(info, path).startswith(f"{path}: {reason}")


def test_hf_moe_and_mla_configs_import_into_nested_blocks():
    mixtral = model_from_hf_config(DATA / "mixtral-config.json")
    assert mixtral.moe.num_experts == 8 and mixtral.moe.moe_intermediate_size == 14336 and mixtral.mla is None
    lite = model_from_hf_config(DATA / "deepseek-v2-lite-config.json")
    assert lite.mla.kv_lora_rank == 512 and lite.mla.q_lora_rank is None and lite.moe.first_dense_layers == 1
    assert lite.params == load_model("deepseek-v2-lite").params


# --- load_any_spec: the schema follows the file's content --------------------------------------------------------


def test_load_any_spec_by_name_and_path():
    assert isinstance(load_any_spec("h100"), HardwareSpec)
    assert isinstance(load_any_spec("llama-3.1-8b"), ModelSpec)
    assert isinstance(load_any_spec(str(ROOT / "models" / "mixtral-8x7b.yaml")), ModelSpec)
    assert isinstance(load_any_spec(str(ROOT / "hardware" / "l4.yaml")), HardwareSpec)
    assert isinstance(load_any_spec(str(DATA / "mistral-hf-config.json")), ModelSpec)
    assert load_any_spec(str(ROOT / "calibrate" / "cpu-intel-xeon-2c.yaml")).measured is not None


def test_load_any_spec_reports_a_bad_model_with_the_model_schema(tmp_path):
    """`show` on a bad model YAML reported the hardware schema's errors."""
    data = yaml.safe_load((ROOT / "models" / "llama-3.1-8b.yaml").read_text())
    data["num_layers"] = -1
    path = tmp_path / "bad-model.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        load_any_spec(str(path))
    assert _one_line(info, path).startswith(f"{path}: field 'num_layers': ")


def test_load_any_spec_reports_a_bad_hardware_file_with_the_hardware_schema(tmp_path):
    data = yaml.safe_load((ROOT / "hardware" / "l4.yaml").read_text())
    data["memory_bandwidth_bytes_per_s"] = True
    path = tmp_path / "bad-hw.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        load_any_spec(str(path))
    assert _one_line(info, path).startswith(f"{path}: field 'memory_bandwidth_bytes_per_s': ")


@pytest.mark.parametrize("text, reason", [
    ("name: x\nfoo: 1\n", "neither a hardware nor a model spec"),
    ("name: x\nnum_layers: 2\nmemory_bandwidth_bytes_per_s: 1.0e9\n", "both hardware"),
    ("- 1\n- 2\n", "expected a mapping"),
])
def test_load_any_spec_undecidable_content(tmp_path, text, reason):
    path = tmp_path / "what.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=reason) as info:
        load_any_spec(str(path))
    _one_line(info, path)


def test_load_any_spec_unknown_name_suggests_from_both_kinds():
    with pytest.raises(SpecError, match="h100|llama-3.1-8b") as info:
        load_any_spec("llama-3.1-8")
    assert "\n" not in str(info.value)


# --- a rewritten file is read again (the cache is keyed by path and modification) ------------------------------


def test_rewritten_file_is_not_served_stale(tmp_path):
    text = (ROOT / "hardware" / "l4.yaml").read_text()
    path = tmp_path / "l4-copy.yaml"
    path.write_text(text)
    first = load_hardware(str(path))
    path.write_text(text.replace("memory_bandwidth_bytes_per_s: 300.0e9", "memory_bandwidth_bytes_per_s: 250.0e9"))
    assert load_hardware(str(path)).memory_bandwidth_bytes_per_s == 250e9 != first.memory_bandwidth_bytes_per_s


def test_a_model_file_given_as_hardware_says_so(tmp_path):
    """--hw models/llama-3.1-8b.yaml reported the hardware schema's first complaint ('architecture': unknown key)."""
    path = tmp_path / "llama.yaml"
    path.write_text((ROOT / "models" / "llama-3.1-8b.yaml").read_text())
    with pytest.raises(SpecError) as info:
        load_hardware(str(path))
    assert _one_line(info, path) == f"{path}: a model spec, not a hardware spec"
    hw = tmp_path / "l4.yaml"
    hw.write_text((ROOT / "hardware" / "l4.yaml").read_text())
    with pytest.raises(SpecError) as info:
        load_model(str(hw))
    assert _one_line(info, hw) == f"{hw}: a hardware spec, not a model spec"
