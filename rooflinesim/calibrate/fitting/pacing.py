"""Pacing a calibration run against its budget while it measures: run, hurry (fewer calls) or skip the next job.
`budget` sizes the plan before the run; this decides, job by job, what a run that falls behind does."""

from __future__ import annotations


#: a `--quick` run that has already cut its calls skips configurations only once it would otherwise overrun its
#: budget this many times over: under two or three busy neighbours on a 2-core VM (CPU pressure 98 %) the skipping
#: took 151 configurations out of one run and none out of the next, so successive runs fitted different unknowns
QUICK_SKIP_STRETCH = 2.0


def budget_action(now_s: float, deadline_s: float, left_s: float, essential_left_s: float, job_s: float,
                  essential: bool, slowdown: float, hurry_first: bool, hurried: bool, started_s: float = 0.0) -> str:
    """What a run that may be behind its budget does with its next job: 'run' it, 'hurry' (run it, and everything
    from here on with fewer calls) or 'skip' it. `left_s` / `essential_left_s`: the expected seconds of all / the
    essential jobs not yet run (this one in `left_s`, not in `essential_left_s`); `slowdown`: measured over expected
    so far. Without `hurry_first`, a non-essential job is skipped as soon as finishing the essential ones would
    overrun `deadline_s`, and the rest hurry only when even those would. `hurry_first` (--quick): every configuration
    gets fewer calls as soon as the whole rest would overrun, and a non-essential one is skipped only past a deadline
    QUICK_SKIP_STRETCH times as far from `started_s`, so that runs time the same configurations; its `slowdown` may
    be below 1 (0 before any job ran): a probe taken during a stall expected 47 s of a plan that took 20, and
    skipped 78 configurations on that estimate."""
    slowdown = slowdown if hurry_first else max(slowdown, 1.0)
    if hurry_first and not hurried and now_s + left_s * slowdown > deadline_s:
        return "hurry"
    skip_deadline_s = started_s + (deadline_s - started_s) * QUICK_SKIP_STRETCH if hurry_first else deadline_s
    if not essential and now_s + (essential_left_s + job_s) * slowdown > skip_deadline_s:
        return "skip"
    late = now_s + (essential_left_s + job_s) * slowdown > deadline_s
    return "hurry" if late and not hurried else "run"


__all__ = ["QUICK_SKIP_STRETCH", "budget_action"]
