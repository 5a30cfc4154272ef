"""`status` reads through agent.kube.errors.kube_call: the client's ApiException comes out as the project's
KubeApiError (agent.kube.errors), and what `status` prints for a refused read is the apiserver's Status message as
before the translation."""

from __future__ import annotations

import argparse
import json

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from agent.kube.errors import KubeApiError, ResourceGone, kube_call
from agent.platform.kubeapi import PlatformError, describe_kube_error

FORBIDDEN = (
    'jobs.batch.volcano.sh is forbidden: User "alice" cannot list resource "jobs" in API group "batch.volcano.sh" '
    'in the namespace "train"'
)


def _refusal(status: int, reason: str, message: str | None) -> ApiException:
    e = ApiException(status=status, reason=reason)
    e.body = json.dumps({"kind": "Status", "message": message}) if message is not None else None
    return e


async def test_kube_call_translates_the_clients_exception_into_kube_api_error() -> None:
    refusal = _refusal(403, "Forbidden", FORBIDDEN)

    async def refused() -> None:
        raise refusal

    with pytest.raises(KubeApiError) as info:
        await kube_call(refused())
    assert (info.value.status, info.value.reason, info.value.server_message) == (403, "Forbidden", FORBIDDEN)
    assert info.value.retriable is False
    assert info.value.__cause__ is refusal


async def test_kube_call_gives_410_as_resource_gone_and_the_answer_through() -> None:
    async def gone() -> None:
        raise _refusal(410, "Gone", "too old resource version")

    async def answer() -> str:
        return "listed"

    with pytest.raises(ResourceGone):
        await kube_call(gone())
    assert await kube_call(answer()) == "listed"


async def test_kube_call_leaves_a_connection_error_as_it_is() -> None:
    """`status` reports an unreachable apiserver from aiohttp's and asyncio's own errors (connection_error)."""

    async def timeout() -> None:
        raise TimeoutError("read timed out")

    with pytest.raises(TimeoutError):
        await kube_call(timeout())


@pytest.mark.parametrize(
    ("message", "said"),
    [(FORBIDDEN, FORBIDDEN), (None, "403 Forbidden")],
    ids=["status-message", "no-status-body"],
)
def test_describe_kube_error_says_what_the_apiserver_said(message: str | None, said: str) -> None:
    from agent.kube.errors import from_api_exception as kube_error

    typed = kube_error(_refusal(403, "Forbidden", message))
    assert isinstance(typed, KubeApiError)
    described = describe_kube_error(typed, "list jobs.batch.volcano.sh")
    assert str(described) == f"cannot list jobs.batch.volcano.sh: the apiserver said (HTTP 403): {said}"


async def test_status_of_a_namespace_it_may_not_list_names_the_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """`fault-agent status -n train` refused by RBAC: the job records are skipped (no right to list the agent's
    ConfigMaps is not fatal) and the jobs' list fails with the apiserver's message, the text of
    describe_api_exception before the translation."""
    from rich.console import Console

    from agent.platform.status import _all

    async def no_records(self: object, namespace: str, **kw: object) -> object:
        raise _refusal(403, "Forbidden", "configmaps is forbidden")

    async def no_jobs(self: object, *a: object, **kw: object) -> object:
        raise _refusal(403, "Forbidden", FORBIDDEN)

    monkeypatch.setattr(k8s.CoreV1Api, "list_namespaced_config_map", no_records)
    monkeypatch.setattr(k8s.CustomObjectsApi, "list_namespaced_custom_object", no_jobs)
    args = argparse.Namespace(kind="vcjob", namespace="train", config=None, training=False)
    api = k8s.ApiClient()
    try:
        with pytest.raises(PlatformError) as info:
            await _all(api, args, Console(width=200))
    finally:
        await api.close()
    assert str(info.value) == (f"cannot list jobs.batch.volcano.sh: the apiserver said (HTTP 403): {FORBIDDEN}")
