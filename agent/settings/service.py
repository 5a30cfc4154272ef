"""``server.*``, ``leader.*`` and ``log.*``: the agent as a process (HTTP server, leader election, logs)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from agent.settings.common import (
    DNS_LABEL,
    Group,
    valid_object_name,
)


class ServerSettings(Group):
    """The HTTP server of /metrics, /healthz and /readyz, and the event loop's lag limit."""

    bind_address: str = Field("0.0.0.0", description="Address of the /metrics, /healthz, /readyz server.")
    port: int = Field(8080, ge=0, le=65535, description="Port of the HTTP server; 0 picks a free one.")
    metrics_auth: Literal["none", "kubernetes"] = Field(
        "none",
        description="Who may read /metrics. none: anyone who reaches the port. kubernetes: a bearer token the "
        "apiserver authenticates (TokenReview) whose user may get the non-resource URL /metrics "
        "(SubjectAccessReview; ClusterRole fault-agent-metrics-reader), as controller-runtime's "
        "WithAuthenticationAndAuthorization; /healthz and /readyz stay open for the kubelet. deploy/ and the chart "
        "set kubernetes; none is the default for an agent run outside a cluster.",
    )
    loop_lag_limit_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="Event loop lag (seconds a 1 s heartbeat runs late) above which /healthz fails; 5 s is far "
        "above normal jitter yet well inside the liveness probe's window.",
    )


class LeaderSettings(Group):
    """Leader election with a coordination.k8s.io Lease: only the leader acts, standbys take over when it goes."""

    enabled: bool = Field(True, description="Use a coordination.k8s.io Lease so only one replica acts.")
    namespace: str = Field(
        "fault-agent",
        description="Namespace of the Lease, the breaker ConfigMap and the job records (fault-agent-job-<job UID>: "
        "each job's incident, ledger and claim).",
    )
    name: str = Field("fault-agent-leader", description="Name of the Lease.")
    identity: str | None = Field(
        None, description="Holder identity; default the pod name (HOSTNAME) plus a random suffix per process."
    )
    lease_duration_s: float = Field(15.0, ge=2, le=600, description="Lease duration; client-go's default.")
    renew_deadline_s: float = Field(10.0, ge=1, le=600, description="Leader gives up if not renewed in this.")
    retry_period_s: float = Field(2.0, gt=0, le=60, description="Standby retry period.")

    @field_validator("name")
    @classmethod
    def _lease_name(cls, value: str) -> str:
        return valid_object_name(value)

    @field_validator("namespace")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not DNS_LABEL.fullmatch(value):
            raise ValueError("a namespace name is a DNS label: 1-63 lower-case letters, digits and '-' inside")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> LeaderSettings:
        # client-go's rule: retry < renew deadline < lease duration, else two leaders can overlap.
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                f"need retry_period_s < renew_deadline_s < lease_duration_s, got {self.retry_period_s} / "
                f"{self.renew_deadline_s} / {self.lease_duration_s}"
            )
        return self


class LogSettings(Group):
    """The agent's log: level and format."""

    level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    format: Literal["auto", "json", "console"] = Field(
        "auto", description="'auto' is key-value on a terminal and JSON otherwise (containers)."
    )
