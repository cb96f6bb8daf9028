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
    """The implementation's name. A model with its own fitted terms (`calibrate --model`) is priced with the
    implementation profile its terms sit on (`ModelTerms.priced_with`: the code that ran it), whatever is asked
    (`warnings` says so when another one was)."""
    name = resolve_implementation_name(implementation)
    terms = (hw_spec.measured.provenance.model_terms or {}) if hw_spec.measured is not None else {}
    by_dtype = terms.get(model_spec.name) or {}
    if by_dtype:
        priced_with = next(iter(by_dtype.values())).priced_with
        if implementation is not None and name != priced_with:
            warnings.append(f"{model_spec.name} has its own fitted terms in profile {hw_spec.measured.profile_name} "
                            f"(calibrate --model), which sit on the {priced_with} implementation's prices: it is "
                            f"priced that way, not with --impl {name}")
        return priced_with
    return name
