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
- Leadership is a fence, not a flag: :attr:`LeaderElector.is_leader` is true only while this replica's last
  successful Lease write was *sent* less than ``renew_deadline_s`` ago on the monotonic clock (checked at the
  moment of asking, so a process frozen by SIGSTOP, a stalled event loop or a round still in flight is not a
  leader once the deadline passes, whatever its last round said). The cluster writer asks it right before every
  write (agent.core.fence). A timer steps the replica down (``on_change(False)``) at that instant, not at the end of
  the next round.
- Each round (read + write) has its own deadline, ``max(retry_period_s, renew_deadline_s / 2)``: long enough for
  a slow apiserver just back from a stall to answer, short enough for a leader to retry within its renew
  deadline. It is not shortened by the time already spent since the last renewal (that gave a round 0.1 s right
  after a stall, and leadership flapped): the fence and the step-down timer guard the deadline instead.
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

import orjson
import structlog
from kubernetes_asyncio import client as k8s

from agent.kube.errors import KubeApiError, KubeError, raise_for_answer, translated
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


async def _raw_answer(resp: Any) -> bytes:
    """The body of a ``_preload_content=False`` answer (an aiohttp response), its connection released; a status
    outside 2xx raises agent.kube.errors' KubeApiError (``raise_for_answer``), as the writer's raw answers do."""
    try:
        body = await resp.read()
    finally:
        resp.release()
    raise_for_answer(resp.status, resp.reason, body, resp.headers)
    return bytes(body)


def _lease_fields(body: bytes) -> tuple[str, str, float | None, int, str | None, str]:
    """(holderIdentity, renewTime, leaseDurationSeconds, leaseTransitions, acquireTime, resourceVersion) of a raw
    ``coordination.k8s.io/v1`` Lease answer, absent fields as "", None, 0, None; read without building the V1Lease
    (issue 39: its model and date parsing were the leader's CPU). The times are MicroTime text, kept as written.

    Raises:
        ValueError: not JSON, not a Lease object, or a field of the wrong type.
    """
    doc = orjson.loads(body)  # orjson.JSONDecodeError is a ValueError
    spec = doc.get("spec") if isinstance(doc, dict) else None
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(spec, dict) or not isinstance(meta, dict):
        raise ValueError("not a Lease (no spec or metadata)")
    holder, renew = spec.get("holderIdentity") or "", spec.get("renewTime") or ""
    duration, transitions = spec.get("leaseDurationSeconds"), spec.get("leaseTransitions") or 0
    acquired, version = spec.get("acquireTime"), meta.get("resourceVersion") or ""
    if not all(isinstance(v, str) for v in (holder, renew, version)) or not isinstance(transitions, int):
        raise ValueError("a Lease field of the wrong type")
    if duration is not None and not isinstance(duration, int):
        raise ValueError("leaseDurationSeconds is not a number")
    if acquired is not None and not isinstance(acquired, str):
        raise ValueError("acquireTime is not text")
    return holder, renew, None if duration is None else float(duration), transitions, acquired, version


class LeaderElector:
    """Campaigns for the Lease named in `settings` and keeps :attr:`is_leader` current.

    Args:
        api: a logged-in ApiClient.
        settings: Lease namespace/name and timings.
        identity: this replica's holder identity (default :func:`default_identity`).
        on_change: called with True/False each time leadership is gained or lost (e.g. the leader metric; the
            agent also cancels its in-flight action tasks on False).
        monotonic: the monotonic clock in seconds (tests pass a fake one).

    Use :meth:`run` as a task of the root TaskGroup; it returns after `stop` is set, having released the Lease.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        settings: LeaderSettings,
        *,
        identity: str | None = None,
        on_change: Callable[[bool], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
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
        self.monotonic = monotonic
        self.leading = asyncio.Event()  # set while this replica leads (see is_leader for the fence)
        self.term = 0  # bumped each time this replica becomes leader
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # monotonic time it was first seen
        self._last_renew: float | None = None  # monotonic time our last successful Lease write was sent
        self._expiry: asyncio.TimerHandle | None = None  # steps down when the renew deadline passes
        self._said_missing_namespace = False  # the "namespace not found" error is logged once

    @property
    def round_timeout_s(self) -> float:
        """The deadline of one round (read + write), seconds: ``max(retry_period_s, renew_deadline_s / 2)``."""
        return max(self.settings.retry_period_s, self.settings.renew_deadline_s / 2)

    def holds_lease(self) -> bool:
        """True while the last successful Lease write was sent less than ``renew_deadline_s`` ago (monotonic
        clock, read now). Others can take the Lease only ``lease_duration_s`` after they saw that write, which is
        after it was sent, so while this holds no other replica leads (given equal clock rates)."""
        return self.lease_remaining() > 0

    def lease_remaining(self) -> float:
        """Seconds this replica may still act as leader: ``renew_deadline_s`` minus the time since its last
        successful Lease write was sent (monotonic clock); <= 0 when it does not lead (never won, stepped down,
        or the deadline passed). The cluster writer's fence (agent.core.fence)."""
        return self._renewal_left() if self.leading.is_set() else 0.0

    def _renewal_left(self) -> float:
        sent = self._last_renew
        return 0.0 if sent is None else self.settings.renew_deadline_s - (self.monotonic() - sent)

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads now: it won the Lease and :meth:`holds_lease` is still true."""
        return self.holds_lease()

    @property
    def actor(self) -> str:
        """``<identity>#<term>``: who acts in this leadership term (the job's actor annotation, agent.core.fence)."""
        return f"{self.identity}#{self.term}"

    def _set(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        if leading:
            self.term += 1
            self.leading.set()
        else:
            self.leading.clear()
            if self._expiry is not None:
                self._expiry.cancel()
                self._expiry = None
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
        now = self.monotonic()
        try:
            with translated():
                raw = await _raw_answer(await self.coordination.read_namespaced_lease(name, ns, _preload_content=False))
            lease = _lease_fields(raw)
        except KubeApiError as e:
            if e.status != 404:
                log.warning("lease read failed", status=e.status, lease=name)
                return False
            return await self._create(ns, name)
        except KubeError as e:  # no answer
            log.warning("lease read failed", error=str(e), lease=name)
            return False
        except ValueError as e:  # the answer is not a Lease (_lease_fields)
            log.warning("lease read failed", error=f"not a Lease: {e}", lease=name)
            return False
        holder, renew, lease_duration, lease_transitions, acquired, version = lease
        record = (holder, renew)
        if record != self._observed:
            self._observed = record
            self._observed_at = now
        duration = lease_duration or self.settings.lease_duration_s
        mine = holder == self.identity
        free = not holder or now >= self._observed_at + duration
        if not mine and not free:
            if self.leading.is_set():
                self._last_renew = None  # another replica holds the Lease now: the fence drops at once
            return False
        transitions = lease_transitions + (0 if mine else 1)
        body = self._body(resource_version=version, acquire=not mine, transitions=transitions, held_since=acquired)
        sent = self.monotonic()
        try:  # the answer (the Lease written) is not read: not built into a model
            with translated():
                await _raw_answer(
                    await self.coordination.replace_namespaced_lease(name, ns, body, _preload_content=False)
                )
        except KubeApiError as e:
            if e.status != 409:
                log.warning("lease write failed", status=e.status, lease=name)
            return False
        except KubeError as e:  # no answer
            log.warning("lease write failed", error=str(e), lease=name)
            return False
        self._renewed(sent)
        return True

    async def _create(self, ns: str, name: str) -> bool:
        """Create the Lease (none exists), held by this replica. Returns whether it was created; a refusal or no
        answer is logged (a missing namespace once, at error level: nothing will lead) and returns False."""
        sent = self.monotonic()
        try:
            with translated():
                await self.coordination.create_namespaced_lease(
                    ns, self._body(resource_version=None, acquire=True, transitions=0, held_since=None)
                )
        except KubeApiError as e:
            if e.status == 404 and not self._said_missing_namespace:
                # logged once: the namespace named by leader.namespace does not exist (nothing will lead)
                self._said_missing_namespace = True
                log.error(
                    "lease cannot be created: namespace not found; create it or set leader.namespace "
                    "(FAULT_AGENT_LEADER__NAMESPACE)",
                    namespace=ns,
                    lease=name,
                )
            elif e.status not in (404, 409):
                log.warning("lease create failed", status=e.status, lease=name)
            return False
        except KubeError as e:  # no answer
            log.warning("lease create failed", error=str(e), lease=name)
            return False
        self._renewed(sent)
        return True

    def _renewed(self, sent: float) -> None:
        """A Lease write sent at monotonic `sent` succeeded: the fence holds until `sent` + renew deadline."""
        if self._last_renew is None or sent > self._last_renew:
            self._last_renew = sent

    async def _bounded_round(self) -> bool:
        """:meth:`try_acquire_or_renew` with a deadline (:attr:`round_timeout_s`). The client sends requests
        without one, so an apiserver that stops answering (or a network path that silently drops packets) would
        hold the round forever. The deadline is the same for every round: a leader whose renew deadline passes
        while a round is in flight has already stopped leading (:meth:`holds_lease`, the step-down timer)."""
        timeout = self.round_timeout_s
        try:
            return await asyncio.wait_for(self.try_acquire_or_renew(), timeout=timeout)
        except TimeoutError:
            log.warning("lease request timed out", lease=self.settings.name, seconds=round(timeout, 2))
            return False

    def _arm_expiry(self) -> None:
        """(Re)arm the timer that steps this replica down when its renew deadline passes without a renewal."""
        if self._expiry is not None:
            self._expiry.cancel()
        sent = self._last_renew if self._last_renew is not None else self.monotonic()
        delay = max(0.0, sent + self.settings.renew_deadline_s - self.monotonic())
        self._expiry = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        if self.leading.is_set() and not self.holds_lease():
            log.warning("lease not renewed within the renew deadline; stepping down", lease=self.settings.name)
            self._set(False)
        elif self.leading.is_set():
            self._arm_expiry()  # renewed meanwhile

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign and renew until `stop` is set, then release the Lease if held.

        Raises:
            asyncio.CancelledError: when cancelled (re-raised after stepping down, without a release).
        """
        try:
            while not stop.is_set():
                held = await self._bounded_round()
                if held and self._renewal_left() > 0:
                    self._set(True)
                    self._arm_expiry()
                elif self.leading.is_set() and not self.holds_lease():
                    log.warning("lease not renewed within the renew deadline; stepping down", lease=self.settings.name)
                    self._set(False)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.settings.retry_period_s)
        except asyncio.CancelledError:
            self._set(False)
            raise
        await self.release()

    async def release(self) -> None:
        """Give the Lease up if this replica holds it (empty holder, 1 s duration); steps down first."""
        was_leader = self.leading.is_set()  # the holder may still be us even past the fence: give it up
        self._set(False)
        if not was_leader:
            return
        ns, name = self.settings.namespace, self.settings.name
        deadline = self.settings.renew_deadline_s  # a silent apiserver must not hold the shutdown
        try:
            with translated():  # a deadline passed is a KubeConnectionError too
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
        except KubeError as e:
            log.warning("lease release failed; it will expire", error=str(e), lease=name)
