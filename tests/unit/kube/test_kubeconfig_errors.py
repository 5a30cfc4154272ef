"""Bad kubeconfig paths and files get a message naming the problem, not the client library's internals."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.kube.client import new_api_client
from agent.kube.errors import KubeConfigError


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        pytest.param(None, "is a directory", id="directory"),
        pytest.param("root:x:0:0:root:/root:/bin/bash\n", "is not a kubeconfig", id="passwd-like-text"),
        pytest.param("- a\n- b\n", "got list", id="yaml-list"),
        pytest.param("clusters: [\n", "cannot be read as YAML", id="broken-yaml"),
        pytest.param("apiVersion: v1\nkind: Config\nclusters: []\n", "cannot load Kubernetes credentials", id="empty"),
    ],
)
async def test_bad_kubeconfig_is_named(tmp_path: Path, content: str | None, fragment: str) -> None:
    path = tmp_path / "kubeconfig"
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    with pytest.raises(KubeConfigError, match=fragment) as err:
        await new_api_client(str(path))
    if content is not None:  # a file that is there but unusable: the agent's start-up error names it so
        assert str(err.value).startswith(f"cannot load Kubernetes credentials (tried ['{path}'])")


async def test_missing_kubeconfig_is_named(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="no kubeconfig at"):
        await new_api_client(str(tmp_path / "absent"))
