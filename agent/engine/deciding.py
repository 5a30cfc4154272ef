"""Deciding: one fault in, one :class:`~agent.engine.plan.Plan` per job it hits out.

Correlation (agent.core.correlate), admission into the job's incident (agent.core.incidents), the policy
(agent.core.policy) and the guards (the circuit breaker, the restart rate limit of agent.core.guards) are applied
here; nothing is written or published: :class:`agent.engine.acting.Acting` carries the plans out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import structlog

from agent.actions import PodRef
from agent.core.bookkeeping import BookkeepingIntent, bookkeeping_intent
from agent.core.cluster import JobKind, JobRecord
from agent.core.correlate import Correlation, JobHit, correlate
from agent.core.detect.pods import HOT_SWITCH_DELETE_REASON
from agent.core.faults import Fault, FaultKind, FaultLevel, fault_identity
from agent.core.guards import CircuitBreaker, TokenBucket
from agent.core.incidents import Admission, Incident, Phase, describe_fault
from agent.core.job_labels import FAULT_SCHEDULING_LABEL
from agent.core.policy import (
    STUCK_TERMINATING_REASON,
    Action,
    Decision,
    decide,
    escalation_decision,
    pending_escalation,
)
from agent.engine.context import EngineContext
from agent.engine.plan import Defer, Escalate, FaultDetected, ForceDeletePod, Hold, Observe, Plan, Recover, Step
from agent.engine.views import StateJobs, job_object, pods_for
from agent.sources.jobs import fault_scheduling_problem

log = structlog.get_logger(__name__)

_DECISIONS_KEPT = 100


@dataclass(frozen=True, slots=True)
class HotSwitchWait:
    """A ``subHealthyStrategy: hotSwitch`` job waiting for ClusterD's ``needVolcanoOpe: delete`` since `since`
    (when its sub-health fault was decided), for the fault `fault`."""

    job: JobRecord
    fault: Fault
    since: datetime


class Deciding:
    """Decides about faults for the jobs they hit, under the breaker and the restart rate limit.

    Args:
        ctx: the engine's shared parts (state, store, settings, clock, metrics).
        breaker: the circuit breaker (open: nothing but aborts is acted on).
    """

    def __init__(self, ctx: EngineContext, breaker: CircuitBreaker) -> None:
        p = ctx.settings.policy
        self.ctx = ctx
        self.breaker = breaker
        self.bucket = TokenBucket(p.restart_rate_per_min / 60.0, p.restart_burst, now_s=ctx.clock.now().timestamp())
        self.decisions: list[tuple[Fault, JobRecord, Decision]] = []  # the last decisions, for status and tests
        # faults handled while leading in this term (their identity): a new term re-evaluates the others
        self.handled: set[tuple[object, ...]] = set()
        # faults whose restart the open breaker held back (their identity): decided again after a person's reset
        self.held_back: set[tuple[object, ...]] = set()
        self.escalation_noted: set[tuple[str, str]] = set()  # (incident id, why not yet) logged once
        # job UID -> its hot switch wait (agent.engine.job_checks.JobChecks.check_hot_switch_waits bounds it)
        self.hot_switch_waits: dict[str, HotSwitchWait] = {}

    def new_term(self) -> None:
        """A new leadership term decides every active fault again (the faults handled or held back by an earlier
        term are not this term's)."""
        self.handled.clear()
        self.held_back.clear()

    def plan_escalation(self, job: JobRecord, incident: Incident, now: datetime) -> Plan | None:
        """The plan escalating `incident`'s pod-level restart to the whole job, or None while it need not (or may
        not) be: :func:`agent.core.policy.pending_escalation` says whether the replacement pods stayed unplaced
        for ``policy.pending_escalation_s``, :func:`agent.core.policy.escalation_decision` whether a restart is
        left; the circuit breaker and the restart rate limit apply as to any restart (held back: checked again at
        the next tick). Never a second time for one incident (`incident.escalated`)."""
        if (
            incident.phase is not Phase.RESTARTING
            or incident.action != Action.RESTART_PODS.value
            or incident.escalated
            or not incident.pods
            or incident.restart_at is None
        ):
            return None
        pods = self.ctx.state.pods_of_job(job.kind, job.namespace, job.name)
        why = pending_escalation(
            job, incident.pods, pods, incident.restart_at, now, self.ctx.settings.policy.pending_escalation_s
        )
        if why is None:
            return None
        decision = escalation_decision(job, self.ctx.store.ledger(job.uid), why)
        where = f"{job.namespace}/{job.name}"
        if decision.action is Action.NONE:
            self._note_once(incident.id, "no-budget", "pending pods not escalated", where, decision.reason)
            return None
        refusal = self.refusal()
        if refusal is not None:
            self._note_once(incident.id, "admission", "admission policy not in force: not escalating", where, refusal)
            return None
        if self.breaker.is_open:
            self._note_once(incident.id, "breaker", "circuit breaker open: not escalating", where, why)
            return None
        if not self.bucket.try_take(self.ctx.clock.now().timestamp()):
            self._note_once(incident.id, "throttled", "restart rate limit reached: escalation waits", where, why)
            return None
        log.info("decision", job=where, action=decision.action.value, reason=decision.reason, escalation=True)
        return Plan(steps=(Escalate(job, incident.id, decision, now),), decision=decision)

    def _note_once(self, incident_id: str, why: str, message: str, job: str, reason: str) -> None:
        if (incident_id, why) not in self.escalation_noted:
            self.escalation_noted.add((incident_id, why))
            log.warning(message, job=job, incident=incident_id, reason=reason)

    def plan_fault(
        self,
        fault: Fault,
        now: datetime,
        *,
        reevaluating: bool = False,
        again: bool = False,
        correlation: Correlation | None = None,
    ) -> list[Plan]:
        """The plans for `fault` (leader only; the caller checked the term): one per job it hits, or one
        ``fault.detected`` node event when it hits none.

        `reevaluating`: the fault is an active one a new leader takes up again; a job whose last restart already
        covered it (an incident acting or restarted after the fault's own time, in any generation) is left alone,
        so a takeover never restarts a job twice for one fault. `again` (and `reevaluating`): the fault was decided
        before (the rate limit deferred it), so its decision is not timed again (see :meth:`plan_hit`).
        `correlation`: the fault correlated against the state as it is now (the caller's), else correlated here."""
        self.handled.add(fault_identity(fault))
        if correlation is None:
            state = self.ctx.state
            correlation = correlate(fault, pods_for(state, fault), StateJobs(state), state.device_allocations)
        if not correlation.hits:
            return [Plan(events=(FaultDetected(fault),))]
        plans: list[Plan] = []
        for hit in correlation.hits:
            if reevaluating and hit.actionable and self.ctx.store.covers(hit.job, fault, hit.pods):
                # an open incident absorbs it: remembered, so it is decided again if still active when that closes
                self.ctx.store.note_joined(hit.job, fault)
                log.info("active fault already handled for this job", job=f"{hit.job.namespace}/{hit.job.name}")
                continue
            plans.append(self.plan_hit(fault, hit, now, timed=not (reevaluating or again)))
        return plans

    def plan_hit(
        self, fault: Fault, hit: JobHit, now: datetime, *, redeciding: bool = False, timed: bool = True
    ) -> Plan:
        """The plan for one job `fault` hits: admission into its incident, the policy's decision, the guards.

        `redeciding`: a fault that joined the job's closed incident is decided again (not dropped as stale).
        `timed`: the decision is observed in ``fault_agent_decision_seconds`` (seen → decided, seconds); a fault
        decided before (deferred, re-evaluated, `redeciding`) is not, or its age would read as a slow decision."""
        job = hit.job
        ref = job_object(job)
        if not hit.actionable:
            problem = fault_scheduling_problem(job.label(FAULT_SCHEDULING_LABEL))
            if problem is not None:  # a person meant to opt in: say why the job is not rescheduled
                log.warning("fault on a job whose opt-in label is unreadable; not rescheduled",
                            job=f"{job.namespace}/{job.name}", problem=problem)  # fmt: skip
            return Plan(events=(FaultDetected(fault, ref),))
        if self.ctx.settings.policy.mode == "observe":
            return self._plan_observed(fault, hit, now)
        started = self.ctx.clock.monotonic()
        store = self.ctx.store
        admission = store.admit(job, fault, hit.pods)
        if admission is Admission.JOINED:
            current = store.incident(job.uid)
            incident_id = current.id if current else None
            log.info("fault joined the open incident", incident=incident_id, job=f"{job.namespace}/{job.name}")
            return Plan(events=(FaultDetected(fault, ref, incident_id),))
        stuck = fault.kind is FaultKind.DISRUPTION and fault.reason == STUCK_TERMINATING_REASON
        if admission is Admission.HELD and self.breaker.is_open and not stuck:
            # a pod stuck terminating on a dead node is freed whatever the breaker holds (not a restart: someone
            # already deleted it; agent.core.policy), as before incidents were held
            held = store.join_held(job.uid, fault)
            self.handled.discard(fault_identity(fault))  # decided again after a person's reset
            self.held_back.add(fault_identity(fault))
            log.info("fault joined the incident the circuit breaker holds", incident=held.id if held else None,
                     job=f"{job.namespace}/{job.name}")  # fmt: skip
            return Plan(events=(FaultDetected(fault, ref, held.id if held else None),))
        if admission is Admission.STALE and not redeciding:
            log.info("fault older than the job's last incident; ignored", job=f"{job.namespace}/{job.name}")
            return Plan()
        ledger = store.ledger(job.uid)
        others = self._other_faults(fault, job) if fault.level is FaultLevel.SUB_HEALTH else ()
        decision = self._unless_refused(fault, job, decide(fault, hit, ledger, self.ctx.settings.policy, now,
                                                            other_faults=others))  # fmt: skip
        if timed and not redeciding:
            lag = max(0.0, (now - fault.observed_at).total_seconds())
            self.ctx.metrics.decision(self.ctx.clock.monotonic() - started + lag)
        self.decisions.append((fault, job, decision))
        del self.decisions[:-_DECISIONS_KEPT]
        if self.ctx.on_decision is not None:
            self.ctx.on_decision(fault, job, decision)
        log.info(
            "decision", job=f"{job.namespace}/{job.name}", action=decision.action.value, reason=decision.reason,
            node=fault.node or None, fault_reason=fault.reason or None, codes=list(fault.codes) or None,
            detail=fault.detail or None, devices=list(fault.devices) or None,
        )  # fmt: skip
        if decision.awaits_hot_switch:
            self.hot_switch_waits.setdefault(job.uid, HotSwitchWait(job, fault, now))
        elif fault.reason == HOT_SWITCH_DELETE_REASON and self.hot_switch_waits.pop(job.uid, None) is not None:
            self.ctx.metrics.action("hot-switch-wait", "switched")  # ClusterD's request came before the tick saw it
        # MindCluster's bookkeeping ConfigMaps name Volcano Jobs and AscendJobs only: none for a JobSet
        keep = self.ctx.settings.policy.bookkeeping and decision.restarts and job.kind is not JobKind.JOBSET
        steps = self._guarded(
            fault, job, decision, now, bookkeeping_intent(fault, hit, decision, ledger) if keep else None
        )
        # a Recover or Hold step publishes the fault's event itself, naming the incident it opens
        # (agent.engine.acting)
        events = () if any(isinstance(s, Recover | Hold) for s in steps) else (FaultDetected(fault, ref),)
        return Plan(events=events, steps=steps, decision=decision)

    def refusal(self) -> str | None:
        """Why the agent must not act now (fail closed: its admission policy not in force), else None."""
        return self.ctx.admission_refusal() if self.ctx.admission_refusal is not None else None

    def _unless_refused(self, fault: Fault, job: JobRecord, decision: Decision) -> Decision:
        """`decision`, or, when it would write (anything but NONE and HAND_OFF) while the agent must not act
        (:meth:`refusal`), a NONE decision ``refused: admission policy not in force (<why>); would <action>:
        <reason>``: logged as an error, counted (fault_agent_actions_total{result="policy_not_in_force"}) and
        held back like the open breaker's, so it is decided again once the policy is in force."""
        if decision.action in (Action.NONE, Action.HAND_OFF):
            return decision
        why = self.refusal()
        if why is None:
            return decision
        log.error("admission policy not in force: not acting", job=f"{job.namespace}/{job.name}",
                  would=decision.action.value, reason=decision.reason, detail=why)  # fmt: skip
        self.ctx.metrics.action(decision.action.value, "policy_not_in_force")
        self.handled.discard(fault_identity(fault))
        self.held_back.add(fault_identity(fault))
        return Decision(
            Action.NONE,
            f"refused: admission policy not in force ({why}); would {decision.action.value}: {decision.reason}",
            business_left=decision.business_left,
            restarts_left=decision.restarts_left,
        )

    def _plan_observed(self, fault: Fault, hit: JobHit, now: datetime) -> Plan:
        """Observe mode: no incident, no guard, no step that writes: one :class:`Observe` step, which watches the
        job for someone else's restart when the policy would restart it (agent.core.observe.worth_watching) or
        joins the job's open observation, and publishes the fault."""
        job = hit.job
        others = self._other_faults(fault, job) if fault.level is FaultLevel.SUB_HEALTH else ()
        decision = decide(
            fault, hit, self.ctx.store.ledger(job.uid), self.ctx.settings.policy, now, other_faults=others
        )
        self.decisions.append((fault, job, decision))
        del self.decisions[:-_DECISIONS_KEPT]
        log.info("observe mode: decided, not acting", job=f"{job.namespace}/{job.name}",
                 would=decision.action.value, reason=decision.reason)  # fmt: skip
        return Plan(steps=(Observe(fault, job, decision, now),), decision=decision)

    def _other_faults(self, fault: Fault, job: JobRecord) -> list[Fault]:
        """The job's other active faults (the detectors' active set, each correlated again): what decides whether
        a sub-health fault takes the sub-health strategy or the normal path."""
        if self.ctx.active_faults is None:
            return []
        state, jobs = self.ctx.state, StateJobs(self.ctx.state)
        out: list[Fault] = []
        for other in self.ctx.active_faults():
            if other.key == fault.key and other.pod == fault.pod:
                continue
            hits = correlate(other, pods_for(state, other), jobs, state.device_allocations).hits
            if any(h.job.uid == job.uid for h in hits):
                out.append(other)
        return out

    def _guarded(
        self, fault: Fault, job: JobRecord, decision: Decision, now: datetime, bookkeeping: BookkeepingIntent | None
    ) -> tuple[Step, ...]:
        """The step `decision` asks for, once the breaker and the restart rate limit had their say."""
        if decision.action is Action.NONE:
            return ()
        if decision.action is Action.FORCE_DELETE_PODS:
            pod = fault.pod
            return () if pod is None else (ForceDeletePod(PodRef(pod.namespace, pod.name, pod.uid)),)
        if decision.action not in (Action.ABORT, Action.HAND_OFF) and self.breaker.is_open:
            reason = held_reason(fault, decision)
            log.warning("circuit breaker open: incident held", job=f"{job.namespace}/{job.name}", reason=reason)
            self.ctx.metrics.action(decision.action.value, "breaker_open")
            # not handled: a person's reset (or a new term) decides it again while it is still active
            self.handled.discard(fault_identity(fault))
            self.held_back.add(fault_identity(fault))
            trip = self.breaker.trip
            return (Hold(fault, job, decision, now, reason, trip.reason if trip is not None else ""),)
        if decision.restarts and not self.bucket.try_take(self.ctx.clock.now().timestamp()):
            log.warning("restart rate limit reached: deferred", job=f"{job.namespace}/{job.name}")
            self.ctx.metrics.action(decision.action.value, "throttled")
            return (Defer(fault, job.uid),)
        return (Recover(fault, job, decision, now, bookkeeping),)


def held_reason(fault: Fault, decision: Decision) -> str:
    """The reason of an incident the open circuit breaker holds: what the policy would do (`decision`'s action and
    mode, never its "restarting …, (N restarts left)" sentence: nothing is restarted and nothing charged), the
    fault, and how to go on (why the breaker tripped is in ``recovery.held``'s ``breaker_reason``)."""
    mode = f" in {decision.mode.value} mode" if decision.mode.value not in ("", "off") else ""
    return (
        f"held by the open circuit breaker: the policy would {decision.action.value}{mode} for "
        f"{describe_fault(fault)}; nothing is restarted until a person runs `fault-agent breaker reset`"
    )
