"""Speculation and serving under load against published measurements: prices every row of
`benchmarks/published/speculation-under-load.yaml` and `benchmarks/published/serving-no-spec.yaml` through the public
path (`build_scenario` / `predict_scenario` for batch rows, `rooflinesim.serve.simulate` for rate, all-at-once and
concurrency rows) and prints predicted vs measured, median and p90 |error| for fitted and held-out rows apart and per
source, and the break-even load where a source shows one. docs/accuracy.md describes the pricing and the figures.

    python benchmarks/bench_under_load.py                  # both benchmarks (minutes on 2 shared cores)
    python benchmarks/bench_under_load.py --spec-only      # speculation only (or --serve-only)
    python benchmarks/bench_under_load.py --json out.json  # also the headline figures as JSON

A batch row with `batch_run` is priced as its source ran the batch (the table's `batch_runs`: B greedy copies of each
prompt run to completion, rooflinesim/pricing/batch_run.py). No row-specific constant enters a prediction. A series
without a published acceptance gets one alpha, fitted on its `fitted_on: [acceptance]` row. Keywords the installed
rooflinesim may lack (`engine=`, `tree=`, `draft_kv_budget=`, `concurrency=`) are passed only where `inspect.signature`
shows them; a row the tool cannot express is listed as not yet priceable with the reason, and a row whose engine the
tool does not model is priced `ideal` and marked so.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from rooflinesim.errors import InputError
from rooflinesim.pricing.batch_run import get_copies_run_speedup, get_run_point
from rooflinesim.pricing.predict import predict_scenario
from rooflinesim.pricing.speedup_band import get_speedup_band
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, ServeConfig, generate_requests, simulate
from rooflinesim.specs.registry import SpecError, load_hardware, load_model

HERE = Path(__file__).resolve().parent / "published"
SPEC_TABLE = HERE / "speculation-under-load.yaml"
SERVE_TABLE = HERE / "serving-no-spec.yaml"
RUN_LENGTHS = HERE / "specdecode-bench-lengths.yaml"  # (prompt, output) per dataset for `batch_run` rows
#: lengths a dataset is priced at where the row does not state them: (prompt, output, where they come from)
DATASET_LENGTHS = {
    "sharegpt": (202, 179, "vLLM v0.6.0 blog: ShareGPT sample averages"),
    "cnn-dailymail": (1024, 128, "assumed (no source states the lengths of this run)"),
}
MAX_SIMULATED_REQUESTS = 5000
#: arrival / length draws per serving row (the prediction is their median): at 16-32 req/s one draw of 500 requests
#: moves a row's mean TPOT by up to 50 % (docs/accuracy.md)
SERVE_SEEDS = 5
SERVE_REQUESTS_FOR_SPEC = 300
#: the chance that an n-gram lookup finds a match where the step would otherwise accept nothing, per dataset: the
#: constants of SpecDecode-Bench's own simulator (SpecDecode-Bench/simulator simulator.py @260263c
#: NGRAM_MATCHING_PROBABILITY, "a very rough estimation" there); a step drafts unless its first draft token would be
#: rejected and no match is found, so the share of sequences drafting is 1 - (1 - alpha)(1 - p)
NGRAM_MATCH_PROBABILITY = {"sharegpt": 0.2, "cnn-dailymail": 0.4, "gsm8k": 0.2, "instructcoder": 0.8}
DRAFTER_KWARGS = {"eagle": {"drafter": "eagle"}, "eagle3": {"drafter": "eagle3"}, "ngram": {"drafter": "ngram"}}


def load_rows(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())["rows"]


def load_break_even(path: Path = SPEC_TABLE) -> list[dict]:
    return yaml.safe_load(path.read_text()).get("break_even", [])


def _accepts(fn, name: str) -> bool:
    """Whether `fn` takes keyword `name`: a named parameter, or for a function taking the scenario's flat options
    (`build_scenario(**flat)`) one of `scenario.groups.FLAT_OPTIONS`."""
    parameters = inspect.signature(fn).parameters
    if name in parameters:
        return True
    takes_flat = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    try:
        from rooflinesim.scenario.groups import FLAT_OPTIONS
    except ImportError:  # an install before the grouped options
        return False
    return takes_flat and name in FLAT_OPTIONS


def engine_kwargs(fn, row: dict) -> dict:
    """{'engine': row's engine} where `fn` takes an engine, else {} (priced by the ideal roofline)."""
    return {"engine": row["engine"]} if _accepts(fn, "engine") and row.get("engine") else {}


def can_price(shape: str) -> bool:
    """Whether the installed rooflinesim expresses a drafting or load shape (issue 23 adds them)."""
    if shape == "tree":
        return _accepts(build_scenario, "tree")
    if shape == "self":
        return _accepts(build_scenario, "draft_kv_budget")
    if shape == "concurrency":
        return _accepts(simulate, "concurrency")
    return True


def _draft_kv_budget(row: dict):
    return row.get("draft_kv_budget") or row.get("pricing_draft_kv_budget")


def not_priceable_reason(row: dict) -> str | None:
    """Why the tool cannot express this row yet (None: it can)."""
    if row.get("drafting") == "tree":
        if not can_price("tree"):
            return "tree drafting (issue 23: --tree)"
        if None in (row["tree"].get("depth"), row["tree"].get("topk"), row["tree"].get("draft_tokens")):
            return "tree configuration not stated by the source"
    if row.get("drafting") == "self":
        if not can_price("self"):
            return "self-speculation with a bounded draft KV (issue 23: --drafter self --draft-kv-budget)"
        if not _draft_kv_budget(row):
            return "draft KV budget not stated by the source"
    if row.get("load") == "concurrency" and not can_price("concurrency"):
        return "closed-loop concurrency (issue 23: serve --concurrency)"
    for kind, loader, name in (("hardware", load_hardware, row["hardware"]), ("model", load_model, row["model"]),
                               ("model", load_model, row.get("draft_model"))):
        try:
            name is None or loader(name)
        except (SpecError, InputError):
            return f"{kind} {name!r} not shipped"
    if row.get("drafting") in ("chain", "tree") and row.get("drafter") not in DRAFTER_KWARGS and \
            not row.get("draft_model"):
        return f"drafter {row.get('drafter')!r} not modelled"
    return None


def _build(row: dict, ctx=None, batch=1, **extra):
    kwargs = dict(tp=row.get("tp", 1), weight_dtype=row.get("weight_dtype", "bf16"), allow_long_context=True, **extra)
    if row.get("deployment", {}).get("kv_dtype"):  # a deployment fact the source states (serving rows)
        kwargs["kv_dtype"] = row["deployment"]["kv_dtype"]
    attempt = engine_kwargs(build_scenario, row)
    if attempt:
        try:
            return build_scenario(row["hardware"], row["model"], batch, ctx or 4096, **attempt, **kwargs), attempt
        except (InputError, SpecError):
            # an engine the model does not know (e.g. vllm-v0): bare kernels, named so, rather than the default engine
            attempt = {"engine": "ideal"}
    return build_scenario(row["hardware"], row["model"], batch, ctx or 4096, **attempt, **kwargs), attempt


def priced_engine(scenario) -> str:
    """The engine a scenario was priced with, as the tool names it ('ideal' before engines are modelled)."""
    return str(getattr(scenario, "engine_name", "ideal"))


def _spec_extra(row: dict, alpha: float) -> dict:
    """The drafting keywords of build_scenario for the row: a chain of k, a tree (SGLang's steps, top-k and
    num_draft_tokens, which counts the root: the row's draft tokens + 1; k counts the tree's draft tokens) or
    self-speculation with a bounded draft KV."""
    extra = dict(alpha=alpha, k=row["k"])
    if row.get("drafting") == "self":
        extra.update(drafter="self", draft_kv_budget=int(_draft_kv_budget(row)))
        return extra
    if row.get("drafting") == "tree":
        tree = row["tree"]
        extra.update(tree=f"{tree['depth']},{tree['topk']},{tree['draft_tokens'] + 1}", k=tree["draft_tokens"])
    if row.get("draft_model"):
        extra["draft"] = row["draft_model"]
    else:
        extra.update(DRAFTER_KWARGS[row["drafter"]])
    if row.get("drafter") == "ngram" and row.get("dataset") in NGRAM_MATCH_PROBABILITY and \
            _accepts(build_scenario, "ngram_match_fraction"):
        extra["ngram_match_fraction"] = 1.0 - (1.0 - alpha) * (1.0 - NGRAM_MATCH_PROBABILITY[row["dataset"]])
    return extra


def _context(row: dict) -> int:
    if row.get("pricing_context_tokens"):
        return int(row["pricing_context_tokens"])
    return int(row["prompt_tokens"] + row["output_tokens"] // 2)


@functools.lru_cache(maxsize=1)
def _run_lengths() -> dict:
    return yaml.safe_load(RUN_LENGTHS.read_text())["datasets"]


def predict_copies_run_speedup(row: dict, alpha: float, batch: int) -> float:
    """`batch_run: identical-copies`: each prompt of the dataset run to completion as `batch` greedy copies, prefill
    included, per-prompt throughputs averaged (the source's method, `batch_runs` in the table; pricing/batch_run.py)."""
    @functools.lru_cache(maxsize=None)
    def price(ctx: int):
        return get_run_point(predict_scenario(_build(row, ctx, batch, **_spec_extra(row, alpha))[0]))

    return get_copies_run_speedup(_run_lengths()[row["dataset"]], price)


def predict_batch_speedup(row: dict, alpha: float, batch: int | None = None) -> float:
    if row.get("batch_run") == "identical-copies":
        return predict_copies_run_speedup(row, alpha, batch or row["batch"])
    scenario, _ = _build(row, _context(row), batch or row["batch"], **_spec_extra(row, alpha))
    return float(predict_scenario(scenario).speculative.speedup)


def get_length_distributions(row: dict, prefer_named: bool = False) -> tuple[LengthDistribution, LengthDistribution]:
    """The row's published lengths; else a named dataset distribution where `serve` ships one; else the dataset's
    fixed lengths from DATASET_LENGTHS. `prefer_named`: the named distribution first (the serving rows: ShareGPT's
    202 / 179 are that dataset's averages, not fixed lengths)."""
    if (prefer_named or not (row.get("prompt_tokens") and row.get("output_tokens"))) and row.get("dataset"):
        try:
            return (LengthDistribution.parse(f"{row['dataset']}", "prompt"),
                    LengthDistribution.parse(f"{row['dataset']}", "output"))
        except InputError:
            pass
    prompt, output = ((row["prompt_tokens"], row["output_tokens"]) if row.get("prompt_tokens") and
                      row.get("output_tokens") else DATASET_LENGTHS[row["dataset"]][:2])
    return LengthDistribution.parse(str(prompt), "prompt"), LengthDistribution.parse(str(output), "output")


def _simulate(row: dict, scenario, engine: dict, rate: float, n: int, policy: str):
    prompt, output = get_length_distributions(row)
    reqs = generate_requests(n, rate, prompt, output, seed=0)
    kwargs = engine if _accepts(simulate, "engine") else {}
    return simulate(scenario, reqs, policy, ServeConfig(), **kwargs)


def predict_rate_speedup(row: dict, alpha: float, rate: float | None = None) -> float:
    scenario, engine = _build(row, 4096, 1, **_spec_extra(row, alpha))
    rate = rate or row["rate_per_s"]
    off = _simulate(row, scenario, engine, rate, SERVE_REQUESTS_FOR_SPEC, "off")
    spec = _simulate(row, scenario, engine, rate, SERVE_REQUESTS_FOR_SPEC, f"fixed:{_spec_extra(row, alpha)['k']}")
    return float(np.mean(off.latency_s) / np.mean(spec.latency_s))


def predict_concurrency_speedup(row: dict, alpha: float, concurrency: int | None = None) -> float:
    """Closed loop of C clients (`simulate(concurrency=C)`): per-user output rate with / without speculation."""
    scenario, engine = _build(row, 4096, 1, **_spec_extra(row, alpha))
    c = int(concurrency or row["concurrency"])
    prompt, output = get_length_distributions(row)
    reqs = generate_requests(max(8 * c, 64), 1.0, prompt, output, seed=0)
    kwargs = engine if _accepts(simulate, "engine") else {}

    def per_user(policy):
        result = simulate(scenario, reqs, policy, ServeConfig(), concurrency=c, **kwargs)
        return float(np.mean(result.output_tokens / result.latency_s))

    return per_user(f"fixed:{_spec_extra(row, alpha)['k']}") / per_user("off")


def predict_speedup(row: dict, alpha: float, load=None) -> float:
    if row["load"] == "batch":
        return predict_batch_speedup(row, alpha, load)
    if row["load"] == "concurrency":
        return predict_concurrency_speedup(row, alpha, load)
    return predict_rate_speedup(row, alpha, load)


def fit_alpha(row: dict, lo: float = 0.02, hi: float = 0.98, steps: int = 14) -> float:
    """The i.i.d. alpha at which the tool reproduces the row's measured speedup (speedup rises with alpha); clamped
    to [lo, hi] where the measurement lies outside what the tool can reach."""
    target = row["measured"]
    if predict_speedup(row, hi) <= target:
        return hi
    if predict_speedup(row, lo) >= target:
        return lo
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if predict_speedup(row, mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def alpha_from_acceptance_length(length: float, k: int) -> float:
    """The i.i.d. alpha whose chain of k drafts accepts `length` tokens per step, bonus included:
    (1 - alpha^(k+1)) / (1 - alpha) = length (bisection; the left side rises with alpha from 1 to k + 1)."""
    lo, hi = 0.0, 1.0 - 1e-9
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if (1 - mid ** (k + 1)) / (1 - mid) < length else (lo, mid)
    return 0.5 * (lo + hi)


def series_alphas(rows: list[dict]) -> dict[str, float]:
    alphas = {}
    for row in rows:
        acceptance = row.get("acceptance", {})
        if acceptance.get("kind") == "alpha":
            alphas.setdefault(row["series"], float(acceptance["value"]))
        elif acceptance.get("kind") == "acceptance_length" and row.get("drafting") == "chain" and row.get("k"):
            alphas.setdefault(row["series"], alpha_from_acceptance_length(float(acceptance["value"]), row["k"]))
    for row in rows:
        if "acceptance" in row.get("fitted_on", []) and row["series"] not in alphas and not not_priceable_reason(row):
            alphas[row["series"]] = fit_alpha(row)
    return alphas


def summarize(errors, unit: str) -> str:
    e = np.abs(np.asarray(errors, dtype=float))
    if e.size == 0:
        return "no rows"
    scale, fmt = (100.0, "{:.1f} %") if unit == "%" else (1.0, "{:.3f}x")
    return (f"median {fmt.format(scale * np.median(e))}, p90 {fmt.format(scale * np.percentile(e, 90))} "
            f"over {e.size} rows")


def run_spec(rows: list[dict]) -> dict:
    alphas = series_alphas(rows)
    results, skipped = [], []
    print(f"{'row':62s} {'load':>8s} {'engine':>8s} {'alpha':>6s} {'measured':>9s} {'predicted':>9s} {'error':>7s}")
    for row in rows:
        reason = not_priceable_reason(row) or (None if row["series"] in alphas else "no acceptance (series unfitted)")
        if reason:
            skipped.append((row, reason))
            continue
        predicted = predict_speedup(row, alphas[row["series"]])
        error = predicted - row["measured"]
        fitted = bool(row.get("fitted_on"))
        engine = priced_engine(_build(row)[0])
        results.append(dict(row=row, predicted=predicted, error=error, fitted=fitted, engine=engine))
        load = {"batch": f"b{row.get('batch')}", "rate": f"{row.get('rate_per_s')}/s",
                "concurrency": f"c{row.get('concurrency')}"}[row["load"]]
        print(f"{row['id']:62s} {load:>8s} {engine:>8s} {alphas[row['series']]:6.3f} {row['measured']:9.3f} "
              f"{predicted:9.3f} {error:+7.3f}{'  (fit)' if fitted else ''}")
    print("\nnot yet priceable:")
    for reason in sorted({r for _, r in skipped}):
        ids = [row["id"] for row, r in skipped if r == reason]
        print(f"  {len(ids):3d} rows: {reason} (e.g. {ids[0]})")
    print("\nspeculation speedup |predicted - measured| (x):")
    print(f"  fitted rows:   {summarize([r['error'] for r in results if r['fitted']], 'x')}")
    print(f"  held-out rows: {summarize([r['error'] for r in results if not r['fitted']], 'x')}")
    for source in sorted({r["row"]["source_id"] for r in results}):
        held = [r["error"] for r in results if not r["fitted"] and r["row"]["source_id"] == source]
        print(f"    held out, {source}: {summarize(held, 'x')}")
    held = [r for r in results if not r["fitted"]]
    direction = [np.sign(r["predicted"] - 1) == np.sign(r["row"]["measured"] - 1) for r in held]
    print(f"  held-out rows on the right side of 1.0x: {sum(direction)} of {len(direction)}; predicted above the "
          f"measured speedup in {sum(r['error'] > 0 for r in held)} of {len(held)}")
    trends = get_trend_agreement(results)
    print(f"  trend with load: {trends['series_agreeing']} of {trends['series']} series move the measured way from "
          f"their lowest to their highest load; {len(trends['pairs_against'])} of {trends['pairs']} steps between "
          f"neighbouring loads where the measured speedup moves by more than {TREND_NOISE_X}x go the other way"
          + "".join(f"\n    {p['series']}: {p['from']:g} -> {p['to']:g} measured {p['measured']:+.3f}x, predicted "
                    f"{p['predicted']:+.3f}x" for p in trends["pairs_against"]))
    return dict(alphas=alphas, results=results, skipped=skipped, trends=trends)


#: a move of the measured speedup between neighbouring loads smaller than this is read as flat (the EAGLE-3 paper's
#: table moves by up to 0.11x between neighbouring batches where the trend is flat)
TREND_NOISE_X = 0.05


def _load_value(row: dict) -> float:
    return float(row.get("batch") or row.get("rate_per_s") or row.get("concurrency"))


def get_trend_agreement(results: list[dict]) -> dict:
    """Whether predictions move with load as the measurements do, per series of two or more priced rows: the sign of
    the change from the lowest to the highest load, and each step between neighbouring loads where the measured
    speedup moves by more than TREND_NOISE_X and the prediction moves the other way."""
    by_series: dict[str, list[dict]] = {}
    for r in results:
        by_series.setdefault(r["row"]["series"], []).append(r)
    series = agreeing = pairs = 0
    against = []
    for name, members in sorted(by_series.items()):
        if len(members) < 2:
            continue
        members = sorted(members, key=lambda r: _load_value(r["row"]))
        series += 1
        measured = [r["row"]["measured"] for r in members]
        predicted = [r["predicted"] for r in members]
        agreeing += (measured[-1] - measured[0] > 0) == (predicted[-1] - predicted[0] > 0)
        for i in range(len(members) - 1):
            pairs += 1
            dm, dp = measured[i + 1] - measured[i], predicted[i + 1] - predicted[i]
            if abs(dm) > TREND_NOISE_X and (dm > 0) != (dp > 0):
                against.append(dict(series=name, measured=dm, predicted=dp,
                                    **{"from": _load_value(members[i]["row"]), "to": _load_value(members[i + 1]["row"])}))
    return dict(series=series, series_agreeing=agreeing, pairs=pairs, pairs_against=against)


BATCH_GRID = [1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512]


def run_break_even(rows: list[dict], alphas: dict[str, float]) -> None:
    print("\nbreak-even (first load where speculation loses):")
    by_series = {row["series"]: row for row in reversed(rows)}  # each series' first row
    for entry in load_break_even():
        row = by_series[entry["series"]]
        if entry["series"] not in alphas or not_priceable_reason(row):
            print(f"  {entry['series']}: not priceable")
            continue
        grid = BATCH_GRID if entry["load"] == "batch" else list(range(1, 4 * entry["published_first_losing"] + 1))
        band = get_speedup_band(row["engine"], row["hardware"])  # what predict / sweep / serve print for this engine
        first = get_first_losing_loads(grid, lambda x: predict_speedup(row, alphas[entry["series"]], x),
                                       band.high_error_x)
        print(f"  {entry['series']} ({entry['load']}): published first losing {entry['published_first_losing']} "
              f"(last paying {entry.get('published_last_paying')}), predicted {first['point']} -> "
              f"{describe_break_even(first['point'], entry, grid[-1])}; within the engine's published error "
              f"(+-{band.high_error_x:.2f}x{'' if band.engine_rows else ', pooled'}) {first['earliest']} to "
              f"{first['latest'] or f'>{grid[-1]}'}: {describe_range(first, entry)}")


def get_first_losing_loads(grid, speedup_at, h: float) -> dict:
    """The first load of `grid` where the predicted speedup is not above 1.0x (`point`; a tie does not pay, as in
    `pricing.speedup_band`), and where it is not with the measured speedup at the low (`earliest`: speedup - h) and
    the high end (`latest`: speedup + h) of a published error band of half-width h; None where that reading pays over
    the whole grid. Stops once the high end loses."""
    first = {"earliest": None, "point": None, "latest": None}
    for x in grid:
        s = speedup_at(x)
        for key, reading in (("earliest", s - h), ("point", s), ("latest", s + h)):
            if first[key] is None and reading <= 1.0:
                first[key] = x
        if first["latest"] is not None:
            break
    return first


def describe_range(first: dict, entry: dict) -> str:
    """Whether the published crossing, somewhere in (last paying, first losing], can lie in the predicted range of
    first losing loads [earliest, latest]."""
    if first["earliest"] is None:
        return "the range does not reach the published crossing"
    published_first, last = entry["published_first_losing"], entry.get("published_last_paying")
    meets = first["earliest"] <= published_first and (first["latest"] is None or last is None or
                                                      first["latest"] > last)
    return "holds the published crossing" if meets else "misses the published crossing"


def describe_break_even(predicted, entry: dict, top) -> str:
    """Where the predicted first losing load lies against the published bracket (last paying, first losing]."""
    first, last = entry["published_first_losing"], entry.get("published_last_paying")
    if predicted is None:
        return f"none up to {top}"
    if last is not None and last < predicted <= first:
        return "inside the published bracket"
    if predicted > first:
        return f"{predicted / first:.2f}x the published first losing load (too late)"
    low = last if last is not None else first
    return f"{predicted / low:.2f}x the {'last paying' if last is not None else 'first losing'} load (too early)"


METRIC_KIND = {"requests_per_s": "throughput", "output_tokens_per_s": "throughput", "median_tpot_s": "tpot",
               "mean_tpot_s": "tpot", "tpot_s": "tpot", "median_ttft_s": "ttft", "median_e2e_latency_s": "e2e"}


def predict_serve_metrics(row: dict) -> tuple[dict, str]:
    """Each published metric of a no-speculation row as `serve --policy off` (or predict, for a batch row) prices it;
    plus which engine priced it."""
    if row["load"] == "batch":
        scenario, _ = _build(row, _context(row), row["batch"], speculative=False)
        return {"tpot_s": float(predict_scenario(scenario).decode.step_time_s)}, priced_engine(scenario)
    scenario, _ = _build(row, 4096, 1, speculative=False)
    rate = row["rate_per_s"] if row["load"] == "rate" else math.inf  # all at once: `serve --rate inf`
    n = min(row.get("num_prompts") or MAX_SIMULATED_REQUESTS, MAX_SIMULATED_REQUESTS)
    prompt, output = get_length_distributions(row, prefer_named=True)
    # the engine's own scheduling (step formation, admission, token budget, sequence limit), as `serve --engine` runs
    # and the server flags the source ran it with (`serve --max-num-seqs / --max-num-batched-tokens`)
    flags = {key: row.get("deployment", {}).get(key) for key in ("max_num_seqs", "max_num_batched_tokens")}
    config = ServeConfig.for_engine(getattr(scenario, "engine", None), **flags)
    # a published run is one draw of its arrivals and lengths; the prediction is the median over SERVE_SEEDS draws
    # (one where nothing is random: every request at once, fixed lengths)
    random = row["load"] == "rate" or prompt.kind != "fixed" or output.kind != "fixed"
    runs = []
    for seed in range(SERVE_SEEDS if random else 1):
        result = simulate(scenario, generate_requests(n, rate, prompt, output, seed=seed), "off", config)
        runs.append({"requests_per_s": result.requests_per_s, "output_tokens_per_s": result.output_tokens_per_s,
                     "median_tpot_s": float(np.nanmedian(result.tpot_s)),
                     "mean_tpot_s": float(np.nanmean(result.tpot_s)), "median_ttft_s": float(np.median(result.ttft_s)),
                     "median_e2e_latency_s": float(np.median(result.latency_s))})
    values = {key: float(np.median([run[key] for run in runs])) for key in runs[0]}
    return values, priced_engine(scenario)


def run_serve(rows: list[dict]) -> list[dict]:
    results = []
    print(f"{'row':62s} {'metric':22s} {'engine':>8s} {'measured':>10s} {'predicted':>10s} {'error':>8s}")
    for row in rows:
        reason = not_priceable_reason(row)
        if reason:
            print(f"{row['id']:62s} not yet priceable: {reason}")
            continue
        predicted, engine = predict_serve_metrics(row)
        for metric, measured in row["metrics"].items():
            if metric not in METRIC_KIND:
                continue
            error = predicted[metric] / measured - 1.0
            results.append(dict(row=row, metric=metric, kind=METRIC_KIND[metric], error=error,
                                fitted=bool(row.get("fitted_on"))))
            print(f"{row['id']:62s} {metric:22s} {engine:>8s} {measured:10.4g} {predicted[metric]:10.4g} "
                  f"{100 * error:+7.1f}%")
    fitted_rows = {r["row"]["id"] for r in results if r["fitted"]}
    print(f"\nserving without speculation, |predicted / measured - 1| ({len(fitted_rows)} rows fitted: "
          f"{', '.join(sorted(fitted_rows)) or 'none'}):")
    for label, part in (("all", results), ("held out", [r for r in results if not r["fitted"]]),
                        ("fitted", [r for r in results if r["fitted"]])):
        print(f" {label}:")
        for kind in ("throughput", "tpot", "ttft", "e2e"):
            errs = [r["error"] for r in part if r["kind"] == kind]
            # optimistic: more throughput, or less time, than measured
            optimistic = sum((e > 0) if kind == "throughput" else (e < 0) for e in errs)
            print(f"  {kind:10s}: {summarize(errs, '%')}; optimistic in {optimistic} of {len(errs)}")
    for source in sorted({r["row"]["source_id"] for r in results}):
        errs = [r["error"] for r in results if r["row"]["source_id"] == source and not r["fitted"]]
        print(f"    held out, {source}: {summarize(errs, '%')}")
    print_serve_groups(results)
    return results


def load_class(row: dict) -> str:
    """below saturation (rate <= 8 req/s), near saturation (rate > 8), all at once, or a static batch."""
    if row["load"] == "rate":
        return "rate<=8" if row["rate_per_s"] <= 8 else "rate>8"
    return row["load"]


def print_serve_groups(results: list[dict]) -> None:
    """Signed median error per (metric kind, source, engine, load class): where a residual is systematic."""
    print("\nby metric, source, engine and load (signed median error, values):")
    groups: dict = {}
    for r in results:
        key = (r["kind"], r["row"]["source_id"], r["row"]["engine"], load_class(r["row"]))
        groups.setdefault(key, []).append(r["error"])
    for key in sorted(groups):
        errs = np.asarray(groups[key])
        print(f"  {' / '.join(key):62s} {100 * np.median(errs):+7.1f} %  "
              f"[{100 * errs.min():+.0f}, {100 * errs.max():+.0f}]  n={errs.size}")


def get_summary(spec: dict | None, serve: list[dict] | None) -> dict:
    """The headline figures as numbers (for the README's accuracy line): median / p90 |error| and row counts."""
    def stats(errors):
        e = np.abs(np.asarray(errors, dtype=float))
        return {"rows": int(e.size), "median": float(np.median(e)) if e.size else None,
                "p90": float(np.percentile(e, 90)) if e.size else None}

    out = {}
    if spec is not None:
        out["speculation_speedup_error_x"] = {
            "fitted": stats([r["error"] for r in spec["results"] if r["fitted"]]),
            "held_out": stats([r["error"] for r in spec["results"] if not r["fitted"]]),
            "not_yet_priceable_rows": len(spec["skipped"])}
        if "trends" in spec:
            t = spec["trends"]
            out["speculation_trend_with_load"] = {"series": t["series"], "series_agreeing": t["series_agreeing"],
                                                  "steps": t["pairs"], "steps_against": len(t["pairs_against"])}
    if serve is not None:
        out["serving_relative_error"] = {kind: stats([r["error"] for r in serve if r["kind"] == kind])
                                         for kind in ("throughput", "tpot", "ttft", "e2e")}
        out["serving_relative_error_held_out"] = {
            kind: stats([r["error"] for r in serve if r["kind"] == kind and not r.get("fitted")])
            for kind in ("throughput", "tpot", "ttft", "e2e")}
        out["serving_fitted_rows"] = len({r["row"]["id"] for r in serve if r.get("fitted")})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec-only", action="store_true")
    parser.add_argument("--serve-only", action="store_true")
    parser.add_argument("--json", metavar="PATH", help="also write the headline figures to PATH as JSON")
    args = parser.parse_args(argv)
    engine_note = "per-row engine" if _accepts(build_scenario, "engine") else "ideal kernel roofline (no engine model)"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; pricing: {engine_note}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    spec = serve = None
    if not args.serve_only:
        spec_rows = load_rows(SPEC_TABLE)
        spec = run_spec(spec_rows)
        run_break_even(spec_rows, spec["alphas"])
    if not args.spec_only:
        print()
        serve = run_serve(load_rows(SERVE_TABLE))
    if args.json:
        Path(args.json).write_text(json.dumps(get_summary(spec, serve), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
