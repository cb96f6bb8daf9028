"""A hold-out written by someone else: Hugging Face `transformers` decoders (optional extra `rooflinesim[hf]`).

The models are built from config objects in code (random weights, nothing downloaded) with shapes no calibration
times (`plan.check_hold_out` confirms it), and run as `transformers` runs them: its own modelling code (eager
module graph, SDPA attention, its RoPE and RMSNorm), its own KV cache (`DynamicCache`, which grows by concatenation,
and `DynamicSlidingWindowLayer` for Mistral's window). Four architectures:

* LlamaForCausalLM, GQA 4, untied 49k vocabulary;
* Qwen2ForCausalLM, q/k/v biases, GQA 7, a 151k vocabulary (tied, as Qwen2's small checkpoints are);
* MistralForCausalLM with a 1024-token sliding window (contexts above it attend to the window only);
* Qwen2MoeForCausalLM, 8 routed experts (top-2), a shared expert, full multi-head attention; its experts run
  transformers' default `grouped_mm` experts implementation (`implementations/hf.yaml` moe_experts).

A decode step is timed against a cache holding `context` random keys and values per layer: the cache is filled once
by `DynamicCache.update` and each layer's state is put back before every timed call (untimed), so every call appends
one token to the same cache, as generation's next step would. The ModelSpec the step is priced with is read from
the same config through `rooflinesim`'s own `config.json` reader (`specs.hf_config`), as a user's would be.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...errors import InputError
from ...specs.hf_config import model_from_hf_config
from ...specs.model import ModelSpec
from ..fitting.plan import check_hold_out
from ..measure.timers import Device, Timer, default_process_heap, get_torch_dtype

#: the transformers releases this module was written against (its extra in pyproject.toml)
TRANSFORMERS_REQUIREMENT = "transformers>=4.56"  # keep in step with pyproject.toml


#: the routed experts' implementation the MoE hold-out runs, the one `implementations/hf.yaml` prices (transformers'
#: default where torch can dispatch it)
HF_EXPERTS_IMPLEMENTATION = "grouped_mm"


@dataclass(frozen=True)
class HfHoldOut:
    """One Hugging Face architecture and its config fields (shapes chosen to differ from every calibrated shape)."""

    name: str
    model_type: str  # transformers' CONFIG_MAPPING key
    fields: dict = field(hash=False)


HF_HOLD_OUTS = (
    HfHoldOut("hf-llama-94m", "llama", dict(
        hidden_size=576, intermediate_size=1664, num_hidden_layers=10, num_attention_heads=9, num_key_value_heads=3,
        vocab_size=49152, tie_word_embeddings=False, rms_norm_eps=1e-5, rope_theta=100000.0)),
    HfHoldOut("hf-qwen2-85m", "qwen2", dict(
        hidden_size=448, intermediate_size=1216, num_hidden_layers=8, num_attention_heads=7, num_key_value_heads=1,
        vocab_size=151936, tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1000000.0)),
    HfHoldOut("hf-mistral-swa-69m", "mistral", dict(
        hidden_size=640, intermediate_size=1856, num_hidden_layers=6, num_attention_heads=10, num_key_value_heads=2,
        head_dim=64, vocab_size=32768, sliding_window=1024, tie_word_embeddings=False, rope_theta=1000000.0)),
    HfHoldOut("hf-qwen2moe-61m", "qwen2_moe", dict(
        hidden_size=448, intermediate_size=1088, moe_intermediate_size=320, shared_expert_intermediate_size=832,
        num_experts=8, num_experts_per_tok=2, num_hidden_layers=6, num_attention_heads=7, num_key_value_heads=7,
        vocab_size=32000, tie_word_embeddings=False, decoder_sparse_step=1, mlp_only_layers=[],
        norm_topk_prob=False)),
)


def transformers_available() -> bool:
    return importlib.util.find_spec("transformers") is not None


def require_transformers() -> None:
    if not transformers_available():
        raise InputError("the Hugging Face hold-out needs transformers: pip install 'rooflinesim[hf]'")


def get_hf_hold_out(name: str) -> HfHoldOut:
    for entry in HF_HOLD_OUTS:
        if entry.name == name:
            return entry
    raise InputError(f"no Hugging Face hold-out named {name!r}; known: {', '.join(e.name for e in HF_HOLD_OUTS)}")


def make_config(entry: HfHoldOut, max_positions: int = 8192):
    """The transformers config object of `entry` (SDPA attention, the one transformers picks by default on CPU)."""
    require_transformers()
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[entry.model_type](max_position_embeddings=max_positions, **entry.fields)
    config._attn_implementation = "sdpa"
    if getattr(config, "num_experts", None):
        # asked for, not left to transformers' default: where grouped_mm cannot dispatch it would fall back to the
        # eager per-expert loop without a word, which `implementations/hf.yaml` does not price (moe_experts)
        config._experts_implementation = HF_EXPERTS_IMPLEMENTATION
    config._name_or_path = entry.name
    return config


def spec_from_config(config) -> ModelSpec:
    """The ModelSpec rooflinesim reads from this config's config.json (written to a temporary folder and read back by
    `specs.hf_config`, the path a user's own config.json takes)."""
    data = config.to_dict()
    data["_name_or_path"] = getattr(config, "_name_or_path", "") or data.get("model_type", "hf-model")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(data, default=str))
        return model_from_hf_config(path)


def get_hf_specs(entries=HF_HOLD_OUTS) -> tuple[ModelSpec, ...]:
    return tuple(spec_from_config(make_config(e)) for e in entries)


def check_hf_hold_out(entries=HF_HOLD_OUTS) -> tuple[ModelSpec, ...]:
    """The entries' ModelSpecs, after confirming no calibrated linear weight shape is one of theirs."""
    specs = get_hf_specs(entries)
    check_hold_out(models=specs)
    return specs


@torch.no_grad()
def build_hf_model(config, dtype: torch.dtype, device=None, seed: int = 0):
    """transformers' own CausalLM for `config`, random-initialised by its own `_init_weights`, in inference mode."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    except (ValueError, ImportError) as e:
        experts = getattr(config, "_experts_implementation", None)
        if not experts:
            raise
        raise InputError(f"transformers cannot run the {experts!r} experts implementation of "
                         f"{getattr(config, '_name_or_path', 'this model')} with torch {torch.__version__} ({e}); "
                         "implementations/hf.yaml prices that implementation, so the hold-out does not run another") \
            from None
    return model.to(device=device).eval().requires_grad_(False)


def _cache_keyword(model) -> str:
    """transformers 5 renames the forward's `past_key_values` to `cache` (the old name is deprecated)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class HfDecodeStep:
    """One decode (or verify: `new_tokens` > 1) step of a transformers CausalLM at (batch, context) over its own
    DynamicCache, repeatable. `__call__` runs the step; between timed calls `rewind` (untimed) takes the cache back to
    `context` tokens, `reset` back to the filled state itself.

    `rewind` is what the timers call: each grown layer keeps a view of its first `context` positions, so the next
    step's `torch.cat` allocates a new tensor and frees the one it replaces, as every step of `generate` does, and
    the heap goes from step to step as it does there. `reset` puts fresh copies of the filled tensors back (exact
    values, for the tests): as in `generate` the cache alone holds them, so each layer's `torch.cat` frees the cache
    it replaces, but the copies are allocated together just before the step, a heap state `generate` never has. On
    the 2-core Intel Xeon VM (fp32, 2 threads) hf-llama-94m at batch 16 and context 4096 took 330-1290 ms per step
    after a reset (a stall every four or five calls) and 330-380 ms after a rewind, steady as in a loop of steps."""

    def __init__(self, model, batch: int, context: int, seed: int = 0, new_tokens: int = 1):
        from transformers import DynamicCache

        config = model.config
        self.model, self.batch, self.context = model, batch, context
        p = next(model.parameters())
        gen = torch.Generator().manual_seed(seed)
        self.cache = DynamicCache(config=config)
        heads = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        for layer in range(config.num_hidden_layers):
            k = torch.randn(batch, heads, context, head_dim, generator=gen).to(p.dtype).to(p.device)
            v = torch.randn(batch, heads, context, head_dim, generator=gen).to(p.dtype).to(p.device)
            self.cache.update(k, v, layer)
        self._filled = [dict(vars(layer)) for layer in self.cache.layers]
        self._lengths = [{name: value.shape[-2] for name, value in state.items() if torch.is_tensor(value)
                          and value.dim() == 4} for state in self._filled]
        # q > 1: a verify step over q drafted tokens, logits for every one of them
        q = new_tokens
        self.tokens = torch.randint(0, config.vocab_size, (batch, q), generator=gen).to(p.device)
        positions = torch.arange(context, context + q, device=p.device)
        self.kwargs = {"position_ids": positions[None, :].expand(batch, q), "cache_position": positions,
                       "use_cache": True, "logits_to_keep": q, _cache_keyword(model): self.cache}

    def reset(self) -> None:
        for layer in self.cache.layers:  # the last step's caches go first, so the copies can take their memory
            layer.__dict__.update({name: None for name, value in vars(layer).items() if torch.is_tensor(value)})
        for layer, state in zip(self.cache.layers, self._filled):
            layer.__dict__.update({name: value.clone() if torch.is_tensor(value) else value
                                   for name, value in state.items()})

    def rewind(self) -> None:
        """Back to `context` cached tokens without copying (a sliding-window layer at its window keeps its size and
        is left as it is); the layers' counters go back to the filled state's."""
        for layer, state, lengths in zip(self.cache.layers, self._filled, self._lengths):
            for name, length in lengths.items():
                value = getattr(layer, name)
                if torch.is_tensor(value) and value.shape[-2] > length:
                    setattr(layer, name, value[..., :length, :])
            layer.__dict__.update({name: value for name, value in state.items() if isinstance(value, (int, float))})

    def __call__(self):
        return self.model(input_ids=self.tokens, **self.kwargs).logits


@dataclass(frozen=True)
class HfGrid:
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    min_calls: int
    min_time_s: float

    @classmethod
    def make(cls, quick: bool, tiny: bool = False) -> "HfGrid":
        if tiny:  # tests and the CPU dry run
            return cls((1, 2), (64,), 2, 0.0)
        if quick:
            return cls((1, 16), (256, 2048), 3, 0.05)
        return cls((1, 4, 16), (256, 2048, 4096), 5, 0.15)


def measure_hf_family(hw, base, device: Device, dtype: str, grid: HfGrid, timer: Timer, entries=HF_HOLD_OUTS,
                      advance=lambda: None, config_overrides: dict | None = None) -> list[dict]:
    """Report rows (with `model` and `family: hf`) of each entry's decode steps, measured and priced; one model in
    memory at a time. `config_overrides` replaces config fields of every entry (the tests shrink the models)."""
    from ..validators.validate_family import price_row_with_impl

    require_transformers()
    tdtype, dev = get_torch_dtype(dtype), device.torch_device
    with default_process_heap():  # transformers' cache allocations cost what they cost in a user's process
        return _measure_entries(hw, base, dtype, tdtype, dev, grid, timer, entries, advance, config_overrides)


def _measure_entries(hw, base, dtype, tdtype, dev, grid, timer, entries, advance, config_overrides) -> list[dict]:
    from ..validators.validate_family import price_row_with_impl

    rows = []
    for i, entry in enumerate(entries):
        config = make_config(entry)
        for key, value in (config_overrides or {}).items():
            setattr(config, key, value)
        spec = spec_from_config(config)
        model = build_hf_model(config, tdtype, dev, seed=200 + i)
        for batch in grid.batches:
            for context in grid.contexts:
                with torch.inference_mode():
                    step = HfDecodeStep(model, batch, context, seed=i)
                    t = timer.time(step, min_calls=grid.min_calls, min_time_s=grid.min_time_s, max_calls=50,
                                   warmup_s=0.0, warmup_calls=1, before=step.rewind)
                rows.append({"kind": "decode", "model": spec.name, "family": "hf", "batch": batch,
                             "context_tokens": context, "new_tokens": 1, "measured_s": t.estimate_s,
                             "measured_spread": t.spread, "measured_median_s": t.median_s,
                             **price_row_with_impl(hw, base, spec, dtype, batch, context, "hf")})
                step = None  # the cache's memory goes before the next one is filled
                advance()
        model = None
    return rows
