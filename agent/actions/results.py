"""Typed results of cluster writes: done, already done (404/409: someone got there first), failed, dry run."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.StrEnum):
    DONE = "done"
    ALREADY_DONE = "already_done"  # 404 / 409 / precondition failed / nothing to change
    FAILED = "failed"
    DRY_RUN = "dry_run"  # shadow mode: nothing was written

    @property
    def ok(self) -> bool:
        """True unless the write failed."""
        return self is not Outcome.FAILED


@dataclass(frozen=True, slots=True)
class ActionResult:
    """The result of one write.

    Attributes:
        action: a short slug, e.g. "restart-command", "delete-pod", "reset-rings", "taint", "untaint".
        target: the object written, e.g. "Pod/ns/name".
        outcome: see :class:`Outcome`.
        detail: a sentence for the log line (the API's message on failure).
        retriable: for FAILED, whether the same write may succeed later.
        status: the HTTP status when the apiserver answered, else None.
        name: the name the server gave a created object (generateName), else "".
        uid: the UID of the object a create made (or found already made), else "".
        kept: for a resubmission that failed after its job was deleted, the ConfigMap that still holds it (a
            leader finishes it: agent.core.resubmission), else "".
    """

    action: str
    target: str
    outcome: Outcome
    detail: str = ""
    retriable: bool = False
    status: int | None = None
    name: str = ""
    uid: str = ""
    kept: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome.ok


def combine(action: str, target: str, results: list[ActionResult]) -> ActionResult:
    """One result for several writes: FAILED if any failed (retriable only if all failures are), DRY_RUN if
    all were dry runs, DONE if any was done, else ALREADY_DONE (also for an empty list)."""
    failed = [r for r in results if r.outcome is Outcome.FAILED]
    if failed:
        return ActionResult(
            action,
            target,
            Outcome.FAILED,
            "; ".join(f"{r.target}: {r.detail}" for r in failed),
            retriable=all(r.retriable for r in failed),
        )
    if results and all(r.outcome is Outcome.DRY_RUN for r in results):
        return ActionResult(action, target, Outcome.DRY_RUN, f"{len(results)} writes skipped (dry run)")
    if any(r.outcome is Outcome.DONE for r in results):
        done = sum(r.outcome is Outcome.DONE for r in results)
        return ActionResult(action, target, Outcome.DONE, f"{done} of {len(results)} written")
    return ActionResult(action, target, Outcome.ALREADY_DONE, f"{len(results)} already done")
