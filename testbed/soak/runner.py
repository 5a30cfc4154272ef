"""Run one soak schedule on a running testbed with two agent processes (leader and standby) and observe it.

One run: fresh kwok nodes and a fresh namespace with the guide's Volcano Job (``fault-scheduling=force``,
budgets raised so the soak never exhausts them); two ``fault-agent run`` processes sharing a Lease (3 s) in
that namespace, each with its own outbox folder under one peers folder (a running one takes over a dead one's,
``kafka.outbox_peers_dir``); a Kafka reader (partition and offset of every record), a watch of
RestartJob Commands, a pod lister and a /readyz + /metrics prober, once a second. Each step of the schedule
runs as its own task at its time (faults through :class:`testbed.inject.Injector`, processes through
SIGKILL/SIGSTOP/SIGCONT and :class:`testbed.cluster.Testbed`), and is undone at its end, also when the run
is cancelled. Then everything is healed, the run settles (every job Running, every started incident ended,
every outbox drained, or ``settle_s``), the agents get SIGTERM, their outboxes are read, and
:func:`testbed.soak.checks.check_all` judges what was seen.

Times are seconds since the run's start on the wall clock (Kafka timestamps and CloudEvents times are wall
clock too); this is the live edge, the checks themselves take the times as data.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fcntl
import json
import logging
import os
import signal
import struct
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

from agent.core.progress import HANG_TIMEOUT_LABEL, PROGRESS_LABEL
from testbed.agent_runner import FAULTS_TOPIC, RECOVERIES_TOPIC, AgentProcess
from testbed.cluster import Testbed, TestbedError
from testbed.controller_costs import annotation_changes, controller_conflicts, slim_job, slim_pod, wasted_pods
from testbed.heartbeat import TrainingLoop
from testbed.inject import ChipFault, InjectError, Injector, SwitchFault
from testbed.observe import WatchRecorder
from testbed.rest import RestError
from testbed.soak import checks
from testbed.soak.checks import (
    CommandSeen,
    Created,
    Disruption,
    FaultSpan,
    Gone,
    Health,
    Life,
    Observed,
    PodSample,
    PodStep,
    Record,
    Scrape,
    TakeOver,
    Verdict,
)
from testbed.soak.schedule import (
    ACTING_LEVELS,
    AGENT_GONE,
    AGENT_KILL,
    AGENT_STOP,
    APISERVER_STOP,
    BUSINESS,
    CHIP,
    EVICT,
    KAFKA_KILL,
    KAFKA_STOP,
    NODE,
    NOT_READY,
    SWITCH,
    Step,
)

ROOT = Path(__file__).resolve().parent.parent.parent
GUIDE_JOB = ROOT / "config" / "examples" / "vcjob-mindx-dls-test.yaml"
RUN_LABEL = "soak.fault-agent.io/run"
NPU = "huawei.com/Ascend910"
BUS = ("bus.volcano.sh", "v1alpha1", "commands")

# A Lease shorter than client-go's 15 s so takeovers happen within the soak, longer than the e2e tests' 3 s:
# on the shared 2-core machine (load 10-15) a 2 s renew deadline made the leader step down every few seconds.
LEASE_DURATION_S = 6.0
RENEW_DEADLINE_S = 4.0
RETRY_PERIOD_S = 1.0
NODE_NOT_READY_GRACE_S = 5.0
NODE_HEALTH_RECHECK_S = 15.0
SPILL_AFTER_S = 5.0
RECOVERY_DEADLINE_S = 120.0
OUTBOX_ADOPT_INTERVAL_S = 5.0  # the default: the bound checked is the one deploy/ runs with
SETTINGS: dict[str, str] = {
    "LEADER__LEASE_DURATION_S": str(LEASE_DURATION_S),
    "LEADER__RENEW_DEADLINE_S": str(RENEW_DEADLINE_S),
    "LEADER__RETRY_PERIOD_S": str(RETRY_PERIOD_S),
    "DETECT__NODE_NOT_READY_GRACE_S": str(NODE_NOT_READY_GRACE_S),
    "DETECT__NODE_HEALTH_RECHECK_S": str(NODE_HEALTH_RECHECK_S),
    "KAFKA__SPILL_AFTER_S": str(SPILL_AFTER_S),
    "KAFKA__OUTBOX_ADOPT_INTERVAL_S": str(OUTBOX_ADOPT_INTERVAL_S),
    # an incident that cannot recover (seen: a pod of the restarted job failing while the incident is still
    # restarting joins it and keeps the job unhealthy) ends as failed (timeout) after this, within the run
    "POLICY__RECOVERY_DEADLINE_S": str(RECOVERY_DEADLINE_S),
    # the soak fails many nodes on purpose: the rate limit and breaker, which exist to stop such storms, are
    # raised out of the way (their own tests are elsewhere)
    "POLICY__RESTART_BURST": "10000",
    "POLICY__RESTART_RATE_PER_MIN": "10000",
    "POLICY__BREAKER_NODE_SHARE": "1.0",
    "POLICY__BREAKER_MIN_FAULTY_NODES": "100000",
}
"""FAULT_AGENT_* settings of the soak's agents (without the prefix); the bounds follow from them."""

HANG_TIMEOUT_S = 40.0
"""Every soak job reports its training progress (docs/progress.md) with this hang timeout: longer than the
longest gap a progressing job's heartbeat shows in the soak (an apiserver stopped up to 10 s, the client's
write then waiting up to its 10 s request timeout, an agent frozen up to 12 s), so a progressing job is never
hung, shorter than the run so the deliberately hung job is."""
STEP_S = 1.0
HEARTBEAT_S = 2.0
HUNG_JOB = "job-hung"
"""The job whose training loop stops stepping (:meth:`Run.hang_one_job`), on two nodes of its own that no step
of the schedule touches (the schedule's job and node indices never reach it): its one hang restart is expected."""
HANG_AT_S = 15.0

BOUNDS = checks.bounds_from_settings(
    lease_duration_s=LEASE_DURATION_S,
    retry_period_s=RETRY_PERIOD_S,
    node_not_ready_grace_s=NODE_NOT_READY_GRACE_S,
    node_health_recheck_s=NODE_HEALTH_RECHECK_S,
    spill_after_s=SPILL_AFTER_S,
    outbox_adopt_interval_s=OUTBOX_ADOPT_INTERVAL_S,
)

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass
class _Agent:
    """One agent slot: its process object (restarted in place after a kill, or replaced in a new outbox folder
    after an agent_gone step) and state the steps share."""

    proc: AgentProcess
    frozen: bool = False
    down: bool = False
    leader: bool = False
    life: int = -1  # index of its current Life in Observed.lives
    generation: int = 1  # its outbox folder is <name>-<generation> under the peers folder

    @property
    def outbox(self) -> str:
        """The name of its outbox folder (what :class:`Created` and :class:`Gone` call it)."""
        return f"{self.proc.name}-{self.generation}"


@dataclass
class Run:
    """The state of one run (see the module docstring)."""

    testbed: Testbed
    steps: Sequence[Step]
    workdir: Path
    nodes: int
    jobs: int
    say: Say = _quiet
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    obs: Observed = field(default_factory=Observed)
    agents: list[_Agent] = field(default_factory=list)
    t0: float = 0.0  # wall clock of the run's clock zero (observations)
    schedule_t0: float = 0.0  # wall clock the schedule's at_s count from
    _outbox: dict[str, float] = field(default_factory=dict)  # agent → events its outbox still holds
    folders: dict[str, Path] = field(default_factory=dict)  # every outbox folder an agent used, by name
    loops: dict[str, TrainingLoop] = field(default_factory=dict)  # job name -> its rank 0's training loop

    def __post_init__(self) -> None:
        self.rest = self.testbed.rest()
        self.injector = Injector(self.rest)
        self.namespace = f"soak-{self.tag}"
        self.node_names = [f"soak-{self.tag}-{i}" for i in range(self.nodes)]
        self.job_names = [f"job-{j}" for j in range(self.jobs)] + [HUNG_JOB]  # the schedule's indices: < jobs
        self.hung_nodes = [f"soak-{self.tag}-hung-{i}" for i in range(2)]
        self.source = f"/fault-agent/soak-{self.tag}"
        self.chips: dict[str, dict[int, ChipFault]] = {n: {} for n in self.node_names}
        self.device_locks = {n: asyncio.Lock() for n in self.node_names}
        self.latest_pods: dict[str, list[PodSample]] = {}
        self.stop = asyncio.Event()

    def now(self) -> float:
        return time.time() - self.t0

    # ----- set-up ----------------------------------------------------------------------------------------
    def _jobs(self) -> list[dict[str, Any]]:
        docs = [d for d in yaml.safe_load_all(GUIDE_JOB.read_text(encoding="utf-8")) if d]
        out = []
        for name in self.job_names:
            cm, job = copy.deepcopy(docs[0]), copy.deepcopy(docs[1])
            cm["metadata"].update(name=f"rings-config-{name}", namespace=self.namespace)
            job["metadata"].update(name=name, namespace=self.namespace)
            job["metadata"]["labels"]["fault-retry-times"] = "100"  # the most the label takes: never out of budget here
            job["metadata"]["labels"].update({PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: f"{HANG_TIMEOUT_S:.0f}"})
            job["spec"]["maxRetry"] = 100000
            tmpl = job["spec"]["tasks"][0]["template"]["spec"]
            tmpl["nodeSelector"][RUN_LABEL] = self.tag if name != HUNG_JOB else f"{self.tag}-hung"
            term = tmpl["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
            term["labelSelector"]["matchExpressions"][0]["values"] = [name]
            for vol in tmpl["volumes"]:
                if vol.get("configMap"):
                    vol["configMap"]["name"] = f"rings-config-{name}"
            out += [cm, job]
        return out

    def set_up(self) -> None:
        """Namespace, nodes (Ready), jobs (Running). Raises TimeoutError naming what did not come up."""
        self.rest.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
        self.injector.add_nodes([*self.node_names, *self.hung_nodes])
        for name in self.node_names:
            self.rest.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {RUN_LABEL: self.tag}}})
        for name in self.hung_nodes:
            self.rest.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {RUN_LABEL: f"{self.tag}-hung"}}})
        deadline = time.monotonic() + 120
        while True:  # a namespace's default ServiceAccount comes from kube-controller-manager
            try:
                self.rest.get(f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default")
                break
            except RestError as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        for doc in self._jobs():
            path = (
                f"/api/v1/namespaces/{self.namespace}/configmaps"
                if doc["kind"] == "ConfigMap"
                else f"/apis/batch.volcano.sh/v1alpha1/namespaces/{self.namespace}/jobs"
            )
            self.rest.request("POST", path, doc)
        self.wait_jobs_running(120)

    def start_training(self) -> None:
        """Each job's rank 0 training loop (testbed.heartbeat): a step every :data:`STEP_S`, its heartbeat Lease
        written every :data:`HEARTBEAT_S` by the real client; it keeps stepping across the job's restarts (the
        rank-0 pod's name stays). Every step is kept in :attr:`Observed.steps`."""
        for name in self.job_names:
            history = self.obs.steps.setdefault(name, [])
            self.loops[name] = TrainingLoop(
                self.testbed, self.namespace, name, f"{name}-default-test-0", step_s=STEP_S, interval_s=HEARTBEAT_S,
                history=history,
            ).start()  # fmt: skip

    def stop_training(self) -> None:
        for loop in self.loops.values():
            loop.stop()

    async def hang_one_job(self) -> None:
        """At :data:`HANG_AT_S` the :data:`HUNG_JOB`'s loop stops stepping for good (the Lease still renewed), as a
        collective waiting forever: one hang restart is expected (invariant 8 says when it may be missing)."""
        await asyncio.sleep(max(0.0, self.schedule_t0 + HANG_AT_S - time.time()))
        loop = self.loops[HUNG_JOB]
        loop.hang()
        await asyncio.sleep(STEP_S + 0.2)
        last = loop.stepped_at - self.t0
        self.obs.stalls.append(last)
        self.say(f"  {HUNG_JOB}'s training loop hung at step {loop.step}")
        # the hang is a fault from its timeout on: a cause of the restart it brings (invariant 2)
        self.obs.pod_steps.append(PodStep(last + HANG_TIMEOUT_S, "hang", HUNG_JOB, f"{HUNG_JOB}-default-test-0"))

    def jobs_running(self) -> list[str]:
        """The jobs not yet Running with two live, Running, chip-annotated pods."""
        jobs = self.rest.get(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{self.namespace}/jobs").get("items", [])
        pods = self.rest.get(f"/api/v1/namespaces/{self.namespace}/pods").get("items", [])
        waiting = []
        by_name = {j["metadata"]["name"]: j for j in jobs}
        for name in self.job_names:
            job = by_name.get(name, {})
            ok = [
                p
                for p in pods
                if p["metadata"].get("labels", {}).get("volcano.sh/job-name") == name
                and not p["metadata"].get("deletionTimestamp")
                and p.get("status", {}).get("phase") == "Running"
                and p["metadata"].get("annotations", {}).get(NPU)
            ]
            if job.get("status", {}).get("state", {}).get("phase") != "Running" or len(ok) < 2:
                waiting.append(name)
        return waiting

    def wait_jobs_running(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while waiting := self.jobs_running():
            if time.monotonic() > deadline:
                raise TimeoutError(f"soak jobs not Running within {timeout_s:.0f} s: {', '.join(waiting)}")
            time.sleep(0.5)

    def tear_down(self) -> None:
        """Delete the run's jobs, pods, nodes and namespace (its Lease and breaker ConfigMap go with it)."""
        for path in (
            f"/apis/batch.volcano.sh/v1alpha1/namespaces/{self.namespace}/jobs",
            f"/api/v1/namespaces/{self.namespace}/pods?gracePeriodSeconds=0",
        ):
            with contextlib.suppress(RestError, OSError):
                self.rest.request("DELETE", path)
        with contextlib.suppress(RestError, OSError):
            self.injector.delete_nodes([*self.node_names, *self.hung_nodes])
        with contextlib.suppress(RestError, OSError):
            self.rest.request("DELETE", f"/api/v1/namespaces/{self.namespace}")

    # ----- agents ------------------------------------------------------------------------------------------
    def _agent_settings(self) -> dict[str, str]:
        return {
            "CLUSTER_NAME": f"soak-{self.tag}",
            "KUBE__NAMESPACES": json.dumps([self.namespace]),
            "LEADER__NAMESPACE": self.namespace,
            "LEADER__NAME": f"fault-agent-soak-{self.tag}",
            "POLICY__BREAKER_CONFIGMAP": f"fault-agent-breaker-soak-{self.tag}",
            "KAFKA__OUTBOX_PEERS_DIR": str(self.peers_dir),
            **SETTINGS,
        }

    @property
    def peers_dir(self) -> Path:
        """The folder holding every agent's outbox folder (``kafka.outbox_peers_dir``)."""
        return self.workdir / "outboxes"

    def _use_folder(self, slot: _Agent) -> None:
        """Point `slot`'s process at its outbox folder (:attr:`_Agent.outbox` under :attr:`peers_dir`)."""
        folder = self.peers_dir / slot.outbox
        self.folders[slot.outbox] = folder
        slot.proc.env["FAULT_AGENT_KAFKA__OUTBOX_DIR"] = str(folder)

    def _start(self, slot: _Agent) -> None:
        """Start (or start again) `slot`'s process and record its Life. Blocking (waits for /readyz).

        A process started again in its folder while the other replica is taking that folder over (it holds the
        folder's lock for the few milliseconds of a commit) stops at start with "in use by another agent
        process"; it is started again once, as the kubelet would restart its container."""
        started = self.now()
        try:
            slot.proc.start(ready_timeout_s=90)
        except RuntimeError as e:
            if "in use by another agent process" not in str(e):
                raise
            self.say(f"  {slot.proc.name} met its outbox being taken over at start: started again")
            time.sleep(1.0)
            slot.proc.start(ready_timeout_s=90)
        assert slot.proc.proc is not None
        self.obs.lives.append(Life(slot.proc.name, slot.proc.proc.pid, started))
        slot.life = len(self.obs.lives) - 1
        slot.down = False

    def _end_life(self, slot: _Agent, *, expected: bool, killed: bool) -> None:
        life = self.obs.lives[slot.life]
        code = slot.proc.proc.returncode if slot.proc.proc is not None else None
        tail = "" if expected else slot.proc.tail(15)
        self.obs.lives[slot.life] = Life(
            life.agent, life.incarnation, life.start, self.now(), code, expected, killed, tail
        )

    def start_agents(self) -> None:
        for suffix in ("a", "b"):
            proc = AgentProcess(
                self.testbed, self.workdir, settings=self._agent_settings(), name=f"soak-{self.tag}-{suffix}"
            )
            slot = _Agent(proc)
            self._use_folder(slot)
            self.agents.append(slot)
            self._start(slot)
            if suffix == "a":
                deadline = time.monotonic() + 30
                while proc.metric("fault_agent_leader") != 1:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"agent {proc.name} did not take the Lease within 30 s; log {proc.log}")
                    time.sleep(0.2)

    def _scrape(self, slot: _Agent) -> Scrape | None:
        """One /metrics scrape of a running, not frozen agent (None when it does not answer)."""
        if slot.down or slot.frozen or slot.proc.proc is None or slot.proc.proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(slot.proc.url + "/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except (OSError, urllib.error.URLError):
            return None
        values = _metric_sums(
            text,
            (
                "fault_agent_recovery_seconds_count",
                "fault_agent_task_failures_total",
                "fault_agent_leader",
                "fault_agent_outbox_events",
            ),
        )
        slot.leader = values["fault_agent_leader"] == 1
        sc = Scrape(
            self.now(),
            slot.proc.name,
            slot.proc.proc.pid,
            values["fault_agent_recovery_seconds_count"],
            values["fault_agent_task_failures_total"],
        )
        self.obs.scrapes.append(sc)
        self._outbox[slot.proc.name] = values["fault_agent_outbox_events"]
        return sc

    # ----- observers ---------------------------------------------------------------------------------------
    async def probe_agents(self) -> None:
        """Once a second: each agent's liveness, /readyz and /metrics; an agent that exited on its own is a
        crash (recorded) and is started again so the soak goes on."""
        while not self.stop.is_set():
            for slot in self.agents:
                if slot.down or slot.frozen or slot.proc.proc is None:
                    continue
                if slot.proc.proc.poll() is not None:
                    self._end_life(slot, expected=False, killed=False)
                    slot.down = True
                    with contextlib.suppress(RuntimeError):
                        await asyncio.to_thread(self._start, slot)
                    continue
                t = self.now()
                status = await asyncio.to_thread(slot.proc.http_status, "/readyz")
                if not slot.frozen and not slot.down and not self.stop.is_set():  # stopping: the agents are going
                    self.obs.health.append(Health(t, slot.proc.name, slot.proc.proc.pid, status))
                await asyncio.to_thread(self._scrape, slot)
            await _sleep_or(self.stop, 1.0)

    async def list_pods(self) -> None:
        """Once a second: the namespace's pods as :class:`PodSample` (skipped while the apiserver does not answer)."""
        while not self.stop.is_set():
            t = self.now()
            try:
                items = (await asyncio.to_thread(self.rest.get, f"/api/v1/namespaces/{self.namespace}/pods")).get(
                    "items", []
                )
            except (RestError, OSError):
                items = None
            if items is not None:
                samples = []
                for p in items:
                    meta, spec, status = p["metadata"], p.get("spec", {}), p.get("status", {})
                    chips = tuple(c for c in meta.get("annotations", {}).get(NPU, "").split(",") if c)
                    samples.append(
                        PodSample(
                            t,
                            meta.get("labels", {}).get("volcano.sh/job-name", ""),
                            meta["name"],
                            meta["uid"],
                            spec.get("nodeName", ""),
                            chips,
                            not meta.get("deletionTimestamp") and status.get("phase") in ("Pending", "Running"),
                        )
                    )
                self.obs.pods += samples
                by_job: dict[str, list[PodSample]] = {}
                for s in samples:
                    by_job.setdefault(s.job, []).append(s)
                self.latest_pods = by_job
            await _sleep_or(self.stop, 1.0)

    async def watch_commands(self) -> None:
        """Every RestartJob Command created in the namespace (Volcano deletes each within milliseconds, so a
        watch, resumed from its last resourceVersion after an error, not a list)."""
        from kubernetes_asyncio import client, config, watch

        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(self.testbed.kubeconfig), client_configuration=cfg)
        seen: set[str] = set()
        async with client.ApiClient(cfg) as api:
            custom = client.CustomObjectsApi(api)
            rv = ""
            while not self.stop.is_set():
                try:
                    if not rv:
                        listed = await custom.list_namespaced_custom_object(*BUS[:2], self.namespace, BUS[2])
                        for obj in listed.get("items", []):
                            self._command(obj, seen)
                        rv = listed["metadata"]["resourceVersion"]
                    w = watch.Watch()
                    async with w.stream(
                        custom.list_namespaced_custom_object,
                        *BUS[:2],
                        self.namespace,
                        BUS[2],
                        resource_version=rv,
                        timeout_seconds=30,
                        _request_timeout=40,
                    ) as stream:
                        async for ev in stream:
                            raw: dict[str, Any] = ev["raw_object"]
                            if ev["type"] == "ERROR":
                                rv = ""  # 410 Gone: list again
                                break
                            rv = raw.get("metadata", {}).get("resourceVersion", rv)
                            if ev["type"] == "ADDED":
                                self._command(raw, seen)
                except asyncio.CancelledError:
                    raise
                except Exception:  # the apiserver is stopped on purpose: try again
                    await _sleep_or(self.stop, 0.5)

    def _command(self, obj: dict[str, Any], seen: set[str]) -> None:
        meta = obj.get("metadata", {})
        if obj.get("action") != "RestartJob" or meta.get("uid") in seen:
            return
        seen.add(meta["uid"])
        self.obs.commands.append(
            CommandSeen(
                self.now(),
                obj.get("target", {}).get("name", ""),
                meta.get("name", ""),
                meta["uid"],
                meta.get("labels", {}).get("fault-agent.io/incident", ""),
            )
        )

    async def read_kafka(self, ready: asyncio.Event) -> None:
        """Every record on the agent's topics from the run's start (this run's source only)."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.testbed.kafka_bootstrap, enable_auto_commit=False, metadata_max_age_ms=1000
        )
        await consumer.start()
        try:
            parts = [
                TopicPartition(t, p)
                for t in (FAULTS_TOPIC, RECOVERIES_TOPIC)
                for p in sorted(await _partitions(consumer, self.testbed.kafka_bootstrap, t))
            ]
            consumer.assign(parts)
            await consumer.seek_to_end(*parts)
            for tp in parts:
                await consumer.position(tp)
            ready.set()
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                received = self.now()
                for tp, msgs in batch.items():
                    for msg in msgs:
                        rec = self._record(
                            tp.topic, tp.partition, msg.offset, msg.key, msg.value, msg.timestamp, received
                        )
                        if rec is not None:
                            self.obs.records.append(rec)
        finally:
            await consumer.stop()

    def _record(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        ts: int,
        received: float,
    ) -> Record | None:
        try:
            event = orjson.loads(value or b"")
        except orjson.JSONDecodeError:
            self.obs.errors.append(f"unparsable record {topic}/{partition}@{offset}")
            return None
        if not isinstance(event, dict) or event.get("source") != self.source:
            return None
        data = event.get("data") or {}
        try:
            at = datetime.fromisoformat(str(event.get("time"))).timestamp() - self.t0
        except ValueError:
            at = ts / 1000 - self.t0
        return Record(
            partition,
            offset,
            topic,
            (key or b"").decode(),
            str(event.get("id")),
            _short_type(str(event.get("type"))),
            str(event.get("subject", "")),
            at,
            ts / 1000 - self.t0,
            str(data.get("incident_id") or ""),
            str(data.get("detected_id") or ""),
            str(data.get("reason") or ""),
            received,
        )

    # ----- steps -------------------------------------------------------------------------------------------
    async def run_step(self, step: Step) -> None:
        """Wait for `step`'s time, do it, undo it at its end (also when cancelled); failures are recorded."""
        await asyncio.sleep(max(0.0, self.schedule_t0 + step.at_s - time.time()))
        self.say(step.describe())
        try:
            if step.kind in (CHIP, NODE, SWITCH, NOT_READY):
                await self._hardware(step)
            elif step.kind in (BUSINESS, EVICT):
                await self._pod_step(step)
            elif step.kind in (AGENT_KILL, AGENT_STOP):
                await self._agent_step(step)
            elif step.kind == AGENT_GONE:
                await self._agent_gone(step)
            elif step.kind in (KAFKA_STOP, KAFKA_KILL, APISERVER_STOP):
                await self._component_step(step)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a step that could not be done is reported, the soak goes on
            self.obs.errors.append(f"{step.describe()}: {type(e).__name__}: {e}")

    async def _hardware(self, step: Step) -> None:
        node = self.node_names[step.node]
        await self._set_hardware(step, node, on=True)
        start = self.now()
        try:
            await asyncio.sleep(max(0.0, self.schedule_t0 + step.end_s - time.time()))
        finally:
            await self._set_hardware(step, node, on=False)
            self.obs.faults.append(FaultSpan(step.kind, node, step.chip, step.level, start, self.now()))

    async def _set_hardware(self, step: Step, node: str, *, on: bool) -> None:
        inj = self.injector
        if step.kind == NODE:
            await _retry(lambda: inj.node_fault(node, step.level) if on else inj.node_fault_cleared(node))
        elif step.kind == NOT_READY:
            await _retry(lambda: inj.node_not_ready(node, step.level) if on else inj.node_ready(node))
        else:
            async with self.device_locks[node]:
                if step.kind == CHIP:
                    if on:
                        self.chips[node][step.chip] = ChipFault(step.chip, ("80E3A201",), step.level)
                    else:
                        self.chips[node].pop(step.chip, None)
                    faults = sorted(self.chips[node].values(), key=lambda f: f.chip)
                    await _retry(lambda: inj.chip_fault(node, faults) if faults else inj.chip_healthy(node))
                else:
                    level = step.level
                    await _retry(
                        lambda: inj.switch_fault(node, [SwitchFault(level=level)]) if on else inj.switch_healthy(node)
                    )

    async def _pod_step(self, step: Step) -> None:
        job = self.job_names[step.job]
        pods = sorted((p for p in self.latest_pods.get(job, []) if p.live and p.node), key=lambda p: p.pod)
        if not pods:
            self.say(f"  (job {job} has no pod placed now: step skipped)")
            return
        pod = pods[step.pod % len(pods)].pod
        write = self.injector.pod_failed if step.kind == BUSINESS else self.injector.pod_evicted
        try:
            await asyncio.to_thread(write, self.namespace, pod)
        except InjectError as e:  # the pod listed a second ago is gone (its job restarted): nothing to fail
            self.say(f"  ({e}: step skipped)")
            return
        self.obs.pod_steps.append(PodStep(self.now(), step.kind, job, pod))

    async def _agent_step(self, step: Step) -> None:
        for slot in self.agents:
            await asyncio.to_thread(self._scrape, slot)
        leaders = [s for s in self.agents if s.leader and not s.down and not s.frozen]
        others = [s for s in self.agents if s not in leaders and not s.down and not s.frozen]
        pool = (leaders or others) if step.target == "leader" else (others or leaders)
        if not pool:
            self.say("  (no agent to disrupt: step skipped)")
            return
        slot = pool[0]
        was_leader = slot.leader
        proc = slot.proc.proc
        assert proc is not None
        start = self.now()
        if step.kind == AGENT_KILL:
            slot.down = True
            await self._kill(slot)
            try:
                await asyncio.sleep(max(0.0, self.schedule_t0 + step.end_s - time.time()))
            finally:
                end = self.now()
                await asyncio.to_thread(self._start, slot)
        else:
            slot.frozen = True
            proc.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(max(0.0, self.schedule_t0 + step.end_s - time.time()))
            finally:
                proc.send_signal(signal.SIGCONT)
                end = self.now()
                await asyncio.sleep(0.5)  # a probe sent before the freeze has its answer by now
                slot.frozen = False
        self.obs.disruptions.append(Disruption(step.kind, start, end, slot.proc.name, was_leader))

    async def _kill(self, slot: _Agent) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """SIGKILL `slot`'s process and end its Life; returns the ids its outbox held at its death, and those not
        yet delivered then (from its ``cursor`` on; None when the cursor could not be read).

        Its segments are hard-linked aside first (``killed/<folder>-<pid>``): appends until the death land in
        the same files, and the other replica may take the folder over (and delete it) any time after the death.
        The cursor is read right after the death holding the folder's lock (a replica taking it over meanwhile
        makes it unknown). What the links hold joins :attr:`Observed.created` under the folder's name."""
        proc = slot.proc.proc
        assert proc is not None
        folder = self.folders[slot.outbox]
        aside = self.workdir / "killed" / f"{slot.outbox}-{proc.pid}"
        aside.mkdir(parents=True, exist_ok=True)
        for seg in sorted(folder.glob("seg-*.log")):
            os.link(seg, aside / seg.name)
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
        cursor = _read_cursor(folder)
        self._end_life(slot, expected=True, killed=True)
        try:
            held = read_outbox_at(aside, slot.outbox)
        except (OSError, ValueError) as e:
            self.obs.errors.append(f"outbox of killed {slot.proc.name} ({aside}): {e}")
            return (), None
        self.obs.created += [c for _, c in held]
        ids = tuple(c.id for _, c in held)
        if cursor is None:
            return ids, None
        return ids, tuple(c.id for at, c in held if at >= cursor)

    async def _agent_gone(self, step: Step) -> None:
        """An :data:`AGENT_GONE` step: Kafka stopped, a pod failed, the leader killed once it has events pending
        (at most 6 s), not started again in its folder; at the step's end Kafka resumed and, once the folder was
        taken over (or the adoption bound after the death has passed), a replacement started in a new folder.
        Recorded as a Kafka stop, a pod step, an agent_gone disruption and a :class:`Gone`."""
        self.testbed.pause("kafka")
        kafka_start = self.now()
        gone: tuple[_Agent, float, bool] | None = None  # the slot killed, when, and whether it led then
        try:
            await self._pod_step(Step(step.at_s, BUSINESS, job=step.job, pod=step.pod))
            for s in self.agents:
                await asyncio.to_thread(self._scrape, s)
            leaders = [s for s in self.agents if s.leader and not s.down and not s.frozen]
            others = [s for s in self.agents if s not in leaders[:1] and not s.down and s.proc.running]
            if not leaders:
                self.say("  (no leader to kill: only Kafka stopped)")
            elif not others:
                # invariant 6 asks a replica running at the death to take the outbox over; with every other one
                # stopped there is none, and the replica started later adopts at its start (another test's case)
                self.say("  (no other replica running to take the outbox over: only Kafka stopped)")
            else:
                slot = leaders[0]
                deadline = time.monotonic() + 6.0
                while self._outbox.get(slot.proc.name, 0.0) <= 0 and time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                    await asyncio.to_thread(self._scrape, slot)
                survivors = tuple(s.proc.name for s in self.agents if s is not slot and not s.down and s.proc.running)
                assert slot.proc.proc is not None
                pid = slot.proc.proc.pid
                slot.down = True
                was_leader = slot.leader
                events, pending = await self._kill(slot)
                died = self.now()
                gone = (slot, died, was_leader)
                self.obs.gones.append(Gone(slot.proc.name, pid, died, slot.outbox, events, pending, survivors))
                self.say(
                    f"  {slot.proc.name} killed for good with {len(events)} events in its outbox, "
                    f"{'?' if pending is None else len(pending)} not delivered"
                )
            await asyncio.sleep(max(0.0, self.schedule_t0 + step.end_s - time.time()))
        finally:
            self.testbed.resume("kafka")
            end = self.now()
            self.obs.disruptions.append(Disruption(KAFKA_STOP, kafka_start, end))
            if gone is not None:
                slot, died, was_leader = gone
                self.obs.disruptions.append(Disruption(AGENT_GONE, died, end, slot.proc.name, was_leader))
                # the replacement would take the folder over at its start: it waits until the running replica
                # has (the folder is deleted) or the bound has passed
                folder = self.folders[slot.outbox]
                await asyncio.to_thread(_wait_gone, folder, died + BOUNDS.adoption_s - self.now())
                slot.generation += 1
                self._use_folder(slot)
                await asyncio.to_thread(self._start, slot)

    async def _component_step(self, step: Step) -> None:
        tb = self.testbed
        name = "kube-apiserver" if step.kind == APISERVER_STOP else "kafka"
        start = self.now()
        if step.kind == KAFKA_KILL:
            await asyncio.to_thread(tb.kill, name)
        else:
            tb.pause(name)
        try:
            await asyncio.sleep(max(0.0, self.schedule_t0 + step.end_s - time.time()))
        finally:
            if step.kind == KAFKA_KILL:
                await asyncio.to_thread(self._start_component, name)
            else:
                tb.resume(name)
            self.obs.disruptions.append(Disruption(step.kind, start, self.now()))

    def _start_component(self, name: str, attempts: int = 3) -> None:
        """Start a killed component again; a start that dies at once is tried again (seen with Kafka on the
        loaded machine: a JVM gone before its first log line), each failure recorded with its exit code."""
        for i in range(attempts):
            try:
                self.testbed.start(name, timeout_s=180)
                return
            except TestbedError as e:
                proc = self.testbed.components[name].proc
                code = proc.returncode if proc is not None else None
                self.say(f"  {name} start {i + 1} of {attempts} failed (exit code {code}): {str(e)[:200]}")
        raise TestbedError(f"{name} did not start in {attempts} attempts")

    # ----- the whole run -----------------------------------------------------------------------------------
    async def settle(self, settle_s: float) -> None:
        """Wait (at most `settle_s`) until every job is Running, every started incident has ended and every
        outbox is drained; a run that does not get there shows it in the invariants."""
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            waiting = await asyncio.to_thread(_safe, self.jobs_running)
            started = {r.incident for r in self.obs.records if r.type == checks.STARTED}
            ended = {r.incident for r in self.obs.records if r.type in checks.TERMINAL}
            pending = sum(self._outbox.values())
            if waiting == [] and started <= ended and pending == 0:
                await asyncio.sleep(3.0)  # the last records reach the reader
                return
            await asyncio.sleep(1.0)

    def read_logs(self) -> None:
        """Leadership changes from the agents' logs (JSON lines): a new term re-publishes what it cannot prove
        was published, so each is a cause of an allowed re-sent copy."""
        for slot in self.agents:
            try:
                lines = slot.proc.log.read_text(errors="replace").splitlines()
            except OSError as e:
                self.obs.errors.append(f"agent log {slot.proc.log}: {e}")
                continue
            for line in lines:
                if '"outbox of a gone process taken over' in line:
                    self._takeover(slot.proc.name, line)
                    continue
                if '"leadership changed"' not in line:
                    continue
                try:
                    entry = orjson.loads(line)
                    at = datetime.fromisoformat(str(entry["timestamp"])).timestamp() - self.t0
                except (orjson.JSONDecodeError, KeyError, ValueError):
                    continue
                self.obs.disruptions.append(Disruption("leadership", at, at, slot.proc.name, bool(entry.get("leader"))))

    def _takeover(self, agent: str, line: str) -> None:
        """A take-over of a gone process's outbox from `agent`'s log line (agent/sinks/kafka/peers.py: "outbox of a gone
        process taken over" at start, "... while running" by a running publisher)."""
        try:
            entry = orjson.loads(line)
            at = datetime.fromisoformat(str(entry["timestamp"])).timestamp() - self.t0
            taken = TakeOver(
                at, agent, Path(str(entry["directory"])).name, int(entry["events"]), "while running" in entry["event"]
            )
        except (orjson.JSONDecodeError, KeyError, ValueError, TypeError):
            self.obs.errors.append(f"unreadable take-over line in {agent}'s log: {line[:200]}")
            return
        self.obs.takeovers.append(taken)

    def dump(self) -> None:
        """Everything observed, as JSON in the run's folder (observed.json), for a person to dig into."""
        from dataclasses import asdict

        (self.workdir / "observed.json").write_bytes(orjson.dumps(asdict(self.obs), option=orjson.OPT_INDENT_2))

    def read_outboxes(self) -> None:
        """Every outbox folder an agent used, as it is now (one taken over is gone: what it held was read when
        its process was killed, :meth:`_kill`)."""
        for name, directory in self.folders.items():
            try:
                self.obs.created += read_outbox(directory, name)
            except (OSError, ValueError) as e:
                self.obs.errors.append(f"outbox {directory}: {e}")

    def stop_agents(self) -> None:
        for slot in self.agents:
            if slot.proc.proc is not None and slot.proc.proc.poll() is None:
                if slot.frozen:
                    slot.proc.proc.send_signal(signal.SIGCONT)
                slot.proc.stop(signal.SIGTERM)
                self._end_life(slot, expected=True, killed=False)


def _wait_gone(folder: Path, timeout_s: float) -> None:
    """Wait (at most `timeout_s`) until `folder` no longer exists."""
    deadline = time.monotonic() + timeout_s
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.2)


def _read_cursor(folder: Path) -> tuple[int, int] | None:
    """The outbox cursor in `folder` (segment, offset; (0, 0), before everything, when none was written), read
    holding its lock (``flock``, not waiting); None when the lock is held (a replica is taking it over) or the
    folder is gone."""
    try:
        with (folder / "lock").open("a+b") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return None
            try:
                text = (folder / "cursor").read_text(encoding="ascii")
            except FileNotFoundError:
                return (0, 0)
    except OSError:
        return None
    segment, _, offset = text.strip().partition(" ")
    return int(segment), int(offset)


def _safe(fn: Callable[[], list[str]]) -> list[str] | None:
    try:
        return fn()
    except (RestError, OSError):
        return None


async def _partitions(consumer: Any, bootstrap: str, topic: str) -> set[int]:
    """The partitions of `topic`, creating it as the agent would (6 partitions, one replica) if missing."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    if topic not in await consumer.topics():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])
        finally:
            await admin.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        await consumer.topics()  # a metadata update
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return set(parts)
        await asyncio.sleep(0.5)
    raise RuntimeError(f"topic {topic} has no partitions after 30 s")


async def _retry(write: Callable[[], None], *, attempts: int = 20) -> None:
    """Run a blocking injector write in a thread, again after a connection error (Kafka's or the apiserver's
    own stalls can slow it), at most `attempts` times."""
    for i in range(attempts):
        try:
            await asyncio.to_thread(write)
            return
        except (RestError, OSError):
            if i == attempts - 1:
                raise
            await asyncio.sleep(0.5)


async def _sleep_or(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


def _short_type(event_type: str) -> str:
    """``io.faultagent.recovery.started.v1`` → ``recovery.started``."""
    return event_type.removeprefix("io.faultagent.").rsplit(".v", 1)[0]


def _metric_sums(text: str, names: Sequence[str]) -> dict[str, float]:
    """Sum of every sample of each of `names` in a Prometheus text exposition (0.0 when absent)."""
    out = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name = head.split("{", 1)[0]
        if name in out:
            out[name] += float(value)
    return out


_HEAD = struct.Struct(">4sII")


def read_outbox(directory: Path, agent: str) -> list[Created]:
    """Every event in an agent's outbox (:func:`read_outbox_at`) without positions."""
    return [c for _, c in read_outbox_at(directory, agent)]


def read_outbox_at(directory: Path, agent: str) -> list[tuple[tuple[int, int], Created]]:
    """Every event in an agent's outbox segments (``seg-*.log``, agent/sinks/outbox/records.py's layout: ``"FAOB" |
    u32 length | u32 CRC | body``, the body starting ``u8 len, stream | u8 len, id | u8 len, type | u16 len,
    key``), each with its position (segment number, byte offset: what the outbox's ``cursor`` names). Delivered
    events stay in a segment until it rolls (16 MiB), far beyond a soak's events.

    Raises:
        ValueError: a segment was already deleted (the first is not ``seg-…001.log``), so the list would be
            incomplete.
    """
    segments = sorted(directory.glob("seg-*.log"))
    if not segments:
        return []
    if int(segments[0].stem.removeprefix("seg-")) != 1:
        raise ValueError(f"the outbox rolled and deleted segments before {segments[0].name}")
    out = []
    for seg in segments:
        number = int(seg.stem.removeprefix("seg-"))
        data = seg.read_bytes()
        pos = 0
        while pos + _HEAD.size <= len(data):
            start = pos
            magic, length, _crc = _HEAD.unpack_from(data, pos)
            if magic != b"FAOB" or pos + _HEAD.size + length > len(data):
                break  # a torn tail: the agent cuts it off when it opens the outbox
            body = data[pos + _HEAD.size : pos + _HEAD.size + length]
            pos += _HEAD.size + length
            i = 1 + body[0]
            event_id = body[i + 1 : i + 1 + body[i]].decode()
            i += 1 + body[i]
            event_type = body[i + 1 : i + 1 + body[i]].decode()
            i += 1 + body[i]
            (klen,) = struct.unpack_from(">H", body, i)
            key = body[i + 2 : i + 2 + klen].decode()
            out.append(((number, start), Created(event_id, _short_type(event_type), key, agent)))
    return out


@dataclass(frozen=True)
class _Restart:
    job: str
    at: float
    ready_at: float | None = None


class ControllerWatch:
    """Volcano's controller's costs over one run (invariant 6 of testbed.soak.checks): a watch of the run's jobs and
    pods from before the agents start, and the controller's log from its size then; :meth:`judge` counts with
    testbed.controller_costs, as bench/bench_e2e.py does."""

    def __init__(self, testbed: Testbed, namespace: str) -> None:
        self.log = testbed.logs_dir / "vc-controller-manager.log"
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        self.since = time.time()
        self.jobs = WatchRecorder(
            testbed, f"/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs", slim=slim_job
        )
        self.pods = WatchRecorder(testbed, f"/api/v1/namespaces/{namespace}/pods", slim=slim_pod)

    async def start(self) -> None:
        await self.jobs.start()
        await self.pods.start()

    async def stop(self) -> None:
        await self.jobs.stop()
        await self.pods.stop()

    def judge(self, t0: float, commands: Sequence[CommandSeen]) -> dict[str, Any]:
        """The costs: conflicts, pods created then killed per RestartJob Command (`commands`, soak clock from
        `t0`), the agent's annotation changes on jobs."""
        seen = sorted({c.uid: c for c in commands}.values(), key=lambda c: c.t)
        # a restart's window ends at the job's next restart (whose kills are its own), else at Running again
        restarts = [
            _Restart(c.job, t0 + c.t, next((t0 + n.t for n in seen if n.job == c.job and n.t > c.t), None))
            for c in seen
        ]
        return {
            "conflicts": controller_conflicts(self.log, self.offset, self.jobs.events, self.since),
            "wasted": wasted_pods(restarts, self.pods.events, self.jobs.events),
            "job_writes": len(annotation_changes(self.jobs.events, self.since)),
        }


async def run(
    testbed: Testbed,
    steps: Sequence[Step],
    *,
    workdir: Path,
    nodes: int,
    jobs: int,
    settle_s: float = 150.0,
    say: Say = _quiet,
) -> tuple[Verdict, Observed]:
    """Run `steps` once on `testbed` (see the module docstring) and judge it.

    Raises:
        RuntimeError, TimeoutError: the run's set-up failed (agents, jobs); nothing was judged.
    """
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the broker is killed on purpose: no noise
    # steps block worker threads for long (a Kafka restart takes a minute on the loaded machine, an agent's
    # start until it is ready): the default pool (CPUs + 4) starved the other steps and the probes
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=64, thread_name_prefix="soak"))
    r = Run(testbed, steps, workdir, nodes, jobs, say)
    r.workdir.mkdir(parents=True, exist_ok=True)
    tasks: list[asyncio.Task[None]] = []
    costs: ControllerWatch | None = None
    try:
        say(f"soak run {r.tag}: {len(steps)} steps on {nodes} nodes, {jobs} jobs; namespace {r.namespace}")
        await asyncio.to_thread(r.set_up)
        r.start_training()
        costs = ControllerWatch(testbed, r.namespace)
        await costs.start()
        r.t0 = time.time()
        ready = asyncio.Event()
        tasks.append(asyncio.create_task(r.read_kafka(ready), name="soak-kafka"))
        await asyncio.wait_for(ready.wait(), 60)
        tasks.append(asyncio.create_task(r.watch_commands(), name="soak-commands"))
        tasks.append(asyncio.create_task(r.list_pods(), name="soak-pods"))
        await asyncio.to_thread(r.start_agents)
        tasks.append(asyncio.create_task(r.probe_agents(), name="soak-probe"))
        r.schedule_t0 = time.time()
        step_tasks = [asyncio.create_task(r.run_step(s), name=f"soak-step-{i}") for i, s in enumerate(steps)]
        tasks.append(asyncio.create_task(r.hang_one_job(), name="soak-hang"))
        try:
            await asyncio.gather(*step_tasks)
        finally:
            for t in step_tasks:
                t.cancel()
            await asyncio.gather(*step_tasks, return_exceptions=True)
        say("schedule done; settling")
        await r.settle(settle_s)
    finally:
        r.stop.set()
        await asyncio.to_thread(r.stop_training)
        r.obs.steps = {job: [(t - r.t0, step) for t, step in h] for job, h in r.obs.steps.items()}
        await asyncio.to_thread(r.stop_agents)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if costs is not None:  # after the probes stopped: a probe of a stopped agent would count against its health
            await asyncio.sleep(1)  # the controller's last lines, and the watches' last events
            r.obs.controller = costs.judge(r.t0, r.obs.commands)
            await costs.stop()
        r.read_outboxes()
        r.read_logs()
        r.dump()
        await asyncio.to_thread(r.tear_down)
    verdict = checks.check_all(
        r.obs, BOUNDS, acting_levels=ACTING_LEVELS, progress=(r.namespace, HUNG_JOB, HANG_TIMEOUT_S)
    )
    return verdict, r.obs
