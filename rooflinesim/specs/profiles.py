"""Measured calibration profiles as files: load (any problem is a one-line SpecError), write atomically, and apply a
profile's measured block to another hardware spec. numpy / pyyaml only: this is on the `predict` path.

A profile is a HardwareSpec YAML (datasheet-like fields hold the *fitted effective* numbers) plus a `measured` block
(`rooflinesim.specs.measured.MeasuredProfile`); `rooflinesim.timing.MeasuredTiming` prices ops from it.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from ..fileio import write_text_atomic
from .base import check_spec_file, read_spec_text
from .registry import HARDWARE_KEYS, MODEL_KEYS, SpecError, load_spec_file, load_yaml
from .hardware import HardwareSpec


def load_profile(path: str | Path) -> HardwareSpec:
    """A measured profile from YAML; any problem (missing, truncated, corrupted, not a profile) is a SpecError."""
    if not isinstance(path, (str, os.PathLike)):
        raise SpecError(f"calibration profile must be a YAML file path, got {path!r}")
    if not str(path).strip():  # Path("") is the current folder
        raise SpecError(f"calibration profile must be a YAML file path, got {str(path)!r}")
    path = check_spec_file(Path(path), "calibration profile")
    try:
        spec = load_spec_file(path, HardwareSpec)
    except SpecError:
        if _is_model_file(path):  # say so, rather than the hardware schema's first complaint about a model
            raise SpecError(f"{path}: a model spec (or Hugging Face config), not a measured profile") from None
        raise
    if spec.measured is None:
        raise SpecError(f"{path}: not a measured profile (no 'measured' block); write one with 'rooflinesim calibrate'")
    return spec


def _is_model_file(path: Path) -> bool:
    """Whether a file that failed as a profile is a model file: model keys and no hardware key."""
    try:
        data = load_yaml(read_spec_text(path))
    except (yaml.YAMLError, SpecError, RecursionError):
        return False
    return isinstance(data, dict) and bool(MODEL_KEYS & set(data)) and not HARDWARE_KEYS & set(data)


def dump_profile_yaml(spec: HardwareSpec) -> str:
    data = spec.model_dump(mode="json", exclude_none=True)
    header = (
        "# Measured profile written by `rooflinesim calibrate`: the HardwareSpec schema with fitted effective\n"
        "# numbers, plus the `measured` block (provenance, fitted parameters, residuals, tables).\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, width=120)


def write_profile(spec: HardwareSpec, path: str | Path) -> Path:
    """Validate (round-trip through the schema) and write a profile atomically."""
    if spec.measured is None:
        raise ValueError("write_profile needs a spec with a measured block")
    text = dump_profile_yaml(spec)
    HardwareSpec.model_validate(yaml.safe_load(text))  # never write what cannot be read back
    return write_text_atomic(path, text)


def _matches(hw: HardwareSpec, base: str) -> bool:
    keys = {hw.name.lower(), *(a.lower() for a in hw.aliases)}
    return base.lower() in keys


def apply_calibration(hw_spec: HardwareSpec, path: str | Path | HardwareSpec) -> tuple[HardwareSpec, list[str]]:
    """`--hw NAME --calibration FILE`: NAME's spec with FILE's measured block (its datasheet roofline is kept).

    Warns when the profile was measured on a different device than NAME.
    """
    profile = path if isinstance(path, HardwareSpec) else load_profile(path)
    if profile.measured is None:
        raise SpecError(f"{profile.name}: not a measured profile (no 'measured' block)")
    measured = profile.measured
    warnings = []
    if not (_matches(hw_spec, measured.base_hardware) or hw_spec.name == profile.name
            or (hw_spec.measured is not None and hw_spec.measured.profile_name == measured.profile_name)):
        warnings.append(
            f"calibration profile {measured.profile_name} was measured on {measured.provenance.device_name} "
            f"({measured.base_hardware}), not on {hw_spec.name}: its measured times are applied as they are"
        )
    return hw_spec.model_copy(update={"measured": measured}), warnings


def get_host_cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """This machine's CPU model name, read from /proc/cpuinfo (never through torch: this is on the predict path);
    the platform's processor name where there is no /proc."""
    import platform

    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _get_host_cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The first CPU's feature flags from /proc/cpuinfo (x86 "flags", Arm "Features"); empty where there is none."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.lower().startswith(("flags", "features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


#: the widest x86 vector extension a CPU's flags name, widest first (torch's CPU kernels are built per level)
_X86_VECTOR_LEVELS = (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"))


def get_host_cpu_isa(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """This machine's widest x86 vector extension ('avx512', 'avx2', 'avx'), read from /proc/cpuinfo's flags; '' where
    there are no x86 flags. Two hosts may share a model name ("AMD EPYC" under a hypervisor is Zen 3 or Zen 4) and run
    different kernels: a profile of one does not describe the other."""
    flags = _get_host_cpu_flags(cpuinfo)
    return next((level for flag, level in _X86_VECTOR_LEVELS if flag in flags), "")


#: CPU flags (x86 /proc/cpuinfo "flags", Arm "Features") that mean bf16 dot products in hardware
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def host_cpu_has_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bf16 natively (avx512_bf16, amx_bf16; Arm's bf16). Elsewhere torch runs bf16 by
    converting to fp32: several times slower than fp32 (2-core Zen 3: 17 against 83 GFLOP/s at M = 512)."""
    return bool(_BF16_FLAGS & _get_host_cpu_flags(cpuinfo))


def get_host_notice(measured, host_cpu: str | None = None, host_isa: str | None = None) -> list[str]:
    """One line naming the device a profile's numbers describe, when it was measured on another host than this one
    (its recorded host CPU or vector extension differs); nothing when it is this machine's."""
    prov = measured.provenance
    here = host_cpu if host_cpu is not None else get_host_cpu_model()
    here_isa = host_isa if host_isa is not None else get_host_cpu_isa()
    # a profile measured before host_isa was recorded is compared by model name only, and named without one
    recorded = prov.host_isa is not None
    if prov.host_cpu.strip() == here.strip() and (not recorded or prov.host_isa == here_isa):
        return []
    there_label = f"{prov.host_cpu}, {prov.host_isa}" if recorded and prov.host_isa else prov.host_cpu
    here_label = f"{here}, {here_isa}" if recorded and here_isa else here
    return [f"profile {measured.profile_name} describes {prov.device_name} ({prov.device_kind}, {prov.threads} threads, "
            f"host {there_label}, measured {prov.date[:10]}), not this machine ({here_label}): its times are that "
            "device's"]


__all__ = ["load_profile", "dump_profile_yaml", "write_profile", "apply_calibration", "get_host_cpu_model",
           "get_host_cpu_isa", "get_host_notice", "host_cpu_has_bf16"]
