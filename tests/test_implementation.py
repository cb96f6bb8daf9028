"""Implementation profiles (`specs.implementation`, `ops.implementation_ops`): the sourced tables, the ops they add
(hand-computed bytes), the reference implementation's prices unchanged, and their measured pricing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rooflinesim.specs.workload import Workload

from rooflinesim.calibrate.fitting.plan import synthetic_spec
from rooflinesim.errors import InputError
from rooflinesim.specs.measured import FRESH_PAGE_FACTOR_PRIOR, WARM_SERVED_FACTOR
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.base import SpecError
from rooflinesim.specs.implementation import ImplementationSpec, list_implementation_names, load_implementation
from rooflinesim.specs.measured import CopyTable
from rooflinesim.specs.registry import load_model
from rooflinesim.step import get_step_cost
from rooflinesim.timing.measured import MeasuredTiming
from tests.synthetic_profiles import make_profile

ROOT = Path(__file__).resolve().parent.parent
# the test profiles and the committed ones (none has the concatenation table or dispatch_s)
PROFILES = sorted((ROOT / "tests" / "data" / "profiles").glob("*.yaml")) + sorted((ROOT / "calibrate").glob("*/*.yaml"))

# hf-llama-94m's shapes: hidden 576, 9 heads of 64, 3 KV heads, 10 layers
LLAMA = synthetic_spec("impl-llama", 576, 9, 3, 1664, layers=10, vocab=49152)


def _with_profile_fields(hw, **fields):
    prof = hw.measured.dtypes["fp32"].model_copy(update=fields)
    return hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {"fp32": prof}})})


def _ops(impl, batch=2, context=2048, new_tokens=1, model=LLAMA, dtype="fp32"):
    w = Workload.in_dtype(dtype, batch, context)
    return {op.name: op for op in get_step_ops(model, w, new_tokens, implementation=impl)}


# --- the tables ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["reference", "hf", "gptfast"])
def test_every_shipped_field_names_the_file_it_was_read_from(name):
    spec = load_implementation(name)
    assert name in list_implementation_names()
    for field, source in spec.sources().items():
        assert ".py" in source, f"{name}.{field}: the source names no file: {source!r}"


def test_tables_say_what_the_sources_say():
    hf, gptfast, reference = (load_implementation(n) for n in ("transformers", "gpt-fast", "reference"))
    assert hf.kv_cache_append.value == "concat" and "cache_utils.py" in hf.kv_cache_append.source
    assert hf.gqa_expansion.value == "repeat_kv_multi_token" and "sdpa_attention.py" in hf.gqa_expansion.source
    assert gptfast.fused_qkv.value and not hf.fused_qkv.value and not reference.fused_qkv.value
    assert reference.kv_cache_append.value == gptfast.kv_cache_append.value == "in_place"


def test_an_unknown_implementation_is_one_line_with_suggestions():
    with pytest.raises(SpecError, match="did you mean hf"):
        load_implementation("hff")
    with pytest.raises(InputError, match="unknown implementation 'hff'; did you mean hf"):
        build_scenario("a100", "llama-3.1-8b", 1, 4096, speculative=False, implementation="hff")


def test_a_field_without_source_is_refused(tmp_path):
    data = load_implementation("hf").model_dump()
    data["name"] = "mine"
    data["kv_cache_append"] = {"value": "concat"}
    path = tmp_path / "mine.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match="kv_cache_append.source"):
        load_implementation(str(path))


# --- the reference implementation prices exactly as before -----------------------------------------------------------


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen1.5-moe-a2.7b", "deepseek-v3", "mistral-7b-v0.1"])
@pytest.mark.parametrize("profile", [None, *PROFILES], ids=lambda p: "datasheet" if p is None else p.stem)
def test_reference_implementation_is_the_step_model_before_it(model, profile):
    hw = "cpu-generic" if profile is not None else "h100"
    kwargs = dict(speculative=False, allow_long_context=True, calibration=None if profile is None else str(profile))
    if profile is not None:
        kwargs.update(weight_dtype="fp32", kv_dtype="fp32", activation_dtype="fp32")
    base = build_scenario(hw, model, [1, 16], [512, 8192], **kwargs)
    named = build_scenario(hw, model, [1, 16], [512, 8192], implementation="reference", **kwargs)
    assert base.workload.implementation == named.workload.implementation == "reference"
    w = base.workload
    b, s = base.batch[:, None], base.context_tokens[None, :]
    for q in (1, 5):
        old = get_step_cost(base.hardware, base.model, w.model_copy(update={"sampling": False}), q, base.timing,
                            s, b)
        new = get_step_cost(named.hardware, named.model, named.workload.model_copy(update={"sampling": False}), q,
                            named.timing, s, b)
        assert [op.name for op in old.ops] == [op.name for op in new.ops]
        np.testing.assert_array_equal(old.step_time_s, new.step_time_s)


# --- the ops an implementation adds -----------------------------------------------------------------------------------


def test_hf_decode_step_adds_exactly_the_concatenated_cache():
    reference, hf = _ops(None), _ops("hf")
    # per layer: keys and values (2) x batch 2 x 3 KV heads x 2048 cached positions x head_dim 64 x 4 bytes, read
    # once and written once into the new allocation
    per_layer = 2 * 2 * 3 * 2048 * 64 * 4
    assert per_layer == 6_291_456
    concat = hf["kv_concat"]
    assert concat.count == 10 and float(concat.kv_read_bytes) == float(concat.kv_write_bytes) == per_layer
    assert float(concat.act_read_bytes + concat.act_write_bytes + concat.weight_bytes) == 0.0
    hw = make_profile()
    w = Workload.in_dtype("fp32", 2, 2048)
    old = get_step_cost(hw, LLAMA, w, 1)
    new = get_step_cost(hw, LLAMA, w.model_copy(update={"implementation": "hf"}), 1)
    assert float(new.kv_read_bytes - old.kv_read_bytes) == 10 * per_layer
    assert float(new.kv_write_bytes - old.kv_write_bytes) == 10 * per_layer
    # the new token's own write is still the reference's kv_cache_write; decode attends natively (no repeat_kv)
    assert float(hf["kv_cache_write"].kv_write_bytes) == float(reference["kv_cache_write"].kv_write_bytes)
    assert "kv_repeat" not in hf
    # one extra RoPE pass over q (576) and k (192) of the two tokens, per layer
    extra = hf["rope_extra_pass"]
    assert extra.count == 10 and float(extra.act_read_bytes) == float(extra.act_write_bytes) == 2 * (576 + 192) * 4


def test_a_sliding_window_cache_concatenates_only_what_it_keeps():
    mistral = load_model("mistral-7b-v0.1")
    window = mistral.sliding_window_tokens
    assert window
    d, kv_heads = mistral.head_dim_resolved, mistral.num_kv_heads
    short, long = (_ops("hf", 1, s, model=mistral, dtype="bf16")["kv_concat"] for s in (window // 2, 4 * window))
    assert float(short.kv_read_bytes) == 2 * kv_heads * (window // 2) * d * 2
    assert float(long.kv_read_bytes) == 2 * kv_heads * (window - 1) * d * 2  # DynamicSlidingWindowLayer keeps W - 1


def test_hf_verify_step_materialises_the_gqa_expansion():
    ops = _ops("hf", batch=2, context=2048, new_tokens=5)
    repeat = ops["kv_repeat"]
    read = 2 * 2 * 3 * (2048 + 5) * 64 * 4  # keys and values of every position attended, once
    assert float(repeat.kv_read_bytes) == read and float(repeat.act_write_bytes) == read * 9 / 3
    assert "kv_repeat" not in _ops("hf", batch=2, context=0, new_tokens=512)  # a prefill: causal, no mask


def test_gptfast_fuses_qkv_and_adds_no_copies():
    ops = _ops("gptfast")
    assert "q_proj" not in ops and "kv_concat" not in ops and "rope_extra_pass" not in ops
    assert ops["qkv_proj"].dims["n"] == 576 + 2 * 192 and ops["qkv_proj"].dims["k"] == 576
    reference = _ops(None)
    weights = sum(float(reference[n].weight_bytes) for n in ("q_proj", "k_proj", "v_proj"))
    assert float(ops["qkv_proj"].weight_bytes) == weights


def _custom(tmp_path, **values) -> str:
    data = load_implementation("reference").model_dump()
    data.update(name="custom", aliases=[])
    for field, value in values.items():
        data[field] = {"value": value, "source": "tests/test_implementation.py: a made-up implementation"}
    path = tmp_path / "custom.yaml"
    path.write_text(json.dumps(data))
    return str(path)


def test_fused_gate_up_and_extra_dispatches_from_a_yaml_table(tmp_path):
    path = _custom(tmp_path, fused_gate_up=True, dispatches_per_layer=100)
    ops = _ops(path)
    assert "gate_proj" not in ops and ops["gate_up_proj"].dims["n"] == 2 * 1664
    assert ops["extra_dispatches"].dims["calls"] == 100 - 69 and ops["extra_dispatches"].count == 10
    fewer = _ops(_custom(tmp_path, dispatches_per_layer=20))
    assert "extra_dispatches" not in fewer  # fewer calls than the reference earn no credit (see implementation_ops)


# --- measured pricing ------------------------------------------------------------------------------------------------


def test_measured_profile_prices_the_concat_per_byte_at_its_allocation_size():
    per_layer = 2 * 2 * 3 * 2048 * 64 * 4
    old_hw = make_profile()  # no concatenation table: the copy bandwidth (25 GB/s) + one call's overhead (20 us)
    assert float(MeasuredTiming.from_spec(old_hw).get_op_time(_ops("hf")["kv_concat"], "fp32").time_s) == \
        pytest.approx(10 * (2 * per_layer / 25e9 + 20e-6), rel=1e-12)
    # measured: 40 GB/s for tensors of 1 and 16 MiB (heap reuse), 4 GB/s from 48 MiB (fresh pages)
    sizes, rates = (2.0**20, 16 * 2.0**20, 48 * 2.0**20), (1 / 40e9, 1 / 40e9, 1 / 4e9)
    table = CopyTable(allocation_bytes=sizes, bytes_moved=tuple(4 * s for s in sizes),
                      time_s=tuple(4 * s * r for s, r in zip(sizes, rates)), spread=(0.1, 0.1, 0.1))
    timing = MeasuredTiming.from_spec(_with_profile_fields(old_hw, kv_concat=table))
    for batch, context in ((2, 2048), (16, 4096), (4, 4096)):
        op = _ops("hf", batch=batch, context=context)["kv_concat"]
        allocation = batch * 3 * (context + 1) * 64 * 4  # each new tensor: the cached positions and the new one
        assert float(op.dims["allocation_bytes"]) == allocation
        moved = 2 * 2 * batch * 3 * context * 64 * 4
        log_rate = np.interp(np.log(allocation), np.log(sizes), np.log(rates))  # log-log between the points
        assert float(timing.get_op_time(op, "fp32").time_s) == pytest.approx(10 * moved * np.exp(log_rate), rel=1e-9)
    # batch 16 at 4096: 48 MiB tensors, the fresh-page rate; batch 2 at 2048: 3 MiB, the heap-reuse rate
    big, small = (_ops("hf", batch=b, context=s)["kv_concat"] for b, s in ((16, 4096), (2, 2048)))
    assert float(timing.get_op_time(big, "fp32").time_s) == pytest.approx(10 * float(big.bytes) / 4e9, rel=1e-3)
    assert float(timing.get_op_time(small, "fp32").time_s) == pytest.approx(10 * float(small.bytes) / 40e9, rel=1e-9)


def test_the_concat_rate_is_not_interpolated_across_the_mmap_threshold():
    """Regression: a 24 MiB point at the heap's rate and a 40 MiB point at the fresh pages' priced a 31 MiB tensor,
    which glibc still serves from the heap, at a rate between the two (2-core Intel Xeon VM, 2026-12-03)."""
    from rooflinesim.specs.measured import FRESH_ALLOCATION_BYTES

    mib = 2.0**20
    assert FRESH_ALLOCATION_BYTES == 32 * mib
    table = _concat_table((8, 24, 40, 64), (40, 30, 10, 9))
    assert table.get_seconds_per_byte(31 * mib) == pytest.approx(1 / 30e9)  # the heap side, clamped at its end
    assert table.get_seconds_per_byte(12 * mib) == pytest.approx(
        np.exp(np.interp(np.log(12 * mib), np.log([8 * mib, 24 * mib]), np.log([1 / 40e9, 1 / 30e9]))))
    for size in (32, 33, 48, 100):  # mapped afresh from the threshold: one cost per byte
        assert table.get_seconds_per_byte(size * mib) == pytest.approx(1 / 10e9)
    rows = table.get_seconds_per_byte(np.array([mib, 31 * mib, 100 * mib]))  # vectorised as the grids call it
    assert rows == pytest.approx([1 / 40e9, 1 / 30e9, 1 / 10e9])
    heap_only = _concat_table((8, 24), (40, 30))
    assert heap_only.get_seconds_per_byte(64 * mib) == pytest.approx(1 / 30e9)  # no fresh point: the heap's end
    assert heap_only.get_fresh_seconds_per_byte() is None
    fresh_only = _concat_table((48, 96), (9, 4))
    assert fresh_only.get_seconds_per_byte(mib) == pytest.approx(1 / 9e9)  # no heap point: the fresh side's


def test_the_fresh_page_rate_is_the_fastest_paid_one_not_a_slow_fault_state_nor_a_warm_heap_block():
    """2-core Intel Xeon VM, 2026-12-03: one full calibration read 48 / 64 / 96 MiB at 2.9 / 3.5 / 9.4 GB/s (the VM's
    page faults in a slow state) and priced hf-llama-94m at batch 16 and context 4096 at +158 %; another read 40 MiB at
    27 GB/s beside 29 GB/s at 24 MiB (served warm by a free heap block) and priced the same step 37 % low. The step
    itself paid 8-10 GB/s."""
    mib = 2.0**20
    slow_state = _concat_table((24, 48, 64, 96), (29.1, 2.9, 3.5, 9.4))
    assert slow_state.get_seconds_per_byte(48 * mib) == pytest.approx(1 / 9.4e9)
    warm_served = _concat_table((24, 40, 64, 96), (29.4, 26.8, 8.7, 9.0))
    assert warm_served.get_seconds_per_byte(48 * mib) == pytest.approx(1 / 9.0e9)
    assert warm_served.get_fresh_seconds_per_byte() == pytest.approx(1 / 9.0e9)
    # regression (the 10:17 full calibration of 2026-12-03): 48 MiB partly warm at 18.9 GB/s, 1.58x the heap's cost
    # per byte, was taken as paid under a factor of 1.5 and priced that step 44 % low
    partly_warm = _concat_table((24, 48, 64, 96), (30.0, 18.9, 9.0, 8.9))
    assert partly_warm.get_fresh_seconds_per_byte() == pytest.approx(1 / 9.0e9)
    assert _concat_table((24, 48), (26.5, 9.1)).get_fresh_seconds_per_byte() == pytest.approx(1 / 9.1e9)  # 2.9x: paid
    # regression (the 17:42 full calibration of 2026-12-03): no paid reading, 48-96 MiB all at 25.6-26.4 GB/s beside
    # 26.2 GB/s at 24 MiB, priced at the slowest of them; hf-qwen2moe-61m at batch 16 and 2048-4096 tokens came out
    # 57-58 % low. Now what a paid point usually costs relative to the heap's largest (3.2x: 8.2 GB/s here)
    all_warm = _concat_table((24, 48, 64, 96), (26.2, 26.2, 26.4, 25.6))
    assert all_warm.get_seconds_per_byte(48 * mib) == pytest.approx(FRESH_PAGE_FACTOR_PRIOR / 26.2e9)
    assert all_warm.get_fresh_seconds_per_byte() == pytest.approx(FRESH_PAGE_FACTOR_PRIOR / 26.2e9)
    assert all_warm.get_seconds_per_byte(48 * mib) > WARM_SERVED_FACTOR * all_warm.get_seconds_per_byte(24 * mib)
    # priced through a step: the op's time is its bytes at that rate
    timing = MeasuredTiming.from_spec(_with_profile_fields(make_profile(), kv_concat=slow_state))
    op = _ops("hf", batch=16, context=4096)["kv_concat"]
    assert float(op.dims["allocation_bytes"]) >= 32 * mib
    assert float(timing.get_op_time(op, "fp32").time_s) == pytest.approx(10 * float(op.bytes) / 9.4e9, rel=1e-9)


def test_every_concat_point_turns_over_its_copies_once_before_it_is_timed(monkeypatch):
    """The first calls of a point map pages the VM has not used lately (from the mmap threshold up: 1.4-1.5 GB/s for
    the first turn over 10 copies, 10 GB/s after; below it, right after the heap was trimmed, 740-840 us against
    60-68 us for the 0.5 MiB point, 2-core Intel Xeon VM): one untimed turn runs first at every size."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from rooflinesim.calibrate.measure.benchmarks import implementation as I

    cats = []
    real_cat = torch.cat
    monkeypatch.setattr(I.torch, "cat", lambda *a, **k: (cats.append(1), real_cat(*a, **k))[1])
    from rooflinesim.calibrate.fitting import budget

    monkeypatch.setattr(budget, "KV_CONCAT_COLD_POOL_BYTES", 4 * 2**20)
    backend = SimpleNamespace(last_level_cache_bytes=lambda: 2**20)
    seen = {}

    def fake_time(fn, before=None, min_calls=0):
        seen["untimed_cats"], seen["min_calls"] = len(cats), min_calls
        fn()
        return "timed"

    ctx = SimpleNamespace(dtype="fp32", torch_dtype=torch.float32, torch_device=torch.device("cpu"),
                          device=SimpleNamespace(backend=backend), time=fake_time)
    mib = 2**20
    for size, copies in ((mib // 2, 4), (32 * mib, 1)):  # copies: ceil(4 MiB / (2 x size)), at least one
        cats.clear()
        assert I._time_concat(ctx, size) == "timed"
        assert seen["untimed_cats"] == 2 * copies  # keys and values per step
        # on both sides of the threshold, enough calls that a bimodal state still leaves a faster half to read
        assert seen["min_calls"] == I.CONCAT_CALLS


def test_a_heap_concat_point_frees_the_caches_it_replaced_half_its_copies_later(monkeypatch):
    """Freed at once, the next call's new tensors took the block its call had just read, still in the cache (a 6 MiB
    point read 34 GB/s that way, 26-28 GB/s with the free put off, and hf-llama-94m's step paid 22 GB/s per
    concatenation, 2-core Intel Xeon VM): below the mmap threshold a replaced cache lives on for half the copies."""
    torch = pytest.importorskip("torch")
    import weakref
    from types import SimpleNamespace

    from rooflinesim.calibrate.measure.benchmarks import implementation as I

    from rooflinesim.calibrate.fitting import budget

    mib = 2**20
    monkeypatch.setattr(budget, "KV_CONCAT_COLD_POOL_BYTES", 8 * mib)
    backend = SimpleNamespace(last_level_cache_bytes=lambda: mib)
    alive_after = {}

    def fake_time(fn, before=None, min_calls=0):
        # the untimed turn has run (the turn starts over at copy 0); watch the caches as they stand
        caches = next(c.cell_contents for c in fn.__closure__ if isinstance(c.cell_contents, list))
        refs = [weakref.ref(t) for pair in caches for t in pair]
        counts = []
        for _ in range(len(caches) + 1):
            fn()
            counts.append(sum(r() is not None for r in refs))
        alive_after["counts"] = counts
        return "timed"

    ctx = SimpleNamespace(dtype="fp32", torch_dtype=torch.float32, torch_device=torch.device("cpu"),
                          device=SimpleNamespace(backend=backend), time=fake_time)
    assert I.get_free_delay(mib, 8) == 4 and I.get_free_delay(1, 1) == 0
    assert I.get_free_delay(32 * mib, 8) == 0  # mapped afresh from the threshold up: nothing to put off
    I._time_concat(ctx, mib // 2)  # 8 copies of 2 x 0.5 MiB, freed 4 calls after they are replaced
    counts = alive_after["counts"]
    # each call replaces one watched pair; a replaced pair is freed four calls on
    assert counts[:4] == [16, 16, 16, 16] and counts[4] == 14 and counts[-1] == 16 - 2 * (len(counts) - 4)


def _concat_table(sizes_mib, gb_per_s):
    sizes = tuple(x * 2.0**20 for x in sizes_mib)
    return CopyTable(allocation_bytes=sizes, bytes_moved=tuple(4 * s for s in sizes),
                     time_s=tuple(4 * s / (r * 1e9) for s, r in zip(sizes, gb_per_s)), spread=(0.1,) * len(sizes))


def test_extra_dispatches_are_priced_per_call(tmp_path):
    hw = _with_profile_fields(make_profile(), dispatch_s=3e-6)
    path = _custom(tmp_path, dispatches_per_layer=100)

    def step(hw, impl=None):
        w = Workload.in_dtype("fp32", 1, 256).model_copy(update={"implementation": impl or "reference"})
        return get_step_cost(hw, LLAMA, w, 1, timing=MeasuredTiming.from_spec(hw))
    base, more = step(hw), step(hw, path)
    assert float(more.step_time_s - base.step_time_s) == pytest.approx(10 * 31 * 3e-6, rel=1e-9)
    # a profile without the measurement: the fitted per-layer overhead (100 us) spread over the reference's 69 calls
    older, plain = step(make_profile(), path), step(make_profile())
    assert float(older.step_time_s - plain.step_time_s) == pytest.approx(10 * 31 * 100e-6 / 69, rel=1e-9)


def test_datasheet_timing_prices_the_copies_and_no_dispatch(tmp_path):
    sc = build_scenario("h100", "llama-3.1-8b", 8, 8192, speculative=False, implementation="hf")
    w = sc.workload
    step = get_step_cost(sc.hardware, sc.model, w, 1, timing=sc.timing)
    base = get_step_cost(sc.hardware, sc.model, w.model_copy(update={"implementation": "reference"}), 1,
                         timing=sc.timing)
    assert float(step.step_time_s) > float(base.step_time_s)
    custom = w.model_copy(update={"implementation": str(_custom(tmp_path, dispatches_per_layer=100))})
    dispatch = get_step_cost(sc.hardware, sc.model, custom, 1, timing=sc.timing)
    assert float(dispatch.step_time_s) == pytest.approx(float(base.step_time_s), rel=1e-12)


def test_predict_cli_takes_impl_and_lists_the_ops(capsys):
    from rooflinesim.cli import main

    assert main(["predict", "--hw", "h100", "--model", "llama-3.1-8b", "--ctx", "4096", "--no-speculation",
                 "--impl", "hf", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload"]["implementation"] == "hf"
    assert "kv_concat" in {row["name"] for row in out["ops"]}
    assert main(["predict", "--hw", "h100", "--model", "llama-3.1-8b", "--no-speculation", "--impl", "hff"]) == 2
    assert "did you mean hf" in capsys.readouterr().err
    assert main(["sweep", "--hw", "h100", "--model", "llama-3.1-8b", "--batch", "1,16", "--ctx", "1k,8k",
                 "--impl", "transformers", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["implementation"] == "hf"  # an alias resolves to the table's name


def test_implementation_spec_is_frozen_and_strict():
    spec = load_implementation("hf")
    assert isinstance(spec, ImplementationSpec)
    with pytest.raises(Exception):
        spec.name = "x"


# --- calibration: the plan times them and the fit reads them back -------------------------------------------------------


def test_every_plan_times_the_concat_and_the_dispatch_loop():
    import types

    from rooflinesim.calibrate.fitting.measurements import ImplementationKey
    from rooflinesim.calibrate.fitting.plan import Plan

    cpu = types.SimpleNamespace(is_cuda=False)
    for quick, tiny in ((False, False), (True, False), (True, True)):
        keys = [k for k in Plan.make(quick, ("fp32",), cpu, tiny=tiny).keys("fp32") if isinstance(k, ImplementationKey)]
        assert len([k for k in keys if k.kind == "kv_concat"]) >= 2 and len([k for k in keys if k.kind == "dispatch"]) == 2


def test_fit_reads_the_concat_bandwidth_and_the_per_call_dispatch():
    from rooflinesim.calibrate.fitting.fit_profile import _fit_dispatch_s, _fit_kv_concat
    from rooflinesim.calibrate.fitting.measurements import ImplementationKey, Results, Timing
    from rooflinesim.calibrate.fitting.plan import get_kv_concat_bytes

    results = Results()
    for size in (2**22, 2**19, 48 * 2**20):  # measured in any order; 40 GB/s, then fresh pages at 4 GB/s
        t = get_kv_concat_bytes(size, "fp32") / (4e9 if size > 32 * 2**20 else 40e9)
        results.add(ImplementationKey("kv_concat", size), Timing((t, t, t)))
    for calls in (64, 512):  # 10 us + 2.5 us per call
        results.add(ImplementationKey("dispatch", calls), Timing((10e-6 + 2.5e-6 * calls,) * 3))
    table = _fit_kv_concat("fp32", results)
    assert table.allocation_bytes == tuple(sorted(table.allocation_bytes))
    # each tensor allocated: the cache's positions + the new one, [1, 4, positions + 1, 64] fp32
    assert table.allocation_bytes[0] == (2**19 // 1024 + 1) * 1024
    assert table.get_seconds_per_byte(48 * 2**20 + 1024) == pytest.approx(1 / 4e9)
    assert table.get_seconds_per_byte(2**20) == pytest.approx(1 / 40e9)
    assert _fit_kv_concat("fp32", Results()) is None
    assert _fit_dispatch_s(results) == pytest.approx(2.5e-6, rel=1e-9)
    assert get_kv_concat_bytes(2**22, "fp32") == 4 * 2**22  # two caches of 4 MiB, each read and written


def test_merging_runs_averages_the_concat_table_and_the_dispatch_cost():
    from rooflinesim.calibrate.fitting.merge import merge_dtype

    sizes = (2.0**20, 48 * 2.0**20)
    runs = []
    for time_s, dispatch in (((1e-4, 1e-2), 1e-6), ((3e-4, 3e-2), 3e-6)):
        table = CopyTable(allocation_bytes=sizes, bytes_moved=tuple(4 * s for s in sizes), time_s=time_s,
                          spread=(0.1, 0.2))
        runs.append(_with_profile_fields(make_profile(), kv_concat=table, dispatch_s=dispatch))
    older = make_profile().measured.dtypes["fp32"]  # a run from before: neither measured
    merged = merge_dtype("fp32", [r.measured.dtypes["fp32"] for r in runs] + [older])
    assert merged.kv_concat.time_s == pytest.approx((2e-4, 2e-2)) and merged.kv_concat.allocation_bytes == sizes
    assert merged.dispatch_s == pytest.approx(2e-6)
    assert merge_dtype("fp32", [older, older]).kv_concat is None


@pytest.mark.parametrize("batch, context", [(2, 8192), (4, 2048), (16, 2048)])
def test_a_cpu_profile_does_not_warn_of_heap_churn_it_does_not_see(batch, context):
    """Regression: pricing transformers' cache growth with 12-32 MiB tensors in a step allocating more than 64 MiB
    used to warn that the heap is trimmed and faulted in again within the step. Timed as `generate` grows it
    (hf-llama-94m, batch 4-16, 1024-4096 tokens, 2-core Intel Xeon VM, 2026-12-03) the step took 18-73 minor faults
    (under 0.3 MiB) and its concatenations ran as fast as with the cache rewound; what the table missed was a warm
    destination block (`benchmarks.implementation.get_free_delay`), not page faults."""
    profile = str(ROOT / "tests" / "data" / "profiles" / "cpu-amd-epyc-2c.yaml")
    options = dict(weight_dtype="fp32", speculative=False, allow_long_context=True)
    hf = build_scenario(profile, "tiny-llama-123m", batch, context, implementation="hf", **options)
    assert not any("trim threshold" in w or "fault" in w for w in hf.warnings)


def test_the_budget_prices_the_concat_copies_the_benchmark_allocates():
    """Regression: the estimate assumed a 64 MiB pool of copies whatever the cache, while the benchmark sizes it at
    twice the last-level cache. On the 2-core Intel Xeon VM (480 MiB of last-level cache in sysfs) the quick plan's
    implementation family, priced at 1.3 s, took 10.2 s: its 48 MiB point filled and turned over 10 copies, not 1."""
    from rooflinesim.calibrate.fitting.budget import DeviceSpeed, estimate_key_s, get_kv_concat_copies, get_level_plan
    from rooflinesim.calibrate.fitting.measurements import ImplementationKey
    from rooflinesim.calibrate.measure.timers import select_device

    mib = 2**20
    assert get_kv_concat_copies(48 * mib, 480 * mib) == 10  # 960 MiB / 96 MiB
    assert get_kv_concat_copies(48 * mib, 32 * mib) == 1  # 64 MiB hold one copy of two 48 MiB caches
    assert get_kv_concat_copies(0.5 * mib, 480 * mib) == 64  # at most 64
    plan = get_level_plan("steady", ("fp32",), select_device("cpu"))

    def family_s(llc):
        speed = DeviceSpeed("fp32", 30e9, 2e11, 5e-6, 0.05, 2e9, last_level_cache_bytes=llc)
        return sum(estimate_key_s(ImplementationKey("kv_concat", size), plan, speed) for size in plan.kv_concat_bytes)

    small, large = family_s(32 * mib), family_s(480 * mib)
    assert large > 2.5 * small  # 8, 24 and 48 MiB filled and turned over 960 MiB each instead of 64 MiB
    assert family_s(0.0) == pytest.approx(small, rel=0.05)  # unknown: the 64 MiB floor, as before
