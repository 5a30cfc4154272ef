"""Benchmark: fault → Kafka and fault → action latency of `fault-agent run` on the testbed, over many faults.

Set-up: ``--jobs`` copies of the integration guide's Volcano Job (2 pods × 8 chips, ``fault-scheduling=force``)
on kwok nodes, with Volcano restarting them for real, and the agent as its own process (``fault-agent run``) with
the restart rate limit and the circuit breaker raised out of the way (a benchmark injects far more faults than
the defaults allow on purpose).

Each round injects one SeparateNPU chip fault per job, ``--interval`` seconds apart, on a node running one of the
job's pods (the device-plugin ConfigMap rewritten with its CheckCode, allocatable lowered), waits until every job
is recovered (``recovery.succeeded``) and heals the chips; rounds repeat until ``--faults`` faults are in.

Per fault, from the moment the injector sent the ConfigMap PUT (``time.time()`` in this process; conservative: it
includes the apiserver's write, and unlike the moment the answer is read it cannot come after the agent's
reaction when this process is starved of CPU):
- fault → Kafka: the broker's timestamp of the job's ``fault.detected`` record (topics created here with
  ``message.timestamp.type=LogAppendTime`` before the agent starts, so it is the broker's append time);
- fault → action: arrival of the RestartJob Command's ADDED event on a watch held by this process (the
  Command's creationTimestamp has 1 s resolution; the watch adds its own delivery delay, so this errs high);
- fault → first pod terminating: the first watch event of one of the job's pods with a deletionTimestamp, or
  of its deletion (Volcano's controller deleting it for the Command, or the agent's grace-0 deletion, which
  kwok completes at once), on a pod watch of this process.
Baseline in the same run: the same ConfigMap write seen by a bare watch in this process (the floor for any
watcher on this apiserver); every latency is printed beside it, with the targets of issue 19 (agent p99 ≤ bare
p99 + 15 ms and p50 ≤ bare p50 + 5 ms for the Command; Kafka p99 ≤ bare p99 + 5 ms). A second baseline of
the same run is the injector's own PUT round trip (sent → answer read): an agent that answers the fault's watch event
with one write cannot beat bare watch + that round trip, so ``fault → action beyond bare watch + one round trip``
(per fault: Command ADDED − bare watch event − the PUT's round trip) is the agent's own share, decision and
durability included. The third baseline of the same run is a reflex watcher (``bench/e2e_reflex.py``, a process
of its own): it answers every device-plugin ConfigMap write with one RestartJob Command create of the agent's shape
in namespace ``bench-e2e-reflex`` (for a job that does not exist), and nothing else; its Commands' ADDED events are
timed on this process's watches like the agent's, so ``fault → action beyond the reflex watcher`` (per fault: the
agent's Command ADDED − the reflex's) is what the agent's parsing, decision, durability and other writes cost over
the fastest possible answer on this apiserver at this moment. When the agent's first action is a pod deletion
(``--volcano-restart`` ``auto`` or ``delete-pods``; ``--reflex-answer``, default ``same``), the reflex answers with a
deletion instead: of a running pod of its own in the benchmark's namespace, grace 0 with its UID as precondition
(the agent's request), timed on the same pod watch as the agent's deletions. This process's pod watch carries every
event of the jobs' pods and its Command watch almost nothing, so a deletion is seen later than a Command that
reached the apiserver at the same moment (the agent's deletion +22–26 ms p50 over the reflex's Command, +16.7 over
the reflex's deletion, session 24); with the same kind of action on the same watch, request → seen is the same for
both (45.8 vs 43.6 ms p50) and ``agent − reflex`` is the agent's own time from its watch event to its request.
The reflex also answers each write with one Kafka
record (``acks=all``, from memory, no outbox) on a ``LogAppendTime`` topic of its own, so ``fault → kafka beyond
the reflex producer`` (per fault: the broker's time of the agent's ``fault.detected`` − the reflex's record's) is
what the agent's parsing, decision and durable outbox cost over the fastest publish on this broker at this moment.
With ``--twin`` a second, identical reflex watcher (``e2e_reflex.py --name twin``) answers beside the first: its
answer and record less the first's, per fault, are printed as the figures' own noise. Two watchers doing the same
thing differ only by the apiserver's, the broker's and the machine's jitter, so that spread is what ``agent −
reflex`` shows for an agent that adds nothing: a target over the reflex below the twin's p99 is below what this
machine can resolve (issue 39's "measured floor"). ``--twin-path-cpu-ms MS`` makes the twin spend MS ms of its thread's
CPU between reading a write and answering it (``e2e_reflex.py --path-cpu-ms``): the floor of a watcher that spends
as much as the agent's decision path (``path_cpu_ms`` in its ``fault stages`` lines, ``bench/e2e_stages.py``).
``--twin-durable`` makes the twin durable first, as the agent is (``e2e_reflex.py --durable-dir``: each answer's
record appended and fsync'd in a worker thread before its action, its Kafka record sent meanwhile): with
``--twin-path-cpu-ms`` the floor of a watcher that decides and persists before acting, and nothing more.
The fourth baseline is the same reflex watcher alone: before the agent starts, ``--alone`` faults (one per job, at
the same interval; round -1 in ``--dump``) are answered by the reflex only, then healed. Nothing else writes then,
so its Command ADDED and its record over their bare-watch events are the floor of a watcher that answers with one
write on this testbed; the issue's targets are applied to it too, and where it misses them no agent can meet them.
Everything runs on one machine with one clock; ``--agent-cpu N`` gives the agent and the reflex CPU N and the
testbed and this benchmark the others (as in a cluster where the agent runs beside the control plane, not on it).
The agent and each reflex watcher run in a session of their own (``setsid``), as each testbed component does: with
the kernel's autogroup scheduling a session is a scheduling group, sharing the CPUs fairly with the others as a
container's cgroup does in a cluster. Before session 27 they ran in this benchmark's session, one group with its
own watchers: the agent's decision path was preempted in 81–90% of faults against 60–72% in a group of its own, and
its fault.detected p99 over the reflex producer was +37 to +78 ms against +35 to +57 (bench/RESULTS.md, "Issue 39,
session 27"); ``--one-session`` runs them so again, to compare with figures recorded then.
``--volcano-restart`` sets the agent's ``policy.volcano_restart``; its default is the agent's, ``auto``, which for
the guide's jobs is ``delete-pods``: the agent restarts a job by deleting its pods (grace 0 in ``force`` mode)
instead of creating a RestartJob Command, and Volcano's ``PodEvicted → RestartJob`` policy does the rest. There is
no Command then, so the action is the agent's own pod deletion: fault → action is the first pod terminating, and
its rows carry ``, pods deleted by the agent``; ``--volcano-restart command`` times the Command. Each run also
prints the agent's and the reflex watcher's CPU time per fault (user + system, every thread, ``/proc``), and the
agent's net of its idle rate (its CPU per second over ``--idle`` seconds once it leads, before the first fault, times
the window): the window grows with the machine's load, and the agent's watches and Lease renewals with it.
``--volcano-controller mindcluster`` starts the fresh testbed's Volcano controller-manager with the arguments
MindCluster's manifests give it (``component/ascend-for-volcano/build/volcano-v1.15.0.yaml``: kube-api-qps and
burst 800, 6 job workers) instead of Volcano's defaults (qps 50, burst 100, 3 workers); with a Command, the first pod
terminating is Volcano's controller taking it, so this says how much of that time is the controller's settings. Its
rows carry ``, Volcano controller as MindCluster ships it``.

Job Running again and the first training step (issue 39), per fault. Each guide job is opted in to the training
progress heartbeat (``fault-agent.io/progress: lease``, docs/progress.md; ``fault-agent.io/hang-timeout-s`` at its
maximum so no hang rule acts) and has rank 0's training loop (testbed.heartbeat.TrainingLoop, the real client in
this process, naming the job's rank-0 pod: a step every STEP_S = 0.5 s, the Lease written every LEASE_INTERVAL_S =
2 s, a checkpoint every 10 steps). The fault stops the loop just before its PUT (TrainingLoop.stop_training: no
step after it, and the last step written to the Lease then, not at the client's next write, where a step taken
before the fault would reach the agent after the restart began and read as the training resumed: seen in a first
run, recovery.resumed 1.9 s after the fault and 11.6 s before the job was Running again); when this process's job
watch shows the job Running again (its ``status.state.phase`` Running after a phase that was not, both after the
fault), the loop resumes from its checkpoint RESUME_DELAY_S = 0 s later (the stand-in's own choice, a constant)
with its first step written at once (TrainingLoop.resume_now), as bench_hang's rounds resume. Figures:
- fault → job Running again: that job watch event's arrival (the benchmark's clock, as every other figure here);
  beside it the event's ``status.state.lastTransitionTime`` (Volcano's controller's clock on this host, whole
  seconds, so up to 1 s early) and the first pod terminating → Running again (Volcano's restart, kwok);
- fault → first step: the agent's ``io.faultagent.recovery.resumed.v1`` ``data.first_step_at`` (the agent's clock
  at the Lease's watch event: agent.core.progress) and the same step's Lease write on this process's Lease watch;
  per fault, the agent's time − the watch's (what the agent adds to seeing the step; the watches' own delays
  differ, so it can be below 0) and Running again → the step's write (the stand-in's constant and one write).
A round waits for each fault's Running again and, with training, its first step and ``recovery.resumed`` (60 s,
then counted as missing) before it heals. ``--no-training`` leaves the jobs without loops (fault → job Running
again only). ``--write-resume`` writes only the rows ``fault to job Running again, <mode>`` and ``fault to first
step, <mode>`` (``--write`` writes them too), for a session running ``auto``, ``delete-pods`` and ``command`` back to
back on one testbed (``--dir``).

What the restarts cost the job controller (issue 35), per run: Volcano's controller-manager's status-update conflicts,
the lines with "the object has been modified" its log (the testbed's ``logs/vc-controller-manager.log``) got from the
agent's start to the end of the run (its size is read at the start and only what was appended is read), by the source
line that logged them and the resource they name; and the pods created then killed again per restart: for each fault,
the pods of its job ADDED on the pod watch after the fault's PUT whose first deletion came before the job was Running
again on a watch of the jobs (after leaving Running; until the benchmark saw it ready, if the watch never showed
that). Beside them: how often the ``fault-agent.io/…`` annotations on the jobs changed (the agent's record writes on
job objects, as the code before the job records moved to ConfigMaps made them) and how many job record ConfigMaps
were written. ``--agent-code DIR`` runs the agent from another source tree (a worktree of an older commit: its
``agent`` package on ``PYTHONPATH``, ``PYTHONSAFEPATH`` so the current folder's does not win) with this tree's
testbed, benchmark and settings; with ``--write`` it writes only these two rows, named ``…, agent from <commit>``.

    python bench/bench_e2e.py [--dir TESTBED] --jobs 50 --faults 200 [--volcano-restart delete-pods]
        [--volcano-controller mindcluster] [--agent-code DIR] [--no-training] [--write | --write-resume]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from e2e_common import create_guide_jobs, create_namespace, open_testbed, pods_of, say, wait_jobs_ready, write_row
from e2e_reflex import DEFAULT_NAME as REFLEX_NAME
from e2e_reflex import NODE_LABEL as REFLEX_NODE_LABEL

from agent.core.progress import HANG_TIMEOUT_LABEL, HANG_TIMEOUT_MAX_S, LEASE_JOB_LABEL, PROGRESS_LABEL, STEP_ANNOTATION
from agent.sources.leases import LEASE_SELECTOR
from testbed.agent_runner import FAULTS_TOPIC, RECOVERIES_TOPIC, AgentProcess, EventReader, Received, before_exec
from testbed.cluster import VOLCANO_CONTROLLER_PROFILES, Testbed
from testbed.controller_costs import (
    AFTER_AGENT_S,
    AGENT_KEYS,
    CONFLICT_TEXT,
    REQUEUED,
    annotation_changes,
    controller_conflicts,
    slim_job,
    slim_pod,
    wasted_pods,
)
from testbed.heartbeat import TrainingLoop
from testbed.inject import ChipFault, Injector
from testbed.observe import Seen, TimedRest, WatchRecorder, ensure_topics, pct, timestamp_types

NAMESPACE = "bench-e2e"
REFLEX_NAMESPACE = "bench-e2e-reflex"
REFLEX_TOPIC = "bench.e2e.reflex"
TWIN_NAME = "twin"
"""``--twin``'s second reflex watcher: its Commands, pods and records are named so (bench/e2e_reflex.py ``--name``)."""
KAFKA_ROW = "fault to kafka p99"
ACTION_ROW = "fault to action p99"
TERMINATING_ROW = "fault to first pod terminating p99"
FLOOR_ROW = "fault to action over the one-round-trip floor"
REFLEX_ROW = "fault to action over a reflex watcher"
REFLEX_KAFKA_ROW = "fault to kafka over a reflex producer"
TWIN_ROW = "noise of the figures over a reflex watcher: a second reflex watcher over the first"
ALONE_ROW = "fault to action of a lone reflex watcher"
CONFLICTS_ROW = "Volcano controller status-update conflicts per run"
WASTED_ROW = "pods created then killed again per restart"
RUNNING_ROW = "fault to job Running again"  # + ", <--volcano-restart mode>"
FIRST_STEP_ROW = "fault to first step"  # + ", <--volcano-restart mode>"
STEP_S = 0.5  # the stand-in training loop's step period (s)
LEASE_INTERVAL_S = 2.0  # its heartbeat client's write interval (s): 1 write per job per 2 s on the apiserver
RESUME_DELAY_S = 0.0  # from the job watch showing the job Running again to the loop's first step (the stand-in's
# own choice, a constant: what is measured after it is one Lease write and the agent)
TRAINING_LABELS = {PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: str(HANG_TIMEOUT_MAX_S)}  # no hang rule in the way
BENCH_SETTINGS = {
    "CLUSTER_NAME": "bench",
    "POLICY__RESTART_BURST": "10000",
    "POLICY__RESTART_RATE_PER_MIN": "10000",
    "POLICY__BREAKER_NODE_SHARE": "1.0",
    "POLICY__BREAKER_MIN_FAULTY_NODES": "100000",
}


@dataclass
class Injected:
    job: str
    job_uid: str
    node: str
    at: float  # ConfigMap PUT sent
    round: int
    returned: float = 0.0  # the PUT's answer read: at..returned is one write's round trip on this apiserver now
    kafka_at: float | None = None
    action_at: float | None = None
    watch_at: float | None = None
    terminating_at: float | None = None
    reflex_at: float | None = None  # the reflex watcher's answer to this write (Command ADDED, pod DELETED), our watch
    reflex_kafka_at: float | None = None  # the broker's LogAppendTime of the reflex watcher's record for this write
    twin_at: float | None = None  # --twin: the second, identical reflex watcher's answer to this write
    twin_kafka_at: float | None = None  # --twin: the broker's LogAppendTime of the second reflex's record
    ready_at: float | None = None  # the job seen ready again by this benchmark (Running, replacement pods Running)
    running_at: float | None = None  # the job watch's event showing it Running again after the restart (arrival)
    running_since: float | None = None  # that event's status.state.lastTransitionTime (the controller's, whole s)
    hung_step: int | None = None  # the training loop's step when the fault stopped it
    resume_step: int | None = None  # its first step after the restart (its checkpoint's + 1)
    resume_sent: float | None = None  # that step's Lease write sent (RESUME_DELAY_S after running_at)
    step_seen_at: float | None = None  # that step's Lease write seen by this process's Lease watch (arrival)
    first_step_at: float | None = None  # the agent's recovery.resumed data.first_step_at (the agent's clock)


def _slim_cm(obj: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": obj.get("metadata", {}).get("name", "")}}


def _slim_job(obj: dict[str, Any]) -> dict[str, Any]:
    """testbed.controller_costs.slim_job and the job's ``status.state.lastTransitionTime`` (``since``, RFC 3339,
    whole seconds: Volcano's controller sets it when the phase changes; "" when absent)."""
    since = ((obj.get("status") or {}).get("state") or {}).get("lastTransitionTime") or ""
    return {**slim_job(obj), "since": str(since)}


def _slim_lease(obj: dict[str, Any]) -> dict[str, Any]:
    """A heartbeat Lease's job (its ``fault-agent.io/job`` label) and step annotation ("" when absent)."""
    meta = obj.get("metadata", {})
    return {"metadata": {"name": meta.get("name", "")}, "job": (meta.get("labels") or {}).get(LEASE_JOB_LABEL, ""),
            "step": (meta.get("annotations") or {}).get(STEP_ANNOTATION, "")}  # fmt: skip


def rfc3339_s(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``2026-12-05T18:40:01Z``, fractions allowed); None when
    empty or not one."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class RunningAgain:
    """Finds, per fault, the job watch's event showing its job Running again after the restart: the first event of
    the job at or after the fault whose phase is Running, after one that was not (a restart takes the job through
    Restarting and Pending; testbed.controller_costs.running_again, incrementally). One fault per job at a time;
    events are fed in arrival order (a :class:`WatchRecorder`'s list, read from where the last call stopped)."""

    waiting: dict[str, tuple[Injected, bool]] = field(default_factory=dict)  # job -> (its fault, left Running)
    cursor: int = 0  # events read so far

    def expect(self, item: Injected, events: list[Seen]) -> None:
        """Follow `item`'s job from `item.at`; events already read that came at or after it count (the restart
        may have begun before the fault's write was answered)."""
        left = False
        for s in reversed(events[: self.cursor]):
            if s.at < item.at:
                break
            left = left or (s.name == item.job and s.obj["phase"] != "Running")
        self.waiting[item.job] = (item, left)

    def feed(self, events: list[Seen]) -> list[tuple[Injected, Seen]]:
        """Read the events not read yet; returns each fault whose job they show Running again, with that event."""
        done: list[tuple[Injected, Seen]] = []
        for s in events[self.cursor :]:
            got = self.waiting.get(s.name)
            if got is None or s.at < got[0].at:
                continue
            item, left = got
            if s.obj["phase"] != "Running":
                self.waiting[s.name] = (item, True)
            elif left:
                del self.waiting[s.name]
                done.append((item, s))
        self.cursor = len(events)
        return done


async def _follow_restarts(tracker: RunningAgain, job_watch: WatchRecorder, loops: dict[str, TrainingLoop]) -> None:
    """Every 20 ms: each faulted job the job watch shows Running again gets its ``running_at`` / ``running_since``
    and, when it has a training loop, the loop resumes from its checkpoint RESUME_DELAY_S later, its first step
    written at once (TrainingLoop.resume_now, in a thread). Runs until cancelled."""
    resuming: set[asyncio.Task[None]] = set()

    async def resume(item: Injected, loop: TrainingLoop) -> None:
        if RESUME_DELAY_S:
            await asyncio.sleep(RESUME_DELAY_S)
        item.resume_step, item.resume_sent, _ = await asyncio.to_thread(loop.resume_now)

    while True:
        for item, seen in tracker.feed(job_watch.events):
            item.running_at, item.running_since = seen.at, rfc3339_s(seen.obj["since"])
            if item.job in loops:
                task = asyncio.create_task(resume(item, loops[item.job]), name=f"resume {item.job}")
                resuming.add(task)
                task.add_done_callback(resuming.discard)
        await asyncio.sleep(0.02)


def resumed_for(e: Received, item: Injected) -> float | None:
    """The agent's ``recovery.resumed`` event `e` for `item`'s job (its UID) after `item`'s fault: its
    ``data.first_step_at`` (the agent's clock, s), else None."""
    if "recovery.resumed" not in e.type:
        return None
    data = e.event.get("data") or {}
    if (data.get("job") or {}).get("uid") != item.job_uid:
        return None
    at = rfc3339_s(str(data.get("first_step_at") or ""))
    return at if at is not None and at >= item.at else None


def step_seen(s: Seen, item: Injected) -> bool:
    """Lease watch event `s` carries `item`'s job's first step after the restart, written at or after it was sent."""
    return (
        item.resume_sent is not None
        and s.at >= item.resume_sent
        and s.obj["job"] == item.job
        and s.obj["step"] == str(item.resume_step)
    )


async def _collect_resumed(
    batch: list[Injected], reader: EventReader, leases: WatchRecorder, *, training: bool, timeout_s: float
) -> None:
    """Wait until each fault of `batch` has its job Running again and, with `training`, its first step seen on the
    Lease watch and the agent's ``recovery.resumed`` (each left None when not within `timeout_s`), so the next
    round's fault does not stop a loop before it resumed."""
    deadline = time.monotonic() + timeout_s
    while True:
        for item in batch:
            if item.step_seen_at is None and item.resume_sent is not None:
                item.step_seen_at = _first_at(leases, item.resume_sent, functools.partial(step_seen, item=item))
            if item.first_step_at is None and training:
                item.first_step_at = next((t for e in reader.events if (t := resumed_for(e, item)) is not None), None)
        if all(i.running_at is not None and (not training or (i.step_seen_at and i.first_step_at)) for i in batch):
            return
        if time.monotonic() > deadline:
            missing = [i.job for i in batch if i.running_at is None or (training and not i.first_step_at)]
            say(f"WARNING: {len(missing)} fault(s) without Running again or a recovery.resumed after "
                f"{timeout_s:.0f} s, e.g. {missing[:3]}; counted as missing")  # fmt: skip
            return
        await asyncio.sleep(0.1)


async def measure(tb: Testbed, args: argparse.Namespace, workdir: Path) -> tuple[list[Injected], dict[str, Any]]:
    rest = tb.rest()
    inj = Injector(TimedRest.of(tb))
    timed: TimedRest = inj.rest  # type: ignore[assignment]
    names = [f"e2e-{i}" for i in range(args.jobs)]
    nodes = [f"e2e-node-{i}" for i in range(args.jobs * 3 + 4)]
    say(f"{len(nodes)} kwok nodes, {len(names)} guide jobs in {NAMESPACE}")
    create_namespace(rest, NAMESPACE)
    await asyncio.to_thread(inj.add_nodes, nodes)
    for n in nodes:
        inj.chip_healthy(n)
    labels = TRAINING_LABELS if args.training else {}
    await asyncio.to_thread(create_guide_jobs, rest, NAMESPACE, names, labels=labels)
    jobs, pods = await asyncio.to_thread(wait_jobs_ready, rest, NAMESPACE, names, timeout_s=300)
    loops: dict[str, TrainingLoop] = {}  # job name -> its rank 0's training loop (the jobs' pods run nothing)
    if args.training:
        for n in names:
            if any(jobs[n]["metadata"].get("labels", {}).get(k) != v for k, v in TRAINING_LABELS.items()):
                # a job an earlier run without training created: opted in now (the benchmark is its author)
                path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs/{n}"
                rest.merge_patch(path, {"metadata": {"labels": TRAINING_LABELS}})
            rank0 = str(pods_of(pods, n)[0]["metadata"]["name"])
            loops[n] = TrainingLoop(tb, NAMESPACE, n, rank0, step_s=STEP_S, interval_s=LEASE_INTERVAL_S).start()
    uids = {n: str(jobs[n]["metadata"]["uid"]) for n in names}
    counts_before = {n: _restart_counts(jobs[n]) for n in names}

    await ensure_topics(tb.kafka_bootstrap, (FAULTS_TOPIC, RECOVERIES_TOPIC, REFLEX_TOPIC))
    types = await timestamp_types(tb.kafka_bootstrap, (FAULTS_TOPIC, REFLEX_TOPIC))
    ts_type = types.get(FAULTS_TOPIC, "CreateTime")
    if types.get(REFLEX_TOPIC) != ts_type:
        raise SystemExit(f"topics {FAULTS_TOPIC} and {REFLEX_TOPIC} have different timestamp types: {types}")
    reader = EventReader(tb.kafka_bootstrap, topics=(FAULTS_TOPIC, RECOVERIES_TOPIC, REFLEX_TOPIC))
    # from the beginning: a consumer starting at "latest" on fresh topics may miss the first records; older
    # records (an earlier run on the same testbed) are told apart by their timestamps
    await reader.start(from_beginning=True)
    commands = WatchRecorder(tb, f"/apis/bus.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/commands")
    cms = WatchRecorder(tb, "/api/v1/namespaces/kube-system/configmaps", slim=_slim_cm)
    pod_watch = WatchRecorder(tb, f"/api/v1/namespaces/{NAMESPACE}/pods", slim=_slim_pod)
    job_watch = WatchRecorder(tb, f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs", slim=_slim_job)
    leases = WatchRecorder(tb, f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", slim=_slim_lease,
                           label_selector=LEASE_SELECTOR)  # fmt: skip
    await commands.start()
    await cms.start()
    await pod_watch.start()
    await job_watch.start()
    await leases.start()
    tracker = RunningAgain()
    follower = asyncio.create_task(_follow_restarts(tracker, job_watch, loops), name="follow restarts")
    reflex = await asyncio.to_thread(
        _start_reflex, tb, workdir, args.agent_cpus, args.reflex_deletes, own_session=not args.one_session
    )
    reflexes = [reflex]
    if args.reflex_deletes:  # its deletions on the pod watch that times the agent's
        reflex_watch = ReflexWatch(pod_watch, TERMINATING)
    else:
        commands_watch = WatchRecorder(
            tb, f"/apis/bus.volcano.sh/v1alpha1/namespaces/{REFLEX_NAMESPACE}/commands", slim=_slim_reflex
        )
        await commands_watch.start()
        reflex_watch = ReflexWatch(commands_watch, "ADDED")
    twin_watch: ReflexWatch | None = None
    info: dict[str, Any] = {"timestamp_type": ts_type}
    try:
        if args.twin:  # the same watcher again, named apart: seen on the same watch as the first
            reflexes.append(
                await asyncio.to_thread(
                    _start_reflex,
                    tb,
                    workdir,
                    args.agent_cpus,
                    args.reflex_deletes,
                    name=TWIN_NAME,
                    path_cpu_ms=args.twin_path_cpu_ms,
                    own_session=not args.one_session,
                    durable=args.twin_durable,
                )
            )
            twin_watch = ReflexWatch(reflex_watch.recorder, reflex_watch.type, TWIN_NAME)
        info["alone"] = await _reflex_alone(
            inj, timed, names, pods, args, reader, cms, reflex_watch, uids
        )  # before the agent starts: the floor of a one-write watcher with nothing else acting
    except BaseException:
        await asyncio.to_thread(_stop_all, reflexes)
        raise
    settings = {**BENCH_SETTINGS, "POLICY__VOLCANO_RESTART": args.volcano_restart, **_settings(args.agent_setting)}
    agent = AgentProcess(
        tb, workdir, settings=settings, name="bench-e2e-agent", cpus=args.agent_cpus, own_session=not args.one_session
    )
    if args.agent_code:  # that tree's agent package, not this one's (PYTHONSAFEPATH: the cwd is not put first)
        agent.env.update(PYTHONPATH=str(args.agent_code), PYTHONSAFEPATH="1")
    controller_log = tb.logs_dir / "vc-controller-manager.log"
    log_from = controller_log.stat().st_size if controller_log.exists() else 0  # only what this run appends
    agent_from = time.time()
    records_before = _records(rest)
    info["agent_log_from"] = agent.log.stat().st_size if agent.log.exists() else 0  # only what this run appends
    agent.start(ready_timeout_s=120)
    info["agent_log"] = str(agent.log)
    out: list[Injected] = []
    try:
        deadline = time.monotonic() + 30
        while agent.metric("fault_agent_leader") < 1:
            if time.monotonic() > deadline:
                raise SystemExit(f"agent not leader within 30 s; log {agent.log}")
            await asyncio.sleep(0.2)
        # the agent's CPU with no fault (watches, Lease renewals, timers): what the window's length adds to it
        idle_at, idle_cpu = time.monotonic(), _cpu_s(agent.proc.pid if agent.proc else 0)
        await asyncio.sleep(args.idle)
        idle_s = time.monotonic() - idle_at
        info["idle_rate"] = (_cpu_s(agent.proc.pid if agent.proc else 0) - idle_cpu) / idle_s
        window_from = time.monotonic()
        cpu_from = (_cpu_s(agent.proc.pid if agent.proc else 0), _cpu_s(reflex.pid))
        twin_cpu_from = _cpu_s(reflexes[1].pid) if args.twin else 0.0
        rounds = math.ceil(args.faults / len(names))
        rates: list[float] = []
        replaced: dict[str, frozenset[str]] = {}  # job name -> its pods the last round's fault restarted
        stale: list[tuple[int, int]] = []  # per round after the first: _older_pods
        for r in range(rounds):
            jobs, pods = await asyncio.to_thread(
                wait_jobs_ready, rest, NAMESPACE, names, timeout_s=300, replaced=replaced
            )  # fmt: skip
            _ready(out, time.time())
            if r:  # the pods the last round's restarts left under an older job-version than their job's
                stale.append(_older_pods(jobs, pods, names))
            batch: list[Injected] = []
            todo = names[: min(len(names), args.faults - len(out))]
            for i, name in enumerate(todo):
                job_pods = pods_of(pods, name)
                node = str(job_pods[(r + i) % len(job_pods)]["spec"]["nodeName"])
                hung_step = None
                if loops:  # the fault stops the training: its last step on the Lease before the fault, none after
                    hung_step = await asyncio.to_thread(loops[name].stop_training)
                # in a thread: the watches on this loop must timestamp events while the injector waits
                await asyncio.to_thread(inj.chip_fault, node, [ChipFault(0)])
                fragment = f"mindx-dl-deviceinfo-{node}"
                sent, returned = timed.last_write(fragment, sent=True), timed.last_write(fragment)
                item = Injected(name, uids[name], node, sent, r, returned)
                item.hung_step = hung_step
                tracker.expect(item, job_watch.events)
                batch.append(item)
                await asyncio.sleep(args.interval)
            spent = batch[-1].at - batch[0].at
            rates.append((len(batch) - 1) / spent if spent > 0 else 0.0)
            say(f"round {r + 1}/{rounds}: {len(batch)} faults injected in {spent:.1f} s; waiting for the recoveries")
            await _collect(
                batch, reader, commands, cms, pod_watch, reflex_watch, timeout_s=120,
                by_command=args.by_command, twin=twin_watch,
            )  # fmt: skip
            await reader.wait_for(
                functools.partial(_succeeded_since, batch[0].at),
                count=len(batch),
                timeout_s=180,
                what=f"{len(batch)} recovery.succeeded events of round {r + 1}",
            )
            await _collect_resumed(batch, reader, leases, training=bool(loops), timeout_s=60)
            for item in batch:
                await asyncio.to_thread(inj.chip_healthy, item.node)
            out.extend(batch)
            replaced = {
                item.job: frozenset(str(p["metadata"]["uid"]) for p in pods_of(pods, item.job)) for item in batch
            }
        cpu_to = (_cpu_s(agent.proc.pid if agent.proc else 0), _cpu_s(reflex.pid))
        if args.twin:
            info["twin_cpu"] = _cpu_s(reflexes[1].pid) - twin_cpu_from
        info["cpu"] = (cpu_to[0] - cpu_from[0], cpu_to[1] - cpu_from[1])
        info["window_s"] = time.monotonic() - window_from
        info["recoveries"] = agent.metric("fault_agent_recovery_seconds_count")
        jobs, pods_now = await asyncio.to_thread(
            wait_jobs_ready, rest, NAMESPACE, names, timeout_s=300, replaced=replaced
        )  # fmt: skip
        _ready(out, time.time())
        await asyncio.sleep(1)  # the controller's last lines, and the job watch's last events
        info["conflicts"] = controller_conflicts(controller_log, log_from, job_watch.events, agent_from)
        info["wasted"] = wasted_pods(out, pod_watch.events, job_watch.events)
        info["job_writes"] = len(annotation_changes(job_watch.events, agent_from))
        info["records"] = sum(1 for k, v in _records(rest).items() if records_before.get(k) != v)
        info["counted"] = _counted(out, counts_before, {n: _restart_counts(jobs[n]) for n in names})
        stale.append(_older_pods(jobs, pods_now, names))
        info["older_pods"] = (sum(n for n, _ in stale), sum(j for _, j in stale), len(stale))
        info["fault_rate"] = sum(rates) / len(rates) if rates else 0.0
        for proc in reflexes:
            if proc.poll() is not None:
                raise SystemExit(f"a reflex watcher exited (code {proc.returncode}); see its log in {workdir}")
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        agent.stop()
        for loop in loops.values():
            loop.stop()
        await asyncio.to_thread(_stop_all, reflexes)
        await reader.stop()
        await commands.stop()
        await cms.stop()
        await pod_watch.stop()
        await job_watch.stop()
        await leases.stop()
        if reflex_watch.recorder is not pod_watch:
            await reflex_watch.recorder.stop()
    return out, info


async def _reflex_alone(
    inj: Injector,
    timed: TimedRest,
    names: list[str],
    pods: list[dict[str, Any]],
    args: argparse.Namespace,
    reader: EventReader,
    cms: WatchRecorder,
    reflex_watch: ReflexWatch,
    uids: dict[str, str],
) -> list[Injected]:
    """The lone reflex watcher: ``--alone`` faults (one per job, ``--interval`` apart) injected before the agent
    starts, so only the reflex watcher answers them (nothing restarts: Volcano alone ignores device-plugin
    ConfigMaps), then healed. Each gets its bare-watch event, the reflex's Command ADDED and its Kafka record
    (``watch_at``, ``reflex_at``, ``reflex_kafka_at``; None when not seen within 60 s).

    This is the floor of a watcher that answers a fault with one write when nothing else writes at that moment:
    the issue's Command targets (bare +5 / +15 ms) are below it when its own figures miss them."""
    batch: list[Injected] = []
    for i, name in enumerate(names[: args.alone]):
        job_pods = pods_of(pods, name)
        node = str(job_pods[i % len(job_pods)]["spec"]["nodeName"])
        await asyncio.to_thread(inj.chip_fault, node, [ChipFault(0)])
        fragment = f"mindx-dl-deviceinfo-{node}"
        batch.append(Injected(name, uids[name], node, timed.last_write(fragment, sent=True), -1,
                              timed.last_write(fragment)))  # fmt: skip
        await asyncio.sleep(args.interval)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for item in batch:
            _baselines(item, reader, cms, reflex_watch)
        if all(i.watch_at and i.reflex_at and i.reflex_kafka_at for i in batch):
            break
        await asyncio.sleep(0.1)
    for item in batch:
        await asyncio.to_thread(inj.chip_healthy, item.node)
    say(f"the lone reflex watcher answered {sum(1 for i in batch if i.reflex_at)} of {len(batch)} faults; healed")
    return batch


def _start_reflex(
    tb: Testbed,
    workdir: Path,
    cpus: frozenset[int] | None,
    deletes: bool,
    name: str = REFLEX_NAME,
    path_cpu_ms: float = 0.0,
    own_session: bool = True,
    durable: bool = False,
) -> subprocess.Popen[str]:
    """Start bench/e2e_reflex.py named `name` on `tb` (on `cpus` only, when given; answering with pod deletions in
    the benchmark's namespace when `deletes`, else with Commands; in a session of its own when `own_session`: see
    the module docstring; durable first, its journal in `workdir`, when `durable`) and wait (up to 60 s) until its
    watch is open. Its errors go to ``<workdir>/<name>.log``."""
    workdir.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).with_name("e2e_reflex.py")
    argv = [sys.executable, str(script), "--dir", str(tb.workdir), "--namespace", REFLEX_NAMESPACE]
    argv += ["--topic", REFLEX_TOPIC, "--name", name]
    if path_cpu_ms:
        argv += ["--path-cpu-ms", f"{path_cpu_ms:g}"]
    if durable:
        argv += ["--durable-dir", str(workdir)]
    if deletes:
        argv += ["--delete-pods-in", NAMESPACE]
    in_child = functools.partial(before_exec, cpus, own_session=own_session)
    with (workdir / f"{name}.log").open("w") as errors:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, text=True, preexec_fn=in_child)
    assert proc.stdout is not None
    timer = threading.Timer(60, proc.kill)  # a watcher that never opens its watch ends the wait
    timer.start()
    try:
        line = proc.stdout.readline()
    finally:
        timer.cancel()
    if line.strip() != "ready":
        proc.kill()
        raise SystemExit(f"the reflex watcher {name} did not start; see {workdir / f'{name}.log'}")
    return proc


def _stop_all(procs: list[subprocess.Popen[str]]) -> None:
    """Stop the reflex watchers `procs` (SIGTERM: each deletes its pods) and wait up to 10 s for each."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(10)


def _slim_reflex(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    return {"metadata": {"name": meta.get("name", ""), "node": (meta.get("labels") or {}).get(REFLEX_NODE_LABEL, "")}}


def _succeeded_since(t: float, e: Received) -> bool:
    return "recovery.succeeded" in e.type and e.timestamp_ms >= t * 1000


def _first_at(recorder: WatchRecorder, since: float, match: Callable[[Seen], bool]) -> float | None:
    """Arrival time of the first event `recorder` saw at or after `since` that `match` accepts, None if none yet."""
    return next((s.at for s in recorder.events if s.at >= since and match(s)), None)


def _command_for(s: Seen, job: str) -> bool:
    """The agent's RestartJob Command for `job` created."""
    return s.type == "ADDED" and s.obj.get("target", {}).get("name") == job


def _terminating(s: Seen, job: str) -> bool:
    """A pod of `job` deleted, or given a deletionTimestamp."""
    return s.obj.get("metadata", {}).get("job") == job and _deleting(s)


def _deleting(s: Seen) -> bool:
    """A pod event of its deletion: DELETED, or MODIFIED with a deletionTimestamp (slim ``deleting``)."""
    return s.type == "DELETED" or (s.type == "MODIFIED" and bool(s.obj.get("metadata", {}).get("deleting")))


TERMINATING = "terminating"
"""ReflexWatch.type of the reflex's pod deletion: as for the agent's (:func:`_terminating`), the first event of the
pod with a deletionTimestamp, or DELETED."""


@dataclass(frozen=True)
class ReflexWatch:
    """Where a reflex watcher's answers are seen: the watch (`recorder`), the event `type` that is its answer
    (a Command ADDED, or :data:`TERMINATING` for its pod's deletion) and the watcher's `name` (its objects'
    names start with ``<name>-``)."""

    recorder: WatchRecorder
    type: str
    name: str = REFLEX_NAME


def _reflex_for(s: Seen, node: str, answer: str, name: str = REFLEX_NAME) -> bool:
    """The answer of the reflex watcher `name` to a write of `node`'s device-plugin ConfigMap: an event of an object
    of its (named ``<name>-…``) labelled with `node` of type `answer` (its Command ADDED) or, for
    :data:`TERMINATING`, its pod given a deletionTimestamp or deleted."""
    meta = s.obj["metadata"]
    if meta.get("node") != node or not str(meta.get("name", "")).startswith(f"{name}-"):
        return False
    return _deleting(s) if answer == TERMINATING else s.type == answer


def _slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """:func:`slim_pod` and, for the reflex watcher's pods, the node label (``node``)."""
    out = slim_pod(obj)
    node = (obj.get("metadata", {}).get("labels") or {}).get(REFLEX_NODE_LABEL)
    if node:
        out["metadata"]["node"] = node
    return out


def _reflex_record_for(e: Received, item: Injected, name: str = REFLEX_NAME) -> bool:
    """The Kafka record of the reflex watcher `name` (its ``by``) answering `item`'s write (the broker's timestamp
    is whole ms)."""
    return (
        e.topic == REFLEX_TOPIC
        and e.key == item.node
        and e.timestamp_ms >= item.at * 1000 - 1
        and e.event.get("by", REFLEX_NAME) == name
    )


def _deviceinfo_of(s: Seen, node: str) -> bool:
    """A write of `node`'s device-plugin ConfigMap."""
    return s.type == "MODIFIED" and s.name == f"mindx-dl-deviceinfo-{node}"


def _baselines(
    item: Injected, reader: EventReader, cms: WatchRecorder, reflex: ReflexWatch, twin: ReflexWatch | None = None
) -> None:
    """Fill in what `item`'s baselines have seen so far: its bare-watch event, the reflex watcher's answer
    (a Command or a pod deletion) and the reflex producer's record, and the same of the `twin` reflex when given
    (each left None until seen)."""
    if item.watch_at is None:
        item.watch_at = _first_at(cms, item.at, functools.partial(_deviceinfo_of, node=item.node))
    if item.reflex_at is None:
        item.reflex_at = _first_at(
            reflex.recorder, item.at, functools.partial(_reflex_for, node=item.node, answer=reflex.type)
        )
    if item.reflex_kafka_at is None:
        got = next((e for e in reader.events if _reflex_record_for(e, item)), None)
        item.reflex_kafka_at = got.timestamp_ms / 1000 if got is not None else None
    if twin is None:
        return
    if item.twin_at is None:
        item.twin_at = _first_at(
            twin.recorder, item.at, functools.partial(_reflex_for, node=item.node, answer=twin.type, name=twin.name)
        )
    if item.twin_kafka_at is None:
        got = next((e for e in reader.events if _reflex_record_for(e, item, twin.name)), None)
        item.twin_kafka_at = got.timestamp_ms / 1000 if got is not None else None


async def _collect(
    batch: list[Injected],
    reader: EventReader,
    commands: WatchRecorder,
    cms: WatchRecorder,
    pod_watch: WatchRecorder,
    reflex_watch: ReflexWatch,
    *,
    timeout_s: float,
    by_command: bool,
    twin: ReflexWatch | None = None,
) -> None:
    """Fill each item's times from what the readers and watches saw, until all are in or `timeout_s` passed.
    `by_command`: the action is the job's RestartJob Command; otherwise (``delete-pods``) it is the agent's
    first pod deletion, the first pod terminating. `twin`: ``--twin``'s reflex, whose answers are waited for
    too."""
    deadline = time.monotonic() + timeout_s
    while True:
        for item in batch:
            if item.kafka_at is None:
                for e in reader.events:
                    if (
                        "fault.detected" in e.type
                        and e.key == item.job_uid
                        and e.event.get("data", {}).get("fault", {}).get("node") == item.node
                        and e.timestamp_ms >= item.at * 1000 - 1
                    ):
                        item.kafka_at = e.timestamp_ms / 1000
                        break
            if item.terminating_at is None:
                item.terminating_at = _first_at(pod_watch, item.at, functools.partial(_terminating, job=item.job))
            if item.action_at is None:
                item.action_at = (
                    _first_at(commands, item.at, functools.partial(_command_for, job=item.job))
                    if by_command
                    else item.terminating_at
                )
            _baselines(item, reader, cms, reflex_watch, twin)
        missing = [i for i in batch if i.kafka_at is None or i.action_at is None or i.terminating_at is None]
        if twin is not None:
            missing += [i for i in batch if i.twin_at is None or i.twin_kafka_at is None]
        if not missing:
            return
        if time.monotonic() > deadline:
            say(
                f"WARNING: {len(missing)} fault(s) without a fault.detected record, a Command or a pod "
                f"terminating after {timeout_s:.0f} s, e.g. {missing[0].job} on {missing[0].node}; counted as missing"
            )
            return
        await asyncio.sleep(0.1)


def _twin(items: list[Injected], info: dict[str, Any], what: str) -> str | None:
    """``--twin``: the second reflex watcher's answer and record less the first's, per fault (ms: p1, p50, p99,
    max), and its CPU per fault; None when no fault has both answers or both records. Two watchers doing the
    same thing differ only by the apiserver's, the broker's and the machine's jitter, so these spreads are what
    ``agent − reflex`` shows for an agent that adds nothing."""
    action = [(i.twin_at - i.reflex_at) * 1000 for i in items if i.twin_at is not None and i.reflex_at is not None]
    kafka = [
        (i.twin_kafka_at - i.reflex_kafka_at) * 1000
        for i in items
        if i.twin_kafka_at is not None and i.reflex_kafka_at is not None
    ]
    if not action or not kafka:
        return None

    def spread4(v: list[float]) -> str:
        return f"p1 {pct(v, 0.01):.1f}, p50 {pct(v, 0.5):.1f}, p99 {pct(v, 0.99):.1f}, max {max(v):.1f} ms ({len(v)})"

    cpu = info.get("twin_cpu", 0.0) * 1000 / len(items)
    return f"{what} {spread4(action)}; record {spread4(kafka)}; its CPU per fault {cpu:.1f} ms"


ACTION_OVER_REFLEX_MS = (15.0, 60.0)
"""Issue 39's targets for the agent's first action over the reflex watcher's, per fault (p50, p99 ms)."""
KAFKA_OVER_REFLEX_P99_MS = 30.0
"""Issue 39's target for the agent's fault.detected over the reflex producer's record, per fault (p99 ms)."""


def _over_reflex(over_reflex: list[float], kafka_over_reflex: list[float]) -> tuple[str, str]:
    """The verdict lines of the agent's action and fault.detected over the reflex watcher's (per fault, ms),
    against issue 39's targets (not the bare watch's older 5 / 15 ms, which were below what one write costs)."""
    p50_max, p99_max = ACTION_OVER_REFLEX_MS
    return (
        _floor(over_reflex, p99_max=p99_max, p50_max=p50_max),
        _floor(kafka_over_reflex, p99_max=KAFKA_OVER_REFLEX_P99_MS, p50_max=None),
    )


def over_reflex_targets(*, reflex_deletes: bool) -> tuple[str, str]:
    """The target column of the rows over the reflex watcher (action) and over the reflex producer (fault.detected):
    the targets :func:`_over_reflex` judges by, with what the reflex answers (a deletion of a pod of its own when
    `reflex_deletes`, else a Command create)."""
    p50_max, p99_max = ACTION_OVER_REFLEX_MS
    answer = "deletion of a pod of its own" if reflex_deletes else "Command create"
    return (
        f"≤ +{p50_max:g} ms p50, ≤ +{p99_max:g} ms p99 (issue 39, over a watcher that only answers each write with "
        f"one {answer}: bench/e2e_reflex.py)",
        f"≤ +{KAFKA_OVER_REFLEX_P99_MS:g} ms p99 (issue 39, over a producer that sends one acks=all record per write "
        "from memory: bench/e2e_reflex.py)",
    )


def kafka_over_reflex_of(items: list[Any]) -> list[float]:
    """Per fault, ms: the broker's time of the agent's fault.detected − the reflex producer's record's."""
    return [
        (i.kafka_at - i.reflex_kafka_at) * 1000
        for i in items
        if i.kafka_at is not None and i.reflex_kafka_at is not None
    ]


def _floor(own: list[float], *, p99_max: float = 15.0, p50_max: float | None = 5.0) -> str:
    """``p50 … p99 … max …`` of the agent's own time beyond a baseline (per fault, ms), and whether the issue's
    targets over it hold: `p99_max` and, unless None, `p50_max` (the Command's 15 / 5 ms by default)."""
    if not own:
        return "none measured"
    p50, p99 = pct(own, 0.5), pct(own, 0.99)
    held = p99 <= p99_max and (p50_max is None or p50 <= p50_max)
    targets = f"≤ {p50_max:g} / ≤ {p99_max:g} ms" if p50_max is not None else f"≤ {p99_max:g} ms p99"
    return f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(own):.1f} ms, {'met' if held else 'MISSED'} ({targets})"


def _conflicts_line(info: dict[str, Any]) -> str:
    c = info["conflicts"]
    sites = ", ".join(f"{k} {v}" for k, v in c["sites"].items())
    on = ", ".join(f"{k} {v}" for k, v in c["resources"].items())
    if not c["total"]:
        return "0"
    return (
        f"{c['conflicts']} failed writes, {c['after_agent']} of them within {AFTER_AGENT_S:g} s after the agent "
        f"changed its annotations on that job ({c['total']} lines; by source line: {sites}, {REQUEUED} being the "
        f"requeue repeating the error; on {on})"
    )


def _wasted_line(info: dict[str, Any]) -> str:
    w = info["wasted"]
    per = w["pods"] / w["restarts"] if w["restarts"] else 0.0
    text = (
        f"{w['pods']} pods in {w['restarts']} restarts ({per:.2f} per restart), {w['with']} restarts with any, "
        f"at most {w['max']} in one"
    )
    if w["late"]:
        text += f"; {w['late']} more deleted after the job was Running again, before its pods were"
    if w["unseen"]:
        text += f"; {w['unseen']} restarts whose return to Running the job watch did not show (window: until ready)"
    return text


def _commit(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or str(tree)


def _write_restart_rows(
    info: dict[str, Any], args: argparse.Namespace, suffix: str, cmd: str, load: str, by_command: bool
) -> None:
    """The rows of the controller's conflicts and of the pods created then killed again, for this run."""
    restart = "RestartJob Command" if by_command else f"--volcano-restart {args.volcano_restart}"
    where = (
        f"{info['counted']['restarts']} restarts ({restart}) of {args.jobs} guide jobs, "
        f"{info['fault_rate']:.1f} faults/s, {load}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; the agent "
        f"changed {AGENT_KEYS}… job annotations {info['job_writes']} times and wrote {info['records']} job record "
        "ConfigMaps"
    )
    other = "the code after" if args.agent_code else "the code before the job records moved to ConfigMaps"
    base = f"{other}: the row of the same name with{'out' if args.agent_code else ''} ', agent from …'"
    write_row(CONFLICTS_ROW + suffix,
              f"{_conflicts_line(info)} ({where}; lines with '{CONFLICT_TEXT}' the vc-controller-manager log got "
              "from the agent's start to the end)",
              "0 caused by the agent (issue 35)", base, cmd)  # fmt: skip
    write_row(WASTED_ROW + suffix,
              f"{_wasted_line(info)} ({where}; pods of the faulted job ADDED after the fault, deleted before the job "
              "was Running again)",
              "0 (issue 35)", base, cmd)  # fmt: skip


def _records(rest: Any) -> dict[str, str]:
    """The agent's job records (ConfigMaps ``fault-agent-job-<uid>`` in the leader's namespace): name → version."""
    items = rest.get("/api/v1/namespaces/default/configmaps").get("items", [])
    return {
        str(cm["metadata"]["name"]): str(cm["metadata"]["resourceVersion"])
        for cm in items
        if str(cm["metadata"]["name"]).startswith("fault-agent-job-")
    }


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) process `pid` has used so far: ``/proc/<pid>/stat`` fields 14
    and 15, in clock ticks (proc(5))."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ready(items: list[Injected], at: float) -> None:
    """Every fault of `items` whose job was not yet seen ready again was at `at` (all jobs were ready then)."""
    for item in items:
        if item.ready_at is None:
            item.ready_at = at


def _pin(pid: int, cpus: set[int] | frozenset[int]) -> None:
    """Every thread of process `pid` on `cpus` (threads it starts later inherit their creator's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)


def _isolate(tb: Testbed | None, agent_cpus: frozenset[int]) -> Callable[[], None]:
    """Keep `agent_cpus` for the agent and the reflex watcher: this process and the testbed's components (`tb`,
    when it is running already; a testbed started later inherits this process's CPUs) go to every other CPU.
    Returns what puts them back on every CPU they had.

    Raises:
        SystemExit: `agent_cpus` are not all this process's, or leave it no other CPU."""
    mine = os.sched_getaffinity(0)
    others = mine - agent_cpus
    if not agent_cpus <= mine:
        raise SystemExit(f"--agent-cpu {sorted(agent_cpus - mine)}: not among this process's CPUs {sorted(mine)}")
    if not others:
        raise SystemExit(f"--agent-cpu {sorted(agent_cpus)}: that leaves no CPU of {sorted(mine)} for the testbed")
    pids = [os.getpid()]
    if tb is not None:
        pids += [p for c in tb.components.values() if (p := c.current_pid()) is not None and c.alive()]
    for pid in pids:
        _pin(pid, others)

    def restore() -> None:
        for pid in pids:
            with contextlib.suppress(FileNotFoundError):
                _pin(pid, mine)

    return restore


OUTDATED_COMMAND = "Volcano would not count a deletion of pods older than the job"
"""The agent's warning when it restarts a Volcano Job with a Command because all its pods are older than the job
(agent.engine.sending ``Sending._restart``)."""


def _log_count(path: Path, text: str, start: int = 0) -> int:
    """Lines of the file at `path` from byte offset `start` on (what this run appended: the agent's log file is
    shared by the runs of one testbed) that contain `text` (0 when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(start)
            return sum(1 for line in f if text.encode() in line)
    except OSError:
        return 0


def _restart_counts(job: dict[str, Any]) -> tuple[int, int]:
    """A Volcano Job's ``status.retryCount`` and ``status.version`` (0 when unset): what its controller counted."""
    status = job.get("status") or {}
    return int(status.get("retryCount") or 0), int(status.get("version") or 0)


def _older_pods(jobs: dict[str, Any], pods: list[dict[str, Any]], names: list[str]) -> tuple[int, int]:
    """(pods, jobs): the pods of the jobs `names` whose ``volcano.sh/job-version`` annotation is below their job's
    ``status.version`` (pods re-created by a sync under the old version that the restart's ``killJob`` did not see
    yet, so they survived it), and the jobs all of whose pods are such (their deletion would be an outdated request
    to Volcano, a sync it does not count: the agent restarts those with a Command; docs/mindcluster-parity.md)."""
    older = jobs_all = 0
    for name in names:
        version = _restart_counts(jobs[name])[1]
        versions = [
            (p["metadata"].get("annotations") or {}).get("volcano.sh/job-version", "") for p in pods_of(pods, name)
        ]
        old = [v for v in versions if v.isdigit() and int(v) < version]
        older += len(old)
        jobs_all += bool(old) and len(old) == len(versions)
    return older, jobs_all


def _counted(
    items: list[Injected], before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, Any]:
    """How many of the agent's restarts Volcano's controller counted: per job, the faults injected on it (one
    whole-job restart each) against the growth of its ``status.retryCount`` and ``status.version`` over the run.
    A restart the controller did not count (a status update that conflicted: the pods re-created under the old
    version) shows as a job whose counters grew less than its faults."""
    sent = Counter(i.job for i in items)
    short = {
        job: (n, after[job][0] - before[job][0], after[job][1] - before[job][1])
        for job, n in sorted(sent.items())
        if after[job][0] - before[job][0] != n or after[job][1] - before[job][1] != n
    }
    return {
        "restarts": sum(sent.values()),
        "retry_count": sum(after[j][0] - before[j][0] for j in sent),
        "version": sum(after[j][1] - before[j][1] for j in sent),
        "differ": short,
    }


def _settings(pairs: list[str]) -> dict[str, str]:
    """``--agent-setting`` values as settings: ``KEY=VALUE`` each. Raises SystemExit on one without ``=``."""
    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise SystemExit(f"--agent-setting {pair!r}: expected KEY=VALUE (e.g. LOG__LEVEL=debug)")
        out[key.removeprefix("FAULT_AGENT_")] = value
    return out


def _per_fault(item: Injected) -> dict[str, Any]:
    """One fault for ``--dump``: job, node, round, the PUT's wall-clock send time (s) and every other moment as
    ms after it (None: not seen)."""

    def after(t: float | None) -> float | None:
        return None if t is None else round((t - item.at) * 1000, 2)

    return {
        "job": item.job, "node": item.node, "round": item.round, "at": item.at, "put": after(item.returned),
        "watch": after(item.watch_at), "reflex": after(item.reflex_at), "kafka": after(item.kafka_at),
        "action": after(item.action_at), "terminating": after(item.terminating_at),
        "reflex_kafka": after(item.reflex_kafka_at), "twin": after(item.twin_at),
        "twin_kafka": after(item.twin_kafka_at), "running": after(item.running_at),
        "running_since": after(item.running_since), "step_sent": after(item.resume_sent),
        "step_seen": after(item.step_seen_at), "first_step": after(item.first_step_at),
        "hung_step": item.hung_step, "resume_step": item.resume_step,
    }  # fmt: skip


def spread(values: list[float]) -> str:
    """``p50 … ms, p99 … ms, max … ms (n)`` of `values` (ms); ``none seen`` when empty."""
    if not values:
        return "none seen"
    return f"p50 {pct(values, 0.5):.0f} ms, p99 {pct(values, 0.99):.0f} ms, max {max(values):.0f} ms ({len(values)})"


def after_fault(items: list[Injected], name: str, start: str = "at") -> list[float]:
    """Per fault, ms from `item.<start>` (default its PUT sent) to `item.<name>`, where both are known."""
    out = []
    for i in items:
        a, b = getattr(i, start), getattr(i, name)
        if a is not None and b is not None:
            out.append((b - a) * 1000)
    return out


def _resume_lines(items: list[Injected], training: bool) -> tuple[str, str]:
    """The figures of the job Running again and of the first step (:func:`spread` of each, ms after the fault's
    PUT unless said), as printed and written."""
    n = len(items)
    running = (
        f"{spread(after_fault(items, 'running_at'))} of {n}; by the job's status.state.lastTransitionTime (the "
        f"controller's clock, whole seconds, so up to 1 s early): {spread(after_fault(items, 'running_since'))}; of "
        f"which first pod terminating → Running again (Volcano's restart, kwok): "
        f"{spread(after_fault(items, 'running_at', 'terminating_at'))}"
    )
    if not training:
        return running, "not measured (--no-training)"
    first = (
        f"the agent's recovery.resumed first_step_at (its clock) {spread(after_fault(items, 'first_step_at'))} of "
        f"{n}; the Lease's first new step on this process's watch {spread(after_fault(items, 'step_seen_at'))}; "
        f"agent's first_step_at − that watch event, per fault: "
        f"{spread(after_fault(items, 'first_step_at', 'step_seen_at'))}; "
        f"job Running again → the step's write sent (RESUME {RESUME_DELAY_S:g} s, then one write): "
        f"{spread(after_fault(items, 'resume_sent', 'running_at'))}, → seen on the watch: "
        f"{spread(after_fault(items, 'step_seen_at', 'running_at'))}"
    )
    early = sum(1 for i in items if i.first_step_at and i.running_at and i.first_step_at < i.running_at)
    if early:  # a step the agent took for the first one although the job was not Running again yet
        first += f"; {early} recovery.resumed before the job was Running again"
    return running, first


def _write_resume_rows(
    items: list[Injected],
    args: argparse.Namespace,
    info: dict[str, Any],
    running: str,
    first_step: str,
    load: str,
    w50: float,
    w99: float,
    r50: float,
    r99: float,
) -> None:
    """The rows 'fault to job Running again, <mode>' and 'fault to first step, <mode>' of this run."""
    suffix = f", {args.volcano_restart}"
    cmd = (
        f"python bench/bench_e2e.py --jobs {args.jobs} --faults {args.faults} --interval {args.interval} "
        f"--volcano-restart {args.volcano_restart}"
    )
    if args.agent_cpus:
        suffix += ", agent on a CPU of its own"
        cmd += "".join(f" --agent-cpu {c}" for c in sorted(args.agent_cpus))
    if args.volcano_controller != "volcano":
        suffix += ", Volcano controller as MindCluster ships it"
        cmd += f" --volcano-controller {args.volcano_controller}"
    agent_cpu = info["cpu"][0] * 1000 / len(items)
    where = (
        f"{len(items)} SeparateNPU chip faults on {args.jobs} guide jobs with rank 0's training loop (a step every "
        f"{STEP_S:g} s, heartbeat every {LEASE_INTERVAL_S:g} s), {info['fault_rate']:.1f} faults/s, {load}, agent "
        f"CPU {agent_cpu:.1f} ms per fault, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC"
    )
    term = after_fault(items, "terminating_at")
    base = (
        f"same run: bare watch of the fault's write p50 {w50:.1f} / p99 {w99:.1f} ms; reflex watcher's "
        f"{_reflex_what(args)} p50 {r50:.1f} / p99 {r99:.1f} ms; first pod terminating {spread(term)}"
    )
    write_row(RUNNING_ROW + suffix, f"{running} ({where}; arrival of the job watch's event)",
              "≥ 3x sooner than MindCluster's plugin at p50 (issue 39)", base, cmd)  # fmt: skip
    if args.training:
        write_row(FIRST_STEP_ROW + suffix,
                  f"{first_step} ({where}; the stand-in loop resumes {RESUME_DELAY_S:g} s after the job watch shows "
                  "the job Running again, from its checkpoint, its first step written at once)",
                  "sooner than the job Running again + one write + the agent's watch; what the agent adds is "
                  "first_step_at − the Lease watch's event", base, cmd)  # fmt: skip


def _reflex_what(args: argparse.Namespace) -> str:
    """The reflex watcher's answer as printed: ``pod deletion`` or ``Command ADDED`` (``--reflex-answer``)."""
    return "pod deletion" if args.reflex_deletes else "Command ADDED"


def _lone_reflex(items: list[Injected], what: str) -> str | None:
    """The lone reflex watcher's figures (:func:`_reflex_alone`): its answer (`what`: its Command ADDED or its pod
    deletion) and its Kafka record, each as p50 / p99 over its own bare-watch events, with the issue's targets for
    the agent applied to it (the answer: bare p50 + 5 and p99 + 15 ms; Kafka: p99 + 5 ms). None when any of the
    three was never seen."""
    watch = [(i.watch_at - i.at) * 1000 for i in items if i.watch_at is not None]
    command = [(i.reflex_at - i.at) * 1000 for i in items if i.reflex_at is not None]
    record = [(i.reflex_kafka_at - i.at) * 1000 for i in items if i.reflex_kafka_at is not None]
    if not watch or not command or not record:
        return None
    w50, w99 = pct(watch, 0.5), pct(watch, 0.99)
    return (
        f"{what} {_compare(command, w50, w99, p99_over=15.0, p50_over=5.0)}; "
        f"record {_compare(record, w50, w99, p99_over=5.0, p50_over=None)}; bare watch p50 {w50:.1f} / p99 {w99:.1f} ms"
    )


def _compare(values: list[float], w50: float, w99: float, *, p99_over: float, p50_over: float | None) -> str:
    """``p50 … (+x over bare), p99 … (+y over bare), max …`` and whether the issue-19 target holds."""
    p50, p99 = pct(values, 0.5), pct(values, 0.99)
    held = p99 <= w99 + p99_over and (p50_over is None or p50 <= w50 + p50_over)
    return (
        f"p50 {p50:.1f} ms (bare +{p50 - w50:.1f}), p99 {p99:.1f} ms (bare +{p99 - w99:.1f}), "
        f"max {max(values):.1f} ms, target {'met' if held else 'MISSED'}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (`argv`, default ``sys.argv[1:]``) with the derived ``alone``, ``agent_cpus``, ``by_command``
    and ``reflex_deletes``; exits with a usage error as argparse does."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.alone < 1:
        parser.error("--alone must be at least 1: the lone reflex watcher is a baseline of every run")
    if args.twin_path_cpu_ms < 0 or (args.twin_path_cpu_ms and not args.twin):
        parser.error("--twin-path-cpu-ms takes 0 or more ms and needs --twin")
    if args.twin_durable and not args.twin:
        parser.error("--twin-durable needs --twin")
    args.alone = min(args.alone, args.jobs)
    args.agent_cpus = frozenset(args.agent_cpu) if args.agent_cpu else None
    args.by_command = args.volcano_restart == "command"  # else the action is the agent's own pod deletion
    args.reflex_deletes = args.reflex_answer == "delete" or (args.reflex_answer == "same" and not args.by_command)
    return args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="a running testbed's folder (default: start a fresh one, stop it after)")
    parser.add_argument("--jobs", type=int, default=50, help="guide jobs (faults per round; default 50)")
    parser.add_argument("--faults", type=int, default=200, help="faults in total (default 200)")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between faults in a round")
    parser.add_argument("--write", action="store_true", help="update the rows in bench/RESULTS.md")
    parser.add_argument(
        "--agent-cpu",
        type=int,
        action="append",
        help="run the agent and the reflex watcher on this CPU (repeatable), everything else on the others: the "
        "agent on a machine of its own, as in a cluster where it runs beside the control plane, not on it",
    )
    parser.add_argument(
        "--one-session",
        action="store_true",
        help="run the agent and the reflex watchers in this benchmark's session (one scheduling group with its "
        "watchers under the kernel's autogroup), as before session 27, instead of a session of their own each",
    )
    parser.add_argument(
        "--alone",
        type=int,
        default=20,
        help="faults answered by the reflex watcher alone, before the agent starts (at most one per job; default 20)",
    )
    parser.add_argument(
        "--volcano-restart",
        choices=("command", "delete-pods", "auto"),
        default="auto",
        help="the agent's policy.volcano_restart: auto (the agent's default: the guide jobs' policies restart them "
        "on a deleted pod, so it deletes their pods and the action is the first pod terminating), delete-pods "
        "(the same for these jobs), or a RestartJob Command",
    )
    parser.add_argument(
        "--volcano-controller",
        choices=sorted(VOLCANO_CONTROLLER_PROFILES),
        help="a fresh testbed's Volcano controller-manager: Volcano's defaults (default) or the arguments "
        "MindCluster's manifests give it (python -m testbed up --volcano-controller); with --dir, the running "
        "testbed's must match",
    )
    parser.add_argument(
        "--agent-code",
        type=Path,
        help="run the agent from this source tree (a worktree of another commit: its agent package on PYTHONPATH, "
        "with PYTHONSAFEPATH so the current folder's does not come first); the testbed, the benchmark and the "
        "agent's settings stay this tree's. Its rows are written with ', agent from <commit>' (default: this tree)",
    )
    parser.add_argument(
        "--reflex-answer",
        choices=("same", "command", "delete"),
        default="same",
        help="how the reflex watcher answers each fault: a Command create, a deletion of a running pod of its own in "
        "the benchmark's namespace (timed on the same pod watch as the agent's deletions), or 'same' (default): the "
        "kind of the agent's first action in its --volcano-restart mode (a Command in 'command', else a deletion)",
    )
    parser.add_argument(
        "--twin",
        action="store_true",
        help="run a second, identical reflex watcher beside the first: its answers and records less the first's, "
        "per fault, are the noise of the figures over the reflex watcher (what an agent adding nothing would show)",
    )
    parser.add_argument(
        "--twin-path-cpu-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="with --twin: the twin spends MS ms of CPU between reading a fault and answering it (e2e_reflex.py "
        "--path-cpu-ms): the floor of a watcher with that much CPU on its way, e.g. the agent's path_cpu_ms "
        "(default 0)",
    )
    parser.add_argument(
        "--twin-durable",
        action="store_true",
        help="with --twin: the twin appends and fsyncs each answer's record before its action, as the agent's outbox "
        "does (e2e_reflex.py --durable-dir)",
    )
    parser.add_argument(
        "--idle",
        type=float,
        default=10.0,
        help="seconds the agent's CPU is sampled with no fault, once it leads (its idle rate; default 10)",
    )
    parser.add_argument(
        "--no-training",
        dest="training",
        action="store_false",
        help="no training loops: the jobs are not opted in to the progress heartbeat and fault → first step is not "
        "measured (fault → job Running again still is)",
    )
    parser.add_argument(
        "--write-resume",
        action="store_true",
        help="update only the rows 'fault to job Running again, <mode>' and 'fault to first step, <mode>' in "
        "bench/RESULTS.md (for a session running each --volcano-restart mode on one testbed)",
    )
    parser.add_argument(
        "--dump", type=Path, help="write each fault's times (ms after its PUT) here, one JSON line per fault"
    )
    parser.add_argument(
        "--agent-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more FAULT_AGENT_* setting of the agent, without the prefix (repeatable), e.g. LOG__LEVEL=debug "
        "for its 'fault stages' lines (agent.engine.stages; bench/e2e_stages.py joins them to --dump)",
    )
    return parser


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    load_start = os.getloadavg()[0]
    restore = _isolate(None, args.agent_cpus) if args.agent_cpus and not args.dir else (lambda: None)
    tb, close = open_testbed(args.dir, volcano_controller=args.volcano_controller or "volcano")
    if args.volcano_controller and tb.volcano_controller != args.volcano_controller:
        close()
        _parser().error(
            f"--volcano-controller {args.volcano_controller}: the testbed in {args.dir} runs "
            f"{tb.volcano_controller} (start one with python -m testbed up --volcano-controller "
            f"{args.volcano_controller})"
        )
    args.volcano_controller = tb.volcano_controller
    if args.agent_cpus and args.dir:
        restore = _isolate(tb, args.agent_cpus)
    try:
        items, info = asyncio.run(measure(tb, args, tb.workdir / "bench-e2e"))
    finally:
        restore()
        close()
    if args.dump:
        args.dump.write_text("".join(json.dumps(_per_fault(i)) + "\n" for i in info["alone"] + items))
    kafka = [(i.kafka_at - i.at) * 1000 for i in items if i.kafka_at is not None]
    action = [(i.action_at - i.at) * 1000 for i in items if i.action_at is not None]
    terminating = [(i.terminating_at - i.at) * 1000 for i in items if i.terminating_at is not None]
    watch = [(i.watch_at - i.at) * 1000 for i in items if i.watch_at is not None]
    missing = len(items) - min(len(kafka), len(action), len(terminating))
    print(f"{len(items)} faults on {args.jobs} jobs in {time.monotonic() - started:.0f} s; {missing} without a result")
    if not kafka or not action or not watch:
        print("FAILED: no fault reached Kafka or produced a Command (or no bare-watch baseline)", file=sys.stderr)
        return 1
    w50, w99 = pct(watch, 0.5), pct(watch, 0.99)
    print(f"baseline: write → bare watch event: p50 {w50:.1f} ms, p99 {w99:.1f} ms ({len(watch)} seen)")
    # The floor of any watcher that answers a write with a write of its own: the fault's watch event, then one
    # round trip; the injector's own PUT of the same moment is that round trip on this apiserver under this load.
    rtt = [(i.returned - i.at) * 1000 for i in items]
    own = [
        ((i.action_at - i.watch_at) - (i.returned - i.at)) * 1000
        for i in items
        if i.action_at is not None and i.watch_at is not None
    ]
    print(
        f"baseline: one write's round trip (the injector's PUT): p50 {pct(rtt, 0.5):.1f}, p99 {pct(rtt, 0.99):.1f} ms"
    )
    floor = _floor(own)
    print(f"fault → action beyond bare watch + one round trip (per fault): {floor}")
    # The third baseline: a watcher that answers each write with one write (a Command create or a pod deletion)
    # and does nothing else.
    what = _reflex_what(args)
    reflex = [(i.reflex_at - i.at) * 1000 for i in items if i.reflex_at is not None]
    over_reflex = [
        (i.action_at - i.reflex_at) * 1000 for i in items if i.action_at is not None and i.reflex_at is not None
    ]
    if not reflex:
        print(f"FAILED: the reflex watcher's answers ({what}) were not seen", file=sys.stderr)
        return 1
    r50, r99 = pct(reflex, 0.5), pct(reflex, 0.99)
    print(f"baseline: a reflex watcher's {what}: p50 {r50:.1f} ms, p99 {r99:.1f} ms ({len(reflex)} seen)")
    beyond_reflex, kafka_beyond_reflex = _over_reflex(over_reflex, kafka_over_reflex_of(items))
    print(f"fault → action beyond the reflex watcher (per fault): {beyond_reflex}")
    reflex_kafka = [(i.reflex_kafka_at - i.at) * 1000 for i in items if i.reflex_kafka_at is not None]
    if not reflex_kafka:
        print("FAILED: the reflex watcher's Kafka records were not seen", file=sys.stderr)
        return 1
    rk50, rk99 = pct(reflex_kafka, 0.5), pct(reflex_kafka, 0.99)
    print(
        f"baseline: a reflex producer's record ({info['timestamp_type']}): p50 {rk50:.1f} ms (bare +{rk50 - w50:.1f}), "
        f"p99 {rk99:.1f} ms (bare +{rk99 - w99:.1f}) ({len(reflex_kafka)} seen)"
    )
    print(f"fault → kafka beyond the reflex producer (per fault): {kafka_beyond_reflex}")
    twin = _twin(items, info, what) if args.twin else None
    if args.twin:
        if twin is None:
            print("FAILED: the second reflex watcher's answers or records were not seen (--twin)", file=sys.stderr)
            return 1
        if args.twin_path_cpu_ms or args.twin_durable:
            spends = f"spending {args.twin_path_cpu_ms:g} ms of CPU per fault on its way" + (
                ", durable first (append + fsync before acting)" if args.twin_durable else ""
            )
            print(f"a second reflex watcher {spends} − the first (per fault): {twin}")
        else:
            print(f"the figures' own noise: a second, identical reflex watcher − the first (per fault): {twin}")
    alone = _lone_reflex(info["alone"], what)
    if alone is None:
        print(f"FAILED: the lone reflex watcher's answers ({what}), records or bare-watch events were not seen",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"baseline: the reflex watcher alone, before the agent starts ({len(info['alone'])} faults): {alone}")
    lines = {
        "kafka": _compare(kafka, w50, w99, p99_over=5.0, p50_over=None),
        "action": _compare(action, w50, w99, p99_over=15.0, p50_over=5.0),
        "terminating": _compare(terminating, w50, w99, p99_over=15.0, p50_over=5.0) if terminating else "none seen",
    }
    print(f"fault → kafka  ({info['timestamp_type']} of fault.detected): {lines['kafka']}")
    by_command = args.by_command
    action_is = "RestartJob Command ADDED on a watch" if by_command else "the agent's pod deletion"
    print(f"fault → action ({action_is}): {lines['action']}")
    print(f"fault → first pod terminating (pod watch): {lines['terminating']}")
    counted = info["counted"]
    differ = "; ".join(
        f"{j}: {n} restarts, retryCount +{r}, version +{v}" for j, (n, r, v) in counted["differ"].items()
    )
    print(
        f"Volcano counted the agent's {counted['restarts']} restarts: status.retryCount +{counted['retry_count']}, "
        f"status.version +{counted['version']}" + (f" (jobs that differ: {differ})" if differ else "")
    )
    older, all_older, looks = info["older_pods"]
    by_outdated = _log_count(Path(info["agent_log"]), OUTDATED_COMMAND, info["agent_log_from"])
    print(
        f"pods under an older job-version than their job once the restarts were done (survivors of a restart's kill, "
        f"{looks} looks after a round): {older}; jobs with every pod such: {all_older}; the agent's restarts by "
        f"Command for that reason (its log): {by_outdated}"
    )
    agent_cpu, reflex_cpu = info["cpu"]
    print(
        f"CPU time per fault (user + system, all threads, from the first fault to the last round's recoveries): "
        f"agent {agent_cpu * 1000 / len(items):.1f} ms ({agent_cpu:.2f} s for {len(items)} faults), reflex watcher "
        f"{reflex_cpu * 1000 / len(items):.1f} ms"
    )
    idle = info["idle_rate"] * info["window_s"]  # what the agent would have spent in the window without faults
    print(
        f"agent CPU per fault net of its idle rate ({info['idle_rate'] * 1000:.1f} ms/s over {args.idle:g} s before "
        f"the first fault, times the {info['window_s']:.0f} s window): {(agent_cpu - idle) * 1000 / len(items):.1f} ms"
    )
    conflicts, wasted = _conflicts_line(info), _wasted_line(info)
    print(f"Volcano controller status-update conflicts (its log, this run): {conflicts}")
    print(f"pods created then killed again per restart (pod and job watches): {wasted}")
    print(
        f"the agent's writes on job objects: {info['job_writes']} changes of {AGENT_KEYS}… annotations seen; "
        f"{info['records']} job record ConfigMaps (fault-agent-job-…) created or changed"
    )
    running, first_step = _resume_lines(items, args.training)
    print(f"fault → job Running again (job watch; RESUME is the stand-in's constant): {running}")
    print(f"fault → first step: {first_step}")
    if not [i for i in items if i.running_at is not None] or (
        args.training and not [i for i in items if i.first_step_at is not None]
    ):
        print("FAILED: no job seen Running again, or no recovery.resumed event (with training)", file=sys.stderr)
        return 1
    load = f"load average {load_start:.1f} → {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    placement = (
        f"agent and reflex watcher on CPU {sorted(args.agent_cpus)}, the rest on the others; "
        if args.agent_cpus
        else ""
    )
    controller = (
        "Volcano's controller as MindCluster ships it"
        if args.volcano_controller == "mindcluster"
        else "Volcano's controller with its own defaults"
    )
    code = f"agent code from {args.agent_code} ({_commit(args.agent_code)}); " if args.agent_code else ""
    print(f"agent log: {info['agent_log']}; {code}{placement}{controller}; {load}")
    if (args.write or args.write_resume) and not args.agent_code:
        _write_resume_rows(items, args, info, running, first_step, load, w50, w99, r50, r99)
    if args.write_resume:
        return 0
    if args.write:
        rate = info["fault_rate"]
        cmd = f"python bench/bench_e2e.py --jobs {args.jobs} --faults {args.faults} --interval {args.interval}"
        own_cpu = ""  # the rows of a run with the agent on CPUs of its own are rows of their own
        if args.agent_cpus:
            own_cpu = ", agent on a CPU of its own"
            cmd += "".join(f" --agent-cpu {c}" for c in sorted(args.agent_cpus))
        cmd += f" --volcano-restart {args.volcano_restart}"  # the default is auto (the agent's) since issue 39
        if args.reflex_answer != "same":
            cmd += f" --reflex-answer {args.reflex_answer}"
        if args.twin:
            cmd += " --twin"
        if not by_command:
            own_cpu += ", pods deleted by the agent"
        if args.volcano_controller != "volcano":
            own_cpu += ", Volcano controller as MindCluster ships it"
            cmd += f" --volcano-controller {args.volcano_controller}"
        if args.agent_code:  # the code of another commit: only the rows comparing it, under names of their own
            cmd += f" --agent-code {args.agent_code}"
            _write_restart_rows(info, args, f"{own_cpu}, agent from {_commit(args.agent_code)}", cmd, load, by_command)
            return 0
        seen_as = (
            "RestartJob Command ADDED seen by a watch"
            if by_command
            else "the agent's first pod deletion: deletionTimestamp or DELETED seen by a pod watch"
        )
        action_word = "Command ADDED" if by_command else "first pod terminating"
        where = (
            f"{len(items)} SeparateNPU chip faults on {args.jobs} guide jobs, {rate:.1f} faults/s, "
            + (
                f"fault-agent and the reflex watcher alone on CPU {','.join(map(str, sorted(args.agent_cpus)))}, "
                "the testbed and this benchmark on the others, "
                if args.agent_cpus
                else "fault-agent run as a process on the 2-core testbed shared with other work, "
            )
            + f"{load}, "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}"
            + (f", {missing} faults without an event, Command or terminating pod" if missing else "")
        )
        base = f"same writes seen by a bare watch, same run: p50 {w50:.1f} ms, p99 {w99:.1f} ms"
        write_row(KAFKA_ROW + own_cpu, f"{lines['kafka']} ({where}; broker {info['timestamp_type']})",
                  "p99 ≤ bare-watch p99 + 5 ms", base, cmd)  # fmt: skip
        write_row(ACTION_ROW + own_cpu, f"{lines['action']} ({where}; {seen_as})",
                  "p99 ≤ bare-watch p99 + 15 ms, p50 ≤ bare-watch p50 + 5 ms", base, cmd)  # fmt: skip
        write_row(FLOOR_ROW + own_cpu, f"{floor} ({where}; {action_word} − bare watch − injector's PUT round trip)",
                  "≤ 15 ms p99, ≤ 5 ms p50 (the issue's targets, over the floor a one-round-trip watcher can reach)",
                  f"same run: bare watch p50 {w50:.1f} / p99 {w99:.1f} ms; one PUT round trip p50 "
                  f"{pct(rtt, 0.5):.1f} / p99 {pct(rtt, 0.99):.1f} ms", cmd)  # fmt: skip
        action_target, kafka_target = over_reflex_targets(reflex_deletes=args.reflex_deletes)
        write_row(REFLEX_ROW + own_cpu + (", reflex deleting pods" if args.reflex_deletes else ""),
                  f"{beyond_reflex} ({where}; agent's {action_word} − the reflex watcher's {what}, per fault)",
                  action_target,
                  f"same run: reflex watcher's {what} p50 {r50:.1f} / p99 {r99:.1f} ms after the fault; bare "
                  f"watch p50 {w50:.1f} / p99 {w99:.1f} ms", cmd)  # fmt: skip
        write_row(REFLEX_KAFKA_ROW + own_cpu,
                  f"{kafka_beyond_reflex} ({where}; agent's fault.detected − the reflex producer's record, per fault, "
                  f"broker {info['timestamp_type']})",
                  kafka_target,
                  f"same run: reflex producer's record p50 {rk50:.1f} / p99 {rk99:.1f} ms after the fault; bare "
                  f"watch p50 {w50:.1f} / p99 {w99:.1f} ms", cmd)  # fmt: skip
        if twin is not None:
            write_row(TWIN_ROW + own_cpu + (", reflex deleting pods" if args.reflex_deletes else ""),
                      f"{twin} ({where})",
                      "none: the spread any answer timed against the reflex watcher shows when it does exactly what "
                      "the reflex does (the floor of the rows over a reflex watcher)",
                      f"same run: reflex watcher's {what} p50 {r50:.1f} / p99 {r99:.1f} ms after the fault",
                      cmd)  # fmt: skip
        _write_restart_rows(info, args, own_cpu, cmd, load, by_command)
        if not args.reflex_deletes:  # the lone reflex's row is the one answering with Commands
            write_row(ALONE_ROW + own_cpu, f"{alone} ({len(info['alone'])} faults before the agent started; {where})",
                      "the issue's targets applied to a watcher that only answers each write with one Command create "
                      "and one record, with nothing else acting: bench/e2e_reflex.py (MISSED: they are below what one "
                      "write reaches on this testbed)",
                      "its own bare-watch events, same run", cmd)  # fmt: skip
        write_row(TERMINATING_ROW + own_cpu,
                  f"{lines['terminating']} ({where}; first deletionTimestamp seen by a pod watch)",
                  "p99 ≤ bare-watch p99 + 15 ms, p50 ≤ bare-watch p50 + 5 ms", base, cmd)  # fmt: skip
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
