"""Fencing: a replica that is no longer sure it leads sends nothing, and an old leader's late write fails.

Leader election alone does not stop two replicas from acting: a leader frozen past its Lease (SIGSTOP, a long
GC-like stall, a laptop lid) wakes up still believing it leads, and the standby has taken over meanwhile (seen:
two RestartJob Commands for one fault in 6 of 9 tries). Two mechanisms close that:

1. **The lease fence on every write** (agent.leader, agent.actions.writer). The writer asks the elector, right
   before each write is sent, how much of its leadership is left: ``renew_deadline_s`` minus the time since
   its last successful Lease write was *sent*, on the monotonic clock (which keeps counting while the process is
   stopped). At or below zero the write raises :class:`NotLeader` and nothing is sent; above it, the request's
   own deadline is cut to what is left, so a request that cannot be answered while the lease holds is
   abandoned. When the renew deadline passes the elector steps down at once (a timer, not the next round) and
   the agent cancels its in-flight action tasks (``act:``, ``grace:``, ``taint:``).
2. **The decisive write carries a precondition** (the *claim*, RecoveryEngine._claim). Before any restart of a
   job (RestartJob Command, pod deletions, resubmission, also an abort) the acting replica writes the incident
   onto the job together with :data:`ACTOR_ANNOTATION` = ``<identity>#<term>``, with the job's
   resourceVersion as it saw it when it decided as a precondition. Any write to the job since then (another
   replica's claim above all) makes it fail with 409; the replica then reads the job again and claims again
   only if no other actor has appeared on it. An abort and a resubmission are sent only after a successful
   claim; a restart (RestartJob Command or pod deletions) goes out *together* with its claim, one apiserver
   round trip after the decision (issue 19), handed to the writer after it so its fence check comes second:
   agent.engine.acting.Acting._restart_with_claim argues case by case why no order in which the two land, and
   no crash between them, restarts a job twice for one fault.

Why no ordering of an old leader O and a new leader N restarts a job twice for one fault:

- N leads only after it saw O's last Lease record unchanged for ``lease_duration_s``; O's last Lease write was
  sent before N saw it. O's fence closes ``renew_deadline_s`` after that send, so it closes at least
  ``lease_duration_s - renew_deadline_s`` (5 s by default) before N's term opens: O and N never both pass the
  fence at one instant (assuming the two monotonic clocks run at the same rate, as client-go does).
- So O's write can land in N's term only if it passed the fence before N's term and then was delayed. If it is
  O's claim: when N has claimed the job already, O's precondition (a resourceVersion from before N's claim)
  fails and O stops (its retry is fenced); when N has not, O's claim lands, O's next write (the Command) is
  fenced, and N finds an incident left ``acting`` by another actor, which it resumes by claiming it itself
  (precondition: the version it read) — one Command, N's.
- If it is O's Command, O claimed the job before N's term, so N resumes O's incident rather than opening a new
  one, and its Command has the same deterministic name (:func:`agent.actions.writer.command_name`).
- With the restart sent together with the claim, O's delayed claim may come with O's delayed Command: when
  N's claim finds O's actor but N's own Command was sent, N keeps its incident (it is the restart), and O's
  Command, decided on the same job state, has the same name as N's (the incident id is derived from the job's
  UID, generation and incident count), so the apiserver answers 409 while Volcano has not run N's yet.
- What a lease cannot fence: a request that passed the check and then reaches the apiserver more than
  ``lease_duration_s - renew_deadline_s`` later, after Volcano deleted N's Command of the same name (the request
  deadline cut to the lease's remaining time makes that require a request already handed to the kernel, or an
  apiserver holding it for seconds). Kubernetes' own leader election has the same limit.
"""

from __future__ import annotations

from agent.core.incidents import ANNOTATION_PREFIX

ACTOR_ANNOTATION = ANNOTATION_PREFIX + "actor"
"""Who claimed the job's current incident: ``<identity>#<term>`` of the replica that acted (see module doc)."""


class NotLeader(Exception):
    """A write was not sent: this replica's leadership (lease fence) has run out. Carries `action` and `target`.

    Raised by the cluster writer; the engine stops the step it was on and leaves the incident as the job's
    annotation says (the leader that holds the Lease resumes it)."""

    def __init__(self, action: str, target: str) -> None:
        super().__init__(f"{action} {target}: not sent, this replica no longer holds the leader Lease")
        self.action = action
        self.target = target


def may_claim(current: str | None, expected: set[str | None], mine: str) -> bool:
    """Whether a replica acting as `mine` may claim a job whose :data:`ACTOR_ANNOTATION` is `current`: it is
    this replica's own, or one it already knew of (`expected`: what the job carried when this term adopted it).
    Another actor appearing during this term is a late write of an old leader: the caller adopts that incident
    from the job (and resumes it) instead of opening its own."""
    return current == mine or current in expected
