"""A resubmission is recorded before its delete, so a job is never lost between the delete and the create.

On the testbed's real apiserver: a writer whose lease ends right after the delete (the create raises NotLeader)
leaves the record (ConfigMap ``fault-agent-resubmit-<old uid>`` in the agent's namespace); another writer, or a
new leader, creates the job from it with its spec, the incident following the new UID; a name that holds an
unrelated object is never touched and the record kept.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from actions_support import job_record, make_job
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import eventually
from test_recovery import _settings, running_agent

from agent.actions import ClusterWriter, Outcome
from agent.core.cluster import JobKind, JobRef
from agent.core.fence import NotLeader
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    RESUBMIT_COUNT_ANNOTATION,
    RESUBMITTED_FROM_ANNOTATION,
    Incident,
    Phase,
    decode_incident,
    encode_incident,
    encode_ledger,
    make_incident_id,
)
from agent.core.policy import RetryLedger
from agent.core.records import KEY_INCIDENT

pytestmark = pytest.mark.integration
VC = ("batch.volcano.sh", "v1alpha1", "jobs")
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
LABEL = "fault-agent.io/resubmission=true"


async def _get(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = await k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            *VC[:2], namespace, VC[2], name
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return obj


async def _records(api: k8s.ApiClient, namespace: str) -> dict[str, dict[str, str]]:
    listed = await k8s.CoreV1Api(api).list_namespaced_config_map(namespace, label_selector=LABEL)
    return {cm.metadata.name: dict(cm.data or {}) for cm in listed.items}


def _closes_after(writes: int) -> Any:
    """A fence open for the first `writes` writes, closed from then on (the lease lost between two writes)."""
    sent = [0]

    def fence() -> float:
        sent[0] += 1
        return 10.0 if sent[0] <= writes else 0.0

    return fence


async def _failed_job(api: k8s.ApiClient, namespace: str, name: str) -> JobRef:
    job = await make_job(api, namespace, name, JobKind.VOLCANO, labels={"fault-scheduling": "force", "team": "llm"})
    await k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *VC[:2], namespace, VC[2], name, {"status": {"state": {"phase": "Failed"}}}, **MERGE
    )
    return job


async def test_a_writer_cut_short_after_the_delete_leaves_a_record_another_writer_finishes(
    kube_client: k8s.ApiClient, namespace: str
) -> None:
    old = await _failed_job(kube_client, namespace, "rs")
    before = await _get(kube_client, namespace, "rs")
    assert before is not None
    # the record and the delete go out, then the lease is gone: the create raises NotLeader
    cut = ClusterWriter(kube_client, attempts=1, fence=_closes_after(2), state_namespace=namespace)
    with pytest.raises(NotLeader):
        await cut.resubmit_job(old, incident="rs-i1", count=1, poll_s=0.05)
    await eventually(lambda: _get(kube_client, namespace, "rs"), lambda o: o is None, what="the old job deleted")
    records = await _records(kube_client, namespace)
    assert list(records) == [f"fault-agent-resubmit-{old.uid}"]
    stored = json.loads(records[f"fault-agent-resubmit-{old.uid}"]["body"])
    assert stored["spec"] == before["spec"]  # the spec is not lost with the job

    writer = ClusterWriter(kube_client, state_namespace=namespace)
    pending, errors = await writer.pending_resubmissions()
    assert errors == []
    assert [(p.from_uid, p.incident, p.count, p.name) for p in pending] == [(old.uid, "rs-i1", 1, "rs")]
    leftover, result, annotations = await writer.finish_resubmission(pending[0])
    assert (leftover.value, result.outcome) == ("create", Outcome.DONE), result
    made = await _get(kube_client, namespace, "rs")
    assert made is not None
    assert made["metadata"]["uid"] == result.uid != old.uid
    assert made["spec"] == before["spec"]
    assert made["metadata"]["labels"] == before["metadata"]["labels"]
    assert annotations[RESUBMITTED_FROM_ANNOTATION] == old.uid
    assert annotations[RESUBMIT_COUNT_ANNOTATION] == "1"
    # done: a second pass finds the job made, deleting the record is all that is left
    leftover, again, _ = await writer.finish_resubmission(pending[0])
    assert (leftover.value, again.outcome, again.uid) == ("finished", Outcome.ALREADY_DONE, result.uid)
    assert (await writer.forget_resubmission(old.uid, incident="rs-i1")).outcome is Outcome.DONE
    assert await _records(kube_client, namespace) == {}


async def test_a_completed_resubmission_leaves_no_record(kube_client: k8s.ApiClient, namespace: str) -> None:
    old = await _failed_job(kube_client, namespace, "ok")
    writer = ClusterWriter(kube_client, state_namespace=namespace)
    result = await writer.resubmit_job(old, incident="ok-i1", count=1, poll_s=0.05)
    assert result.outcome is Outcome.DONE, result
    assert await _records(kube_client, namespace) == {}


async def test_a_name_holding_an_unrelated_object_is_never_touched_and_the_record_is_kept(
    kube_client: k8s.ApiClient, namespace: str
) -> None:
    old = await _failed_job(kube_client, namespace, "cf")
    cut = ClusterWriter(kube_client, attempts=1, fence=_closes_after(2), state_namespace=namespace)
    with pytest.raises(NotLeader):
        await cut.resubmit_job(old, incident="cf-i1", count=1, poll_s=0.05)
    await eventually(lambda: _get(kube_client, namespace, "cf"), lambda o: o is None, what="the old job deleted")
    someone = await make_job(kube_client, namespace, "cf", JobKind.VOLCANO)  # a person's job of the same name
    writer = ClusterWriter(kube_client, state_namespace=namespace)
    pending, _ = await writer.pending_resubmissions()
    leftover, result, _ = await writer.finish_resubmission(pending[0])
    assert (leftover.value, result.outcome) == ("conflict", Outcome.FAILED)
    assert f"UID {someone.uid}" in result.detail
    still = await _get(kube_client, namespace, "cf")
    assert still is not None
    assert still["metadata"]["uid"] == someone.uid
    assert list(await _records(kube_client, namespace)) == [f"fault-agent-resubmit-{old.uid}"]


def _actions(engine: Any, action: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in engine.ctx.metrics.registry.collect():
        for s in family.samples:
            if s.name == "fault_agent_actions_total" and s.labels.get("action") == action and s.value:
                out[s.labels["result"]] = s.value
    return out


async def test_a_new_leader_creates_the_job_from_a_record_left_and_the_incident_follows_it(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    """The previous leader wrote the record and deleted the job, then died: the record is written here as it left
    it (the format is part of the contract: a successor of another version must read it)."""
    was = datetime.now(UTC) - timedelta(seconds=30)  # relative to now: the agent's own clock judges the deadline
    job = await make_job(kube_client, namespace, "lost", JobKind.VOLCANO, labels={"fault-scheduling": "force"})
    before = await _get(kube_client, namespace, "lost")
    assert before is not None
    incident = Incident(
        id=make_incident_id("lost", job.uid, "0", 1), job_uid=job.uid, kind="vcjob", namespace=namespace,
        name="lost", generation="0", phase=Phase.DETECTED, first_fault_at=was, steps=((Phase.DETECTED, was),),
    ).move(Phase.ACTING, was, action="resubmit", mode="force", reason="job failed on its hardware")  # fmt: skip
    body = {
        "apiVersion": before["apiVersion"],
        "kind": before["kind"],
        "metadata": {
            "name": "lost",
            "namespace": namespace,
            "labels": before["metadata"]["labels"],
            "annotations": {RESUBMITTED_FROM_ANNOTATION: job.uid, RESUBMIT_COUNT_ANNOTATION: "1"},
        },
        "spec": before["spec"],
    }
    record = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(
            name=f"fault-agent-resubmit-{job.uid}", labels={"fault-agent.io/resubmission": "true"}
        ),
        data={
            "body": json.dumps(body),
            "from-uid": job.uid,
            "incident": incident.id,
            "count": "1",
            "kind": "vcjob",
            "namespace": namespace,
            "name": "lost",
            "incident-state": encode_incident(incident),
            "ledger": encode_ledger(RetryLedger(resubmits_used=1, incidents=1)),
        },
    )
    await k8s.CoreV1Api(kube_client).create_namespaced_config_map(namespace, record)
    await k8s.CustomObjectsApi(kube_client).delete_namespaced_custom_object(*VC[:2], namespace, VC[2], "lost")
    await eventually(lambda: _get(kube_client, namespace, "lost"), lambda o: o is None, what="the old job deleted")

    settings = _settings(testbed, namespace, resubmit_limit=1)  # leader.namespace = the test's namespace
    async with running_agent(settings, "agent-next") as (engine, _):

        async def made_with_record() -> tuple[dict[str, Any], dict[str, str]] | None:
            obj = await _get(kube_client, namespace, "lost")
            if obj is None:
                return None
            ref = JobRef(JobKind.VOLCANO, namespace, "lost", obj["metadata"]["uid"])
            return obj, await job_record(kube_client, namespace, ref)

        made, stored = await eventually(
            made_with_record,
            lambda m: m is not None and KEY_INCIDENT in m[1],
            what="the job created from the record, its incident in its job record",
            timeout_s=30,
        )
        assert made["metadata"]["uid"] != job.uid
        assert made["spec"] == before["spec"]
        assert made["metadata"]["annotations"][RESUBMITTED_FROM_ANNOTATION] == job.uid
        moved = decode_incident(stored[KEY_INCIDENT])
        assert INCIDENT_ANNOTATION not in made["metadata"]["annotations"]  # nothing of it on the job
        assert (moved.id, moved.job_uid, moved.phase, moved.action) == (
            incident.id, made["metadata"]["uid"], Phase.RESTARTING, "resubmit",
        )  # fmt: skip
        await eventually(lambda: _records(kube_client, namespace), lambda r: r == {}, what="the record deleted")
        await eventually(  # counted once the record's deletion is answered, which the apiserver's state can precede
            lambda: _actions(engine, "resubmit-recover"),
            lambda a: a == {"done": 1.0},
            what="the resubmission from the record counted as done",
        )
        await asyncio.sleep(1.5)  # more ticks: the incident is not abandoned, nothing else is created
        assert (await _get(kube_client, namespace, "lost") or {}).get("metadata", {}).get("uid") == made["metadata"][
            "uid"
        ]
        assert engine.store.incident(made["metadata"]["uid"]).phase is Phase.RESTARTING


async def test_a_job_too_large_to_record_is_not_deleted(kube_client: k8s.ApiClient, namespace: str) -> None:
    old = await make_job(kube_client, namespace, "big", JobKind.VOLCANO)
    # the patch stays under 1 MiB (the client's own limit on a raw body); the job's record, with its metadata and
    # lineage, goes over the ConfigMap's 1 MiB (etcd takes the job itself: its limit is 1.5 MiB)
    blob = "x" * (1024 * 1024 - 100)
    await k8s.CustomObjectsApi(kube_client).patch_namespaced_custom_object(
        *VC[:2], namespace, VC[2], "big", {"spec": {"plugins": {"blob": [blob]}}}, **MERGE
    )
    writer = ClusterWriter(kube_client, state_namespace=namespace)
    result = await writer.resubmit_job(old, incident="big-i1", count=1, poll_s=0.05)
    assert (result.outcome, result.retriable, result.kept) == (Outcome.FAILED, False, "")
    assert "over the 1048576-byte ConfigMap limit; the job is not deleted" in result.detail
    still = await _get(kube_client, namespace, "big")
    assert still is not None
    assert still["metadata"]["uid"] == old.uid
    assert await _records(kube_client, namespace) == {}
