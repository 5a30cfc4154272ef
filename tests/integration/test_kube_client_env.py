"""The agent's API client reads the proxy environment once, not on every request (issue 19: per-request
``*_PROXY``/``~/.netrc`` lookups were ~5% of the agent's CPU in a restart burst), and still honours a proxy the
environment names for the apiserver."""

from __future__ import annotations

import pytest
from aiohttp import helpers
from kubernetes_asyncio import client

from agent.kube.client import new_api_client
from testbed.cluster import Testbed

pytestmark = pytest.mark.integration

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY")


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


async def test_requests_make_no_environment_lookups(testbed: Testbed, no_proxy_env: pytest.MonkeyPatch) -> None:
    lookups: list[str] = []
    real = helpers.netrc_from_env

    def counting() -> object:
        lookups.append("netrc")
        return real()

    no_proxy_env.setattr(helpers, "netrc_from_env", counting)
    api = await new_api_client(str(testbed.kubeconfig))
    try:
        core = client.CoreV1Api(api)
        for _ in range(5):
            listed = await core.list_namespace()
            assert any(ns.metadata.name == "default" for ns in listed.items)
    finally:
        await api.close()
    assert lookups == [], f"{len(lookups)} netrc lookups for 5 requests"


async def test_a_proxy_in_the_environment_is_still_used(testbed: Testbed, no_proxy_env: pytest.MonkeyPatch) -> None:
    # a proxy nobody listens on: a request that honours it fails to connect, one that ignores it succeeds
    no_proxy_env.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    api = await new_api_client(str(testbed.kubeconfig))
    try:
        assert api.rest_client.pool_manager.trust_env is True
        with pytest.raises(Exception, match=r"(?i)connect|proxy"):
            await client.CoreV1Api(api).list_namespace(_request_timeout=5)
    finally:
        await api.close()


async def test_no_proxy_exempting_the_apiserver_turns_the_lookups_off(
    testbed: Testbed, no_proxy_env: pytest.MonkeyPatch
) -> None:
    no_proxy_env.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    no_proxy_env.setenv("NO_PROXY", "127.0.0.1,localhost")
    api = await new_api_client(str(testbed.kubeconfig))
    try:
        assert api.rest_client.pool_manager.trust_env is False
        listed = await client.CoreV1Api(api).list_namespace()
        assert any(ns.metadata.name == "default" for ns in listed.items)
    finally:
        await api.close()
