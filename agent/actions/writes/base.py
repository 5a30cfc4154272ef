"""The writer's plumbing: the edge to the generated client, the fence, the retries, and the one mapping of a failed
request to an :class:`~agent.actions.results.ActionResult`.

The edge (:class:`ApiEdge`) is the only place the writer meets kubernetes_asyncio's errors: every call of the
generated ``CoreV1Api`` / ``CustomObjectsApi`` goes through it and what it raises is translated there, once, into
the project's typed errors (agent.kube.errors): an answer outside 2xx becomes :class:`KubeApiError` (status, reason
phrase, the Status message, ``Retry-After``), a connection that failed or broke, or a deadline that expired,
becomes :class:`KubeConnectionError` (``sent`` False only when no connection was made). Nothing above the writer
sees an ``ApiException``.

Fencing (agent.core.fence): with a `fence` (the elector's remaining leadership, seconds), every write first asks it
and raises :class:`~agent.core.fence.NotLeader` instead of sending when nothing is left; the request's deadline is
cut to what is left. Reads are not fenced.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s

from agent.actions.results import ActionResult, Outcome
from agent.core.fence import NotLeader
from agent.kube.errors import (
    CONNECTION_ERRORS,
    KubeApiError,
    KubeConnectionError,
    KubeError,
    from_api_exception,
    raise_for_answer,
    translated,
)

log = structlog.get_logger(__name__)

MERGE_PATCH = "application/merge-patch+json"
AS_MERGE_PATCH: dict[str, Any] = {"_content_type": MERGE_PATCH}
# the deadline of the write being sent now, when the lease fence leaves less than kube.request_timeout_s
_WRITE_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("write_deadline", default=None)


def error_detail(e: BaseException) -> str:
    """A failed read or write told in one line for an incident's detail, an action result and a log: the text of
    a :class:`KubeError` (``HTTP <status>: <reason> <the Status message>``, ``connection error: …``), else the
    exception's repr. Not cut: callers cut to their own length."""
    if isinstance(e, KubeError):
        return str(e)
    return repr(e)


def failed(
    action: str, target: str, e: KubeError, *, retriable: bool | None = None, detail: str = "", kept: str = ""
) -> ActionResult:
    """A FAILED result for a request that failed with `e`: its detail (or `detail`), `retriable` (default: the
    error's own), its HTTP status (None without an answer)."""
    return ActionResult(
        action, target, Outcome.FAILED, detail or error_detail(e), e.retriable if retriable is None else retriable,
        e.status, kept=kept,
    )  # fmt: skip


def write_retriable(status: int) -> bool:
    """Whether a write refused with `status` may be sent again: 408, 429 and 5xx (never 409: that is an answer)."""
    return status in (408, 429) or status >= 500


class ApiEdge:
    """A generated kubernetes_asyncio API object whose every call carries ``_request_timeout`` (its client sends
    requests without any deadline otherwise, so an apiserver that stopped answering would hold a write forever) and
    raises only the typed errors of :func:`agent.kube.errors.from_api_exception`. An expired deadline is a
    :class:`KubeConnectionError`:
    :meth:`WriterBase._write` retries it like a connection error."""

    def __init__(self, api: Any, timeout_s: float) -> None:
        self._api = api
        self._timeout_s = timeout_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._api, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            fenced = _WRITE_DEADLINE.get()
            kwargs.setdefault("_request_timeout", self._timeout_s if fenced is None else min(fenced, self._timeout_s))
            with translated():
                return await attr(*args, **kwargs)

        return call


def edge(api: Any, timeout_s: float = 10.0) -> ApiEdge:
    """`api` behind an :class:`ApiEdge` (as it is when it already is one)."""
    return api if isinstance(api, ApiEdge) else ApiEdge(api, timeout_s)


async def answer(resp: Any) -> bytes:
    """The body of a ``_preload_content=False`` answer, read and its connection released.

    Raises:
        KubeApiError: the answer's status is not 2xx (status, reason, the Status message, ``Retry-After``).
        KubeConnectionError: the body could not be read.
    """
    try:
        body = await resp.read()
    except CONNECTION_ERRORS as e:
        raise from_api_exception(e) from e
    finally:
        resp.release()
    raise_for_answer(resp.status, resp.reason, body, resp.headers)
    return bytes(body)


async def nothing() -> None:
    """The call a dry-run write stands for (never sent)."""


class WriterBase:
    """The state and plumbing every topic of :class:`agent.actions.writer.ClusterWriter` shares.

    Args:
        api: a logged-in kubernetes_asyncio ApiClient.
        dry_run: shadow mode: send nothing, return ``dry_run`` results.
        attempts: tries per write for retriable failures (>= 1).
        backoff_s: first retry delay; doubles with jitter, Retry-After wins when larger (capped at 10 s).
        timeout_s: deadline of each request, seconds (``kube.request_timeout_s``).
        fence: seconds of leadership left (``LeaderElector.lease_remaining``); None: not fenced (one replica, or
            tests). Checked right before each write: at <= 0 the write raises :class:`~agent.core.fence.NotLeader`.
        state_namespace: the agent's own namespace (``leader.namespace``), where the job records and the
            resubmissions are kept (agent.core.records, agent.core.resubmission).

    Raises:
        ValueError: `attempts` < 1 or `timeout_s` <= 0.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        dry_run: bool = False,
        attempts: int = 4,
        backoff_s: float = 0.2,
        timeout_s: float = 10.0,
        fence: Callable[[], float] | None = None,
        state_namespace: str = "fault-agent",
    ):
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._core = ApiEdge(k8s.CoreV1Api(api), timeout_s)
        self._custom = ApiEdge(k8s.CustomObjectsApi(api), timeout_s)
        self.dry_run = dry_run
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.fence = fence
        self.state_namespace = state_namespace
        self.configmap_copies: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}
        """(namespace, name) → (resourceVersion, data) of each bookkeeping ConfigMap as this writer's last write of
        it left it (agent.actions.writes.configmaps ``update_configmap_keys``): the next update of it starts from
        this copy instead of a read."""

    @property
    def core(self) -> Any:
        """The ``CoreV1Api`` behind the edge."""
        return self._core

    @core.setter
    def core(self, api: Any) -> None:
        self._core = edge(api, self.timeout_s)
        self.configmap_copies.clear()  # another apiserver (tests): nothing this writer wrote is known there

    @property
    def custom(self) -> Any:
        """The ``CustomObjectsApi`` behind the edge."""
        return self._custom

    @custom.setter
    def custom(self, api: Any) -> None:
        self._custom = edge(api, self.timeout_s)

    def _check_fence(self, action: str, target: str, incident: str) -> float | None:
        """Seconds of leadership left for the write about to be sent (None: not fenced).

        Raises:
            NotLeader: none left; nothing may be sent.
        """
        if self.fence is None:
            return None
        left = self.fence()
        if left <= 0:
            log.warning("write not sent: no longer the leader", action=action, target=target, incident=incident)
            raise NotLeader(action, target)
        return left

    async def _send(self, action: str, target: str, incident: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """Check the fence, then send `call` with its deadline cut to the leadership left.

        Raises:
            NotLeader: the fence is closed (nothing sent); KubeError: `call` failed.
        """
        left = self._check_fence(action, target, incident)
        token = _WRITE_DEADLINE.set(left)
        try:
            return await call()
        finally:
            _WRITE_DEADLINE.reset(token)

    def _dry(self, action: str, target: str, incident: str, would: str) -> ActionResult:
        """The DRY_RUN result of a write shadow mode does not send (fenced like the write itself).

        Raises:
            NotLeader: the fence is closed.
        """
        self._check_fence(action, target, incident)
        log.info("dry-run: write skipped", action=action, target=target, incident=incident, would=would)
        return ActionResult(action, target, Outcome.DRY_RUN, f"dry run: would {would}")

    async def _write(
        self,
        action: str,
        target: str,
        incident: str,
        call: Callable[[], Awaitable[Any]],
        *,
        done: str,
        already: tuple[int, ...] = (404, 409),
        refused: tuple[int, ...] = (),
        repeatable: bool = True,
    ) -> tuple[ActionResult, Any]:
        """Send `call` (retried on retriable failures, up to ``attempts``); the result and the answer's body (None
        unless DONE). This is where a failed request becomes a result, for every write.

        `already`: statuses that mean the write is done (ALREADY_DONE). `refused`: statuses that are an answer the
        caller handles (a precondition's 409), FAILED with that status and logged at info, not as a failure.
        `repeatable` False: a write that must not be sent twice even when its first answer is lost, because what it
        created may be gone by the time a retry lands (a RestartJob Command, which Volcano deletes once it ran it: a
        retry would restart the job again). Such a write is retried only when the apiserver did not take it (no
        connection, 408, 429); after a timeout, a broken answer or a 5xx it counts as DONE, unconfirmed: the
        restart's follow-ups and the recovery deadline cover the case where it did not land.

        Raises:
            NotLeader: the fence is closed and no attempt of this write was sent.
        """
        if self.dry_run:
            return self._dry(action, target, incident, done), None
        delay = self.backoff_s
        # why an earlier attempt may have reached the apiserver ("": none did): a refused retry is then not "not sent"
        landed_maybe = ""
        for attempt in range(1, self.attempts + 1):
            try:
                body = await self._send(action, target, incident, call)
            except NotLeader:
                if not landed_maybe:
                    raise  # nothing of this write reached the apiserver
                # the lease ended while retrying: the first attempt may have landed, so the caller goes on as if it
                # did (its events go out, ids deterministic); a successor reads what the job says
                return self._unconfirmed(
                    action, target, incident, done, f"{landed_maybe}; no retry: not the leader"
                ), None
            except KubeApiError as e:
                status = int(e.status or 0)
                if status in already:
                    detail = "not found" if status == 404 else "conflict or precondition failed"
                    log.info("write already done", action=action, target=target, incident=incident, status=status)
                    return ActionResult(action, target, Outcome.ALREADY_DONE, detail, status=status), None
                if status in refused:
                    log.info("write refused by its precondition", action=action, target=target, incident=incident,
                             status=status)  # fmt: skip
                    return failed(action, target, e, retriable=False), None
                detail = error_detail(e)
                landed = status >= 500  # the apiserver may have written it before failing; 408/429: not taken
                if landed and not repeatable:
                    return self._unconfirmed(action, target, incident, done, detail), None
                if not write_retriable(status) or attempt == self.attempts:
                    log.warning("write failed", action=action, target=target, incident=incident, detail=detail)
                    return failed(action, target, e, retriable=write_retriable(status)), None
                wait = max(delay, min(10.0, e.retry_after or 0.0))
            except KubeConnectionError as e:
                detail = str(e)
                landed = e.sent  # sent, the answer lost; else never sent
                if landed and not repeatable:
                    return self._unconfirmed(action, target, incident, done, detail), None
                if attempt == self.attempts:
                    log.warning("write failed", action=action, target=target, incident=incident, detail=detail)
                    return ActionResult(action, target, Outcome.FAILED, detail, True), None
                wait = delay
            else:
                log.info("write done", action=action, target=target, incident=incident, did=done)
                return ActionResult(action, target, Outcome.DONE, done), body
            if landed:
                landed_maybe = detail
            await asyncio.sleep(wait * random.uniform(0.8, 1.2))
            delay *= 2
        return ActionResult(action, target, Outcome.FAILED, "no attempt made", retriable=True), None

    def _unconfirmed(self, action: str, target: str, incident: str, done: str, detail: str) -> ActionResult:
        log.warning("write sent, answer lost; not repeated", action=action, target=target, incident=incident,
                    detail=detail)  # fmt: skip
        return ActionResult(action, target, Outcome.DONE, f"{done} (unconfirmed, not repeated: {detail})"[:300])
