"""The implementation a scenario prices (`specs.implementation`): resolved once here, with its warning."""

from __future__ import annotations

from ..errors import InputError
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec


def resolve_implementation_name(implementation) -> str:
    """The name (or YAML path) of the implementation a scenario prices (None: the reference decoder every calibration
    times); an unknown name is a one-line error that suggests close ones (`specs.implementation`)."""
    from ..specs.base import SpecError
    from ..specs.implementation import REFERENCE_IMPLEMENTATION, ImplementationSpec, load_implementation

    if implementation is None:
        return REFERENCE_IMPLEMENTATION
    if isinstance(implementation, ImplementationSpec):
        raise InputError("implementation must be a name or a YAML file path, not a spec object")
    if not isinstance(implementation, str):
        raise InputError(f"implementation must be a name such as 'hf', got {implementation!r}")
    try:
        spec = load_implementation(implementation)
    except SpecError as exc:
        raise InputError(str(exc)) from None
    return spec.name if implementation.strip().lower() in {spec.name, *map(str.lower, spec.aliases)} \
        else implementation


def resolve_implementation(implementation, hw_spec: HardwareSpec, model_spec: ModelSpec, warnings: list) -> str:
    """The implementation's name; the reference for a model with its own fitted terms (`calibrate --model`), which
    already carry what its implementation costs beyond the reference's prices (`warnings` says so)."""
    name = resolve_implementation_name(implementation)
    terms = (hw_spec.measured.provenance.model_terms or {}) if hw_spec.measured is not None else {}
    if name != "reference" and terms.get(model_spec.name):
        warnings.append(f"{model_spec.name} has its own fitted terms in profile {hw_spec.measured.profile_name} "
                        f"(calibrate --model), which carry its implementation's costs: --impl {name} is not added "
                        "on top of them")
        return "reference"
    return name
