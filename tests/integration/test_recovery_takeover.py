"""Takeover does not lose faults: a chip fault seen only by a standby (the Lease held by a leader that never acts,
then stops renewing, like a crashed one) is acted on by the standby once it leads: exactly one RestartJob Command.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from actions_support import (
    CommandRecorder,
    delete_device_info,
    delete_node,
    job_record,
    make_job,
    make_job_pod,
    make_node,
    pods_by_name,
    put_device_info,
)
from kubernetes_asyncio import client as k8s
from support.polling import eventually
from test_recovery import _incident, _settings, running_agent

from agent.actions.writer import VOLCANO_GROUP, VOLCANO_PLURAL, VOLCANO_VERSION
from agent.core.cluster import JobKind
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
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
from agent.core.records import KEY_LEDGER, record_body, record_data

pytestmark = pytest.mark.integration


class SilentLeader:
    """Holds the agent's Lease as "silent-leader" (renewed every 0.5 s) and never acts; :meth:`stop` stops the
    renewals without releasing the Lease, as a leader that crashed would. Both are safe to repeat."""

    def __init__(self, api: k8s.ApiClient, namespace: str, lease: str, duration_s: int) -> None:
        self.coordination = k8s.CoordinationV1Api(api)
        self.namespace, self.lease, self.duration_s = namespace, lease, duration_s
        self.task: asyncio.Task[None] | None = None

    def _body(self, rv: str | None) -> k8s.V1Lease:
        now = datetime.now(UTC)
        return k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(name=self.lease, resource_version=rv),
            spec=k8s.V1LeaseSpec(
                holder_identity="silent-leader",
                lease_duration_seconds=self.duration_s,
                acquire_time=now,
                renew_time=now,
            ),
        )

    async def start(self) -> None:
        await self.coordination.create_namespaced_lease(self.namespace, self._body(None))
        self.task = asyncio.create_task(self._renew(), name="silent-leader")

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            current = await self.coordination.read_namespaced_lease(self.lease, self.namespace)
            await self.coordination.replace_namespaced_lease(
                self.lease, self.namespace, self._body(current.metadata.resource_version)
            )

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None


async def test_a_fault_seen_only_by_the_standby_restarts_the_job_once_after_takeover(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    node = await make_node(kube_client)
    try:
        job = await make_job(kube_client, namespace, "tk", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
        for i in range(2):
            await make_job_pod(kube_client, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
        settings = _settings(testbed, namespace)
        leader = SilentLeader(kube_client, namespace, settings.leader.name, int(settings.leader.lease_duration_s))
        await leader.start()
        try:
            async with (
                CommandRecorder(kube_client, namespace) as rec,
                running_agent(settings, "agent-b") as (standby, _),
            ):
                await put_device_info(kube_client, node, {"Ascend910-0": ("SeparateNPU", "80E01801")})
                assert standby.ctx.active_faults is not None
                active = standby.ctx.active_faults
                await eventually(
                    lambda: asyncio.sleep(0, active()),
                    lambda faults: any(f.chips == ("Ascend910-0",) for f in faults),
                    what="the standby saw the fault",
                )
                await asyncio.sleep(1.5)  # taken off the queue while standing by: nothing done
                assert not standby.is_leader()
                assert await rec.count() == []
                assert standby.store.open_incidents() == []

                await leader.stop()  # the leader stops renewing, as if it had crashed
                await eventually(
                    lambda: asyncio.sleep(0, standby.is_leader()), bool, what="the standby takes over", timeout_s=15
                )
                commands = await eventually(rec.count, lambda c: len(c) >= 1, what="a RestartJob Command", timeout_s=15)
                assert commands[0]["target"]["uid"] == job.uid
                await asyncio.sleep(3)  # several ticks later: still exactly one
                assert len(await rec.count()) == 1
                assert standby.store.ledger(job.uid).restarts_used == 1
        finally:
            await leader.stop()
    finally:
        await delete_device_info(kube_client, node)
        await delete_node(kube_client, node)


@pytest.mark.parametrize("stored", ["record", "earlier-versions-annotations"])
async def test_an_incident_left_acting_whose_fault_cleared_is_closed_as_recovered_not_restarted(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, stored: str
) -> None:
    """Issue 13 B.7: a leader opened an incident (``acting`` in the job's record) and died before sending the
    restart; the chip is healthy again and the job runs. The new leader decides again from what it sees: no
    RestartJob, the incident closes as recovered (it used to re-send the restart for a fault long gone).
    With an earlier version's annotations on the job instead of a record (issue 35's migration), the incident is
    adopted from them, the record written, and the job's annotations left exactly as they were."""
    node = await make_node(kube_client)
    try:
        job = await make_job(kube_client, namespace, "ra", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
        for i in range(2):
            await make_job_pod(kube_client, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
        await put_device_info(kube_client, node, {})  # the chip is healthy again
        custom = k8s.CustomObjectsApi(kube_client)
        await custom.patch_namespaced_custom_object_status(
            VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_PLURAL, "ra",
            {"status": {"state": {"phase": "Running"}, "version": 0}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip

        async def pods_ready() -> bool:
            pods = await pods_by_name(kube_client, namespace)
            return len(pods) == 2 and all(
                any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []) for p in pods.values()
            )

        await eventually(pods_ready, bool, what="the job's pods Running and Ready")
        was = datetime.now(UTC) - timedelta(minutes=2)
        fault = Fault(
            FaultKind.CHIP, FaultLevel.SEPARATE, node, ("Ascend910-0",), ("80E01801",), was, was,
            ObjectRef("ConfigMap", "kube-system", f"mindx-dl-deviceinfo-{node}"), "CardUnhealthy",
        )  # fmt: skip
        incident = Incident(
            id=make_incident_id("ra", job.uid, "0", 1), job_uid=job.uid, kind="vcjob", namespace=namespace,
            name="ra", generation="0",
            phase=Phase.DETECTED, first_fault_at=was, steps=((Phase.DETECTED, was),),
        ).join(fault)  # fmt: skip
        incident = incident.move(Phase.ACTING, was, action="restart-job", mode="force", reason="chip fault")
        persisted = {
            INCIDENT_ANNOTATION: encode_incident(incident),
            LEDGER_ANNOTATION: encode_ledger(RetryLedger(restarts_used=1, incidents=1)),
        }
        if stored == "record":
            data = record_data(persisted[INCIDENT_ANNOTATION], persisted[LEDGER_ANNOTATION], "old#1")
            body = record_body(namespace, job.uid, JobKind.VOLCANO, namespace, "ra", data)
            await k8s.CoreV1Api(kube_client).create_namespaced_config_map(namespace, body)
        else:
            await custom.patch_namespaced_custom_object(
                VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_PLURAL, "ra",
                {"metadata": {"annotations": persisted}}, _content_type="application/merge-patch+json",
            )  # fmt: skip
        before = await custom.get_namespaced_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_PLURAL,
                                                           "ra")  # fmt: skip
        settings = _settings(testbed, namespace)
        async with CommandRecorder(kube_client, namespace) as rec, running_agent(settings, "agent-new") as (engine, _):
            closed = await eventually(
                lambda: _incident(kube_client, job),
                lambda i: i is not None and not i.phase.open,
                what="the acting incident closed",
                timeout_s=15,
            )
            assert closed.phase is Phase.RECOVERED
            assert "not restarted" in closed.detail
            await asyncio.sleep(2)  # more ticks: still nothing sent
            assert await rec.count() == []
            assert engine.store.open_incidents() == []
        after = await custom.get_namespaced_custom_object(VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_PLURAL,
                                                          "ra")  # fmt: skip
        assert after["metadata"].get("annotations") == before["metadata"].get("annotations")  # never written
        assert (await job_record(kube_client, namespace, job))[KEY_LEDGER] == persisted[LEDGER_ANNOTATION]
    finally:
        await delete_device_info(kube_client, node)
        await delete_node(kube_client, node)
