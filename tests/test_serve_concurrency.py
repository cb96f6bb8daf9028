"""Closed-loop load (`serve --concurrency`): N clients, each sending its next request when the last finishes. Checked
against Little's law in closed form, N = X x R, and the wide-tree / narrow-chain crossover under concurrency."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rooflinesim.cli import main
from rooflinesim.errors import InputError
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, ServeConfig, generate_requests, simulate
from rooflinesim.serve.rates import get_crossovers, parse_concurrencies

PROMPT, OUTPUT = LengthDistribution.parse("512", "p"), LengthDistribution.parse("uniform:32:96", "o")
REQUESTS = 400


def _scenario(tree=None):
    return build_scenario("h100", "llama-3.1-8b", 1, 1024, drafter="eagle", alpha=0.7, tree=tree, k_values=[0])


@pytest.mark.parametrize("clients", [1, 4, 16])
@pytest.mark.parametrize("policy", ["off", "fixed:3"])
def test_littles_law(clients, policy):
    requests = generate_requests(REQUESTS, 1.0, PROMPT, OUTPUT, seed=3)
    result = simulate(_scenario(), requests, policy, ServeConfig(seed=3), concurrency=clients)
    summary = result.get_summary()
    x = summary["requests_per_s"]  # completed requests / (first send to last finish)
    r = summary["latency_s"]["mean"]
    # with no think time a request is in the system from its send to its finish: sum of latencies = integral of
    # the number in system, which is N until the last N requests drain, so X R = N exactly up to that drain
    assert x * r <= clients * (1 + 1e-9)
    assert x * r >= clients * (1 - 2.0 * clients / REQUESTS)
    # and the engine's own time average of requests in system is the same number (L = lambda W)
    assert summary["mean_in_system"] == pytest.approx(x * r, rel=0.02)
    # every client keeps exactly one request in flight: a send coincides with a finish (or t = 0)
    sends = np.sort(result.arrival_s)
    assert np.all(sends[:clients] == 0.0)
    assert np.all(np.isin(sends[clients:], result.finish_s))


def test_one_client_is_sequential():
    requests = generate_requests(50, 1.0, PROMPT, OUTPUT, seed=1)
    result = simulate(_scenario(), requests, "off", concurrency=1)
    assert summary_batch(result) == pytest.approx(1.0)
    np.testing.assert_array_equal(result.arrival_s[1:], result.finish_s[:-1])


def summary_batch(result) -> float:
    return result.get_summary()["max_batch"]


def test_wide_tree_loses_to_a_chain_under_concurrency():
    scenario = _scenario("6,10,60")
    rows = []
    for policy in ("chain:3", "fixed:59"):
        for clients in (1, 4, 64):
            requests = generate_requests(200, 1.0, PROMPT, OUTPUT, seed=0)
            summary = simulate(scenario, requests, policy, concurrency=clients).get_summary()
            rows.append({"concurrency": clients, "rate_per_s": None, **summary})
    (crossing,) = get_crossovers(rows, baseline="chain:3")
    assert crossing["policy"] == "fixed:59" and crossing["baseline"] == "chain:3"
    # the wide tree is faster with one client and slower with 64: it stops paying in between
    assert crossing["latency"]["concurrency"] in (4, 64)
    assert crossing["throughput"]["concurrency"] in (4, 64)


def test_crossover_both_ways():
    def row(policy, clients, latency):
        return {"policy": policy, "concurrency": clients, "rate_per_s": None, "mean_batch": clients,
                "latency_s": {"p50": latency}, "output_tokens_per_s": 1.0 / latency}

    rows = [row("off", c, 1.0) for c in (1, 2, 4, 8)] + [row("self", c, v) for c, v in
                                                         zip((1, 2, 4, 8), (1.2, 1.1, 0.9, 0.8))]
    (c,) = get_crossovers(rows)
    assert c["latency"] is None and c["latency_starts"] == {"concurrency": 4, "mean_batch": 4}


def test_parse_concurrencies():
    assert parse_concurrencies("1..64") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_concurrencies("3,1") == [1, 3]
    with pytest.raises(InputError, match="concurrency"):
        parse_concurrencies("0")
    with pytest.raises(InputError):
        parse_concurrencies("a")


def test_cli_concurrency_json(capsys):
    code = main(["serve", "--concurrency", "1,8", "--policy", "off,fixed:2", "--requests", "40", "--output-tokens",
                 "32", "--prompt-tokens", "256", "--drafter", "eagle", "--json", "--workers", "1"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["concurrency"] for r in data["runs"]] == [1, 8, 1, 8]
    assert all(r["rate_per_s"] is None for r in data["runs"])
    assert main(["serve", "--concurrency", "1", "--rate", "2", "--drafter", "eagle"]) == 2
    assert "not both" in capsys.readouterr().err
