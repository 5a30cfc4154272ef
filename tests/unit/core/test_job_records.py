"""The agent's job records (agent.core.records): the incident, ledger and claim of each job live in a ConfigMap of the
agent's own namespace, never on the job object (issue 35). Encoding, the state's index, the claim on the record
(create, or replace at the record's version; a conflict re-read), the one-time migration from an earlier version's
job annotations, and the deletion of the record of a job gone for good, on the engine's production path with a fake
writer port that plays the record's apiserver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

import pytest
from support import factories
from support.factories import SETTINGS, change, one_job_state
from support.factories import T0 as NOW
from support.fakes import FakeWriter, Leadership, record_change

from agent.actions import ActionResult, Outcome
from agent.core.cluster import JobKind, JobRef
from agent.core.fence import ACTOR_ANNOTATION
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Phase,
    decode_incident,
    decode_ledger,
    encode_ledger,
)
from agent.core.policy import RetryLedger
from agent.core.records import (
    JOB_KIND_LABEL,
    JOB_NAME_LABEL,
    JOB_NAMESPACE_LABEL,
    JOB_UID_LABEL,
    KEY_ACTOR,
    KEY_INCIDENT,
    KEY_LEDGER,
    RECORD_LABEL,
    JobStateRecord,
    from_configmap,
    from_legacy_annotations,
    record_body,
    record_data,
    record_name,
)
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.runtime.clock import SystemClock
from agent.sources.state import ClusterState

JOB_UID = "uid-job"


# ------------------------------------------------------------------------------------------------ the encoding


def test_a_record_is_named_from_the_job_uid_and_labelled_to_be_found() -> None:
    body = record_body("fault-agent", JOB_UID, JobKind.VOLCANO, "ns", "job", {KEY_LEDGER: "{}"})
    meta = body["metadata"]
    assert (meta["name"], meta["namespace"]) == (record_name(JOB_UID), "fault-agent") == ("fault-agent-job-uid-job",
                                                                                            "fault-agent")  # fmt: skip
    assert meta["labels"] == {
        RECORD_LABEL: "true",
        "app.kubernetes.io/managed-by": "fault-agent",
        JOB_UID_LABEL: JOB_UID,
        JOB_KIND_LABEL: "Job",
        JOB_NAMESPACE_LABEL: "ns",
        JOB_NAME_LABEL: "job",
    }
    assert body["data"] == {KEY_LEDGER: "{}"}


def test_a_name_too_long_for_a_label_is_only_an_annotation() -> None:
    name = "j" * 64
    body = record_body("fault-agent", JOB_UID, JobKind.ASCEND, "ns", name, {})
    assert JOB_NAME_LABEL not in body["metadata"]["labels"]
    assert body["metadata"]["annotations"][JOB_NAME_LABEL] == name
    assert body["metadata"]["labels"][JOB_KIND_LABEL] == "AscendJob"


def test_record_data_leaves_out_empty_values() -> None:
    assert record_data("", "L", "") == {KEY_LEDGER: "L"}
    assert record_data("I", "L", "a#1") == {KEY_INCIDENT: "I", KEY_LEDGER: "L", KEY_ACTOR: "a#1"}


def test_a_watched_record_reads_back_with_its_version() -> None:
    body = record_body("fault-agent", JOB_UID, JobKind.VOLCANO, "ns", "job", record_data("I", "L", "a#1"))
    meta = body["metadata"]
    labels = tuple(meta["labels"].items())
    cm = factories.configmap(
        meta["name"], dict(body["data"]), namespace="fault-agent", uid="cm-uid", resource_version="42", labels=labels
    )
    assert from_configmap(cm) == JobStateRecord(JOB_UID, "Job", "ns", "job", "42", "I", "L", "a#1")
    other = replace(cm, labels=((RECORD_LABEL, "true"),))
    assert from_configmap(other) is None  # no job UID: not a record


def test_an_earlier_versions_annotations_read_as_a_legacy_record() -> None:
    job = factories.job(annotations={INCIDENT_ANNOTATION: "I", LEDGER_ANNOTATION: "L", ACTOR_ANNOTATION: "a#1"})
    assert from_legacy_annotations(job) == JobStateRecord(JOB_UID, "Job", "ns", "job", "", "I", "L", "a#1", True)
    assert from_legacy_annotations(factories.job()) is None


# ------------------------------------------------------------------------------------------------ the state


def test_the_state_indexes_records_by_job_uid_and_notes_deleted_jobs() -> None:
    state = ClusterState()
    job = factories.job()
    state.apply(change("vcjobs", "ns/job", job))
    state.apply(record_change(job, {KEY_LEDGER: "L"}, resource_version="7"))
    record = state.job_record(JOB_UID)
    assert record is not None
    assert (record.resource_version, record.ledger) == ("7", "L")
    assert state.check_indexes() == []
    key = f"fault-agent/{record_name(JOB_UID)}"
    state.apply(Change(ChangeType.DELETED, "jobrecords", key, None, state.job_records[key], False, 0.0))
    assert state.job_record(JOB_UID) is None
    assert state.gone_jobs == {}
    state.apply(Change(ChangeType.DELETED, "vcjobs", "ns/job", None, job, False, 0.0))
    assert list(state.gone_jobs) == [JOB_UID]


# ------------------------------------------------------------------------------------------------ the engine


class RecordWriter(FakeWriter):
    """FakeWriter playing the record's apiserver: `records` (job UID -> (resourceVersion, data)); a claim at a
    stale version (or a create of one that exists) is 409. `jobs_there`: job UIDs a GET still finds."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, tuple[int, dict[str, str]]] = {}
        self.claims: list[tuple[str, str]] = []  # (job UID, resource_version sent)
        self.jobs_there: set[str] = set()

    async def claim_record(
        self, job: JobRef, data: Mapping[str, str], *, resource_version: str, incident: str
    ) -> ActionResult:
        self.claims.append((job.uid, resource_version))
        self.calls.append(("claim_record", str(job)))
        version, _ = self.records.get(job.uid, (0, {}))
        if resource_version != (str(version) if version else ""):
            return ActionResult("claim-record", str(job), Outcome.FAILED, "conflict", status=409)
        self.records[job.uid] = (version + 1, dict(data))
        return ActionResult("claim-record", str(job), Outcome.DONE)

    async def write_record(self, job: JobRef, data: Mapping[str, str], *, incident: str) -> ActionResult:
        self.calls.append(("write_record", str(job)))
        version, old = self.records.get(job.uid, (0, {}))
        self.records[job.uid] = (version + 1, {**old, **data})
        return ActionResult("write-record", str(job), Outcome.DONE)

    async def read_record(self, job: JobRef) -> JobStateRecord | None:
        if job.uid not in self.records:
            return None
        version, data = self.records[job.uid]
        incident, ledger, actor = data.get(KEY_INCIDENT, ""), data.get(KEY_LEDGER, ""), data.get(KEY_ACTOR, "")
        return JobStateRecord(job.uid, "Job", job.namespace, job.name, str(version), incident, ledger, actor)

    async def delete_record(self, job_uid: str, *, incident: str = "") -> ActionResult:
        self.calls.append(("delete_record", job_uid))
        self.records.pop(job_uid, None)
        return ActionResult("delete-record", job_uid, Outcome.DONE)

    async def job_meta(self, job: JobRef) -> tuple[str, dict[str, str]] | None:
        return ("1", {}) if job.uid in self.jobs_there else None

    def job_writes(self) -> list[str]:
        """Every call that would write on a job object: none of the port's methods does any more."""
        return [m for m in self.methods() if m in ("annotate_job", "claim_job", "patch_job")]

    def deliver(self, state: ClusterState, uid: str = JOB_UID) -> None:
        """The watch of the agent's records delivering the current record of `uid`."""
        job = factories.job()
        version, data = self.records[uid]
        state.apply(record_change(replace(job, uid=uid), data, resource_version=str(version)))


async def test_a_restart_claims_by_creating_the_record_and_writes_nothing_on_the_job() -> None:
    writer = RecordWriter()
    engine = RecoveryEngine(SETTINGS, one_job_state(), writer, actor=lambda: "a#1", clock=SystemClock())
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    assert writer.commands == 1
    assert writer.claims == [(JOB_UID, "")]  # no record in the cache: an atomic create
    _, data = writer.records[JOB_UID]
    assert data[KEY_ACTOR] == "a#1"
    assert decode_incident(data[KEY_INCIDENT]).phase is Phase.RESTARTING  # the step after the restart, persisted
    assert decode_ledger(data[KEY_LEDGER]).incidents == 1
    assert writer.job_writes() == []


async def test_a_claim_with_a_record_in_the_cache_replaces_it_at_its_version() -> None:
    writer = RecordWriter()
    writer.records[JOB_UID] = (5, {KEY_LEDGER: encode_ledger(RetryLedger())})
    state = one_job_state()
    writer.deliver(state)
    engine = RecoveryEngine(SETTINGS, state, writer, actor=lambda: "a#1", clock=SystemClock())
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    assert writer.claims == [(JOB_UID, "5")]
    assert writer.commands == 1


async def test_another_actors_record_is_adopted_when_this_replicas_restart_did_not_go_out() -> None:
    """An old leader's late claim created the record after this replica's cache was filled: the create is 409, the
    re-read shows the other actor, and (the Command not sent) this replica adopts the record's incident."""
    writer = RecordWriter()
    writer.records[JOB_UID] = (1, {KEY_ACTOR: "old#1", KEY_LEDGER: encode_ledger(RetryLedger())})

    async def refused(job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        return ActionResult("restart-command", str(job), Outcome.FAILED, "HTTP 503", True, 503)

    writer.restart_command = refused  # type: ignore[method-assign]
    engine = RecoveryEngine(SETTINGS, one_job_state(), writer, actor=lambda: "new#2", clock=SystemClock())
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    assert writer.claims == [(JOB_UID, "")]  # one try: another actor is not claimed over
    assert engine.store.incident(JOB_UID) is None  # dropped: the record's is adopted at the next tick
    assert writer.records[JOB_UID][1][KEY_ACTOR] == "old#1"


# ------------------------------------------------------------------------------------------------ migration


def _legacy_annotations(ledger: RetryLedger, actor: str) -> tuple[tuple[str, str], ...]:
    return ((LEDGER_ANNOTATION, encode_ledger(ledger)), (ACTOR_ANNOTATION, actor))


async def test_a_job_with_an_earlier_versions_annotations_is_migrated_once_into_its_record() -> None:
    """Read only: the job's annotations are adopted (ledger, actor as the claim's baseline) and written into the
    record, exactly as they were, by a create; nothing is written or removed on the job."""
    ledger = RetryLedger(restarts_used=1, incidents=1)
    writer = RecordWriter()
    state = one_job_state(annotations=_legacy_annotations(ledger, "old#1"))
    engine = RecoveryEngine(SETTINGS, state, writer, actor=lambda: "new#2", clock=SystemClock())
    await engine.tick(NOW)
    assert engine.store.ledger(JOB_UID) == ledger
    assert writer.claims == [(JOB_UID, "")]
    _, data = writer.records[JOB_UID]
    assert data == {KEY_LEDGER: encode_ledger(ledger), KEY_ACTOR: "old#1"}
    assert writer.job_writes() == []
    await engine.tick(NOW)
    assert writer.claims == [(JOB_UID, "")]  # once


async def test_once_a_record_exists_it_wins_over_the_jobs_old_annotations() -> None:
    writer = RecordWriter()
    state = one_job_state(annotations=_legacy_annotations(RetryLedger(incidents=1), "old#1"))
    newer = RetryLedger(restarts_used=2, incidents=2)
    writer.records[JOB_UID] = (3, {KEY_LEDGER: encode_ledger(newer), KEY_ACTOR: "mid#2"})
    writer.deliver(state)
    engine = RecoveryEngine(SETTINGS, state, writer, actor=lambda: "new#3", clock=SystemClock())
    await engine.tick(NOW)
    assert engine.store.ledger(JOB_UID) == newer
    assert engine.term.actor_baseline[JOB_UID] == "mid#2"
    assert writer.claims == []  # nothing to migrate


async def test_a_migrated_jobs_old_actor_is_no_other_actor_for_the_claim() -> None:
    """The earlier version's actor annotation is the claim's baseline: the claim creates the record over it."""
    writer = RecordWriter()
    state = one_job_state(annotations=_legacy_annotations(RetryLedger(), "old#1"))
    engine = RecoveryEngine(SETTINGS, state, writer, actor=lambda: "new#2", clock=SystemClock())
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    assert writer.commands == 1
    assert writer.records[JOB_UID][1][KEY_ACTOR] == "new#2"
    assert writer.job_writes() == []


# ------------------------------------------------------------------------------------------------ garbage


def _deleted(state: ClusterState, uid: str = JOB_UID) -> None:
    job = state.vcjobs["ns/job"]
    assert job.uid == uid
    state.apply(Change(ChangeType.DELETED, "vcjobs", "ns/job", None, job, False, 0.0))


async def test_the_record_of_a_deleted_job_is_deleted_on_the_deletion() -> None:
    writer = RecordWriter()
    writer.records[JOB_UID] = (1, {KEY_LEDGER: "{}"})
    state = one_job_state()
    writer.deliver(state)
    engine = RecoveryEngine(SETTINGS, state, writer, clock=SystemClock())
    await engine.tick(NOW)  # the term's sweep: the job is there
    assert "delete_record" not in writer.methods()
    _deleted(state)
    await engine.tick(NOW)
    assert ("delete_record", JOB_UID) in writer.calls
    assert JOB_UID not in writer.records


@pytest.mark.parametrize("why", ["still-there", "being-resubmitted", "standby"])
async def test_a_record_is_kept_while_its_job_is_not_gone_for_good(why: str) -> None:
    writer = RecordWriter()
    writer.records[JOB_UID] = (1, {KEY_LEDGER: "{}"})
    state = one_job_state()
    writer.deliver(state)
    leadership = Leadership(True)
    engine = RecoveryEngine(SETTINGS, state, writer, is_leader=leadership, clock=SystemClock())
    await engine.tick(NOW)
    _deleted(state)
    if why == "still-there":
        writer.jobs_there.add(JOB_UID)  # only left the watch (its opt-in label removed)
    elif why == "being-resubmitted":
        # its resubmission's act task is still running (past the delete, before the create); a resubmission cut
        # short after the delete is kept by its own record (RestartsInFlight.keep, rebuilt from those records each tick)
        engine.inflight.begin(JOB_UID)
    else:
        leadership.leads = False
    await engine.tick(NOW)
    assert "delete_record" not in writer.methods()
    assert JOB_UID in writer.records


async def test_a_new_term_sweeps_the_records_of_jobs_gone_meanwhile() -> None:
    """A record whose job is neither in the cache nor found by a GET (deleted while no replica led) goes at the
    start of a term; one whose job a GET finds (not watched here) stays."""
    writer = RecordWriter()
    state = one_job_state()
    for uid in ("uid-gone", "uid-elsewhere"):
        writer.records[uid] = (1, {KEY_LEDGER: "{}"})
        writer.deliver(state, uid)
    writer.jobs_there.add("uid-elsewhere")
    engine = RecoveryEngine(SETTINGS, state, writer, clock=SystemClock())
    await engine.tick(NOW)
    assert [c for c in writer.calls if c[0] == "delete_record"] == [("delete_record", "uid-gone")]
    await engine.tick(NOW)
    assert [c for c in writer.calls if c[0] == "delete_record"] == [("delete_record", "uid-gone")]  # once a term


def test_record_data_is_the_annotations_json() -> None:
    """The record keeps the encodings the annotations had: an earlier version's text reads the same."""
    text = encode_ledger(RetryLedger(restarts_used=1))
    assert json.loads(text)["restartsUsed"] == 1
    assert decode_ledger(record_data("", text, "")[KEY_LEDGER]).restarts_used == 1


def test_status_reads_the_record_before_an_earlier_versions_annotations() -> None:
    """`fault-agent status`: the record's ledger and incident; the job's old annotations only without a record."""
    from agent.platform.status import job_view

    old = encode_ledger(RetryLedger(business_retries_used=1))
    new = encode_ledger(RetryLedger(business_retries_used=2))
    job = {"metadata": {"name": "job", "namespace": "ns", "uid": JOB_UID, "annotations": {LEDGER_ANNOTATION: old}}}
    assert job_view(JobKind.VOLCANO, job).business_used == 1
    view = job_view(JobKind.VOLCANO, job, record={KEY_LEDGER: new, KEY_INCIDENT: "{not json"})
    assert view.business_used == 2
    assert view.problems
    assert "not valid JSON" in view.problems[0]
    assert ("record incident", "{not json") in view.raw_annotations
