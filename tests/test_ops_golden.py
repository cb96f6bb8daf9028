"""The full op list of `get_step_ops` for a set of models and deployments, against numbers recorded from the
implementation before its refactor into named sections (tests/data/ops-golden.json).

The fixture pins every op's name, kind, count, FLOPs, byte fields, collective message size and dims on a small
broadcast grid (batch x context x new tokens), so a restructuring of ops.py that changes any number fails here.
Regenerate only for an intended change of the cost model: `PYTHONPATH=. python3 tests/test_ops_golden.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rooflinesim import load_model
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.specs.workload import Workload
from rooflinesim.specs.model import ModelSpec

FIXTURE = Path(__file__).resolve().parent / "data" / "ops-golden.json"
FIELDS = ("flops", "weight_bytes", "act_read_bytes", "act_write_bytes", "kv_read_bytes", "kv_write_bytes", "comm_bytes")

# batch x context x new tokens: decode and verify, short and long (past Mistral's 4096 window) context
BATCH = np.array([1, 16]).reshape(2, 1, 1)
CONTEXT = np.array([100, 70000]).reshape(1, 2, 1)
NEW_TOKENS = np.array([1, 5]).reshape(1, 1, 2)


def _layernorm_plain_mlp() -> ModelSpec:
    """A LayerNorm model with a non-gated (GELU) MLP: no shipped model has either."""
    data = load_model("llama-3.2-1b").model_dump()
    data.update(name="layernorm-gelu", norm="layernorm", gated_mlp=False, aliases=())
    return ModelSpec.model_validate(data)


#: (case id, model, keyword arguments of get_step_ops)
CASES = [
    ("llama8b-bf16", "llama-3.1-8b", {}),
    ("llama8b-tp2", "llama-3.1-8b", {"tensor_parallel": 2}),
    ("llama8b-tp8", "llama-3.1-8b", {"tensor_parallel": 8}),
    ("llama8b-unfused", "llama-3.1-8b", {"attention": "unfused"}),
    ("llama8b-int4-fp8kv", "llama-3.1-8b", {"weight_dtype": "int4", "kv_dtype": "fp8"}),
    ("llama8b-last-logits", "llama-3.1-8b", {"logits_for_all_tokens": False}),
    ("qwen7b-bias", "qwen2.5-7b", {}),
    ("qwen7b-bias-tp8", "qwen2.5-7b", {"tensor_parallel": 8, "activation_dtype": "fp16"}),
    ("mistral-window", "mistral-7b", {}),
    ("mistral-window-unfused-tp2", "mistral-7b", {"attention": "unfused", "tensor_parallel": 2}),
    ("mixtral", "mixtral-8x7b", {}),
    ("mixtral-tp8", "mixtral-8x7b", {"tensor_parallel": 8}),
    ("mixtral-int4", "mixtral-8x7b", {"weight_dtype": "int4"}),
    ("deepseek-v3", "deepseek-v3", {}),
    ("deepseek-v3-tp8-int8-g64", "deepseek-v3", {"tensor_parallel": 8, "weight_dtype": "int8", "quant_group_size": 64}),
    ("deepseek-v2-lite-unfused-tp2", "deepseek-v2-lite", {"attention": "unfused", "tensor_parallel": 2}),
    ("qwen-moe-shared", "qwen1.5-moe-a2.7b", {"tensor_parallel": 2}),
    ("layernorm-gelu", None, {}),
    ("layernorm-gelu-unfused-tp2-fp32", None, {"attention": "unfused", "tensor_parallel": 2, "weight_dtype": "fp32",
                                              "kv_dtype": "fp32", "activation_dtype": "fp32"}),
]


def _encode(value):
    """Arrays that are constant over the grid are stored as one number; others as nested lists."""
    array = np.asarray(value, dtype=float)
    if array.size and np.all(array == array.flat[0]):
        return float(array.flat[0])
    return array.tolist()


def compute_case(model_name: str | None, kwargs: dict) -> list[dict]:
    model = load_model(model_name) if model_name else _layernorm_plain_mlp()
    per_call = {k: kwargs.pop(k) for k in ("logits_for_all_tokens",) if k in kwargs}
    ops = get_step_ops(model, Workload(batch=1, context_tokens=0, **kwargs), NEW_TOKENS, batch=BATCH,
                       context_tokens=CONTEXT, **per_call)
    return [
        {
            "name": op.name, "kind": op.kind, "count": op.count,
            **{f: _encode(getattr(op, f)) for f in FIELDS},
            "dims": {k: _encode(v) if not isinstance(v, str) else v for k, v in sorted(op.dims.items())},
        }
        for op in ops
    ]


def _assert_close(actual, expected, where: str):
    a = np.broadcast_to(np.asarray(actual, dtype=float), np.broadcast(np.asarray(actual), np.asarray(expected)).shape)
    np.testing.assert_allclose(a, np.asarray(expected, dtype=float), rtol=1e-12, atol=0, err_msg=where)


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("case, model_name, kwargs", CASES, ids=[c[0] for c in CASES])
def test_op_list_matches_the_recorded_one(golden, case, model_name, kwargs):
    expected = golden[case]
    actual = compute_case(model_name, kwargs)
    assert [(op["name"], op["kind"], op["count"]) for op in actual] == [
        (op["name"], op["kind"], op["count"]) for op in expected]
    for got, want in zip(actual, expected):
        for f in FIELDS:
            _assert_close(got[f], want[f], f"{case}: {want['name']}.{f}")
        assert sorted(got["dims"]) == sorted(want["dims"]), f"{case}: {want['name']} dims"
        for key, value in want["dims"].items():
            _assert_close(got["dims"][key], value, f"{case}: {want['name']}.dims[{key}]")


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps({case: compute_case(m, kw) for case, m, kw in CASES}, indent=None) + "\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
