"""A RestartJob Command create is not repeated once it may have reached the apiserver (soak, 2026-12-01: a
create timed out client-side right after a SIGSTOP cut the request's deadline, the apiserver had created it,
Volcano ran and deleted it, and the writer's retry created it again: two restarts for one fault)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from agent.actions import ClusterWriter, Outcome
from agent.core.cluster import JobKind, JobRef
from agent.core.fence import NotLeader

JOB = JobRef(JobKind.VOLCANO, "ns", "train", "uid-train")


class FirstCallFails:
    """Stands in for the CustomObjectsApi: the first create raises `error`, later ones succeed."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.creates = 0

    async def create_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.creates += 1
        if self.creates == 1:
            raise self.error
        return {"metadata": {"name": "created"}}


def _api_error(status: int) -> ApiException:
    return ApiException(status=status, reason="test")


@pytest.mark.parametrize(
    ("error", "creates"),
    [
        pytest.param(TimeoutError(), 1, id="timeout-after-sending"),
        pytest.param(aiohttp.ServerDisconnectedError(), 1, id="answer-broken"),
        pytest.param(_api_error(504), 1, id="apiserver-504"),
        pytest.param(_api_error(500), 1, id="apiserver-500"),
        pytest.param(aiohttp.ClientConnectorError(None, OSError(111, "refused")), 2, id="never-connected"),  # type: ignore[arg-type]
        pytest.param(_api_error(429), 2, id="rejected-429"),
    ],
)
async def test_a_command_create_is_repeated_only_when_the_apiserver_did_not_take_it(
    error: BaseException, creates: int
) -> None:
    api = k8s.ApiClient()
    writer = ClusterWriter(api, backoff_s=0.001)
    fake = FirstCallFails(error)
    writer.custom = fake
    try:
        result = await writer.restart_command(JOB, incident="train-1", reason="FaultAgentRestart", message="m")
    finally:
        await api.close()
    assert fake.creates == creates
    assert result.outcome is Outcome.DONE
    if creates == 1:
        assert "unconfirmed" in result.detail


class PatchTimesOut:
    """Stands in for the CoreV1Api: every ConfigMap patch (a write of the job's record) times out (after it may
    have reached the apiserver)."""

    def __init__(self) -> None:
        self.patches = 0

    async def patch_namespaced_config_map(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.patches += 1
        raise TimeoutError()


async def test_a_write_whose_retry_the_fence_refuses_may_have_landed() -> None:
    """Soak seed 1850407698: the leader persisted an incident's end, froze (SIGSTOP) with the request in flight,
    woke without the lease; the timed-out attempt had landed, the retry was refused (NotLeader), and the engine,
    told "not sent", published no recovery.succeeded, while the successor found the incident already ended: the
    event was lost. A refused retry after an attempt that may have landed is DONE, unconfirmed."""
    lease_left = [5.0]
    api = k8s.ApiClient()
    writer = ClusterWriter(api, backoff_s=0.001, fence=lambda: lease_left[0])
    fake = PatchTimesOut()

    async def patch(*args: Any, **kwargs: Any) -> dict[str, Any]:
        lease_left[0] = 0.0  # the lease runs out while the first attempt is in flight
        return await fake.patch_namespaced_config_map(*args, **kwargs)

    writer.core = type("Core", (), {"patch_namespaced_config_map": staticmethod(patch)})()
    try:
        result = await writer.write_record(JOB, {"incident": "{}"}, incident="train-1")
    finally:
        await api.close()
    assert fake.patches == 1
    assert result.outcome is Outcome.DONE
    assert "unconfirmed" in result.detail
    assert "not the leader" in result.detail


async def test_a_write_the_fence_refuses_first_is_not_sent() -> None:
    api = k8s.ApiClient()
    writer = ClusterWriter(api, fence=lambda: 0.0)
    fake = PatchTimesOut()
    writer.core = fake
    try:
        with pytest.raises(NotLeader):
            await writer.write_record(JOB, {"incident": "{}"}, incident="train-1")
    finally:
        await api.close()
    assert fake.patches == 0
