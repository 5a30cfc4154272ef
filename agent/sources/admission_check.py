"""Fail closed: is the agent's admission policy in force for the agent's own identity? Probe at start and every
``policy.admission_check_interval_s``.

The probe is a server-side dry run (``dryRun=All``: authenticated, authorized and admitted like a real request,
never stored) of a write the policy ``fault-agent-writes`` must deny and RBAC allows: a create of the ConfigMap
:data:`PROBE_NAME` in the agent's own namespace (``leader.namespace``; the Role in deploy/role.yaml grants
create on ConfigMaps there, the policy's rule ``configmaps`` allows only the breaker and the agent's records by
name). Sent with the agent's own credentials, so it checks the policy, its binding and the policy's
``matchConditions`` for exactly the identity the agent acts as. The answers (:func:`verdict`):

- 403 from a ValidatingAdmissionPolicy whose message is the agent policy's (``fault-agent policy, rule ...``):
  in force;
- the write admitted (201, or 409 AlreadyExists: storage answered, so admission let it through): **not** in force
  (no policy, no binding, or a policy that names another user);
- any other 403 (RBAC refused the probe before admission ran), 4xx: not verified, treated as not in force;
- no answer (timeout, 5xx, connection refused): the last verdict stands (before any verdict: not verified).

While not in force and ``policy.admission_check`` is ``refuse`` the engine decides but does not act
(agent.engine.deciding); ``warn`` only reports. Each change of the verdict is logged once (an error while not in
force), and ``fault_agent_admission_policy_in_force`` follows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from kubernetes_asyncio import client as k8s

from agent.kube.errors import KubeApiError, KubeError, translated

log = structlog.get_logger(__name__)

PROBE_NAME = "fault-agent-admission-probe"
"""The ConfigMap the probe asks to create (dry run only: never stored). Not a name the policy allows."""

POLICY_MESSAGE = "fault-agent policy, rule "
"""How every message of the agent's admission policies begins (deploy/admission-policy.yaml)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One probe's reading. `in_force`: the policy denied the probe. `detail`: one line on why (for logs and the
    refused decisions). `answered`: the apiserver answered (False: no verdict, the last one stands)."""

    in_force: bool
    detail: str
    answered: bool = True


def _message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status body (JSON text or bytes), else the body as text (≤ 300 chars)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return str(json.loads(text).get("message", "")) or text[:300]
    return text[:300]


def verdict(status: int, body: Any) -> Verdict:
    """Read one probe answer: `status` is the HTTP status (201 when the dry run was admitted), `body` the
    response body (a Kubernetes ``Status`` on errors: JSON text or bytes). Pure; see the module docstring."""
    if status in (200, 201):
        return Verdict(
            False,
            "a write the admission policy must deny was admitted (dry run): the policy or its binding is missing, "
            "or does not match this identity",
        )
    message = _message(body)
    if status == 409:
        return Verdict(False, f"a write the admission policy must deny reached storage (dry run, 409: {message})")
    if status == 403 and "ValidatingAdmissionPolicy" in message and POLICY_MESSAGE in message:
        return Verdict(True, "the admission policy denied the probe write (dry run)")
    if status == 403:
        return Verdict(False, f"not verified: the probe write was refused before the admission policy ({message})")
    if status >= 500 or status in (0, 429):
        return Verdict(False, f"not verified: the apiserver did not answer the probe (HTTP {status})", answered=False)
    return Verdict(False, f"not verified: HTTP {status} to the probe write ({message})")


async def probe(api: k8s.ApiClient, namespace: str, timeout_s: float) -> Verdict:
    """Send the probe (see the module docstring) in `namespace` and read its answer. A connection error or a
    timeout is an unanswered verdict. Never raises but for cancellation."""
    body = k8s.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=k8s.V1ObjectMeta(name=PROBE_NAME, labels={"app.kubernetes.io/name": "fault-agent"}),
        data={"probe": "fault-agent admission check (dry run, never stored)"},
    )
    try:
        with translated():
            await k8s.CoreV1Api(api).create_namespaced_config_map(
                namespace, body, dry_run="All", _request_timeout=timeout_s
            )
    except KubeApiError as e:
        return verdict(e.status or 0, e.server_message or str(e))
    except KubeError as e:  # no answer
        cause = type(e.__cause__ or e).__name__
        return Verdict(False, f"not verified: the probe write got no answer ({cause})", answered=False)
    return verdict(201, None)


class AdmissionMetrics(Protocol):
    """The subset of agent.sinks.metrics.AgentMetrics the check reports to."""

    def admission_policy_in_force(self, in_force: bool, check: str) -> None: ...


class AdmissionCheck:
    """Follows the probe's verdict (see the module docstring).

    Args:
        namespace: where the probe ConfigMap would be created (``leader.namespace``).
        mode: ``policy.admission_check`` (``refuse`` or ``warn``; ``off`` builds no check).
        metrics: where the gauge is set.
    """

    def __init__(self, namespace: str, mode: str, metrics: AdmissionMetrics) -> None:
        self.namespace = namespace
        self.mode = mode
        self.metrics = metrics
        self.last: Verdict = Verdict(False, "not verified yet: the first admission check has not answered",
                                     answered=False)  # fmt: skip
        self._reported: str | None = None
        self.metrics.admission_policy_in_force(False, mode)

    @property
    def in_force(self) -> bool:
        """Whether the last answered probe was denied by the policy."""
        return self.last.in_force

    def refusal(self) -> str | None:
        """Why the agent must not act now (``refuse`` mode, not in force), else None: what the engine asks."""
        if self.mode != "refuse" or self.last.in_force:
            return None
        return self.last.detail

    def seen(self, v: Verdict) -> Verdict:
        """Take one probe's verdict; an unanswered one leaves the last answered verdict standing (logged once).
        Logs each change (an error while not in force), sets the gauge. Returns the verdict now in force."""
        if not v.answered and self.last.answered:
            if self._reported != v.detail:
                self._reported = v.detail
                log.warning("admission check not answered; the last verdict stands", detail=v.detail,
                            in_force=self.last.in_force)  # fmt: skip
            return self.last
        changed = v.in_force != self.last.in_force or v.detail != self.last.detail or self._reported is None
        self.last = v
        self.metrics.admission_policy_in_force(v.in_force, self.mode)
        if changed:
            self._reported = v.detail
            if v.in_force:
                log.info("admission policy in force for the agent's identity", detail=v.detail)
            else:
                action = "refusing to act" if self.mode == "refuse" else "acting anyway (policy.admission_check=warn)"
                log.error("admission policy NOT in force", agent=action, detail=v.detail, namespace=self.namespace,
                          setting="policy.admission_check", value=self.mode)  # fmt: skip
        return v

    async def run(self, api: k8s.ApiClient, stop: asyncio.Event, *, interval_s: float, timeout_s: float) -> None:
        """Probe at once, then every `interval_s` until `stop`."""
        while not stop.is_set():
            self.seen(await probe(api, self.namespace, timeout_s))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
