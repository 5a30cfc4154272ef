"""Leader election with a ``coordination.k8s.io/v1`` Lease: only the leader acts and publishes.

The protocol is the one Kubernetes components use (client-go's leaderelection), written for asyncio:

- Every replica reads the Lease each ``retry_period_s`` (2 s). A Lease is free when it has no holder (released)
  or when its record has not changed for ``leaseDurationSeconds`` (15 s) *as observed locally*: expiry is judged
  by this replica's monotonic clock from the moment it last saw the record change, so clock skew between
  machines does not matter.
- Taking or renewing writes ``holderIdentity``/``renewTime`` with the Lease's resourceVersion as a precondition,
  so of two replicas racing only one wins (the other gets 409).
- The leader renews each retry period; if it cannot renew for ``renew_deadline_s`` (10 s, less than the lease
  duration) it steps down before anyone else may take over.
- On shutdown the leader releases the Lease (empty holder, duration 1 s) so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from agent.settings import LeaderSettings

log = structlog.get_logger(__name__)


def default_identity() -> str:
    """The holder identity when none is configured: the pod name ($HOSTNAME) plus a short random suffix, so a
    restarted container never believes it still holds its predecessor's lease."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4().hex[:6]}"


def _micro_time(when: datetime) -> str:
    """Kubernetes MicroTime: RFC 3339 with exactly six fractional digits, UTC."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for the Lease named in `settings` and keeps :attr:`is_leader` current.

    Args:
        api: a logged-in ApiClient.
        settings: Lease namespace/name and timings.
        identity: this replica's holder identity (default :func:`default_identity`).
        on_change: called with True/False each time leadership is gained or lost (e.g. the leader metric).

    Use :meth:`run` as a task of the root TaskGroup; it returns after `stop` is set, having released the Lease.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        settings: LeaderSettings,
        *,
        identity: str | None = None,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if settings.renew_deadline_s >= settings.lease_duration_s:
            raise ValueError(
                f"leader.renew_deadline_s ({settings.renew_deadline_s}) must be less than "
                f"leader.lease_duration_s ({settings.lease_duration_s})"
            )
        self.coordination = k8s.CoordinationV1Api(api)
        self.settings = settings
        self.identity = identity or settings.identity or default_identity()
        self.on_change = on_change
        self.leading = asyncio.Event()  # set while this replica leads
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # monotonic time it was first seen
        self._last_renew = 0.0  # monotonic time of our last successful write
        self._said_missing_namespace = False  # the "namespace not found" error is logged once

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def _set(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        if leading:
            self.leading.set()
        else:
            self.leading.clear()
        log.info("leadership changed", leader=leading, identity=self.identity, lease=self.settings.name)
        if self.on_change is not None:
            self.on_change(leading)

    def _body(self, *, resource_version: str | None, acquire: bool, transitions: int, held_since: Any) -> Any:
        now = _micro_time(datetime.now(UTC))
        metadata: dict[str, Any] = {"name": self.settings.name, "namespace": self.settings.namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.settings.lease_duration_s)),
                "acquireTime": now if acquire else held_since,
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round: create, take over, or renew the Lease. Returns True when this replica holds it now.

        Errors from the apiserver are logged and count as "not renewed"; they never escape.
        """
        ns, name = self.settings.namespace, self.settings.name
        now = time.monotonic()
        try:
            lease = await self.coordination.read_namespaced_lease(name, ns)
        except ApiException as e:
            if e.status != 404:
                log.warning("lease read failed", status=e.status, lease=name)
                return False
            try:
                await self.coordination.create_namespaced_lease(
                    ns, self._body(resource_version=None, acquire=True, transitions=0, held_since=None)
                )
            except ApiException as ce:
                if ce.status == 404 and not self._said_missing_namespace:
                    # logged once: the namespace named by leader.namespace does not exist (nothing will lead)
                    self._said_missing_namespace = True
                    log.error(
                        "lease cannot be created: namespace not found; create it or set leader.namespace "
                        "(FAULT_AGENT_LEADER__NAMESPACE)",
                        namespace=ns,
                        lease=name,
                    )
                elif ce.status not in (404, 409):
                    log.warning("lease create failed", status=ce.status, lease=name)
                return False
            self._last_renew = now
            return True
        except (OSError, TimeoutError) as e:
            log.warning("lease read failed", error=repr(e), lease=name)
            return False
        spec = lease.spec
        holder = spec.holder_identity or ""
        renew = "" if spec.renew_time is None else str(spec.renew_time)
        record = (holder, renew)
        if record != self._observed:
            self._observed = record
            self._observed_at = now
        duration = float(spec.lease_duration_seconds or self.settings.lease_duration_s)
        mine = holder == self.identity
        free = not holder or now >= self._observed_at + duration
        if not mine and not free:
            return False
        transitions = int(spec.lease_transitions or 0) + (0 if mine else 1)
        held_since = None if spec.acquire_time is None else _micro_time(spec.acquire_time)
        body = self._body(
            resource_version=lease.metadata.resource_version,
            acquire=not mine,
            transitions=transitions,
            held_since=held_since,
        )
        try:
            await self.coordination.replace_namespaced_lease(name, ns, body)
        except ApiException as e:
            if e.status != 409:
                log.warning("lease write failed", status=e.status, lease=name)
            return False
        except (OSError, TimeoutError) as e:
            log.warning("lease write failed", error=repr(e), lease=name)
            return False
        self._last_renew = now
        return True

    async def _bounded_round(self) -> bool:
        """:meth:`try_acquire_or_renew` with a deadline. The client sends requests without one, so an apiserver
        that stops answering (or a network path that silently drops packets) would hold the round forever and
        the leader would never notice its renew deadline passing while another replica takes the expired Lease.
        A leader's round ends by its renew deadline; a candidate's within one renew deadline."""
        budget = self.settings.renew_deadline_s
        if self.is_leader:
            budget -= time.monotonic() - self._last_renew
        try:
            return await asyncio.wait_for(self.try_acquire_or_renew(), timeout=max(0.1, budget))
        except TimeoutError:
            log.warning("lease request timed out", lease=self.settings.name, seconds=round(max(0.1, budget), 2))
            return False

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign and renew until `stop` is set, then release the Lease if held.

        Raises:
            asyncio.CancelledError: when cancelled (re-raised after stepping down, without a release).
        """
        try:
            while not stop.is_set():
                held = await self._bounded_round()
                if held:
                    self._set(True)
                elif self.is_leader and time.monotonic() - self._last_renew > self.settings.renew_deadline_s:
                    log.warning("lease not renewed within the renew deadline; stepping down", lease=self.settings.name)
                    self._set(False)
                elif not self.is_leader:
                    self._set(False)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.settings.retry_period_s)
        except asyncio.CancelledError:
            self._set(False)
            raise
        await self.release()

    async def release(self) -> None:
        """Give the Lease up if this replica holds it (empty holder, 1 s duration); steps down first."""
        was_leader = self.is_leader
        self._set(False)
        if not was_leader:
            return
        ns, name = self.settings.namespace, self.settings.name
        deadline = self.settings.renew_deadline_s  # a silent apiserver must not hold the shutdown
        try:
            lease = await asyncio.wait_for(self.coordination.read_namespaced_lease(name, ns), deadline)
            if (lease.spec.holder_identity or "") != self.identity:
                return
            body: Any = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": ns, "resourceVersion": lease.metadata.resource_version},
                "spec": {
                    "holderIdentity": None,
                    "leaseDurationSeconds": 1,
                    "renewTime": _micro_time(datetime.now(UTC)),
                    "acquireTime": None,
                    "leaseTransitions": int(lease.spec.lease_transitions or 0),
                },
            }
            await asyncio.wait_for(self.coordination.replace_namespaced_lease(name, ns, body), deadline)
            log.info("lease released", lease=name, identity=self.identity)
        except (ApiException, OSError, TimeoutError) as e:
            log.warning("lease release failed; it will expire", error=repr(e), lease=name)
