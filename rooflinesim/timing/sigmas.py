"""How far to trust a measured profile's op times: relative 1-sigma errors per op family and shared by a step, from
what calibration measured (numpy only). `MeasuredTiming` holds one set per dtype; `step.get_rel_sigma` combines them
over a step (docs/calibration.md, "How far to trust a number")."""

from __future__ import annotations

import numpy as np

from ..specs.measured import DtypeProfile
from .base import RelativeSigmas
from .linear_tables import LinearModel, get_shape_loo_error

#: (p90 - p10) of a normal distribution, the median of |x| and the expected range of three draws, in sigmas: how
#: the spreads, median residuals and the three-point drift a profile stores become standard errors
SPREAD_SIGMAS = 2.5631
MEDIAN_ABS_SIGMAS = 0.6745
RANGE3_SIGMAS = 1.6926


def get_profile_sigmas(prof: DtypeProfile, linear: LinearModel, drift: float) -> RelativeSigmas:
    """Relative 1-sigma errors of one dtype's op times, from what calibration measured.

    Per op family, sqrt(noise^2 / runs + fit^2): *noise* is the per-call spread (p90 - p10 over median, / 2.563),
    what a step timed a few times varies by, narrowed by pooling `runs` calibrations (`calibrate --merge`); *fit*
    is how well the family's model reproduces points it was not fitted to or fitted loosely (median |residual| /
    0.6745): for linears the leave-one-shape-out error of the tables, for attention and the elementwise ops their
    fits' residuals. Shared by the whole step: the run's drift (range of the three reference measurements / 1.69,
    narrowed by runs) and the whole-decoder fit residual (the in-model scale and dispatch overheads; over the
    mid-size decoders where the profile stores it, as the tiny dispatch-bound ones are not models anyone prices). Profiles
    written before these residuals were stored get them derived from the tables and fits they do carry.
    """
    r = prof.residuals
    runs = prof.runs or 1
    spreads = [x for t in prof.linear for x in t.spread]
    linear_spread = r.get("linear_table_median_spread", float(np.median(spreads)) if spreads else 0.0)
    loo = r.get("linear_shape_loo_median_abs_rel")
    if loo is None:
        loo = get_shape_loo_error(linear)

    def noise(spread: float) -> float:
        return float(spread / SPREAD_SIGMAS / np.sqrt(runs))

    def family(spread: float, residual: float) -> float:
        return float(np.hypot(noise(spread), residual / MEDIAN_ABS_SIGMAS))

    attention = max((f.median_abs_rel_residual for f in prof.attention.values()), default=0.0)
    elementwise = float(np.median([f.median_abs_rel_residual for f in prof.elementwise.values()])) \
        if prof.elementwise else 0.0
    linear_sigma = family(linear_spread, loo)
    by_family = {
        "linear": linear_sigma,
        "attention": family(r.get("attention_median_spread", linear_spread), attention),
        "elementwise": family(r.get("elementwise_median_spread", linear_spread), elementwise),
        "other": linear_sigma,  # priced from the fitted roofline of the linears
        "cache": 1.0,  # its part is already the step's 1-sigma seconds (`StepCost.priced_time_s`)
    }
    decoder = r.get("decoder_fit_median_abs_rel_blocks", r.get("decoder_fit_median_abs_rel", 0.0))
    shared = float(np.hypot(abs(drift) / RANGE3_SIGMAS / np.sqrt(runs), decoder / MEDIAN_ABS_SIGMAS))
    noise_by_family = {
        "linear": noise(linear_spread), "other": noise(linear_spread),
        "attention": noise(r.get("attention_median_spread", linear_spread)),
        "elementwise": noise(r.get("elementwise_median_spread", linear_spread)),
    }
    return RelativeSigmas(by_family, shared, noise_by_family)


__all__ = ["get_profile_sigmas", "SPREAD_SIGMAS", "MEDIAN_ABS_SIGMAS", "RANGE3_SIGMAS"]
