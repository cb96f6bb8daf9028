"""The `rooflinesim acceptance ...` commands and `rooflinesim list acceptance`: argument parsing and printing only.

`from-logs` reads an engine's log or metrics (`acceptance.engines`); `measure` runs two local checkpoints with torch
(`calibrate.measure.acceptance_measure`, imported only by that command). Both print per-position acceptance with its
intervals, E at the measured k and what it implies for other k, or the same as JSON (`--json`), which
`--acceptance FILE.json` reads back.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..acceptance.measured import MeasuredAcceptance



def add_acceptance_parser(sub) -> None:
    from ..acceptance.formats import FORMATS

    p = sub.add_parser("acceptance", help="measured acceptance: from engine logs and metrics, or from local models")
    commands = p.add_subparsers(dest="acceptance_command", required=True, parser_class=type(p))
    q = commands.add_parser("from-logs", help="per-position acceptance from a vLLM / SGLang / TensorRT-LLM log or "
                                              "Prometheus metrics file")
    q.add_argument("file", help="log or metrics file")
    q.add_argument("--format", default="auto", choices=list(FORMATS),
                   help="auto (default), vllm-v0, vllm-v1 (log lines), prometheus (vLLM counters), sglang (log or "
                        "gauge), trtllm (gauge)")
    q.add_argument("--k", type=int, default=None, help="the engine's draft length where the file does not state it "
                                                       "(SGLang without server_args, TensorRT-LLM)")
    q.add_argument("--json", action="store_true", help="print the result as JSON (readable by --acceptance)")
    q.set_defaults(handler=_cmd_from_logs)

    q = commands.add_parser("measure", help="acceptance of a local draft checkpoint for a local target checkpoint "
                                            "(Hugging Face layout), by running speculative decoding with torch")
    q.add_argument("--target", required=True, help="target model folder: config.json + model.safetensors")
    q.add_argument("--draft", required=True, help="draft model folder: config.json + model.safetensors")
    q.add_argument("--prompts", required=True, help="one prompt per line: token ids (or text with tokenizer.json "
                                                    "and the tokenizers library)")
    q.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy; > 0: the exact rule")
    q.add_argument("--k", type=int, default=4, help="drafts per speculative step (default 4)")
    q.add_argument("--new-tokens", type=int, default=64, help="tokens generated per prompt (default 64)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--device", default="auto", help="auto, cpu or cuda (default auto)")
    q.add_argument("--dtype", default="fp32", help="fp32 (default), bf16 or fp16")
    q.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    q.add_argument("--json", action="store_true", help="print the result as JSON (readable by --acceptance)")
    q.set_defaults(handler=_cmd_measure)

    q = commands.add_parser("validate", help="train two small models, measure their acceptance, and compare a real "
                                             "speculative loop's speedup with the prediction per batch")
    q.add_argument("--profile", required=True, help="calibration profile of this device (rooflinesim calibrate)")
    q.add_argument("--out", default=None, help="write the report here (.json)")
    q.add_argument("--batches", default="1,4,16", help="batch sizes (default 1,4,16)")
    q.add_argument("--k", type=int, default=4, help="drafts per step (default 4)")
    q.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1: the exact rule)")
    q.add_argument("--iterations", type=int, default=40,
                   help="at least this many timed iterations per loop (default 40)")
    q.add_argument("--duration", type=float, default=None,
                   help="seconds the loops of all batches run, interleaved in short rounds alternating plain and "
                        "speculative decoding (default 60)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--threads", type=int, default=None, help="CPU threads (default: the profile's)")
    q.set_defaults(handler=_cmd_validate)


def _cmd_from_logs(args) -> int:
    from ..acceptance.engines import read_engine_acceptance

    result = read_engine_acceptance(args.file, args.format, args.k)
    print_acceptance(result, as_json=args.json)
    return 0


def _cmd_measure(args) -> int:
    import importlib.util

    from ..errors import InputError

    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("safetensors") is None:
        raise InputError("acceptance measure needs torch and safetensors: pip install 'rooflinesim[calibrate]' "
                         "(install the CPU build of torch first to avoid the multi-GB CUDA wheel)")
    from ..calibrate.measure.acceptance_measure import run_measure_command

    print_acceptance(run_measure_command(args), as_json=args.json)
    return 0


def _cmd_validate(args) -> int:
    import importlib.util
    import tempfile

    from ..fileio import check_output_path, write_text_atomic
    from ..specs.profiles import load_profile
    from ..errors import InputError
    from ..units import parse_count_range

    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("safetensors") is None:
        raise InputError("acceptance validate needs torch and safetensors: pip install 'rooflinesim[calibrate]'")
    if args.out:
        check_output_path(args.out, "report (--out)", (".json",))
    if args.iterations < 1:
        raise InputError(f"--iterations must be a positive integer, got {args.iterations}")
    if args.duration is not None and not (0 <= args.duration <= 3600):
        raise InputError(f"--duration must be between 0 and 3600 seconds, got {args.duration}")
    profile = load_profile(args.profile)
    if profile.measured.provenance.device_kind != "cpu":
        raise InputError(f"{args.profile} was measured on {profile.measured.provenance.device_name}; this check runs "
                         "on the CPU: give a CPU profile")
    from ..calibrate.validators.acceptance_validate import DURATION_S, run_acceptance_validation
    from ..calibrate.measure.anchor import describe_anchor
    from ..calibrate.measure.timers import select_device

    device = select_device("cpu", args.threads or profile.measured.provenance.threads)
    with tempfile.TemporaryDirectory(prefix="rooflinesim-acceptance-") as work:
        report = run_acceptance_validation(args.profile, work, "cpu", parse_count_range(args.batches), args.k,
                                           args.temperature, args.iterations, args.seed,
                                           DURATION_S if args.duration is None else args.duration)
    report["device_name"] = device.name
    print(f"acceptance measured: {report['acceptance']['engine']}: E = {report['acceptance']['expected_tokens']:.3f} "
          f"at k = {report['acceptance']['k']}; device {device.name}")
    for row in report["speculative"]:
        print(f"  batch {row['batch']:>3}: measured {row['measured_speedup']:.3f}x, predicted "
              f"{row['predicted_speedup']:.3f}x (error {row['abs_error']:.3f}x; realised E "
              f"{row['realized_tokens_per_iteration']:.2f})")
    print(f"largest error {report['max_abs_speedup_error']:.3f}x (goal {report['goal_abs_speedup_error']}x): "
          + ("met" if report["meets_goal"] else "NOT met"))
    print(describe_anchor(report["machine_speed"]))
    if args.out:
        import json
        from pathlib import Path

        from ..plots import plot_acceptance_validation, save_chart

        write_text_atomic(args.out, json.dumps(report, indent=1))
        png = Path(args.out).with_suffix(".png")
        save_chart(plot_acceptance_validation(report), png)
        print(f"wrote {args.out} and {png}")
    return 0


def _print_tree_fit(result: MeasuredAcceptance, console) -> None:
    """A tree's accept length (SGLang with speculative_eagle_topk > 1) as the top-1 rate per depth of its own tree
    (`acceptance.trees`), the number `--tree` prices it with."""
    from ..scenario.drafting import measured_tree_shape

    shape = measured_tree_shape(result.conditions)
    if shape is None or shape.topk == 1 or result.per_position is not None:
        return
    from ..acceptance.trees import fit_alpha_to_accept_length

    try:
        alpha = fit_alpha_to_accept_length(shape, result.expected_tokens)
    except ValueError:
        return
    console.print(f"tree {shape.steps},{shape.topk},{shape.num_draft_tokens}: top-1 acceptance {alpha:.3f} per depth "
                  f"gives this accept length (geometric over ranks); price it with --tree {shape.steps},{shape.topk},"
                  f"{shape.num_draft_tokens}")


def print_acceptance(result: MeasuredAcceptance, as_json: bool = False) -> None:
    """The result as text tables (warnings on stderr-like yellow lines) or JSON on stdout (warnings on stderr)."""
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..acceptance.measured import CONFIDENCE

    console = Console(width=120)
    level = f"{CONFIDENCE:.0%}"
    console.print(f"[bold]Acceptance[/] from {escape(result.engine)}: {escape(result.source)}")
    if result.per_position is not None:
        table = Table(title="Per-position acceptance (conditional: draft i accepted given drafts 1..i-1 were)")
        for column in ("position", "alpha_i", f"{level} interval", "accepted / reached"):
            table.add_column(column, justify="right")
        trials = (None,) * result.k if result.reached is None else (result.n_drafts,) + result.reached[:-1]
        for i, (alpha, ci) in enumerate(zip(result.per_position, result.per_position_ci or (None,) * result.k)):
            counts = "-" if trials[i] is None else f"{result.reached[i]:,} / {trials[i]:,}"
            table.add_row(str(i + 1), f"{alpha:.3f}", "-" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]", counts)
        console.print(table)
    e_ci = "" if result.expected_tokens_ci is None else (
        f" ({level} interval [{result.expected_tokens_ci[0]:.3f}, {result.expected_tokens_ci[1]:.3f}])")
    a_ci = "" if result.iid_alpha_ci is None else f" [{result.iid_alpha_ci[0]:.3f}, {result.iid_alpha_ci[1]:.3f}]"
    console.print(f"E at the measured k = {result.k}: {result.expected_tokens:.3f} tokens per step{e_ci}"
                  + ("" if result.n_drafts is None else f", over {result.n_drafts:,} speculative steps"))
    console.print(f"i.i.d. alpha with the same E at k = {result.k}: {result.iid_alpha:.3f}{a_ci}")
    _print_tree_fit(result, console)
    pmf = result.committed_tokens_pmf
    basis = "" if result.per_position is not None else " (under the i.i.d. alpha: the source gives a mean only)"
    console.print(f"committed tokens per step{basis}: " + ", ".join(f"{n}: {p:.1%}" for n, p in enumerate(pmf, 1)))
    table = Table(title="What it implies for other k")
    for column in ("k", "E[tokens]", "basis"):
        table.add_column(escape(column), justify="right")
    for row in result.expected_tokens_by_k(max(result.k, 8)):
        table.add_row(str(row["k"]), f"{row['expected_tokens']:.3f}", row["basis"])
    console.print(table)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")


def print_presets() -> int:
    from rich.console import Console
    from rich.table import Table

    from ..acceptance.presets import list_presets

    table = Table(title="Published acceptance presets (--acceptance NAME)")
    for column in ("name", "method", "target", "task", "shape", "k", "T", "E at k", "confidence"):
        table.add_column(column)
    for p in list_presets():
        measured = p.to_measured()
        table.add_row(p.name, p.method, p.target.split("/")[-1], p.task, p.shape, str(p.k), f"{p.temperature:g}",
                      f"{measured.expected_tokens:.2f}", p.source.confidence)
    Console(width=170).print(table)
    return 0


__all__ = ["add_acceptance_parser", "print_acceptance", "print_presets"]
