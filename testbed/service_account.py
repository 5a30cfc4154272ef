"""ServiceAccount credentials on the testbed: a TokenRequest token and a kubeconfig that uses it.

Used by the integration test of deploy/'s RBAC and by ``bench/bench_scale.py --apf`` (the agent, and the
background writer, as ServiceAccounts: the testbed admin is in ``system:masters``, which API Priority and
Fairness exempts, so only a ServiceAccount's requests are queued by priority level).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from testbed.cluster import Testbed
from testbed.rest import Rest


def service_account_token(rest: Rest, namespace: str, name: str, *, seconds: int = 3600) -> str:
    """A bearer token for ServiceAccount `namespace`/`name` from the TokenRequest API (valid `seconds`).

    Raises:
        RestError: the ServiceAccount does not exist or the request was refused.
    """
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    resp: dict[str, Any] = rest.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
    return str(resp["status"]["token"])


def write_token_kubeconfig(path: Path, testbed: Testbed, token: str, user: str = "fault-agent") -> Path:
    """Write a kubeconfig (mode 0600) for the testbed's apiserver and CA that authenticates with `token`."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testbed",
                "cluster": {"server": testbed.apiserver_url, "certificate-authority": str(testbed.ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "testbed", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path
