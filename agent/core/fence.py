"""Fencing: a replica that is no longer sure it leads sends nothing, and an old leader's late write fails.

Leader election alone does not stop two replicas from acting: a leader frozen past its Lease (SIGSTOP, a long
GC-like stall, a laptop lid) wakes up still believing it leads, and the standby has taken over meanwhile (seen:
two RestartJob Commands for one fault in 6 of 9 tries). Two mechanisms close that:

1. **The lease fence on every write** (agent.runtime.leader, agent.actions.writer). The writer asks the elector, right
   before each write is sent, how much of its leadership is left: ``renew_deadline_s`` minus the time since
   its last successful Lease write was *sent*, on the monotonic clock (which keeps counting while the process is
   stopped). At or below zero the write raises :class:`NotLeader` and nothing is sent; above it, the request's
   own deadline is cut to what is left, so a request that cannot be answered while the lease holds is
   abandoned. When the renew deadline passes the elector steps down at once (a timer, not the next round) and
   the agent cancels its in-flight action tasks (``act:``, ``grace:``, ``taint:``).
2. **The decisive write carries a precondition** (the *claim*, agent.engine.claiming.Claiming.try_claim), on an object
   the agent owns: the job's record, ConfigMap ``fault-agent-job-<job UID>`` in the agent's namespace
   (agent.core.records; never the job object, whose controller updates it read-modify-write and would see its
   updates fail with 409 under our writes). Before any restart of a job (RestartJob Command, pod deletions,
   resubmission, also an abort) the acting replica writes the incident and ledger into the record together with
   its ``actor`` key = ``<identity>#<term>``: an atomic *create* when the replica knows of no record (409
   AlreadyExists: someone wrote one), else a *replace* with the record's resourceVersion as the replica last saw
   it as precondition. Any write to the record since then (another replica's claim above all) makes it fail
   with 409; the replica then reads the record again and claims again only if no other actor has appeared on
   it (:func:`may_claim`). An abort and a resubmission are sent only after a successful claim; a restart
   (RestartJob Command or pod deletions) goes out *together* with its claim, one apiserver round trip after the
   decision (issue 19), handed to the writer after it so its fence check comes second:
   agent.engine.sending.Sending._restart_with_claim argues case by case why no order in which the two land, and
   no crash between them, restarts a job twice for one fault.

Why no ordering of an old leader O and a new leader N restarts a job twice for one fault:

- N leads only after it saw O's last Lease record unchanged for ``lease_duration_s``; O's last Lease write was
  sent before N saw it. O's fence closes ``renew_deadline_s`` after that send, so it closes at least
  ``lease_duration_s - renew_deadline_s`` (5 s by default) before N's term opens: O and N never both pass the
  fence at one instant (assuming the two monotonic clocks run at the same rate, as client-go does).
- So O's write can land in N's term only if it passed the fence before N's term and then was delayed. If it is
  O's claim: when N has claimed the job already, the record changed after O last read it (N's create or replace
  gave it a new resourceVersion), so O's precondition fails (a create: AlreadyExists; a replace: a stale
  resourceVersion) and O stops (its retry is fenced); when N has not, O's claim lands, O's next write (the
  Command) is fenced, and N finds an incident left ``acting`` by another actor in the record, which it resumes
  by claiming it itself (precondition: the record's version it read) — one Command, N's.
- If it is O's Command, O claimed the job before N's term, so N resumes O's incident rather than opening a new
  one, and its Command has the same deterministic name (:func:`agent.actions.writer.command_name`).
- The same name only helps while the Command exists: Volcano deletes a Command as soon as its job controller
  takes it, and writes the job's ``status.version`` + 1 only after the pods' deletions (volcano.sh/volcano
  pkg/controllers/job job_controller_handler.go ``processNextCommand``, job_controller_actions.go ``killPods``).
  A successor resuming an ``acting`` incident inside that gap finds the old version in its cache and in a GET, and
  a Command of the same name is created anew: a second restart. Two cases:
  - N is O's own process in a later term (a replica that lost its Lease may take it back at once; seen on the
    testbed under load: 11-13 Commands for 10 faults). The process remembers which incidents' Commands it may have
    sent, whatever the term (agent.engine.inflight.RestartsInFlight.command_sent: a create that was taken,
    answered with a lost answer, or cut short in flight), and a resume of such an incident records the restart
    without sending it (agent.engine.ticking.Ticking._resume_acting): a Command that did not land is covered as
    any unconfirmed one is, by the force follow-up and the recovery deadline.
  - N is another process: its term opens at least ``lease_duration_s - renew_deadline_s`` after O's last
    write passed the fence, so Volcano had that long to write the new version before N's GET. A Volcano slower
    than that (an overloaded controller) remains a window, as a delayed request does below.
- With the restart sent together with the claim, O's delayed claim may come with O's delayed Command: when
  N's claim finds O's actor but N's own Command was sent, N keeps its incident (it is the restart), and O's
  Command, decided on the same job state, has the same name as N's (the incident id is derived from the job's
  UID, generation and incident count), so the apiserver answers 409 while Volcano has not run N's yet.
- The record is the agent's own: nobody else writes it, so its resourceVersion moves only with a claim or a
  persisted step of some replica, and a claim's 409 always means another write of ours. Unlike the old claim on
  the job object, it says nothing about the job: that the job (its ``status.version``) was as cached when the
  restart went out is checked on the job itself where it matters (the force follow-up,
  agent.engine.sending.Sending._restart_with_claim), and a resumed incident whose job generation moved on is only
  recorded, never restarted again (agent.engine.ticking.Ticking._resume_acting).
- What a lease cannot fence: a request that passed the check and then reaches the apiserver more than
  ``lease_duration_s - renew_deadline_s`` later, after Volcano deleted N's Command of the same name (the request
  deadline cut to the lease's remaining time makes that require a request already handed to the kernel, or an
  apiserver holding it for seconds). Kubernetes' own leader election has the same limit.
"""

from __future__ import annotations

from agent.core.incidents import ANNOTATION_PREFIX

ACTOR_ANNOTATION = ANNOTATION_PREFIX + "actor"
"""Earlier versions' job annotation naming who claimed the job's incident (read once to migrate a job; the job
record's ``actor`` key now, agent.core.records): ``<identity>#<term>`` of the replica that acted."""


class NotLeader(Exception):
    """A write was not sent: this replica's leadership (lease fence) has run out. Carries `action` and `target`.

    Raised by the cluster writer; the engine stops the step it was on and leaves the incident as the job's
    record says (the leader that holds the Lease resumes it)."""

    def __init__(self, action: str, target: str) -> None:
        super().__init__(f"{action} {target}: not sent, this replica no longer holds the leader Lease")
        self.action = action
        self.target = target


def may_claim(current: str | None, expected: set[str | None], mine: str) -> bool:
    """Whether a replica acting as `mine` may claim a job whose record's ``actor`` is `current` (None: no record):
    it is this replica's own, or one it already knew of (`expected`: what the record said when this term adopted
    the job). Another actor appearing during this term is a late write of an old leader: the caller adopts that
    incident from the record (and resumes it) instead of opening its own."""
    return current == mine or current in expected
