"""The randomised, seeded family of hold-out decoders `rooflinesim validate` measures next to its named hold-out
models (no torch).

Six archetypes, one model each, their dimensions drawn from a seeded RNG inside each archetype's range, so that the
family spans what a calibration must generalise to: wide and shallow, narrow and deep, GQA ratios 1 to 8,
vocabularies 32k to 150k, 2 to 24 layers, head dims 64 to 128. A draw that shares a weight shape with anything
calibrate times is redrawn (`plan.check_hold_out` then confirms), so no family member was calibrated.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from ...specs.model import ModelSpec
from .plan import check_hold_out, get_calibrated_shapes, get_linear_weight_shapes, synthetic_spec


class Archetype(NamedTuple):
    name: str
    head_dim: tuple[int, ...]
    heads: tuple[int, ...]
    gqa_ratio: tuple[int, ...]  # heads / kv heads
    layers: tuple[int, int]  # inclusive range
    vocab: tuple[int, int]  # inclusive range
    mlp_ratio: tuple[float, float]  # intermediate / hidden


ARCHETYPES = (
    Archetype("wide-shallow", (64,), (28, 30, 34, 36), (1,), (2, 2), (32000, 50000), (2.5, 3.0)),
    Archetype("narrow-deep", (64,), (6, 8), (2, 3, 4, 6, 8), (16, 24), (32000, 40000), (2.5, 3.5)),
    Archetype("gqa8-big-vocab", (64,), (16,), (8,), (4, 8), (100000, 152000), (2.5, 3.0)),
    Archetype("gqa4-hd128", (128,), (8, 12, 20), (4,), (3, 6), (50000, 128000), (2.5, 3.0)),
    Archetype("gqa2", (64,), (10, 14), (2,), (6, 12), (32000, 64000), (2.5, 3.5)),
    Archetype("gqa3-hd96", (96,), (12,), (3, 6), (8, 12), (32000, 64000), (2.5, 3.0)),
)


def _draw(rng: random.Random, arch: Archetype, index: int) -> ModelSpec:
    head_dim = rng.choice(arch.head_dim)
    heads = rng.choice(arch.heads)
    ratio = rng.choice([r for r in arch.gqa_ratio if heads % r == 0] or [1])
    hidden = heads * head_dim
    intermediate = int(round(hidden * rng.uniform(*arch.mlp_ratio) / 64)) * 64
    layers = rng.randint(*arch.layers)
    vocab = rng.randint(*arch.vocab) // 64 * 64
    return synthetic_spec(f"holdout-{index}-{arch.name}", hidden, heads, heads // ratio, intermediate, layers=layers,
                          vocab=vocab, head_dim=head_dim)


def make_hold_out_family(seed: int = 0, count: int = len(ARCHETYPES)) -> tuple[ModelSpec, ...]:
    """`count` hold-out decoders (the archetypes in order, cycling), none sharing a weight shape with calibrate."""
    rng = random.Random(seed)
    calibrated = get_calibrated_shapes()
    family = []
    for i in range(count):
        arch = ARCHETYPES[i % len(ARCHETYPES)]
        for _ in range(100):
            spec = _draw(rng, arch, i)
            if not get_linear_weight_shapes(spec) & calibrated:
                break
        else:  # pragma: no cover - the ranges leave plenty of uncalibrated shapes
            raise AssertionError(f"no uncalibrated draw for {arch.name}")
        family.append(spec)
    check_hold_out(models=family)
    return tuple(family)


def describe(spec: ModelSpec) -> str:
    return (f"{spec.name}: hidden {spec.hidden_size}, {spec.num_layers} layers, {spec.num_attention_heads} heads / "
            f"{spec.num_kv_heads} KV (GQA {spec.num_attention_heads // spec.num_kv_heads}), head dim "
            f"{spec.head_dim_resolved}, MLP {spec.intermediate_size}, vocab {spec.vocab_size}")
