"""The testbed's Volcano log levels (testbed.cluster.volcano_log_level): the vc-controller-manager's
$FAULT_AGENT_TESTBED_VOLCANO_V and the vc-scheduler's $FAULT_AGENT_TESTBED_VC_SCHEDULER_V, each when it is one digit
(3 gives the killJob lines bench/volcano_kills.py reads; 4 the scheduler's enqueue verdicts), else 2 as before."""

from __future__ import annotations

import pytest

from testbed.cluster import VC_SCHEDULER_LOG_LEVEL_ENV, VOLCANO_LOG_LEVEL_ENV, volcano_log_level


@pytest.mark.parametrize(("value", "want"), [(None, "2"), ("3", "3"), ("0", "0"), ("", "2"), ("10", "2"), ("x", "2")])
def test_volcano_log_level(monkeypatch: pytest.MonkeyPatch, value: str | None, want: str) -> None:
    if value is None:
        monkeypatch.delenv(VOLCANO_LOG_LEVEL_ENV, raising=False)
    else:
        monkeypatch.setenv(VOLCANO_LOG_LEVEL_ENV, value)
    assert volcano_log_level() == want


def test_the_schedulers_level_is_its_own_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VOLCANO_LOG_LEVEL_ENV, "3")
    monkeypatch.setenv(VC_SCHEDULER_LOG_LEVEL_ENV, "4")
    assert (volcano_log_level(), volcano_log_level(VC_SCHEDULER_LOG_LEVEL_ENV)) == ("3", "4")
    monkeypatch.delenv(VC_SCHEDULER_LOG_LEVEL_ENV)
    assert volcano_log_level(VC_SCHEDULER_LOG_LEVEL_ENV) == "2"
