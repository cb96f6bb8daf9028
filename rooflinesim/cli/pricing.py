"""The commands that price a Scenario: predict, sweep, serve and plot."""

from __future__ import annotations

import sys

from ..errors import InputError
from ..units import parse_float_list
from .arguments import deployment_options, print_assumed, print_warnings, speculation_options


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
        print_assumed(prediction.scenario.assumed)
    else:
        render_prediction(prediction, ops=args.ops, k_table=args.k_table)
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
        hw=args.hw, model=args.model, batch=None if args.batch is None else parse_count_range(args.batch),
        ctx=None if args.ctx is None else parse_count_range(args.ctx),
        alpha=None if args.alpha is None else parse_float_list(args.alpha, "acceptance rate"),
        k=None if args.k is None else parse_int_range(args.k),
        **deployment_options(args), **speculation_options(args),
    )
    if args.output:
        from ..pricing.gridio import write_grid

        write_grid(result, Path(args.output), fmt)
    if args.json:
        print(result.to_json(include_grid=False))
        print_warnings(result.warnings)
        print_assumed(result.assumed)
        return 0
    console = Console(width=140)
    table = Table(title=f"Where speculation stops paying: {result.model} on {result.hardware}, draft {result.draft}")
    first = int(result.batch[0])
    for column in ("context", "alpha", "break-even batch", "max batch that fits", f"best k @ b={first}",
                   f"speedup @ b={first}", "vLLM disable at / k", "TRT-LLM draft_len_schedule"):
        table.add_column(column, justify="right")
    for row, sched in zip(result.get_break_even_table(), result.get_engine_schedules()):
        vllm = sched["vllm"]
        table.add_row(
            format_count(row["context_tokens"]), f"{row['alpha']:g}", describe_break_even(row),
            "-" if row["max_batch_that_fits"] is None else str(row["max_batch_that_fits"]),
            str(row["best_k_at_first_batch"]), f"{row['best_speedup_at_first_batch']:.2f}x",
            f"{vllm['speculative_disable_by_batch_size'] or '-'} / {vllm['num_speculative_tokens']}",
            str(sched["trtllm"]["draft_len_schedule"]),
        )
    console.print(table)
    console.print(f"{result.n_points:,} grid points" + (f"; grid written to {args.output}" if args.output else ""))
    print_assumed(result.assumed, console)
    print_warnings(result.warnings, console)
    return 0


def describe_break_even(row: dict) -> str:
    """One break-even row (`SweepResult.get_break_even_table`) in words: a batch that fits, or which kind of never."""
    verdict = row["speculation_verdict"]
    if verdict == "stops_paying":
        return str(row["break_even_batch"])
    if verdict == "never_pays":
        return f"{row['break_even_batch']} (never pays)"
    if verdict == "nothing_fits":
        return "does not fit"
    return f"never, up to {row['largest_fitting_batch']} (largest that fits)"


def cmd_serve(args) -> int:
    import json
    from dataclasses import replace

    from rich.console import Console

    from ..fileio import check_output_path, write_text_atomic
    from ..scenario.builder import build_scenario
    from ..scenario.inputs import (
        DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS, DEFAULT_SERVE_REQUESTS, check_positive_int,
    )
    from ..serve import ServeConfig, parse_policies, simulate
    from ..serve.rates import WorkloadSpec, get_crossovers, parse_rates, run_rate_sweep
    from ..serve.render import render_rate_sweep
    from ..serve.uncertainty import get_summary_interval
    from ..serve.workload import LengthDistribution

    if args.output:
        check_output_path(args.output, "request log (-o)")
    if args.workers is not None:
        check_positive_int(args.workers, "--workers", 4096)
    assumed = {}
    if args.trace is None:
        for name, value, default in (("prompt", args.prompt_tokens, DEFAULT_PROMPT_TOKENS),
                                     ("output", args.output_tokens, DEFAULT_OUTPUT_TOKENS)):
            if value is None:
                assumed[name] = f"{default} tokens"
        if args.requests is None and not (args.emit_config and not args.rate):  # no runs: no request count
            assumed["requests"] = f"{DEFAULT_SERVE_REQUESTS} per run"
    workload = WorkloadSpec(LengthDistribution.parse(args.prompt_tokens or DEFAULT_PROMPT_TOKENS, "--prompt-tokens"),
                            LengthDistribution.parse(args.output_tokens or DEFAULT_OUTPUT_TOKENS, "--output-tokens"),
                            check_positive_int(DEFAULT_SERVE_REQUESTS if args.requests is None else args.requests,
                                               "--requests", 10_000_000), args.arrivals, args.cv, args.seed, args.trace)
    config = ServeConfig(args.max_num_seqs, args.max_num_batched_tokens, args.block_size, args.seed).check()
    longest = workload.prompt.max_tokens + workload.output.max_tokens
    scenario = build_scenario(args.hw, args.model, 1, longest, allow_long_context=args.allow_long_context,
                              alpha=args.alpha, alpha_per_position=args.alpha_per_position, k_values=[0],
                              assumed=assumed, **deployment_options(args), **speculation_options(args))
    if args.emit_config:
        from ..serve.engine_configs import emit_engine_config

        context = workload.prompt.typical_tokens + workload.output.typical_tokens // 2
        stop_batch, verdict = _serve_verdict(args, scenario, workload, config) if args.rate else (None, None)
        print(emit_engine_config(scenario, args.emit_config, config, context, stop_batch=stop_batch,
                                 verdict=verdict))
        if not args.rate:
            print("note: the verdict is the step model's at one context; give --rate to carry serve's verdict under "
                  "load into the threshold", file=sys.stderr)
        print_warnings(scenario.warnings)
        return 0
    positions = None if scenario.acceptance.per_position is None else len(scenario.acceptance.per_position)
    policies = [p.name for p in parse_policies(args.policy, positions)]
    rates = parse_rates(args.rate) if args.rate else [None]
    if rates == [None] and args.trace is None:
        rates = [4.0]
        scenario = replace(scenario, assumed={**scenario.assumed, "rate": "4 requests/s (--rate to change)"})
    for value, what in ((args.slo_ttft, "--slo-ttft"), (args.slo_tpot, "--slo-tpot")):
        if value is not None and not value > 0:
            raise InputError(f"{what} must be a positive number of seconds, got {value}")
    if args.output:
        if len(rates) != 1 or len(policies) != 1:
            raise InputError("-o writes one run's per-request log: give one --rate and one --policy")
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
        print(json.dumps({"runs": rows, "crossovers": crossovers, "assumed": scenario.assumed}, indent=1))
        print_warnings(scenario.warnings)
        print_assumed(scenario.assumed)
        return 0
    console = Console(width=160)
    render_rate_sweep(rows, crossovers, console, f"{rows[0]['model']} on {rows[0]['hardware']}"
                      f" (tp {scenario.workload.tensor_parallel}), draft {scenario.drafter.name}")
    if args.output:
        console.print(f"per-request log written to {args.output}")
    print_assumed(scenario.assumed, console)
    print_warnings(scenario.warnings, console)
    return 0


def _serve_verdict(args, scenario, workload, config) -> tuple[int | None, str]:
    """(the batch from which speculation goes off, the verdict in words) from serve's own runs at --rate: off against
    the first speculative --policy; the crossover for latency is where it stops paying, at off's mean batch there."""
    import math

    from ..serve import parse_policies
    from ..serve.rates import get_crossovers, parse_rates, run_rate_sweep

    policies = [p.name for p in parse_policies(args.policy)]
    speculative = [p for p in policies if p != "off"]
    if not speculative:
        raise InputError("--emit-config with --rate compares 'off' with a speculative --policy (e.g. off,dynamic)")
    rates = parse_rates(args.rate)
    rows = run_rate_sweep(scenario, workload, rates, ["off", speculative[0]], config, max_workers=args.workers)
    crossover = get_crossovers(rows)[0]["latency"]
    if crossover is None:
        return None, (f"serve: {speculative[0]} speculation pays for latency at every rate tried (up to "
                      f"{max(rates):g} requests/s)")
    stop = max(1, math.ceil(crossover["mean_batch"]))
    before = [r for r in sorted(rates) if r < crossover["rate_per_s"]]
    still = f", still pays at {before[-1]:g}" if before else ""
    return stop, (f"serve: {speculative[0]} speculation stops paying for latency from {crossover['rate_per_s']:g} "
                  f"requests/s{still} (off's mean batch there {crossover['mean_batch']:.1f}): off from batch {stop}")


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
        from ..scenario.inputs import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS, DEFAULT_SERVE_REQUESTS

        workload = WorkloadSpec(LengthDistribution.parse(DEFAULT_PROMPT_TOKENS, "prompt"),
                                LengthDistribution.parse(DEFAULT_OUTPUT_TOKENS, "output"),
                                requests=DEFAULT_SERVE_REQUESTS if args.requests is None else args.requests)
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
        fig = plots.plot_speedup_map(alpha=None if args.acceptance or not alphas else one(alphas, "--alpha"),
                                     batch=parse_count_range(args.batch or "1..1024"),
                                     ctx=parse_count_range(args.ctx or "512..128k"),
                                     k=parse_int_range(args.k) if args.k else None, **speculation, **options)
    elif args.kind == "k":
        fig = plots.plot_speedup_vs_k(alpha=None if args.acceptance else alphas or [0.6, 0.7, 0.8, 0.9],
                                      batch=one(parse_count_range(args.batch or "1"), "--batch"),
                                      ctx=one(parse_count_range(args.ctx or "4k"), "--ctx"),
                                      **({"k_max": max(parse_int_range(args.k))} if args.k else {}), **speculation,
                                      **options)
    else:
        k = one(parse_int_range(args.k), "k") if args.k else None
        fig = plots.plot_step_breakdown(batch=one(parse_count_range(args.batch or "1"), "--batch"),
                                        ctx=parse_count_range(args.ctx) if args.ctx else None,
                                        new_tokens=1 if k is None else k + 1, **options)
    with open_atomic(out, "wb") as f:
        fig.savefig(f, format=out.suffix.lower().lstrip("."), dpi=150, bbox_inches="tight")
    print_warnings(getattr(fig, "rooflinesim_warnings", ()))
    print_assumed(getattr(fig, "rooflinesim_assumed", {}))
    print(f"wrote {out}")
    return 0


