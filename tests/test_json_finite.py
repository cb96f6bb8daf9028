"""No `--json` output ever holds NaN or Infinity (issue 15): Python's json module writes them as bare `NaN` /
`Infinity`, which is not JSON, and a downstream parser either fails or silently takes a wrong number.

Over random valid scenarios (shipped devices, the committed measured profile, dense / MoE / MLA models, every dtype,
tensor parallelism, batch 1..4096, context 0..1M with --allow-long-context, every drafter kind, acceptance 0..1 with
exactly 0 and 1, draft lengths) `rooflinesim predict --json` and `rooflinesim sweep --json` either print JSON whose
every number is finite, or refuse the configuration with one line and exit code 2 (a tensor-parallel degree that does
not divide the heads, a dtype a profile did not measure, ...). Never a traceback, never a bare NaN.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rooflinesim.cli import main
from rooflinesim.pricing.predict import Prediction
from rooflinesim.report import to_json
from rooflinesim.scenario.inputs import DRAFTER_KINDS

ROOT = Path(__file__).resolve().parent.parent
PROFILE = str(ROOT / "tests" / "data" / "profiles" / "cpu-intel-xeon-2c.yaml")

HARDWARE = ("a100", "h100", "h200", "b200", "l4", "l40s", "mi300x", "rtx4090", "tpu-v5e", "cpu", PROFILE)
TARGETS = ("llama-3.1-8b", "llama-3.1-70b", "llama-2-7b", "mistral-7b", "qwen2.5-7b", "llama-3.2-1b",
           "mixtral-8x7b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "deepseek-v3", "tiny-llama-123m")
DRAFTS = ("llama-3.2-1b", "qwen2.5-0.5b", "tiny-draft-2l", "llama-3.2-3b")
DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
ALPHAS = st.sampled_from([0.0, 1.0]) | st.floats(0.0, 1.0)


def _refuse_constant(name: str):
    raise AssertionError(f"the JSON output holds {name}")


def _parse_strict(text: str):
    """json.loads that fails on NaN, Infinity and -Infinity (json.dumps writes them; they are not JSON)."""
    return json.loads(text, parse_constant=_refuse_constant)


def _numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _check(argv: list[str]) -> dict | None:
    """Finite JSON on stdout, or a one-line refusal with exit 2; the parsed JSON (None when refused)."""
    code, out, err = _run(argv)
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        return None
    assert code == 0, (argv, code, err)
    data = _parse_strict(out)
    assert all(math.isfinite(x) for x in _numbers(data)), argv
    return data


@st.composite
def deployments(draw) -> list[str]:
    """The options predict and sweep share: device, model, dtypes, tensor parallelism, drafter."""
    hw, model = draw(st.sampled_from(HARDWARE)), draw(st.sampled_from(TARGETS))
    argv = ["--hw", hw, "--model", model, "--weight-dtype", draw(st.sampled_from(DTYPES)), "--allow-long-context"]
    if draw(st.booleans()):
        argv += ["--kv-dtype", draw(st.sampled_from(DTYPES))]
    if hw not in ("cpu", PROFILE):  # a CPU has no interconnect to shard over
        argv += ["--tp", str(draw(st.sampled_from([1, 1, 2, 4, 8])))]
    if hw == "cpu" and draw(st.booleans()):  # the spec with the measured profile applied
        argv += ["--calibration", PROFILE]
    drafter = draw(st.sampled_from(["model", *DRAFTER_KINDS]))  # every kind the scenario knows, a model twice
    argv += ["--drafter", drafter]
    if drafter == "model":
        argv += ["--draft", draw(st.sampled_from(DRAFTS))]
    elif drafter == "head":
        argv += ["--head-layer-fraction", repr(draw(st.floats(0.01, 4.0)))]
    if draw(st.booleans()):
        argv.append("--extra-draft-pass")
    return argv


@settings(max_examples=int(os.environ.get("JSON_EXAMPLES", 60)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployment=deployments(), batch=st.integers(1, 4096), ctx=st.integers(0, 1 << 20), alpha=ALPHAS,
       k=st.none() | st.integers(0, 16), per_position=st.none() | st.lists(ALPHAS, min_size=1, max_size=8))
@example(deployment=["--hw", PROFILE, "--model", "deepseek-v2-lite", "--drafter", "ngram", "--allow-long-context"],
         batch=64, ctx=32768, alpha=1.0, k=1, per_position=None)
@example(deployment=["--hw", "h100", "--model", "llama-3.1-8b", "--drafter", "ngram"], batch=1, ctx=0, alpha=0.0,
         k=0, per_position=None)
@example(deployment=["--hw", PROFILE, "--model", "tiny-draft-2l", "--weight-dtype", "fp32", "--drafter", "ngram"],
         batch=4096, ctx=0, alpha=1.0, k=16, per_position=None)
def test_predict_json_is_finite(deployment, batch, ctx, alpha, k, per_position):
    argv = ["predict", "--json", *deployment, "--batch", str(batch), "--ctx", str(ctx)]
    if per_position is not None:
        argv += ["--alpha-per-position", ",".join(repr(a) for a in per_position)]
        k = None if k is None else min(k, len(per_position))
    else:
        argv += ["--alpha", repr(alpha)]
    if k is not None:
        argv += ["--k", str(k)]
    data = _check(argv)
    if data is not None:
        assert data["decode"]["step_time_s"] > 0 and data["speculative"]["speedup"] > 0


@settings(max_examples=int(os.environ.get("JSON_EXAMPLES", 30)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployment=deployments(),
       batch=st.lists(st.integers(1, 4096), min_size=1, max_size=3, unique=True),
       ctx=st.lists(st.integers(0, 1 << 20), min_size=1, max_size=3, unique=True),
       alpha=st.lists(ALPHAS, min_size=1, max_size=3), k=st.integers(0, 16))
@example(deployment=["--hw", "cpu", "--model", "llama-3.1-70b", "--allow-long-context"], batch=[1, 4096],
         ctx=[0, 1 << 20], alpha=[0.0, 1.0], k=8)  # nothing fits: break-even and schedules have no speculative k
def test_sweep_json_is_finite(deployment, batch, ctx, alpha, k):
    argv = ["sweep", "--json", *deployment, "--batch", ",".join(map(str, batch)),
            "--ctx", ",".join(map(str, ctx)), "--alpha", ",".join(repr(a) for a in alpha), "--k", f"0..{k}"]
    data = _check(argv)
    if data is not None:
        assert len(data["break_even"]) == len(set(ctx)) * len(set(alpha))


def test_predict_json_writer_refuses_a_nan_rather_than_writing_invalid_json():
    """The writer's own guard: a NaN that reached a Prediction is an error, not `NaN` in the output."""
    from rooflinesim import predict

    prediction = predict(batch=1, ctx=1024, speculative=False)
    broken = Prediction(**{**prediction.__dict__, "memory": {**prediction.memory, "total_bytes": float("nan")}})
    with pytest.raises(ValueError, match="JSON"):
        to_json(broken)


def test_max_batch_of_an_absurd_capacity_does_not_wrap_around(tmp_path):
    """memory_capacity_bytes: 1.0e300 once gave max_batch -9223372036854775808 (an int64 cast of 1e290)."""
    text = (ROOT / "hardware" / "h100-sxm-80gb.yaml").read_text()
    path = tmp_path / "huge-memory.yaml"
    path.write_text(re.sub(r"^memory_capacity_bytes:.*$", "memory_capacity_bytes: 1.0e300", text, flags=re.M))
    data = _check(["predict", "--json", "--hw", str(path)])
    assert data["memory"]["max_batch"] == 1 << 53 and data["memory"]["fits_in_memory"]


@pytest.mark.parametrize("name", [*HARDWARE, *TARGETS, *DRAFTS, str(ROOT / "tests" / "data" / "mixtral-config.json")])
def test_show_json_is_finite(name):
    data = _check(["show", "--json", name])
    assert data is not None and data["derived"]
