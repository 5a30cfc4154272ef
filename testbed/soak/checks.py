"""The soak's invariants, checked over what was observed. Pure: no I/O, no clock; times are seconds on the
soak's own clock (0 = its start), passed in.

What the runner observes (:class:`Observed`): the faults it injected and when (the ground truth), the
disruptions it caused (agents killed or frozen, Kafka frozen or killed, the apiserver frozen), the job pods it
saw every second, every RestartJob Command it saw created (a watch), every record on the agent's topics
(partition, offset), every event the agents wrote to their outboxes (the outbox is a write-ahead log: an event
exists there before the agent treats it as sent), and the agents' /readyz and /metrics every second.

The invariants (each :func:`check_*` returns its :class:`Violation` list):

1. placement: no job keeps a live pod on a chip or node whose fault (at a level that isolates it: SeparateNPU,
   NodeD SeparateFault, switch Separate, NotReady) is older than ``bounds.placement_s`` of acting time. Acting
   time leaves out the spans in which no agent could act: the apiserver stopped (and, for NotReady, the agent's
   node-health recheck after it), the leader killed or frozen until its standby's takeover;
2. restarts: at most one RestartJob Command per incident; every Command has a cause: a fault at an acting level
   on a chip or node the job had a pod on, active at the Command (or ended at most ``bounds.cause_slack_s`` of
   acting time before it), or a failed or evicted pod of the job as recent as the placement bound or still
   listed, failed, just before the Command;
3. events: every event an agent created is in Kafka; every event in Kafka was created; one id is one event
   (same type, key, subject, incident); a second copy of an id is a re-send the design allows (at-least-once
   across crashes, replay after a hung broker, a successor's re-publication) only when an agent or Kafka
   disruption or a leadership change began before it and the first copy came at most ``bounds.resend_window_s``
   after that ended; a job's events are in order in its stream (recovery.started before its incident's terminal event,
   fault.detected before the fault.cleared that names it, one partition per key);
4. lifecycle: every incident with a recovery.started has exactly one terminal event (recovery.succeeded or
   recovery.failed, by distinct id); the agents' ``fault_agent_recovery_seconds`` samples (summed over every
   process, each at its last scrape) equal the incidents ended, less at most those that ended between a killed
   process's last scrape and its death;
5. health: no agent process exits unless the soak killed or stopped it; ``fault_agent_task_failures_total``
   stays 0; /readyz answers 200 except in an agent's first ``bounds.startup_s`` after a start, and while the
   apiserver is stopped (and ``bounds.apiserver_grace_s`` after);
6. controller: the agent costs Volcano's job controller nothing (issue 35): its status-update conflicts ("the
   object has been modified" in its log during the run) caused by the agent are 0 (those on a job whose
   ``fault-agent.io/…`` annotations changed at most 2 s before), and the agent changes nothing on job objects
   (no such annotation change on the job watch); counted by :mod:`testbed.controller_costs`, as
   ``bench/bench_e2e.py`` counts them. The conflicts in all and the pods created then killed again per restart are
   figures, not invariants: the schedule's own evictions, NotReady nodes and second faults on a restarting job
   kill fresh pods and make the controller race itself, whoever restarts. The soak runs Volcano Jobs only, so the
   Ascend Operator's conflicts are counted where it runs (``bench/conformance_agent.py``, the real operator's log).
7. adoption: every event in the outbox of a replica the soak killed for good (:data:`testbed.soak.schedule.
   AGENT_GONE`) that was still pending then (its first copy in Kafka read after the death) reaches Kafka within
   ``bounds.adoption_s`` of Kafka time after the death (time with Kafka stopped or killed left out), is in the
   outbox of a replica that was running at the death (taken over through its commit path, not by a process
   started later), and none is lost.
8. progress: no hang action on a job that was progressing: every ``job.hung`` event (any action) is for a job
   whose training loop took no step within the hang timeout before the event's time (the loop's own step times,
   same host clock; the agent times a step from when it saw it, never earlier, so a correct hang is always
   later); and the one job the soak hangs on purpose has at most one ``job.hung`` per stall, and exactly one
   (so the invariant is not vacuous) unless an agent process started between its last step and the hang's due
   time (docs/progress.md: an agent that did not see the job step never calls it hung; the new process may
   lead).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from testbed.soak.schedule import (
    AGENT_GONE,
    AGENT_STEPS,
    APISERVER_STOP,
    CHIP,
    KAFKA_STEPS,
    MOVING_LEVELS,
    NOT_READY,
)

EVENT_LINK = "event-link"
"""The invariant name of one fault.detected id published with different incident links (the same fault and
job, decided again later: joined an open incident, then re-evaluated by a new term with no incident). Part of
invariant 3, named apart because the agent once did it (its id covered the fault and the job only, the link came
from the decision; the link is part of the id now)."""
LEADERSHIP = "leadership"
"""A :class:`Disruption` kind: an agent's leadership changed (from its log), an instant (start = end)."""
TERMINAL = ("recovery.succeeded", "recovery.failed")
STARTED = "recovery.started"
DETECTED = "fault.detected"
HUNG = "job.hung"
CLEARED = "fault.cleared"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: `invariant` is its short name (placement, restarts, events, lifecycle, health,
    controller), `detail` a sentence naming the objects and times."""

    invariant: str
    detail: str


@dataclass(frozen=True, slots=True)
class FaultSpan:
    """An injected hardware fault: `kind` (chip, node, switch, not_ready), node name, chip index (-1 for
    node-wide), level as written, and when it was written and cleared (None: still active at the end)."""

    kind: str
    node: str
    chip: int
    level: str
    start: float
    end: float | None

    @property
    def moving(self) -> bool:
        return self.level in MOVING_LEVELS

    def active_at(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t <= self.end)


@dataclass(frozen=True, slots=True)
class Disruption:
    """A disruption the soak caused: a step kind of :mod:`testbed.soak.schedule` (agent_kill, agent_stop,
    kafka_stop, kafka_kill, apiserver_stop), its span, and for agent steps the agent and whether it led then;
    or a leadership change an agent logged (:data:`LEADERSHIP`, `leader` its new state)."""

    kind: str
    start: float
    end: float
    agent: str = ""
    leader: bool = False


@dataclass(frozen=True, slots=True)
class PodSample:
    """A job pod as listed at `t`: job name, pod name and UID, node ("" when unscheduled), chips held (device
    plugin annotation), and whether it is live (not being deleted, Pending or Running)."""

    t: float
    job: str
    pod: str
    uid: str
    node: str
    chips: tuple[str, ...]
    live: bool


@dataclass(frozen=True, slots=True)
class PodStep:
    """A pod the soak failed ("business") or evicted ("evict") at `t`."""

    t: float
    kind: str
    job: str
    pod: str


@dataclass(frozen=True, slots=True)
class CommandSeen:
    """A RestartJob Command seen created at `t`: its job, name, UID and incident label."""

    t: float
    job: str
    name: str
    uid: str
    incident: str


@dataclass(frozen=True, slots=True)
class Record:
    """One record read from the agent's topics. `t`: the event's own CloudEvents ``time`` on the soak clock;
    `sent`: the record's timestamp (producer CreateTime) on the soak clock; `incident`, `detected_id`, `reason`
    (recovery.failed's): from the event's data ("" when absent)."""

    partition: int
    offset: int
    topic: str
    key: str
    id: str
    type: str
    subject: str
    t: float
    sent: float
    incident: str = ""
    detected_id: str = ""
    reason: str = ""
    received: float = 0.0
    """When the soak's reader had it (soak clock): an upper bound of its arrival in Kafka (read every 0.5 s)."""


@dataclass(frozen=True, slots=True)
class Created:
    """An event one agent wrote to its outbox: id, type (short, e.g. recovery.started), key, and the outbox
    folder's name (``<agent>-<n>``: an agent started again in its folder keeps it, a replacement gets another)."""

    id: str
    type: str
    key: str
    agent: str


@dataclass(frozen=True, slots=True)
class Scrape:
    """One /metrics scrape of one agent process (`incarnation`: its pid): the recovery histogram's count and
    the task failure counter."""

    t: float
    agent: str
    incarnation: int
    recoveries: float
    task_failures: float


@dataclass(frozen=True, slots=True)
class Health:
    """One /readyz probe of a running, not frozen agent process: HTTP status, 0 when it did not answer."""

    t: float
    agent: str
    incarnation: int
    status: int


@dataclass(frozen=True, slots=True)
class Life:
    """One agent process: started at `start`; ended at `end` (None: alive at the end) with exit `code`;
    `expected` when the soak ended it (SIGKILL in a step, SIGTERM at the end); `killed` when that was SIGKILL."""

    agent: str
    incarnation: int
    start: float
    end: float | None = None
    code: int | None = None
    expected: bool = True
    killed: bool = False
    log_tail: str = ""


@dataclass(frozen=True, slots=True)
class Gone:
    """An agent process the soak killed for good (SIGKILL, not started again in its folder): its name and pid,
    when it died (soak clock), its outbox folder's name, the ids in that outbox at its death (in outbox order),
    those of them not delivered then (from the outbox's cursor on; None when the soak could not read the cursor),
    and the names of the agents running at that moment (those that may take the outbox over)."""

    agent: str
    incarnation: int
    t: float
    outbox: str
    events: tuple[str, ...]
    pending: tuple[str, ...] | None
    survivors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TakeOver:
    """An agent's log line saying it took over a gone process's outbox (agent/sinks/kafka/peers.py): when (soak clock),
    the agent, the outbox folder's name, the events moved, and whether a running publisher did it (``while
    running``) or a process at its start."""

    t: float
    agent: str
    outbox: str
    events: int
    running: bool


ADOPTION_DELIVERY_S = 10.0
"""Seconds of Kafka time from a taken-over event's adoption to the soak reader having it: the group commit into
the adopter's outbox, the send from there (or the replay after Kafka comes back: the producer's reconnect) and
Kafka's acknowledgement, plus the reader's 0.5 s poll. Measured on the 2-core testbed (README, the soak): at most
about 4 s after Kafka's SIGCONT with both replicas' events waiting."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """The limits the invariants allow, seconds (see the module docstring); :func:`bounds_from_settings`."""

    placement_s: float
    cause_slack_s: float
    resend_window_s: float
    startup_s: float
    apiserver_grace_s: float
    takeover_s: float
    node_recheck_s: float
    adoption_s: float = 0.0


def bounds_from_settings(
    *,
    lease_duration_s: float,
    retry_period_s: float,
    node_not_ready_grace_s: float,
    node_health_recheck_s: float,
    spill_after_s: float,
    restart_s: float = 20.0,
    outbox_adopt_interval_s: float = 5.0,
    delivery_s: float = ADOPTION_DELIVERY_S,
) -> Bounds:
    """The bounds for agents run with these settings. `restart_s` is what one restart of a guide job takes on
    the testbed at most (Command → Volcano deletes the pods → new pods scheduled elsewhere; measured p99 about
    10 s on the 2-core testbed, doubled).

    placement = NotReady grace + takeover (Lease + one retry) + two restarts (a fault that hits a job while it
    restarts joins the open incident and is decided again when it closes).

    adoption = `outbox_adopt_interval_s` (a running replica looks at its peers' outboxes that often) +
    `delivery_s` (:data:`ADOPTION_DELIVERY_S`: the taken-over events' group commit, the send and Kafka's
    acknowledgement, the soak reader's poll).
    """
    takeover = lease_duration_s + retry_period_s
    return Bounds(
        placement_s=node_not_ready_grace_s + takeover + 2 * restart_s,
        cause_slack_s=5.0,
        resend_window_s=takeover + spill_after_s + 20.0,
        startup_s=60.0,
        apiserver_grace_s=30.0,
        takeover_s=takeover,
        node_recheck_s=node_health_recheck_s,
        adoption_s=outbox_adopt_interval_s + delivery_s,
    )


# ------------------------------------------------------------------------------------------------ helpers


def _union_measure(spans: Iterable[tuple[float, float]], t0: float, t1: float) -> float:
    """Seconds of [t0, t1] covered by the union of `spans`."""
    clipped = sorted((max(a, t0), min(b, t1)) for a, b in spans if b > t0 and a < t1)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in clipped:
        if cur_b is None or a > cur_b:
            if cur_a is not None and cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_a is not None and cur_b is not None:
        total += cur_b - cur_a
    return total


def blocking_spans(disruptions: Sequence[Disruption], bounds: Bounds, *, not_ready: bool) -> list[tuple[float, float]]:
    """Where no agent could act: the apiserver stopped (+ its grace; + the node-health recheck for a NotReady
    fault, `not_ready`), the leader killed or frozen until its standby took over (or it woke up)."""
    out = []
    for d in disruptions:
        if d.kind == APISERVER_STOP:
            out.append((d.start, d.end + bounds.apiserver_grace_s + (bounds.node_recheck_s if not_ready else 0.0)))
        elif d.kind in (*AGENT_STEPS, AGENT_GONE) and d.leader:
            out.append((d.start, min(d.end, d.start + bounds.takeover_s) + bounds.takeover_s))
    return out


def acting_time(t0: float, t1: float, blocked: Sequence[tuple[float, float]]) -> float:
    """Seconds of [t0, t1] in which an agent could act."""
    return max(0.0, (t1 - t0) - _union_measure(blocked, t0, t1))


def _chip_name(chip: int) -> str:
    return f"Ascend910-{chip}"


def _on_fault(sample: PodSample, fault: FaultSpan) -> bool:
    if sample.node != fault.node:
        return False
    return fault.kind != CHIP or _chip_name(fault.chip) in sample.chips


# ------------------------------------------------------------------------------------------------ invariants


def check_placement(
    pods: Sequence[PodSample], faults: Sequence[FaultSpan], disruptions: Sequence[Disruption], bounds: Bounds
) -> tuple[list[Violation], float]:
    """Invariant 1. Returns the violations (one per pod and fault) and the longest acting time any live pod
    was seen on a faulty chip or node (seconds, 0 when never)."""
    out: list[Violation] = []
    worst = 0.0
    reported: set[tuple[str, int]] = set()
    blocked = {flag: blocking_spans(disruptions, bounds, not_ready=flag) for flag in (False, True)}
    for i, f in enumerate(faults):
        if not f.moving:
            continue
        for s in pods:
            if not s.live or not f.active_at(s.t) or not _on_fault(s, f):
                continue
            age = acting_time(f.start, s.t, blocked[f.kind == NOT_READY])
            worst = max(worst, age)
            if age > bounds.placement_s and (s.uid, i) not in reported:
                reported.add((s.uid, i))
                where = f"chip {f.chip} of node {f.node}" if f.kind == CHIP else f"node {f.node}"
                out.append(
                    Violation(
                        "placement",
                        f"job {s.job} pod {s.pod} still on {where} at t={s.t:.1f}s: {f.kind} fault {f.level} "
                        f"since t={f.start:.1f}s, {age:.1f}s of acting time > bound {bounds.placement_s:.0f}s",
                    )
                )
    return out, worst


def check_restarts(
    commands: Sequence[CommandSeen],
    faults: Sequence[FaultSpan],
    pod_steps: Sequence[PodStep],
    pods: Sequence[PodSample],
    disruptions: Sequence[Disruption],
    bounds: Bounds,
    *,
    acting_levels: frozenset[str],
) -> list[Violation]:
    """Invariant 2: one Command per incident, and a cause for every Command (module docstring)."""
    out: list[Violation] = []
    by_incident: dict[str, list[CommandSeen]] = defaultdict(list)
    for c in commands:
        by_incident[c.incident].append(c)
    for incident, cs in sorted(by_incident.items()):
        uids = sorted({c.uid for c in cs})
        if len(uids) > 1:
            times = ", ".join(f"t={c.t:.1f}s" for c in cs)
            out.append(
                Violation(
                    "restarts", f"incident {incident} of job {cs[0].job}: {len(uids)} RestartJob Commands ({times})"
                )
            )
    blocked = {flag: blocking_spans(disruptions, bounds, not_ready=flag) for flag in (False, True)}
    seen: set[str] = set()
    for c in commands:
        if c.uid in seen:
            continue
        seen.add(c.uid)
        if not _has_cause(c, faults, pod_steps, pods, blocked, bounds, acting_levels):
            out.append(
                Violation(
                    "restarts",
                    f"job {c.job} restarted at t={c.t:.1f}s (Command {c.name}, incident {c.incident}) with no "
                    f"active fault on its chips or nodes, no failed or evicted pod",
                )
            )
    return out


def _has_cause(
    c: CommandSeen,
    faults: Sequence[FaultSpan],
    pod_steps: Sequence[PodStep],
    pods: Sequence[PodSample],
    blocked: dict[bool, list[tuple[float, float]]],
    bounds: Bounds,
    acting_levels: frozenset[str],
) -> bool:
    for p in pod_steps:
        if p.job != c.job or p.t > c.t + 1.0:
            continue
        if acting_time(p.t, c.t, blocked[False]) <= bounds.placement_s:
            return True
        # the failed or evicted pod is still there (not replaced) just before the restart: still a cause
        if any(s.pod == p.pod and s.job == c.job and not s.live and c.t - 3.0 <= s.t <= c.t + 1.0 for s in pods):
            return True
    job_pods = [s for s in pods if s.job == c.job and s.node and s.t <= c.t + 1.0]
    for f in faults:
        if f.level not in acting_levels or f.start > c.t + 1.0:
            continue
        if f.end is not None and acting_time(f.end, c.t, blocked[f.kind == NOT_READY]) > bounds.cause_slack_s:
            continue
        # a pod of the job on the chip or node from just before the fault (pods are listed once a second) on
        if any(_on_fault(s, f) and s.t >= f.start - 2.0 for s in job_pods):
            return True
    return False


def check_events(
    created: Sequence[Created], records: Sequence[Record], disruptions: Sequence[Disruption], bounds: Bounds
) -> tuple[list[Violation], int]:
    """Invariant 3. Returns the violations and the number of allowed re-sent copies."""
    out: list[Violation] = []
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    copies: dict[str, list[Record]] = defaultdict(list)
    for r in ordered:
        copies[r.id].append(r)
    created_ids = {c.id: c for c in created}
    for c in created:
        if c.id not in copies:
            out.append(Violation("events", f"{c.type} {c.id} (key {c.key}) written by {c.agent} never reached Kafka"))
    for rid, rs in copies.items():
        if rid not in created_ids:
            out.append(Violation("events", f"{rs[0].type} {rid} is in Kafka but in no agent's outbox"))
    resent = 0
    causes = [d for d in disruptions if d.kind in (*AGENT_STEPS, AGENT_GONE, *KAFKA_STEPS, APISERVER_STOP, LEADERSHIP)]
    for rid, rs in copies.items():
        if len(rs) == 1:
            continue
        first = rs[0]
        shapes = {(r.type, r.key, r.subject, r.incident) for r in rs}
        if len(shapes) > 1:
            # the same fault and job under one id, linked to different incidents: its own name, so a run can tell
            # this former defect (see EVENT_LINK) from any other
            link_only = len({s[:3] for s in shapes}) == 1 and first.type == DETECTED
            name = EVENT_LINK if link_only else "events"
            out.append(Violation(name, f"id {rid} names {len(shapes)} different events: {sorted(shapes)}"))
            continue
        first_sent = min(r.sent for r in rs)
        for extra in sorted(rs, key=lambda r: r.sent)[1:]:
            if any(d.start <= extra.sent and first_sent <= d.end + bounds.resend_window_s for d in causes):
                resent += 1
            else:
                out.append(
                    Violation(
                        "events",
                        f"{first.type} {rid} is in Kafka {len(rs)} times (partition {first.partition} offsets "
                        f"{[r.offset for r in rs]}), a copy at t={extra.sent:.1f}s with no agent or Kafka "
                        "disruption to explain it",
                    )
                )
                break
    out += _check_order(ordered)
    return out, resent


def _check_order(ordered: Sequence[Record]) -> list[Violation]:
    out: list[Violation] = []
    by_key: dict[str, list[Record]] = defaultdict(list)
    for r in ordered:
        by_key[r.key].append(r)
    for key, rs in by_key.items():
        for topic in {r.topic for r in rs}:
            parts = {r.partition for r in rs if r.topic == topic}
            if len(parts) > 1:
                out.append(Violation("events", f"key {key} is split over partitions {sorted(parts)} of {topic}"))
        # one stream per key (each topic read in offset order); first copies only, as a de-duplicating consumer
        first: dict[str, Record] = {}
        for r in rs:
            first.setdefault(r.id, r)
        stream = [r for r in rs if first[r.id] is r]
        index = {r.id: i for i, r in enumerate(stream)}
        started_at: dict[str, int] = {}
        for i, r in enumerate(stream):
            if r.type == STARTED and r.incident:
                started_at.setdefault(r.incident, i)
        for i, r in enumerate(stream):
            if r.type in TERMINAL and r.incident in started_at and started_at[r.incident] > i:
                out.append(
                    Violation(
                        "events",
                        f"key {key}: {r.type} of incident {r.incident} comes before its recovery.started",
                    )
                )
            if r.type == CLEARED and r.detected_id in index and index[r.detected_id] > i:
                out.append(Violation("events", f"key {key}: fault.cleared {r.id} comes before its fault.detected"))
    return out


def check_lifecycle(
    records: Sequence[Record], scrapes: Sequence[Scrape], lives: Sequence[Life]
) -> tuple[list[Violation], int]:
    """Invariant 4. Returns the violations and the number of incidents that ended."""
    out: list[Violation] = []
    started: dict[str, Record] = {}
    terminal: dict[str, dict[str, Record]] = defaultdict(dict)
    for r in records:
        if r.type == STARTED and r.incident:
            started.setdefault(r.incident, r)
        elif r.type in TERMINAL and r.incident:
            terminal[r.incident].setdefault(r.id, r)
    for incident, s in sorted(started.items()):
        ends = terminal.get(incident, {})
        if not ends:
            out.append(Violation("lifecycle", f"incident {incident} ({s.key}) started at t={s.t:.1f}s never ended"))
        elif len(ends) > 1:
            kinds = sorted(r.type for r in ends.values())
            out.append(Violation("lifecycle", f"incident {incident} ({s.key}) ended {len(ends)} times: {kinds}"))
    ended = [r for ends in terminal.values() for r in ends.values()]
    last: dict[int, Scrape] = {}
    for sc in sorted(scrapes, key=lambda x: x.t):
        last[sc.incarnation] = sc
    observed = sum(sc.recoveries for sc in last.values())
    gaps = []
    for life in lives:
        if life.end is None or not life.killed:
            continue
        seen = last.get(life.incarnation)
        gaps.append((seen.t if seen is not None else life.start, life.end))
    may_miss = sum(1 for r in ended if any(a - 1.0 <= r.t <= b + 1.0 for a, b in gaps))
    expected = len(ended)
    if observed > expected:
        out.append(
            Violation(
                "lifecycle",
                f"{observed:.0f} fault_agent_recovery_seconds samples for {expected} incidents ended (a double sample)",
            )
        )
    elif observed < expected - may_miss:
        out.append(
            Violation(
                "lifecycle",
                f"{observed:.0f} fault_agent_recovery_seconds samples for {expected} incidents ended; at most "
                f"{may_miss} can be explained by processes killed after their last scrape",
            )
        )
    return out, expected


def check_health(
    lives: Sequence[Life],
    health: Sequence[Health],
    scrapes: Sequence[Scrape],
    disruptions: Sequence[Disruption],
    bounds: Bounds,
) -> list[Violation]:
    """Invariant 5: no unexpected exit, no task failure, ready except at start-up and around apiserver stops."""
    out: list[Violation] = []
    for life in lives:
        if life.end is not None and not life.expected:
            out.append(
                Violation(
                    "health",
                    f"agent {life.agent} (pid {life.incarnation}) exited with {life.code} at t={life.end:.1f}s, "
                    f"not killed by the soak; log tail:\n{life.log_tail}",
                )
            )
    failed = {(s.agent, s.incarnation): s for s in scrapes if s.task_failures > 0}
    for (agent, inc), s in sorted(failed.items()):
        out.append(
            Violation("health", f"agent {agent} (pid {inc}) counts {s.task_failures:.0f} task failures at t={s.t:.1f}s")
        )
    starts = {life.incarnation: life.start for life in lives}
    stops = [(d.start, d.end + bounds.apiserver_grace_s) for d in disruptions if d.kind == APISERVER_STOP]
    bad = [
        h
        for h in health
        if h.status != 200
        and not (h.incarnation in starts and starts[h.incarnation] <= h.t <= starts[h.incarnation] + bounds.startup_s)
        and not any(a <= h.t <= b for a, b in stops)
    ]
    if bad:
        shown = "; ".join(f"{h.agent} at t={h.t:.1f}s: {h.status or 'no answer'}" for h in bad[:5])
        out.append(Violation("health", f"{len(bad)} /readyz probes not ready while the apiserver was up: {shown}"))
    return out


def check_adoption(
    gones: Sequence[Gone],
    takeovers: Sequence[TakeOver],
    records: Sequence[Record],
    disruptions: Sequence[Disruption],
    bounds: Bounds,
) -> tuple[list[Violation], float, int]:
    """Invariant 6 (module docstring). For each replica killed for good: every event of its outbox is in Kafka;
    each one not delivered at its death has a copy made after the death (a live producer's: the dead one's
    in-flight requests may still land) that the reader had within ``bounds.adoption_s`` of Kafka time after the
    death; and those events were moved by agents that were running at the death, through their running
    publisher (their "taken over while running" log lines for that folder add up to them), the first within
    ``bounds.adoption_s`` of the death. Returns the violations, the longest Kafka time from a death to such a
    copy (seconds, 0 when none), and the number of events that were pending at a death."""
    out: list[Violation] = []
    worst, taken = 0.0, 0
    kafka_down = [(d.start, d.end) for d in disruptions if d.kind in KAFKA_STEPS]
    by_id: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_id[r.id].append(r)
    for g in gones:
        who = f"{g.agent} (pid {g.incarnation}, outbox {g.outbox}) killed at t={g.t:.1f}s"
        lost = [i for i in g.events if i not in by_id]
        if lost:
            out.append(
                Violation("adoption", f"{len(lost)} events in the outbox of {who} never reached Kafka: {lost[:5]}")
            )
        if g.pending is None:
            continue
        taken += len(g.pending)
        for i in g.pending:
            after = [r for r in by_id.get(i, []) if r.sent > g.t]
            if not after:
                if i in by_id:
                    out.append(Violation("adoption", f"{i} pending in the outbox of {who} was sent by no live process"))
                continue
            r = min(after, key=lambda r: r.received)
            age = acting_time(g.t, r.received, kafka_down)
            worst = max(worst, age)
            if age > bounds.adoption_s:
                out.append(
                    Violation(
                        "adoption",
                        f"{r.type} {i} pending in the outbox of {who} reached Kafka at t={r.received:.1f}s, "
                        f"{age:.1f}s of Kafka time after > bound {bounds.adoption_s:.0f}s",
                    )
                )
        if not g.pending:
            continue
        mine = [t for t in takeovers if t.outbox == g.outbox and t.t >= g.t - 1.0]
        running = [t for t in mine if t.running and t.agent in g.survivors]
        moved = sum(t.events for t in running)
        if moved != len(g.pending):
            others = "; ".join(
                f"{t.agent} {'running' if t.running else 'at its start'} t={t.t:.1f}s {t.events} events" for t in mine
            )
            out.append(
                Violation(
                    "adoption",
                    f"{len(g.pending)} events pending in the outbox of {who}: the replicas running then "
                    f"({', '.join(g.survivors) or 'none'}) took over {moved} of them while running "
                    f"(take-overs of that outbox: {others or 'none'})",
                )
            )
        elif min(t.t for t in running) - g.t > bounds.adoption_s:
            out.append(
                Violation(
                    "adoption",
                    f"the outbox of {who} was taken over at t={min(t.t for t in running):.1f}s, "
                    f"> bound {bounds.adoption_s:.0f}s after",
                )
            )
    return out, worst, taken


@dataclass
class Observed:
    """Everything one soak run observed (see the module docstring)."""

    faults: list[FaultSpan] = field(default_factory=list)
    disruptions: list[Disruption] = field(default_factory=list)
    pods: list[PodSample] = field(default_factory=list)
    pod_steps: list[PodStep] = field(default_factory=list)
    commands: list[CommandSeen] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    created: list[Created] = field(default_factory=list)
    scrapes: list[Scrape] = field(default_factory=list)
    health: list[Health] = field(default_factory=list)
    lives: list[Life] = field(default_factory=list)
    gones: list[Gone] = field(default_factory=list)
    takeovers: list[TakeOver] = field(default_factory=list)
    steps: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Job name → (time, step) of every step its training loop took (soak clock)."""
    stalls: list[float] = field(default_factory=list)
    """When the deliberately hung job's loop took its last step before each stall (soak clock)."""
    errors: list[str] = field(default_factory=list)
    """What the soak itself could not do (an injection that failed, an outbox it could not read)."""
    controller: dict[str, Any] = field(default_factory=dict)
    """Volcano's controller's costs over the run (empty: not measured): ``conflicts`` as
    testbed.controller_costs.controller_conflicts gives them, ``wasted`` as ``wasted_pods`` gives them over the
    run's RestartJob Commands, ``job_writes``: the agent's annotation changes on job objects."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """All invariants over one run: the violations (empty: every invariant held) and figures for the report."""

    violations: tuple[Violation, ...]
    figures: dict[str, float]

    @property
    def ok(self) -> bool:
        return not self.violations

    def invariants_failed(self) -> frozenset[str]:
        return frozenset(v.invariant for v in self.violations)


def check_progress(
    records: Sequence[Record],
    steps: dict[str, list[tuple[float, int]]],
    stalls: Sequence[float],
    lives: Sequence[Life] = (),
    *,
    namespace: str,
    hung_job: str,
    timeout_s: float,
) -> tuple[list[Violation], int]:
    """Invariant 8 (module docstring) over the ``job.hung`` records (subject ``<namespace>/<job>``), each job's
    step times `steps`, the `stalls` of `hung_job` (its last step before each) and the agent processes' `lives`;
    also returns the distinct job.hung events. 0.1 s of slack for the event time's millisecond rounding."""
    out: list[Violation] = []
    hung = {r.id: r for r in records if r.type == HUNG}
    for r in sorted(hung.values(), key=lambda r: r.t):
        job = r.subject.removeprefix(f"{namespace}/")
        recent = [t for t, _ in steps.get(job, []) if r.t - timeout_s + 0.1 < t <= r.t]
        if recent:
            out.append(
                Violation(
                    "progress",
                    f"job.hung for {job} at t={r.t:.1f}s, but its training stepped {len(recent)} time(s) within "
                    f"the {timeout_s:.0f} s before (last at t={recent[-1]:.1f}s)",
                )
            )
    of_hung = sorted((r for r in hung.values() if r.subject == f"{namespace}/{hung_job}"), key=lambda r: r.t)
    untils = [*stalls[1:], float("inf")][: len(stalls)]  # a stall's events come before the next stall
    for stall, until in zip(stalls, untils, strict=True):
        got = [r for r in of_hung if stall < r.t <= until]
        excused = any(stall < life.start < stall + timeout_s for life in lives)
        if len(got) > 1 or (not got and not excused):
            out.append(
                Violation(
                    "progress",
                    f"{hung_job} stopped stepping at t={stall:.1f}s: {len(got)} job.hung event(s) for it "
                    f"(expected one{'' if not excused else ' at most'})",
                )
            )
    stray = [r for r in of_hung if not stalls or r.t <= stalls[0]]
    if stray:
        out.append(Violation("progress", f"{hung_job}: job.hung at t={stray[0].t:.1f}s before it stopped stepping"))
    return out, len(hung)


def check_controller(controller: dict[str, Any]) -> list[Violation]:
    """Invariant 6 over :attr:`Observed.controller` (nothing when it was not measured)."""
    if not controller:
        return []
    out: list[Violation] = []
    conflicts = controller.get("conflicts") or {}
    if conflicts.get("after_agent", 0):
        out.append(
            Violation(
                "controller",
                f"{conflicts['after_agent']} of Volcano's controller's {conflicts.get('conflicts', 0)} status-update "
                f"conflicts came at most 2 s after the agent changed a job's annotations ({conflicts.get('log', '')})",
            )
        )
    if controller.get("job_writes", 0):
        out.append(Violation("controller", f"the agent changed its annotations on job objects "
                                           f"{controller['job_writes']} times"))  # fmt: skip
    return out


def check_all(
    obs: Observed,
    bounds: Bounds,
    *,
    acting_levels: frozenset[str],
    progress: tuple[str, str, float] | None = None,
) -> Verdict:
    """Every invariant over `obs`; the soak's own errors count as violations ("soak"). `progress`: (namespace,
    the deliberately hung job, hang timeout) for invariant 8 (None: the run had no progress-reporting jobs)."""
    hang_violations, hangs = (
        check_progress(obs.records, obs.steps, obs.stalls, obs.lives, namespace=progress[0], hung_job=progress[1],
                       timeout_s=progress[2])
        if progress is not None
        else ([], 0)
    )  # fmt: skip
    placement, worst = check_placement(obs.pods, obs.faults, obs.disruptions, bounds)
    events, resent = check_events(obs.created, obs.records, obs.disruptions, bounds)
    lifecycle, ended = check_lifecycle(obs.records, obs.scrapes, obs.lives)
    adoption, adoption_worst, adopted = check_adoption(obs.gones, obs.takeovers, obs.records, obs.disruptions, bounds)
    violations = [
        *placement,
        *check_restarts(
            obs.commands, obs.faults, obs.pod_steps, obs.pods, obs.disruptions, bounds, acting_levels=acting_levels
        ),
        *events,
        *lifecycle,
        *check_health(obs.lives, obs.health, obs.scrapes, obs.disruptions, bounds),
        *check_controller(obs.controller),
        *adoption,
        *hang_violations,
        *(Violation("soak", e) for e in obs.errors),
    ]
    figures = {
        "restarts": float(len({c.uid for c in obs.commands})),
        "incidents_ended": float(ended),
        "events": float(len({r.id for r in obs.records})),
        "records": float(len(obs.records)),
        "resent_copies": float(resent),
        "worst_placement_s": round(worst, 1),
        "incidents_timed_out": float(
            len({r.incident for r in obs.records if r.type == "recovery.failed" and r.reason == "timeout"})
        ),
        "agent_processes": float(len(obs.lives)),
        "replicas_gone": float(len(obs.gones)),
        "events_pending_at_a_death": float(adopted),
        "worst_adoption_s": round(adoption_worst, 1),
        "hang_events": float(hangs),
        "progress_steps": float(sum(len(v) for v in obs.steps.values())),
    }
    if obs.controller:
        wasted = obs.controller.get("wasted") or {}
        figures["controller_conflicts"] = float((obs.controller.get("conflicts") or {}).get("conflicts", 0))
        figures["controller_conflicts_by_agent"] = float((obs.controller.get("conflicts") or {}).get("after_agent", 0))
        figures["pods_created_then_killed"] = float(wasted.get("pods", 0))
        figures["restarts_with_pods_killed"] = float(wasted.get("with", 0))
    return Verdict(tuple(violations), figures)
