"""The two published under-load benchmarks (speculation across batch/rate/concurrency, and serving without
speculation) load, every row names its source and carries the fields its metric and load need, they are large and
independent enough, and at most a third of the speculation rows are fitted. The accuracy itself is reported by
`benchmarks/bench_under_load.py`, not asserted here."""

import math
from collections import Counter

import pytest

from tests.benchmark_scripts import load_script

SPEC_METRICS = {"speedup", "e2e_latency_speedup", "per_user_output_throughput_speedup"}
SERVE_METRICS = {"requests_per_s", "output_tokens_per_s", "median_ttft_s", "median_tpot_s", "mean_tpot_s",
                 "median_e2e_latency_s", "median_itl_s", "tpot_s"}
LOAD_FIELD = {"batch": "batch", "rate": "rate_per_s", "concurrency": "concurrency"}


def _bench():
    return load_script("benchmarks/bench_under_load.py")


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def spec_rows(bench):
    return bench.load_rows(bench.SPEC_TABLE)


@pytest.fixture(scope="module")
def serve_rows(bench):
    return bench.load_rows(bench.SERVE_TABLE)


def _common(row):
    assert row["source"] and row["source_id"], row["id"]
    # a citation names a commit, a URL or a paper
    assert any(tag in row["source"] for tag in ("@", "arXiv", "arxiv", ".io", ".ai", "issue 29")), row["id"]
    for key in ("engine", "engine_version", "hardware", "model", "tp", "load"):
        assert row.get(key) not in (None, ""), (row["id"], key)
    if row.get("derived"):
        assert "=" in row["derived"], row["id"]  # the arithmetic is written out


def test_speculation_rows_have_sources_and_the_fields_their_metric_needs(spec_rows):
    assert len({r["id"] for r in spec_rows}) == len(spec_rows)
    for row in spec_rows:
        _common(row)
        assert row["metric"] in SPEC_METRICS, row["id"]
        assert math.isfinite(row["measured"]) and 0.1 < row["measured"] < 10, row["id"]
        assert row["drafting"] in {"chain", "tree", "self"}, row["id"]
        assert row["load"] in LOAD_FIELD and row[LOAD_FIELD[row["load"]]] > 0, row["id"]
        assert row["series"], row["id"]
        acceptance = row["acceptance"]
        assert acceptance["kind"] in {"alpha", "acceptance_length", "none"}, row["id"]
        if acceptance["kind"] != "none":
            assert acceptance["value"] > 0, row["id"]
        if row["drafting"] == "chain" and row["load"] != "concurrency" and row["hardware"] != "gb200":
            assert isinstance(row["k"], int) and row["k"] >= 1, row["id"]
        if row["drafting"] == "tree":  # the shape issue 23's --tree takes (None where the source does not state it)
            assert {"depth", "topk", "draft_tokens"} <= set(row["tree"]), row["id"]
        if row["drafting"] == "self":
            assert "draft_kv_budget" in row, row["id"]
        assert set(row.get("fitted_on") or []) <= {"acceptance"}, row["id"]


def test_speculation_benchmark_is_large_independent_and_mostly_held_out(spec_rows):
    sources = Counter(r["source_id"] for r in spec_rows)
    assert len(spec_rows) >= 40 and len(sources) >= 4, sources
    fitted = [r for r in spec_rows if r.get("fitted_on")]
    assert 0 < len(fitted) <= len(spec_rows) / 3
    # the shapes the sibling issue adds are represented
    assert {r["drafting"] for r in spec_rows} == {"chain", "tree", "self"}
    assert {r["load"] for r in spec_rows} == {"batch", "rate", "concurrency"}


def test_each_series_fits_at_most_its_lowest_load_row_and_no_published_acceptance(spec_rows):
    series = {}
    for row in spec_rows:
        series.setdefault(row["series"], []).append(row)
    for name, members in series.items():
        fitted = [r for r in members if r.get("fitted_on")]
        assert len(fitted) <= 1, name
        if fitted:
            field = LOAD_FIELD[fitted[0]["load"]]
            assert fitted[0][field] == min(r[field] for r in members), name
            assert fitted[0]["acceptance"]["kind"] == "none", name  # a published acceptance is used, not fitted


def test_break_even_entries_point_at_series_that_show_one(bench, spec_rows):
    series = {r["series"]: r for r in spec_rows}
    entries = bench.load_break_even()
    assert entries
    for entry in entries:
        assert entry["series"] in series and entry["source"]
        assert entry["load"] == series[entry["series"]]["load"]
        last, first = entry.get("published_last_paying"), entry["published_first_losing"]
        assert last is None or last < first


def test_serving_rows_have_sources_and_si_metrics(bench, serve_rows):
    assert len({r["id"] for r in serve_rows}) == len(serve_rows)
    for row in serve_rows:
        _common(row)
        assert set(row.get("fitted_on")) <= SERVE_FITTED_PARAMETERS, row["id"]
        assert row["metrics"] and set(row["metrics"]) <= SERVE_METRICS, row["id"]
        for name, value in row["metrics"].items():
            assert math.isfinite(value) and value > 0, (row["id"], name)
            if name.endswith("_s") and not name.endswith("per_s"):
                assert value < 100, (row["id"], name)  # seconds, not milliseconds
        assert row["load"] in {"rate", "all-at-once", "batch"}, row["id"]
        if row["load"] == "rate":
            assert row["rate_per_s"] > 0, row["id"]
        if row["load"] != "batch":
            # lengths as published, or a dataset the bench knows lengths for
            assert (row.get("prompt_tokens") and row.get("output_tokens")) or row["dataset"] in bench.DATASET_LENGTHS


#: what a serving row may be fitted on: engine-profile fields (engines/*.yaml, fitted: in their sources) and the
#: ShareGPT length distribution's output cap (serve/workload.py)
SERVE_FITTED_PARAMETERS = {"launch.kernel_s_graph", "host.frontend_s", "host.per_sequence_s",
                           "sharegpt_output_cap"}


def test_at_most_a_third_of_the_serving_rows_are_fitted(serve_rows):
    fitted = [r["id"] for r in serve_rows if r["fitted_on"]]
    assert 3 * len(fitted) <= len(serve_rows), fitted


def test_every_serving_row_is_priceable(bench, serve_rows):
    # no drafter, shipped hardware and models: nothing keeps a no-speculation row from `serve --policy off`
    assert [r["id"] for r in serve_rows if bench.not_priceable_reason(r)] == []


def test_serving_benchmark_counts(serve_rows):
    sources = Counter(r["source_id"] for r in serve_rows)
    assert len(serve_rows) >= 30 and len(sources) >= 3, sources
    kinds = {name for r in serve_rows for name in r["metrics"]}
    assert {"requests_per_s", "output_tokens_per_s", "median_ttft_s", "median_tpot_s"} <= kinds


def test_unexpressible_shapes_are_listed_not_priced(bench, spec_rows, monkeypatch):
    reasons = {r["id"]: bench.not_priceable_reason(r) for r in spec_rows}
    assert sum(reason is None for reason in reasons.values()) >= 40
    for row in spec_rows:
        if row["drafting"] == "tree" and None in row["tree"].values():
            assert reasons[row["id"]] == "tree configuration not stated by the source", row["id"]
    # a rooflinesim without issue 23's keywords lists every tree, self and concurrency row instead of crashing
    monkeypatch.setattr(bench, "can_price", lambda shape: shape not in {"tree", "self", "concurrency"})
    for row in spec_rows:
        if row["drafting"] in {"tree", "self"} or row["load"] == "concurrency":
            assert bench.not_priceable_reason(row), row["id"]


def test_tree_and_self_rows_map_to_the_builder_keywords(bench, spec_rows):
    tree_row = next(r for r in spec_rows if r["drafting"] == "tree" and r["tree"]["draft_tokens"] == 21)
    extra = bench._spec_extra(tree_row, 0.6)
    # SGLang's num_draft_tokens counts the root; k counts the verified draft tokens; an EAGLE-3 row gets EAGLE-3's
    # own head (32k draft vocabulary), an EAGLE row the EAGLE head
    assert extra["tree"] == "3,4,22" and extra["k"] == 21 and extra["drafter"] == tree_row["drafter"]
    assert tree_row["drafter"] in ("eagle", "eagle3")
    # an n-gram row: the sequences that draft, from SpecDecode-Bench's simulator (match probability per dataset)
    ngram_row = next(r for r in spec_rows if r.get("drafter") == "ngram" and r.get("dataset") == "gsm8k")
    extra = bench._spec_extra(ngram_row, 0.25)
    assert extra["drafter"] == "ngram" and extra["ngram_match_fraction"] == pytest.approx(1 - 0.75 * 0.8)
    self_row = next(r for r in spec_rows if r["drafting"] == "self")
    extra = bench._spec_extra(self_row, 0.81)
    assert extra["drafter"] == "self" and extra["draft_kv_budget"] == 512 and extra["k"] == self_row["k"]


def test_engine_is_passed_only_where_accepted(bench):
    row = {"engine": "sglang"}

    def without(hw, model): ...

    def with_engine(hw, model, *, engine="ideal"): ...

    assert bench.engine_kwargs(without, row) == {}
    assert bench.engine_kwargs(with_engine, row) == {"engine": "sglang"}


def test_a_fitted_batch_row_is_reproduced_and_its_held_out_neighbour_priced(bench, spec_rows):
    series = "eagle3paper-sglang-h100-llama31-8b-eagle-chain3"
    fitted = next(r for r in spec_rows if r["series"] == series and r.get("fitted_on"))
    held = next(r for r in spec_rows if r["series"] == series and not r.get("fitted_on"))
    alpha = bench.fit_alpha(fitted)
    assert 0.02 < alpha < 0.98
    assert bench.predict_speedup(fitted, alpha) == pytest.approx(fitted["measured"], abs=0.01)
    # more load, less speedup: the held-out row is at a larger batch and must be priced lower
    assert bench.predict_speedup(held, alpha) < bench.predict_speedup(fitted, alpha)


@pytest.mark.parametrize("alpha,k", [(0.0, 3), (0.5, 3), (0.8, 7), (0.95, 1)])
def test_acceptance_length_converts_back_to_alpha(bench, alpha, k):
    length = sum(alpha ** i for i in range(k + 1))  # 1 + alpha + ... + alpha^k, hand-expanded
    assert bench.alpha_from_acceptance_length(length, k) == pytest.approx(alpha, abs=1e-6)


def test_an_engine_the_model_does_not_know_is_priced_ideal_and_marked(bench, monkeypatch):
    from rooflinesim.errors import InputError

    calls = []

    def fake_build(hw, model, batch, ctx, *, engine=None, **kwargs):
        calls.append(engine)
        if engine not in ("ideal", "vllm-v1"):  # the engine model's default would be vllm-v1: never fall to it
            raise InputError(f"unknown engine {engine!r}")
        return f"{engine} scenario"

    monkeypatch.setattr(bench, "build_scenario", fake_build)
    scenario, used = bench._build({"engine": "vllm-v0", "hardware": "h100", "model": "llama-3.1-8b"})
    assert scenario == "ideal scenario" and used == {"engine": "ideal"} and calls == ["vllm-v0", "ideal"]
    assert bench.priced_engine(object()) == "ideal"  # a scenario without an engine prices bare kernels


def test_summary_reports_fitted_and_held_out_apart(bench):
    spec = {"results": [{"error": 0.0, "fitted": True}, {"error": 0.1, "fitted": False},
                        {"error": -0.3, "fitted": False}], "skipped": [("row", "tree drafting")]}
    serve = [{"error": -0.2, "kind": "tpot"}, {"error": 0.4, "kind": "tpot"}, {"error": 0.1, "kind": "throughput"}]
    summary = bench.get_summary(spec, serve)
    held = summary["speculation_speedup_error_x"]["held_out"]
    assert held["rows"] == 2 and held["median"] == pytest.approx(0.2)  # |0.1| and |-0.3|
    assert summary["speculation_speedup_error_x"]["fitted"]["rows"] == 1
    assert summary["speculation_speedup_error_x"]["not_yet_priceable_rows"] == 1
    assert summary["serving_relative_error"]["tpot"]["median"] == pytest.approx(0.3)
    assert summary["serving_relative_error"]["ttft"] == {"rows": 0, "median": None, "p90": None}


@pytest.mark.parametrize("predicted,expected", [
    (24, "inside the published bracket"), (64, "inside the published bracket"),
    (128, "2.00x the published first losing load (too late)"), (8, "0.50x the last paying load (too early)"),
    (None, "none up to 512")])
def test_break_even_is_judged_against_the_published_bracket(bench, predicted, expected):
    entry = {"published_first_losing": 64, "published_last_paying": 16}
    assert bench.describe_break_even(predicted, entry, 512) == expected


def test_first_losing_loads_read_the_band_ends_with_a_tie_losing(bench):
    speedups = {1: 1.5, 2: 1.25, 4: 1.0, 8: 0.5}  # binary-exact: 1.25 - 0.25 and 1.0 are ties at 1.0x
    first = bench.get_first_losing_loads([1, 2, 4, 8], speedups.get, 0.25)
    assert first == {"earliest": 2, "point": 4, "latest": 8}
    assert bench.get_first_losing_loads([1, 2], {1: 2.0, 2: 1.5}.get, 0.25) == dict.fromkeys(
        ("earliest", "point", "latest"))


def test_serving_deployment_blocks_state_known_flags_with_a_source(serve_rows):
    for row in serve_rows:
        deployment = row.get("deployment")
        if deployment is None:
            continue
        assert set(deployment) <= {"max_num_seqs", "max_num_batched_tokens", "kv_dtype", "source"}, row["id"]
        assert deployment.get("source") and len(deployment) >= 2, row["id"]


def test_a_serving_row_is_priced_with_its_engines_scheduling_and_flags(bench, monkeypatch):
    """As `serve --policy off --engine <row's engine> --rate inf --max-num-seqs N` would: the engine profile's
    multi-step window and async output, the row's stated sequence limit, every request at t = 0 and ShareGPT lengths
    drawn from the named distribution (not the fixed averages)."""
    seen, simulate = {}, bench.simulate

    def fake_simulate(scenario, requests, policy, config):
        seen.update(engine=scenario.engine_name, requests=requests, policy=policy, config=config)
        return simulate(scenario, requests, policy, config)

    monkeypatch.setattr(bench, "simulate", fake_simulate)
    row = {"engine": "vllm-v0-multistep", "hardware": "a100", "model": "llama-3.1-8b", "tp": 1, "dataset": "sharegpt",
           "prompt_tokens": 202, "output_tokens": 179, "load": "all-at-once", "num_prompts": 40,
           "deployment": {"max_num_seqs": 8, "source": "test"}}
    values, engine = bench.predict_serve_metrics(row)
    config, requests = seen["config"], seen["requests"]
    assert engine == seen["engine"] == "vllm-v0-multistep" and seen["policy"] == "off"
    assert (config.multi_step, config.async_output, config.step_policy, config.max_num_seqs) == (10, True,
                                                                                                 "prefill-first", 8)
    assert (requests.arrival_s == 0).all() and requests.count == 40
    assert len(set(requests.output_tokens.tolist())) > 10  # drawn, not the fixed 179
    assert values["requests_per_s"] > 0


def _traces():
    return load_script("benchmarks/published/sdb_traces.py")


def test_trace_tokens_per_step_walks_a_chain_as_specdecode_benchs_simulator():
    """Hand-computed: 10 generated tokens, accepted lengths by position. k = 3 (at most 4 a step): positions
    1 -> 2 -> 6 -> 9 -> 10, 9 tokens in 4 steps; k = 1 (at most 2): 1 -> 2 -> 4 -> 5 -> 6 -> 8 -> 9 -> 10, 9 in 7."""
    traces = _traces()
    accepted = [1, 4, 2, 1, 1, 3, 1, 1, 1, 1]
    assert traces.get_tokens_per_step(accepted, 3) == pytest.approx(9 / 4)
    assert traces.get_tokens_per_step(accepted, 1) == pytest.approx(9 / 7)
    assert traces.get_tokens_per_step([5], 3) == 0.0  # one token: nothing after the first


def test_specdecode_bench_rows_take_their_lengths_and_eagle3_acceptance_from_the_traces(spec_rows):
    sdb = [r for r in spec_rows if r["source_id"] == "specdecode-bench"]
    assert sdb and all(r["prompt_tokens"] and r["output_tokens"] and not r.get("pricing_context_tokens") for r in sdb)
    eagle3 = [r for r in sdb if r["model"] == "llama-3.1-8b" and r["drafter"] == "eagle3"]
    assert len(eagle3) == 16 and not any(r.get("fitted_on") for r in eagle3)
    assert all(r["acceptance"]["kind"] == "acceptance_length" and "acc_eagle" in r["acceptance"]["note"]
               for r in eagle3)


def test_batch_run_rows_name_a_sourced_kind_and_a_dataset_with_lengths(bench, spec_rows):
    kinds = bench.yaml.safe_load(bench.SPEC_TABLE.read_text())["batch_runs"]
    assert set(kinds) == {"identical-copies"} and all("@" in text for text in kinds.values())
    runs = [r for r in spec_rows if r.get("batch_run")]
    assert runs and all(r["batch_run"] in kinds and r["load"] == "batch" for r in runs)
    lengths = bench._run_lengths()
    for row in runs:
        assert len(lengths[row["dataset"]]) == 100, row["id"]


def test_a_copies_run_row_is_priced_over_its_prompts_below_its_steady_step(bench, spec_rows):
    """B greedy copies per prompt with the prefill timed: at batch 64 the prefill of 64 prompts pulls the speedup
    below the steady decode step's at the same mean context (pricing/batch_run.py)."""
    row = next(r for r in spec_rows if r["id"] == "sdb-llama-31-8b-gsm8k-eagle3-b64")
    alpha = bench.alpha_from_acceptance_length(row["acceptance"]["value"], row["k"])
    run = bench.predict_speedup(row, alpha)
    steady = bench.predict_speedup({**row, "batch_run": None}, alpha)
    assert 1.0 < run < steady


def test_trend_agreement_counts_series_and_steps_against_the_measured_way(bench):
    def result(series, batch, measured, predicted):
        return dict(row=dict(series=series, batch=batch, measured=measured), predicted=predicted)

    results = [
        # falls as measured, one noisy rise of 0.03x (flat) that the prediction does not follow: agrees
        result("a", 2, 1.40, 1.40), result("a", 16, 1.10, 1.25), result("a", 24, 1.13, 1.20), result("a", 64, 0.95, 1.0),
        # measured rises by 0.10x from 32 to 48 while the prediction falls: one step against; overall both fall
        result("b", 32, 1.30, 1.45), result("b", 48, 1.40, 1.35), result("b", 2, 1.80, 1.80),
        # predicted rises where measured falls: the series disagrees
        result("c", 1, 1.5, 1.5), result("c", 8, 1.2, 1.6),
        result("d", 1, 1.5, 1.5),  # one row: no trend
    ]
    trends = bench.get_trend_agreement(results)
    assert trends["series"] == 3 and trends["series_agreeing"] == 2
    assert trends["pairs"] == 3 + 2 + 1
    assert [(p["series"], p["from"], p["to"]) for p in trends["pairs_against"]] == [("b", 32, 48), ("c", 1, 8)]
