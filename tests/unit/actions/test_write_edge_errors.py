"""One error vocabulary (issue 40): kubernetes_asyncio's ``ApiException`` (and its connection errors) is translated
once, by agent/kube/errors.py (``from_api_exception``, ``translated``), into the project's typed errors; the writer's
edge (agent/actions/writes/base.py), the leader election, the sources' checks, the sinks and the CLIs use that
mapping, and no other module of the agent names the client's exception."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from agent.actions.writes.base import ApiEdge
from agent.kube.errors import KubeApiError, KubeConnectionError, from_api_exception

AGENT = Path(__file__).resolve().parents[3] / "agent"
EDGE = AGENT / "kube" / "errors.py"
STILL_NAMING: set[str] = set()


def _names_api_exception(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "ApiException" for a in node.names):
            return True
        if isinstance(node, ast.Name | ast.Attribute) and "ApiException" in (
            getattr(node, "id", None),
            getattr(node, "attr", None),
        ):
            return True
    return False


def _modules() -> list[Path]:
    return sorted(AGENT.rglob("*.py"))


def test_only_the_edge_names_the_clients_exception() -> None:
    modules = _modules()
    assert EDGE in modules  # the scan reads the tree it means to
    assert len(modules) > 100
    naming = sorted(str(p.relative_to(AGENT)) for p in modules if _names_api_exception(p))
    assert [n for n in naming if n not in STILL_NAMING] == ["kube/errors.py"]


def test_a_refused_objects_causes_and_status_message_are_kept() -> None:
    refused = ApiException(status=422, reason="Unprocessable Entity")
    refused.body = (
        b'{"kind":"Status","message":"Job.batch.volcano.sh x is invalid",'
        b'"details":{"causes":[{"field":"spec.tasks","message":"Required value"},{"message":"no field"}]}}'
    )
    typed = from_api_exception(refused)
    assert isinstance(typed, KubeApiError)
    assert (typed.status, typed.reason, typed.retriable) == (422, "Unprocessable Entity", False)
    assert typed.server_message == "Job.batch.volcano.sh x is invalid"
    assert typed.causes == ("spec.tasks: Required value", "no field")
    assert str(typed) == f"HTTP 422: Unprocessable Entity {typed.server_message}"


class _Api:
    """Stands in for a generated API object: each call fails as the client's would."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.kwargs: dict[str, object] = {}

    async def read_namespaced_config_map(self, name: str, namespace: str, **kwargs: object) -> object:
        self.kwargs = kwargs
        raise self.error


async def test_the_edge_raises_the_typed_error_with_the_deadline_set() -> None:
    refused = ApiException(status=429, reason="Too Many Requests")
    refused.headers = {"Retry-After": "2"}
    api = _Api(refused)
    with pytest.raises(KubeApiError) as raised:
        await ApiEdge(api, 7.0).read_namespaced_config_map("cm", "ns")
    assert (raised.value.status, raised.value.retriable, raised.value.retry_after) == (429, True, 2.0)
    assert api.kwargs == {"_request_timeout": 7.0}
    with pytest.raises(KubeConnectionError) as lost:
        await ApiEdge(_Api(TimeoutError()), 7.0).read_namespaced_config_map("cm", "ns")
    assert lost.value.sent  # a deadline that expired: the request may have landed
