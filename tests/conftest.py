"""Shared fixtures."""

import pytest


@pytest.fixture
def ideal_engine(monkeypatch):
    """Price bare kernels (engine 'ideal') wherever a test does not name an engine: for hand-computed goldens and
    published-row checks of the kernel model, whose numbers predate engine profiles (docs/engines.md)."""
    monkeypatch.setattr("rooflinesim.scenario.inputs.DEFAULT_ENGINE", "ideal")


@pytest.fixture(autouse=True)
def _fresh_loop_cache():
    """`pricing.speculative` keeps the last small loop it priced for the same Scenario object (predict reprices it
    for its sensitivity); a test that monkeypatches a pricing function between two calls must not get the kept one."""
    from rooflinesim.pricing import speculative

    speculative._LAST_LOOP[0] = None
    yield
    speculative._LAST_LOOP[0] = None
