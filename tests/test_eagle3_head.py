"""EAGLE-3 heads priced from their own config.json: the draft vocabulary, the feature-fusion fc (3h -> h, on the
step that starts from the target's features), the head's own number of layers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rooflinesim.errors import InputError
from rooflinesim.ops.draft_heads import get_head_ops, get_head_weight_bytes
from rooflinesim.pricing.speculative import price_speculation
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.scenario.drafting import read_head_config

from pathlib import Path

CONFIG = Path(__file__).parent / "data" / "eagle3-llama3.1-8b-config.json"  # the shape of yuhuili's head's config


def _scenario(**options):
    return build_scenario("h100", "llama-3.1-8b", 1, 2048, alpha=0.7, **options)


def _op(ops, name):
    (op,) = [o for o in ops if o.name == name]
    return op


def test_eagle3_config_prices_the_draft_vocabulary():
    scenario = _scenario(drafter="eagle", draft=str(CONFIG))
    assert scenario.drafter.kind == "eagle3" and scenario.drafter.head_config.draft_vocab_size == 32000
    assert any("priced as --drafter eagle3" in w for w in scenario.warnings)
    _, rest = get_head_ops("eagle3", scenario.model, scenario.workload, 1, 2048, scenario.drafter.head_config)
    lm_head = _op(rest, "lm_head")
    # 4096 x 32000 bf16 weights, 2 x 4096 x 32000 FLOPs for one token: not the target's 128,256 rows
    assert float(lm_head.weight_bytes) == 4096 * 32000 * 2
    assert float(lm_head.flops) == 2 * 4096 * 32000
    fc = _op(rest, "eagle3_fc")
    assert float(fc.weight_bytes) == 3 * 4096 * 4096 * 2


def test_eagle3_draft_step_is_cheaper_than_eagle1_with_the_full_vocabulary():
    eagle3 = price_speculation(_scenario(drafter="eagle3"), 1, 2048, 3)
    eagle = price_speculation(_scenario(drafter="eagle"), 1, 2048, 3)
    assert float(eagle3.draft_warm_step_time_s) < float(eagle.draft_warm_step_time_s)
    # the fusion runs once per speculative step: the first (cold) draft step carries it
    assert float(eagle3.draft_cold_step_time_s) > float(eagle3.draft_warm_step_time_s)


def test_fusion_only_on_the_first_step_and_layers_from_the_config(tmp_path):
    config = json.loads(CONFIG.read_text())
    config["num_hidden_layers"] = 2
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    head = read_head_config(path)
    scenario = _scenario(drafter="eagle3", draft=str(path))
    layer, rest = get_head_ops("eagle3", scenario.model, scenario.workload, 1, 2048, head, first_step=False)
    assert "eagle3_fc" not in {o.name for o in rest}
    assert _op(layer, "q_proj").count == 2
    one = get_head_weight_bytes("eagle3", scenario.model, scenario.workload, head=read_head_config(CONFIG))
    two = get_head_weight_bytes("eagle3", scenario.model, scenario.workload, head=head)
    assert two > one
    # memory: the head's own weights (layers, fc, its lm_head) on top of the target's
    base = build_scenario("h100", "llama-3.1-8b", 1, 2048, speculative=False).get_memory_fit(1, 2048, 0)
    assert scenario.get_memory_fit(1, 2048, 0).weight_bytes == pytest.approx(base.weight_bytes + two)


def test_head_config_errors(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"draft_vocab_size": -1}))
    with pytest.raises(InputError, match="draft_vocab_size must be a positive integer"):
        _scenario(drafter="eagle3", draft=str(bad))
    with pytest.raises(InputError, match="config.json"):
        _scenario(drafter="eagle3", draft="llama-3.2-1b")
