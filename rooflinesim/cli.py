"""Command line: argument parsing and exit codes only.

Bad input -> one line on stderr and exit code 2, never a traceback. Heavy libraries (torch, matplotlib) are imported
inside the commands that need them, so `rooflinesim predict` stays fast.
"""

from __future__ import annotations

import argparse
import re
import sys

from .registry import SpecError
from .specs import InputError
from .units import GIGA, MICRO, UnitError, parse_float_list

EXIT_BAD_INPUT = 2
USER_ERRORS = (InputError, SpecError, UnitError)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own code for usage errors)
        command = " ".join(self.prog.split()[1:])  # "" for the top-level parser
        see = f"rooflinesim {command} --help" if command else "rooflinesim --help"
        self.exit(EXIT_BAD_INPUT, f"rooflinesim: error: {message} (see '{see}')\n")

    def parse_args(self, args=None, namespace=None):
        # argparse reports unknown options from the top-level parser ("see 'rooflinesim --help'"); point to the
        # help of the command they were given to instead
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            see = f"rooflinesim {command} --help" if command else "rooflinesim --help"
            self.exit(EXIT_BAD_INPUT, f"rooflinesim: error: unrecognized arguments: {' '.join(extras)} (see '{see}')\n")
        return parsed


def _add_deployment_arguments(p: argparse.ArgumentParser) -> None:
    """dtypes, attention mode, tensor parallelism, quantisation groups: shared by predict, sweep and plot."""
    p.add_argument("--weight-dtype", default="bf16", help="fp32, bf16, fp16, fp8, int8, int4 (default bf16)")
    p.add_argument("--kv-dtype", default=None, help="KV-cache dtype (default: the activation dtype)")
    p.add_argument("--activation-dtype", default=None, help="default: the weight dtype, bf16 for quantised weights")
    p.add_argument("--attention", default="flash", choices=["flash", "unfused", "per-head"],
                   help="per-head: a fused kernel without GQA sharing, K/V read once per query head (pre-XQA decode)")
    p.add_argument("--tp", default=1, help="tensor-parallel degree: the model is sharded over this many devices")
    p.add_argument("--draft-tp", default=None, help="the draft model's own tensor-parallel degree (default: --tp)")
    p.add_argument("--quant-group-size", type=int, default=128, help="weights per scale for int8/int4 (default 128)")
    p.add_argument("--quant-kernel", default=None,
                   help="kernel of int8/int4/fp8 weights: generic, tinygemm, marlin, int8-weight-only, fp8-weight-only, "
                        "fp8-rowwise (default: the hardware's, see 'show')")
    p.add_argument("--gpu-memory-utilization", default=None,
                   help="share of device memory the engine may use, as vLLM's flag (default 0.9)")
    p.add_argument("--memory-reserve-gib", default=None,
                   help="memory held beyond weights, KV and step activations: CUDA context, workspaces, graphs, "
                        "prefill activations (GiB, default 3)")


def _add_workload_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hw", default="a100", help="hardware name, alias or YAML path (default a100)")
    p.add_argument("--calibration", help="measured profile YAML to apply to --hw")
    p.add_argument("--model", default="llama-3.1-8b", help="model name, YAML path or HF config.json (default llama-3.1-8b)")
    _add_deployment_arguments(p)
    p.add_argument("--allow-long-context", action="store_true", help="model a context above the model's max (warns)")


def _add_speculation_arguments(p: argparse.ArgumentParser, alpha_list: bool = False) -> None:
    p.add_argument("--draft", default=None, help="draft model name, YAML or config.json (default llama-3.2-1b)")
    p.add_argument("--drafter", default="model", choices=["model", "ngram", "head", "eagle", "medusa", "mtp"],
                   help="model: a separate draft model; ngram: model-free (free); eagle, medusa, mtp: self-drafting "
                        "heads priced from their own ops; head: eagle-style with --head-layer-fraction")
    p.add_argument("--head-layer-fraction", type=float, default=1.0,
                   help="cost of one head draft step as a fraction of one target layer (--drafter head)")
    p.add_argument("--extra-draft-pass", action="store_true",
                   help="add gpt-fast's extra draft pass when all k drafts are accepted")
    if alpha_list:
        p.add_argument("--alpha", default=None, help="acceptance rates, e.g. 0.6,0.8 (default 0.6,0.8)")
    else:
        p.add_argument("--alpha", type=float, default=None, help="i.i.d. acceptance rate in [0, 1] (default 0.8)")
    _add_acceptance_source_arguments(p)


def _add_acceptance_source_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--acceptance", default=None, metavar="FILE_OR_PRESET",
                   help="measured or published acceptance instead of --alpha: an engine log or metrics file (vLLM, "
                        "SGLang, TensorRT-LLM), a JSON from 'acceptance from-logs --json', or a preset "
                        "('rooflinesim list acceptance')")
    p.add_argument("--acceptance-k", type=int, default=None,
                   help="the engine's draft length, for --acceptance files that do not state it")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rooflinesim", description="Roofline and speculative-decoding simulator for LLM inference")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("predict", help="step times, roofline and memory fit for one workload")
    _add_workload_arguments(p)
    p.add_argument("--batch", default="1", help="sequences decoded together (default 1)")
    p.add_argument("--ctx", default="4k", help="tokens already in the KV cache: 4096, 4k, 32K, 128k, 1M (default 4k)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_speculation_arguments(p)
    p.add_argument("--k", type=int, default=None, help="draft tokens per step (default: the best k over 0..16)")
    p.add_argument("--alpha-per-position", default=None,
                   help="conditional acceptance per draft position, e.g. 0.9,0.85,0.8 (instead of --alpha)")
    p.add_argument("--no-speculation", action="store_true", help="skip the speculative-decoding analysis")
    p.set_defaults(handler=_cmd_predict)

    p = sub.add_parser("sweep", help="speculative speedup over batch x context x k x alpha, break-even, schedules")
    _add_workload_arguments(p)
    _add_speculation_arguments(p, alpha_list=True)
    p.set_defaults(hw="h100")
    p.add_argument("--batch", default="1..256", help="batch range: 1..256 (powers of two), or 1,2,8 (default 1..256)")
    p.add_argument("--ctx", default="1k..128k", help="context range: 1k..128k (powers of two) or list (default 1k..128k)")
    p.add_argument("--k", default="0..8", help="draft lengths: 0..8 or 1,2,4 (default 0..8)")
    p.add_argument("--format", choices=["csv", "json"], default=None, help="grid file format (default from -o suffix)")
    p.add_argument("-o", "--output", default=None, help="write the full grid here (.csv or .json)")
    p.add_argument("--json", action="store_true", help="print break-even and schedules as JSON on stdout")
    p.set_defaults(handler=_cmd_sweep)

    p = sub.add_parser("serve", help="serving under load: a request-level simulation with speculation policies")
    _add_serve_arguments(p)
    p.set_defaults(handler=_cmd_serve)

    p = sub.add_parser("plot", help="draw a chart: roofline, speedup map, speedup vs k, step breakdown, validation")
    p.add_argument("kind", choices=list(PLOT_KINDS), help="; ".join(f"{k}: {v}" for k, v in PLOT_KINDS.items()))
    p.add_argument("-o", "--output", required=True, help="image file to write: .png or .svg")
    p.add_argument("--hw", default="h100", help="hardware name, alias or YAML path (default h100)")
    p.add_argument("--calibration", help="measured profile YAML to apply to --hw (roofline: also draws its ceilings)")
    p.add_argument("--model", default="llama-3.1-8b", help="model name, YAML path or HF config.json (default llama-3.1-8b)")
    p.add_argument("--draft", default=None, help="draft model (speedup, k; default llama-3.2-1b)")
    p.add_argument("--drafter", default="model", choices=["model", "ngram", "head", "eagle", "medusa", "mtp"], help="drafter kind (speedup, k)")
    _add_deployment_arguments(p)
    p.add_argument("--alpha", default=None, help="acceptance rate(s): speedup takes one (default 0.8), "
                                                 "k several (default 0.6,0.7,0.8,0.9)")
    _add_acceptance_source_arguments(p)
    p.add_argument("--batch", default=None, help="batch sizes: roofline 1,8,64,256; speedup 1..1024; k and "
                                                 "breakdown one value (default 1)")
    p.add_argument("--ctx", default=None, help="contexts: roofline 1k,32k; speedup 512..128k; k one value (4k); "
                                               "breakdown a range (default 256..the model's max)")
    p.add_argument("--k", default=None, help="roofline: verify k (default 4); speedup/k: draft lengths (default 0..8 / "
                                             "0..10); breakdown: price a verify step of k + 1 tokens (default: decode)")
    p.add_argument("--per-op", action="store_true", help="roofline: add the ops of one decode step")
    p.add_argument("--report", help="validation report JSON written by 'rooflinesim validate' (validation)")
    p.add_argument("--allow-long-context", action="store_true", help="model a context above the model's max (warns)")
    p.add_argument("--rate", default=None, help="serve: request rates, 1..32 or 1,2,4 (default 1..32)")
    p.add_argument("--policy", default=None, help="serve: speculation policies (default off,fixed:4,dynamic)")
    p.add_argument("--requests", type=int, default=500, help="serve: requests per run (default 500)")
    p.set_defaults(handler=_cmd_plot)

    p = sub.add_parser("list", help="list shipped hardware, models or acceptance presets")
    p.add_argument("what", choices=["hardware", "models", "acceptance"])
    p.set_defaults(handler=_cmd_list)

    from .acceptance_cli import add_acceptance_parser  # the `acceptance` command and its subcommands

    add_acceptance_parser(sub)

    p = sub.add_parser("show", help="one hardware or model spec with its derived numbers")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_show)

    p = sub.add_parser("calibrate", help="measure this device with torch microbenchmarks and write a profile YAML")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--dtype", default="fp32,bf16", help="compute dtypes to measure, e.g. bf16,fp32 (default fp32,bf16)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's; recorded in the profile)")
    p.add_argument("--quick", action="store_true", help="a run sized to <= 30 s on any CPU (the quick plan or less)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="size the run to this many seconds: probe the device, then fit the grid and repetitions")
    p.add_argument("--merge", nargs="+", default=None, metavar="PROFILE",
                   help="combine profiles of the same device into --out (no measuring; narrows the intervals)")
    p.add_argument("--out", default=None, help="profile path (default calibrate/<device-name>.yaml)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_calibrate)

    p = sub.add_parser("validate", help="time a hold-out decoder and a speculative loop; compare with predictions")
    p.add_argument("--profile", default=None, help="measured profile YAML (default calibrate/<device-name>.yaml)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    p.add_argument("--dtype", default=None, help="dtype to validate (default: each dtype the profile measured)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: the profile's)")
    p.add_argument("--quick", action="store_true", help="a smaller grid")
    p.add_argument("--model", default="tiny-llama-123m", help="hold-out target model (default tiny-llama-123m)")
    p.add_argument("--draft", default="tiny-draft-2l", help="hold-out drafter (default tiny-draft-2l)")
    p.add_argument("--out-dir", default="calibrate", help="where the JSON and PNG go (default calibrate/)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_validate)
    return parser


def _import_torch_or_fail():
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # checked without importing it: torch stays in calibrate/
        raise InputError("calibrate/validate need torch: pip install 'rooflinesim[calibrate]' "
                         "(install the CPU build of torch first to avoid the multi-GB CUDA wheel)")


def _check_threads(threads) -> None:
    if threads is not None and threads < 1:
        raise InputError(f"--threads must be a positive integer, got {threads}")


def _process_age_s() -> float:
    """Seconds since this process started (the torch import counts against a calibration budget); 0 if unknown."""
    import os

    try:
        start_ticks = float(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        uptime_s = float(open("/proc/uptime").read().split()[0])
        return max(uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


def _cmd_merge(args) -> int:
    from .calibrate.merge import merge_profile_files

    if not args.out:
        raise InputError("--merge needs --out PATH for the combined profile")
    if len(args.merge) < 2:
        raise InputError("--merge needs at least two profiles, e.g. --merge a.yaml b.yaml --out c.yaml")
    spec = merge_profile_files(args.merge, args.out)
    prov = spec.measured.provenance
    print(f"wrote {args.out} ({prov.device_name}, {', '.join(prov.dtypes)}, {len(args.merge)} runs merged)")
    return 0


def _cmd_calibrate(args) -> int:
    import shlex
    from pathlib import Path

    from .fileio import check_output_path
    from .units import normalize_dtype

    if args.merge:
        return _cmd_merge(args)
    if args.budget is not None and not args.budget > 0:
        raise InputError(f"--budget must be a positive number of seconds, got {args.budget}")
    _import_torch_or_fail()
    _check_threads(args.threads)
    dtypes = tuple(dict.fromkeys(normalize_dtype(d) for d in args.dtype.split(",") if d.strip()))
    if not dtypes:
        raise InputError("--dtype needs at least one dtype, e.g. --dtype fp32,bf16")
    if args.out:  # checked before minutes of measuring, not after
        check_output_path(args.out, "profile (--out)", (".yaml", ".yml"), create_parent=True)
    from .calibrate.bench import run_calibration
    from .calibrate.profile import write_profile
    from .calibrate.timers import select_device

    device = select_device(args.device, args.threads)
    out = Path(args.out) if args.out else Path("calibrate") / f"{device.slug}.yaml"
    check_output_path(out, "profile (--out)", (".yaml", ".yml"), create_parent=True)
    command = "rooflinesim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["calibrate"] else (
        "rooflinesim calibrate")
    spec = run_calibration(device, dtypes, args.quick, command, seed=args.seed, progress=not args.no_progress,
                           budget_s=args.budget, spent_s=_process_age_s())
    write_profile(spec, out)
    prov = spec.measured.provenance
    print(f"wrote {out} ({prov.device_name}, {', '.join(prov.dtypes)}, {prov.duration_s:.1f} s, "
          f"drift {prov.drift:.1%}{' FLAGGED: re-run on a quieter machine' if prov.drift_flagged else ''})")
    for dtype, prof in spec.measured.dtypes.items():
        print(f"  {dtype}: GEMV {prof.gemv_bandwidth_bytes_per_s / GIGA:.1f} GB/s, copy "
              f"{prof.copy_bandwidth_bytes_per_s / GIGA:.1f} GB/s, GEMM peak {prof.peak_flops_per_s / GIGA:.0f} GFLOP/s, "
              f"per-layer overhead {prof.layer_overhead_s / MICRO:.0f} us")
    if "re-run in a quiet window" in prov.notes:
        print("warning: the CPU was contended by other processes during the run (see the profile's notes); "
              "numbers from a quiet window are more reproducible", file=sys.stderr)
    if prov.drift_flagged:
        print(f"warning: the reference measurement drifted by {prov.drift:.0%} during the run", file=sys.stderr)
    return 0


#: validate builds its hold-out decoders in host memory; refuse models whose estimate exceeds this share of it.
VALIDATE_MEMORY_SHARE = 0.5


def _check_validation_fits(model: str, draft: str, dtypes) -> None:
    """Refuse up front, with the estimate, a hold-out pair that would not fit in this machine's memory (weights of
    both models + KV caches for the largest batch x context validate times, in the widest dtype), and a model the
    Llama-style torch decoder of `calibrate/model.py` cannot build as it is."""
    import os

    from .registry import load_model
    from .units import get_dtype_bytes

    target_spec, draft_spec = load_model(model), load_model(draft)
    for spec in (target_spec, draft_spec):  # the decoder would be built dense and compared with this model's price
        differs = [what for what, present in (
            ("mixture-of-experts MLPs", spec.moe is not None), ("latent attention (MLA)", spec.mla is not None),
            ("a sliding attention window", spec.sliding_window_tokens is not None),
            ("LayerNorm", spec.norm != "rmsnorm"), ("a non-gated MLP", not spec.gated_mlp)) if present]
        if differs:
            raise InputError(f"validate times a Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU); {spec.name} has "
                             f"{' and '.join(differs)}, so the times would not be its own: validate a dense "
                             "Llama-style model")
    widest = max(get_dtype_bytes(d) for d in dtypes)
    positions = 32 * (2048 + 128)  # the full grid's largest batch x (context + the loop's growth)
    need = sum(m.params * widest + m.get_kv_bytes_per_token("fp32") * widest / 4 * positions
               for m in (target_spec, draft_spec))
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > VALIDATE_MEMORY_SHARE * have:
        raise InputError(
            f"validating {target_spec.name} + {draft_spec.name} needs about {need / GIGA:.1f} GB of host memory "
            f"(weights + KV caches in {max(dtypes, key=get_dtype_bytes)}); this machine has {have / GIGA:.1f} GB: "
            "validate a smaller hold-out model")


def _cmd_validate(args) -> int:
    from pathlib import Path

    from .fileio import check_output_dir, open_atomic
    from .profiles import load_profile
    from .units import normalize_dtype

    _import_torch_or_fail()
    _check_threads(args.threads)
    out_dir = check_output_dir(args.out_dir, "--out-dir")  # before any measuring
    from .calibrate.timers import select_device
    from .calibrate.validate import combine_reports, print_report, run_validation, write_report

    profile_path = args.profile
    if profile_path is None:
        device = select_device(args.device, args.threads)
        profile_path = str(Path("calibrate") / f"{device.slug}.yaml")
    profile = load_profile(profile_path)
    dtypes = [normalize_dtype(args.dtype)] if args.dtype else list(profile.measured.dtypes)
    _check_validation_fits(args.model, args.draft, dtypes)
    threads = args.threads or profile.measured.provenance.threads
    device = select_device(args.device, threads if profile.measured.provenance.device_kind == "cpu" else None)
    reports = []
    for dtype in dtypes:
        report = run_validation(profile_path, device, dtype, quick=args.quick, target=args.model, draft=args.draft,
                                seed=args.seed, progress=not args.no_progress)
        print_report(report)
        reports.append(report)
    json_path = write_report(combine_reports(reports), out_dir, f"{profile.measured.profile_name}-validation")
    written = [json_path]
    if not args.no_plot:  # the chart is composed from the written report
        from .plots import plot_validation

        png = json_path.with_suffix(".png")
        with open_atomic(png, "wb") as f:
            plot_validation(json_path).savefig(f, format="png", dpi=130, bbox_inches="tight")
        written.append(png)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _deployment_options(args) -> dict:
    """The build_scenario options every pricing command shares, as the user gave them (no defaults added here)."""
    return dict(weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, activation_dtype=args.activation_dtype,
                attention=args.attention, calibration=args.calibration, tp=args.tp, draft_tp=args.draft_tp,
                quant_group_size=args.quant_group_size, gpu_memory_utilization=args.gpu_memory_utilization,
                memory_reserve_bytes=_gib_to_bytes(args.memory_reserve_gib), quant_kernel=args.quant_kernel)


def _gib_to_bytes(value):
    """--memory-reserve-gib as bytes (None stays None: build_scenario owns the default)."""
    if value is None:
        return None
    try:
        return float(value) * (1 << 30)
    except ValueError:
        raise InputError(f"--memory-reserve-gib must be a number of GiB, got {value!r}") from None


def _speculation_options(args) -> dict:
    return dict(draft=args.draft, drafter=args.drafter, head_layer_fraction=args.head_layer_fraction,
                extra_draft_pass=args.extra_draft_pass, acceptance=args.acceptance, acceptance_k=args.acceptance_k)


def _print_warnings(warnings, console=None) -> None:
    for warning in warnings:
        if console is None:
            print(f"warning: {warning}", file=sys.stderr)
        else:
            from rich.markup import escape

            console.print(f"[yellow]warning:[/] {escape(warning)}")


def _cmd_predict(args) -> int:
    from .predict import predict
    from .report import render_prediction, to_json

    prediction = predict(
        hw=args.hw, model=args.model, batch=args.batch, ctx=args.ctx, allow_long_context=args.allow_long_context,
        speculative=not args.no_speculation, alpha=args.alpha, alpha_per_position=args.alpha_per_position, k=args.k,
        **_deployment_options(args), **_speculation_options(args),
    )
    if args.json:
        print(to_json(prediction))
        _print_warnings(prediction.warnings)
    else:
        render_prediction(prediction)
    return 0


def _cmd_sweep(args) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from .fileio import check_output_path
    from .sweep import sweep
    from .units import format_count, parse_count_range, parse_int_range

    fmt = None
    if args.output:
        check_output_path(args.output, "sweep output (-o)")
        fmt = args.format or ("json" if args.output.endswith(".json") else "csv")
    result = sweep(
        hw=args.hw, model=args.model, batch=parse_count_range(args.batch), ctx=parse_count_range(args.ctx),
        alpha=None if args.alpha is None else parse_float_list(args.alpha, "acceptance rate"), k=parse_int_range(args.k),
        **_deployment_options(args), **_speculation_options(args),
    )
    if args.output:
        from .gridio import write_grid

        write_grid(result, Path(args.output), fmt)
    if args.json:
        print(result.to_json(include_grid=False))
        _print_warnings(result.warnings)
        return 0
    console = Console(width=140)
    table = Table(title=f"Where speculation stops paying: {result.model} on {result.hardware}, draft {result.draft}")
    for column in ("context", "alpha", "break-even batch", "best k @ b=1", "speedup @ b=1", "vLLM disable at / k",
                   "TRT-LLM draft_len_schedule"):
        table.add_column(column, justify="right")
    for row, sched in zip(result.get_break_even_table(), result.get_engine_schedules()):
        be = row["break_even_batch"]
        vllm = sched["vllm"]
        table.add_row(
            format_count(row["context_tokens"]), f"{row['alpha']:g}", "never (pays at all)" if be is None else str(be),
            str(row["best_k_at_batch_1"]), f"{row['best_speedup_at_batch_1']:.2f}x",
            f"{vllm['speculative_disable_by_batch_size'] or '-'} / {vllm['num_speculative_tokens']}",
            str(sched["trtllm"]["draft_len_schedule"]),
        )
    console.print(table)
    console.print(f"{result.n_points:,} grid points" + (f"; grid written to {args.output}" if args.output else ""))
    _print_warnings(result.warnings, console)
    return 0


def _add_serve_arguments(p: argparse.ArgumentParser) -> None:
    _add_workload_arguments(p)
    _add_speculation_arguments(p)
    p.set_defaults(hw="h100")
    p.add_argument("--alpha-per-position", default=None, help="conditional acceptance per draft position (not --alpha)")
    p.add_argument("--rate", default=None, help="requests per second: 4, 1,2,4 or 1..32 (doublings); a trace "
                                                "alone replays its own rate")
    p.add_argument("--policy", default="off,dynamic", help="off, fixed:K, off-above:B:K, schedule:1=4,16=2, "
                                                           "dynamic[:KMAX], adaptive[:KMAX]; comma-separated")
    p.add_argument("--requests", type=int, default=1000, help="requests per run (default 1000)")
    p.add_argument("--prompt-tokens", default="1024", help="prompt lengths: 1024, uniform:LO:HI, "
                                                           "lognormal:MEDIAN:SIGMA[:MAX] (default 1024)")
    p.add_argument("--output-tokens", default="128", help="output lengths, same forms (default 128)")
    p.add_argument("--arrivals", default="poisson", choices=["poisson", "gamma"])
    p.add_argument("--cv", type=float, default=1.0, help="coefficient of variation of gamma inter-arrival gaps")
    p.add_argument("--trace", default=None, help="JSONL trace: arrival_s, prompt_tokens, output_tokens per line")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-num-seqs", type=int, default=256, help="running requests at most (vLLM; default 256)")
    p.add_argument("--max-num-batched-tokens", type=int, default=8192, help="token budget per step (default 8192)")
    p.add_argument("--block-size", type=int, default=16, help="KV-cache block in tokens (default 16)")
    p.add_argument("--slo-ttft", type=float, default=None, help="time-to-first-token SLO in seconds (goodput)")
    p.add_argument("--slo-tpot", type=float, default=None, help="time-per-output-token SLO in seconds (goodput)")
    p.add_argument("--json", action="store_true", help="print the runs and crossovers as JSON")
    p.add_argument("-o", "--output", default=None, help="per-request JSONL log (one rate and one policy)")
    p.add_argument("--dask", default=None, metavar="ADDRESS", help="run the sweep on this dask.distributed scheduler")
    p.add_argument("--workers", type=int, default=None, help="processes for the sweep (default: one per core)")
    p.add_argument("--emit-config", default=None, choices=["vllm", "trtllm", "sglang"],
                   help="print an engine speculation config filled from the model instead of simulating")


def _cmd_serve(args) -> int:
    import json

    from rich.console import Console

    from .fileio import check_output_path, write_text_atomic
    from .scenario import build_scenario, check_positive_int
    from .serve import ServeConfig, parse_policies, simulate
    from .serve.rates import WorkloadSpec, get_crossovers, parse_rates, run_rate_sweep
    from .serve.render import render_rate_sweep
    from .serve.workload import LengthDistribution

    if args.output:
        check_output_path(args.output, "request log (-o)")
    if args.workers is not None:
        check_positive_int(args.workers, "--workers", 4096)
    workload = WorkloadSpec(LengthDistribution.parse(args.prompt_tokens, "--prompt-tokens"),
                            LengthDistribution.parse(args.output_tokens, "--output-tokens"),
                            check_positive_int(args.requests, "--requests", 10_000_000), args.arrivals, args.cv,
                            args.seed, args.trace)
    config = ServeConfig(args.max_num_seqs, args.max_num_batched_tokens, args.block_size, args.seed).check()
    longest = workload.prompt.max_tokens + workload.output.max_tokens
    scenario = build_scenario(args.hw, args.model, 1, longest, allow_long_context=args.allow_long_context,
                              alpha=args.alpha, alpha_per_position=args.alpha_per_position, k_values=[0],
                              **_deployment_options(args), **_speculation_options(args))
    if args.emit_config:
        from .serve.engine_configs import emit_engine_config, get_config_header

        context = workload.prompt.typical_tokens + workload.output.typical_tokens // 2
        print(emit_engine_config(scenario, args.emit_config, config, context))
        if args.emit_config == "vllm":  # JSON carries no comment: its provenance goes to stderr
            print(get_config_header(scenario, context), file=sys.stderr)
        _print_warnings(scenario.warnings)
        return 0
    positions = None if scenario.acceptance.per_position is None else len(scenario.acceptance.per_position)
    policies = [p.name for p in parse_policies(args.policy, positions)]
    rates = parse_rates(args.rate) if args.rate else [None]
    if rates == [None] and args.trace is None:
        rates = [4.0]
    for value, what in ((args.slo_ttft, "--slo-ttft"), (args.slo_tpot, "--slo-tpot")):
        if value is not None and not value > 0:
            raise InputError(f"{what} must be a positive number of seconds, got {value}")
    if args.output:
        if len(rates) != 1 or len(policies) != 1:
            raise InputError("-o writes one run's per-request log: give one --rate and one --policy")
        result = simulate(scenario, workload.get_requests(rates[0]), policies[0], config)
        write_text_atomic(args.output, result.get_request_log_jsonl())
        rows = [{"rate_per_s": rates[0], **result.get_summary(args.slo_ttft, args.slo_tpot)}]
    else:
        rows = run_rate_sweep(scenario, workload, rates, policies, config, args.slo_ttft, args.slo_tpot,
                              args.dask, args.workers)
    crossovers = get_crossovers(rows)
    if args.json:
        print(json.dumps({"runs": rows, "crossovers": crossovers}, indent=1))
        _print_warnings(scenario.warnings)
        return 0
    console = Console(width=160)
    render_rate_sweep(rows, crossovers, console, f"{rows[0]['model']} on {rows[0]['hardware']}"
                      f" (tp {scenario.workload.tensor_parallel}), draft {scenario.drafter.name}")
    if args.output:
        console.print(f"per-request log written to {args.output}")
    _print_warnings(scenario.warnings, console)
    return 0


PLOT_KINDS = {
    "roofline": "ceilings of --hw with prefill, decode and verify steps of --model",
    "speedup": "best speculative speedup over batch x context",
    "k": "speedup vs draft length for several alphas, with Leviathan's closed form",
    "breakdown": "step time vs context split into weight, KV, activation traffic, compute, overhead",
    "validation": "predicted vs measured from a --report",
    "serve": "latency-throughput curve per speculation policy under load (--rate, --policy)",
}
PLOT_SUFFIXES = (".png", ".svg")


def _cmd_plot(args) -> int:
    from .fileio import check_output_path, open_atomic
    from .units import parse_count_range, parse_int_range

    out = check_output_path(args.output, "chart output (-o)", PLOT_SUFFIXES)

    def one(values, what):
        if len(values) != 1:
            raise InputError(f"plot {args.kind} takes one {what}, got {', '.join(str(v) for v in values)}")
        return values[0]

    options = dict(hw=args.hw, model=args.model, **_deployment_options(args))
    if args.allow_long_context:  # only when asked: the speedup map's own default already allows long contexts
        options["allow_long_context"] = True
    speculation = dict(draft=args.draft, drafter=args.drafter)
    alphas = parse_float_list(args.alpha, "acceptance rate") if args.alpha else None
    if args.acceptance is not None and args.alpha:
        raise InputError("give --acceptance or --alpha, not both")
    if args.acceptance is not None:  # charts price i.i.d. rates: build_scenario turns the source into one
        speculation.update(acceptance=args.acceptance, acceptance_k=args.acceptance_k, acceptance_as_iid=True)
    from . import plots  # matplotlib only from here on

    if args.kind == "serve":
        from .serve import LengthDistribution, parse_policies
        from .serve.rates import WorkloadSpec, parse_rates

        scenario = plots.get_scenario(args.hw, args.model, draft=args.draft, drafter=args.drafter,
                                      alpha=alphas[0] if alphas else None, **_deployment_options(args))
        workload = WorkloadSpec(LengthDistribution.parse("1024", "prompt"), LengthDistribution.parse("128", "output"),
                                requests=args.requests)
        fig = plots.plot_serve(scenario, rates=parse_rates(args.rate or "1..32"),
                               policies=[p.name for p in parse_policies(args.policy or "off,fixed:4,dynamic")],
                               workload=workload)
    elif args.kind == "validation":
        if not args.report:
            raise InputError("plot validation needs --report FILE (a JSON written by 'rooflinesim validate')")
        fig = plots.plot_validation(args.report)
    elif args.kind == "roofline":
        fig = plots.plot_roofline(batch=parse_count_range(args.batch or "1,8,64,256"),
                                  ctx=parse_count_range(args.ctx or "1k,32k"), k=one(parse_int_range(args.k or "4"), "k"),
                                  per_op=args.per_op, **options)
    elif args.kind == "speedup":
        fig = plots.plot_speedup_map(alpha=None if args.acceptance else one(alphas or [0.8], "--alpha"),
                                     batch=parse_count_range(args.batch or "1..1024"),
                                     ctx=parse_count_range(args.ctx or "512..128k"),
                                     k=parse_int_range(args.k or "0..8"), **speculation, **options)
    elif args.kind == "k":
        fig = plots.plot_speedup_vs_k(alpha=None if args.acceptance else alphas or [0.6, 0.7, 0.8, 0.9],
                                      batch=one(parse_count_range(args.batch or "1"), "--batch"),
                                      ctx=one(parse_count_range(args.ctx or "4k"), "--ctx"),
                                      k_max=max(parse_int_range(args.k or "0..10")), **speculation, **options)
    else:
        k = one(parse_int_range(args.k), "k") if args.k else None
        fig = plots.plot_step_breakdown(batch=one(parse_count_range(args.batch or "1"), "--batch"),
                                        ctx=parse_count_range(args.ctx) if args.ctx else None,
                                        new_tokens=1 if k is None else k + 1, **options)
    with open_atomic(out, "wb") as f:
        fig.savefig(f, format=out.suffix.lower().lstrip("."), dpi=150, bbox_inches="tight")
    _print_warnings(getattr(fig, "rooflinesim_warnings", ()))
    print(f"wrote {out}")
    return 0


def _cmd_list(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from .registry import get_short_name, list_hardware, list_models
    from .units import format_bytes, format_count, format_rate

    table = Table()
    if args.what == "acceptance":
        from .acceptance_cli import print_presets

        return print_presets()
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
                get_short_name(m), m.name, f"{m.params / GIGA:.2f} B", str(m.num_layers), str(m.hidden_size),
                f"{m.num_attention_heads}/{m.num_kv_heads}", format_count(m.max_context_tokens),
            )
    Console(width=140).print(table)
    return 0


def _cmd_show(args) -> int:
    import json

    from .registry import load_any_spec
    from .specs import HardwareSpec

    spec = load_any_spec(args.name)  # reads a file with the schema its content is written for
    if isinstance(spec, HardwareSpec):
        derived = {
            "ridge_point_flops_per_byte": spec.ridge_points_flops_per_byte,
            "compute_dtype_used_for": {d: spec.get_compute_dtype(d) for d in ("fp32", "bf16", "fp16", "fp8", "int8", "int4")},
        }
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
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
    else:
        import yaml

        print(yaml.safe_dump(out, sort_keys=False).rstrip())
    return 0


def _attach_negative_values(argv: list[str]) -> list[str]:
    """argparse reads `--k -1..2` as two options ("expected one argument"); hand a value that starts with a minus
    and a digit to its option, so the option's own check can say what is wrong with it."""
    out: list[str] = []
    for item in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and re.match(r"^-\d", item):
            out[-1] = f"{out[-1]}={item}"
        else:
            out.append(item)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_negative_values(list(sys.argv[1:] if argv is None else argv)))
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
