"""Two small Llama-style models trained on the spot (seconds on a CPU) and saved as Hugging Face-layout checkpoints,
so that a draft agrees with its target partially and reproducibly: the tests of `acceptance measure` and the
end-to-end check of `acceptance validate` use them.

The corpus is a noisy bigram rule over a 32-token vocabulary: next = 5 x previous + 3 (mod 32) with probability 0.85,
else uniform. The draft is trained on the same corpus except that after a token divisible by 3 its rule adds 1, so
its greedy choice agrees with the target's on about two tokens in three, and its sampled distribution overlaps the
target's partially."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ...specs.registry import load_model
from .hf_checkpoint import save_hf_checkpoint
from .model import Decoder

VOCAB = 32


def corpus(n: int, length: int, seed: int, shifted: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    seqs = torch.zeros(n, length, dtype=torch.long)
    seqs[:, 0] = torch.randint(0, VOCAB, (n,), generator=g)
    for t in range(1, length):
        rule = (5 * seqs[:, t - 1] + 3) % VOCAB
        if shifted:
            rule = torch.where(seqs[:, t - 1] % 3 == 0, (rule + 1) % VOCAB, rule)
        noise = torch.randint(0, VOCAB, (n,), generator=g)
        seqs[:, t] = torch.where(torch.rand(n, generator=g) < 0.85, rule, noise)
    return seqs


def hf_config(model_type: str = "llama", hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2,
              **extra) -> dict:
    """A config.json for the corpus's vocabulary (extra keys override or add fields)."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": model_type, "hidden_size": hidden,
              "intermediate_size": 2 * hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "vocab_size": VOCAB, "max_position_embeddings": 512,
              "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "rope_theta": 10000.0}
    config.update(extra)
    return config


def train_checkpoint(folder: Path, config: dict, steps: int, seed: int, shifted: bool = False):
    """Train a `model.Decoder` of `config` on the corpus and save it in HF layout; returns the trained model."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    spec = load_model(str(folder / "config.json"))
    torch.manual_seed(seed)
    model = Decoder(spec)
    for p in model.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, 0.0, 0.05)
    for layer in model.layers:
        layer.eps = config["rms_norm_eps"]
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = corpus(256, 33, seed, shifted)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = data[torch.randint(0, len(data), (32,), generator=g)]
        model.setup_caches(32, 32)  # fresh caches: no autograd history across steps
        logits = model(batch[:, :-1], torch.zeros(32, dtype=torch.long), 32)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.cos = model.sin = None
    save_hf_checkpoint(model, folder, config)
    return model.eval().requires_grad_(False)


def write_prompts(path: Path, n: int = 8, length: int = 6, seed: int = 9) -> Path:
    path.write_text("\n".join(" ".join(str(t) for t in row.tolist()) for row in corpus(n, length, seed)) + "\n")
    return path


def trained_pair(root: Path, target_config: dict | None = None, draft_config: dict | None = None):
    """(target folder, draft folder, prompts file) under `root`; by default a 2-layer target of width 32 and a
    1-layer draft of width 16."""
    target = root / "target"
    draft = root / "draft"
    train_checkpoint(target, target_config or hf_config(), steps=80, seed=0)
    train_checkpoint(draft, draft_config or hf_config(hidden=16, layers=1, heads=2, kv_heads=1), steps=40, seed=1,
                     shifted=True)
    return target, draft, write_prompts(root / "prompts.txt")
