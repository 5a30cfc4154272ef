"""Stragglers (agent.core.straggler) through the production path: the job source's labels, the detect pipeline's
Lease source and tick, the engine's straggler part, the job.straggler event and the node's quarantine (a fake
writer). Never a restart; with ``avoid`` the node is tainted ``SubHealthFault``, lifted when the rank recovers and
held after the job restarted."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from support.fakes import CountingWriter, ListSink, script

from agent.actions import ActionResult, Outcome
from agent.core.clock import FixedClock
from agent.core.cluster import JobKind, JobRecord
from agent.core.faults import Fault, FaultCleared
from agent.core.progress import PROGRESS_LABEL, RANK_STEP_TIMES_ANNOTATION, STEP_ANNOTATION, LeaseRecord
from agent.core.straggler import STRAGGLER_LABEL
from agent.engine.detecting import DetectPipeline
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.jobs import JobConverter
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({
    "kafka": {"enabled": False},
    "policy": {"breaker_min_faulty_nodes": 100},
    "detect": {"straggler_windows": 2, "straggler_avoid_hold_s": 600},
})  # fmt: skip
LEASE_KEY = "ns/fault-agent-progress-job"
TAINT_KEY = SETTINGS.policy.taint_key


NodeWrites = list[tuple[str, tuple[Any, ...], dict[str, Any]]]


def _taint_writer(api: k8s.ApiClient, log: NodeWrites) -> CountingWriter:
    """A writer answering at once that counts the RestartJob Commands and logs the node taint writes in `log`."""
    writer = CountingWriter(api)
    script(writer, "taint_node", does=lambda node, **_: ActionResult("taint", f"Node/{node}", Outcome.DONE), log=log)
    script(
        writer, "untaint_node", does=lambda node, **_: ActionResult("untaint", f"Node/{node}", Outcome.DONE), log=log
    )
    return writer


class Counts:
    def __init__(self) -> None:
        self.found: list[str] = []
        self.now: dict[str, int] = {}

    def straggler_found(self, job_kind: str) -> None:
        self.found.append(job_kind)

    def stragglers_now(self, job_kind: str, n: int) -> None:
        self.now[job_kind] = n


def _lease(step: int, times: str) -> LeaseRecord:
    ann = ((RANK_STEP_TIMES_ANNOTATION, times), (STEP_ANNOTATION, str(step)))
    return LeaseRecord("ns", "fault-agent-progress-job", "uid-lease", str(step), "job", "job-0", NOW, 3, ann)


def _raw_vcjob(mode: str, version: int) -> dict[str, Any]:
    """The Volcano Job as the apiserver serves it (the labels go through the job source's filter)."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "job", "namespace": "ns", "uid": "uid-job", "resourceVersion": str(version + 1),
                     "generation": 1, "creationTimestamp": "2025-03-01T12:00:00Z",
                     "labels": {"fault-scheduling": "force", PROGRESS_LABEL: "lease", STRAGGLER_LABEL: mode}},
        "spec": {"maxRetry": 3, "minAvailable": 2, "tasks": []},
        "status": {"state": {"phase": "Running"}, "version": version, "retryCount": 0},
    }  # fmt: skip


class Harness:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.clock = FixedClock(NOW)
        self.state = ClusterState()
        self.queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
        self.pipeline = DetectPipeline(SETTINGS, self.state, self.queue, clock=self.clock)
        self.api = k8s.ApiClient()
        self.node_writes: NodeWrites = []
        self.writer = _taint_writer(self.api, self.node_writes)
        self.sink = ListSink()
        self.engine = RecoveryEngine(SETTINGS, self.state, self.writer, events=self.sink, clock=self.clock)
        self.counts = Counts()
        self.engine.stragglers.feed, self.engine.stragglers.metrics = self.pipeline.take_stragglers, self.counts
        for i in range(3):
            self.apply(change("nodes", f"n{i}", factories.node(f"n{i}", at=NOW)))
            pod = factories.pod(f"job-{i}", node=f"n{i}", chips=(f"Ascend910-{i}",), rank=i, created_at=NOW)
            self.apply(change("pods", f"ns/job-{i}", pod))
        self.set_job(0)
        self.step = 0

    def taints(self) -> list[tuple[str, str, str | None]]:
        """The node taint writes, in order: (what, node, value; None for an untaint)."""
        return [(m.removesuffix("_node"), a[0], k.get("value")) for m, a, k in self.node_writes]

    def set_job(self, version: int) -> None:
        job = JobConverter(JobKind.VOLCANO)(_raw_vcjob(self.mode, version))
        assert isinstance(job, JobRecord), job
        self.apply(change("vcjobs", "ns/job", job))

    def apply(self, c: object) -> None:
        self.state.apply(c)  # type: ignore[arg-type]
        self.pipeline(c)  # type: ignore[arg-type]

    async def window(self, seconds: float, times: str) -> None:
        """One heartbeat write whose step moved, and a tick."""
        self.clock.set(NOW + timedelta(seconds=seconds))
        self.step += 10
        self.apply(change("leases", LEASE_KEY, _lease(self.step, times)))
        self.pipeline.tick()
        await self.engine.tick(self.clock.now())
        await self.engine.idle()

    def events(self) -> list[dict[str, Any]]:
        return [ev.as_json(e)["data"] for e in self.sink.events if ev.as_json(e)["type"] == ev.JOB_STRAGGLER]


async def test_a_straggler_is_one_event_naming_pod_node_and_chips_and_restarts_nothing() -> None:
    h = Harness("detect")
    for i in range(6):
        await h.window(i, "1,1,1" if i < 2 else "1,3,1")
    (event,) = h.events()
    assert (event["state"], event["pod"]["name"], event["node"], event["chips"]) == (
        "straggling", "job-1", "n1", ["Ascend910-1"]
    )  # fmt: skip
    assert (event["rank"], event["step_time_s"], event["median_s"], event["avoidance"]) == (1, 3.0, 1.0, "none")
    assert h.counts.found == ["vcjob"]
    assert h.counts.now["vcjob"] == 1
    assert h.taints() == []
    assert h.writer.commands == 0
    await h.window(6, "1,1,1")
    await h.window(7, "1,1,1")
    assert [(e["state"], e["ended_by"]) for e in h.events()] == [("straggling", None), ("ended", "recovered")]
    assert h.counts.now["vcjob"] == 0
    await h.api.close()


async def test_avoid_taints_the_node_lifts_it_on_recovery_and_holds_it_after_a_restart() -> None:
    h = Harness("avoid")
    for i in range(4):
        await h.window(i, "1,1,3")
    assert h.events()[0]["avoidance"] == "node-marked"
    assert set(h.taints()) == {("taint", "n2", "SubHealthFault")}  # (again at each reconcile: no node update)
    assert h.writer.commands == 0
    for i in range(4, 6):
        await h.window(i, "1,1,1")
    assert h.taints()[-1] == ("untaint", "n2", None)  # recovered: the mark goes at once
    for i in range(6, 9):
        await h.window(i, "1,1,3")
    assert h.taints()[-1] == ("taint", "n2", "SubHealthFault")
    h.set_job(1)  # the job restarted: the episode ends, the node stays marked for detect.straggler_avoid_hold_s
    await h.window(9, "1,1,1")
    assert h.events()[-1]["ended_by"] == "restarted"
    assert h.taints()[-1] == ("taint", "n2", "SubHealthFault")
    assert h.engine.quarantining.flap_holds[("n2", ("straggler", "uid-job", 2))] == NOW + timedelta(seconds=609)
    h.clock.set(NOW + timedelta(seconds=610))
    await h.engine.tick(h.clock.now())
    await h.engine.idle()
    assert h.taints()[-1] == ("untaint", "n2", None)
    assert h.writer.commands == 0
    await h.api.close()


async def test_a_held_mark_goes_when_a_person_releases_the_node() -> None:
    h = Harness("avoid")
    for i in range(3):
        await h.window(i, "1,1,3")
    h.set_job(1)
    await h.window(3, "1,1,1")
    assert h.taints()[-1] == ("taint", "n2", "SubHealthFault")
    for hold in [k for k in h.engine.quarantining.flap_holds if k[0] == "n2"]:
        del h.engine.quarantining.flap_holds[hold]  # what a release does (Quarantining.take_releases)
    await h.window(4, "1,1,1")
    assert h.taints()[-1] == ("untaint", "n2", None)
    assert "n2" not in h.engine.quarantining.reasons
    await h.api.close()
