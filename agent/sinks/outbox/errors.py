"""Why the outbox cannot be used or take events: :class:`OutboxError` and its two cases a caller tells apart."""

from __future__ import annotations


class OutboxError(Exception):
    """The outbox directory cannot be used (permissions, disk full, a broken cursor file).

    Attributes:
        retriable: True when trying again later may work (disk full, I/O error), False for a broken setup.
    """

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class OutboxInUse(OutboxError):
    """Another process holds the outbox directory (its ``lock``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


class OutboxFull(OutboxError):
    """Appending would take the outbox past ``max_bytes``; the batch was not written."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=True)
