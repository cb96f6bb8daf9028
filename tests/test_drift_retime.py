"""Drift found during a calibration is re-timed within the budget (calibrate.drift): the samples of the jobs that ran
between off-speed reference timings are replaced, the rest kept; no timing is asserted."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rooflinesim.calibrate.measure.drift import DriftWatch, retime_affected
from rooflinesim.calibrate.fitting.measurements import Results, Timing


@dataclass(frozen=True)
class Key:
    name: str


@dataclass
class Job:
    key: Key
    value: float

    def run(self) -> Timing:
        return Timing((self.value, self.value))


def _run(refs_between, jobs_per_segment=2, values=None):
    """A fake run: the reference at each checkpoint, `jobs_per_segment` jobs between checkpoints (each key twice, in
    two segments), each job's samples 1.0 (or 3.0 while the reference is slow)."""
    watch = DriftWatch(every=jobs_per_segment)
    results = {"fp32": Results()}
    watch.checkpoint(refs_between[0])
    n = 0
    for ref in refs_between[1:]:
        slow = ref > 1.2
        for _ in range(jobs_per_segment):
            job = Job(Key(f"k{n % 3}"), 1.0)
            first = len(results["fp32"].samples.get(job.key, ()))
            timing = Timing((3.0, 3.0)) if slow else job.run()
            results["fp32"].add(job.key, timing)
            watch.record("fp32", job, 0.1, first, 2)
            n += 1
        watch.checkpoint(ref)
    return watch, results


def test_segments_bounded_by_an_off_speed_reference_are_affected():
    watch, _ = _run([1.0, 1.0, 1.5, 1.0, 1.0])
    assert watch.affected() == [1, 2]  # the segments on either side of the slow reference
    assert watch.deviation(0) == 0.0


def test_affected_samples_are_replaced_and_the_kept_drift_excludes_them():
    watch, results = _run([1.0, 1.6, 1.6, 1.0])
    before = {k: list(v) for k, v in results["fp32"].samples.items()}
    assert any(3.0 in v for v in before.values())
    done = retime_affected(watch, results, lambda job: job.run(), time_left_s=10.0, measure_reference=lambda: 1.0)
    assert done["retimed"] > 0 and done["left"] == 0
    after = results["fp32"].samples
    assert not any(3.0 in v for v in after.values())
    assert sum(len(v) for v in after.values()) == sum(len(v) for v in before.values())  # replaced, not added
    assert watch.kept_drift() < (1.6 - 1.0) / 1.0


def test_out_of_budget_segments_keep_their_samples():
    watch, results = _run([1.0, 1.6, 1.0])
    before = {k: list(v) for k, v in results["fp32"].samples.items()}
    done = retime_affected(watch, results, lambda job: job.run(), time_left_s=0.01, measure_reference=lambda: 1.0)
    assert done == {"segments": 0, "retimed": 0, "left": 4}
    assert results["fp32"].samples == before


def test_a_quiet_run_retimes_nothing():
    watch, results = _run([1.0, 1.05, 0.97, 1.02])
    assert watch.affected() == []
    assert retime_affected(watch, results, lambda job: job.run(), 10.0, lambda: 1.0)["retimed"] == 0
    assert watch.kept_drift() == pytest.approx((1.05 - 0.97) / 1.01)
