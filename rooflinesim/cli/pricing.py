"""The commands that price a Scenario: predict, sweep, serve and plot."""

from __future__ import annotations

import sys

from ..errors import InputError
from ..units import parse_float_list
from .arguments import deployment_options, given, print_assumed, print_warnings, speculation_options

#: What a command prints with --json: its stdout text and its stderr lines (the warnings)
CommandOutput = tuple[str, list[str]]


def get_warning_lines(warnings) -> list[str]:
    return [f"warning: {warning}" for warning in warnings]


def get_assumed_lines(assumed: dict) -> list[str]:
    from ..scenario.builder import format_assumed

    line = format_assumed(assumed)
    return [line] if line else []


def print_output(output: CommandOutput) -> int:
    text, stderr_lines = output
    print(text)
    for line in stderr_lines:
        print(line, file=sys.stderr)
    return 0


def _predict(args):
    from ..pricing.predict import predict

    return predict(
        hw=args.hw, model=args.model, batch=args.batch, ctx=args.ctx, allow_long_context=args.allow_long_context,
        speculative=not args.no_speculation, alpha=args.alpha, alpha_per_position=args.alpha_per_position, k=args.k,
        **deployment_options(args), **speculation_options(args),
    )


def get_predict_output(args) -> CommandOutput:
    """What `predict --json` prints: the JSON on stdout, the warnings and the assumed line on stderr (explore's
    /api/predict too)."""
    from ..report import to_json

    prediction = _predict(args)
    return to_json(prediction), (get_warning_lines(prediction.warnings)
                                 + get_assumed_lines(prediction.scenario.assumed))


def cmd_predict(args) -> int:
    from ..report import render_prediction

    if args.json:
        return print_output(get_predict_output(args))
    render_prediction(_predict(args), ops=args.ops, k_table=args.k_table)
    return 0


def get_sweep_result(args):
    """The SweepResult of the sweep flags (the grid file, -o, is the caller's business)."""
    from ..pricing.sweep import sweep
    from ..units import parse_count_range, parse_int_range

    return sweep(
        hw=args.hw, model=args.model, batch=None if args.batch is None else parse_count_range(args.batch),
        ctx=None if args.ctx is None else parse_count_range(args.ctx),
        alpha=None if args.alpha is None else parse_float_list(args.alpha, "acceptance rate"),
        k=None if args.k is None else parse_int_range(args.k, what="--k"),
        **deployment_options(args), **speculation_options(args),
    )


def get_sweep_output(args) -> CommandOutput:
    """What `sweep --json` prints (without -o): break-even and schedules on stdout, warnings on stderr."""
    result = get_sweep_result(args)
    return result.to_json(include_grid=False), get_warning_lines(result.warnings) + get_assumed_lines(result.assumed)


def cmd_sweep(args) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..fileio import check_output_path
    from ..report import describe_break_even, describe_break_even_range
    from ..units import format_count

    fmt = None
    if args.output:
        check_output_path(args.output, "sweep output (-o)")
        fmt = args.format or ("json" if args.output.endswith(".json") else "csv")
    result = get_sweep_result(args)
    if args.output:
        from ..pricing.gridio import write_grid

        write_grid(result, Path(args.output), fmt)
    if args.json:
        return print_output((result.to_json(include_grid=False),
                             get_warning_lines(result.warnings) + get_assumed_lines(result.assumed)))
    console = Console(width=160)  # the break-even table's nine columns without wrapping a header
    table = Table(title=f"Where speculation stops paying: {result.model} on {result.hardware}, draft {result.draft}, "
                        f"engine {result.engine}")
    first = int(result.batch[0])
    banded = result.speedup_band is not None
    for column in ("context", "alpha", "break-even batch") + (("range",) if banded else ()) + (
            "max batch that fits", f"best k @ b={first}",
                   f"speedup @ b={first}", "vLLM disable at / k", "TRT-LLM draft_len_schedule"):
        table.add_column(column, justify="right")
    for row, sched in zip(result.get_break_even_table(), result.get_engine_schedules()):
        vllm = sched["vllm"]
        table.add_row(
            format_count(row["context_tokens"]), f"{row['alpha']:g}", describe_break_even(row),
            *((describe_break_even_range(row),) if banded else ()),
            "-" if row["max_batch_that_fits"] is None else str(row["max_batch_that_fits"]),
            str(row["best_k_at_first_batch"]), f"{row['best_speedup_at_first_batch']:.2f}x",
            f"{vllm['speculative_disable_by_batch_size'] or '-'} / {vllm['num_speculative_tokens']}",
            str(sched["trtllm"]["draft_len_schedule"]),
        )
    console.print(table)
    if banded:
        console.print("range: the break-even batch with the measured speedup at either end of "
                      f"{escape(result.speedup_band.source)}")
    console.print(f"{result.n_points:,} grid points" + (f"; grid written to {args.output}" if args.output else ""))
    print_assumed(result.assumed, console)
    print_warnings(result.warnings, console)
    return 0


def _serve(args) -> dict:
    """Run `serve` for these flags: {"scenario", "emitted": (config, verdict note)} with --emit-config, else
    {"scenario", "rows", "crossovers"} (with -o the one run's request log is written too)."""
    from dataclasses import replace

    from ..fileio import check_output_path, write_text_atomic
    from ..scenario.builder import build_scenario
    from ..scenario.inputs import (
        DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS, DEFAULT_SERVE_RATE_PER_S, DEFAULT_SERVE_REQUESTS,
        check_positive_int,
    )
    from ..serve import ServeConfig, parse_policies, simulate
    from ..serve.policies import get_policy_k_bound
    from ..serve.guard import check_workload_work
    from ..serve.rates import WorkloadSpec, get_crossovers, parse_concurrencies, parse_rates, run_rate_sweep
    from ..serve.uncertainty import get_summary_interval
    from ..serve.workload import LengthDistribution, check_cv

    if args.output:
        check_output_path(args.output, "request log (-o)")
    if args.arrivals == "gamma" and args.trace is None:
        check_cv(args.cv)
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
    longest = workload.prompt.max_tokens + workload.output.max_tokens
    scenario = build_scenario(args.hw, args.model, 1, longest, allow_long_context=args.allow_long_context,
                              alpha=args.alpha, alpha_per_position=args.alpha_per_position, k_values=[0],
                              assumed=assumed, **deployment_options(args), **speculation_options(args))
    # the engine's scheduling (step formation, admission, token budget, sequence limit) unless given
    config = ServeConfig.for_engine(scenario.engine, args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                                    args.seed).check()
    if args.emit_config:
        from ..serve.engine_configs import emit_engine_config

        context = workload.prompt.typical_tokens + workload.output.typical_tokens // 2
        stop_batch, verdict = _serve_verdict(args, scenario, workload, config) if args.rate else (None, None)
        note = [] if args.rate else ["note: the verdict is the step model's at one context; give --rate to carry "
                                     "serve's verdict under load into the threshold"]
        return {"scenario": scenario, "emitted": (emit_engine_config(scenario, args.emit_config, config, context,
                                                                     stop_batch=stop_batch, verdict=verdict), note)}
    policies = [p.name for p in parse_policies(args.policy, get_policy_k_bound(scenario))]
    concurrencies = None
    if args.concurrency is not None:
        if args.rate is not None:
            raise InputError("give --rate (open loop) or --concurrency (closed loop), not both")
        concurrencies = parse_concurrencies(args.concurrency)
    rates = parse_rates(args.rate) if args.rate else [None]
    if rates == [None] and args.trace is None and concurrencies is None:
        rates = [DEFAULT_SERVE_RATE_PER_S]
        scenario = replace(scenario, assumed={**scenario.assumed,
                                              "rate": f"{DEFAULT_SERVE_RATE_PER_S:g} requests/s (--rate to change)"})
    for value, what in ((args.slo_ttft, "--slo-ttft"), (args.slo_tpot, "--slo-tpot")):
        if value is not None and not value > 0:
            raise InputError(f"{what} must be a positive number of seconds, got {value}")
    if args.output:
        if len(rates) != 1 or len(policies) != 1 or (concurrencies is not None and len(concurrencies) != 1):
            raise InputError("-o writes one run's per-request log: give one --rate (or --concurrency) and one "
                             "--policy")
        check_workload_work(workload, 1, config.max_num_batched_tokens)
        requests = workload.get_requests(rates[0] if concurrencies is None else 1.0)
        result = simulate(scenario, requests, policies[0], config,
                          concurrency=None if concurrencies is None else concurrencies[0])
        write_text_atomic(args.output, result.get_request_log_jsonl())
        summary = result.get_summary(args.slo_ttft, args.slo_tpot)
        if concurrencies is None:
            rows = [{"rate_per_s": rates[0], **summary,
                     "interval": get_summary_interval(scenario, requests, policies[0], config, summary)}]
        else:
            rows = [{"rate_per_s": None, "concurrency": concurrencies[0], **summary, "interval": None}]
    else:
        rows = run_rate_sweep(scenario, workload, rates, policies, config, args.slo_ttft, args.slo_tpot,
                              args.dask, args.workers, concurrencies)
    if args.baseline not in policies + ["off"]:
        raise InputError(f"--baseline {args.baseline} is none of the policies run ({', '.join(policies)})")
    from ..pricing.speedup_band import get_scenario_speedup_band

    crossovers = get_crossovers(rows, args.baseline, get_scenario_speedup_band(scenario))
    return {"scenario": scenario, "rows": rows, "crossovers": crossovers}


def get_serve_output(args) -> CommandOutput:
    """What `serve --json`, or `serve --emit-config ENGINE`, prints: stdout text and stderr lines."""
    import json

    run = _serve(args)
    scenario = run["scenario"]
    warnings = get_warning_lines(scenario.warnings)
    if "emitted" in run:
        config, note = run["emitted"]
        return config, note + warnings

    def finite(value):  # --rate inf: JSON has no infinity
        return "inf" if isinstance(value, float) and value == float("inf") else value

    runs = [{**row, "rate_per_s": finite(row["rate_per_s"])} for row in run["rows"]]
    def finite_load(at):
        return {**at, "rate_per_s": finite(at["rate_per_s"])} if isinstance(at, dict) and "rate_per_s" in at else at

    crossings = [{key: ({**at, "earliest": finite_load(at["earliest"]), "latest": finite_load(at["latest"])}
                        if key == "latency_range" else finite_load(at)) for key, at in c.items()}
                 for c in run["crossovers"]]
    return (json.dumps({"runs": runs, "crossovers": crossings, "assumed": scenario.assumed}, indent=1),
            warnings + get_assumed_lines(scenario.assumed))


def cmd_serve(args) -> int:
    from rich.console import Console

    from ..serve.render import render_rate_sweep

    if args.emit_config or args.json:
        return print_output(get_serve_output(args))
    run = _serve(args)
    rows, scenario = run["rows"], run["scenario"]
    console = Console(width=160)
    render_rate_sweep(rows, run["crossovers"], console, f"{rows[0]['model']} on {rows[0]['hardware']}"
                      f" (tp {scenario.workload.tensor_parallel}), draft {scenario.drafter.name}, engine "
                      f"{scenario.engine_name}")
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
    from ..pricing.speedup_band import get_scenario_speedup_band
    from ..serve.render import describe_latency_range

    rates = parse_rates(args.rate)
    rows = run_rate_sweep(scenario, workload, rates, ["off", speculative[0]], config, max_workers=args.workers)
    [crossing] = get_crossovers(rows, band=get_scenario_speedup_band(scenario))
    crossover = crossing["latency"]
    # on a datasheet: where the engine's published speedup error puts the same crossover
    within = f"; {describe_latency_range(crossing['latency_range'])}" if crossing.get("latency_range") else ""
    if crossover is None:
        return None, (f"serve: {speculative[0]} speculation pays for latency at every rate tried (up to "
                      f"{max(rates):g} requests/s){within}")
    stop = max(1, math.ceil(crossover["mean_batch"]))
    before = [r for r in sorted(rates) if r < crossover["rate_per_s"]]
    still = f", still pays at {before[-1]:g}" if before else ""
    return stop, (f"serve: {speculative[0]} speculation stops paying for latency from {crossover['rate_per_s']:g} "
                  f"requests/s{still} (off's mean batch there {crossover['mean_batch']:.1f}): off from batch "
                  f"{stop}{within}")


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
    from ..scenario.inputs import DEFAULT_BATCH, DEFAULT_CHART_ALPHAS, DEFAULT_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS
    from ..units import parse_count_range, parse_int_range

    out = check_output_path(args.output, "chart output (-o)", PLOT_SUFFIXES)

    def one(values, what):
        if len(values) != 1:
            raise InputError(f"plot {args.kind} takes one {what}, got {', '.join(str(v) for v in values)}")
        return values[0]

    options = dict(hw=args.hw, model=args.model, **deployment_options(args))
    if args.allow_long_context:  # only when asked: the speedup map's own default already allows long contexts
        options["allow_long_context"] = True
    speculation = given(draft=args.draft, drafter=args.drafter)
    for key in ("tree", "draft_kv_budget", "draft_layer_fraction"):  # only when given: build_scenario's defaults
        if getattr(args, key) is not None:
            speculation[key] = getattr(args, key)
    alphas = parse_float_list(args.alpha, "acceptance rate") if args.alpha else None
    if args.acceptance is not None and args.alpha:
        raise InputError("give --acceptance or --alpha, not both")
    if args.acceptance is not None:  # charts price i.i.d. rates: build_scenario turns the source into one
        speculation.update(acceptance=args.acceptance, acceptance_k=args.acceptance_k, acceptance_as_iid=True)
    from .. import plots  # matplotlib only from here on

    if args.kind == "serve":
        from ..serve import LengthDistribution, parse_policies
        from ..serve.rates import WorkloadSpec, parse_rates

        from ..scenario.inputs import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS, DEFAULT_SERVE_REQUESTS, check_positive_int
        from ..serve import ServeConfig
        from ..serve.policies import get_policy_k_bound
        from ..serve.rates import parse_concurrencies

        scenario = plots.get_scenario(args.hw, args.model, alpha=alphas[0] if alphas else None,
                                      **{**speculation, "k_values": [0]}, **deployment_options(args))
        workload = WorkloadSpec(LengthDistribution.parse(DEFAULT_PROMPT_TOKENS, "prompt"),
                                LengthDistribution.parse(DEFAULT_OUTPUT_TOKENS, "output"),
                                requests=DEFAULT_SERVE_REQUESTS if args.requests is None else
                                check_positive_int(args.requests, "--requests", 10_000_000))
        if args.concurrency is not None and args.rate is not None:
            raise InputError("give --rate (open loop) or --concurrency (closed loop), not both")
        policies = [p.name for p in parse_policies(args.policy or "off,fixed:4,dynamic", get_policy_k_bound(scenario))]
        if args.baseline not in policies:
            raise InputError(f"--baseline {args.baseline} is none of the policies ({', '.join(policies)})")
        fig = plots.plot_serve(scenario, rates=parse_rates(args.rate or "1..32"), policies=policies, workload=workload,
                               concurrencies=None if args.concurrency is None else
                               parse_concurrencies(args.concurrency), baseline=args.baseline,
                               config=ServeConfig.for_engine(scenario.engine).check())
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
        fig = plots.plot_speedup_map(alpha=None if args.acceptance or not alphas else one(alphas, "--alpha"),
                                     batch=parse_count_range(args.batch or "1..1024"),
                                     ctx=parse_count_range(args.ctx or "512..128k"),
                                     k=parse_int_range(args.k, what="--k") if args.k else None, **speculation, **options)
    elif args.kind == "k":
        fig = plots.plot_speedup_vs_k(alpha=None if args.acceptance else alphas or list(DEFAULT_CHART_ALPHAS),
                                      batch=one(parse_count_range(args.batch or str(DEFAULT_BATCH)), "--batch"),
                                      ctx=one(parse_count_range(args.ctx or str(DEFAULT_CONTEXT_TOKENS)), "--ctx"),
                                      **({"k_max": max(parse_int_range(args.k, what="--k"))} if args.k else {}), **speculation,
                                      **options)
    else:
        k = one(parse_int_range(args.k, what="--k"), "k") if args.k else None
        if k is not None and not 0 <= k < MAX_CONTEXT_TOKENS:  # a verify step of k + 1 tokens
            raise InputError(f"--k for plot breakdown must be from 0 to {MAX_CONTEXT_TOKENS - 1:,}, got {k:,}")
        fig = plots.plot_step_breakdown(batch=one(parse_count_range(args.batch or str(DEFAULT_BATCH)), "--batch"),
                                        ctx=parse_count_range(args.ctx) if args.ctx else None,
                                        new_tokens=1 if k is None else k + 1, **options)
    with open_atomic(out, "wb") as f:
        fig.savefig(f, format=out.suffix.lower().lstrip("."), dpi=150, bbox_inches="tight")
    print_warnings(getattr(fig, "rooflinesim_warnings", ()))
    print_assumed(getattr(fig, "rooflinesim_assumed", {}))
    print(f"wrote {out}")
    return 0


