"""Fencing (agent.core.fence, issue 16 item 4): a replica whose lease ran out sends no write, and the write before a
restart (the claim, on the job's record: agent.core.records) is a create or carries the record's resourceVersion,
so an old leader's late claim fails.

The writer here is the real ClusterWriter over fake generated-API objects that record each call, so what is
checked is the production path: the fence is asked right before a request would go out.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
import structlog
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support import factories
from support.factories import SETTINGS, one_job_state
from support.factories import T0 as NOW
from support.fakes import InstantWriter, ListSink, RawAnswer, Scripted, script

from agent.actions import ActionResult, ClusterWriter, Outcome, PodRef
from agent.actions.writes.base import ApiEdge as _WithDeadline
from agent.core.cluster import JobKind, JobRef
from agent.core.fence import NotLeader, may_claim
from agent.core.incidents import Phase
from agent.core.records import JOB_UID_LABEL, KEY_ACTOR, RECORD_LABEL, JobStateRecord
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.runtime.leader import LeaderElector
from agent.settings import LeaderSettings

JOB = JobRef(JobKind.VOLCANO, "ns", "job", "uid-job")
LEASE = LeaderSettings.model_validate({"lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 0.2})


@dataclass
class FakeApi:
    """Stands in for CoreV1Api / CustomObjectsApi: records (method, kwargs) and answers from `answers`."""

    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    answers: dict[str, Any] = field(default_factory=dict)
    before: Any = None  # called with the method name before answering (to close the fence mid-way)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            if self.before is not None:
                self.before(name)
            answer = self.answers.get(name, {})
            if isinstance(answer, Exception):
                raise answer
            if kwargs.get("_preload_content", True) is False:
                return RawAnswer(answer)  # the writer reads this answer raw (no model built)
            return answer

        return call

    def names(self) -> list[str]:
        return [n for n, _, _ in self.calls]


@pytest_asyncio.fixture
async def api() -> Any:
    client = k8s.ApiClient()
    yield client
    await client.close()


class Fence:
    def __init__(self, left: float) -> None:
        self.left = left

    def __call__(self) -> float:
        return self.left


def _writer(api: k8s.ApiClient, fence: Fence) -> tuple[ClusterWriter, FakeApi, FakeApi]:
    writer = ClusterWriter(api, fence=fence, attempts=1)
    core, custom = FakeApi(), FakeApi()
    writer.core = _WithDeadline(core, 10.0)
    writer.custom = _WithDeadline(custom, 10.0)
    return writer, core, custom


async def test_a_closed_fence_sends_no_write(api: k8s.ApiClient) -> None:
    writer, core, custom = _writer(api, Fence(0.0))
    with pytest.raises(NotLeader):
        await writer.write_record(JOB, {"a": "b"}, incident="i")
    with pytest.raises(NotLeader):
        await writer.claim_record(JOB, {"a": "b"}, resource_version="7", incident="i")
    with pytest.raises(NotLeader):
        await writer.restart_command(JOB, incident="i", reason="r", message="m")
    with pytest.raises(NotLeader):
        await writer.delete_pod(PodRef("ns", "p", "uid-p"), incident="i", grace_seconds=0)
    with pytest.raises(NotLeader):
        await writer.reset_rings_config("ns", "job", incident="i")
    assert custom.calls == []
    assert core.calls == []


async def test_a_closed_fence_stops_a_taint_after_its_read(api: k8s.ApiClient) -> None:
    writer, core, _ = _writer(api, Fence(-1.0))
    core.answers["read_node"] = k8s.V1Node(
        metadata=k8s.V1ObjectMeta(name="n1", resource_version="3"), spec=k8s.V1NodeSpec(taints=[])
    )
    with pytest.raises(NotLeader):
        await writer.taint_node("n1", key="k", value="v")
    assert core.names() == ["read_node"]  # the read is allowed, the patch is not sent


async def test_an_open_fence_cuts_the_request_deadline_to_the_lease_left(api: k8s.ApiClient) -> None:
    writer, core, custom = _writer(api, Fence(0.4))
    result = await writer.claim_record(JOB, {"a": "b"}, resource_version="7", incident="i")
    assert result.outcome is Outcome.DONE
    (name, _, kwargs), = core.calls  # fmt: skip
    assert name == "replace_namespaced_config_map"
    assert kwargs["_request_timeout"] == pytest.approx(0.4)
    assert custom.calls == []  # nothing written on the job
    # reads keep the full deadline
    await writer.job_meta(JOB)
    assert custom.calls[-1][2]["_request_timeout"] == 10.0


async def test_the_claim_carries_the_record_version_and_a_conflict_is_not_already_done(api: k8s.ApiClient) -> None:
    writer, core, custom = _writer(api, Fence(5.0))
    core.answers["replace_namespaced_config_map"] = ApiException(status=409, reason="Conflict")
    result = await writer.claim_record(JOB, {KEY_ACTOR: "a#1"}, resource_version="7", incident="i")
    assert (result.outcome, result.status) == (Outcome.FAILED, 409)
    _, args, _ = core.calls[0]
    name, namespace, body = args
    assert (name, namespace) == ("fault-agent-job-uid-job", "fault-agent")
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["data"] == {KEY_ACTOR: "a#1"}
    assert body["metadata"]["labels"][JOB_UID_LABEL] == "uid-job"
    assert body["metadata"]["labels"][RECORD_LABEL] == "true"
    assert custom.calls == []


@pytest.mark.parametrize("status", [409, 404])
async def test_a_claim_that_finds_the_record_changed_or_gone_is_a_conflict(api: k8s.ApiClient, status: int) -> None:
    """404 on the replace (the record deleted since it was read) is a conflict too: the engine reads it again."""
    writer, core, _ = _writer(api, Fence(5.0))
    core.answers["replace_namespaced_config_map"] = ApiException(status=status)
    result = await writer.claim_record(JOB, {KEY_ACTOR: "a#1"}, resource_version="7", incident="i")
    assert (result.outcome, result.status) == (Outcome.FAILED, 409)


async def test_a_claim_without_a_record_is_an_atomic_create(api: k8s.ApiClient) -> None:
    writer, core, _ = _writer(api, Fence(5.0))
    core.answers["create_namespaced_config_map"] = ApiException(status=409, reason="AlreadyExists")
    result = await writer.claim_record(JOB, {KEY_ACTOR: "a#1"}, resource_version="", incident="i")
    assert (result.outcome, result.status) == (Outcome.FAILED, 409)  # not already done: someone else's record
    (name, args, _), = core.calls  # fmt: skip
    assert name == "create_namespaced_config_map"
    assert args[0] == "fault-agent"
    assert "resourceVersion" not in args[1]["metadata"]


# ------------------------------------------------------------------------------------------------ the elector


async def test_leadership_is_judged_on_the_monotonic_clock_at_the_moment_of_asking(api: k8s.ApiClient) -> None:
    now = [100.0]
    elector = LeaderElector(api, LEASE, identity="a", monotonic=lambda: now[0])
    assert not elector.is_leader
    assert elector.lease_remaining() == 0.0
    elector._renewed(100.0)
    elector.leading.set()
    now[0] = 101.5
    assert elector.is_leader
    assert elector.lease_remaining() == pytest.approx(0.5)
    now[0] = 102.0  # renew deadline (2 s) since the renewal was sent: frozen or not, no longer leading
    assert not elector.is_leader
    assert elector.lease_remaining() <= 0


async def test_a_lease_round_is_not_cut_to_what_is_left_of_the_renew_deadline(api: k8s.ApiClient) -> None:
    """Right after an apiserver stall, a round started 1.9 s after the last renewal was given 0.1 s (renew deadline
    minus the time since), the slow apiserver could not answer in that, and leadership flapped."""
    elector = LeaderElector(api, LEASE, identity="a")
    elector.leading.set()
    elector._last_renew = time.monotonic() - 1.9

    async def slow_round() -> bool:
        await asyncio.sleep(0.3)  # a slow but working apiserver
        return True

    elector.try_acquire_or_renew = slow_round  # type: ignore[method-assign]
    assert await elector._bounded_round() is True


async def test_the_round_deadline_is_fixed(api: k8s.ApiClient) -> None:
    elector = LeaderElector(api, LEASE, identity="a")
    assert elector.round_timeout_s == 1.0  # max(retry 0.2, renew deadline 2 / 2)


# ------------------------------------------------------------------------------------------------ the engine


@pytest.mark.parametrize(
    ("current", "expected", "ok"),
    [
        pytest.param(None, {None}, True, id="unclaimed-job"),
        pytest.param("a#2", {None}, True, id="claimed-by-me-this-term"),
        pytest.param("old#1", {"old#1"}, True, id="previous-leader-known-at-adoption"),
        pytest.param("old#1", {None}, False, id="late-claim-by-an-old-leader"),
        pytest.param("a#1", {None}, False, id="my-own-previous-term-is-another-actor"),
    ],
)
def test_may_claim(current: str | None, expected: set[str | None], ok: bool) -> None:
    assert may_claim(current, expected, "a#2") is ok


async def test_the_fence_closing_between_the_claim_and_the_command_sends_no_command(api: k8s.ApiClient) -> None:
    """The leader's lease runs out while it is acting (a stall after its claim): the RestartJob Command is not
    sent, the task ends quietly, and no recovery.failed is published (the next leader resumes the incident)."""
    fence = Fence(5.0)
    writer, core, custom = _writer(api, fence)
    custom.answers["get_namespaced_custom_object"] = {"metadata": {"uid": "uid-job"}, "status": {"version": 0}}

    def stall_after_claim(name: str) -> None:
        if name == "create_namespaced_config_map":  # the claim: the job's record created
            fence.left = 0.0

    core.before = stall_after_claim
    sink = ListSink()
    engine = RecoveryEngine(SETTINGS, one_job_state(), writer, events=sink, clock=SystemClock())
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    assert "create_namespaced_custom_object" not in custom.names()
    assert "patch_namespaced_config_map" not in core.names()
    assert "recovery.failed" not in " ".join(sink.types())


def _conflict(
    api: k8s.ApiClient, actor: str | None, command: Outcome = Outcome.DONE
) -> tuple[InstantWriter, Scripted, Scripted]:
    """A writer whose claim answers 409 once; the job's record then reads back at version 8 with `actor` in it;
    the Command answers `command`. Returns the writer and the calls of its claims and of its Commands."""
    writer = InstantWriter(api)
    conflict = ActionResult("claim-record", "job", Outcome.FAILED, "conflict", status=409)
    claims = script(writer, "claim_record", answer=conflict, times=1)

    def read_back(job: JobRef) -> JobStateRecord:
        return JobStateRecord(job.uid, "Job", job.namespace, job.name, "8", actor=actor or "")

    script(writer, "read_record", does=read_back)
    return writer, claims, script(writer, "restart_command", answer=ActionResult("restart-command", "job", command))


def _versions(claims: Scripted) -> list[str]:
    """The resourceVersion each claim was sent at ("" for a create)."""
    return [kwargs["resource_version"] for _, kwargs in claims.calls]


async def test_a_conflict_without_another_actor_claims_again_at_the_new_version(api: k8s.ApiClient) -> None:
    writer, claims, commands = _conflict(api, actor=None)  # a record with no actor appeared meanwhile (a migration)
    engine = RecoveryEngine(SETTINGS, one_job_state(), writer, actor=lambda: "a#1", clock=SystemClock())
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    assert _versions(claims) == ["", "8"]  # a create first (no record in the cache), then a replace at its version
    assert len(commands.calls) == 1


async def test_an_old_leaders_late_claim_is_adopted_when_this_replicas_restart_was_not_sent(
    api: k8s.ApiClient,
) -> None:
    # another actor claimed the job after this term adopted it; the Command sent with the claim did not land
    writer, claims, _ = _conflict(api, actor="old#3", command=Outcome.FAILED)
    engine = RecoveryEngine(SETTINGS, one_job_state(), writer, actor=lambda: "a#1", clock=SystemClock())
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    assert _versions(claims) == [""]
    assert engine.store.incident("uid-job") is None  # dropped: the job's record is adopted at the tick
    assert "uid-job" not in engine.ctx.restored


async def test_an_old_leaders_late_claim_does_not_drop_this_replicas_sent_restart(api: k8s.ApiClient) -> None:
    """The claim goes out with the Command (one round trip): when the claim finds another actor but the Command
    was sent, this replica's incident is the one that restarted the job: it is kept and recorded as restarting
    (adopting the other's ``acting`` incident would resume it and could send a second Command)."""
    writer, claims, commands = _conflict(api, actor="old#3")
    engine = RecoveryEngine(SETTINGS, one_job_state(), writer, actor=lambda: "a#1", clock=SystemClock())
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    assert _versions(claims) == [""]
    assert len(commands.calls) == 1
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RESTARTING


async def test_a_second_claim_in_one_term_is_not_mistaken_for_another_actor(api: k8s.ApiClient) -> None:
    """The cache may not show this replica's own first claim yet when the job's next incident is claimed."""
    writer, _, _ = _conflict(api, actor="a#1")  # the conflict's re-read shows our own claim
    state = one_job_state()
    engine = RecoveryEngine(SETTINGS, state, writer, actor=lambda: "a#1", clock=SystemClock())
    job = state.job(JobKind.VOLCANO, "ns", "job")
    assert job is not None
    engine.check_term()
    engine.restore_all()
    assert await engine.claiming.claim(job, "first") is True  # 409, re-read shows our own actor: claimed again
    assert await engine.claiming.claim(job, "second") is True  # the cached record still has no actor: not another one


async def test_a_claim_refused_by_its_precondition_is_an_answer_not_a_failed_write(api: k8s.ApiClient) -> None:
    """Regression (found by a new-user trial): the claim's 409, which the engine answers by reading the record
    again and claiming once more, was logged as the warning ``write failed``."""
    writer, core, _ = _writer(api, Fence(10.0))
    core.answers["replace_namespaced_config_map"] = ApiException(status=409, reason="Conflict")
    with structlog.testing.capture_logs() as logs:
        result = await writer.claim_record(JOB, {"a": "b"}, resource_version="7", incident="i")
    assert (result.outcome, result.status, result.retriable) == (Outcome.FAILED, 409, False)
    assert [(e["event"], e["log_level"]) for e in logs] == [("write refused by its precondition", "info")]
