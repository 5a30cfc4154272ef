"""Who may read ``/metrics``: the Kubernetes way (``server.metrics_auth: kubernetes``), as controller-runtime's
``filters.WithAuthenticationAndAuthorization`` does for a controller's metrics endpoint.

The scraper sends a bearer token (Prometheus: its ServiceAccount's token file). The agent asks the apiserver
who it is (``authentication.k8s.io/v1`` TokenReview) and whether that user may ``get`` the non-resource URL
``/metrics`` (``authorization.k8s.io/v1`` SubjectAccessReview: RBAC's ``nonResourceURLs: ["/metrics"]``, granted
by the ClusterRole ``fault-agent-metrics-reader``, deploy/monitoring/metrics-reader.yaml). The agent's own
ServiceAccount needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews`` (deploy/clusterrole.yaml).
``/healthz`` and ``/readyz`` stay open: the kubelet's probes carry no token.

Answers: 200 allowed, 401 no token or a token the apiserver does not authenticate, 403 authenticated but not
allowed, 503 the apiserver did not answer (not cached). Each answered review is kept :data:`CACHE_TTL_S` seconds per
token (keyed by its SHA-256, the token itself is not kept), so a scrape every 15 s costs two reviews a minute per
scraper, and a revoked token or binding takes effect within that time.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s

from agent.kube.errors import KubeError, translated

log = structlog.get_logger(__name__)

CACHE_TTL_S = 60.0
"""Seconds an answered review is reused for the same token."""
CACHE_MAX = 256
"""Tokens remembered at most (oldest dropped first): a scraper or two in practice."""
METRICS_PATH = "/metrics"


class MetricsAuthorizer:
    """``await authorizer(token)`` → ``(status, detail)``; see the module docstring.

    Args:
        api: the agent's API client (its own credentials make the reviews).
        timeout_s: per review request.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, api: k8s.ApiClient, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self.clock = clock
        self.cache: dict[str, tuple[float, int, str]] = {}
        self.reviews = 0  # TokenReviews sent (tests read it)

    async def __call__(self, token: str | None) -> tuple[int, str]:
        if not token:
            return 401, "no bearer token"
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        hit = self.cache.get(key)
        if hit is not None and now - hit[0] < CACHE_TTL_S:
            return hit[1], hit[2]
        try:
            with translated():
                status, detail = await self._review(token)
        except KubeError as e:  # refused or no answer: not cached
            what = f"HTTP {e.status}" if e.status is not None else type(e.__cause__ or e).__name__
            log.warning("metrics authorization: review failed", error=what)
            return 503, f"authorization review failed ({what})"
        self.cache[key] = (now, status, detail)
        while len(self.cache) > CACHE_MAX:
            del self.cache[next(iter(self.cache))]
        return status, detail

    async def _review(self, token: str) -> tuple[int, str]:
        self.reviews += 1
        review: Any = await k8s.AuthenticationV1Api(self.api).create_token_review(
            k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token)), _request_timeout=self.timeout_s
        )
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return 401, "token not authenticated"
        user = status.user
        sar: Any = await k8s.AuthorizationV1Api(self.api).create_subject_access_review(
            k8s.V1SubjectAccessReview(
                spec=k8s.V1SubjectAccessReviewSpec(
                    user=user.username,
                    groups=user.groups,
                    uid=user.uid,
                    extra=user.extra,
                    non_resource_attributes=k8s.V1NonResourceAttributes(path=METRICS_PATH, verb="get"),
                )
            ),
            _request_timeout=self.timeout_s,
        )
        if sar.status is not None and sar.status.allowed:
            return 200, f"{user.username} may get {METRICS_PATH}"
        return 403, f"{user.username} may not get {METRICS_PATH}"
