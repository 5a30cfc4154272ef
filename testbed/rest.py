"""A tiny synchronous Kubernetes REST client for the testbed's own set-up and health checks.

The agent uses kubernetes_asyncio; the testbed only needs GET and create-or-replace of a few objects, done
here with the standard library so starting a testbed needs no event loop.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class RestError(RuntimeError):
    """An apiserver request failed; `status` is the HTTP status (0 when the server was unreachable)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


# kind -> (API path prefix, plural, namespaced)
_KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "FlowSchema": ("/apis/flowcontrol.apiserver.k8s.io/v1", "flowschemas", False),
    "PriorityLevelConfiguration": ("/apis/flowcontrol.apiserver.k8s.io/v1", "prioritylevelconfigurations", False),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}


class Rest:
    """Admin client: `base` is https://127.0.0.1:<port>, `token` a bearer token, `ca_file` the CA bundle."""

    def __init__(self, base: str, token: str, ca_file: Path) -> None:
        self.base = base
        self.token = token
        self.ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file.exists() else None

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float = 10,
        content_type: str = "application/json",
    ) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError as e:
            raise RestError(e.code, e.read().decode("utf-8", errors="replace")[:500]) from e
        except (urllib.error.URLError, OSError) as e:
            raise RestError(0, f"{self.base} unreachable: {e}") from e

    def get(self, path: str) -> dict[str, Any]:
        """GET `path` and decode its JSON. Raises RestError."""
        out: dict[str, Any] = json.loads(self._request("GET", path))
        return out

    def get_text(self, path: str) -> str:
        """GET `path` as text (for /readyz). Raises RestError."""
        return self._request("GET", path, timeout=3).decode()

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        """Send one request and decode the JSON answer (None when empty). Raises RestError."""
        raw = self._request(method, path, body, content_type=content_type)
        return json.loads(raw) if raw else None

    def merge_patch(self, path: str, patch: dict[str, Any]) -> Any:
        """JSON merge patch (RFC 7386) of the object at `path`. Raises RestError."""
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def apply(self, obj: dict[str, Any]) -> None:
        """Create `obj`; if it exists, leave it (set-up objects are immutable here). Raises RestError."""
        kind = obj["kind"]
        if kind not in _KINDS:
            raise RestError(0, f"testbed cannot apply kind {kind}")
        prefix, plural, namespaced = _KINDS[kind]
        ns = obj["metadata"].get("namespace", "default")
        path = f"{prefix}/namespaces/{ns}/{plural}" if namespaced else f"{prefix}/{plural}"
        try:
            self._request("POST", path, obj)
        except RestError as e:
            if e.status != 409:
                raise

    def crd_established(self, name: str) -> bool:
        """True when the CRD's Established condition is True."""
        crd = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in crd.get("status", {}).get("conditions", [])
        )
