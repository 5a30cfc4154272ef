"""The testbed's vc-controller-manager log level (testbed.cluster.volcano_log_level): $FAULT_AGENT_TESTBED_VOLCANO_V
when it is one digit (3 gives the killJob lines bench/volcano_kills.py reads), else 2 as before."""

from __future__ import annotations

import pytest

from testbed.cluster import VOLCANO_LOG_LEVEL_ENV, volcano_log_level


@pytest.mark.parametrize(("value", "want"), [(None, "2"), ("3", "3"), ("0", "0"), ("", "2"), ("10", "2"), ("x", "2")])
def test_volcano_log_level(monkeypatch: pytest.MonkeyPatch, value: str | None, want: str) -> None:
    if value is None:
        monkeypatch.delenv(VOLCANO_LOG_LEVEL_ENV, raising=False)
    else:
        monkeypatch.setenv(VOLCANO_LOG_LEVEL_ENV, value)
    assert volcano_log_level() == want
