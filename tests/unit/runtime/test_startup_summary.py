"""The agent says at start what it is and in what mode it acts (issue 41, 7: no start-up line gave the version,
policy.mode, dry-run, the fault sources in use and the cluster, so nobody could tell from the log whether the agent
could restart anything)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.runtime.app import startup_summary
from agent.settings import Settings


def summary(**sections: Any) -> dict[str, Any]:
    return startup_summary(Settings.model_validate(sections), identity="agent-0")


@pytest.mark.parametrize(
    ("policy", "mode"),
    [
        pytest.param({}, "act", id="act"),
        pytest.param({"dry_run": True}, "dry-run", id="dry-run"),
        pytest.param({"mode": "observe"}, "observe", id="observe"),
        pytest.param({"mode": "observe", "dry_run": True}, "observe", id="observe-wins"),
    ],
)
def test_the_mode_is_named(policy: dict[str, Any], mode: str) -> None:
    assert summary(policy=policy)["mode"] == mode


def test_the_line_names_version_cluster_leader_sources_and_kafka() -> None:
    s = summary(
        cluster_name="prod-a",
        kube={"namespaces": ["train"]},
        kafka={"bootstrap_servers": "k1:9092,k2:9092"},
    )
    assert s["cluster"] == "prod-a"
    assert s["version"]
    assert s["leader"] == "fault-agent/fault-agent-leader as agent-0"
    assert s["namespaces"] == ["train"]
    assert "deviceinfo@kube-system" in s["sources"]
    assert "nodes@*" in s["sources"]
    assert not any(src.startswith("clusterinfo@") for src in s["sources"])  # one fault source: auto, per-node here
    assert s["kafka"].startswith("k1:9092,k2:9092 topics ")
    assert s["restart"] in ("command", "delete-pods", "auto")


def test_what_is_off_says_so() -> None:
    s = summary(leader={"enabled": False}, kafka={"enabled": False}, kube={"fault_source": "clusterd"})
    assert s["leader"] == "disabled"
    assert s["kafka"] == "disabled"
    assert s["namespaces"] == "all"
    assert not any(src.startswith("deviceinfo@") for src in s["sources"])
