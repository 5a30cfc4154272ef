"""A restart whose list of the job's pods is refused fails its incident with the apiserver's answer in the detail
(status and Status message), not with the exception's empty repr ("ApiException()"), so the incident record, the
``recovery.failed`` event and the log say why."""

from __future__ import annotations

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from support import factories
from support.factories import T0 as NOW
from support.factories import one_job_state
from support.fakes import InstantWriter, ListSink, script

from agent.actions import ActionResult, Outcome
from agent.core.clock import FixedClock
from agent.core.incidents import Phase
from agent.engine.recovery import RecoveryEngine
from agent.kube.errors import from_api_exception as kube_error
from agent.settings import Settings
from agent.sinks import events as ev

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "delete-pods"}})
FORBIDDEN = b'{"kind":"Status","message":"pods is forbidden: User \\"fault-agent\\" cannot list resource \\"pods\\""}'


def _list_refused(api: k8s.ApiClient) -> InstantWriter:
    """The claim lands; the list of the job's pods is refused as the writer's edge raises it
    (agent.actions.writes.base); the cached pods' deletions, sent with the list, land."""
    writer = InstantWriter(api)
    error = ApiException(status=403, reason="Forbidden")
    error.body = FORBIDDEN
    script(writer, "list_job_pods", raises=lambda: kube_error(error))
    script(writer, "delete_pods", answer=ActionResult("delete-pods", "job", Outcome.DONE))
    return writer


async def test_a_refused_pod_list_fails_the_incident_with_the_apiservers_answer() -> None:
    api = k8s.ApiClient()
    try:
        clock = FixedClock(NOW)
        sink = ListSink()
        engine = RecoveryEngine(SETTINGS, one_job_state(), _list_refused(api), events=sink, clock=clock)
        await engine.handle_fault(factories.fault(), NOW)
        await engine.idle()
        incident = engine.store.incident("uid-job")
        assert incident is not None
        assert incident.phase is Phase.FAILED
        assert incident.detail.startswith("restart failed: HTTP 403: Forbidden ")
        assert 'cannot list resource "pods"' in incident.detail
        failed = [ev.as_json(e) for e in sink.events if ev.as_json(e)["type"] == ev.RECOVERY_FAILED]
        assert len(failed) == 1
        assert "HTTP 403" in failed[0]["data"]["detail"]
    finally:
        await api.close()
