"""Ends harness.pooled()'s rank pools after the session; a rank that does
not exit cleanly (a crash in destroy or at exit) fails the session."""
import pytest

import harness


@pytest.fixture(scope="session", autouse=True)
def _rank_pools():
    yield
    bad = harness.stop_pools()
    assert not bad, "\n".join(bad)
