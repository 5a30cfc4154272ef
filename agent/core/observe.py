"""Observe mode: the recoveries someone else makes, read from the job's and its pods' own state; and whether
MindCluster's Volcano plugin is evidently running beside the agent.

Pure (no I/O, no clock reads). The engine (agent.engine.observing) opens an :class:`Observation` when a fault
hits an opted-in job while ``policy.mode`` is ``observe``, and moves it on with :func:`step` from what the cache
shows, once per tick:

- **started**: something restarted the job after the fault (:func:`restart_signs`): its ``status.version`` or
  ``status.retryCount`` went up (Volcano's ``RestartJob``, by a Command or by the job's own
  ``PodEvicted → RestartJob`` / ``PodFailed → RestartJob`` policy), its phase is ``Restarting`` (or
  ``Terminating``/``Pending`` on the way to a restart), or pods it had when the fault came are being deleted or
  are gone (MindCluster's plugin deleting the faulty pods, pod-rescheduling, an AscendJob's operator);
- **recovered**: after that start, the job is Running with every live pod Running and Ready, at least as many
  live pods as before, none of them a pod the fault hit, and, when the whole job restarted (version/retryCount
  up or a restarting phase seen), none of them a pod from before (:func:`replaced`);
- **failed**: the job's controller gave it up (phase Failed/Aborted/Terminated:
  :func:`agent.core.policy.controller_ended_job`), or the recovery did not end within the deadline after the
  fault; **abandoned**: the job was deleted after the start;
- **unrestarted**: nobody restarted the job within the deadline: the observation ends without an event (the
  fault's fault.detected said all there was to say).

Volcano Job phases and counters: ``batch.volcano.sh/v1alpha1`` JobStatus (``state.phase``, ``version``,
``retryCount``). MindCluster's plugin ConfigMap: ``volcano-system/vcjob-fault-npu-cm``, written at every
scheduling session close while its rescheduling is on (component/ascend-for-volcano: plugin/factory.go
``BeforeCloseHandler`` → ``saveCacheToCm``; internal/rescheduling/cache.go ``WriteReSchedulerCacheToEnvCache``
sets the keys ``fault-node`` and ``remain-retry-times``; common/k8s/configmap.go ``CreateOrUpdateConfigMap``
updates it only when its data changed). The agent's own bookkeeping (agent.core.bookkeeping) writes only
``remain-retry-times`` there, never ``fault-node``: that key is the plugin's signature.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from agent.core.cluster import JobRecord, PodRecord
from agent.core.faults import Fault
from agent.core.policy import controller_ended_job

PLUGIN_CONFIGMAP = ("volcano-system", "vcjob-fault-npu-cm")
"""(namespace, name) of the ConfigMap MindCluster's Volcano plugin rewrites at every session close."""
PLUGIN_KEY = "fault-node"
"""The key only the plugin writes there (internal/rescheduling/type.go ``CmFaultNodeKind``)."""
ACTED_BY_AGENT = "agent"
ACTED_BY_OBSERVED = "observed"
"""Values of the recovery events' ``data.acted_by`` and of fault_agent_recovery_seconds' ``acted_by`` label."""

_RESTARTING_PHASES = frozenset({"Restarting", "Terminating", "Pending", "Aborting"})
"""Volcano phases a running job passes through when it is restarted (``Pending`` again after ``Restarting``)."""


class PluginEvidence(enum.StrEnum):
    """What the plugin's ConfigMap says about MindCluster's Volcano plugin."""

    ABSENT = "absent"  # no ConfigMap, or one without the plugin's key
    PRESENT = "present"  # the ConfigMap carries the plugin's key: the plugin ran here
    UPDATED = "updated"  # and it changed while the agent watched: the plugin runs now

    @property
    def active(self) -> bool:
        """The plugin is evidently active: its ConfigMap is there with its key (updated or not)."""
        return self is not PluginEvidence.ABSENT


@dataclass(frozen=True, slots=True)
class ConfigMapSeen:
    """One read of the plugin's ConfigMap: its resourceVersion and data keys."""

    resource_version: str
    keys: frozenset[str]


def plugin_evidence(first: ConfigMapSeen | None, latest: ConfigMapSeen | None) -> PluginEvidence:
    """The evidence from the agent's first read of the plugin's ConfigMap and its latest one (None: it did not
    exist then). ``updated`` when the latest read carries the plugin's key and differs from the first (created
    or rewritten since), ``present`` when it carries the key unchanged, else ``absent``."""
    if latest is None or PLUGIN_KEY not in latest.keys:
        return PluginEvidence.ABSENT
    if first is None or first.resource_version != latest.resource_version:
        return PluginEvidence.UPDATED
    return PluginEvidence.PRESENT


def coexistence_warning(evidence: PluginEvidence, mode: str) -> str | None:
    """The loud warning for `evidence` under ``policy.mode`` = `mode`, or None when there is nothing to say."""
    if not evidence.active or mode != "act":
        return None
    how = "is being updated" if evidence is PluginEvidence.UPDATED else "exists with its fault-node key"
    ns, name = PLUGIN_CONFIGMAP
    return (
        f"MindCluster's Volcano plugin looks active ({ns}/{name} {how}) while policy.mode is act: two "
        "reschedulers would restart the same jobs for one fault. Set policy.mode: observe "
        "(env FAULT_AGENT_POLICY__MODE=observe) to keep the agent's events and metrics without its restarts, "
        "or turn the plugin's rescheduling off."
    )


class Transition(enum.StrEnum):
    """What :func:`step` saw happen to an observation."""

    STARTED = "started"
    RECOVERED = "recovered"
    FAILED = "failed"  # the controller gave the job up, or the deadline passed after the start
    TIMEOUT = "timeout"
    ABANDONED = "abandoned"  # the job was deleted after the start
    UNRESTARTED = "unrestarted"  # nobody restarted it in time (or the job went away before): no event


@dataclass(frozen=True, slots=True)
class Observation:
    """One fault's hit job, watched for a restart someone else makes.

    Attributes:
        id: deterministic id (:func:`observation_id`), the recovery events' ``incident_id``.
        job_uid, kind, namespace, name: the job.
        first_fault_at: the first fault's own time (`Fault.signal_time`); the recovery time counts from it, as
            for the agent's own incidents.
        observed_at: when the agent saw that fault.
        version, retry_count, phase: the job's ``status.version``, ``status.retryCount`` and phase when the
            fault came.
        pods: UIDs of the job's live pods then (created before the fault); `hit`: those the fault is on (empty:
            a fault on no pod of the job, e.g. on a node it has no pod on).
        pod_count: how many of those there were.
        started_at: when a restart was first seen (None: not yet); `start`: its signs, a sentence.
        whole_job: the restart is of the whole job (version/retryCount up or a restarting phase seen).
        closed_at: when it ended (recovered, failed, abandoned, unrestarted).
    """

    id: str
    job_uid: str
    kind: str
    namespace: str
    name: str
    first_fault_at: datetime
    observed_at: datetime
    version: str
    retry_count: int
    phase: str
    pods: frozenset[str]
    hit: frozenset[str]
    pod_count: int
    started_at: datetime | None = None
    start: str = ""
    whole_job: bool = False
    closed_at: datetime | None = None

    @property
    def action(self) -> str:
        """The restart seen so far, as an agent.core.policy.Action value: ``restart-job`` or ``restart-pods``.
        A restart first seen as a pod going (an eviction) and then as the job's version going up (Volcano's
        ``PodEvicted -> RestartJob``) starts as ``restart-pods`` and ends as ``restart-job``: recovery.started
        says what was seen then, recovery.succeeded/failed and the histogram what was seen in the end."""
        return "restart-job" if self.whole_job else "restart-pods"


def observation_id(job: JobRecord, fault: Fault) -> str:
    """``<job name>-o<9 hex>`` from (job UID, job version, fault signal time): the same on any replica for one
    fault of one job generation, and never an id of the agent's own incidents (those are ``<name>-<10 hex>``)."""
    digest = hashlib.sha256(f"observed\x00{job.uid}\x00{job.version}\x00{fault.signal_time.isoformat()}".encode())
    return f"{job.name}-o{digest.hexdigest()[:9]}"


def open_observation(job: JobRecord, pods: Iterable[PodRecord], fault: Fault, now: datetime) -> Observation:
    """Start watching `job` (with its `pods` as the cache shows them) for a restart after `fault`, seen `now`."""
    # a pod created after the fault belongs to a restart already under way (the other rescheduler was quicker
    # than the agent's detection): not part of the job as the fault found it (step() sees it as the start)
    live = [p for p in pods if p.deletion_timestamp is None and not _newer(p, fault.signal_time)]
    hit = frozenset(p.uid for p in live if _hit(fault, p))
    return Observation(
        id=observation_id(job, fault),
        job_uid=job.uid,
        kind=job.kind.value,
        namespace=job.namespace,
        name=job.name,
        first_fault_at=fault.signal_time,
        observed_at=now,
        version=job.version,
        retry_count=job.retry_count,
        phase=job.phase,
        pods=frozenset(p.uid for p in live),
        hit=hit,
        pod_count=len(live),
    )


def worth_watching(action: str, controller_restarts: bool = False) -> bool:
    """Whether a fault the policy decided `action` for (an agent.core.policy.Action value) opens an observation:
    the ones the agent would restart the job for, or give it up for (``restart-job``, ``restart-pods``,
    ``resubmit``, ``abort``: another rescheduler with other budgets may still restart it), and those the job's
    controller restarts by itself (`controller_restarts`: a JobSet's failure policy); not ``none`` otherwise nor
    ``force-delete-pods`` (no restart follows). Such a fault still joins an observation already open."""
    return controller_restarts or action not in ("none", "force-delete-pods")


def _hit(fault: Fault, pod: PodRecord) -> bool:
    """Whether `fault` is on `pod`: its own pod, or its node (and one of its chips, for a chip fault)."""
    if fault.pod is not None:
        return pod.uid == fault.pod.uid
    return bool(fault.node) and pod.node == fault.node and (not fault.chips or bool(set(fault.chips) & set(pod.chips)))


def _newer(pod: PodRecord, t: datetime) -> bool:
    """Whether `pod` was created after `t` (creationTimestamp has whole seconds: a pod of the same second is not
    counted as newer)."""
    return pod.created_at is not None and pod.created_at > t


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def restart_signs(obs: Observation, job: JobRecord, pods: Iterable[PodRecord]) -> tuple[str, bool] | None:
    """The signs that `job` is being (or was) restarted since `obs` opened, as (sentence, whole job), or None.

    Whole job: ``status.version`` or ``status.retryCount`` up, or a restarting phase (Restarting, Terminating,
    Pending, Aborting) the job was not in when the fault came. Pods only: a pod the job had is being deleted
    (deletionTimestamp set) or is gone, or pods were created after the fault (a restart the agent saw only once
    it was under way: :func:`open_observation` leaves such pods out of the job as the fault found it)."""
    signs: list[str] = []
    whole = False
    old_v, new_v = _int(obs.version), _int(job.version)
    if old_v is not None and new_v is not None and new_v > old_v:
        signs.append(f"status.version {old_v} -> {new_v}")
        whole = True
    if job.retry_count > obs.retry_count:
        signs.append(f"status.retryCount {obs.retry_count} -> {job.retry_count}")
        whole = True
    if job.phase in _RESTARTING_PHASES and job.phase != obs.phase:
        signs.append(f"phase {job.phase}")
        whole = True
    pods = list(pods)
    by_uid = {p.uid: p for p in pods}
    going = sorted(u for u in obs.pods if u not in by_uid or by_uid[u].deletion_timestamp is not None)
    if going:
        signs.append(f"{len(going)} of its {obs.pod_count} pods deleted")
    new = [p for p in pods if p.uid not in obs.pods and _newer(p, obs.first_fault_at)]
    if new and not going:
        signs.append(f"{len(new)} pods created after the fault")
    if not signs:
        return None
    return "; ".join(signs), whole


def replaced(obs: Observation, job: JobRecord, pods: Iterable[PodRecord]) -> bool:
    """Whether the restart `obs` saw has finished: the job Running, every live pod scheduled, Running and Ready,
    at least as many live pods as before, none of them hit by the fault, and none from before when the whole
    job restarted."""
    if job.phase != "Running":
        return False
    live = [p for p in pods if p.deletion_timestamp is None]
    if not live or len(live) < obs.pod_count:
        return False
    if not all(p.phase == "Running" and p.ready and p.node for p in live):
        return False
    old = obs.pods if obs.whole_job else obs.hit
    return not any(p.uid in old for p in live)


def step(
    obs: Observation, job: JobRecord | None, pods: Iterable[PodRecord], now: datetime, deadline_s: float
) -> tuple[Observation, Transition | None]:
    """Move `obs` on from what the cluster shows at `now`: `job` as cached (None: gone, or another UID under its
    name), its `pods`. `deadline_s`: ``policy.recovery_deadline_s``, from the first fault. Returns the new
    observation and what happened (None: nothing). At most one transition per call: a restart that started and
    ended between two ticks is reported as started now and recovered at the next call."""
    if obs.closed_at is not None:
        return obs, None
    late = now - obs.first_fault_at > timedelta(seconds=deadline_s)
    if job is None or job.uid != obs.job_uid:
        if obs.started_at is None:
            return replace(obs, closed_at=now), Transition.UNRESTARTED
        return replace(obs, closed_at=now), Transition.ABANDONED
    pods = list(pods)
    if obs.started_at is None:
        signs = restart_signs(obs, job, pods)
        if signs is not None:
            return replace(obs, started_at=now, start=signs[0], whole_job=signs[1]), Transition.STARTED
        if controller_ended_job(job) is not None or late:
            return replace(obs, closed_at=now), Transition.UNRESTARTED
        return obs, None
    if not obs.whole_job:
        signs = restart_signs(obs, job, pods)
        if signs is not None and signs[1]:  # a pod-level restart became a job restart (escalation)
            obs = replace(obs, whole_job=True, start=signs[0])
    if replaced(obs, job, pods):
        return replace(obs, closed_at=now), Transition.RECOVERED
    if controller_ended_job(job) is not None:
        return replace(obs, closed_at=now), Transition.FAILED
    if late:
        return replace(obs, closed_at=now), Transition.TIMEOUT
    return obs, None


def recovery_seconds(obs: Observation) -> float:
    """Seconds from the first fault to the end (0 while open), as the agent's own incidents count them."""
    end = obs.closed_at or obs.first_fault_at
    return max(0.0, (end - obs.first_fault_at).total_seconds())


def keys_of(data: Mapping[str, str] | None) -> frozenset[str]:
    """The data keys of a ConfigMap (None: no data)."""
    return frozenset(data or {})
