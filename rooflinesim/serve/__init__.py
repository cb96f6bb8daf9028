"""Speculation under load: a request-level serving simulator on the step model (see engine.py for the scheduler,
pricing.py for how a mixed step is priced, policies.py for the speculation policies)."""

from .config import ServeConfig
from .engine import get_kv_capacity_blocks, simulate
from .metrics import ServeResult
from .policies import parse_policies, parse_policy
from .pricing import StepPricer
from .workload import LengthDistribution, Requests, generate_requests, load_trace

__all__ = ["ServeConfig", "ServeResult", "StepPricer", "LengthDistribution", "Requests", "generate_requests",
           "load_trace", "simulate", "parse_policy", "parse_policies", "get_kv_capacity_blocks"]
