"""Hugging Face `config.json` -> ModelSpec, offline: Llama, Mistral, Qwen2, and the MoE / MLA families Mixtral,
Qwen2-MoE and DeepSeek-V2/V3.

A config is untrusted input: every field read is checked here, by its config key, before anything is computed from
it (a zero head count, a fractional width, `Infinity`, a boolean or a string where a number belongs), so that a bad
config is one SpecError line naming the file and the config key rather than a ZeroDivisionError or a silently
truncated shape.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .model import MODEL_SCHEMA_VERSION, ModelSpec
from .base import SpecError, format_validation_error, read_spec_text

#: Hugging Face `model_type` values whose config maps onto ModelSpec without loss.
SUPPORTED_HF_ARCHITECTURES = ("llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "deepseek_v2", "deepseek_v3")

_REQUIRED = object()


def _kind(value: Any) -> str:
    """How a JSON value reads to a user: 'a boolean', 'a string', 'a list', 'null'."""
    if value is None:
        return "null"
    names = {bool: "a boolean", str: "a string", list: "a list", dict: "an object", float: "a number", int: "a number"}
    return names.get(type(value), type(value).__name__)


class _Config:
    """Typed, checked reads of one config's fields; every problem names the file and the config key."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    def error(self, key: str, reason: str) -> SpecError:
        return SpecError(f"{self.path}: field '{key}': {reason}")

    def int(self, key: str, default: Any = _REQUIRED, minimum: int = 1) -> Any:
        """An integer >= `minimum`; null or absent gives `default` (an error when there is none). A float is accepted
        only when it is a whole number (JSON writers may print 4096.0); 4096.7 is never truncated."""
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self.error(key, "missing from the config")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"expected an integer, got {_kind(value)} ({json.dumps(value)[:40]})")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.error(key, f"not a finite number ({value})")
            if not value.is_integer():
                raise self.error(key, f"expected a whole number, got {value}")
            value = int(value)
        if value < minimum:
            raise self.error(key, f"must be positive, got {value}" if minimum == 1 else f"must be >= {minimum}, got {value}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {_kind(value)} ({json.dumps(value)[:40]})")
        return value

    def text(self, key: str, default: str = "") -> str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {_kind(value)}")
        return value


def _read_config(path: Path) -> dict:
    text = read_spec_text(path)
    try:
        # json accepts Infinity and NaN; they are kept as floats here and refused by the field reads that meet them
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise SpecError(f"{path}: not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a JSON object of config fields at the top level, got {_kind(data)}")
    return data


#: `_name_or_path` of a config saved by `from_pretrained(<id>)`: the repository id (a local path is no id)
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face `config.json` (offline) into a ModelSpec; any problem is a one-line SpecError."""
    path = Path(path)
    config = _Config(path, _read_config(path))
    model_type = config.text("model_type").lower()
    if model_type not in SUPPORTED_HF_ARCHITECTURES:
        archs = config.data.get("architectures")
        shown = model_type or (archs[0] if isinstance(archs, list) and archs else "unknown")
        raise SpecError(f"{path}: unsupported architecture {str(shown)[:60]!r}; "
                        f"supported model_type values: {', '.join(SUPPORTED_HF_ARCHITECTURES)}")
    hidden, heads = config.int("hidden_size"), config.int("num_attention_heads")
    deepseek = model_type.startswith("deepseek")
    name = config.data.get("_name_or_path")
    data = {
        "schema_version": MODEL_SCHEMA_VERSION,
        "name": name if isinstance(name, str) and name else (path.parent.name or path.stem),
        "architecture": model_type,
        "num_layers": config.int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": config.int("num_key_value_heads", heads),
        "intermediate_size": config.int("intermediate_size"),
        "gated_mlp": True,
        "vocab_size": config.int("vocab_size"),
        "tie_word_embeddings": config.bool("tie_word_embeddings", False),
        "max_context_tokens": config.int("max_position_embeddings", 4096),
        "norm": "rmsnorm",
        "attention_bias": config.bool("attention_bias", model_type == "qwen2"),
        "sliding_window_tokens": _sliding_window(config, model_type),
        "hf_id": name if isinstance(name, str) and _HF_ID.match(name) else None,
        "sources": {"shapes": f"Hugging Face config.json at {path}"},
        **_moe_and_mla_blocks(config, model_type),
    }
    if not deepseek:  # MLA has no per-head K/V width: head_dim does not apply
        head_dim = config.int("head_dim", None)
        if head_dim is None and hidden % heads:
            # never floor: 4095 / 32 is not a head width
            raise config.error("hidden_size", f"{hidden} is not divisible by num_attention_heads ({heads}); "
                                              "the config must give head_dim")
        data["head_dim"] = head_dim if head_dim is not None else hidden // heads
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(path, exc)) from None


def _moe_and_mla_blocks(config: _Config, model_type: str) -> dict:
    blocks: dict = {}
    if model_type == "mixtral":
        blocks["moe"] = dict(num_experts=config.int("num_local_experts"),
                             num_experts_per_token=config.int("num_experts_per_tok"),
                             moe_intermediate_size=config.int("intermediate_size"))
    elif model_type == "qwen2_moe":
        blocks["moe"] = dict(num_experts=config.int("num_experts"),
                             num_experts_per_token=config.int("num_experts_per_tok"),
                             moe_intermediate_size=config.int("moe_intermediate_size"))
        shared = config.int("shared_expert_intermediate_size", None)
        if shared:
            blocks["moe"].update(num_shared_experts=1, shared_expert_intermediate_size=shared)
    elif model_type.startswith("deepseek"):
        if config.int("n_routed_experts", None):
            blocks["moe"] = dict(num_experts=config.int("n_routed_experts"),
                                 num_experts_per_token=config.int("num_experts_per_tok"),
                                 moe_intermediate_size=config.int("moe_intermediate_size"),
                                 num_shared_experts=config.int("n_shared_experts", 0, minimum=0),
                                 first_dense_layers=config.int("first_k_dense_replace", 0, minimum=0))
        blocks["mla"] = dict(kv_lora_rank=config.int("kv_lora_rank"), q_lora_rank=config.int("q_lora_rank", None),
                             qk_nope_head_dim=config.int("qk_nope_head_dim"),
                             qk_rope_head_dim=config.int("qk_rope_head_dim"), v_head_dim=config.int("v_head_dim"))
    return blocks


def _sliding_window(config: _Config, model_type: str) -> int | None:
    # transformers writes 0 for "no window" (Qwen2-MoE's config with use_sliding_window false)
    window = config.int("sliding_window", None, minimum=0)
    if not window:
        return None
    if model_type in ("qwen2", "qwen2_moe") and not config.bool("use_sliding_window", False):
        return None
    return window
