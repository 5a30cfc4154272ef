"""Hostile input on the testbed (issue 16 items 6-8): the whole agent in-process (`agent.runtime.app.run_agent`)
against the real apiserver, with Volcano's controller running, fed input a person or a broken component could write.

- a job's incident annotation dated year 9999, or a made-up open incident, does not stop a real chip fault from
  restarting the job (item 6);
- one device-plugin write listing 10,000 chip names that the node does not have makes no fault and one
  rejection, while a real chip among garbage still restarts the job; a device or NodeD ConfigMap for a node that
  does not exist is reported and not acted on (item 7);
- a ``fault-scheduling`` label the agent cannot read is reported once per distinct value and shown as
  unreadable by ``fault-agent status`` (item 8).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from actions_support import (
    CommandRecorder,
    delete_device_info,
    delete_node,
    device_info_data,
    make_job,
    make_job_pod,
    make_node,
    pods_by_name,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from structlog.testing import capture_logs
from support.polling import eventually
from test_recovery_quarantine import _delete_node_info, _put_node_info

from agent.core.cluster import JobKind, JobRef
from agent.core.detect.checkcode import check_code
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
from agent.engine.recovery import RecoveryEngine
from agent.runtime.app import run_agent
from agent.settings import Settings

pytestmark = pytest.mark.integration
SEPARATE = ("SeparateNPU", "80E01801")
YEAR_9999 = datetime(9999, 1, 1, tzinfo=UTC)
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


def _settings(testbed: Any, namespace: str) -> Settings:
    return Settings.model_validate(
        {
            "cluster_name": "it",
            "kube": {"kubeconfig": str(testbed.kubeconfig), "namespaces": [namespace]},
            "kafka": {"enabled": False},
            "server": {"port": 0},
            "leader": {"namespace": namespace, "lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 0.2},
            # the testbed's admin, whom no admission policy confines: warn, not refuse (test_fail_closed.py)
            "policy": {"restart_burst": 20, "restart_rate_per_min": 600, "admission_check": "warn"},
        }
    )


@contextlib.asynccontextmanager
async def running_agent(settings: Settings) -> AsyncIterator[tuple[RecoveryEngine, list[MutableMapping[str, Any]]]]:
    """Run the agent until the block ends; yields (engine, its log entries so far). Waits until it leads with
    synced caches."""
    stop = asyncio.Event()
    engines: list[RecoveryEngine] = []
    with capture_logs() as logs:
        task = asyncio.create_task(run_agent(settings, stop, identity="input", on_engine=engines.append))

        async def ready() -> bool:
            if task.done():
                task.result()
            return bool(engines) and engines[0].state.ready and engines[0].is_leader()

        await eventually(ready, bool, what="agent synced and leading", timeout_s=30)
        try:
            yield engines[0], logs
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=20)


@pytest.fixture
async def nodes(kube_client: k8s.ApiClient) -> AsyncIterator[Callable[[int], Any]]:
    made: list[str] = []

    async def make(n: int) -> list[str]:
        names = [await make_node(kube_client) for _ in range(n)]
        made.extend(names)
        return names

    yield make
    for name in made:
        await delete_device_info(kube_client, name)
        await delete_node(kube_client, name)


async def _job_with_pods(api: k8s.ApiClient, namespace: str, name: str, node: str, labels: dict[str, str]) -> JobRef:
    job = await make_job(api, namespace, name, JobKind.VOLCANO, labels=labels)
    for i in range(2):
        await make_job_pod(api, job, i, node, chips=f"Ascend910-{2 * i},Ascend910-{2 * i + 1}")
    await eventually(
        lambda: pods_by_name(api, namespace),
        lambda pods: sum(1 for p in pods.values() if p.status.phase == "Running") == 2,
        what=f"{name} pods Running",
    )
    return job


async def _job_object(api: k8s.ApiClient, job: JobRef) -> dict[str, Any]:
    obj: dict[str, Any] = await k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", job.namespace, "jobs", job.name
    )
    return obj


async def _annotate(api: k8s.ApiClient, job: JobRef, annotations: dict[str, str]) -> None:
    await k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", job.namespace, "jobs", job.name,
        {"metadata": {"annotations": annotations}}, **MERGE,
    )  # fmt: skip


async def _put_device_data(api: k8s.ApiClient, node: str, data: dict[str, str]) -> None:
    core = k8s.CoreV1Api(api)
    name = f"mindx-dl-deviceinfo-{node}"
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name, labels={"mx-consumer-cim": "true"}), data=data)
    try:
        await core.replace_namespaced_config_map(name, "kube-system", body)
    except ApiException as e:
        if e.status != 404:
            raise
        await core.create_namespaced_config_map("kube-system", body)


def _device_data(unhealthy: list[str], *, manual: str = "") -> dict[str, str]:
    """A device-plugin ConfigMap whose -Unhealthy list is `unhealthy` (no -Fault elements, as older plugins
    write it), with a correct CheckCode."""
    prefix = "huawei.com/Ascend910"
    device_list = {
        prefix: "",
        f"{prefix}-Fault": "[]",
        f"{prefix}-NetworkUnhealthy": "",
        f"{prefix}-Recovering": "",
        f"{prefix}-Unhealthy": ",".join(unhealthy),
    }
    info = {"DeviceList": device_list, "UpdateTime": int(time.time())}
    cfg = {"DeviceInfo": info, "SuperPodID": -2, "ServerIndex": -2, "CheckCode": check_code(info)}
    return {"DeviceInfoCfg": json.dumps(cfg, separators=(",", ":")), "ManuallySeparateNPU": manual}


def _rejections(logs: list[MutableMapping[str, Any]], reason: str, name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e.get("event") == "input rejected" and e.get("reason") == reason and name in e["source"]]


# ------------------------------------------------------------------------------------- item 6: annotations


def _closed_incident(job: JobRef, generation: str, at: datetime) -> dict[str, str]:
    """The annotations a recovered incident leaves on `job`, with every time set to `at`."""
    incident = Incident(
        id=make_incident_id(job.name, job.uid, generation, 1), job_uid=job.uid, kind="vcjob",
        namespace=job.namespace, name=job.name, generation=generation, phase=Phase.DETECTED, first_fault_at=at,
        steps=((Phase.DETECTED, at),),
    )  # fmt: skip
    incident = incident.move(Phase.ACTING, at, action="restart-job", mode="force", reason="chip fault")
    incident = incident.move(Phase.RESTARTING, at, restart_at=at).move(Phase.RECOVERED, at)
    ledger = RetryLedger(restarts_used=1, incidents=1)
    return {INCIDENT_ANNOTATION: encode_incident(incident), LEDGER_ANNOTATION: encode_ledger(ledger)}


async def _generation(api: k8s.ApiClient, job: JobRef) -> str:
    """The job's generation as the agent reads it: Volcano's status.version ("" while no controller wrote one;
    these jobs name no queue, so the testbed's controller leaves their status alone)."""
    version = ((await _job_object(api, job)).get("status") or {}).get("version")
    return "" if version is None else str(version)


async def test_a_year_9999_incident_annotation_does_not_stop_a_real_fault_from_restarting_the_job(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(kube_client, namespace, "future", node, {"fault-scheduling": "force"})
    await _annotate(kube_client, job, _closed_incident(job, await _generation(kube_client, job), YEAR_9999))
    async with (
        CommandRecorder(kube_client, namespace) as rec,
        running_agent(_settings(testbed, namespace)) as (_, logs),
    ):
        await _put_device_data(kube_client, node, device_info_data(node, {"Ascend910-1": SEPARATE}))
        # old code: no Command, "fault older than the job's last incident; ignored"
        commands = await eventually(rec.count, lambda c: len(c) >= 1, what="a RestartJob Command", timeout_s=15)
        assert commands[0]["target"]["uid"] == job.uid
        bad = [e for e in logs if e.get("event") == "job record unreadable; ignored"]
        assert len(bad) == 1
        assert "in the future" in bad[0]["error"]
        assert not [e for e in logs if e.get("event") == "fault older than the job's last incident; ignored"]


async def test_a_made_up_open_incident_does_not_swallow_a_real_fault(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(kube_client, namespace, "madeup", node, {"fault-scheduling": "force"})
    generation = await _generation(kube_client, job)
    now = datetime.now(UTC) - timedelta(seconds=5)
    made_up = {
        "id": f"{job.name}-0000000000", "jobUID": job.uid, "kind": "vcjob", "namespace": namespace,
        "name": job.name, "generation": generation, "phase": "restarting", "firstFaultAt": now.isoformat(),
        "steps": [["detected", now.isoformat()], ["acting", now.isoformat()], ["restarting", now.isoformat()]],
        "restartAt": now.isoformat(), "faults": [], "faultCount": 1, "action": "restart-job", "mode": "force",
    }  # fmt: skip
    ledger = encode_ledger(RetryLedger(restarts_used=1, incidents=1))
    await _annotate(kube_client, job, {INCIDENT_ANNOTATION: json.dumps(made_up), LEDGER_ANNOTATION: ledger})
    async with (
        CommandRecorder(kube_client, namespace) as rec,
        running_agent(_settings(testbed, namespace)) as (_, logs),
    ):
        await _put_device_data(kube_client, node, device_info_data(node, {"Ascend910-2": SEPARATE}))
        # old code: the fault joined the made-up incident and nothing restarted the job
        await eventually(rec.count, lambda c: len(c) >= 1, what="a RestartJob Command", timeout_s=15)
        bad = [e for e in logs if e.get("event") == "job record unreadable; ignored"]
        assert len(bad) == 1
        assert "is not the id of incident 1" in bad[0]["error"]


# ------------------------------------------------------------------------------------- item 7: chip names


async def test_a_10000_chip_write_makes_no_fault_and_one_rejection_and_a_real_chip_among_garbage_counts(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(kube_client, namespace, "chips", node, {"fault-scheduling": "force"})
    garbage = [f"Ascend910-{i}" for i in range(8, 10_008)]  # the node has 8 chips: 0-7
    async with (
        CommandRecorder(kube_client, namespace) as rec,
        running_agent(_settings(testbed, namespace)) as (
            engine,
            logs,
        ),
    ):
        await _put_device_data(kube_client, node, _device_data(garbage, manual=",".join(garbage)))
        await eventually(lambda: asyncio.sleep(0, _rejections(logs, "bad-chip-name", node)), bool, what="the rejection")
        await asyncio.sleep(2)
        (rejection,) = _rejections(logs, "bad-chip-name", node)  # one for the whole write
        assert rejection["detail"].startswith(f"20000 name(s) are not chips of node {node}")
        assert await rec.count() == []  # old code: 20,000 chip faults, a restart for none of the job's chips
        assert engine.decisions == []
        assert not [e for e in logs if e.get("event") == "decision"]

        # unicode, right-to-left and emoji names around a real chip of the job: the real chip restarts the job
        hostile = ["Ascend910-\u0663", "Ascend910-3\u202e", "\U0001f4a5", "Ascend910-99", "Ascend910-1"]
        await _put_device_data(kube_client, node, _device_data(hostile))
        commands = await eventually(rec.count, lambda c: len(c) >= 1, what="a RestartJob Command", timeout_s=15)
        assert commands[0]["target"]["uid"] == job.uid
        assert [f.chips for f, _, _ in engine.decisions] == [("Ascend910-1",)]
        assert len(_rejections(logs, "bad-chip-name", node)) == 2


async def test_a_device_configmap_for_a_node_that_does_not_exist_is_reported_not_acted_on(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    await _job_with_pods(kube_client, namespace, "ghost", node, {"fault-scheduling": "force"})
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    try:
        async with (
            CommandRecorder(kube_client, namespace) as rec,
            running_agent(_settings(testbed, namespace)) as (
                engine,
                logs,
            ),
        ):
            await _put_device_data(kube_client, ghost, device_info_data(ghost, {"Ascend910-0": SEPARATE}))
            await eventually(
                lambda: asyncio.sleep(0, _rejections(logs, "unknown-node", ghost)), bool, what="the rejection"
            )
            await asyncio.sleep(1)
            assert len(_rejections(logs, "unknown-node", ghost)) == 1
            assert not [f for f, _, _ in engine.decisions if f.node == ghost]
            assert await rec.count() == []
            assert ghost not in engine.quarantining.reasons  # old code: a chip fault of a node that does not exist
    finally:
        await delete_device_info(kube_client, ghost)


async def test_a_noded_configmap_for_a_node_that_does_not_exist_is_reported_not_acted_on(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    await _job_with_pods(kube_client, namespace, "ghost", node, {"fault-scheduling": "force"})
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    try:
        async with (
            CommandRecorder(kube_client, namespace) as rec,
            running_agent(_settings(testbed, namespace)) as (
                engine,
                logs,
            ),
        ):
            await _put_node_info(kube_client, ghost)  # a SeparateFault CPU fault, NodeStatus UnHealthy
            await eventually(
                lambda: asyncio.sleep(0, _rejections(logs, "unknown-node", ghost)), bool, what="the rejection"
            )
            await asyncio.sleep(1)
            assert len(_rejections(logs, "unknown-node", ghost)) == 1
            assert not [f for f, _, _ in engine.decisions if f.node == ghost]
            assert await rec.count() == []
            assert ghost not in engine.quarantining.reasons  # old code: a taint attempted on a node that does not exist
    finally:
        await _delete_node_info(kube_client, ghost)


# ------------------------------------------------------------------------------------- item 8: opt-in labels


async def _status(testbed: Any, namespace: str, *args: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FAULT_AGENT_")}
    environ |= {"KUBECONFIG": str(testbed.kubeconfig), "COLUMNS": "200"}
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agent", "status", "-n", namespace, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


async def test_an_unreadable_fault_scheduling_label_is_reported_per_value_and_shown_by_status(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str, nodes: Any
) -> None:
    (node,) = await nodes(1)
    job = await _job_with_pods(kube_client, namespace, "upper", node, {"fault-scheduling": "FORCE"})
    custom = k8s.CustomObjectsApi(kube_client)

    async def label(value: str) -> None:
        await custom.patch_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", job.name,
            {"metadata": {"labels": {"fault-scheduling": value}}}, **MERGE,
        )  # fmt: skip

    async with running_agent(_settings(testbed, namespace)) as (engine, logs):

        def reported() -> list[MutableMapping[str, Any]]:
            return _rejections(logs, "bad-fault-scheduling", f"{namespace}/{job.name}")

        await eventually(lambda: asyncio.sleep(0, reported()), bool, what="FORCE reported")
        await _annotate(kube_client, job, {"example.io/touched": "1"})  # a write with the same bad value
        await label("grace-ish")
        await eventually(lambda: asyncio.sleep(0, reported()), lambda r: len(r) >= 2, what="grace-ish reported")
        await label("")
        await eventually(lambda: asyncio.sleep(0, reported()), lambda r: len(r) >= 3, what="'' reported")
        await asyncio.sleep(1)
        details = [e["detail"] for e in reported()]  # old code: none of them, the job silently unprotected
        assert len(details) == 3
        assert ["'FORCE'" in details[0], "'grace-ish'" in details[1], "=''" in details[2]] == [True] * 3
        # a real fault on the job: not rescheduled (as MindCluster reads the label), and the log says why
        await _put_device_data(kube_client, node, device_info_data(node, {"Ascend910-0": SEPARATE}))
        await eventually(
            lambda: asyncio.sleep(0, [e for e in logs if "opt-in label is unreadable" in str(e.get("event"))]),
            bool,
            what="the unprotected job named",
        )
        assert engine.decisions == []
    table = await _status(testbed, namespace)
    (line,) = [ln for ln in table.splitlines() if job.name in ln]
    assert "unreadable ''" in line
    one = await _status(testbed, namespace, job.name)
    assert "fault-scheduling: unreadable ''" in one
    assert "unreadable: label fault-scheduling='' is not force|grace|off" in one
