"""Shared fixtures."""

import pytest


@pytest.fixture
def ideal_engine(monkeypatch):
    """Price bare kernels (engine 'ideal') wherever a test does not name an engine: for hand-computed goldens and
    published-row checks of the kernel model, whose numbers predate engine profiles (docs/engines.md)."""
    monkeypatch.setattr("rooflinesim.scenario.inputs.DEFAULT_ENGINE", "ideal")
