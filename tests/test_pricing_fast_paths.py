"""The shortcuts that keep one `predict` point fast give the numbers of the plain computation, bit for bit: the
batched op timing, the broadcasting in `make_op`, the loop times shared between a point's answer and its sensitivity
to the acceptance, and the decode step `predict` takes from the speculative loop. Speed itself is measured by
`benchmarks/bench_predict_call.py`, never asserted."""

from pathlib import Path

import numpy as np
import pytest

import rooflinesim
from rooflinesim import load_hardware, load_model
from rooflinesim.ops.op_cost import OpCost, make_op
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.pricing import speculative
from rooflinesim.pricing.break_even import get_best_k_index
from rooflinesim.pricing.predict import StepSummary, get_op_rows, predict_scenario
from rooflinesim.pricing.sensitivity import get_alpha_sensitivity
from rooflinesim.pricing.speculative import price_speculation
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.workload import Workload
from rooflinesim.step import get_memory_fit as step_memory_fit, get_step_cost
from rooflinesim.ops.draft_heads import get_head_weight_bytes
from rooflinesim.timing import DatasheetTiming, get_op_time
from rooflinesim.timing.datasheet import get_ops_times
from rooflinesim.timing.datasheet_band import get_datasheet_band
from rooflinesim.timing.engine import with_engine
from rooflinesim.timing.quant_kernels import get_quant_kernel
from rooflinesim.scenario.inputs import resolve_engine

PROFILE = Path(__file__).resolve().parent / "data" / "profiles" / "cpu-amd-epyc-2c.yaml"

#: (hardware, model, workload fields, batch, context, new tokens): points and grids, TP (collectives), quantised
#: weights, MoE, MLA, unfused attention
CASES = [
    ("h100", "llama-3.1-8b", {}, 8, 4096, 1),
    ("h100", "llama-3.1-8b", {}, np.array([1, 8]), np.array([[512], [8192]]), np.arange(1, 10)[:, None, None]),
    ("h100", "llama-3.1-70b", {"tensor_parallel": 4}, 16, 8192, np.arange(1, 6)),
    ("a100", "llama-3.1-8b", {"weight_dtype": "int4"}, 4, 2048, 3),
    ("h100", "mixtral-8x7b", {"tensor_parallel": 2, "attention": "unfused"}, np.array([1, 64]), 4096, 1),
    ("h100", "deepseek-v2-lite", {"kv_dtype": "fp8"}, 2, 1024, 5),
    ("h100", "llama-3.1-70b", {"tensor_parallel": 4}, 16, 8192, 1),
    ("a100", "mixtral-8x7b", {"tensor_parallel": 8, "weight_dtype": "int8"}, 64, 4096, 3),
]


def _same(a, b) -> bool:
    return np.shape(a) == np.shape(b) and np.array_equal(a, b)


@pytest.mark.parametrize("hw_name, model_name, fields, batch, context, new_tokens", CASES)
def test_batched_op_times_are_the_per_op_times(hw_name, model_name, fields, batch, context, new_tokens):
    hw = load_hardware(hw_name)
    ops = get_step_ops(load_model(model_name), Workload(batch=1, context_tokens=0, **fields), new_tokens, batch=batch,
                       context_tokens=context)
    dtype = "bf16"
    kernel = get_quant_kernel("tinygemm", "int4") if fields.get("weight_dtype") == "int4" else None
    for timing in (DatasheetTiming.expected(hw).with_quant_kernel(kernel), DatasheetTiming.speed_of_light(hw),
                   with_engine(DatasheetTiming.expected(hw), resolve_engine("vllm-v1"))):
        batched = get_ops_times(timing, hw, ops, dtype, 0.8)
        one_by_one = [get_op_time(timing, hw, op, dtype, 0.8) for op in ops]
        assert len(batched) == len(one_by_one) == len(ops)
        for fast, plain in zip(batched, one_by_one):
            for field in ("compute_time_s", "memory_time_s", "overhead_s", "time_s", "compute_bound"):
                assert _same(getattr(fast, field), getattr(plain, field)), field


def test_ops_of_different_shapes_are_priced_one_by_one():
    hw = load_hardware("h100")
    a = make_op("a", "elementwise", 2, np.ones(3), 1.0)
    b = make_op("b", "elementwise", 2, 1.0, 1.0)
    assert DatasheetTiming.expected(hw).get_ops_times([a, b], "bf16") is None
    times = get_ops_times(DatasheetTiming.expected(hw), hw, [a, b], "bf16")
    assert np.shape(times[0].time_s) == (3,) and np.shape(times[1].time_s) == ()


@pytest.mark.parametrize("shape", [(), (1,), (9,), (2, 1, 3), (80, 80)])
def test_make_op_broadcasts_as_numpy_does(shape):
    grid = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
    values = (grid, 2.5, 0.0, np.asarray(7.0), -0.0, 0.0, grid * 2)  # a default 0.0 and a negative zero among them
    op = make_op("x", "linear", 3, *values)
    expected = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in values))
    fields = ("flops", "weight_bytes", "act_read_bytes", "act_write_bytes", "kv_read_bytes", "kv_write_bytes",
              "comm_bytes")
    for field, want in zip(fields, expected):
        got = getattr(op, field)
        assert _same(got, want) and np.array_equal(np.signbit(got), np.signbit(want)), field
    assert isinstance(op, OpCost)


@pytest.mark.parametrize("options", [{"alpha": 0.7}, {"alpha": 0.95, "extra_draft_pass": True},
                                     {"drafter": "eagle", "alpha": 0.05}])
def test_sensitivity_one_rate_at_a_time_matches_the_two_axis_grid(options):
    """The sensitivity prices each rate over the scenario's k axis (reusing the answer's loop); pricing every rate
    at once over (k, alpha), as it used to, gives the same rows and robust k."""
    scenario = build_scenario("h100", "llama-3.1-8b", 8, 4096, **options)
    result = get_alpha_sensitivity(scenario)
    ks, moved = scenario.k_values, np.asarray([row["alpha"] for row in result["rows"]])
    grid = price_speculation(scenario, k=ks[:, None], alpha=moved[None, :])
    speedup = np.broadcast_to(np.asarray(grid.speedup, dtype=float).reshape(ks.size, -1), (ks.size, moved.size))
    fits = np.broadcast_to(np.asarray(grid.fits_in_memory).reshape(ks.size, -1)[:, :1], speedup.shape)
    best = get_best_k_index(speedup, fits, axis=0)
    assert [(row["best_k"], row["best_speedup"]) for row in result["rows"]] == [
        (int(ks[b]), float(speedup[b, j])) for j, b in enumerate(best)]
    share = np.where(fits, speedup / speedup[best, np.arange(moved.size)][None, :], -np.inf).min(axis=1)
    assert result["robust_k"] == int(ks[int(np.argmax(share))])


def test_the_loop_times_are_kept_for_one_scenario_only():
    one = build_scenario("h100", "llama-3.1-8b", 8, 4096)
    other = build_scenario("h100", "llama-3.1-8b", 8, 4096, alpha=0.6)
    first = price_speculation(one)
    assert price_speculation(one).draft_step_time_s is first.draft_step_time_s  # the same loop, reused
    price_speculation(other)
    again = price_speculation(one)  # priced afresh after another scenario: the same numbers
    assert again.draft_step_time_s is not first.draft_step_time_s
    assert _same(again.speedup, first.speedup) and _same(again.verify_step_time_s, first.verify_step_time_s)


@pytest.mark.parametrize("options", [{}, {"drafter": "eagle", "k": 4}, {"calibration": str(PROFILE)}])
def test_predict_summarises_the_loops_decode_as_its_own(options):
    hw = "cpu-generic" if "calibration" in options else "h100"
    model = "tiny-llama-123m" if "calibration" in options else "llama-3.1-8b"
    draft = {"draft": "tiny-draft-2l"} if "calibration" in options else {}
    prediction = rooflinesim.predict(hw, model, 2, 512, **options, **draft)
    scenario = prediction.scenario
    alone = get_step_cost(scenario.hardware, scenario.model, scenario.workload, 1, scenario.timing)
    band = get_datasheet_band(scenario.hardware) if alone.sigmas is None else None
    assert prediction.decode == StepSummary.from_step(alone, 1, 512, band)
    assert prediction.ops == get_op_rows(alone)
    speculative._LAST_LOOP[0] = None
    assert rooflinesim.predict(hw, model, 2, 512, **options, **draft).to_dict() == prediction.to_dict()


def _fresh_steps(scenario):
    """The prefill and decode of a point priced from scratch, as `predict` priced them before it reused the build's."""
    hw, model, w, timing = scenario.hardware, scenario.model, scenario.workload, scenario.timing
    s = w.context_tokens
    prefill = get_step_cost(hw, model, w, max(s, 1), timing, context_tokens=0, logits_for_all_tokens=False)
    return prefill, get_step_cost(hw, model, w, 1, timing)


@pytest.mark.parametrize("hw, model, batch, context, options", [
    ("h100", "llama-3.1-8b", 8, 4096, {"speculative": False}),
    ("h100", "llama-3.1-70b", 16, 8192, {"speculative": False, "tp": 4, "sampling": True}),
    ("h100", "mixtral-8x7b", 4, 2048, {"speculative": False, "weight_dtype": "int4"}),
    ("h100", "llama-3.1-8b", 8, 4096, {}),
    ("h100", "llama-3.1-8b", 2, 0, {"drafter": "eagle", "k": 3}),
    ("cpu-generic", "tiny-llama-123m", 2, 512, {"speculative": False, "calibration": str(PROFILE)}),
    ("cpu-generic", "tiny-llama-123m", 2, 512, {"calibration": str(PROFILE), "draft": "tiny-draft-2l"}),
])
def test_predict_reuses_the_steps_the_build_checked(hw, model, batch, context, options):
    """The build prices a point's largest prefill and verify to refuse non-finite prices; `predict` summarises those
    very steps as its prefill and (without speculation) its decode: the numbers of steps priced afresh."""
    prediction = rooflinesim.predict(hw, model, batch, context, **options)
    scenario = prediction.scenario
    checked_prefill, checked_verify = scenario.get_largest_steps()
    assert scenario.get_largest_steps()[0] is checked_prefill  # priced once, kept by the resolved scenario
    prefill, decode = _fresh_steps(scenario)
    band = get_datasheet_band(scenario.hardware) if decode.sigmas is None else None
    s = scenario.workload.context_tokens
    assert prediction.prefill == StepSummary.from_step(prefill, max(s, 1), 0, band)
    assert prediction.decode == StepSummary.from_step(decode, 1, s, band)
    assert prediction.ops == get_op_rows(decode)
    # the build's warnings read the largest verify's ops: those get_step_ops builds for k_max + 1 tokens
    q = int(scenario.k_values.max()) + 1
    ops = get_step_ops(scenario.model, scenario.workload, q, batch=batch, context_tokens=context)
    assert [op.name for op in checked_verify.ops] == [op.name for op in ops]
    for fast, plain in zip(checked_verify.ops, ops):
        for field in ("flops", "weight_bytes", "act_read_bytes", "act_write_bytes", "kv_read_bytes",
                      "kv_write_bytes", "comm_bytes"):
            assert _same(getattr(fast, field), getattr(plain, field)), (fast.name, field)


def test_a_point_of_a_grid_prices_its_own_steps():
    """`Scenario.at` starts without the grid's checked steps (those are the grid's largest, not the point's)."""
    grid = build_scenario("h100", "llama-3.1-8b", [1, 8], [512, 4096], speculative=False)
    largest_prefill, largest_verify = grid.get_largest_steps()
    point = grid.at(1, 512)
    assert point.get_largest_steps()[0] is not largest_prefill
    prediction = predict_scenario(point)
    prefill, decode = _fresh_steps(point)
    band = get_datasheet_band(point.hardware)
    assert prediction.prefill == StepSummary.from_step(prefill, 512, 0, band)
    assert prediction.decode == StepSummary.from_step(decode, 1, 512, band)


OP_FIELDS = ("flops", "weight_bytes", "act_read_bytes", "act_write_bytes", "kv_read_bytes", "kv_write_bytes",
             "comm_bytes", "bytes")
STEP_TOTALS = ("step_time_s", "roofline_step_time_s", "flops", "bytes", "weight_bytes", "kv_read_bytes",
               "kv_write_bytes", "activation_bytes", "compute_bound_time_s", "compute_bound", "engine_s")


@pytest.mark.parametrize("hw_name, model_name, fields, batch, context, new_tokens",
                         [case for case in CASES if all(np.ndim(x) == 0 for x in case[3:])])
@pytest.mark.parametrize("engine", ["ideal", "vllm-v1"])
def test_a_point_prices_as_a_one_element_grid(hw_name, model_name, fields, batch, context, new_tokens, engine):
    """At one point the ops hold float64 scalars (`make_op`), the datasheet prices them as one row per op with cached
    rates, and the summaries read them without array evaluations: the numbers of the same point as a grid of one."""
    hw, model = load_hardware(hw_name), load_model(model_name)
    workload = Workload(batch=1, context_tokens=0, **fields)
    timing = with_engine(DatasheetTiming.expected(hw), resolve_engine(engine))
    point = get_step_cost(hw, model, workload, new_tokens, timing, context, batch)
    grid = get_step_cost(hw, model, workload, np.asarray([new_tokens]), timing, np.asarray([context]),
                         np.asarray([batch]))
    assert all(type(op.flops) is np.float64 for op in point.ops)  # the fast path is the one taken
    assert all(np.shape(op.flops) == (1,) for op in grid.ops)
    for fast, plain in zip(point.ops, grid.ops):
        for field in OP_FIELDS:
            assert _same(np.reshape(getattr(fast, field), (1,)), getattr(plain, field)), (fast.name, field)
    for fast, plain in zip(point.expected + point.roofline, grid.expected + grid.roofline):
        for field in ("compute_time_s", "memory_time_s", "overhead_s", "time_s", "compute_bound"):
            assert _same(np.reshape(getattr(fast, field), (1,)), getattr(plain, field)), field
    for total in STEP_TOTALS:
        assert _same(np.reshape(getattr(point, total), -1), np.reshape(getattr(grid, total), -1)), total
    s = int(context)
    assert StepSummary.from_step(point, 1, s) == StepSummary.from_step(grid, 1, s)
    assert get_op_rows(point) == get_op_rows(grid)


def _with_p2p_limit(hw, max_bytes: float):
    """The spec with its peer-to-peer all-reduce allowed only up to `max_bytes` (the limit then decides)."""
    ic = hw.interconnect
    p2p = ic.peer_to_peer_allreduce.model_copy(update={"max_bytes": max_bytes})
    return hw.model_copy(update={"interconnect": ic.model_copy(update={"peer_to_peer_allreduce": p2p})})


# p2p (its size limit above the sizes it wins at, or below), no p2p, one ring protocol
@pytest.mark.parametrize("hw_name", ["h100", "a100", "mi300x", "h100 p2p up to 64 kB", "l4", "tpu-v5e"])
@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_one_collective_prices_as_a_one_element_grid(hw_name, kind):
    """A point's collective (float64 message) takes the scalar path: the same latency, transfer and algorithm choice
    as the array path, from latency-bound messages to bandwidth-bound ones."""
    hw = load_hardware(hw_name.split()[0])
    if "64 kB" in hw_name:
        hw = _with_p2p_limit(hw, 65536.0)
    p2p = hw.interconnect.peer_to_peer_allreduce
    edges = [] if p2p is None else [p2p.max_bytes * f for f in (0.25, 0.5, 0.99, 1.0, 1.01)]  # p2p's size limit
    for devices in (2, 4, 8):
        for message in [*np.geomspace(1.0, 1e10, 41), *edges]:
            point = make_op("c", kind, 3, comm=float(message), devices=devices)
            grid = make_op("c", kind, 3, comm=np.asarray([message]), devices=devices)
            assert type(point.comm_bytes) is np.float64
            fast, plain = get_op_time(None, hw, point, "bf16", 0.8), get_op_time(None, hw, grid, "bf16", 0.8)
            for field in ("compute_time_s", "memory_time_s", "overhead_s", "time_s", "compute_bound"):
                assert _same(np.reshape(getattr(fast, field), (1,)), getattr(plain, field)), (devices, message, field)


@pytest.mark.parametrize("model, options", [
    ("llama-3.1-8b", {}),
    ("llama-3.1-8b", {"drafter": "eagle", "k": 4, "sampling": True}),
    ("llama-3.1-8b", {"drafter": "eagle3", "engine": "sglang"}),
    ("llama-3.1-8b", {"drafter": "medusa", "k": 3, "engine": "ideal"}),
    ("llama-3.1-8b", {"drafter": "self", "draft_layer_fraction": 0.5}),
    ("llama-3.1-8b", {"drafter": "ngram", "k": 4}),
    ("llama-3.1-8b", {"tree": "3,2,6"}),
    ("llama-3.1-8b", {"extra_draft_pass": True, "engine": "gpt-fast"}),
    ("llama-3.1-8b", {"draft_first_step_tokens": 2}),
    ("llama-3.1-70b", {"tp": 4}),
    ("deepseek-v2-lite", {"drafter": "mtp", "k": 2}),
    ("tiny-llama-123m", {"calibration": str(PROFILE), "draft": "tiny-draft-2l"}),
])
def test_a_points_speculative_loop_prices_as_a_grid_of_one(model, options):
    """The loop prices a point's decode and draft steps as scalars (predict's axes of one value each); a grid of one
    batch and one context (another shape, the array path) gives the same numbers for every part of the loop."""
    hw = "cpu-generic" if "calibration" in options else "h100"
    scenario = build_scenario(hw, model, 8, 1024, **options)
    batch, context, k = scenario.batch, scenario.context_tokens, scenario.k_values
    point = speculative._price_loop(scenario, batch, context, k)
    grid = speculative._price_loop(scenario, batch[:, None], context[:, None], k[None, :])
    assert np.ndim(point.decode.step_time_s) == 0  # the scalar path is the one taken
    for part in ("cold", "warm", "draft", "verify", "rule", "fits"):
        fast, plain = np.broadcast_to(getattr(point, part), k.shape), np.broadcast_to(getattr(grid, part), (1, k.size))
        assert _same(fast, plain[0]), part
    for total in STEP_TOTALS:
        assert _same(np.reshape(getattr(point.decode, total), -1), np.reshape(getattr(grid.decode, total), -1)), total


@pytest.mark.parametrize("model, drafter", [("llama-3.1-8b", "eagle"), ("llama-3.1-8b", "eagle3"),
                                            ("llama-3.1-8b", "medusa"), ("deepseek-v2-lite", "mtp")])
def test_a_heads_weights_are_worked_out_once_per_scenario(model, drafter):
    """`Scenario.remember` keeps a head's weight bytes (they depend on the deployment only); every memory fit adds
    what `get_head_weight_bytes` gives, at any k."""
    scenario = build_scenario("h100", model, 4, 2048, drafter=drafter, k=3)
    hw, target, w = scenario.hardware, scenario.model, scenario.workload
    per_head = get_head_weight_bytes(drafter, target, w, head=scenario.drafter.head_config)
    for k in (0, 1, 3):
        heads = max(k, 1) if drafter == "medusa" else 1
        bare = step_memory_fit(hw, target, w, k + 1, scenario.batch, scenario.context_tokens)
        assert scenario.get_memory_fit(k=k).weight_bytes == bare.weight_bytes + heads * per_head
    assert scenario._priced[f"{drafter} head weight bytes"] == per_head
    assert not scenario.at(1, 512)._priced  # another point starts afresh


def test_a_profile_is_parsed_once_per_content(tmp_path):
    """`load_spec_file` (through `load_profile`, which `--calibration` uses) reads the file every call and keeps its
    parse by path and content: the same text gives the same spec object, rewritten text a new one, and a broken
    file is refused every time (nothing is kept for it)."""
    from rooflinesim.specs.profiles import load_profile
    from rooflinesim.specs.registry import SpecError

    path = tmp_path / "profile.yaml"
    text = PROFILE.read_text()
    path.write_text(text)
    first = load_profile(path)
    assert load_profile(str(path)) is first
    path.write_text(text.replace("name: AMD EPYC (2 threads), measured", "name: renamed", 1))
    renamed = load_profile(path)
    assert renamed is not first and renamed.name == "renamed" and first.name != "renamed"
    path.write_text(text[: len(text) // 2] + "\n  - [unclosed\n")
    for _ in range(2):
        with pytest.raises(SpecError):
            load_profile(path)
    path.write_text(text)
    assert load_profile(path) is first


def test_shape_weights_are_worked_out_once_per_shape():
    """`LinearModel.get_shape_weights` keeps each (K, N)'s weights: the numbers computed afresh, read-only, and a
    model with other tables (`replace`) starts without them."""
    from dataclasses import replace

    from rooflinesim.specs.profiles import apply_calibration
    from rooflinesim.timing.measured import MeasuredTiming

    hw, _ = apply_calibration(load_hardware("cpu-generic"), PROFILE)
    linear = next(iter(MeasuredTiming.from_spec(hw).models.values())).linear
    for k, n in [(1024, 4096), (896, 151936), (3000, 7)]:
        fresh = np.exp(-np.array([(np.log2(k) - np.log2(t.k)) ** 2 + (np.log2(n) - np.log2(t.n)) ** 2
                                  for t in linear.tables]) / (2 * linear.kernel_log2 ** 2))
        kept = linear.get_shape_weights(k, n)
        assert _same(kept, fresh) and linear.get_shape_weights(k, n) is kept and not kept.flags.writeable
    fewer = replace(linear, tables=linear.tables[1:])
    assert fewer.get_shape_weights(1024, 4096).size == len(linear.tables) - 1
