"""Hugging Face-layout checkpoints on local disk <-> the plain-torch decoder of `model.py` (Llama, Mistral, Qwen2).

A checkpoint folder holds `config.json` and `model.safetensors` (or shards named by `model.safetensors.index.json`),
read with the `safetensors` library; nothing is downloaded. Weight names follow `transformers`' Llama/Mistral/Qwen2
modules (`model.layers.N.self_attn.q_proj.weight`, ...). Two conventions differ from `model.py` and are converted:

* RoPE: HF rotates dimension pairs (i, i + d/2) (`rotate_half`); `model.py` rotates adjacent pairs (2i, 2i + 1) as
  Meta's original code does. HF's own conversion script permutes the rows of q_proj and k_proj (and their biases)
  from the second order into the first; loading applies the inverse permutation, saving the forward one, so
  attention scores are unchanged.
* RoPE frequencies and norm epsilon come from the config (`rope_theta`, `rms_norm_eps`, and `rope_scaling` of type
  `llama3`, computed as transformers' `_compute_llama3_parameters` does).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from ...specs.registry import load_model
from ...errors import InputError
from ...specs.model import ModelSpec
from .model import Decoder

SUPPORTED_TYPES = ("llama", "mistral", "qwen2")


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not folder.is_dir():
        raise InputError(f"checkpoint folder not found: {folder}")
    if not path.is_file():
        raise InputError(f"{folder}: no config.json (a Hugging Face-layout checkpoint folder is needed)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a readable JSON config ({exc})") from None
    if not isinstance(config, dict) or config.get("model_type") not in SUPPORTED_TYPES:
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise InputError(f"{path}: model_type {kind!r} is not supported for measuring acceptance; use one of "
                         f"{', '.join(SUPPORTED_TYPES)}")
    return config


def _positive(config: dict, key: str, default: float, path: Path) -> float:
    value = config.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{path}: field '{key}': expected a positive number, got {value!r}")
    return float(value)


def rope_inverse_frequencies(config: dict, head_dim: int, path: Path) -> torch.Tensor:
    """inv_freq[i] = theta^(-2i/d), rescaled per `rope_scaling` (type llama3 only; others are refused)."""
    theta = _positive(config, "rope_theta", 10000.0, path)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    scaling = config.get("rope_scaling")
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    if kind != "llama3":
        raise InputError(f"{path}: rope_scaling type {kind!r} is not supported (only llama3)")
    factor = _positive(scaling, "factor", 8.0, path)
    low, high = _positive(scaling, "low_freq_factor", 1.0, path), _positive(scaling, "high_freq_factor", 4.0, path)
    old = _positive(scaling, "original_max_position_embeddings", 8192, path)
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, smoothed, scaled)


def _hf_to_interleaved(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows per head from HF's (i, i + d/2) pairing to adjacent pairs (2i, 2i + 1); works for weights and biases."""
    rest = w.shape[1:]
    return w.reshape(heads, 2, -1, *rest).transpose(1, 2).reshape(w.shape)


def _interleaved_to_hf(w: torch.Tensor, heads: int) -> torch.Tensor:
    rest = w.shape[1:]
    return w.reshape(heads, -1, 2, *rest).transpose(1, 2).reshape(w.shape)


def _name_map(spec: ModelSpec) -> dict[str, str]:
    """HF name -> model.py name, for every tensor a checkpoint of this spec holds."""
    names = {"model.embed_tokens.weight": "embed.weight", "model.norm.weight": "norm"}
    if not spec.tie_word_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    for i in range(spec.num_layers):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        names[hf + "input_layernorm.weight"] = ours + "attn_norm"
        names[hf + "post_attention_layernorm.weight"] = ours + "mlp_norm"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names[f"{hf}self_attn.{proj}.weight"] = f"{ours}attn.{proj}.weight"
        if spec.attention_bias:
            for proj in ("q_proj", "k_proj", "v_proj"):
                names[f"{hf}self_attn.{proj}.bias"] = f"{ours}attn.{proj}.bias"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names[f"{hf}mlp.{proj}.weight"] = f"{ours}mlp.{proj}.weight"
    return names


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    elif (folder / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    else:
        raise InputError(f"{folder}: no model.safetensors (nor model.safetensors.index.json); only safetensors "
                         "checkpoints are read")
    tensors = {}
    for shard in shards:
        try:
            tensors.update(load_file(str(folder / shard)))
        except Exception as exc:  # safetensors raises its own error types for a damaged file
            raise InputError(f"{folder / shard}: not a readable safetensors file ({exc})") from None
    return tensors


@torch.no_grad()
def load_hf_decoder(folder, dtype: torch.dtype = torch.float32, device=None) -> tuple[Decoder, ModelSpec, dict]:
    """The checkpoint as a `model.Decoder` in inference mode, its ModelSpec, and its config."""
    folder = Path(folder)
    config = _read_config(folder)
    spec = load_model(str(folder / "config.json"))
    if spec.moe is not None or spec.mla is not None:
        raise InputError(f"{folder}: mixture-of-experts and latent-attention models are not supported here")
    model = Decoder(spec)
    tensors = _read_tensors(folder)
    names = _name_map(spec)
    missing = sorted(set(names) - set(tensors))
    if missing:
        raise InputError(f"{folder}: checkpoint lacks {len(missing)} tensor(s) of a {config['model_type']} model, "
                         f"e.g. {missing[0]}")
    params = dict(model.named_parameters())
    d = spec.head_dim_resolved
    for hf_name, ours in names.items():
        tensor = tensors[hf_name]
        if ".q_proj." in hf_name:
            tensor = _hf_to_interleaved(tensor, spec.num_attention_heads)
        elif ".k_proj." in hf_name:
            tensor = _hf_to_interleaved(tensor, spec.num_kv_heads)
        if tuple(tensor.shape) != tuple(params[ours].shape):
            raise InputError(f"{folder}: {hf_name} has shape {tuple(tensor.shape)}, config.json implies "
                             f"{tuple(params[ours].shape)}")
        params[ours].copy_(tensor.to(torch.float32))
    eps = _positive(config, "rms_norm_eps", 1e-6, folder / "config.json")
    for layer in model.layers:
        layer.eps = eps
    model.inv_freq = rope_inverse_frequencies(config, d, folder / "config.json")
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False), spec, config


def set_rope_tables(model: Decoder, max_tokens: int) -> None:
    """cos / sin tables from the checkpoint's own frequencies (model.py's default theta otherwise)."""
    inv_freq = getattr(model, "inv_freq", None)
    if inv_freq is None:
        return
    p = model.embed.weight
    angles = torch.outer(torch.arange(max_tokens, dtype=torch.float64), inv_freq.to(torch.float64))
    model.cos, model.sin = angles.cos().to(p.dtype).to(p.device), angles.sin().to(p.dtype).to(p.device)


@torch.no_grad()
def save_hf_checkpoint(model: Decoder, folder, config: dict) -> Path:
    """Write `model` as config.json + model.safetensors in HF layout (the inverse of `load_hf_decoder`)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec = model.spec
    params = dict(model.named_parameters())
    tensors = {}
    for hf_name, ours in _name_map(spec).items():
        tensor = params[ours].detach().float().cpu()
        if ".q_proj." in hf_name:
            tensor = _interleaved_to_hf(tensor, spec.num_attention_heads)
        elif ".k_proj." in hf_name:
            tensor = _interleaved_to_hf(tensor, spec.num_kv_heads)
        tensors[hf_name] = tensor.contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


__all__ = ["load_hf_decoder", "save_hf_checkpoint", "set_rope_tables", "rope_inverse_frequencies", "SUPPORTED_TYPES"]
