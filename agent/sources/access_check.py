"""Fail loud on reads: may the agent's identity list and watch every collection its settings ask it to watch?

Checked once at start, before any watch, with one SelfSubjectAccessReview (``authorization.k8s.io/v1``; every
authenticated user may create them, bootstrap ClusterRole ``system:basic-user``) per verb (``list``, ``watch``)
and watched collection (:func:`agent.sources.watchers.resources`): the apiserver's own authorizers answer for
exactly the namespace, API group and resource of the watch, so a setting that names a namespace the agent's
RBAC does not grant (``kube.namespaces`` beyond the namespaced overlay's RoleBindings, an empty
``kube.public_fault_namespaces`` under namespaced RBAC: all namespaces) is an error naming the setting and the
grant, and the agent does not start (exit 1) instead of retrying a 403 watch forever with that source never
synced (deploy/README.md, "Least privilege reads").

A review that gets no answer (timeout, 5xx) or is itself refused is not a denial: it is logged as a warning
and the watches go ahead (a watch refused later logs its 403 at error level and keeps retrying).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s

from agent.kube.errors import KubeError, translated
from agent.kube.watch import Resource

log = structlog.get_logger(__name__)

WATCH_VERBS = ("list", "watch")
"""The verbs a watcher needs on its collection: the list, then the watch from its resourceVersion."""


class ReadAccessDenied(KubeError):
    """The agent's identity may not list or watch a collection its settings ask it to watch. Not retriable:
    a person changes the RBAC or the setting. The message names each missing grant and its setting."""

    retriable = False


@dataclass(frozen=True, slots=True)
class ReadGrant:
    """One verb on one watched collection, and the setting that asks for it.

    Attributes:
        verb: ``list`` or ``watch``.
        resource: the watched collection (namespace None: all namespaces, or a cluster-scoped kind).
        setting: the setting that put it there (``kube.namespaces``, ``leader.namespace``, ...); "" for a
            collection every run watches (nodes).
    """

    verb: str
    resource: Resource
    setting: str

    def describe(self) -> str:
        """e.g. ``list pods in namespace ns-b (kube.namespaces)``."""
        r = self.resource
        what = f"{r.plural}.{r.group}" if r.group else r.plural
        where = f"in namespace {r.namespace}" if r.namespace else "in all namespaces"
        if r.plural in ("nodes", "resourceslices"):
            where = "(cluster-scoped)"
        why = f" ({self.setting}{'' if r.namespace else ' is empty'})" if self.setting else ""
        return f"{self.verb} {what} {where}{why}"


def read_grants(resources: Sequence[Resource], settings_of: dict[str, str]) -> list[ReadGrant]:
    """Every (verb, collection) the watchers of `resources` need. `settings_of`: watch source → the setting that
    names its namespaces (agent.sources.watchers.NAMESPACE_SETTINGS); a source not in it gets ""."""
    return [ReadGrant(verb, r, settings_of.get(r.source, "")) for r in resources for verb in WATCH_VERBS]


def denial_message(missing: Sequence[ReadGrant]) -> str:
    """One error text for the grants the apiserver refused (non-empty `missing`)."""
    listed = "; ".join(g.describe() for g in missing)
    return (
        f"this identity may not {listed}: grant it (with kube.namespaces set, a RoleBinding of the ClusterRole "
        "fault-agent-namespaced in each of those namespaces) or change the setting; the agent does not start "
        'rather than miss the faults it would read there (deploy/README.md, "Least privilege reads")'
    )


async def allowed(api: k8s.ApiClient, grant: ReadGrant, timeout_s: float) -> bool | None:
    """The apiserver's answer for `grant` (a SelfSubjectAccessReview): True, False, or None when it did not
    answer or refused the review itself (logged as a warning)."""
    r = grant.resource
    review = k8s.V1SelfSubjectAccessReview(
        spec=k8s.V1SelfSubjectAccessReviewSpec(
            resource_attributes=k8s.V1ResourceAttributes(
                namespace=r.namespace or "", verb=grant.verb, group=r.group, resource=r.plural
            )
        )
    )
    try:
        with translated():
            got: Any = await k8s.AuthorizationV1Api(api).create_self_subject_access_review(
                review, _request_timeout=timeout_s
            )
    except KubeError as e:  # no answer, or the review refused: not a verdict on the read
        log.warning("read access not verified", grant=grant.describe(), error=str(e)[:300])
        return None
    return bool(got.status.allowed)


async def check_read_access(
    api: k8s.ApiClient, resources: Sequence[Resource], settings_of: dict[str, str], timeout_s: float
) -> list[ReadGrant]:
    """Review every grant of :func:`read_grants` (concurrently); returns those the apiserver did not answer.

    Raises:
        ReadAccessDenied: at least one was refused (the message: :func:`denial_message`).
    """
    grants = read_grants(resources, settings_of)
    answers = await asyncio.gather(*(allowed(api, g, timeout_s) for g in grants))
    missing = [g for g, ok in zip(grants, answers, strict=True) if ok is False]
    if missing:
        raise ReadAccessDenied(denial_message(missing), status=403)
    unverified = [g for g, ok in zip(grants, answers, strict=True) if ok is None]
    log.info("read access checked", grants=len(grants), unverified=len(unverified))
    return unverified
