"""One error vocabulary above the write edge (issue 40): kubernetes_asyncio's ``ApiException`` is translated once, by
the writer's edge (agent/actions/writes/base.py), into the typed errors of agent.kube.errors; no other module of
the writer, the engine, the replay or the wiring names it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from agent.actions.writes.base import ApiEdge
from agent.kube.errors import KubeApiError, KubeConnectionError

AGENT = Path(__file__).resolve().parents[3] / "agent"
EDGE = AGENT / "actions" / "writes" / "base.py"
ABOVE_THE_EDGE = [AGENT / "actions", AGENT / "engine", AGENT / "replay", AGENT / "core", AGENT / "app.py"]


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
    out: list[Path] = []
    for root in ABOVE_THE_EDGE:
        out.extend([root] if root.is_file() else sorted(root.rglob("*.py")))
    return out


def test_only_the_edge_names_the_clients_exception() -> None:
    modules = _modules()
    assert EDGE in modules  # the scan reads the tree it means to
    assert len(modules) > 20
    naming = [str(p.relative_to(AGENT)) for p in modules if _names_api_exception(p)]
    assert naming == ["actions/writes/base.py"]


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
