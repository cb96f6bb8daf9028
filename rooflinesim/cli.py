"""Command line: argument parsing and exit codes only.

Bad input -> one line on stderr and exit code 2, never a traceback. Heavy libraries (torch, matplotlib) are imported
inside the commands that need them, so `rooflinesim predict` stays fast.
"""

from __future__ import annotations

import argparse
import sys

from .predict import InputError
from .registry import SpecError
from .units import UnitError

EXIT_BAD_INPUT = 2
USER_ERRORS = (InputError, SpecError, UnitError)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own code for usage errors)
        self.exit(EXIT_BAD_INPUT, f"rooflinesim: error: {message} (see 'rooflinesim {self.prog.split()[-1]} --help')\n")


def _add_workload_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hw", default="a100", help="hardware name, alias or YAML path (default a100)")
    p.add_argument("--calibration", help="measured profile YAML to apply to --hw")
    p.add_argument("--model", default="llama-3.1-8b", help="model name, YAML path or HF config.json (default llama-3.1-8b)")
    p.add_argument("--weight-dtype", default="bf16", help="fp32, bf16, fp16, fp8, int8, int4 (default bf16)")
    p.add_argument("--kv-dtype", default=None, help="KV-cache dtype (default: the activation dtype)")
    p.add_argument("--activation-dtype", default=None, help="default: the weight dtype, bf16 for quantised weights")
    p.add_argument("--attention", default="flash", choices=["flash", "unfused"])
    p.add_argument("--allow-long-context", action="store_true", help="model a context above the model's max (warns)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rooflinesim", description="Roofline and speculative-decoding simulator for LLM inference")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("predict", help="step times, roofline and memory fit for one workload")
    _add_workload_arguments(p)
    p.add_argument("--batch", default="1", help="sequences decoded together (default 1)")
    p.add_argument("--ctx", default="4k", help="tokens already in the KV cache: 4096, 4k, 32K, 128k, 1M (default 4k)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_cmd_predict)

    p = sub.add_parser("list", help="list shipped hardware or models")
    p.add_argument("what", choices=["hardware", "models"])
    p.set_defaults(handler=_cmd_list)

    p = sub.add_parser("show", help="one hardware or model spec with its derived numbers")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_show)
    return parser


def _cmd_predict(args) -> int:
    from .predict import predict
    from .report import render_prediction, to_json

    prediction = predict(
        hw=args.hw, model=args.model, batch=args.batch, ctx=args.ctx, weight_dtype=args.weight_dtype,
        kv_dtype=args.kv_dtype, activation_dtype=args.activation_dtype, attention=args.attention,
        allow_long_context=args.allow_long_context, calibration=args.calibration,
    )
    if args.json:
        print(to_json(prediction))
        for warning in prediction.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    else:
        render_prediction(prediction)
    return 0


def _cmd_list(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from .registry import get_short_name, list_hardware, list_models
    from .units import format_bytes, format_count, format_rate

    table = Table()
    if args.what == "hardware":
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
                get_short_name(m), m.name, f"{m.params / 1e9:.2f} B", str(m.num_layers), str(m.hidden_size),
                f"{m.num_attention_heads}/{m.num_kv_heads}", format_count(m.max_context_tokens),
            )
    Console(width=140).print(table)
    return 0


def _cmd_show(args) -> int:
    import json

    from .registry import load_hardware, load_model

    try:
        spec = load_hardware(args.name)
        derived = {
            "ridge_point_flops_per_byte": spec.ridge_points_flops_per_byte,
            "compute_dtype_used_for": {d: spec.get_compute_dtype(d) for d in ("fp32", "bf16", "fp16", "fp8", "int8", "int4")},
        }
    except SpecError as hw_error:
        try:
            spec = load_model(args.name)
        except SpecError:
            raise SpecError(f"{hw_error} (and no model of that name either)") from None
        derived = {
            "params": spec.params,
            "published_params": spec.published_params,
            "head_dim": spec.head_dim_resolved,
            "query_group_size": spec.query_group_size,
            "kv_bytes_per_token_bf16": spec.get_kv_bytes_per_token("bf16"),
            "weight_bytes_bf16": spec.get_weight_bytes("bf16"),
        }
    out = {**spec.model_dump(mode="json", exclude_none=True), "derived": derived}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        import yaml

        print(yaml.safe_dump(out, sort_keys=False).rstrip())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except USER_ERRORS as exc:
        print(f"rooflinesim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("rooflinesim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
