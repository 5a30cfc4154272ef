"""``prometheus.*``: the Prometheus source of training progress (docs/progress.md)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from agent.settings.common import (
    Group,
)


class PrometheusSettings(Group):
    """Training progress from Prometheus: the server, how often and how it is queried, and the queries."""

    url: str = Field(
        "",
        description="Base URL of the Prometheus whose HTTP API (GET /api/v1/query) gives the training progress of "
        "the jobs labelled fault-agent.io/progress: prometheus (docs/progress.md), e.g. "
        "http://prometheus-operated.monitoring:9090. Empty: no Prometheus source; such jobs are reported once "
        "(no-prometheus-url) and not followed.",
    )
    interval_s: float = Field(
        30.0,
        ge=1,
        le=3600,
        description="Seconds between two evaluations of every opted-in job's queries (one instant query per job "
        "and query). The hang timeout of such a job is never below three intervals. 30 s matches the heartbeat "
        "Lease's default interval: 1,000 jobs are ~33 queries a second.",
    )
    timeout_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Seconds one query may take (sent to Prometheus as its own timeout too); a query past it counts "
        "as Prometheus unreachable for that round (no data, never a hang).",
    )
    concurrency: int = Field(8, ge=1, le=256, description="Queries in flight at once.")
    step_query: str = Field(
        "",
        description="PromQL template of a job's last completed training step when the job has no "
        "fault-agent.io/progress-query annotation (or job_queries is false); {namespace} and {job} are replaced by "
        "the job's namespace and name. It must give one number (a scalar or one series), e.g. "
        'max(training_step{namespace="{namespace}",job_name="{job}"}). Empty: jobs must carry the annotation.',
    )
    step_time_query: str = Field(
        "",
        description="PromQL template of a job's recent seconds per step (optional; derives its hang timeout as the "
        "Lease's step time does), used with step_query. Empty: no step time; the ceiling applies without a label.",
    )
    job_queries: bool = Field(
        True,
        description="Let a job's own annotations fault-agent.io/progress-query and "
        "fault-agent.io/progress-step-time-query choose its queries. The agent evaluates them with its own "
        "Prometheus credentials (read-only; only the number is used); false: only the settings' templates run.",
    )
    bearer_token_file: str | None = Field(
        None,
        description="File holding a bearer token sent to Prometheus (read at every query, so a rotated token is "
        "picked up), e.g. the pod's ServiceAccount token behind a kube-rbac-proxy. None: no Authorization header.",
    )
    ca_file: str | None = Field(
        None, description="PEM CA bundle that verifies an https Prometheus; None: the system's trust store."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError("prometheus.url is http(s)://host[:port][/path], without query or fragment")
        return value.rstrip("/")
