"""`fault-agent quarantine list|show|release` reads the agent's marks on nodes (issue 41, 2). Pure parts here;
tests/integration/test_quarantine_cli.py runs the command against the testbed's apiserver."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agent.core.faults import FaultLevel
from agent.core.quarantine import RELEASE_ANNOTATION, Release, encode_quarantine_hold, encode_release
from agent.platform.quarantine_cli import list_lines, read_node, show_lines

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEY = "fault-agent.io/quarantine"


def node(name: str, *, taint: str | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    taints = (
        [{"key": KEY, "value": taint, "effect": "NoSchedule", "timeAdded": "2025-03-01T08:00:00Z"}] if taint else []
    )
    return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": {"taints": taints}}


def test_a_tainted_and_held_node_reads_with_its_level_times_and_release() -> None:
    hold = encode_quarantine_hold(FaultLevel.MANUALLY_SEPARATE, NOW + timedelta(hours=20), since=NOW)
    release = encode_release(Release("alice", NOW + timedelta(hours=1), "board replaced"))
    q = read_node(node("n1", taint="ManuallySeparateNPU", annotations={KEY: hold, RELEASE_ANNOTATION: release}), KEY)
    assert q.quarantined
    assert (q.level, q.hold_level) == ("ManuallySeparateNPU", "ManuallySeparateNPU")
    assert q.tainted_at == datetime(2025, 3, 1, 8, 0, tzinfo=UTC)
    assert q.hold_until == NOW + timedelta(hours=20)
    assert q.hold_since == NOW
    assert q.release is not None
    assert q.release.by == "alice"
    assert q.problems == ()


def test_unreadable_marks_are_named_not_fatal() -> None:
    q = read_node(node("n2", taint="SeparateNPU", annotations={KEY: "{", RELEASE_ANNOTATION: "[]"}), KEY)
    assert q.quarantined
    assert len(q.problems) == 2
    assert "hold annotation" in q.problems[0]
    assert "release annotation" in q.problems[1]


def test_list_shows_only_quarantined_nodes_sorted() -> None:
    nodes = [read_node(node("b", taint="SeparateNPU"), KEY), read_node(node("c"), KEY), read_node(node("a"), KEY)]
    lines = list_lines(nodes)
    assert lines[0].split() == ["NODE", "LEVEL", "TAINTED", "HELD", "UNTIL", "RELEASED"]
    assert [line.split()[0] for line in lines[1:]] == ["b"]
    assert lines[1].split()[1:3] == ["SeparateNPU", "2025-03-01T08:00:00Z"]


def test_show_says_what_the_hold_means_now() -> None:
    hold = encode_quarantine_hold(FaultLevel.SEPARATE, NOW + timedelta(hours=2), since=NOW)
    q = read_node(node("n1", taint="SeparateNPU", annotations={KEY: hold}), KEY)
    text = "\n".join(show_lines(q, NOW))
    assert "node n1: quarantined" in text
    assert "until 2025-03-01T14:00:00Z (2.0 h left)" in text
    assert "quarantine release" in text
    free = "\n".join(show_lines(read_node(node("n9"), KEY), NOW))
    assert free == "node n9: not quarantined by the agent"
