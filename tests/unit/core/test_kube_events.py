"""Kubernetes Events for the agent's decisions and actions (issue 41, 1: `kubectl describe` of a restarted job, a
tainted node or a deleted pod showed nothing from the agent). The mapping from the agent's CloudEvents and
client-go's correlation rules (spam filter, aggregation, de-duplication)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support import factories

from agent.core.faults import FaultKind, ObjectRef
from agent.core.kube_events import (
    AGGREGATE_AFTER,
    AGGREGATED_PREFIX,
    MAX_NOTE,
    SPAM_BURST,
    SPAM_REFILL,
    Create,
    Drop,
    EventCorrelator,
    KubeEvent,
    Regarding,
    Update,
    from_cloudevent,
)
from agent.sinks import events as ev

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
JOB = ObjectRef("vcjob", "team-a", "llama", "uid-1")
NODE = Regarding("Node", "v1", "", "n1", "node-uid-1")


def uid(name: str) -> str:
    return f"node-uid-{name[1:]}"


def kube(event: object) -> list[KubeEvent]:
    return from_cloudevent(ev.as_json(event), uid)  # type: ignore[arg-type]


def test_a_fault_on_a_job_is_an_event_on_the_job_and_on_its_node() -> None:
    fault = factories.fault(node="n1", chips=("Ascend910-3",), codes=("80E01801",), at=T0)
    got = kube(ev.fault_detected(fault, cluster="c", job=JOB, incident_id="inc-1"))
    assert [(e.regarding.kind, e.regarding.name, e.regarding.uid, e.type_, e.reason) for e in got] == [
        ("Job", "llama", "uid-1", "Warning", "FaultDetected"),
        ("Node", "n1", "node-uid-1", "Warning", "FaultDetected"),
    ]
    assert got[0].regarding.api_version == "batch.volcano.sh/v1alpha1"
    assert "chips Ascend910-3" in got[0].note
    assert "incident inc-1" in got[0].note


@pytest.mark.parametrize(
    ("event", "reason", "type_"),
    [
        pytest.param(
            ev.recovery_started("inc-1", JOB, "restart-job", "chip out", cluster="c", at=T0, budget_left=2),
            "RecoveryStarted", "Warning", id="restart",
        ),
        pytest.param(
            ev.recovery_succeeded("inc-1", JOB, "restart-job", ev.Durations(1, 0.1, 0.2, 3, 4.5), cluster="c", at=T0),
            "Recovered", "Normal", id="recovered",
        ),
        pytest.param(
            ev.recovery_failed("inc-1", JOB, "budget-exhausted", cluster="c", at=T0, detail="maxRetry 3 used"),
            "RetryBudgetExhausted", "Warning", id="budget-end",
        ),
        pytest.param(
            ev.job_misconfigured(JOB, cluster="c", at=T0, label="fault-retry-times", value="abc", problem="p"),
            "Misconfigured", "Warning", id="misconfigured",
        ),
    ],
)  # fmt: skip
def test_recovery_steps_are_events_on_the_job(event: object, reason: str, type_: str) -> None:
    got = kube(event)
    assert [(e.regarding.name, e.reason, e.type_) for e in got] == [("llama", reason, type_)]


def test_node_steps_are_events_on_the_node() -> None:
    released = kube(ev.quarantine_released("n2", cluster="c", at=T0, by="alice", reason="swapped", chips=("a",)))
    assert [(e.regarding.name, e.regarding.uid, e.reason) for e in released] == [
        ("n2", "node-uid-2", "QuarantineReleased")
    ]
    tripped = kube(ev.breaker_tripped(cluster="c", at=T0, reason="r", faulty_nodes=("n1", "n2"), watched_nodes=4,
                                      threshold_share=0.2, window_s=300))  # fmt: skip
    assert [(e.regarding.name, e.reason) for e in tripped] == [("n1", "BreakerTripped"), ("n2", "BreakerTripped")]


def test_the_breaker_closing_shows_on_the_nodes_that_tripped_it() -> None:
    """Issue 41, 1: the breaker's close made no Kubernetes Event (its CloudEvent named no node): `kubectl describe
    node` showed the trip and never the reset. It regards the same nodes as the trip, and says who closed it."""
    reset = kube(ev.breaker_reset(cluster="c", at=T0, by="alice", reason="rack fixed",
                                  opened_at=T0 - timedelta(minutes=7), faulty_nodes=("n2", "n1")))  # fmt: skip
    assert [(e.regarding.name, e.regarding.uid, e.reason, e.type_) for e in reset] == [
        ("n1", "node-uid-1", "BreakerReset", "Normal"),
        ("n2", "node-uid-2", "BreakerReset", "Normal"),
    ]
    assert "closed by alice: rack fixed; open 420 s" in reset[0].note
    assert kube(ev.breaker_reset(cluster="c", at=T0, by="alice")) == []  # nodes unknown: no node to regard


def test_a_dry_run_restart_says_nothing_was_written() -> None:
    got = kube(ev.recovery_started("inc-1", JOB, "restart-job", "chip out", cluster="c", at=T0, dry_run=True))
    assert "dry-run" in got[0].note


def test_what_cannot_be_read_makes_no_event() -> None:
    assert from_cloudevent({"type": "io.faultagent.fault.detected.v1", "data": "x"}, uid) == []
    assert from_cloudevent({"type": "io.faultagent.recovery.started.v1", "data": {"job": {"kind": "pod"}}}, uid) == []


def _event(note: str = "n", reason: str = "FaultDetected") -> KubeEvent:
    return KubeEvent(NODE, "Warning", reason, "Detect", note)


def test_the_same_event_again_updates_the_first_ones_series() -> None:
    c = EventCorrelator()
    first = c.observe(_event(), T0)
    assert isinstance(first, Create)
    again = c.observe(_event(), T0 + timedelta(seconds=5))
    assert isinstance(again, Update)
    assert (again.name, again.count, again.last) == (first.name, 2, T0 + timedelta(seconds=5))


def test_many_different_notes_are_combined_into_one_event() -> None:
    c = EventCorrelator()
    steps = [c.observe(_event(note=f"chip {i}"), T0 + timedelta(seconds=i)) for i in range(AGGREGATE_AFTER + 3)]
    assert all(isinstance(s, Create) for s in steps[:AGGREGATE_AFTER])
    combined = steps[AGGREGATE_AFTER:]
    assert isinstance(combined[0], Create)
    assert combined[0].event.note.startswith(AGGREGATED_PREFIX)
    assert all(isinstance(s, Update) and s.name == combined[0].name for s in combined[1:])


def test_a_storm_on_one_object_is_cut_at_the_burst_and_refills_slowly() -> None:
    c = EventCorrelator()
    steps = [c.observe(_event(reason=f"R{i}"), T0) for i in range(SPAM_BURST + 5)]
    assert sum(isinstance(s, Drop) for s in steps) == 5
    assert isinstance(c.observe(_event(reason="Later"), T0 + SPAM_REFILL), Create)
    other = KubeEvent(Regarding("Node", "v1", "", "n2"), "Warning", "X", "Detect", "n")
    assert isinstance(c.observe(other, T0), Create)  # another object has its own bucket


def test_a_note_is_cut_to_what_the_api_takes() -> None:
    fault = factories.fault(node="n1", chips=tuple(f"Ascend910-{i}" for i in range(400)), at=T0)
    got = kube(ev.fault_detected(fault, cluster="c", job=JOB))
    assert all(len(e.note) <= MAX_NOTE for e in got)


def test_the_caches_are_bounded() -> None:
    c = EventCorrelator(max_keys=8)
    for i in range(100):
        c.observe(KubeEvent(Regarding("Node", "v1", "", f"n{i}"), "Warning", "X", "Detect", "n"), T0)
    assert len(c._buckets) == len(c._seen) == len(c._similar) == 8


def test_a_pod_failure_is_an_event_on_the_pod_too() -> None:
    pod = ObjectRef("Pod", "team-a", "llama-worker-0", "pod-uid")
    fault = factories.fault(kind=FaultKind.BUSINESS, node="n1", chips=(), codes=("137",), at=T0, pod=pod)
    got = kube(ev.fault_detected(fault, cluster="c", job=JOB))
    assert [(e.regarding.kind, e.regarding.name, e.regarding.uid) for e in got] == [
        ("Job", "llama", "uid-1"),
        ("Pod", "llama-worker-0", "pod-uid"),
        ("Node", "n1", "node-uid-1"),
    ]


def test_the_readme_names_every_event_reason_the_agent_writes() -> None:
    """README.md's "Kubernetes Events" section lists each reason kubectl describe can show from the agent
    (HeldByBreaker, Quarantined and QuarantineLifted were left out)."""
    import re
    from pathlib import Path

    import agent.core.kube_events as mod

    source = Path(mod.__file__).read_text(encoding="utf-8")
    reasons = set(re.findall(r'"(?:Normal|Warning)", "([A-Z][A-Za-z]+)"', source))
    reasons |= set(re.findall(r'word = "([A-Z][A-Za-z]+)" if .* else "([A-Z][A-Za-z]+)"', source)[0])
    assert {"FaultDetected", "HeldByBreaker", "QuarantineReleased", "RetryBudgetExhausted"} <= reasons  # the scan works
    readme = (Path(mod.__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Kubernetes Events", 1)[1].split("\n## ", 1)[0]
    assert sorted(r for r in reasons if f"`{r}`" not in section) == []
