"""Charts of the model's answers. Every `plot_*` function returns a matplotlib Figure; every chart's numbers come
from a `get_*_data` function of the same module that computes them from a Scenario without drawing.

matplotlib is imported inside the drawing code (never at module import), so nothing on the `predict` path pulls it
in. Figures are built with the object-oriented API on an Agg canvas (no pyplot, no global figure state): save them
with `fig.savefig(path)`, or show them in a notebook after `%matplotlib inline`.

Each chart takes a `Scenario` (`rooflinesim.scenario.builder.build_scenario`) or the same names and options as `predict`,
and an optional `ax` to draw into an existing axes (the function then returns that axes' figure).

| module | function | shows |
|---|---|---|
| `roofline` | `plot_roofline` | the roofline of a device (memory and compute ceilings per dtype, measured ceilings of a profile) with prefill, decode and verify steps placed on it |
| `speedup` | `plot_speedup_map` | best speculative speedup over batch x context, the speedup = 1 break-even contour, best k per cell |
| `speedup` | `plot_speedup_vs_k` | speedup vs draft length for several acceptance rates, step model beside Leviathan's closed form |
| `breakdown` | `plot_step_breakdown` | one step's expected time vs context, stacked by what dominates each op |
| `validation` | `plot_validation` | predicted vs measured step times and speedups from a `rooflinesim validate` report |
| `acceptance_validation` | `plot_acceptance_validation` | measured vs predicted speculative speedup on real acceptance, and where an iteration's time goes, from an `acceptance validate` report |
| `serve` | `plot_serve` | latency-throughput curve of each speculation policy under load, and where speculation stops paying |
| `serve_validation` | `plot_serve_validation` | a measured serving loop's TTFT / TPOT against the simulator's, from a `rooflinesim validate --serve` report |
"""

from .acceptance_validation import get_acceptance_validation_data, plot_acceptance_validation
from .breakdown import get_breakdown_data, get_step_breakdown, plot_step_breakdown
from .common import BREAKDOWN_COMPONENTS, COLORS, get_measured_ceilings, get_scenario, save_chart
from .roofline import get_roofline_data, plot_roofline
from .speedup import get_speedup_map_data, get_speedup_vs_k_data, plot_speedup_map, plot_speedup_vs_k
from .serve import get_serve_data, plot_serve
from .serve_validation import get_serve_validation_data, load_serve_validation_report, plot_serve_validation
from .validation import load_validation_report, plot_validation

__all__ = [
    "plot_roofline", "plot_speedup_map", "plot_speedup_vs_k", "plot_step_breakdown", "plot_validation", "plot_serve",
    "get_serve_data", "plot_acceptance_validation", "get_acceptance_validation_data",
    "plot_serve_validation", "get_serve_validation_data", "load_serve_validation_report",
    "get_roofline_data", "get_speedup_map_data", "get_speedup_vs_k_data", "get_breakdown_data", "get_step_breakdown",
    "get_measured_ceilings", "get_scenario", "save_chart", "load_validation_report", "BREAKDOWN_COMPONENTS", "COLORS",
]
