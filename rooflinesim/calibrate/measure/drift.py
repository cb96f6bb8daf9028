"""Drift during a calibration run, found and re-timed rather than only flagged (torch-free bookkeeping).

The drift reference (a cold-weight GEMV, `benchmarks.bandwidth.reference_gemv`) is timed at `checkpoints`
spread over the run: at the start, after every `every` jobs, and at the end. The jobs between two checkpoints form a
segment. A segment whose bounding reference times differ from the run's median reference by more than `tolerance`
ran while the machine was in another speed state (a neighbour's burst, a slow phase of bf16): its samples are
dropped and its configurations timed again at the end of the run, as long as the budget allows (the re-timed ones
form a segment of their own, bounded by one more reference time). The profile's drift is then that of the segments
it keeps; the raw drift and what was re-timed go into its notes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..fitting.measurements import DRIFT_FLAG


@dataclass
class Segment:
    jobs: list = field(default_factory=list)  # (dtype, job, expected s, first sample index, sample count)
    retimed: bool = False


@dataclass
class DriftWatch:
    every: int  # jobs between reference checkpoints
    tolerance: float = DRIFT_FLAG
    refs: list = field(default_factory=list)  # reference times (s), one per checkpoint
    segments: list = field(default_factory=lambda: [Segment()])
    _since: int = 0

    def checkpoint(self, reference_s: float) -> None:
        """A reference time; it closes the current segment (the first one opens the run)."""
        self.refs.append(float(reference_s))
        if len(self.refs) > 1:
            self.segments.append(Segment())
        self._since = 0

    def is_off(self, reference_s: float) -> bool:
        """Whether a new reference time is off the median of the run's references so far by more than the
        tolerance. Such a reading gets a second look before it condemns the two segments it bounds: the reference
        is 50 ms of calls, and on a shared CPU one neighbour's burst of that length moved it by 35 % while the jobs
        around it ran at speed (`calibrate --quick`, 2-core AMD EPYC: references of 0.47-0.48 ms with single
        readings of 0.63-0.64 ms between them)."""
        return bool(self.refs) and abs(reference_s / statistics.median(self.refs) - 1.0) > self.tolerance

    def record(self, dtype: str, job, expected_s: float, first: int, count: int) -> bool:
        """A job ran (its samples are `first`..`first + count - 1` of its key); True when a checkpoint is due."""
        self.segments[-1].jobs.append((dtype, job, expected_s, first, count))
        self._since += 1
        return self._since >= self.every

    def deviation(self, i: int) -> float:
        """How far segment i's bounding reference times are from the run's median (relative, the larger one)."""
        median = statistics.median(self.refs)
        bounds = self.refs[i:i + 2]
        return max(abs(r / median - 1.0) for r in bounds) if len(bounds) == 2 else 0.0

    def affected(self) -> list[int]:
        """Indices of the closed segments measured in another speed state."""
        return [i for i in range(len(self.refs) - 1) if self.deviation(i) > self.tolerance and self.segments[i].jobs]

    def kept_drift(self) -> float:
        """(max - min) / median of the references that bound the segments kept (not re-timed away)."""
        dropped = {i for i, s in enumerate(self.segments) if s.retimed}
        kept = sorted({j for i in range(len(self.refs) - 1) if i not in dropped for j in (i, i + 1)})
        refs = [self.refs[j] for j in kept] or self.refs
        return (max(refs) - min(refs)) / statistics.median(refs) if refs else 0.0


def take_reference(watch: DriftWatch, measure_reference) -> float:
    """A reference time for the next checkpoint: `measure_reference()` s, and when that is off (`DriftWatch.is_off`)
    the faster of it and a second reading, so that only a speed state that lasts condemns the segments around it."""
    first = measure_reference()
    return min(first, measure_reference()) if watch.is_off(first) else first


def retime_affected(watch: DriftWatch, results: dict, run_job, time_left_s: float, measure_reference,
                    slowdown: float = 1.0) -> dict:
    """Drop the samples of the affected segments that fit in `time_left_s` (their jobs' expected seconds times the
    run's `slowdown`) and time their jobs again; segments that do not fit keep their samples (and the flag).

    `results`: dtype -> measurements.Results; `run_job(job)` -> Timing; `measure_reference()` -> s. Returns the
    segments and jobs re-timed and the jobs left as they were."""
    chosen, cost, left = [], 0.0, 0
    for i in watch.affected():
        segment_s = sum(expected for _, _, expected, _, _ in watch.segments[i].jobs) * max(slowdown, 1.0)
        if cost + segment_s <= time_left_s:
            chosen.append(i)
            cost += segment_s
        else:
            left += len(watch.segments[i].jobs)
    drops: dict = {}
    for i in chosen:
        watch.segments[i].retimed = True
        for dtype, job, _, first, count in watch.segments[i].jobs:
            drops.setdefault((dtype, job.key), []).append((first, count))
    for (dtype, key), spans in drops.items():  # later spans first, so the earlier indices stay valid
        samples = results[dtype].samples[key]
        for first, count in sorted(spans, reverse=True):
            del samples[first:first + count]
    retimed = 0
    for i in chosen:
        for dtype, job, _, _, _ in watch.segments[i].jobs:
            results[dtype].add(job.key, run_job(job))
            retimed += 1
    if retimed:
        watch.checkpoint(measure_reference())
    return {"segments": len(chosen), "retimed": retimed, "left": left}


def retime_stalled(results: dict, jobs: dict, find_stalled, time_left_s: float, expected_s) -> int:
    """Time again the configurations `find_stalled(results[dtype])` names (a point far off its neighbours, which
    the reference between segments did not see), as far as `time_left_s` allows, replacing their samples.

    `jobs`: (dtype, key) -> job with `run()` -> Timing; `expected_s(dtype, key)`: its expected seconds (with the
    run's slowdown). Returns how many were re-timed; the fit leaves out those still stalled."""
    retimed, spent = 0, 0.0
    for dtype, res in results.items():
        for key in find_stalled(res):
            job = jobs.get((dtype, key))
            cost = expected_s(dtype, key)
            if job is None or spent + cost > time_left_s:
                continue
            res.samples[key] = list(job.run().samples)
            spent += cost
            retimed += 1
    return retimed
