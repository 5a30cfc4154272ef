"""The engine's leader-only duties that need no cluster: fault.cleared events, the fault queue's depth gauge, and
a new leader re-evaluating the faults still active in its detectors (one restart per fault across a takeover).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from prometheus_client import CollectorRegistry
from support import factories
from support.factories import change
from support.fakes import CountingWriter, Leadership, ListSink

from agent.actions import ActionResult
from agent.core.cluster import ConfigMapRecord, JobRef
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Incident,
    Phase,
    encode_incident,
    encode_ledger,
    make_incident_id,
)
from agent.core.policy import RetryLedger
from agent.engine.detecting import FAULT_QUEUE, DetectPipeline
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ClusterState
from testbed.inject import ChipFault, device_info_cm

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}})


def _state(*, version: str = "0", annotations: tuple[tuple[str, str], ...] = ()) -> ClusterState:
    return factories.one_job_state(NOW, version=version, annotations=annotations)


def _fault(at: datetime = NOW) -> Fault:
    return factories.fault(at=at)


# ------------------------------------------------------------------------------------------------ fault.cleared


async def test_fault_cleared_is_published_by_the_leader_only() -> None:
    api = k8s.ApiClient()
    sink = ListSink()
    leadership = Leadership(False)
    engine = RecoveryEngine(
        SETTINGS, _state(), CountingWriter(api), events=sink, is_leader=leadership, clock=SystemClock()
    )
    cleared = FaultCleared(_fault(), NOW + timedelta(seconds=30), ObjectRef("ConfigMap", "kube-system", "x"))

    await engine.handle_cleared(cleared)
    await engine.idle()
    assert sink.events == []  # a standby publishes nothing

    leadership.leads = True
    await engine.handle_cleared(cleared)
    await engine.idle()
    await api.close()
    # this replica never published the fault's node event, so it goes first (see the successor tests below)
    assert sink.types() == [ev.FAULT_DETECTED, ev.FAULT_CLEARED]
    detected, clear = sink.events
    assert ev.encode(clear).key == ev.encode(detected).key == b"n1"  # keyed by the node
    assert ev.as_json(clear)["data"]["fault_duration_s"] == 30.0
    assert ev.as_json(clear)["data"]["detected_id"] == detected.get_id()


def _move_pods_off(state: ClusterState, node: str) -> None:
    """The job restarted elsewhere: its pods now run on another node (the faulty one holds none of them)."""
    for key, pod in list(state.pods.items()):
        if pod.node == node:
            state.apply(change("pods", key, replace(pod, node="n2", uid=pod.uid + "-new")))


async def test_fault_cleared_goes_to_each_job_the_fault_hit_keyed_like_its_fault_detected() -> None:
    """Regression (issue 16 item 3): fault.cleared was keyed by the node and named no job, so a consumer ordering
    and pairing by job UID could not match it with the job's fault.detected. It now follows the job's stream:
    same key, the job named, the fault's identity and the detected event's id carried."""
    api = k8s.ApiClient()
    sink = ListSink()
    state = _state()
    engine = RecoveryEngine(SETTINGS, state, CountingWriter(api), events=sink, clock=SystemClock())
    fault = _fault()
    await engine.handle_fault(fault, NOW)
    await engine.idle()
    (detected,) = [e for e in sink.events if e.get_type() == ev.FAULT_DETECTED]
    _move_pods_off(state, "n1")  # by the time the chip is healthy again the job runs elsewhere
    await engine.handle_cleared(FaultCleared(fault, NOW + timedelta(minutes=5), ObjectRef("ConfigMap", "x", "y")))
    await engine.idle()
    await api.close()
    (cleared,) = [e for e in sink.events if e.get_type() == ev.FAULT_CLEARED]
    assert ev.encode(cleared).key == ev.encode(detected).key == b"uid-job"
    doc, seen = ev.as_json(cleared)["data"], ev.as_json(detected)["data"]
    assert doc["job"] == seen["job"]
    assert doc["job"]["uid"] == "uid-job"
    assert doc["jobs"] == [seen["job"]]
    assert doc["fault_id"] == seen["fault_id"]
    assert doc["detected_id"] == detected.get_id()
    assert cleared.get_subject() == detected.get_subject() == "ns/job"


async def test_a_successor_publishes_fault_cleared_to_the_jobs_its_standby_self_saw_hit() -> None:
    """The jobs a fault hit are noted on every replica, so a standby that leads by the time the fault clears
    still sends the clear to each job's stream."""
    api = k8s.ApiClient()
    sink = ListSink()
    state = _state()
    leadership = Leadership(False)
    engine = RecoveryEngine(
        SETTINGS, state, CountingWriter(api), events=sink, is_leader=leadership, clock=SystemClock()
    )
    fault = _fault()
    await engine.handle_fault(fault, NOW)  # seen while standing by: nothing published
    await engine.idle()
    assert sink.events == []
    _move_pods_off(state, "n1")
    leadership.leads = True
    await engine.handle_cleared(FaultCleared(fault, NOW + timedelta(minutes=5), ObjectRef("ConfigMap", "x", "y")))
    await engine.idle()
    await api.close()
    detected, cleared = sink.events  # the fault.detected it never published goes first (next test)
    assert ev.encode(cleared).key == b"uid-job"
    assert (
        ev.as_json(cleared)["data"]["detected_id"]
        == detected.get_id()
        == ev.fault_detected(
            fault, cluster=SETTINGS.cluster_name, job=ObjectRef("vcjob", "ns", "job", "uid-job")
        ).get_id()
    )


async def test_a_successor_publishes_the_fault_detected_a_clear_ends_before_the_clear() -> None:
    """Regression (soak seed 1570404883, invariant events): the old leader published a fault's fault.detected
    into its outbox while Kafka was down and was frozen; its successor published the fault's fault.cleared, which
    reached Kafka first, and the old leader's copy of the fault.detected came after it in the job's stream. The
    successor never published that fault.detected itself. Now it does, first, with the id the clear names (a late
    copy is then a duplicate a consumer drops), and names no incident the fault did not join."""
    api = k8s.ApiClient()
    sink = ListSink()
    state = _state()
    leadership = Leadership(False)
    engine = RecoveryEngine(
        SETTINGS, state, CountingWriter(api), events=sink, is_leader=leadership, clock=SystemClock()
    )
    # a fault that needs no action (the old leader published its fault.detected naming no incident)
    fault = replace(_fault(), level=FaultLevel.NOT_HANDLE)
    await engine.handle_fault(fault, NOW)
    await engine.idle()
    old = ev.fault_detected(fault, cluster=SETTINGS.cluster_name, job=ObjectRef("vcjob", "ns", "job", "uid-job"))
    leadership.leads = True
    await engine.handle_cleared(FaultCleared(fault, NOW + timedelta(seconds=20), ObjectRef("ConfigMap", "x", "y")))
    await engine.idle()
    await api.close()
    assert sink.types() == [ev.FAULT_DETECTED, ev.FAULT_CLEARED]
    detected, cleared = sink.events
    assert detected.get_id() == old.get_id() == ev.as_json(cleared)["data"]["detected_id"]
    assert ev.encode(detected).key == ev.encode(cleared).key == b"uid-job"
    assert ev.as_json(detected)["data"]["incident_id"] is None


async def test_a_leader_that_published_the_fault_detected_does_not_publish_it_again_at_its_clear() -> None:
    api = k8s.ApiClient()
    sink = ListSink()
    engine = RecoveryEngine(SETTINGS, _state(), CountingWriter(api), events=sink, clock=SystemClock())
    fault = replace(_fault(), level=FaultLevel.NOT_HANDLE)
    await engine.handle_fault(fault, NOW)
    await engine.idle()
    await engine.handle_cleared(FaultCleared(fault, NOW + timedelta(seconds=20), ObjectRef("ConfigMap", "x", "y")))
    await engine.idle()
    await api.close()
    assert sink.types() == [ev.FAULT_DETECTED, ev.FAULT_CLEARED]


async def test_pipeline_clears_reach_the_engine_as_fault_cleared_events() -> None:
    """DetectPipeline → queue → engine, as the recovery loop runs it: a chip healthy again is one fault.cleared."""
    api = k8s.ApiClient()
    sink = ListSink()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    state = _state()
    pipeline = DetectPipeline(SETTINGS, state, queue, clock=SystemClock())
    engine = RecoveryEngine(
        SETTINGS, state, CountingWriter(api), events=sink, active_faults=pipeline.active_faults, clock=SystemClock()
    )

    def devicechange(faults: list[ChipFault], rv: str, t: int) -> Change[ConfigMapRecord]:
        data = device_info_cm("n1", faults, now=datetime.fromtimestamp(t, UTC))["data"]
        cm = factories.configmap(
            "mindx-dl-deviceinfo-n1", data, uid="uid-cm", resource_version=rv, labels=(("mx-consumer-cim", "true"),)
        )
        return change("deviceinfo", "kube-system/mindx-dl-deviceinfo-n1", cm)

    pipeline(devicechange([ChipFault(0, ("80E01801",), "SeparateNPU")], "1", 1_740_830_400))
    assert len(pipeline.active_faults()) == 1
    pipeline(devicechange([], "2", 1_740_830_460))
    assert pipeline.active_faults() == []
    while not queue.empty():
        item = queue.get_nowait()
        if isinstance(item, FaultCleared):
            await engine.handle_cleared(item)
            await engine.idle()
        else:
            await engine.handle_fault(item, NOW)
            await engine.idle()
    await api.close()
    assert sink.types().count(ev.FAULT_CLEARED) == 1
    assert sink.types().count(ev.FAULT_DETECTED) >= 1


# ------------------------------------------------------------------------------------------------ queue depth


def test_fault_queue_depth_is_reported() -> None:
    registry = CollectorRegistry()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(SETTINGS, ClusterState(), queue, metrics=AgentMetrics(registry), clock=SystemClock())
    data = device_info_cm("n1", [ChipFault(3, ("80E3A201",), "SeparateNPU")], now=NOW)["data"]
    cm = factories.configmap("mindx-dl-deviceinfo-n1", data, uid="uid-1", labels=(("mx-consumer-cim", "true"),))
    pipeline(change("deviceinfo", "kube-system/mindx-dl-deviceinfo-n1", cm))

    def depth() -> float | None:
        return registry.get_sample_value("fault_agent_queue_depth", {"queue": FAULT_QUEUE})

    assert depth() == 1
    queue.get_nowait()
    pipeline.report_depth()  # the recovery loop does this after each item it takes
    assert depth() == 0


# ------------------------------------------------------------------------------------------------ takeover


async def test_a_fault_seen_while_standing_by_is_acted_on_once_after_taking_the_lead() -> None:
    api = k8s.ApiClient()
    writer = CountingWriter(api)
    leadership = Leadership(False)
    active = [_fault()]
    engine = RecoveryEngine(
        SETTINGS, _state(), writer, is_leader=leadership, active_faults=lambda: list(active), clock=SystemClock()
    )

    assert await engine.handle_fault(active[0], NOW) == []  # standby: caches only
    await engine.idle()
    await engine.tick(NOW)
    await engine.idle()
    assert writer.commands == 0

    leadership.leads = True
    await engine.tick(NOW + timedelta(seconds=1), drained=False)  # faults still queued: wait for them
    await engine.idle()
    assert writer.commands == 0
    await engine.tick(NOW + timedelta(seconds=2))
    await engine.idle()
    assert writer.commands == 1
    for s in range(3, 6):  # once per term, and the open incident absorbs the fault anyway
        await engine.tick(NOW + timedelta(seconds=s))
        await engine.idle()
    await engine.handle_fault(active[0], NOW + timedelta(seconds=6))  # the queued copy arrives late: joins
    await engine.idle()
    await api.close()
    assert writer.commands == 1
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RESTARTING


async def test_a_fault_handled_in_this_term_is_not_re_evaluated() -> None:
    api = k8s.ApiClient()
    writer = CountingWriter(api)
    active = [_fault()]
    engine = RecoveryEngine(SETTINGS, _state(), writer, active_faults=lambda: list(active), clock=SystemClock())
    await engine.handle_fault(active[0], NOW)
    await engine.idle()
    assert writer.commands == 1
    assert await engine.reevaluate(NOW) == 0
    await engine.idle()
    await api.close()
    assert writer.commands == 1


def _persisted(phase: Phase, *, generation: str, restart_at: datetime) -> tuple[tuple[str, str], ...]:
    incident = Incident(
        id=make_incident_id("job", "uid-job", generation, 1), job_uid="uid-job", kind="vcjob", namespace="ns",
        name="job", generation=generation,
        phase=Phase.DETECTED, first_fault_at=NOW, steps=((Phase.DETECTED, NOW),),
    )  # fmt: skip
    incident = incident.move(Phase.ACTING, restart_at, action="restart-job", mode="force", reason="r")
    incident = incident.move(Phase.RESTARTING, restart_at, restart_at=restart_at)
    if phase is Phase.RECOVERED:
        incident = incident.move(Phase.RECOVERED, restart_at + timedelta(seconds=20))
    ledger = RetryLedger(restarts_used=1, incidents=1)
    return ((INCIDENT_ANNOTATION, encode_incident(incident)), (LEDGER_ANNOTATION, encode_ledger(ledger)))


async def test_a_new_leader_does_not_restart_a_job_the_old_leader_already_restarted_for_that_fault() -> None:
    for phase, version in ((Phase.RESTARTING, "0"), (Phase.RECOVERED, "1")):
        api = k8s.ApiClient()
        writer = CountingWriter(api)
        annotations = _persisted(phase, generation="0", restart_at=NOW + timedelta(seconds=2))
        state = _state(version=version, annotations=annotations)
        engine = RecoveryEngine(SETTINGS, state, writer, active_faults=lambda: [_fault()], clock=SystemClock())
        await engine.tick(NOW + timedelta(seconds=30))
        await engine.idle()
        await api.close()
        assert writer.commands == 0, phase


async def test_a_newer_fault_after_the_last_restart_is_still_acted_on_at_takeover() -> None:
    api = k8s.ApiClient()
    writer = CountingWriter(api)
    annotations = _persisted(Phase.RECOVERED, generation="0", restart_at=NOW + timedelta(seconds=2))
    newer = replace(_fault(NOW + timedelta(seconds=60)), chips=("Ascend910-1",))
    engine = RecoveryEngine(
        SETTINGS,
        _state(version="1", annotations=annotations),
        writer,
        active_faults=lambda: [newer],
        clock=SystemClock(),
    )
    await engine.tick(NOW + timedelta(seconds=61))
    await engine.idle()
    await api.close()
    assert writer.commands == 1


async def test_an_incident_closed_while_the_agent_steps_down_is_still_published() -> None:
    """Found by a second `make demo`: the agent stopping (leader flag dropped, Lease not yet released) while a tick
    closed an incident wrote the closure on the job but dropped its event, and no successor would send it."""
    api = k8s.ApiClient()
    sink = ListSink()
    leadership = Leadership(True)

    class SteppingDown(CountingWriter):
        step_down = False

        async def write_record(self, job: JobRef, annotations: Any, *, incident: str) -> ActionResult:
            if self.step_down:
                leadership.leads = False  # the stop arrives while the closure is being written
            return await super().write_record(job, annotations, incident=incident)

    writer = SteppingDown(api)
    engine = RecoveryEngine(SETTINGS, _state(), writer, events=sink, is_leader=leadership, clock=SystemClock())
    await engine.handle_fault(_fault(), NOW)
    await engine.idle()
    assert writer.commands == 1
    writer.step_down = True
    await engine.tick(NOW + timedelta(seconds=SETTINGS.policy.recovery_deadline_s + 1))
    await engine.idle()
    await api.close()
    assert not leadership.leads
    assert sink.types()[-1] == ev.RECOVERY_FAILED


@pytest.mark.parametrize("phase", [Phase.ACTING, Phase.RESTARTING], ids=["acting", "restarting"])
async def test_a_successor_publishes_the_first_events_of_an_incident_it_adopts(phase: Phase) -> None:
    """Regression (issue 16 item 2): a leader killed right after acting left the incident on the job, but its
    fault.detected and recovery.started never reached Kafka; the successor resumed the incident and published
    only recovery.succeeded. An adopted incident's first events are published again, first, with their ids."""
    api = k8s.ApiClient()
    sink = ListSink()
    leadership = Leadership(False)
    annotations = _persisted(Phase.RESTARTING, generation="0", restart_at=NOW + timedelta(seconds=2))
    if phase is Phase.ACTING:  # killed between writing the incident and sending the restart
        incident = Incident(
            id=make_incident_id("job", "uid-job", "0", 1), job_uid="uid-job", kind="vcjob", namespace="ns", name="job",
            generation="0",
            phase=Phase.DETECTED, first_fault_at=NOW, steps=((Phase.DETECTED, NOW),),
        ).join(_fault())  # fmt: skip
        acted = NOW + timedelta(seconds=1)
        incident = incident.move(Phase.ACTING, acted, action="restart-job", mode="force", reason="r")
        annotations = ((INCIDENT_ANNOTATION, encode_incident(incident)), annotations[1])
    fault = _fault()
    engine = RecoveryEngine(
        SETTINGS, _state(annotations=annotations), CountingWriter(api), events=sink, is_leader=leadership,
        active_faults=lambda: [fault], clock=SystemClock(),
    )  # fmt: skip
    await engine.handle_fault(fault, NOW)  # the standby saw the fault too
    await engine.idle()
    assert sink.events == []
    leadership.leads = True
    await engine.tick(NOW + timedelta(seconds=5))
    await engine.idle()
    await engine.tick(NOW + timedelta(seconds=6))  # once per term, not on every tick
    await engine.idle()
    await api.close()
    job = ObjectRef("vcjob", "ns", "job", "uid-job")
    types = sink.types()
    assert types[:2] == [ev.FAULT_DETECTED, ev.RECOVERY_STARTED], types
    assert types.count(ev.FAULT_DETECTED) == 1, types
    assert types.count(ev.RECOVERY_STARTED) == 1, types
    detected, started = sink.events[:2]
    incident_id = make_incident_id("job", "uid-job", "0", 1)
    want_detected = ev.fault_detected(fault, cluster=SETTINGS.cluster_name, job=job, incident_id=incident_id)
    assert detected.get_id() == want_detected.get_id()
    want = ev.recovery_started(incident_id, job, "restart-job", "r", cluster=SETTINGS.cluster_name, at=NOW)
    assert started.get_id() == want.get_id()
    assert ev.encode(detected).key == ev.encode(started).key == b"uid-job"


async def test_the_fault_that_opens_an_incident_is_published_naming_it_as_a_successor_would() -> None:
    """Regression (found by the soak): the fault that opened an incident was published with ``incident_id``
    null, and a successor re-publishing it after a takeover wrote the same event id with the incident's id, so
    one id named two different events and a consumer de-duplicating by id kept whichever came first."""
    api = k8s.ApiClient()
    sink = ListSink()
    fault = _fault()
    engine = RecoveryEngine(
        SETTINGS, _state(), CountingWriter(api), events=sink, active_faults=lambda: [fault], clock=SystemClock()
    )
    await engine.handle_fault(fault, NOW)
    await engine.idle()
    types = sink.types()
    assert types[:2] == [ev.FAULT_DETECTED, ev.RECOVERY_STARTED], types
    detected, started = (ev.as_json(e) for e in sink.events[:2])
    incident_id = started["data"]["incident_id"]
    assert detected["data"]["incident_id"] == incident_id

    # a successor adopting the open incident (read back from the job's annotation) publishes the same event
    incident = engine.store.incident("uid-job")
    assert incident is not None
    annotations = ((INCIDENT_ANNOTATION, encode_incident(incident)), (LEDGER_ANNOTATION, encode_ledger(RetryLedger())))
    successor_sink = ListSink()
    successor = RecoveryEngine(
        SETTINGS, _state(annotations=annotations), CountingWriter(api), events=successor_sink,
        active_faults=lambda: [fault], clock=SystemClock(),
    )  # fmt: skip
    await successor.handle_fault(fault, NOW)  # its standby self saw the fault (it joins the adopted incident)
    await successor.tick(NOW + timedelta(seconds=5))
    await api.close()
    again = [ev.as_json(e) for e in successor_sink.events if ev.as_json(e)["id"] == detected["id"]]
    assert again, successor_sink.types()
    assert all(e["data"] == detected["data"] for e in again)


def _quiet_node_fault() -> Fault:
    """A NodeD NotHandleFault on the job's node: published, no action, no incident."""
    return factories.fault(
        kind=FaultKind.NODE, level=FaultLevel.NOT_HANDLE, node="n1", chips=(), codes=("00000011",), at=NOW,
        source=ObjectRef("ConfigMap", "mindx-dl", "mindx-dl-nodeinfo-n1"), reason="NodeFault",
    )  # fmt: skip


def _restarting_incident(fault: Fault) -> tuple[Incident, tuple[tuple[str, str], ...]]:
    """The job's first incident, opened by `fault` and restarting, and the annotations an old leader left with it."""
    incident = Incident(
        id=make_incident_id("job", "uid-job", "0", 1), job_uid="uid-job", kind="vcjob", namespace="ns", name="job",
        generation="0", phase=Phase.DETECTED, first_fault_at=NOW, steps=((Phase.DETECTED, NOW),),
    ).join(fault)  # fmt: skip
    acted = NOW + timedelta(seconds=1)
    incident = incident.move(Phase.ACTING, acted, action="restart-job", mode="force", reason="r")
    incident = incident.move(Phase.RESTARTING, acted, restart_at=acted)
    ledger = encode_ledger(RetryLedger(restarts_used=1, incidents=1))
    return incident, ((INCIDENT_ANNOTATION, encode_incident(incident)), (LEDGER_ANNOTATION, ledger))


async def test_a_successor_re_publishes_only_the_faults_of_the_incident_it_adopts() -> None:
    """Regression (found by the soak): a successor adopting an open incident re-published every active fault that
    hit the job with the incident's id, also one that needed no action (NodeD NotHandleFault on the job's node)
    and had been published without an incident: one event id, two different events."""
    api = k8s.ApiClient()
    quiet = _quiet_node_fault()
    fault = _fault()
    job = ObjectRef("vcjob", "ns", "job", "uid-job")
    quiet_event = ev.as_json(ev.fault_detected(quiet, cluster=SETTINGS.cluster_name, job=job))
    assert quiet_event["data"]["incident_id"] is None  # what the old leader published for it
    incident, annotations = _restarting_incident(fault)
    sink = ListSink()
    leadership = Leadership(False)
    successor = RecoveryEngine(
        SETTINGS, _state(annotations=annotations), CountingWriter(api), events=sink,
        is_leader=leadership, active_faults=lambda: [quiet, fault], clock=SystemClock(),
    )  # fmt: skip
    await successor.handle_fault(quiet, NOW)  # its standby self saw both faults
    await successor.handle_fault(fault, NOW)
    leadership.leads = True
    await successor.tick(NOW + timedelta(seconds=5))
    await api.close()
    published = [ev.as_json(e) for e in sink.events]
    assert [e["type"] for e in published] == [ev.FAULT_DETECTED, ev.RECOVERY_STARTED], sink.types()
    assert published[0]["data"]["fault"]["level"] == "SeparateNPU"
    assert published[0]["data"]["incident_id"] == published[1]["data"]["incident_id"] == incident.id
    assert all(e["data"] == quiet_event["data"] for e in published if e["id"] == quiet_event["id"])


async def test_a_successor_that_saw_the_fault_only_after_the_jobs_pods_were_gone_still_publishes_its_detected() -> None:
    """Regression (issue 16 item 2, seen again in session 29's CI): the standby correlated the fault only after
    Volcano's restart had taken the job's pods (its loop was busy when the fault arrived, the old leader killed right
    after its Command), so it never noted that the fault hit the job, and on taking over it re-published the adopted
    incident's recovery.started but not its fault.detected. A fault the incident lists is the incident's, whatever
    the standby saw."""
    api = k8s.ApiClient()
    fault = _fault()
    incident, annotations = _restarting_incident(fault)
    sink = ListSink()
    leadership = Leadership(False)
    state = factories.one_job_state(NOW, annotations=annotations, pod_versions=[])  # the restart took the pods
    successor = RecoveryEngine(
        SETTINGS, state, CountingWriter(api), events=sink, is_leader=leadership, active_faults=lambda: [fault],
        clock=SystemClock(),
    )  # fmt: skip
    await successor.handle_fault(fault, NOW)  # its standby self saw the fault, the job's pods already gone
    leadership.leads = True
    await successor.tick(NOW + timedelta(seconds=5))
    await successor.idle()
    await api.close()
    # the job's stream (its UID as the key); the fault, seen hitting no job at that moment, also went out as a
    # node event when the new leader re-evaluated it
    published = [ev.as_json(e) for e in sink.events if ev.encode(e).key == b"uid-job"]
    assert [e["type"] for e in published][:2] == [ev.FAULT_DETECTED, ev.RECOVERY_STARTED], sink.types()
    assert published[0]["data"]["incident_id"] == published[1]["data"]["incident_id"] == incident.id
    assert published[0]["data"]["fault"]["level"] == "SeparateNPU"


async def test_a_successor_clearing_faults_it_never_published_names_only_the_incident_each_joined() -> None:
    """A successor whose first act of its term is publishing clears (before any tick adopted the job's
    incident) links each fault.detected it publishes first as the old leader did: the fault the incident lists
    names it, the one that needed no action names none; each clear names the id of the event it ends."""
    api = k8s.ApiClient()
    quiet = _quiet_node_fault()
    fault = _fault()
    job = ObjectRef("vcjob", "ns", "job", "uid-job")
    incident, annotations = _restarting_incident(fault)
    sink = ListSink()
    leadership = Leadership(False)
    successor = RecoveryEngine(
        SETTINGS, _state(annotations=annotations), CountingWriter(api), events=sink, is_leader=leadership,
        clock=SystemClock(),
    )  # fmt: skip
    await successor.handle_fault(quiet, NOW)  # its standby self saw both faults
    await successor.handle_fault(fault, NOW)
    leadership.leads = True
    source = ObjectRef("ConfigMap", "x", "y")
    await successor.handle_cleared(FaultCleared(quiet, NOW + timedelta(seconds=3), source))
    await successor.handle_cleared(FaultCleared(fault, NOW + timedelta(seconds=4), source))
    await successor.idle()
    await api.close()
    published = [ev.as_json(e) for e in sink.events]
    assert [e["type"] for e in published] == [ev.FAULT_DETECTED, ev.FAULT_CLEARED] * 2, sink.types()
    quiet_detected, quiet_cleared, detected, cleared = published
    cluster = SETTINGS.cluster_name
    assert quiet_detected["id"] == ev.fault_detected(quiet, cluster=cluster, job=job).get_id()
    assert quiet_detected["data"]["incident_id"] is None
    assert quiet_cleared["data"]["detected_id"] == quiet_detected["id"]
    assert detected["id"] == ev.fault_detected(fault, cluster=cluster, job=job, incident_id=incident.id).get_id()
    assert detected["data"]["incident_id"] == cleared["data"]["incident_id"] == incident.id
    assert cleared["data"]["detected_id"] == detected["id"]


async def test_a_restarted_agent_clears_in_the_job_stream_a_fault_its_predecessor_restarted_the_job_for() -> None:
    """Regression (found by a new-user trial): the old agent published the chip's fault.detected to the job and
    restarted it; the job recovered elsewhere and the agent restarted. The new process saw the still-faulty chip
    hit no job and published it as a node event; at the clear it ended only that one, and the job's fault.detected
    never got its fault.cleared. The job's (closed) incident lists the fault: the job's stream gets its clear too."""
    api = k8s.ApiClient()
    fault = _fault()
    job = ObjectRef("vcjob", "ns", "job", "uid-job")
    incident, _ = _restarting_incident(fault)
    incident = incident.move(Phase.RECOVERED, NOW + timedelta(seconds=30))
    annotations = ((INCIDENT_ANNOTATION, encode_incident(incident)),
                   (LEDGER_ANNOTATION, encode_ledger(RetryLedger(restarts_used=1, incidents=1))))  # fmt: skip
    state = _state(annotations=annotations)
    _move_pods_off(state, "n1")
    sink = ListSink()
    engine = RecoveryEngine(SETTINGS, state, CountingWriter(api), events=sink, clock=SystemClock())
    later = NOW + timedelta(minutes=2)
    await engine.handle_fault(fault, later)  # the new process: the chip is still faulty, on no job's pod
    await engine.idle()
    await engine.handle_cleared(FaultCleared(fault, later + timedelta(minutes=1), ObjectRef("ConfigMap", "x", "y")))
    await engine.idle()
    await api.close()
    published = [ev.as_json(e) for e in sink.events]
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for e in published:
        by_subject.setdefault(e["subject"], []).append(e)
    assert sorted(by_subject) == ["node/n1", "ns/job"], sink.types()
    assert [e["type"] for e in by_subject["node/n1"]] == [ev.FAULT_DETECTED, ev.FAULT_CLEARED]
    assert [e["type"] for e in by_subject["ns/job"]] == [ev.FAULT_DETECTED, ev.FAULT_CLEARED]
    old = ev.fault_detected(fault, cluster=SETTINGS.cluster_name, job=job, incident_id=incident.id)
    job_detected, job_cleared = by_subject["ns/job"]
    assert job_detected["id"] == old.get_id()  # the old agent's event again: a consumer drops the duplicate
    assert job_cleared["data"]["detected_id"] == old.get_id()
    node_detected, node_cleared = by_subject["node/n1"]
    assert node_cleared["data"]["detected_id"] == node_detected["id"]
    assert _commands(engine) == 0


def _commands(engine: RecoveryEngine) -> int:
    writer = engine.ctx.writer
    assert isinstance(writer, CountingWriter)
    return writer.commands


def test_an_incident_names_a_fault_of_its_chip_only_when_seen_before_it_ended() -> None:
    fault = _fault()
    incident, _ = _restarting_incident(fault)
    closed = incident.move(Phase.RECOVERED, NOW + timedelta(seconds=30))
    assert incident.names(fault)
    assert closed.names(fault)
    assert closed.names(replace(fault, level=FaultLevel.RESTART_NPU))  # the same chip at another level
    assert not closed.names(replace(fault, signal_time=NOW + timedelta(minutes=1)))  # a later fault of the chip
    assert not closed.names(replace(fault, chips=("Ascend910-7",)))
    # still open (restarting): a fault of the chip that began after the restart was sent never joined it (found in
    # review: its clear went into the job's stream, naming this incident)
    assert incident.phase.open
    assert not incident.names(replace(fault, signal_time=NOW + timedelta(seconds=2)))


async def test_an_incident_whose_end_could_not_be_written_is_ended_and_published_by_the_next_term() -> None:
    """Regression (found by the soak): the leader's renewal failed while it wrote an incident's end on the job
    (the fence refused the write). Its memory already had the incident closed, so when it led again nobody ended
    it: no recovery.succeeded or recovery.failed ever, and no histogram sample."""
    from agent.core.fence import NotLeader

    api = k8s.ApiClient()
    sink = ListSink()

    class Fenced(CountingWriter):
        refuse = False

        async def write_record(self, job: JobRef, annotations: Any, *, incident: str) -> ActionResult:
            if self.refuse:
                raise NotLeader("write-record", str(job))
            return await super().write_record(job, annotations, incident=incident)

    writer = Fenced(api)
    registry = CollectorRegistry()
    metrics = AgentMetrics(registry, cluster="c")
    annotations = _persisted(Phase.RESTARTING, generation="0", restart_at=NOW + timedelta(seconds=2))
    engine = RecoveryEngine(
        SETTINGS, _state(annotations=annotations), writer, events=sink, metrics=metrics, clock=SystemClock()
    )
    await engine.tick(NOW + timedelta(seconds=5))  # adopts the restarting incident the job's annotation holds
    late = NOW + timedelta(seconds=SETTINGS.policy.recovery_deadline_s + 1)
    writer.refuse = True
    with pytest.raises(NotLeader):
        await engine.tick(late)
    # the end's event went out before the record write the fence refused (a replica killed there must not lose
    # it); the record still holds the incident open
    first = [ev.as_json(e)["id"] for e in sink.events if e.get_type() == ev.RECOVERY_FAILED]
    assert len(first) == 1
    writer.refuse = False  # leading again
    await engine.tick(late + timedelta(seconds=1))
    await engine.tick(late + timedelta(seconds=2))
    await api.close()
    ended = [ev.as_json(e)["id"] for e in sink.events if e.get_type() == ev.RECOVERY_FAILED]
    assert ended == first * 2, sink.types()  # ended again by the next term under the same id: one end for a consumer
    samples = [s.value for m in registry.collect() for s in m.samples if s.name == "fault_agent_recovery_seconds_count"]
    assert sum(samples) == 1


async def test_a_fault_decided_again_by_a_new_term_with_another_incident_link_gets_another_event_id() -> None:
    """Regression (found by the soak, ``event-link``): a fault.detected id covered the fault and the job only,
    while its ``incident_id`` came from the decision. A fault that joined an open incident and was decided again
    by the next term (the incident closed by then) went out again under the same id naming another incident: one
    id, two different events, and a consumer de-duplicating by id lost one. Now the link is part of the id, and
    the fault.cleared names the id of the last fault.detected published for the fault and the job."""
    api = k8s.ApiClient()
    late = _fault(NOW + timedelta(seconds=10))  # after the open incident's restart
    job = ObjectRef("vcjob", "ns", "job", "uid-job")
    leader_sink = ListSink()
    open_incident = _persisted(Phase.RESTARTING, generation="0", restart_at=NOW + timedelta(seconds=2))
    leader = RecoveryEngine(
        SETTINGS, _state(annotations=open_incident), CountingWriter(api), events=leader_sink, clock=SystemClock()
    )
    await leader.handle_fault(late, NOW + timedelta(seconds=10))  # joins the open incident
    (joined,) = [ev.as_json(e) for e in leader_sink.events if e.get_type() == ev.FAULT_DETECTED]
    assert joined["data"]["incident_id"] == make_incident_id("job", "uid-job", "0", 1)

    # the next term reads the incident closed and decides the still-active fault again
    closed = _persisted(Phase.RECOVERED, generation="0", restart_at=NOW + timedelta(seconds=2))
    successor_sink = ListSink()
    successor = RecoveryEngine(
        SETTINGS, _state(annotations=closed), CountingWriter(api), events=successor_sink,
        active_faults=lambda: [late], clock=SystemClock(),
    )  # fmt: skip
    await successor.tick(NOW + timedelta(seconds=30))
    await successor.handle_cleared(FaultCleared(late, NOW + timedelta(seconds=40), ObjectRef("ConfigMap", "x", "y")))
    await api.close()
    again = [ev.as_json(e) for e in successor_sink.events if e.get_type() == ev.FAULT_DETECTED]
    assert [e["data"]["fault_id"] for e in again] == [joined["data"]["fault_id"]], successor_sink.types()
    assert again[0]["data"]["incident_id"] != joined["data"]["incident_id"]
    assert again[0]["id"] != joined["id"]
    contents: dict[str, list[Any]] = {}
    for e in (*leader_sink.events, *successor_sink.events):
        doc = ev.as_json(e)
        contents.setdefault(doc["id"], []).append(doc["data"])
    assert all(all(d == ds[0] for d in ds) for ds in contents.values()), contents  # one id, one event
    (cleared,) = [ev.as_json(e) for e in successor_sink.events if e.get_type() == ev.FAULT_CLEARED]
    assert cleared["data"]["detected_id"] == again[0]["id"]
    want = ev.fault_detected(late, cluster=SETTINGS.cluster_name, job=job, incident_id=again[0]["data"]["incident_id"])
    assert again[0]["id"] == want.get_id()


async def test_an_incidents_end_is_durable_before_the_record_says_it_ended() -> None:
    """Regression (found by the soak, seed 11, ``lifecycle``): the leader wrote the incident's end into the job's
    record, then handed recovery.succeeded to the outbox; killed between the two, the record said ended, so no
    successor ended it again, and the end never reached Kafka. Now the end's event is durable first: at the record
    write that closes the incident, the event is already in the sink (a kill there leaves the incident open in the
    record, and the next term ends it again under the same id)."""
    api = k8s.ApiClient()
    sink = ListSink()
    seen_at_write: list[list[str]] = []

    class Watching(CountingWriter):
        async def write_record(self, job: JobRef, annotations: Any, *, incident: str) -> ActionResult:
            seen_at_write.append(sink.types())
            return await super().write_record(job, annotations, incident=incident)

    annotations = _persisted(Phase.RESTARTING, generation="0", restart_at=NOW + timedelta(seconds=2))
    engine = RecoveryEngine(SETTINGS, _state(annotations=annotations), Watching(api), events=sink, clock=SystemClock())
    await engine.tick(NOW + timedelta(seconds=5))  # adopts the restarting incident
    await engine.tick(NOW + timedelta(seconds=SETTINGS.policy.recovery_deadline_s + 1))  # its deadline: it fails
    await api.close()
    assert ev.RECOVERY_FAILED in sink.types()
    assert seen_at_write
    assert ev.RECOVERY_FAILED in seen_at_write[-1], seen_at_write  # the last record write closes the incident
