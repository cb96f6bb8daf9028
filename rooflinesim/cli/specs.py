"""list and show: the shipped specs and presets, and one spec with its derived numbers."""

from __future__ import annotations


from ..errors import InputError
from ..units import GIGA


def get_list_output(args) -> tuple[str, list[str]]:
    """What `list WHAT --json` prints: one object per shipped spec or preset, SI units (explore's /api/list too)."""
    import json

    from ..specs.registry import get_short_name, list_hardware, list_models

    if args.what == "hardware":
        rows = [{"name": get_short_name(hw), "full_name": hw.name, "aliases": list(hw.aliases),
                 "peak_flops_per_s_bf16": hw.get_peak_flops_per_s("bf16"),
                 "bandwidth_bytes_per_s": hw.memory_bandwidth_bytes_per_s,
                 "memory_capacity_bytes": hw.memory_capacity_bytes,
                 "ridge_point_flops_per_byte_bf16": hw.get_ridge_point_flops_per_byte("bf16")} for hw in list_hardware()]
    elif args.what == "models":
        rows = [{"name": get_short_name(m), "full_name": m.name, "aliases": list(m.aliases), "params": m.params,
                 "num_layers": m.num_layers, "hidden_size": m.hidden_size,
                 "num_attention_heads": m.num_attention_heads, "num_kv_heads": m.num_kv_heads,
                 "max_context_tokens": m.max_context_tokens} for m in list_models()]
    else:
        from ..acceptance.presets import list_presets

        rows = [{"name": p.name, "method": p.method, "target": p.target, "draft": p.draft, "task": p.task,
                 "shape": p.shape, "k": p.k, "temperature": p.temperature, "engine": p.engine,
                 "expected_tokens": p.to_measured().expected_tokens, "confidence": p.source.confidence,
                 "source_url": p.source.url} for p in list_presets()]
    return json.dumps(rows, indent=1, allow_nan=False), []


def cmd_list(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..specs.registry import get_short_name, list_hardware, list_models
    from ..units import format_bytes, format_count, format_rate

    if args.json:
        from .pricing import print_output

        return print_output(get_list_output(args))
    table = Table()
    if args.what == "acceptance":
        from .acceptance import print_presets

        return print_presets()
    if args.what == "engines":
        from ..specs.registry import list_engines
        from ..units import format_seconds
        from ..scenario.inputs import DEFAULT_ENGINE

        for column in ("name", "version", "graph / eager per kernel", "graphs up to", "host c + per seq", "overlap",
                       "steps", "admission"):
            table.add_column(column)
        for e in list_engines():
            launch, host, sched = e.launch, e.host, e.scheduling
            table.add_row(
                e.short_name + (" (default)" if e.short_name == DEFAULT_ENGINE else ""), e.version,
                "the hardware's own" if launch.use_hardware_overhead else
                f"{format_seconds(launch.kernel_s_graph)} / {format_seconds(launch.kernel_s_eager)}",
                "-" if e.is_ideal else f"batch {launch.graph_max_batch}",
                "-" if e.is_ideal else f"{format_seconds(host.constant_s)} + {format_seconds(host.per_sequence_s)}",
                "yes" if host.overlap else "no", sched.policy, sched.admission,
            )
    elif args.what == "hardware":
        for column in ("name", "aliases", "bf16/fp16 dense", "bandwidth", "memory", "ridge bf16 FLOP/B"):
            table.add_column(column)
        for hw in list_hardware():
            table.add_row(
                get_short_name(hw), ", ".join(hw.aliases[1:]) + f"  ({hw.name})",
                format_rate(hw.get_peak_flops_per_s("bf16"), "FLOP/s"),
                format_rate(hw.memory_bandwidth_bytes_per_s, "B/s"), format_bytes(hw.memory_capacity_bytes),
                f"{hw.get_ridge_point_flops_per_byte('bf16'):.0f}",
            )
    else:
        for column in ("name", "full name", "params", "layers", "hidden", "heads/kv", "max ctx"):
            table.add_column(column)
        for m in list_models():
            table.add_row(
                get_short_name(m), m.name, f"{m.params / GIGA:.2f} B", str(m.num_layers), str(m.hidden_size),
                f"{m.num_attention_heads}/{m.num_kv_heads}", format_count(m.max_context_tokens),
            )
    Console(width=140).print(table)
    return 0


def cmd_show(args) -> int:
    import json

    from ..specs.registry import load_any_spec
    from ..specs.hardware import HardwareSpec

    spec = load_any_spec(args.name)  # reads a file with the schema its content is written for
    if isinstance(spec, HardwareSpec):
        derived = {
            "ridge_point_flops_per_byte": spec.ridge_points_flops_per_byte,
            "compute_dtype_used_for": {d: spec.get_compute_dtype(d) for d in ("fp32", "bf16", "fp16", "fp8", "int8", "int4")},
        }
        if spec.measured is None:  # what its datasheet predictions are read with (a profile has its own intervals)
            from ..timing.datasheet_band import get_datasheet_band

            band = get_datasheet_band(spec)
            derived["datasheet_error_band"] = {"step_time_low_factor": band.low_factor,
                                               "step_time_high_factor": band.high_factor, "published_rows": band.rows,
                                               "flagged": not band.device_rows, "source": band.source}
    else:
        derived = {
            "params": spec.params,
            "published_params": spec.published_params,
            "head_dim": spec.head_dim_resolved,
            "query_group_size": spec.query_group_size,
            "kv_bytes_per_token_bf16": spec.get_kv_bytes_per_token("bf16"),
            "weight_bytes_bf16": spec.get_weight_bytes("bf16"),
        }
    out = {**spec.model_dump(mode="json", exclude_none=True), "derived": derived}
    bad = _first_non_finite(derived)
    if bad is not None:  # e.g. a bandwidth of 1e-300 B/s: the ridge point overflows to infinity
        raise InputError(f"{args.name}: derived {bad} is not a finite number: a number in the spec is far outside "
                         "any physical range")
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
    else:
        import yaml

        print(yaml.safe_dump(out, sort_keys=False).rstrip())
    return 0


def _first_non_finite(value, key: str = "") -> str | None:
    """The dotted key of the first NaN or infinite number in nested dicts and lists, or None."""
    import math

    if isinstance(value, dict):
        for name, item in value.items():
            found = _first_non_finite(item, f"{key}.{name}" if key else str(name))
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _first_non_finite(item, f"{key}[{index}]")
            if found is not None:
                return found
    elif isinstance(value, float) and not math.isfinite(value):
        return key
    return None
