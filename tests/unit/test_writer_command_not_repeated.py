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
