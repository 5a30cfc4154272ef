"""Typed errors at the Kubernetes boundary.

Every error carries `retriable`: True when the same request may succeed later (connection refused, 5xx,
429, a silent stream, 410 Gone after a re-list), False when retrying cannot help without a person (bad
kubeconfig, 401/403/404 on a resource that does not exist). The forever loop of the watch engine retries
both, but non-retriable ones at the ceiling of the backoff and with an error-level log line.
"""

from __future__ import annotations


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
    ) -> None:
        super().__init__(message, retriable=retriable, status=status, retry_after=retry_after)
        self.reason = reason
        self.server_message = server_message


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
