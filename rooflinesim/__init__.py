"""rooflinesim: roofline and performance-model simulator for LLM inference with speculative decoding.

Flat public API; see README.md for the data flow (specs -> ops -> roofline -> step -> speculative -> predict).
"""

from .pricing.predict import Prediction, predict
from .specs.registry import SpecError, list_hardware, list_models, load_hardware, load_model
from .specs.hardware import HardwareSpec
from .errors import InputError
from .specs.model import ModelSpec
from .specs.workload import Workload
from .units import parse_count

__version__ = "0.1.0"

__all__ = [
    "predict",
    "Prediction",
    "InputError",
    "SpecError",
    "load_hardware",
    "load_model",
    "list_hardware",
    "list_models",
    "HardwareSpec",
    "ModelSpec",
    "Workload",
    "parse_count",
]
