"""The one owner of the restarts in flight: what this replica is doing about each job's incident right now.

Everything the engine remembers about a restart between deciding it and its incident closing, besides the incident
itself (which the :class:`~agent.core.incidents.IncidentStore` holds and the job's record persists), lives here and
changes only through the named operations of :class:`RestartsInFlight`:

- :meth:`~RestartsInFlight.begin` / :meth:`~RestartsInFlight.end`: the job UIDs whose incident a task of this
  replica acts on (between opening it and the restart being sent). The tick must not mistake such an ``acting``
  incident for one a previous leader left behind, nor the records sweep delete its job's record.
- :meth:`~RestartsInFlight.plan_bookkeeping` / :meth:`~RestartsInFlight.take_bookkeeping`: what to record
  (agent.engine.bookkeeping) once the restart is sent.
- :meth:`~RestartsInFlight.mark_unsent` / :meth:`~RestartsInFlight.sent`: why a restart was last not sent (a failed
  claim), the detail of its failure when the recovery deadline passes first (agent.engine.ticking).
- :meth:`~RestartsInFlight.keep` / :meth:`~RestartsInFlight.release`: old job UIDs whose resubmission was cut
  short after the delete; its record (a ConfigMap) is left and the leader finishes it on a tick
  (agent.engine.resubmitting); their ``acting`` incident is not abandoned meanwhile.
- :meth:`~RestartsInFlight.command_sent`: incidents whose RestartJob Command this process may have created
  (agent.actions.recovery.restart_job ``command_sent``): kept across this process's terms, as what it sent is a
  fact, not a belief about the jobs. Volcano deletes a Command once it ran it, before the job's ``status.version``
  moves, so another of the same name would run again: a new term resuming such an incident records the restart
  instead (agent.engine.ticking.Ticking._resume_acting; agent.core.fence).
- :meth:`~RestartsInFlight.finish`: an incident closed; a closed ``resubmit`` incident makes a record it left
  stale (:meth:`~RestartsInFlight.take_resubmission_closed`).
- :meth:`~RestartsInFlight.new_term`: what a new leadership term forgets.

Pure state: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.core.bookkeeping import BookkeepingIntent
from agent.core.faults import FaultKind
from agent.core.policy import Action

COMMANDS_SENT_KEPT = 4096
"""How many incidents' sent RestartJob Commands :meth:`RestartsInFlight.command_sent` remembers (oldest go first)."""
UNSENT_DETAIL_CHARS = 300
"""The longest detail :meth:`RestartsInFlight.mark_unsent` keeps, characters (it ends up in a recovery.failed)."""


class RestartsInFlight:
    """The restarts this replica has in flight (see the module docstring). Keys: job UIDs (``executing``, ``kept``)
    and incident ids (the rest)."""

    def __init__(self) -> None:
        self._executing: set[str] = set()
        self._kept: set[str] = set()
        self._unsent: dict[str, str] = {}
        self._fault_kind: dict[str, FaultKind] = {}
        self._bookkeeping: dict[str, BookkeepingIntent] = {}
        self._commands_sent: dict[str, None] = {}  # insertion order: oldest first
        self._resubmission_closed = False

    # ------------------------------------------------------------------ a task acting on a job's incident

    def begin(self, job_uid: str) -> None:
        """A task of this replica starts acting on `job_uid`'s incident."""
        self._executing.add(job_uid)

    def end(self, job_uid: str, incident_id: str | None = None) -> None:
        """That task ended (sent, failed, or stopped): `job_uid` is idle again, and a bookkeeping intent of
        `incident_id` not taken by the restart is dropped (a resume rebuilds it)."""
        self._executing.discard(job_uid)
        if incident_id is not None:
            self._bookkeeping.pop(incident_id, None)

    def acting_on(self, job_uid: str) -> bool:
        """Whether a task of this replica acts on `job_uid`'s incident now."""
        return job_uid in self._executing

    def executing(self) -> frozenset[str]:
        """The job UIDs :meth:`acting_on` is true for (a copy)."""
        return frozenset(self._executing)

    def note_fault_kind(self, incident_id: str, kind: FaultKind) -> None:
        """The kind of the fault that opened `incident_id` (the ``recovery_seconds`` metric's label)."""
        self._fault_kind[incident_id] = kind

    def plan_bookkeeping(self, incident_id: str, intent: BookkeepingIntent | None) -> None:
        """What to record once `incident_id`'s restart is sent (None: nothing)."""
        if intent is not None:
            self._bookkeeping[incident_id] = intent

    def take_bookkeeping(self, incident_id: str) -> BookkeepingIntent | None:
        """The intent :meth:`plan_bookkeeping` left for `incident_id`, removed (the restart is being sent)."""
        return self._bookkeeping.pop(incident_id, None)

    # ------------------------------------------------------------------ sending

    def mark_unsent(self, incident_id: str, why: str) -> None:
        """`incident_id`'s restart was not sent this time, because of `why` (cut to UNSENT_DETAIL_CHARS)."""
        self._unsent[incident_id] = why[:UNSENT_DETAIL_CHARS]

    def unsent(self, incident_id: str) -> str | None:
        """Why `incident_id`'s restart was last not sent; None when it was not refused (or was sent since)."""
        return self._unsent.get(incident_id)

    def sent(self, incident_id: str) -> None:
        """`incident_id`'s restart went out (or failed for good): no longer unsent."""
        self._unsent.pop(incident_id, None)

    def command_sent(self, incident_id: str) -> None:
        """`incident_id`'s RestartJob Command may have reached the apiserver; the oldest beyond
        COMMANDS_SENT_KEPT are forgotten."""
        self._commands_sent.pop(incident_id, None)
        self._commands_sent[incident_id] = None
        while len(self._commands_sent) > COMMANDS_SENT_KEPT:
            del self._commands_sent[next(iter(self._commands_sent))]

    def command_was_sent(self, incident_id: str) -> bool:
        """Whether this process may have created `incident_id`'s RestartJob Command (in any of its terms)."""
        return incident_id in self._commands_sent

    def commands_sent(self) -> tuple[str, ...]:
        """The incidents :meth:`command_was_sent` is true for, oldest first."""
        return tuple(self._commands_sent)

    # ------------------------------------------------------------------ resubmissions cut short

    def keep(self, job_uid: str) -> None:
        """`job_uid` was deleted for a resubmission that did not finish; its record is kept for a later pass."""
        self._kept.add(job_uid)

    def release(self, job_uid: str) -> None:
        """`job_uid`'s resubmission finished, or its incident ends as its job's absence says."""
        self._kept.discard(job_uid)

    def keep_only(self, job_uids: Iterable[str]) -> None:
        """Release every kept job UID not in `job_uids` (its record is gone: someone finished it)."""
        self._kept.intersection_update(job_uids)

    def is_kept(self, job_uid: str) -> bool:
        """Whether `job_uid`'s resubmission was cut short and its record is kept."""
        return job_uid in self._kept

    def kept(self) -> frozenset[str]:
        """The job UIDs :meth:`is_kept` is true for (a copy)."""
        return frozenset(self._kept)

    def take_resubmission_closed(self) -> bool:
        """Whether a ``resubmit`` incident closed since the last call (a record it left is stale now); reset."""
        closed, self._resubmission_closed = self._resubmission_closed, False
        return closed

    def resubmission_closed(self) -> bool:
        """Whether a ``resubmit`` incident closed since :meth:`take_resubmission_closed` was last called."""
        return self._resubmission_closed

    # ------------------------------------------------------------------ the end

    def finish(self, incident_id: str, action: str | None) -> FaultKind:
        """`incident_id` closed (recovered or failed; `action` its incident's action): forget it. Returns the kind
        of the fault that opened it (CHIP when unknown: an adopted incident)."""
        kind = self._fault_kind.pop(incident_id, FaultKind.CHIP)
        self._unsent.pop(incident_id, None)
        self._commands_sent.pop(incident_id, None)
        if action == Action.RESUBMIT.value:
            self._resubmission_closed = True
        return kind

    def abandoned(self, incident_id: str) -> FaultKind:
        """`incident_id`'s job is gone and the incident ended as abandoned. Returns the kind of the fault that
        opened it (CHIP when unknown)."""
        return self._fault_kind.pop(incident_id, FaultKind.CHIP)

    def new_term(self) -> None:
        """A new leadership term: the kept resubmissions are found again from their records
        (agent.engine.resubmitting). The tasks still running and the sent Commands (facts about this process)
        stay; so does the rest, which their incidents' ends remove (:meth:`finish`, :meth:`end`)."""
        self._kept.clear()
