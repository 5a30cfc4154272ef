"""The leader election's requests fail only as "not renewed" (issue 40: the client's errors translated at the edge,
agent.kube.errors.translated): a refused request, and a connection that broke in any way the client reports it
(aiohttp's ServerDisconnectedError is no OSError; the create of a missing Lease has its own connection), never
escape a round; a bug still does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from structlog.testing import capture_logs

from agent.runtime.leader import LeaderElector
from agent.settings import LeaderSettings

LEASE = LeaderSettings.model_validate({"lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 0.2})


class Coordination:
    """Stands in for CoordinationV1Api: each call raises what `fail` names for it."""

    def __init__(self, **fail: BaseException) -> None:
        self.fail = fail
        self.calls: list[str] = []

    async def _call(self, name: str) -> Any:
        self.calls.append(name)
        raise self.fail[name]

    async def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Any:
        return await self._call("read")

    async def create_namespaced_lease(self, namespace: str, body: Any, **_: Any) -> Any:
        return await self._call("create")


@pytest_asyncio.fixture
async def api() -> AsyncIterator[k8s.ApiClient]:
    client = k8s.ApiClient()
    yield client
    await client.close()


def _elector(api: k8s.ApiClient, coordination: Coordination) -> LeaderElector:
    elector = LeaderElector(api, LEASE, identity="a")
    elector.coordination = coordination  # type: ignore[assignment]
    return elector


@pytest.mark.parametrize(
    ("coordination", "event"),
    [
        pytest.param(Coordination(read=aiohttp.ServerDisconnectedError()), "lease read failed", id="read-lost"),
        pytest.param(Coordination(read=ApiException(status=500)), "lease read failed", id="read-5xx"),
        pytest.param(
            Coordination(read=ApiException(status=404), create=aiohttp.ServerDisconnectedError()),
            "lease create failed", id="create-lost",
        ),
        pytest.param(
            Coordination(read=ApiException(status=404), create=TimeoutError()), "lease create failed",
            id="create-timed-out",
        ),
    ],
)  # fmt: skip
async def test_a_failed_lease_request_is_a_round_not_renewed(
    api: k8s.ApiClient, coordination: Coordination, event: str
) -> None:
    elector = _elector(api, coordination)
    with capture_logs() as logs:
        assert await elector.try_acquire_or_renew() is False
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [event]
    assert not elector.leading.is_set()


async def test_a_bug_in_a_round_is_not_taken_for_a_failed_request(api: k8s.ApiClient) -> None:
    elector = _elector(api, Coordination(read=KeyError("spec")))
    with pytest.raises(KeyError):
        await elector.try_acquire_or_renew()
