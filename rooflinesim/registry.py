"""Name, alias or path -> validated spec.

Shipped YAML files live in the wheel as `rooflinesim.data/{hardware,models}`; in a source checkout the same folders sit
at the repository root. Paths to YAML files (and Hugging Face `config.json` files for models) are accepted anywhere a
name is.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterable, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .specs import HardwareSpec, ModelSpec


# libyaml's C loader parses the shipped specs ~10x faster than the pure-Python one (predict reads every file's name).
class _SpecLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """Safe YAML loading that also reads `3.35e12` and `1e9` as numbers.

    PyYAML follows YAML 1.1, whose floats need a dot and a signed exponent (`3.35e+12`): it reads `3.35e12` as a
    string. Specs are validated strictly (a string is never taken for a number), so exponent forms are resolved as
    floats here, as YAML 1.2 and JSON do. Plain integers keep resolving as integers (the int resolver comes first).
    """


_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_yaml(text: str):
    """Parse spec YAML (safe; exponent floats such as `3.35e12` are numbers)."""
    return yaml.load(text, Loader=_SpecLoader)


_yaml_load = load_yaml


class SpecError(ValueError):
    """A spec that cannot be found, parsed or validated. The message is meant for the user as is."""


SpecT = TypeVar("SpecT", bound=BaseModel)

#: Hugging Face `model_type` values whose config maps onto ModelSpec without loss.
SUPPORTED_HF_ARCHITECTURES = ("llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "deepseek_v2", "deepseek_v3")


def _data_dirs(kind: str) -> list[Path]:
    dirs = []
    try:
        packaged = resources.files("rooflinesim.data") / kind
        if packaged.is_dir():
            dirs.append(Path(str(packaged)))
    except (ModuleNotFoundError, TypeError):
        pass
    checkout = Path(__file__).resolve().parent.parent / kind
    if checkout.is_dir() and checkout not in dirs:
        dirs.append(checkout)
    return dirs


def _format_validation_error(path: Path, error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    reason = first["msg"]
    if first["type"] == "extra_forbidden":
        reason = "unknown key"
    more = f" (and {error.error_count() - 1} more problems)" if error.error_count() > 1 else ""
    return f"{path}: field '{field}': {reason}{more}"


def load_spec_file(path: str | Path, spec_type: type[SpecT]) -> SpecT:
    """Read and validate one YAML spec; any problem becomes a SpecError naming file, field and reason."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = _yaml_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{path}:{where}: malformed YAML: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of fields at the top level, got {type(data).__name__}")
    try:
        return spec_type.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(path, exc)) from exc


@lru_cache(maxsize=None)
def _index(kind: str) -> dict[str, Path]:
    """Lower-case name/alias/file stem -> file, over the shipped files of one kind."""
    index: dict[str, Path] = {}
    for folder in _data_dirs(kind):
        for path in sorted(folder.glob("*.yaml")):
            try:
                head = _yaml_load(path.read_text()) or {}
            except yaml.YAMLError:
                head = {}
            keys = [path.stem, str(head.get("name", ""))] + [str(a) for a in head.get("aliases", []) or []]
            for key in keys:
                if key:
                    index.setdefault(key.lower(), path)
    return index


def _looks_like_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml", ".json")) or "/" in name or "\\" in name


def _suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name.lower(), list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _resolve(name: str, kind: str) -> Path:
    if _looks_like_path(name):
        path = Path(name).expanduser()
        if not path.is_file():
            raise SpecError(f"{kind} file not found: {path}")
        return path
    index = _index(kind)
    key = name.strip().lower()
    if key in index:
        return index[key]
    listing = f" (run 'rooflinesim list {kind}')"
    raise SpecError(f"unknown {kind.rstrip('s')} {name!r}{_suggest(key, index)}{listing}")


def load_hardware(name: str | HardwareSpec) -> HardwareSpec:
    """A HardwareSpec from a short name (`a100`), full name, or path to a YAML file (datasheet or measured profile)."""
    if isinstance(name, HardwareSpec):
        return name
    return _load_cached(str(_resolve(str(name), "hardware")), "hardware")


def load_model(name: str | ModelSpec) -> ModelSpec:
    """A ModelSpec from a short name (`llama-3.1-8b`), a YAML file, or a Hugging Face `config.json`."""
    if isinstance(name, ModelSpec):
        return name
    path = _resolve(str(name), "models")
    if path.suffix == ".json":
        return model_from_hf_config(path)
    return _load_cached(str(path), "models")


@lru_cache(maxsize=None)
def _load_cached(path: str, kind: str):
    spec_type = HardwareSpec if kind == "hardware" else ModelSpec
    return load_spec_file(path, spec_type)


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face `config.json` (offline): Llama, Mistral, Qwen2, and the MoE / MLA families Mixtral,
    Qwen2-MoE and DeepSeek-V2/V3."""
    path = Path(path)
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{path}: not a readable JSON config: {exc}") from exc
    model_type = str(config.get("model_type", "")).lower()
    if model_type not in SUPPORTED_HF_ARCHITECTURES:
        archs = config.get("architectures") or [model_type or "unknown"]
        raise SpecError(
            f"{path}: unsupported architecture {model_type or archs[0]!r}; "
            f"supported model_type values: {', '.join(SUPPORTED_HF_ARCHITECTURES)}"
        )
    try:
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        data = {
            "schema_version": 1,
            "name": config.get("_name_or_path") or path.parent.name or path.stem,
            "architecture": model_type,
            "num_layers": int(config["num_hidden_layers"]),
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "num_kv_heads": int(config.get("num_key_value_heads") or heads),
            "head_dim": int(config.get("head_dim") or hidden // heads),
            "intermediate_size": int(config["intermediate_size"]),
            "gated_mlp": True,
            "vocab_size": int(config["vocab_size"]),
            "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
            "max_context_tokens": int(config.get("max_position_embeddings", 4096)),
            "norm": "rmsnorm",
            "attention_bias": bool(config.get("attention_bias", model_type == "qwen2")),
            "sliding_window_tokens": _sliding_window(config),
            "sources": {"shapes": f"Hugging Face config.json at {path}"},
            **_moe_and_mla_fields(config, model_type),
        }
        if model_type.startswith("deepseek"):
            data["attention_bias"] = bool(config.get("attention_bias", False))
            data.pop("head_dim")
    except KeyError as exc:
        raise SpecError(f"{path}: field '{exc.args[0]}' is missing from the config") from exc
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{path}: a shape field is not a number: {exc}") from exc
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(path, exc)) from exc


def _moe_and_mla_fields(config: dict, model_type: str) -> dict:
    fields: dict = {}
    if model_type == "mixtral":
        fields.update(num_experts=int(config["num_local_experts"]),
                      num_experts_per_token=int(config["num_experts_per_tok"]),
                      moe_intermediate_size=int(config["intermediate_size"]))
    elif model_type == "qwen2_moe":
        fields.update(num_experts=int(config["num_experts"]), num_experts_per_token=int(config["num_experts_per_tok"]),
                      moe_intermediate_size=int(config["moe_intermediate_size"]))
        if config.get("shared_expert_intermediate_size"):
            fields.update(num_shared_experts=1,
                          shared_expert_intermediate_size=int(config["shared_expert_intermediate_size"]))
    elif model_type.startswith("deepseek"):
        if config.get("n_routed_experts"):
            fields.update(num_experts=int(config["n_routed_experts"]),
                          num_experts_per_token=int(config["num_experts_per_tok"]),
                          moe_intermediate_size=int(config["moe_intermediate_size"]),
                          num_shared_experts=int(config.get("n_shared_experts") or 0),
                          first_dense_layers=int(config.get("first_k_dense_replace") or 0))
        fields.update(kv_lora_rank=int(config["kv_lora_rank"]),
                      q_lora_rank=int(config["q_lora_rank"]) if config.get("q_lora_rank") else None,
                      qk_nope_head_dim=int(config["qk_nope_head_dim"]),
                      qk_rope_head_dim=int(config["qk_rope_head_dim"]), v_head_dim=int(config["v_head_dim"]))
    return fields


def _sliding_window(config: dict) -> int | None:
    window = config.get("sliding_window")
    if not window:
        return None
    if config.get("model_type") in ("qwen2", "qwen2_moe") and not config.get("use_sliding_window", False):
        return None
    return int(window)


def list_hardware() -> list[HardwareSpec]:
    return _list("hardware")


def list_models() -> list[ModelSpec]:
    return _list("models")


def _list(kind: str) -> list:
    paths = sorted(set(_index(kind).values()))
    return [(load_hardware if kind == "hardware" else load_model)(str(p)) for p in paths]


def get_short_name(spec: HardwareSpec | ModelSpec) -> str:
    return spec.aliases[0] if spec.aliases else spec.name
