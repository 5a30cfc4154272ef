"""`fault-agent run`: the wiring. Sources → detect → correlate → policy → incidents/actions → events.

Tasks of the one root ``TaskGroup`` (each named and kept by reference):

Before any task: the read check (agent.sources.access_check), one SelfSubjectAccessReview per verb and watched
collection; a refused one stops the start with :class:`ReadAccessDenied` (exit 1), naming the setting.

- ``watch:<source>@<ns>`` — one per watched collection (agent.sources.watchers), feeding :class:`ClusterState`
  and the detectors synchronously (:class:`agent.engine.detecting.DetectPipeline`), which put faults on a queue;
- ``recovery`` — :class:`agent.engine.recovery.RecoveryEngine` takes faults off the queue once every source has
  listed, correlates, decides, and (leader only, breaker closed, rate limit allowing) acts; it is also the only
  place that opens, advances and persists incidents;
- ``tick`` — once a second: time-based detections (NotReady grace, stuck pods), incident recovery checks and
  deadlines, deferred restarts, the breaker ConfigMap a person may have reset;
- ``leader`` — the Lease campaign (agent.runtime.leader); ``server`` — /metrics, /healthz, /readyz;
- ``fault-source-check`` — the fault source (``kube.fault_source``, ``auto`` resolved at start,
  agent.sources.fault_source): logged at start; while the per-node ConfigMaps are read, a look once a minute for
  ClusterD's, a loud warning and fault_agent_clusterd_unread when they exist unread;
- ``plugin-check`` — whether MindCluster's Volcano plugin runs beside the agent (agent.sources.plugin_check): a
  loud warning and fault_agent_mindcluster_plugin_active when it does while ``policy.mode`` is ``act``;
- ``admission-check`` — fail closed (``policy.mode`` act, not dry-run, ``policy.admission_check`` not off): a
  dry-run write the agent's admission policy must deny, at start and every ``policy.admission_check_interval_s``
  (agent.sources.admission_check); while it is not denied the engine decides but does not act (``refuse``);
- ``gc-freeze`` — once every source has listed: :func:`freeze_gc_when_ready`;
- ``progress-prometheus`` — the Prometheus progress source (agent.engine.progress_prometheus): the jobs labelled
  ``fault-agent.io/progress: prometheus`` have their queries evaluated every ``prometheus.interval_s`` and the
  readings fed to the hang detector (without ``prometheus.url`` such jobs are reported once);
- ``act:<incident>``, ``grace:<incident>``, ``taint:<node>`` — the engine's background steps
  (agent.engine.tasks), cancelled when leadership is lost or the agent stops.

SIGTERM/SIGINT set the stop event; every task returns, the leader releases its Lease and Kafka is flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
from collections.abc import Callable
from typing import Any

import structlog

from agent.actions import ClusterWriter
from agent.core.fault_source import FaultSource
from agent.core.faults import Fault, FaultCleared
from agent.core.quarantine import RELEASE_ANNOTATION
from agent.engine.detecting import DetectPipeline
from agent.engine.loops import recovery_loop, tick_loop
from agent.engine.progress_prometheus import PrometheusProgressSource
from agent.engine.recovery import RecoveryEngine
from agent.engine.tasks import Tasks
from agent.runtime.clock import SystemClock, thread_usage
from agent.settings import Settings, load_settings
from agent.sources.access_check import ReadAccessDenied, check_read_access
from agent.sources.admission_check import AdmissionCheck
from agent.sources.dra import dra_served
from agent.sources.fault_source import SourceCheck, resolve_fault_source
from agent.sources.plugin_check import PluginCheck
from agent.sources.state import ClusterState
from agent.sources.watchers import NAMESPACE_SETTINGS, build_watchers, dra_watched

log = structlog.get_logger(__name__)


def startup_summary(
    settings: Settings, *, identity: str | None, fault_source: FaultSource | None = None
) -> dict[str, Any]:
    """The one start-up line's fields: what this process is and in what mode it acts, so a person reading the log
    knows whether it can restart anything (issue 41, 7). Pure.

    Returns: ``version``, ``cluster``, ``mode`` (``act``, ``dry-run`` or ``observe``), ``leader`` (the Lease
    ``<namespace>/<name>`` and this identity, or ``disabled``), ``namespaces`` (``all`` or the list), ``sources``
    (the fault sources watched, e.g. ``deviceinfo@kube-system``), ``kafka`` (bootstrap and topics, or
    ``disabled``) and ``restart`` (``policy.volcano_restart``). `fault_source`: the one resolved at start (None:
    agent.sources.watchers.static_fault_source)."""
    from agent.sinks.metrics import agent_version
    from agent.sources.watchers import resources

    p = settings.policy
    mode = "observe" if p.mode == "observe" else "dry-run" if p.dry_run else "act"
    fault_sources = sorted(
        f"{r.source}@{r.namespace or '*'}"
        for r in resources(settings.kube, fault_source=fault_source)
        if r.kind in ("ConfigMap", "Node")
    )
    k = settings.kafka
    return {
        "version": agent_version(),
        "cluster": settings.cluster_name,
        "mode": mode,
        "leader": (
            f"{settings.leader.namespace}/{settings.leader.name} as {identity}"
            if settings.leader.enabled
            else "disabled"
        ),
        "namespaces": list(settings.kube.namespaces) or "all",
        "sources": fault_sources,
        "kafka": f"{k.bootstrap_servers} topics {k.faults_topic},{k.recoveries_topic}" if k.enabled else "disabled",
        "restart": p.volcano_restart,
    }


async def run_agent(
    settings: Settings,
    stop: asyncio.Event,
    *,
    identity: str | None = None,
    on_engine: Callable[[RecoveryEngine], None] | None = None,
) -> RecoveryEngine:
    """Run the whole agent until `stop` is set; returns the engine. See the module docstring.

    Args:
        identity: leader-election identity (default: pod name plus a random suffix).
        on_engine: called with the engine once it is built (tests inspect its incidents and decisions).

    Raises:
        agent.kube.errors.KubeConfigError: no usable Kubernetes credentials.
        ReadAccessDenied: the identity may not list or watch a collection the settings ask for.
        OSError: the HTTP server could not bind.
    """
    from prometheus_client import CollectorRegistry

    from agent.kube.client import ApiTransport, new_api_client
    from agent.runtime.leader import LeaderElector
    from agent.runtime.server import HealthServer
    from agent.sinks.metrics import AgentMetrics

    registry = CollectorRegistry()
    topics = (settings.kafka.faults_topic, settings.kafka.recoveries_topic)
    metrics = AgentMetrics(registry, cluster=settings.cluster_name, topics=topics)
    recorder = None
    if settings.record.dir is not None:
        from agent.kube.record import Recorder

        recorder = Recorder(settings.record.dir, settings.record)
        recorder.open()  # RecordError: a clear message before anything starts
    api = await new_api_client(settings.kube.kubeconfig, settings.kube.context)
    state = ClusterState()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    clock = SystemClock()
    pipeline = DetectPipeline(settings, state, queue, clock=clock, metrics=metrics)
    transport = ApiTransport(api)
    choice = await resolve_fault_source(api, settings.kube)  # before the watches: they follow the source
    source_check = SourceCheck(choice, metrics, settings.kube.node_info_namespace)
    source_check.report()
    served = await dra_served(api, settings.kube.request_timeout_s) if settings.kube.dra == "auto" else None
    log.info(
        "DRA correlation", setting=settings.kube.dra, api_served=served, watched=dra_watched(settings.kube, served)
    )
    watchers = build_watchers(
        settings.kube,
        transport,
        state,
        observer=metrics,
        sink=pipeline,
        node_annotation_keys=(settings.policy.taint_key, RELEASE_ANNOTATION),
        tap=recorder.tap if recorder is not None else None,
        records_namespace=settings.leader.namespace,
        fault_source=choice.source,
        dra_served=served,
    )
    try:  # fail loud: a watch the RBAC refuses would never sync (agent.sources.access_check)
        await check_read_access(
            api, [w.resource for w in watchers], NAMESPACE_SETTINGS, settings.kube.request_timeout_s
        )
    except BaseException:
        await api.close()
        raise
    engine_tasks: list[Tasks] = []  # the engine's background steps, once the task group exists

    def leadership_changed(leading: bool) -> None:
        metrics.leader(leading)
        if not leading:  # in-flight actions stop at once (their writes are fenced too, agent.core.fence)
            for steps in engine_tasks:
                steps.cancel_leader_only()

    elector: LeaderElector | None = None
    if settings.leader.enabled:
        elector = LeaderElector(api, settings.leader, identity=identity, on_change=leadership_changed)
    else:
        metrics.leader(True)
    writer = ClusterWriter(
        api,
        dry_run=settings.policy.dry_run or settings.policy.mode == "observe",  # the engine wraps it read-only too
        timeout_s=settings.kube.request_timeout_s,
        fence=elector.lease_remaining if elector is not None else None,
        state_namespace=settings.leader.namespace,  # where resubmissions are recorded before their delete
    )
    log.info(
        "fault-agent starting",
        **startup_summary(settings, identity=elector.identity if elector else None, fault_source=choice.source),
    )
    publisher: Any = None
    if settings.kafka.enabled:
        from agent.sinks.kafka import KafkaPublisher

        publisher = KafkaPublisher(settings.kafka, metrics=metrics)
    try:
        if publisher is not None:
            await publisher.start()
        async with asyncio.TaskGroup() as tg:
            steps = Tasks(tg.create_task)
            engine_tasks.append(steps)
            loops: list[asyncio.Task[Any]] = []  # the long-lived tasks, kept by reference until the group ends

            def spawn(coro: Any, name: str) -> None:
                loops.append(tg.create_task(coro, name=name))

            async def cancel_on_stop() -> None:
                await stop.wait()
                # Grace follow-ups may sleep for up to grace-over-time, and a write to an apiserver that stopped
                # answering has no deadline: end them. An incident left ``acting`` is resumed by the next leader
                # (its writes are idempotent); taints are reconciled at the next start.
                steps.cancel_leader_only()

            events: Any = publisher
            kube_recorder: Any = None
            acting = not (settings.policy.dry_run or settings.policy.mode == "observe")
            if settings.kube.events_enabled and acting:
                from agent.sinks.kube_events import KubeEventRecorder, KubeEventsSink

                who = elector.identity if elector is not None else identity or "agent"
                kube_recorder = KubeEventRecorder(api, who, clock, metrics)
                events = KubeEventsSink(publisher, kube_recorder, lambda n: getattr(state.nodes.get(n), "uid", ""))
                spawn(kube_recorder.run(stop), "kube-events")
            plugin_check = PluginCheck(settings.policy.mode, metrics)
            admission: AdmissionCheck | None = None
            if acting and settings.policy.admission_check != "off":  # fail closed (agent.sources.admission_check)
                admission = AdmissionCheck(settings.leader.namespace, settings.policy.admission_check, metrics)
            engine = RecoveryEngine(
                settings,
                state,
                writer,
                events=events,
                is_leader=(lambda: elector.is_leader) if elector is not None else (lambda: True),
                tasks=steps,
                metrics=metrics,
                active_faults=pipeline.active_faults,
                actor=(lambda: elector.actor) if elector is not None else (lambda: "agent"),
                clock=clock,
                plugin_active=lambda: plugin_check.may_be_active,
                admission_refusal=admission.refusal if admission is not None else None,
                thread_usage=thread_usage,
            )
            if kube_recorder is not None:  # a fault's Events wait for its restart's writes (bounded)
                kube_recorder.hold = engine.restarts_quiet
            engine.ctx.hang_of = pipeline.hang_of
            engine.ctx.take_resumed = pipeline.take_resumed
            engine.stragglers.feed, engine.stragglers.metrics = pipeline.take_stragglers, metrics
            engine.ctx.goodput.history = pipeline.progress
            engine.ctx.checkpoint_of = pipeline.hang.checkpoint_reading
            if on_engine is not None:
                on_engine(engine)
            for w in watchers:
                spawn(w.run(stop), f"watch:{w.resource.watcher_id}")
            spawn(recovery_loop(engine, state, queue, stop, pipeline.report_depth), "recovery")
            spawn(tick_loop(engine, pipeline, state, stop, 1.0), "tick")
            spawn(freeze_gc_when_ready(state, stop), "gc-freeze")
            prometheus = PrometheusProgressSource(settings.prometheus, state, pipeline)
            spawn(prometheus.run(stop), "progress-prometheus")
            if elector is not None:
                spawn(elector.run(stop), "leader")
            spawn(plugin_check.run(api, stop, timeout_s=settings.kube.request_timeout_s), "plugin-check")
            spawn(source_check.run(api, stop, settings.kube.request_timeout_s), "fault-source-check")
            if admission is not None:
                interval_s = settings.policy.admission_check_interval_s
                spawn(admission.run(api, stop, interval_s=interval_s, timeout_s=settings.kube.request_timeout_s),
                      "admission-check")  # fmt: skip
            readiness = {"cache-synced": _ready_probe(state), "events": _events_probe(publisher, settings)}
            metrics_auth = None
            if settings.server.metrics_auth == "kubernetes":
                from agent.kube.metrics_auth import MetricsAuthorizer

                metrics_auth = MetricsAuthorizer(api, settings.kube.request_timeout_s)
            server = HealthServer(settings.server, metrics.exposed, readiness=readiness, metrics_auth=metrics_auth)
            spawn(server.serve(stop), "server")
            spawn(cancel_on_stop(), "cancel-on-stop")
            if recorder is not None:
                spawn(recorder.run(stop), "record")
        return engine
    finally:
        gc.unfreeze()  # what this run froze may be collected again once it is garbage
        if publisher is not None:
            await publisher.stop()
        await api.close()


async def freeze_gc_when_ready(state: ClusterState, stop: asyncio.Event, poll_s: float = 0.05) -> int:
    """Once every source has listed (`state` ready, polled every `poll_s` seconds), collect once and move every
    object alive then (the imports' modules and classes, the settings, the first lists' caches) out of the cyclic
    garbage collector's generations (:func:`gc.freeze`). Returns how many objects were frozen (0 when `stop`
    came first).

    Why: a full (generation 2) collection walks every tracked object; with the agent's imports alone (~97,000
    objects, kubernetes_asyncio's models most of them) one took ~42 ms on the 2-core testbed, and one falls on
    the fault path now and then (bench/bench_decision.py's p99). After the freeze a full collection walks only
    what changed since. Frozen objects are still freed by reference counting; only a reference cycle among them
    outlives its last use, until :func:`run_agent` ends and unfreezes them. The one collection here blocks the
    loop once, for tens of ms, as the first decisions become due (the recovery loop waits for the lists too)."""
    while not state.ready and not stop.is_set():  # noqa: ASYNC110
        await asyncio.sleep(poll_s)
    if stop.is_set():
        return 0
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("garbage collector: objects alive at ready frozen", frozen=frozen)
    return frozen


def _events_probe(publisher: Any, settings: Settings) -> Any:
    """/readyz check "events": Kafka or the outbox can take events. Ready while Kafka is connected, or while
    events spill to an outbox that still has room; not ready when the publisher stopped or the outbox is full."""
    from agent.runtime.server import Check

    def probe() -> Check:
        if publisher is None:
            return Check(True, "kafka disabled (kafka.enabled=false)")
        mode = getattr(publisher.mode, "value", str(publisher.mode))
        if mode == "stopped":
            return Check(False, "event publisher stopped")
        outbox = publisher.outbox
        if outbox is not None and outbox.size_bytes >= settings.kafka.outbox_max_bytes:
            return Check(False, f"outbox full ({outbox.size_bytes} bytes, kafka.outbox_max_bytes)")
        if mode == "direct":
            return Check(True, "kafka connected")
        reason = publisher.last_error.reason.value if publisher.last_error is not None else "replaying"
        pending = outbox.pending if outbox is not None else 0
        return Check(True, f"kafka unavailable ({reason}); {pending} events kept in the outbox")

    return probe


def _ready_probe(state: ClusterState) -> Any:
    from agent.runtime.server import Check

    def probe() -> Check:
        return Check(state.ready, "every source listed" if state.ready else f"waiting for {sorted(state.not_listed)}")

    return probe


def main(args: argparse.Namespace) -> int:
    """`fault-agent run`: load settings, configure logs, run until SIGTERM/SIGINT. Returns the exit code."""
    from agent.runtime.logs import configure_logging
    from agent.settings import SettingsError

    try:
        settings = load_settings(getattr(args, "config", None))
    except SettingsError as e:
        print(f"fault-agent: {e}")
        return 2
    record_dir = getattr(args, "record", None)
    if record_dir is not None:
        settings = settings.model_copy(update={"record": settings.record.model_copy(update={"dir": record_dir})})
    configure_logging(settings.log)

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_agent(settings, stop, identity=getattr(args, "identity", None))

    from agent.kube.errors import KubeConfigError
    from agent.kube.record import RecordError
    from agent.sinks.kafka import KafkaSinkError
    from agent.sinks.outbox import OutboxError

    failed = False
    try:
        asyncio.run(runner())
    except* (OSError, KubeConfigError, ReadAccessDenied, OutboxError, RecordError, KafkaSinkError) as group:
        # A port already in use, no kubeconfig, an unwritable outbox folder, Kafka settings that cannot work (a
        # missing CA or client certificate file), a watch its RBAC refuses: one clear line each, no traceback.
        failed = True
        for err in group.exceptions:
            log.error("agent cannot run", error=str(err))
    return 1 if failed else 0


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `run`'s arguments and set its function (see agent.cli)."""
    parser.add_argument("--identity", help="leader-election identity (default: pod name plus a random suffix)")
    parser.add_argument(
        "--record",
        metavar="DIR",
        help="record every object the watches deliver to rotating gzip JSON-lines files in DIR (setting record.dir)",
    )
    parser.set_defaults(func=main)
