"""The shortcuts one `predict` point takes in building and summing its objects give, bit for bit, what the plain
construction gives: the step totals summed in one pass, ops and op times filled in without the dataclass `__init__`,
and the largest step time found without `np.max`. (`tests/test_pricing_fast_paths.py` covers the pricing shortcuts;
speed is measured by `benchmarks/bench_predict_call.py`, never asserted.)"""

import dataclasses
import math
from functools import reduce
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rooflinesim import load_hardware, load_model
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.ops.op_cost import OpCost, make_op
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.scenario.checks import get_worst_time
from rooflinesim.scenario.inputs import resolve_engine
from rooflinesim.specs.profiles import apply_calibration
from rooflinesim.specs.workload import Workload
from rooflinesim.step import StepCost, get_memory_fit, get_step_cost
from rooflinesim.timing import DatasheetTiming, OpTime, get_timing_model
from rooflinesim.timing.datasheet import _make_op_times
from rooflinesim.specs.registry import list_engines, load_engine
from rooflinesim.timing.engine import ROLES, get_engine_step_s, with_engine
from rooflinesim.units import _NORMALIZED, UnitError, normalize_dtype

PROFILE = Path(__file__).resolve().parent / "data" / "profiles" / "cpu-amd-epyc-2c.yaml"

#: (hardware, model, workload fields, batch, context, new tokens) at one point: TP (collectives), quantised weights,
#: MoE, MLA, unfused attention
POINTS = [
    ("h100", "llama-3.1-8b", {}, 8, 4096, 1),
    ("h100", "llama-3.1-70b", {"tensor_parallel": 4}, 16, 8192, 5),
    ("a100", "llama-3.1-8b", {"weight_dtype": "int4"}, 4, 2048, 3),
    ("h100", "mixtral-8x7b", {"tensor_parallel": 2, "attention": "unfused"}, 64, 4096, 1),
    ("h100", "deepseek-v2-lite", {"kv_dtype": "fp8"}, 2, 1024, 5),
]

TOTALS = ("flops", "bytes", "weight_bytes", "kv_read_bytes", "kv_write_bytes", "act_read_bytes", "act_write_bytes")

#: finite doubles of every magnitude, where a compensated or reordered sum would round differently
DOUBLES = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)


def _in_order(terms) -> np.float64:
    """`sum`'s additions, one after the other, on float64 scalars (the plain path's arithmetic)."""
    return reduce(lambda total, term: total + term, terms, 0)


@pytest.mark.parametrize("hw_name, model_name, fields, batch, context, new_tokens", POINTS)
def test_a_points_totals_are_the_plain_sums(hw_name, model_name, fields, batch, context, new_tokens):
    hw = load_hardware(hw_name)
    step = get_step_cost(hw, load_model(model_name), Workload(batch=1, context_tokens=0, **fields), new_tokens,
                         DatasheetTiming.expected(hw), context, batch)
    assert step._point_ops  # the one-pass path is the one taken
    for name in TOTALS:
        total = step._total(name)
        plain = sum(op.count * getattr(op, name) for op in step.ops)
        assert type(total) is np.float64 and total.tobytes() == plain.tobytes(), name
    assert step.activation_bytes == step._total("act_read_bytes") + step._total("act_write_bytes")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 200), DOUBLES, DOUBLES), min_size=1, max_size=30))
def test_the_one_pass_totals_add_as_sum_does(rows):
    """Any values and counts: the additions in `sum`'s order with its rounding at each step, never compensated
    (Python 3.12's `sum` of floats is) nor reordered (numpy's pairwise sum is)."""
    ops = [make_op(f"op{i}", "elementwise", count, flops, weight, flops, weight, weight, flops, 0.0)
           for i, (count, flops, weight) in enumerate(rows)]
    step = StepCost(ops=ops, expected=[], hw=None, compute_dtype="bf16", tokens=np.asarray(1.0), step_overhead_s=0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        for name in TOTALS:
            plain = _in_order(op.count * getattr(op, name) for op in ops)
            assert step._point_totals[name].tobytes() == np.float64(plain).tobytes(), name


def test_the_totals_are_not_a_compensated_sum():
    """1 + 1e16 + 1 + 1 rounds to 1e16 added in order; summed exactly it is 1e16 + 4."""
    ops = [make_op(f"op{i}", "elementwise", 1, value) for i, value in enumerate((1.0, 1e16, 1.0, 1.0))]
    step = StepCost(ops=ops, expected=[], hw=None, compute_dtype="bf16", tokens=np.asarray(1.0), step_overhead_s=0.0)
    assert step.flops == 1e16 != math.fsum(op.flops for op in ops)


@pytest.mark.parametrize("values", [
    (1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0),
    (np.float64(1e12), 3, np.int64(7), np.float64(2.5), 0.0, np.float64(-0.0), 5.0),
    (np.asarray(1e12), np.asarray(4.0), 2.0, 1.0, np.asarray(0.0), 0.0, 0.0),  # 0-d arrays
    (0.0, 1e16, 1.0, -1e16, 1.0, 0.0, 0.0),  # `bytes` is 1 added in the property's order, 0 in another
])
def test_a_points_op_is_the_dataclasss_own(values):
    fast = make_op("q_proj", "linear", 32, *values, m=np.float64(8.0), k=4096, n=1024)
    plain = OpCost("q_proj", "linear", 32, *map(np.float64, values), dims={"m": np.float64(8.0), "k": 4096, "n": 1024})
    assert fast == plain and repr(fast) == repr(plain)
    assert dataclasses.asdict(fast) == dataclasses.asdict(plain)
    plain_fields = {name: getattr(plain, name) for name in vars(plain)} | {"bytes": plain.bytes}
    assert vars(fast).keys() == plain_fields.keys()
    for name, value in plain_fields.items():
        assert type(vars(fast)[name]) is type(value), name
        if type(value) is np.float64:  # bit for bit (-0.0 included)
            assert vars(fast)[name].tobytes() == value.tobytes(), name
        else:
            assert vars(fast)[name] == value, name
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.flops = 0.0


def test_a_points_op_times_are_the_dataclasss_own():
    compute = np.asarray([1e-6, 2e-6, 0.0, 3e-5])
    memory = np.asarray([2e-6, 1e-6, 0.0, np.inf])
    overhead = np.asarray([1e-6, 1e-6, 0.0, 2e-6])
    total = compute + memory + overhead
    fast = _make_op_times(compute, memory, overhead, total, compute > memory)
    plain = list(map(OpTime, compute, memory, overhead, total, compute > memory))
    assert fast == plain and [repr(t) for t in fast] == [repr(t) for t in plain]
    for f, p in zip(fast, plain):
        assert {name: type(value) for name, value in vars(f).items()} == \
            {name: type(value) for name, value in vars(p).items()}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast[0].time_s = 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=8))
def test_the_worst_time_of_a_point_is_np_max(values):
    """The check reads only whether the worst time is finite (and prints it when not): NaN wins, else the largest."""
    scalars = get_worst_time([np.float64(v) for v in values])
    arrays = get_worst_time([np.asarray([v]) for v in values])
    plain = float(np.max([np.max(np.float64(v)) for v in values]))
    assert type(scalars) is float
    if math.isnan(plain):
        assert math.isnan(scalars) and math.isnan(arrays)
    else:
        assert scalars == arrays == plain


@pytest.mark.parametrize("options", [{}, {"drafter": "eagle", "k": 4}, {"drafter": "medusa", "k": 3},
                                     {"drafter": "self", "draft_kv_budget": 512}, {"speculative": False}])
def test_the_memory_fit_keeps_the_steps_own_numbers(options):
    """The scenario's fit is the step's with the usable memory as capacity and a drafter's share added."""
    scenario = build_scenario("h100", "llama-3.1-8b", 8, 4096, **options)
    fit = scenario.get_memory_fit(k=3)
    plain = get_memory_fit(scenario.hardware, scenario.model, scenario.workload, 4, scenario.batch,
                           scenario.context_tokens)
    assert fit.capacity_bytes == scenario.usable_memory_bytes
    assert np.array_equal(fit.activation_bytes, plain.activation_bytes)
    drafter = scenario.drafter.kind if scenario.drafter is not None else None
    if drafter != "self":
        assert np.array_equal(fit.kv_cache_bytes, plain.kv_cache_bytes) or drafter == "model"
    if drafter in (None, "self"):
        assert fit.weight_bytes == plain.weight_bytes
    else:
        assert np.all(fit.weight_bytes > plain.weight_bytes)


def test_dtype_names_are_answered_as_before_once_kept():
    for name in ("bf16", "BFloat16 ", "float8_e4m3fn", "int4", "FP32"):
        first = normalize_dtype(name)
        assert normalize_dtype(name) == first == normalize_dtype(name.strip().lower())
        assert _NORMALIZED[name] == first  # kept: the fast path is the one taken
    for _ in range(2):  # an unknown name is refused every time, never kept
        with pytest.raises(UnitError, match="unknown dtype 'bf17'"):
            normalize_dtype("bf17")


def test_an_engine_copies_its_timing_only_when_the_base_changes():
    """A datasheet is the same for every step (the engine's model is kept); a measured profile reads each step's
    working set (a copy with the new base, as `dataclasses.replace` made it)."""
    model, workload = load_model("llama-3.1-8b"), Workload(batch=1, context_tokens=0)
    ops = get_step_ops(model, workload, 1, batch=8, context_tokens=4096)
    engine = resolve_engine("vllm-v1")
    datasheet = with_engine(DatasheetTiming.expected(load_hardware("h100")), engine)
    assert datasheet.for_step(ops) is datasheet and datasheet.with_co_resident(1e9) is datasheet
    cpu = apply_calibration(load_hardware("cpu"), str(PROFILE))[0]
    measured = with_engine(get_timing_model(cpu), engine)
    stepped = measured.for_step(ops)
    assert stepped.base is not measured.base and stepped == dataclasses.replace(measured,
                                                                                base=measured.base.for_step(ops))


ENGINES = [name for name in list_engines() if not load_engine(name).is_ideal]


@settings(max_examples=300, deadline=None)
@given(engine=st.sampled_from(ENGINES), role=st.sampled_from(ROLES), prices_launch=st.booleans(),
       batch=st.integers(1, 4096), new_tokens=st.integers(1, 9000), layers=st.integers(1, 128),
       gpu_time_s=st.one_of(st.floats(0.0, 10.0), st.just(math.inf), st.just(math.nan)),
       as_float64=st.booleans(), per_token_s=st.sampled_from([None, 1.3e-7]))
def test_a_points_engine_time_is_the_array_paths(engine, role, prices_launch, batch, new_tokens, layers, gpu_time_s,
                                                 as_float64, per_token_s):
    """Launch + exposed host at one point, on Python floats: the array path's numbers over a grid of one, bit for bit,
    for every engine, role, overlap and launch pricing (NaN where the array path gives NaN); a host cost per token
    too, which no shipped engine has."""
    spec = load_engine(engine)
    if per_token_s is not None:
        spec = spec.model_copy(update={"host": spec.host.model_copy(update={"per_token_s": per_token_s})})
    timing = dataclasses.replace(with_engine(DatasheetTiming.expected(load_hardware("h100")), spec), role=role,
                                 prices_launch=prices_launch)
    b, q = (np.int64(batch), np.float64(new_tokens)) if as_float64 else (batch, new_tokens)
    with np.errstate(invalid="ignore"):
        point = get_engine_step_s(timing, layers, b, q, np.float64(gpu_time_s))
        grid = get_engine_step_s(timing, layers, np.asarray([batch]), np.asarray([new_tokens]),
                                 np.asarray([gpu_time_s]))
    assert type(point) is np.float64 and grid.shape == (1,)
    assert point.tobytes() == grid[0].tobytes() or (math.isnan(point) and math.isnan(grid[0]))
