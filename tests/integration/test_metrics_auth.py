"""``/metrics`` behind Kubernetes authentication (issue 37, 10; ``server.metrics_auth: kubernetes``): the agent's
HTTP server with :class:`agent.kube.metrics_auth.MetricsAuthorizer` asking the testbed's real apiserver
(TokenReview, SubjectAccessReview). Tokens of two ServiceAccounts from the TokenRequest API: one bound to
deploy/monitoring/metrics-reader.yaml's ClusterRole (200), one bound to nothing (403); no token or a forged one: 401.
``/healthz`` and ``/readyz`` answer without a token (the kubelet's probes)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client as k8s
from prometheus_client import CollectorRegistry, Counter

from agent.kube.metrics_auth import MetricsAuthorizer
from agent.runtime.server import HealthServer
from agent.settings import ServerSettings
from testbed.cluster import Testbed

pytestmark = pytest.mark.integration

READER = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "metrics-reader.yaml"


@pytest.fixture
async def tokens(kube_client: k8s.ApiClient, namespace: str) -> AsyncIterator[dict[str, str]]:
    """{"reader": token, "stranger": token}: ServiceAccounts in the test's namespace, the reader bound to a copy
    of deploy/monitoring/metrics-reader.yaml's ClusterRole."""
    core, rbac = k8s.CoreV1Api(kube_client), k8s.RbacAuthorizationV1Api(kube_client)
    role: dict[str, Any] = yaml.safe_load(READER.read_text())
    name = f"fault-agent-metrics-reader-{uuid.uuid4().hex[:6]}"
    await rbac.create_cluster_role({**role, "metadata": {"name": name}})
    await rbac.create_cluster_role_binding(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        }
    )
    out: dict[str, str] = {}
    try:
        for sa in ("reader", "stranger"):
            await core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
            tr = await core.create_namespaced_service_account_token(
                sa, namespace, k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=[]))
            )
            out[sa] = str(tr.status.token)
        yield out
    finally:
        with contextlib.suppress(Exception):
            await rbac.delete_cluster_role_binding(name)
        with contextlib.suppress(Exception):
            await rbac.delete_cluster_role(name)


async def test_metrics_need_a_token_allowed_to_get_metrics_and_probes_need_none(
    testbed: Testbed, kube_client: k8s.ApiClient, tokens: dict[str, str]
) -> None:
    registry = CollectorRegistry()
    Counter("fault_agent_probe_total", "a metric to find", registry=registry).inc()
    authorizer = MetricsAuthorizer(kube_client, timeout_s=10)
    server = HealthServer(
        ServerSettings(bind_address="127.0.0.1", port=0), registry, readiness={"x": lambda: True},
        metrics_auth=authorizer,
    )  # fmt: skip
    await server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as http:

            async def get(path: str, token: str | None = None) -> tuple[int, str]:
                headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
                async with http.get(base + path, headers=headers) as r:
                    return r.status, await r.text()

            assert (await get("/metrics"))[0] == 401
            assert (await get("/metrics", "not-a-token"))[0] == 401
            status, text = await get("/metrics", tokens["stranger"])
            assert status == 403
            assert "may not get /metrics" in text
            status, text = await get("/metrics", tokens["reader"])
            assert status == 200, text
            assert "fault_agent_probe_total 1.0" in text
            reviews = authorizer.reviews
            assert (await get("/metrics", tokens["reader"]))[0] == 200
            assert authorizer.reviews == reviews  # the answer is reused, not asked again
            assert (await get("/healthz"))[0] == 200
            assert (await get("/readyz"))[0] == 200
    finally:
        await server.stop()
