"""ClusterWriter.pods_remaining over a stand-in for the generated CoreV1Api: the follow-ups of a large job's
restart read its pods concurrently (a bounded number at once), not one round trip after another, and an answer
other than 200/404 is raised. The apiserver's own answers (404, a replaced pod's new UID) are covered against the
testbed in tests/integration/test_actions.py."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from agent.actions import ClusterWriter, PodRef
from agent.actions.writer import POD_READS_IN_FLIGHT
from agent.kube.errors import KubeApiError


class _Response:
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.reason = {200: "OK", 403: "Forbidden", 404: "Not Found"}.get(status, "")
        self.headers: dict[str, str] = {}
        self._body = body
        self.released = False

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        self.released = True


class _Core:
    """Answers read_namespaced_pod from `pods` (name → (status, uid)), counting the reads in flight. Without
    ``_preload_content=False`` it answers as the generated client does (a V1Pod, ApiException on an error)."""

    def __init__(self, pods: dict[str, tuple[int, str]]) -> None:
        self.pods = pods
        self.in_flight = 0
        self.most_in_flight = 0
        self.responses: list[_Response] = []

    async def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        for _ in range(3):  # the round trip: other reads may start meanwhile
            await asyncio.sleep(0)
        self.in_flight -= 1
        status, uid = self.pods.get(name, (404, ""))
        if kwargs.get("_preload_content", True):
            if status != 200:
                raise ApiException(status=status)
            return k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, uid=uid))
        body = orjson.dumps({"kind": "Pod", "metadata": {"name": name, "uid": uid}}) if status == 200 else b"{}"
        response = _Response(status, body)
        self.responses.append(response)
        return response


async def _remaining(core: _Core, refs: list[PodRef]) -> list[PodRef]:
    api = k8s.ApiClient()
    try:
        writer = ClusterWriter(api)
        writer.core = core
        return await writer.pods_remaining(refs)
    finally:
        await api.close()


async def test_a_large_jobs_pods_are_read_concurrently_and_bounded() -> None:
    count = POD_READS_IN_FLIGHT * 3
    refs = [PodRef("ns", f"job-{i}", f"uid-{i}") for i in range(count)]
    pods = {r.name: (200, r.uid) for r in refs}
    del pods["job-5"]  # gone
    pods["job-7"] = (200, "uid-7-new")  # replaced: same name, new UID
    core = _Core(pods)
    left = await _remaining(core, refs)
    assert left == [r for r in refs if r.name not in ("job-5", "job-7")]
    assert core.most_in_flight == POD_READS_IN_FLIGHT  # concurrent, never more than the bound
    assert all(r.released for r in core.responses)  # every connection handed back


async def test_a_read_answered_other_than_200_or_404_is_raised() -> None:
    refs = [PodRef("ns", f"job-{i}", f"uid-{i}") for i in range(3)]
    core = _Core({"job-0": (200, "uid-0"), "job-1": (403, ""), "job-2": (200, "uid-2")})
    with pytest.raises(KubeApiError) as raised:
        await _remaining(core, refs)
    assert raised.value.status == 403
