"""Typed errors at the Kubernetes boundary.

Every error carries `retriable`: True when the same request may succeed later (connection refused, 5xx,
429, a silent stream, 410 Gone after a re-list), False when retrying cannot help without a person (bad
kubeconfig, 401/403/404 on a resource that does not exist). The forever loop of the watch engine retries
both, but non-retriable ones at the ceiling of the backoff and with an error-level log line.

What the generated kubernetes_asyncio client raises is translated here, once (:func:`from_api_exception`, and
:func:`translated` around a call): every edge that calls it (the writer's, the leader election, the sources' checks,
the CLIs) hands its callers only these types.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Iterator, Mapping
from typing import TypeVar

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException


class KubeError(Exception):
    """Base of all Kubernetes edge errors.

    Attributes:
        retriable: whether retrying the same request may succeed.
        status: HTTP status code when the error came from the apiserver, else None.
        retry_after: seconds the server asked us to wait (``Retry-After`` header), else None.
    """

    retriable: bool = True

    def __init__(
        self,
        message: str,
        *,
        retriable: bool | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable
        self.status = status
        self.retry_after = retry_after


class KubeConfigError(KubeError):
    """No usable credentials: no service account, unreadable kubeconfig, unknown context."""

    retriable = False


class KubeConnectionError(KubeError):
    """The apiserver could not be reached or the connection broke mid-request.

    Attributes:
        sent: whether the request may have reached the apiserver (the connection was made, the answer lost or
            late); False only when no connection was made, so a write that must not be repeated may be retried.
    """

    retriable = True

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


class KubeApiError(KubeError):
    """The apiserver answered with a non-2xx status (or a watch ERROR event carrying a Status).

    Attributes:
        reason: the HTTP reason phrase ("Forbidden"), "" when unknown.
        server_message: the ``message`` of the apiserver's Status body (an RBAC refusal names the user, verb and
            resource; an admission policy's the rule that denied), cut to 300 characters; "" when it has none.
        causes: the Status body's ``details.causes``, each ``<field>: <message>`` (or the message alone); a
            refused object's validation names each field this way.
    """

    def __init__(
        self,
        message: str,
        *,
        retriable: bool | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        reason: str = "",
        server_message: str = "",
        causes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, retriable=retriable, status=status, retry_after=retry_after)
        self.reason = reason
        self.server_message = server_message
        self.causes = causes


class ResourceGone(KubeApiError):
    """410 Gone: the resourceVersion (or the list's ``continue`` token) is too old; re-list and diff."""

    retriable = True


class WatchSilent(KubeError):
    """A watch stream delivered nothing (not even a bookmark) within the inactivity deadline."""

    retriable = True


class StreamCorrupt(KubeError):
    """A watch stream or list body (or a read's answer) was not valid JSON of the expected shape (e.g. cut
    mid-line)."""

    retriable = True


def retriable_status(status: int) -> bool:
    """Whether an HTTP status from the apiserver is worth retrying: 408, 409 (on reads), 410, 429 and 5xx."""
    return status in (408, 409, 410, 429) or status >= 500


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (RFC 9110 §10.2.3; the apiserver sends delay-seconds).

    Returns None for a missing, negative or HTTP-date value (the apiserver never sends dates).
    """
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if seconds < 0 or seconds != seconds:  # negative or NaN
        return None
    return seconds


def api_error(status: int, message: str, *, retry_after: float | None = None) -> KubeApiError:
    """The typed error for an HTTP `status` (410 → ResourceGone), retriable per :func:`retriable_status`."""
    if status == 410:
        return ResourceGone(message, status=status, retry_after=retry_after)
    return KubeApiError(message, retriable=retriable_status(status), status=status, retry_after=retry_after)


CONNECTION_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
"""What the generated client raises when no answer came: translated to :class:`KubeConnectionError`."""


def from_api_exception(e: BaseException) -> KubeError:
    """The typed error for what a kubernetes_asyncio call raised: an ``ApiException`` → :class:`KubeApiError`
    (``HTTP <status>: <reason> <Status message>``, retriable per :func:`retriable_status`, 410 → ResourceGone,
    ``Retry-After`` read), a connection error or expired deadline (:data:`CONNECTION_ERRORS`) →
    :class:`KubeConnectionError` (``connection error: <repr>``; ``sent`` False for a connection never made); a
    :class:`KubeError` as it is.

    Raises:
        TypeError: `e` is none of these (a bug, not an answer of the apiserver).
    """
    if isinstance(e, KubeError):
        return e
    if isinstance(e, ApiException):
        return answer_error(int(e.status or 0), e.reason, e.body, e.headers)
    if isinstance(e, CONNECTION_ERRORS):
        return KubeConnectionError(f"connection error: {e!r}", sent=not isinstance(e, aiohttp.ClientConnectorError))
    raise TypeError(f"not an error of the Kubernetes client: {e!r}") from e


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Around a kubernetes_asyncio call (``with translated(): await api.read_…(…)``): what it raises as an
    ``ApiException`` or a connection error leaves as the typed error of :func:`from_api_exception` (the original
    chained as its cause); anything else as it is."""
    try:
        yield
    except (ApiException, *CONNECTION_ERRORS) as e:
        raise from_api_exception(e) from e


T = TypeVar("T")


async def kube_call(call: Awaitable[T]) -> T:
    """Await one kubernetes_asyncio request (or a coroutine making some) with only the apiserver's answers
    translated: an ``ApiException`` leaves as :func:`from_api_exception`'s :class:`KubeApiError` (410 a
    :class:`ResourceGone`; the original chained as its cause); a connection error or timeout passes through as it
    is, for callers that tell "cannot reach the apiserver" apart themselves (the operators' CLIs).

    Raises:
        KubeApiError: the apiserver answered with a non-2xx status.
    """
    try:
        return await call
    except ApiException as e:
        raise from_api_exception(e) from e


def answer_error(status: int, reason: str | None, body: object, headers: Mapping[str, str] | None) -> KubeApiError:
    """The :class:`KubeApiError` of an answer outside 2xx: ``HTTP <status>: <reason> <Status message>`` (the raw
    body when it holds no Status), retriable per :func:`retriable_status`, 410 → ResourceGone, ``Retry-After``
    read; `reason` and the Status ``message`` (cut to 300 characters) kept as its attributes."""
    reason = (reason or "").strip()
    doc = _status_doc(body)
    message = doc.get("message") if doc is not None else None
    message = message[:300] if isinstance(message, str) else ""
    told = message if doc is not None else _text(body)[:300]
    typed = api_error(status, f"HTTP {status}: {reason} {told}".strip(),
                      retry_after=parse_retry_after((headers or {}).get("Retry-After")))  # fmt: skip
    typed.reason, typed.server_message, typed.causes = reason, message, _causes(doc)
    return typed


def raise_for_answer(status: int, reason: str | None, body: bytes, headers: Mapping[str, str] | None) -> None:
    """For a raw (``_preload_content=False``) answer: raise its :func:`answer_error` when `status` is not 2xx.

    Raises:
        KubeApiError: `status` is not 2xx.
    """
    if not 200 <= status <= 299:
        raise answer_error(status, reason, body, headers)


def _text(raw: object) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes | bytearray) else str(raw or "")


def _status_doc(raw: object) -> dict[str, object] | None:
    """An answer's body read as a JSON object (the apiserver's Status), None when it is not one."""
    try:
        doc = json.loads(_text(raw))
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _causes(doc: Mapping[str, object] | None) -> tuple[str, ...]:
    """``details.causes`` of a Status, each ``<field>: <message>`` (the message alone without a field)."""
    details = doc.get("details") if doc is not None else None
    causes = details.get("causes") if isinstance(details, dict) else None
    out = []
    for cause in causes if isinstance(causes, list) else ():
        if isinstance(cause, dict):
            field, text = cause.get("field"), str(cause.get("message", ""))
            out.append(f"{field}: {text}" if field else text)
    return tuple(out)
