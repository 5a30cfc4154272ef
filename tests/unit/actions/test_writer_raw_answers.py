"""The writer's raw answers: a pod list read for names and UIDs only, and an answer read without building models.

The real apiserver's answers are covered by tests/integration/test_actions.py; these are the shapes it should never
send, each refused with a specific error instead of a KeyError or a pod restarted twice.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from multidict import CIMultiDict, CIMultiDictProxy
from support import factories

from agent.actions.writes.base import answer as _answer
from agent.actions.writes.configmaps import ConfigMapData, configmap_data
from agent.actions.writes.pods import live_pods as _live_pods
from agent.kube.errors import KubeApiError, KubeConnectionError, StreamCorrupt
from agent.kube.errors import from_api_exception as kube_error


def _pod(name: str, uid: str, deleting: bool = False) -> dict[str, object]:
    deleted_at = "2026-01-01T00:00:00Z" if deleting else None
    labels = {"volcano.sh/job-name": "j"}
    return factories.pod_body(name, uid=uid, node="n", labels=labels, deletion_timestamp=deleted_at)


def test_live_pods_keeps_the_order_and_leaves_out_terminating_pods() -> None:
    items = [_pod("b", "u2"), _pod("a", "u1", deleting=True), _pod("c", "u3")]
    body = orjson.dumps({"kind": "PodList", "items": items})
    assert _live_pods(body, "pods of Job/ns/j") == [("b", "u2", ""), ("c", "u3", "")]


def test_a_pod_the_job_does_not_control_is_never_the_jobs_to_delete() -> None:
    """Issue 37 item 6: a pod carrying only the job's label (no ownerReference, or another controller's) is left
    alone; the admission policy's ``pods`` rule would refuse its delete anyway."""
    owned = _pod("a", "u1")
    owned["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "job-uid", "controller": True}]  # type: ignore[index]
    other = _pod("b", "u2")
    other["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "old-uid", "controller": True}]  # type: ignore[index]
    body = orjson.dumps({"kind": "PodList", "items": [owned, other, _pod("c", "u3")]})
    assert _live_pods(body, "pods of Job/ns/j", owner_uid="job-uid") == [("a", "u1", "")]
    assert len(_live_pods(body, "pods of Job/ns/j")) == 3  # no UID known: the label decides, as before


@pytest.mark.parametrize("items", [b"[]", b"null"], ids=["empty", "null"])
def test_an_empty_list_has_no_pods(items: bytes) -> None:
    """Go's encoding/json writes an empty list's nil slice as null: no pods, not a malformed answer."""
    assert _live_pods(b'{"kind":"PodList","metadata":{},"items":%s}' % items, "x") == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b"<html>502</html>", "answer is not JSON", id="not-json"),
        pytest.param(b"[]", "not a list of pods", id="not-an-object"),
        pytest.param(b'{"kind":"PodList"}', "not a list of pods", id="no-items"),
        pytest.param(b'{"items":{"a":1}}', "not a list of pods", id="items-not-a-list"),
        pytest.param(b'{"items":["pod"]}', "an item without metadata", id="item-not-an-object"),
        pytest.param(b'{"items":[{"spec":{}}]}', "an item without metadata", id="no-metadata"),
        pytest.param(b'{"items":[{"metadata":{"name":"a"}}]}', "without its name or UID", id="no-uid"),
        pytest.param(b'{"items":[{"metadata":{"uid":"u"}}]}', "without its name or UID", id="no-name"),
        pytest.param(b'{"items":[{"metadata":{"name":"a","uid":""}}]}', "without its name or UID", id="empty-uid"),
        pytest.param(b'{"items":[{"metadata":{"name":7,"uid":"u"}}]}', "without its name or UID", id="name-not-text"),
    ],
)
def test_a_malformed_list_is_refused_with_a_specific_error(body: bytes, error: str) -> None:
    """One bad item refuses the whole list: deleting only the pods that could be read would restart part of a
    gang job; the restart is retried instead."""
    with pytest.raises(StreamCorrupt, match=error) as refused:
        _live_pods(body, "pods of Job/ns/j")
    assert "pods of Job/ns/j" in str(refused.value)


class _Response:
    """What aiohttp hands back for ``_preload_content=False``: status, reason, headers, read(), release()."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None, *, broken: bool = False):
        self.status = status
        self.reason = {200: "OK", 403: "Forbidden", 429: "Too Many Requests"}.get(status, "")
        self.headers = CIMultiDictProxy(CIMultiDict(headers or {}))
        self._body = body
        self._broken = broken
        self.released = False

    async def read(self) -> bytes:
        if self._broken:
            raise ConnectionResetError("peer went away")
        return self._body

    def release(self) -> None:
        self.released = True


def test_a_2xx_answer_is_its_body_and_the_connection_is_released() -> None:
    resp = _Response(200, b'{"kind":"Pod"}')
    assert asyncio.run(_answer(resp)) == b'{"kind":"Pod"}'
    assert resp.released


@pytest.mark.parametrize("status", [403, 404, 409, 429, 500, 503])
def test_a_refusal_raises_the_typed_error_the_edge_raises_for_the_generated_client(status: int) -> None:
    """status, reason, the Status message and Retry-After as the edge translates kubernetes_asyncio's ApiException
    (agent.kube.errors.from_api_exception), so the writer's retry rules (404/409 done, 429/5xx retried with
    Retry-After) read both alike."""
    body = b'{"kind":"Status","message":"pods \\"p\\" is forbidden","code":%d}' % status
    resp = _Response(status, body, {"Retry-After": "3"})
    with pytest.raises(KubeApiError) as refused:
        asyncio.run(_answer(resp))
    assert refused.value.status == status
    assert refused.value.server_message == 'pods "p" is forbidden'
    assert refused.value.retry_after == 3.0
    assert resp.released


def test_the_edge_translates_the_generated_clients_exception_alike() -> None:
    error = ApiException(status=403, reason="Forbidden")
    error.body = b'{"kind":"Status","message":"pods \\"p\\" is forbidden","code":403}'
    error.headers = {"Retry-After": "3"}
    typed = kube_error(error)
    assert isinstance(typed, KubeApiError)
    assert (typed.status, typed.reason, typed.retry_after, typed.retriable) == (403, "Forbidden", 3.0, False)
    assert str(typed) == 'HTTP 403: Forbidden pods "p" is forbidden'
    assert kube_error(TimeoutError()).retriable


def test_a_body_that_cannot_be_read_still_releases_the_connection() -> None:
    resp = _Response(200, b"", broken=True)
    with pytest.raises(KubeConnectionError, match="ConnectionResetError"):
        asyncio.run(_answer(resp))
    assert resp.released


def test_a_configmap_answer_is_read_for_its_version_and_data_only() -> None:
    """Issue 39: the bookkeeping read is not built into a V1ConfigMap; a ConfigMap without data (Go's nil map,
    absent or null) has none."""
    body = orjson.dumps({"kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "42"}, "data": {"k": "v"}})
    assert configmap_data(body, "ConfigMap/ns/c") == ConfigMapData("42", {"k": "v"})
    for empty in (b'{"metadata":{"resourceVersion":"7"}}', b'{"metadata":{"resourceVersion":"7"},"data":null}'):
        assert configmap_data(empty, "ConfigMap/ns/c") == ConfigMapData("7", {})


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b"<html>502</html>", "answer is not JSON", id="not-json"),
        pytest.param(b"[]", "no metadata.resourceVersion", id="not-an-object"),
        pytest.param(b'{"data":{}}', "no metadata.resourceVersion", id="no-metadata"),
        pytest.param(b'{"metadata":{"resourceVersion":""}}', "no metadata.resourceVersion", id="empty-version"),
        pytest.param(b'{"metadata":{"resourceVersion":"1"},"data":[]}', "not a map of strings", id="data-a-list"),
        pytest.param(b'{"metadata":{"resourceVersion":"1"},"data":{"k":1}}', "not a map of strings", id="a-number"),
    ],
)
def test_a_malformed_configmap_answer_is_refused_with_a_specific_error(body: bytes, error: str) -> None:
    with pytest.raises(StreamCorrupt, match=error) as refused:
        configmap_data(body, "ConfigMap/ns/c")
    assert "ConfigMap/ns/c" in str(refused.value)
