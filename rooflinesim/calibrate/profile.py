"""Calibration-side names for profile files and the measured timing model (they live on the predict path, in
`rooflinesim.profiles`, `rooflinesim.fileio` and `rooflinesim.timing.measured`; nothing here imports torch)."""

from ..fileio import write_text_atomic
from ..specs.profiles import apply_calibration, dump_profile_yaml, load_profile, write_profile
from ..timing.linear_tables import SHAPE_KERNEL_LOG2, LinearModel, get_shape_loo_error
from ..timing.measured import ELEMENTWISE_FAMILY, MeasuredTiming

__all__ = [
    "MeasuredTiming", "LinearModel", "load_profile", "write_profile", "write_text_atomic", "apply_calibration",
    "dump_profile_yaml", "ELEMENTWISE_FAMILY", "SHAPE_KERNEL_LOG2", "get_shape_loo_error",
]
