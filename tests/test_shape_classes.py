"""Weight-shape classes in the linear tables' blend (`timing.linear_tables`): a shape whose features are not multiples
of the profile's alignment is priced from calibrated shapes of its own class, where the fit found such classes."""

from pathlib import Path

import numpy as np
import pytest

from rooflinesim.specs.measured import LinearTable
from rooflinesim.timing.linear_tables import (
    SHAPE_CLASS_PENALTY_LOG2SQ, SHAPE_KERNEL_LOG2, LinearModel, choose_shape_alignment, get_small_m_loo_error,
)

PEAK, BW = 100e9, 25e9
M = (1, 2, 4, 8, 16, 64)
ALIGNED = (512, 768, 1024, 1536, 2048)
UNALIGNED = (384, 640, 896, 1152, 1664)  # multiples of 128, not of 256


def _growth(k, n, m, classes: bool) -> float:
    """Synthetic t(M) / t(1): x1.3 by M = 4 for a shape with a feature that is a multiple of 256, x2.5 for one with
    neither (as MKL's fp32 kernels on the Intel Xeon, in the extreme); `classes` False: x1.6 for every shape."""
    top = (1.3 if (k % 256 == 0 or n % 256 == 0) else 2.5) if classes else 1.6
    return float(np.interp(np.log(m), np.log([1, 4, 64]), [1.0, top, top]))


def _tables(shapes, classes: bool) -> tuple[LinearTable, ...]:
    return tuple(LinearTable(in_features=k, out_features=n, m=M,
                             time_s=tuple(k * n * 4.0 / BW * _growth(k, n, m, classes) for m in M),
                             spread=(0.0,) * len(M)) for k, n in shapes)


SHAPES = tuple((k, n) for k in ALIGNED[::2] + UNALIGNED[::2] for n in ALIGNED[1::2] + UNALIGNED[1::2])


def _model(classes: bool, alignment: int = 0, shapes=SHAPES) -> LinearModel:
    return LinearModel.from_tables(_tables(shapes, classes), PEAK, BW, 0.0, 4.0, alignment)


def test_a_shape_of_the_other_class_weighs_by_the_penalty():
    """Golden: two calibrated shapes at the same log2 distance from (640, 640), one of each class."""
    model = _model(True, 256, shapes=((512, 512), (768, 768), (704, 704)))
    d2_512, d2_768, d2_704 = [(np.log2(640) - np.log2(x)) ** 2 * 2 for x in (512, 768, 704)]
    w = model.get_shape_weights(640, 640)
    s2 = 2 * SHAPE_KERNEL_LOG2 ** 2
    assert w == pytest.approx([np.exp(-(d2_512 + 2 * SHAPE_CLASS_PENALTY_LOG2SQ) / s2),
                               np.exp(-(d2_768 + 2 * SHAPE_CLASS_PENALTY_LOG2SQ) / s2), np.exp(-d2_704 / s2)])
    w0 = _model(True, 0, shapes=((512, 512), (768, 768), (704, 704))).get_shape_weights(640, 640)
    assert w0 == pytest.approx([np.exp(-d2_512 / s2), np.exp(-d2_768 / s2), np.exp(-d2_704 / s2)])


def test_an_uncalibrated_shape_takes_its_own_class_growth():
    """(1216, 1856) and (1280, 1792): neither calibrated. With the classes each is priced at its own class's growth
    (within 5 %); by size alone both get a blend of the two."""
    by_class, by_size = _model(True, 256), _model(True, 0)
    for (k, n), growth in (((1216, 1856), 2.5), ((1280, 1792), 1.3)):
        t1 = k * n * 4.0 / BW
        assert float(by_class.time_s(4, k, n)) / t1 == pytest.approx(growth, rel=0.05)
        assert abs(float(by_size.time_s(4, k, n)) / t1 - growth) > 0.1 * growth
    assert float(by_class.time_s(1, 1216, 1856)) == pytest.approx(float(by_size.time_s(1, 1216, 1856)), rel=1e-6)


def test_the_fit_finds_the_class_that_the_tables_show():
    """256, not 128 (384 and 640 would count as aligned) nor 512 (768 and 1536 would not)."""
    alignment, by_size, by_class = choose_shape_alignment(_model(True))
    assert alignment == 256
    assert by_class < 0.5 * by_size
    assert get_small_m_loo_error(_model(True, 256)) == pytest.approx(by_class)


@pytest.mark.parametrize("seed", range(20))
def test_without_classes_the_blend_stays_by_size(seed):
    """Tables whose growth is the same for every shape, with +-5 % random noise per point (seeded), keep alignment 0:
    a class is kept only where it lowers the leave-one-shape-out error by SHAPE_ALIGNMENT_MIN_GAIN. (Noise chosen to
    look like a class, as Hypothesis once drew, is a class as far as any table can tell.)"""
    rng = np.random.default_rng(seed)
    noisy = tuple(t.model_copy(update={"time_s": tuple(x * (1 + rng.uniform(-0.05, 0.05)) for x in t.time_s)})
                  for t in _tables(SHAPES, classes=False))
    alignment, by_size, by_class = choose_shape_alignment(LinearModel.from_tables(noisy, PEAK, BW, 0.0, 4.0))
    assert alignment == 0 and by_class == by_size


def test_a_profile_carries_its_alignment_into_the_prices():
    from rooflinesim.specs.profiles import load_profile
    from rooflinesim.timing.measured import MeasuredTiming

    hw = load_profile(Path(__file__).parents[1] / "calibrate" / "cpu-intel-xeon-2c" / "cpu-intel-xeon-2c.yaml")
    prof = hw.measured.dtypes["fp32"]
    assert prof.linear_shape_alignment in (0, 128, 256, 512)
    priced = {}
    for alignment in (0, 256):
        dtypes = {"fp32": prof.model_copy(update={"linear_shape_alignment": alignment})}
        other = hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": dtypes})})
        priced[alignment] = float(MeasuredTiming.from_spec(other).get_linear_time_s(4, 576, 1664, "fp32"))
    assert priced[0] != pytest.approx(priced[256], rel=1e-3)


def test_fit_dtype_records_the_alignment_and_both_errors():
    """fit_dtype chooses the class from the run's own tables and stores what it chose and why."""
    from types import SimpleNamespace

    from rooflinesim.calibrate.fitting.fit_profile import _fit_linear
    from rooflinesim.calibrate.fitting.measurements import LinearKey, Results, Timing
    from rooflinesim.calibrate.fitting.plan import WeightShape

    results = Results()
    for k, n in SHAPES:
        for m in M:
            results.add(LinearKey(k, n, m), Timing((k * n * 4.0 / BW * _growth(k, n, m, True),) * 3))
    plan = SimpleNamespace(all_linear_shapes=tuple(WeightShape(k, n) for k, n in SHAPES), overhead_shapes=())
    tables, roof, _ = _fit_linear("fp32", results, plan, BW)
    alignment, _, _ = choose_shape_alignment(LinearModel.from_tables(tables, roof.peak_flops_per_s, BW,
                                                                     roof.overhead_s, 4.0))
    assert alignment == 256


def test_every_calibration_level_times_shapes_of_both_classes():
    """Without shapes of each class no fit can tell them apart (the minimal rung excepted: three shapes)."""
    from types import SimpleNamespace

    from rooflinesim.calibrate.fitting.budget import get_level_plan

    cpu = SimpleNamespace(is_cuda=False)
    for level in ("full", "medium", "lean", "steady", "quick"):
        shapes = get_level_plan(level, ("fp32",), cpu).linear_shapes
        unaligned = [s for s in shapes if s.in_features % 256 and s.out_features % 256]
        aligned = [s for s in shapes if not (s.in_features % 256 and s.out_features % 256)]
        assert len(unaligned) >= 4 and len(aligned) >= 4, level
        heads = [s for s in shapes if s.out_features >= 16384]  # a vocabulary's head, of each kind
        assert {s.out_features % 256 == 0 for s in heads} == {True, False}, level
