"""env_proxy_for: the proxy the environment names for a URL, read with the standard library once."""

from __future__ import annotations

import pytest

from agent.kube.client import env_proxy_for

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY")


@pytest.mark.parametrize(
    ("env", "url", "expected"),
    [
        pytest.param({}, "https://10.0.0.1:6443", None, id="nothing-set"),
        pytest.param({"HTTPS_PROXY": "http://proxy:3128"}, "https://10.0.0.1:6443", "http://proxy:3128", id="https"),
        pytest.param({"https_proxy": "http://proxy:3128"}, "https://api.example:6443", "http://proxy:3128", id="lower"),
        pytest.param({"HTTP_PROXY": "http://proxy:3128"}, "https://10.0.0.1:6443", None, id="other-scheme-only"),
        pytest.param(
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.1"}, "https://10.0.0.1:6443", None, id="no-proxy"
        ),
        pytest.param(
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".cluster.local"},
            "https://kubernetes.default.svc.cluster.local:443",
            None,
            id="no-proxy-domain",
        ),
        pytest.param(
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "other.example"},
            "https://api.example:6443",
            "http://proxy:3128",
            id="no-proxy-elsewhere",
        ),
    ],
)
def test_env_proxy_for(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], url: str, expected: str | None) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert env_proxy_for(url) == expected
