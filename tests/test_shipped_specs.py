"""Every shipped hardware and model YAML loads, names its sources, and agrees with what is published.

The files are parsed with the registry's YAML loader (which reads `3.35e12` as a number) and validated with the
pydantic models directly, so these checks do not depend on the registry's name resolution. Each check is parametrised per file, so a failure names the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rooflinesim.specs.registry import load_yaml
from rooflinesim.specs.hardware import HardwareSpec
from rooflinesim.specs.model import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
HARDWARE_FILES = sorted((ROOT / "hardware").glob("*.yaml"))
MODEL_FILES = sorted((ROOT / "models").glob("*.yaml"))

#: Devices and models the project promises to ship, by the short name users type.
REQUIRED_HARDWARE_ALIASES = (
    "a100", "a100-40gb", "a100-pcie", "h100", "h100-sxm", "h100-pcie", "h200", "b200", "l40s", "l4", "a10g",
    "rtx4090", "4090", "mi300x", "tpu-v5e", "v5e", "cpu",
)
REQUIRED_MODEL_ALIASES = (
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b",
    "llama-3.2-3b", "mistral-7b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-72b", "tiny-llama-123m", "tiny-draft-2l",
)


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _load(path: Path, spec_type):
    data = load_yaml(path.read_text())
    assert isinstance(data, dict), f"{path.name}: top level must be a mapping"
    return spec_type.model_validate(data)


def _hardware(name: str) -> HardwareSpec:
    for path in HARDWARE_FILES:
        spec = _load(path, HardwareSpec)
        if name in spec.aliases:
            return spec
    raise AssertionError(f"no shipped hardware file has alias {name!r}")


def _names_of(path: Path) -> list[str]:
    """The keys a user can type for a file: its stem, its name and its aliases, lower-cased."""
    data = load_yaml(path.read_text())
    return [k.lower() for k in [path.stem, str(data["name"]), *map(str, data.get("aliases") or [])]]


def test_files_are_shipped():
    assert len(HARDWARE_FILES) >= 14
    assert len(MODEL_FILES) >= 14


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=_ids(HARDWARE_FILES))
def test_hardware_file_loads_with_sources(path: Path):
    spec = _load(path, HardwareSpec)
    assert spec.aliases, f"{path.name}: give at least one short alias"
    for key in ("peak_flops_per_s", "memory_bandwidth_bytes_per_s", "memory_capacity_bytes"):
        assert spec.sources.get(key, "").strip(), f"{path.name}: sources.{key} is missing"
    for key in ("last_level_cache_bytes", "efficiency"):
        assert spec.sources.get(key, "").strip(), f"{path.name}: sources.{key} is missing"
    if spec.interconnect is not None:
        assert spec.sources.get("interconnect", "").strip(), f"{path.name}: sources.interconnect is missing"
    # Every source key names a real field (catches typos such as 'memory_bandwith').
    unknown = set(spec.sources) - set(HardwareSpec.model_fields)
    assert not unknown, f"{path.name}: sources name unknown fields {sorted(unknown)}"


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=_ids(HARDWARE_FILES))
def test_hardware_numbers_are_plausible(path: Path):
    """Catches unit slips (GB/s written as TB/s, GiB vs bytes) rather than checking datasheets."""
    spec = _load(path, HardwareSpec)
    peaks = spec.peak_flops_per_s
    if spec.kind == "cpu":
        assert 1e9 <= spec.memory_bandwidth_bytes_per_s <= 1e12
        assert all(1e9 <= p <= 1e14 for p in peaks.values())
    elif spec.kind == "asic":  # an SRAM-resident multi-chip system priced as one device: aggregate rates
        assert 1e13 <= spec.memory_bandwidth_bytes_per_s <= 1e17
        assert all(1e13 <= p <= 1e18 for p in peaks.values())
        assert 0 < spec.efficiency.layer_latency_s < 1e-3
    else:
        assert 1e11 <= spec.memory_bandwidth_bytes_per_s <= 2e13
        assert all(1e12 <= p <= 2e16 for p in peaks.values())
    assert 1e9 <= spec.memory_capacity_bytes <= 1e12
    assert spec.last_level_cache_bytes <= 1e9
    if spec.interconnect is not None:
        assert 1e9 <= spec.interconnect.bandwidth_bytes_per_s_per_direction <= 2e12
        assert spec.interconnect.latency_s < 1e-4
    # Lower precision is never slower than higher precision on the same device.
    order = ["fp32", "tf32", "bf16", "fp8", "int8", "int4"]
    present = [peaks[d] for d in order if d in peaks]
    assert present == sorted(present), f"{path.name}: peaks should not fall as precision drops: {peaks}"
    if "bf16" in peaks and "fp16" in peaks:
        assert peaks["bf16"] == peaks["fp16"]


@pytest.mark.parametrize("path", MODEL_FILES, ids=_ids(MODEL_FILES))
def test_model_file_loads(path: Path):
    spec = _load(path, ModelSpec)
    assert spec.aliases, f"{path.name}: give at least one short alias"
    assert spec.sources.get("shapes", "").strip(), f"{path.name}: sources.shapes is missing"
    if spec.published_params is not None:
        assert spec.sources.get("published_params", "").strip(), f"{path.name}: sources.published_params is missing"
    assert spec.q_dim % spec.head_dim_resolved == 0
    for alias in spec.aliases:
        assert alias == alias.lower() and " " not in alias, f"{path.name}: alias {alias!r} is not lower-case kebab"


@pytest.mark.parametrize("path", MODEL_FILES, ids=_ids(MODEL_FILES))
def test_model_params_match_published(path: Path):
    spec = _load(path, ModelSpec)
    if spec.published_params is None:
        pytest.skip(f"{path.name}: no published parameter count (synthetic model)")
    error = spec.params / spec.published_params - 1
    assert abs(error) <= 0.01, (
        f"{path.name}: derived {spec.params:,} params vs published {spec.published_params:,.0f} ({error:+.2%}); "
        "check the config values"
    )


@pytest.mark.parametrize("kind, paths", [("hardware", HARDWARE_FILES), ("models", MODEL_FILES)])
def test_names_and_aliases_are_unique(kind: str, paths: list[Path]):
    """A name, alias or file stem typed by a user must resolve to exactly one file."""
    owner: dict[str, str] = {}
    clashes = []
    for path in paths:
        for key in set(_names_of(path)):
            if key in owner and owner[key] != path.name:
                clashes.append(f"{key!r} in {owner[key]} and {path.name}")
            owner.setdefault(key, path.name)
    assert not clashes, f"{kind}: ambiguous names: {clashes}"


def test_required_aliases_are_shipped():
    hardware = {a for p in HARDWARE_FILES for a in _load(p, HardwareSpec).aliases}
    models = {a for p in MODEL_FILES for a in _load(p, ModelSpec).aliases}
    assert not set(REQUIRED_HARDWARE_ALIASES) - hardware
    assert not set(REQUIRED_MODEL_ALIASES) - models


def test_first_alias_is_the_short_name():
    assert _hardware("h100").aliases[0] == "h100"
    assert _hardware("4090").aliases[0] == "rtx4090"
    assert _hardware("v5e").aliases[0] == "tpu-v5e"
    assert _hardware("cpu").kind == "cpu"


# Golden per-device figures: ridge point = dense bf16 peak / memory bandwidth.
@pytest.mark.parametrize(
    "alias, ridge",
    [
        ("a100", 312e12 / 2.039e12),  # ~153 FLOP/byte
        ("h100", 989e12 / 3.35e12),  # ~295 FLOP/byte
    ],
)
def test_golden_bf16_ridge_points(alias: str, ridge: float):
    spec = _hardware(alias)
    assert spec.get_ridge_point_flops_per_byte("bf16") == pytest.approx(ridge, rel=1e-3)


def test_golden_ridge_rounded_values():
    assert round(_hardware("a100").get_ridge_point_flops_per_byte("bf16")) == 153
    assert round(_hardware("h100-sxm").get_ridge_point_flops_per_byte("bf16")) == 295


def test_golden_device_facts():
    """Spot checks of datasheet facts that are easy to get wrong."""
    a100 = _hardware("a100")
    assert "fp8" not in a100.peak_flops_per_s  # Ampere has no FP8
    h100 = _hardware("h100")
    assert "int4" not in h100.peak_flops_per_s  # Hopper dropped INT4 tensor cores
    assert h100.peak_flops_per_s["fp8"] == pytest.approx(2 * h100.peak_flops_per_s["bf16"], rel=0.01)
    h200 = _hardware("h200")
    assert h200.peak_flops_per_s == h100.peak_flops_per_s  # same compute, faster memory
    # capacities in the units the vendor means: "80 GB" HBM is 80 GiB (nvidia-smi: 81920 MiB on A100, 81559 MiB on H100)
    assert _hardware("a100").memory_capacity_bytes == 81920 * 2**20
    assert _hardware("a100-40gb").memory_capacity_bytes == 40960 * 2**20
    assert _hardware("h100").memory_capacity_bytes == 81559 * 2**20
    assert h200.memory_capacity_bytes == 143771 * 2**20  # "141 GB" is 140.4 GiB as the driver reports it
    assert _hardware("mi300x").memory_capacity_bytes == 192 * 2**30
    for alias in ("l40s", "l4", "rtx4090"):  # Ada: int4 tensor = 2x int8 dense
        peaks = _hardware(alias).peak_flops_per_s
        assert peaks["int4"] == pytest.approx(2 * peaks["int8"], rel=0.01), alias
    assert _hardware("rtx4090").peak_flops_per_s["bf16"] == pytest.approx(165.2e12, rel=0.01)
    assert set(_hardware("v5e").peak_flops_per_s) == {"bf16", "int8"}
    assert _hardware("cpu").interconnect is None


def test_golden_model_facts():
    models = {p.stem: _load(p, ModelSpec) for p in MODEL_FILES}
    assert models["mistral-7b"].sliding_window_tokens == 4096
    assert models["mistral-7b"].max_context_tokens == 32768
    assert models["qwen2.5-0.5b"].tie_word_embeddings and models["qwen2.5-0.5b"].head_dim_resolved == 64
    for name in ("qwen2.5-7b", "qwen2.5-72b"):
        assert not models[name].tie_word_embeddings and models[name].head_dim_resolved == 128
    for name in ("qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-72b"):
        assert models[name].attention_bias
    for name in ("llama-3.2-1b", "llama-3.2-3b"):
        assert models[name].tie_word_embeddings
    # Llama-3.1-8B bf16 KV cache: 2 (K,V) x 32 layers x 8 heads x 128 dims x 2 bytes = 128 KiB per token.
    assert models["llama-3.1-8b"].get_kv_bytes_per_token("bf16") == 131072
    assert models["tiny-llama-123m"].published_params is None


def test_tpu_v5e_prices_fp32_at_its_bf16_peak_not_its_int8_peak():
    """Issue 11 item 5: v5e lists only bf16 and int8 peaks; fp32 matmuls run on the bf16 MXU path, never at the
    (twice as fast) int8 peak."""
    v5e = _load(ROOT / "hardware" / "tpu-v5e.yaml", HardwareSpec)
    for dtype in ("fp32", "tf32"):
        assert v5e.get_compute_dtype(dtype) == "bf16", dtype
        assert v5e.get_peak_flops_per_s(dtype) == v5e.peak_flops_per_s["bf16"], dtype


@pytest.mark.parametrize("path", HARDWARE_FILES, ids=_ids(HARDWARE_FILES))
def test_floating_point_compute_never_falls_back_to_an_integer_peak(path: Path):
    spec = _load(path, HardwareSpec)
    for dtype in ("fp32", "tf32", "bf16", "fp16", "fp8"):
        assert spec.get_compute_dtype(dtype) not in ("int8", "int4"), f"{path.name}: {dtype}"
