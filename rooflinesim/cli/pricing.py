"""The commands that price a Scenario: predict, sweep, serve and plot."""

from __future__ import annotations

import sys

from ..errors import InputError
from ..units import parse_float_list
from .arguments import deployment_options, print_warnings, speculation_options


def cmd_predict(args) -> int:
    from ..pricing.predict import predict
    from ..report import render_prediction, to_json

    prediction = predict(
        hw=args.hw, model=args.model, batch=args.batch, ctx=args.ctx, allow_long_context=args.allow_long_context,
        speculative=not args.no_speculation, alpha=args.alpha, alpha_per_position=args.alpha_per_position, k=args.k,
        **deployment_options(args), **speculation_options(args),
    )
    if args.json:
        print(to_json(prediction))
        print_warnings(prediction.warnings)
    else:
        render_prediction(prediction)
    return 0


def cmd_sweep(args) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from ..fileio import check_output_path
    from ..pricing.sweep import sweep
    from ..units import format_count, parse_count_range, parse_int_range

    fmt = None
    if args.output:
        check_output_path(args.output, "sweep output (-o)")
        fmt = args.format or ("json" if args.output.endswith(".json") else "csv")
    result = sweep(
        hw=args.hw, model=args.model, batch=parse_count_range(args.batch), ctx=parse_count_range(args.ctx),
        alpha=None if args.alpha is None else parse_float_list(args.alpha, "acceptance rate"),
        k=parse_int_range(args.k, what="--k"),
        **deployment_options(args), **speculation_options(args),
    )
    if args.output:
        from ..pricing.gridio import write_grid

        write_grid(result, Path(args.output), fmt)
    if args.json:
        print(result.to_json(include_grid=False))
        print_warnings(result.warnings)
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
    print_warnings(result.warnings, console)
    return 0


def cmd_serve(args) -> int:
    import json

    from rich.console import Console

    from ..fileio import check_output_path, write_text_atomic
    from ..scenario.builder import build_scenario
    from ..scenario.inputs import check_positive_int
    from ..serve import ServeConfig, parse_policies, simulate
    from ..serve.rates import WorkloadSpec, get_crossovers, parse_rates, run_rate_sweep
    from ..serve.render import render_rate_sweep
    from ..serve.uncertainty import get_summary_interval
    from ..serve.guard import check_workload_work
    from ..serve.workload import LengthDistribution, check_cv

    if args.output:
        check_output_path(args.output, "request log (-o)")
    if args.arrivals == "gamma" and args.trace is None:
        check_cv(args.cv)
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
                              **deployment_options(args), **speculation_options(args))
    if args.emit_config:
        from ..serve.engine_configs import emit_engine_config, get_config_header

        context = workload.prompt.typical_tokens + workload.output.typical_tokens // 2
        print(emit_engine_config(scenario, args.emit_config, config, context))
        if args.emit_config == "vllm":  # JSON carries no comment: its provenance goes to stderr
            print(get_config_header(scenario, context), file=sys.stderr)
        print_warnings(scenario.warnings)
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
        check_workload_work(workload, 1, config.max_num_batched_tokens)
        requests = workload.get_requests(rates[0])
        result = simulate(scenario, requests, policies[0], config)
        write_text_atomic(args.output, result.get_request_log_jsonl())
        summary = result.get_summary(args.slo_ttft, args.slo_tpot)
        rows = [{"rate_per_s": rates[0], **summary,
                 "interval": get_summary_interval(scenario, requests, policies[0], config, summary)}]
    else:
        rows = run_rate_sweep(scenario, workload, rates, policies, config, args.slo_ttft, args.slo_tpot,
                              args.dask, args.workers)
    crossovers = get_crossovers(rows)
    if args.json:
        print(json.dumps({"runs": rows, "crossovers": crossovers}, indent=1))
        print_warnings(scenario.warnings)
        return 0
    console = Console(width=160)
    render_rate_sweep(rows, crossovers, console, f"{rows[0]['model']} on {rows[0]['hardware']}"
                      f" (tp {scenario.workload.tensor_parallel}), draft {scenario.drafter.name}")
    if args.output:
        console.print(f"per-request log written to {args.output}")
    print_warnings(scenario.warnings, console)
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


def cmd_plot(args) -> int:
    from ..fileio import check_output_path, open_atomic
    from ..scenario.inputs import MAX_CONTEXT_TOKENS
    from ..units import parse_count_range, parse_int_range

    out = check_output_path(args.output, "chart output (-o)", PLOT_SUFFIXES)

    def one(values, what):
        if len(values) != 1:
            raise InputError(f"plot {args.kind} takes one {what}, got {', '.join(str(v) for v in values)}")
        return values[0]

    options = dict(hw=args.hw, model=args.model, **deployment_options(args))
    if args.allow_long_context:  # only when asked: the speedup map's own default already allows long contexts
        options["allow_long_context"] = True
    speculation = dict(draft=args.draft, drafter=args.drafter)
    alphas = parse_float_list(args.alpha, "acceptance rate") if args.alpha else None
    if args.acceptance is not None and args.alpha:
        raise InputError("give --acceptance or --alpha, not both")
    if args.acceptance is not None:  # charts price i.i.d. rates: build_scenario turns the source into one
        speculation.update(acceptance=args.acceptance, acceptance_k=args.acceptance_k, acceptance_as_iid=True)
    from .. import plots  # matplotlib only from here on

    if args.kind == "serve":
        from ..serve import LengthDistribution, parse_policies
        from ..serve.rates import WorkloadSpec, parse_rates

        scenario = plots.get_scenario(args.hw, args.model, draft=args.draft, drafter=args.drafter,
                                      alpha=alphas[0] if alphas else None, **deployment_options(args))
        from ..scenario.inputs import check_positive_int

        workload = WorkloadSpec(LengthDistribution.parse("1024", "prompt"), LengthDistribution.parse("128", "output"),
                                requests=check_positive_int(args.requests, "--requests", 10_000_000))
        fig = plots.plot_serve(scenario, rates=parse_rates(args.rate or "1..32"),
                               policies=[p.name for p in parse_policies(args.policy or "off,fixed:4,dynamic")],
                               workload=workload)
    elif args.kind == "validation":
        if not args.report:
            raise InputError("plot validation needs --report FILE (a JSON written by 'rooflinesim validate')")
        fig = plots.plot_validation(args.report)
    elif args.kind == "roofline":
        fig = plots.plot_roofline(batch=parse_count_range(args.batch or "1,8,64,256"),
                                  ctx=parse_count_range(args.ctx or "1k,32k"),
                                  k=one(parse_int_range(args.k or "4", what="--k"), "k"),
                                  per_op=args.per_op, **options)
    elif args.kind == "speedup":
        fig = plots.plot_speedup_map(alpha=None if args.acceptance else one(alphas or [0.8], "--alpha"),
                                     batch=parse_count_range(args.batch or "1..1024"),
                                     ctx=parse_count_range(args.ctx or "512..128k"),
                                     k=parse_int_range(args.k or "0..8", what="--k"), **speculation, **options)
    elif args.kind == "k":
        fig = plots.plot_speedup_vs_k(alpha=None if args.acceptance else alphas or [0.6, 0.7, 0.8, 0.9],
                                      batch=one(parse_count_range(args.batch or "1"), "--batch"),
                                      ctx=one(parse_count_range(args.ctx or "4k"), "--ctx"),
                                      k_max=max(parse_int_range(args.k or "0..10", what="--k")), **speculation, **options)
    else:
        k = one(parse_int_range(args.k, what="--k"), "k") if args.k else None
        if k is not None and not 0 <= k < MAX_CONTEXT_TOKENS:  # a verify step of k + 1 tokens
            raise InputError(f"--k for plot breakdown must be from 0 to {MAX_CONTEXT_TOKENS - 1:,}, got {k:,}")
        fig = plots.plot_step_breakdown(batch=one(parse_count_range(args.batch or "1"), "--batch"),
                                        ctx=parse_count_range(args.ctx) if args.ctx else None,
                                        new_tokens=1 if k is None else k + 1, **options)
    with open_atomic(out, "wb") as f:
        fig.savefig(f, format=out.suffix.lower().lstrip("."), dpi=150, bbox_inches="tight")
    print_warnings(getattr(fig, "rooflinesim_warnings", ()))
    print(f"wrote {out}")
    return 0


