"""ModelSpec schema version 2: MoE and MLA fields as nested `moe` / `mla` blocks; version-1 files (flat keys) load
to the same spec."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rooflinesim.specs.registry import SpecError, load_model, load_yaml
from rooflinesim.specs.model import MLASpec, ModelSpec, MoESpec

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
MOE_OR_MLA = ("mixtral-8x7b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "deepseek-v3")


def test_version_1_file_loads_to_the_shipped_version_2_spec():
    old = load_model(str(DATA / "deepseek-v3-schema-v1.yaml"))
    new = load_model("deepseek-v3")
    assert load_yaml((DATA / "deepseek-v3-schema-v1.yaml").read_text())["schema_version"] == 1
    assert old == new
    assert old.schema_version == 2
    assert (old.params, old.active_params, old.get_kv_bytes_per_token("bf16")) == (
        new.params, new.active_params, new.get_kv_bytes_per_token("bf16"))


@pytest.mark.parametrize("name", MOE_OR_MLA)
def test_shipped_moe_and_mla_files_are_version_2_with_nested_blocks(name):
    data = load_yaml((ROOT / "models" / f"{name}.yaml").read_text())
    assert data["schema_version"] == 2
    flat = set(MoESpec.model_fields) | set(MLASpec.model_fields)
    assert not flat & set(data), f"{name}: flat MoE/MLA keys at the top level"
    spec = load_model(name)
    assert spec.is_moe == ("moe" in data) and spec.is_mla == ("mla" in data)


def test_every_shipped_model_is_version_2():
    for path in sorted((ROOT / "models").glob("*.yaml")):
        assert load_yaml(path.read_text())["schema_version"] == 2, path.name


def test_derived_moe_and_mla_numbers():
    v3 = load_model("deepseek-v3")
    assert v3.moe.num_experts == 256 and v3.num_moe_layers == 58 and v3.num_dense_mlp_layers == 3
    assert v3.shared_intermediate_size == 2048
    assert v3.get_kv_elements_per_token_per_layer() == 512 + 64
    qwen = load_model("qwen1.5-moe-a2.7b")
    assert qwen.shared_intermediate_size == 5632 and not qwen.is_mla
    llama = load_model("llama-3.1-8b")
    assert not llama.is_moe and not llama.is_mla and llama.num_moe_layers == 0 and llama.shared_intermediate_size == 0


def _v3_data() -> dict:
    return load_yaml((ROOT / "models" / "deepseek-v3.yaml").read_text())


def test_version_2_rejects_flat_moe_keys():
    data = _v3_data()
    data["num_experts"] = 256
    with pytest.raises(ValidationError, match="num_experts"):
        ModelSpec.model_validate(data)


def test_version_1_rejects_a_nested_block():
    data = load_yaml((DATA / "deepseek-v3-schema-v1.yaml").read_text())
    data["moe"] = {"num_experts": 8, "num_experts_per_token": 2, "moe_intermediate_size": 128}
    with pytest.raises(ValidationError, match="schema_version: 2"):
        ModelSpec.model_validate(data)


def test_version_1_dense_file_with_default_moe_keys_is_dense():
    data = load_yaml((ROOT / "models" / "llama-3.1-8b.yaml").read_text())
    data.update(schema_version=1, num_shared_experts=0, first_dense_layers=0, kv_lora_rank=None, num_experts=None)
    spec = ModelSpec.model_validate(data)
    assert spec.moe is None and spec.mla is None and spec == load_model("llama-3.1-8b")


@pytest.mark.parametrize("block, field, value, reason", [
    ("moe", "num_experts_per_token", 300, "exceeds num_experts"),
    ("moe", "num_experts", 0, "greater than 0"),
    ("moe", "first_dense_layers", 62, "exceeds num_layers"),
    ("moe", "shared_expert_intermediate_size", 4096.5, "integer"),
    ("mla", "kv_lora_rank", True, "integer"),
    ("mla", "v_head_dim", -1, "greater than 0"),
])
def test_nested_blocks_are_validated_at_their_field(tmp_path, block, field, value, reason):
    data = _v3_data()
    data[block][field] = value
    with pytest.raises(ValidationError) as info:
        ModelSpec.model_validate(data)
    first = info.value.errors()[0]
    assert first["loc"] == (block, field) and reason in first["msg"]
    path = tmp_path / "bad-model.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=rf"bad-model\.yaml: field '{block}\.{field}': "):
        load_model(str(path))


def test_shared_size_without_shared_experts_is_refused():
    data = _v3_data()
    data["moe"].update(num_shared_experts=0, shared_expert_intermediate_size=2048)
    with pytest.raises(ValidationError, match="num_shared_experts"):
        ModelSpec.model_validate(data)
