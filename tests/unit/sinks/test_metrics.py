"""AgentMetrics: names, labels, units, buckets, and that each method moves the right series."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.core.faults import FaultKind, FaultLevel
from agent.sinks.events import FailureReason
from agent.sinks.metrics import RECOVERY_BUCKETS_S, TASK_NAMES, AgentMetrics
from agent.sinks.metrics.labels import ENGINE_TASK_NAMES, KAFKA_TASK_NAMES

REPO = Path(__file__).resolve().parents[3]

# metric family name (as the parser reports it) -> (type, label names); the list plus our additions.
EXPECTED: dict[str, tuple[str, set[str]]] = {
    "fault_agent_build_info": ("gauge", {"version", "python", "cluster"}),  # an Info, exposed as a gauge
    "fault_agent_faults": ("counter", {"kind", "level", "source"}),
    "fault_agent_faults_cleared": ("counter", {"kind"}),
    "fault_agent_recovery_seconds": ("histogram", {"job_kind", "fault_kind", "action", "outcome", "acted_by"}),
    "fault_agent_time_to_first_step_seconds": ("histogram", {"job_kind"}),
    "fault_agent_stragglers": ("counter", {"job_kind"}),
    "fault_agent_stragglers_current": ("gauge", {"job_kind"}),
    "fault_agent_lost_training_seconds": ("counter", {"cause"}),
    "fault_agent_work_lost_steps": ("counter", set()),
    "fault_agent_training_time_seconds": ("gauge", {"time"}),
    "fault_agent_effective_training_ratio": ("gauge", set()),
    "fault_agent_grace_wait_seconds": ("histogram", {"wait", "ended"}),
    "fault_agent_detection_lag_seconds": ("histogram", {"source"}),
    "fault_agent_decision_seconds": ("histogram", set()),
    "fault_agent_fault_stage_seconds": ("histogram", {"stage"}),
    "fault_agent_actions": ("counter", {"action", "result"}),
    "fault_agent_incidents_open": ("gauge", set()),
    "fault_agent_incidents_held": ("gauge", set()),
    "fault_agent_retry_budget_exhausted": ("counter", {"job_kind"}),
    "fault_agent_recovery_failures": ("counter", {"job_kind", "reason"}),
    "fault_agent_watch_events": ("counter", {"resource", "type"}),
    "fault_agent_watch_last_event_timestamp_seconds": ("gauge", {"resource"}),
    "fault_agent_watch_restarts": ("counter", {"resource", "reason"}),
    "fault_agent_relists": ("counter", {"resource"}),
    "fault_agent_cache_synced": ("gauge", {"resource"}),
    "fault_agent_queue_depth": ("gauge", {"queue"}),
    "fault_agent_events_published": ("counter", {"topic", "result"}),
    "fault_agent_kafka_errors": ("counter", {"reason"}),
    "fault_agent_outbox_events": ("gauge", set()),
    "fault_agent_outbox_bytes": ("gauge", set()),
    "fault_agent_breaker_open": ("gauge", set()),
    "fault_agent_admission_policy_in_force": ("gauge", {"check"}),
    "fault_agent_mindcluster_plugin_active": ("gauge", {"agent_mode"}),
    "fault_agent_fault_source": ("gauge", {"source"}),
    "fault_agent_clusterd_unread": ("gauge", set()),
    "fault_agent_leader": ("gauge", set()),
    "fault_agent_input_rejected": ("counter", {"source", "reason"}),
    "fault_agent_task_failures": ("counter", {"task"}),
}
FORBIDDEN_LABELS = {"pod", "pod_name", "job", "job_name", "node", "namespace", "incident", "uid"}


def _value(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float | None:
    return registry.get_sample_value(name, labels or {})


@pytest.fixture
def reg() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(reg: CollectorRegistry) -> AgentMetrics:
    return AgentMetrics(reg, cluster="lab", version="9.9.9")


def _exercise_all(m: AgentMetrics) -> None:
    m.fault(FaultKind.CHIP, FaultLevel.SEPARATE, "device-plugin")
    m.fault_cleared(FaultKind.CHIP)
    m.recovery("vcjob", FaultKind.CHIP, "restart-job", "recovered", 70)
    m.detection_lag(1.5, "device-plugin")
    m.decision(0.002)
    m.grace_wait("grace-over-time", "checkpoint", 2.5)
    m.action("restart-job", "done")
    m.admission_policy_in_force(True, "refuse")
    m.budget_exhausted("acjob")
    m.recovery_failed("acjob", "budget-exhausted")
    m.watch_event("pods", "ADDED")
    m.watch_restart("pods", "gone")
    m.relist("pods")
    m.cache_synced("pods")
    m.queue_depth("signals", 3)
    m.event_published("training.faults", "ok")
    m.kafka_error("unreachable")
    m.outbox_bytes(10)
    m.input_rejected("ConfigMap", "json-truncated")
    m.task_failed("watch-pods")


def test_every_metric_has_expected_type_labels_and_help(reg: CollectorRegistry, metrics: AgentMetrics) -> None:
    _exercise_all(metrics)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    # prometheus_client also exposes *_created gauges for counters and histograms; ignore them.
    ours = {n: f for n, f in families.items() if not n.endswith("_created")}
    assert set(ours) == set(EXPECTED)
    for name, (mtype, labels) in EXPECTED.items():
        fam = ours[name]
        assert fam.type == mtype, name
        assert fam.documentation.strip(), f"{name} has no help text"
        sample_labels = set().union(*(set(s.labels) for s in fam.samples)) - {"le"}
        assert sample_labels == labels, name
        assert not sample_labels & FORBIDDEN_LABELS, name


def test_names_carry_prefix_and_units(reg: CollectorRegistry, metrics: AgentMetrics) -> None:
    _exercise_all(metrics)
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        assert fam.name.startswith("fault_agent_"), fam.name
        if fam.type == "histogram":
            assert fam.name.endswith("_seconds"), fam.name


def test_recovery_buckets_span_one_second_to_two_hours() -> None:
    assert RECOVERY_BUCKETS_S[0] == 1
    assert RECOVERY_BUCKETS_S[-1] == 7200
    assert list(RECOVERY_BUCKETS_S) == sorted(set(RECOVERY_BUCKETS_S))


@pytest.mark.parametrize(
    ("call", "sample", "labels", "expected"),
    [
        pytest.param(
            lambda m: m.fault(FaultKind.CHIP, FaultLevel.SEPARATE, "device-plugin"),
            "fault_agent_faults_total",
            {"kind": "chip", "level": "SeparateNPU", "source": "device-plugin"},
            1,
            id="fault-enum-labels-use-vendor-level-name",
        ),
        pytest.param(
            lambda m: m.fault("node", "SeparateFault", "noded"),
            "fault_agent_faults_total",
            {"kind": "node", "level": "SeparateFault", "source": "noded"},
            1,
            id="fault-string-labels-pass-through",
        ),
        pytest.param(
            lambda m: [m.input_rejected("ConfigMap", "bad-check-code") for _ in range(3)],
            "fault_agent_input_rejected_total",
            {"source": "ConfigMap", "reason": "bad-check-code"},
            3,
            id="input-rejected-counts",
        ),
        pytest.param(
            lambda m: m.action("taint", "failed"),
            "fault_agent_actions_total",
            {"action": "taint", "result": "failed"},
            1,
            id="action",
        ),
        pytest.param(
            lambda m: m.watch_event("nodes", "BOOKMARK"),
            "fault_agent_watch_events_total",
            {"resource": "nodes", "type": "BOOKMARK"},
            1,
            id="watch-event",
        ),
        pytest.param(
            lambda m: m.watch_restart("pods"),
            "fault_agent_watch_restarts_total",
            {"resource": "pods", "reason": "error"},
            1,
            id="watch-restart-default-reason",
        ),
        pytest.param(
            lambda m: [m.relist("vcjobs"), m.relist("vcjobs")],
            "fault_agent_relists_total",
            {"resource": "vcjobs"},
            2,
            id="relist",
        ),
        pytest.param(
            lambda m: m.event_published("training.faults", "error"),
            "fault_agent_events_published_total",
            {"topic": "training.faults", "result": "error"},
            1,
            id="event-published",
        ),
        pytest.param(
            lambda m: [m.kafka_error("topic-missing"), m.kafka_error("topic-missing")],
            "fault_agent_kafka_errors_total",
            {"reason": "topic-missing"},
            2,
            id="kafka-error",
        ),
        pytest.param(
            lambda m: m.budget_exhausted("vcjob"),
            "fault_agent_retry_budget_exhausted_total",
            {"job_kind": "vcjob"},
            1,
            id="budget-exhausted",
        ),
        pytest.param(
            lambda m: m.recovery_failed("vcjob", FailureReason.ACTION_ERROR),
            "fault_agent_recovery_failures_total",
            {"job_kind": "vcjob", "reason": "action-error"},
            1,
            id="recovery-failed-reason",
        ),
        pytest.param(lambda m: m.incidents_open(4), "fault_agent_incidents_open", {}, 4, id="incidents-open"),
        pytest.param(lambda m: m.incidents_open(4, 3), "fault_agent_incidents_held", {}, 3, id="incidents-held"),
        pytest.param(lambda m: m.outbox_events(17), "fault_agent_outbox_events", {}, 17, id="outbox-events"),
        pytest.param(lambda m: m.outbox_bytes(2048), "fault_agent_outbox_bytes", {}, 2048, id="outbox-bytes"),
        pytest.param(lambda m: m.breaker_open(True), "fault_agent_breaker_open", {}, 1, id="breaker-open"),
        pytest.param(
            lambda m: [m.breaker_open(True), m.breaker_open(False)],
            "fault_agent_breaker_open",
            {},
            0,
            id="breaker-closed-again",
        ),
        pytest.param(lambda m: m.leader(True), "fault_agent_leader", {}, 1, id="leader"),
        pytest.param(
            lambda m: m.recovery("vcjob", FaultKind.CHIP, "restart-job", "recovered", 42, acted_by="observed"),
            "fault_agent_recovery_seconds_sum",
            {
                "job_kind": "vcjob",
                "fault_kind": "chip",
                "action": "restart-job",
                "outcome": "recovered",
                "acted_by": "observed",
            },
            42,
            id="recovery-observed",
        ),
        pytest.param(
            lambda m: m.mindcluster_plugin(True, "act"),
            "fault_agent_mindcluster_plugin_active",
            {"agent_mode": "act"},
            1,
            id="plugin-beside-act",
        ),
        pytest.param(
            lambda m: m.fault_source("clusterd"),
            "fault_agent_fault_source",
            {"source": "clusterd"},
            1,
            id="fault-source-in-use",
        ),
        pytest.param(
            lambda m: m.fault_source("clusterd"),
            "fault_agent_fault_source",
            {"source": "per-node"},
            0,
            id="fault-source-not-in-use",
        ),
        pytest.param(lambda m: m.clusterd_unread(True), "fault_agent_clusterd_unread", {}, 1, id="clusterd-unread"),
        pytest.param(
            lambda m: [m.mindcluster_plugin(True, "act"), m.mindcluster_plugin(True, "observe")],
            "fault_agent_mindcluster_plugin_active",
            {"agent_mode": "act"},
            0,
            id="plugin-beside-observe",
        ),
        pytest.param(
            lambda m: m.cache_synced("pods"), "fault_agent_cache_synced", {"resource": "pods"}, 1, id="cache-synced"
        ),
        pytest.param(
            lambda m: m.queue_depth("signals", 12), "fault_agent_queue_depth", {"queue": "signals"}, 12, id="queue"
        ),
        pytest.param(
            lambda m: m.task_failed("leader"), "fault_agent_task_failures_total", {"task": "leader"}, 1, id="task"
        ),
    ],
)
def test_method_moves_its_series(
    reg: CollectorRegistry,
    metrics: AgentMetrics,
    call: Callable[[AgentMetrics], object],
    sample: str,
    labels: dict[str, str],
    expected: float,
) -> None:
    call(metrics)
    assert _value(reg, sample, labels) == expected


@pytest.mark.parametrize(
    ("seconds", "bucket_le", "in_bucket"),
    [
        pytest.param(70, "60.0", 0, id="70s-not-in-60"),
        pytest.param(70, "90.0", 1, id="70s-in-90"),
        pytest.param(7000, "5400.0", 0, id="7000s-not-in-5400"),
        pytest.param(7000, "7200.0", 1, id="7000s-in-7200"),
        pytest.param(9000, "7200.0", 0, id="beyond-2h-only-in-inf"),
        pytest.param(9000, "+Inf", 1, id="beyond-2h-in-inf"),
        pytest.param(-3, "1.0", 1, id="negative-clamped-to-zero"),
    ],
)
def test_recovery_histogram_buckets(
    reg: CollectorRegistry, metrics: AgentMetrics, seconds: float, bucket_le: str, in_bucket: int
) -> None:
    metrics.recovery("acjob", FaultKind.NODE, "delete-pods", "recovered", seconds)
    labels = {
        "job_kind": "acjob", "fault_kind": "node", "action": "delete-pods", "outcome": "recovered", "acted_by": "agent"
    }  # fmt: skip
    assert _value(reg, "fault_agent_recovery_seconds_bucket", {**labels, "le": bucket_le}) == in_bucket
    assert _value(reg, "fault_agent_recovery_seconds_count", labels) == 1


def test_detection_lag_and_decision_observe_seconds(reg: CollectorRegistry, metrics: AgentMetrics) -> None:
    metrics.detection_lag(2.5, "noded")
    metrics.detection_lag(-1.0, "noded")  # clock skew: counted, as zero
    metrics.decision(0.003)
    assert _value(reg, "fault_agent_detection_lag_seconds_count", {"source": "noded"}) == 2
    assert _value(reg, "fault_agent_detection_lag_seconds_sum", {"source": "noded"}) == 2.5
    assert _value(reg, "fault_agent_decision_seconds_sum") == pytest.approx(0.003)


def test_watch_event_stamps_last_event_time(reg: CollectorRegistry, metrics: AgentMetrics) -> None:

    before = time.time()
    metrics.watch_event("configmaps", "MODIFIED")
    stamp = _value(reg, "fault_agent_watch_last_event_timestamp_seconds", {"resource": "configmaps"})
    assert stamp is not None
    assert before <= stamp <= time.time()


def test_state_gauges_start_at_zero(reg: CollectorRegistry, metrics: AgentMetrics) -> None:
    for name in ("fault_agent_leader", "fault_agent_breaker_open", "fault_agent_incidents_open",
                 "fault_agent_incidents_held"):  # fmt: skip
        assert _value(reg, name) == 0, name


def test_build_info_carries_version_and_cluster(reg: CollectorRegistry, metrics: AgentMetrics) -> None:
    fam = next(f for f in reg.collect() if f.name == "fault_agent_build")
    (sample,) = fam.samples
    assert sample.labels["version"] == "9.9.9"
    assert sample.labels["cluster"] == "lab"
    assert sample.value == 1


@pytest.mark.parametrize("encode", [generate_latest, openmetrics_latest], ids=["text", "openmetrics"])
def test_every_served_series_carries_the_cluster_label(
    reg: CollectorRegistry, metrics: AgentMetrics, encode: Callable[[CollectorRegistry], bytes]
) -> None:
    """/metrics serves `exposed`: on a Prometheus shared by many clusters every series says which one it is
    (cluster_name), and the constant label adds no series."""
    _exercise_all(metrics)
    served = [s for f in text_string_to_metric_families(generate_latest(metrics.exposed).decode()) for s in f.samples]
    own = [s for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples]
    assert len(served) == len(own) > 0
    assert [s for s in served if s.labels.get("cluster") != "lab"] == []
    assert b'fault_agent_leader{cluster="lab"} 0.0' in encode(metrics.exposed)


def test_every_supervised_task_is_created_at_zero() -> None:
    """FaultAgentTaskFailing uses increase(): a task's series must exist at 0 before its first failure."""
    names = set(
        re.findall(
            r'_supervised\(self\.\w+, "([\w-]+)"\)',
            "".join(f.read_text() for f in (REPO / "agent/sinks/kafka").glob("*.py")),
        )
    )
    assert names == set(KAFKA_TASK_NAMES)
    engine = set(re.findall(r'task_failed\("([\w-]+)"\)', (REPO / "agent/engine/loops.py").read_text()))
    assert engine == set(ENGINE_TASK_NAMES)
    reg = CollectorRegistry()
    AgentMetrics(reg)
    assert [reg.get_sample_value("fault_agent_task_failures_total", {"task": t}) for t in TASK_NAMES] == [0.0] * 7


def test_two_registries_do_not_collide() -> None:
    a, b = CollectorRegistry(), CollectorRegistry()
    ma, _ = AgentMetrics(a), AgentMetrics(b)
    ma.leader(True)
    assert a.get_sample_value("fault_agent_leader") == 1
    assert b.get_sample_value("fault_agent_leader") == 0


def test_same_registry_twice_raises() -> None:
    reg = CollectorRegistry()
    AgentMetrics(reg)
    with pytest.raises(ValueError, match="Duplicated"):
        AgentMetrics(reg)


def test_implements_the_watch_and_sink_protocols(metrics: AgentMetrics) -> None:
    # Typed assignments: mypy --strict checks the signatures; the loop checks the methods exist at run time.
    from agent.kube.watch import WatchObserver
    from agent.sinks.kafka import SinkMetrics

    observer: WatchObserver = metrics
    sink: SinkMetrics = metrics
    for proto, impl in ((WatchObserver, observer), (SinkMetrics, sink)):
        names = [n for n in vars(proto) if not n.startswith("_")]
        assert names
        assert all(callable(getattr(impl, n)) for n in names), proto.__name__


# --- every known label set exists at zero from the start (a series first exposed at 1 is invisible to
# increase() and rate(): the first budget exhaustion raised no alert, dashboard totals were one short) ----


@pytest.mark.parametrize(
    ("sample", "labels"),
    [
        pytest.param("fault_agent_retry_budget_exhausted_total", {"job_kind": "vcjob"}, id="budget-vcjob"),
        pytest.param("fault_agent_retry_budget_exhausted_total", {"job_kind": "acjob"}, id="budget-acjob"),
        pytest.param(
            "fault_agent_recovery_failures_total", {"job_kind": "acjob", "reason": "timeout"}, id="failure-reason"
        ),
        pytest.param(
            "fault_agent_recovery_seconds_bucket",
            {
                "job_kind": "vcjob",
                "fault_kind": "chip",
                "action": "restart-job",
                "outcome": "recovered",
                "le": "600.0",
                "acted_by": "agent",
            },
            id="recovery-bucket-chip",
        ),
        pytest.param(
            "fault_agent_recovery_seconds_count",
            {
                "job_kind": "vcjob",
                "fault_kind": "business",
                "action": "abort",
                "outcome": "failed",
                "acted_by": "agent",
            },
            id="recovery-abort",
        ),
        pytest.param(
            "fault_agent_recovery_seconds_count",
            {
                "job_kind": "acjob",
                "fault_kind": "node",
                "action": "restart-pods",
                "outcome": "failed",
                "acted_by": "observed",
            },
            id="recovery-observed",
        ),
        pytest.param("fault_agent_mindcluster_plugin_active", {"agent_mode": "act"}, id="plugin-act"),
        pytest.param(
            "fault_agent_actions_total", {"action": "force-after-command", "result": "already_done"}, id="force-after"
        ),
        pytest.param("fault_agent_actions_total", {"action": "restart-job", "result": "done"}, id="restart-done"),
        pytest.param(
            "fault_agent_faults_total",
            {"kind": "chip", "level": "SeparateNPU", "source": "device-plugin"},
            id="fault-chip-separate",
        ),
        pytest.param("fault_agent_faults_cleared_total", {"kind": "node"}, id="cleared-node"),
        pytest.param(
            "fault_agent_grace_wait_seconds_count", {"wait": "grace-exit", "ended": "checkpoint"}, id="grace-wait"
        ),
        pytest.param("fault_agent_detection_lag_seconds_count", {"source": "deviceinfo"}, id="lag-deviceinfo"),
        pytest.param("fault_agent_watch_events_total", {"resource": "pods", "type": "MODIFIED"}, id="watch-event"),
        pytest.param("fault_agent_watch_restarts_total", {"resource": "nodes", "reason": "gone"}, id="watch-restart"),
        pytest.param("fault_agent_relists_total", {"resource": "vcjobs"}, id="relist"),
        pytest.param(
            "fault_agent_events_published_total", {"topic": "training.faults", "result": "error"}, id="published"
        ),
        pytest.param("fault_agent_kafka_errors_total", {"reason": "unreachable"}, id="kafka-error"),
    ],
)
def test_known_label_sets_start_at_zero(
    reg: CollectorRegistry, metrics: AgentMetrics, sample: str, labels: dict[str, str]
) -> None:
    assert _value(reg, sample, labels) == 0


def test_publish_counters_are_created_for_the_configured_topics() -> None:
    reg = CollectorRegistry()
    AgentMetrics(reg, topics=("lab.faults", "lab.recoveries"))
    assert _value(reg, "fault_agent_events_published_total", {"topic": "lab.recoveries", "result": "ok"}) == 0
    assert _value(reg, "fault_agent_events_published_total", {"topic": "training.faults", "result": "ok"}) is None


def test_the_known_label_values_follow_the_code() -> None:
    """The tables in agent.sinks.metrics name the values the rest of the agent uses."""
    from agent.actions.results import Outcome
    from agent.core.cluster import JobKind
    from agent.core.policy import Action
    from agent.engine import detecting
    from agent.settings import KubeSettings
    from agent.sinks import metrics as mod
    from agent.sinks.kafka import ErrorReason
    from agent.sources.watchers import resources

    assert set(mod.JOB_KINDS) == {k.value for k in JobKind}
    assert set(mod.FAULT_KINDS) == {k.value for k in FaultKind}
    assert set(mod.FAILURE_REASONS) == {r.value for r in FailureReason}
    assert set(mod.KAFKA_ERROR_REASONS) == {r.value for r in ErrorReason}
    assert set(mod.FAULT_SOURCES) == set(detecting.FAULT_SOURCES)
    incident_actions = {a.value for a in Action} - {"none", "force-delete-pods"}
    assert set(mod.RECOVERY_ACTIONS) == incident_actions
    assert {o.value for o in Outcome} <= set.intersection(*(set(r) for r in mod.ACTION_RESULTS.values()))
    both = [KubeSettings(fault_source=s, jobsets_enabled=True) for s in ("per-node", "clusterd")]  # type: ignore[arg-type]
    assert {r.source for k in both for r in resources(k)} == set(mod.WATCH_RESOURCES)
    assert set(mod.LAG_SOURCES) <= set(mod.WATCH_RESOURCES)


def test_the_faults_help_names_the_source_values_the_agent_exports() -> None:
    """Issue 41, 8: the HELP text listed sources ("public") that differ from the label values exported
    ("publicfault", and "clusterd" was missing)."""
    from prometheus_client import CollectorRegistry

    from agent.engine.detecting import FAULT_SOURCES
    from agent.sinks.metrics import AgentMetrics

    help_text = AgentMetrics(CollectorRegistry()).faults_total._documentation
    named = help_text.rsplit("(", 1)[1].rstrip(").").split(", ")
    assert sorted(named) == sorted(FAULT_SOURCES)


def _named(help_text: str, word: str) -> list[str]:
    """The values a HELP text lists in parentheses right after `word`, e.g. ``by resource (pods, nodes)``;
    a trailing ``...`` (an open list) is dropped."""
    found = re.search(rf"\b{re.escape(word)} \(([^)]*)\)", help_text)
    assert found is not None, f"{word!r} (...) not in {help_text!r}"
    return [v for v in found.group(1).split(", ") if v != "..."]


@pytest.mark.parametrize(
    ("metric", "word", "known", "closed"),
    [
        pytest.param("watch_events_total", "resource", "WATCH_RESOURCES", True, id="watch-events-resource"),
        pytest.param("watch_events_total", "type", "WATCH_EVENT_TYPES", True, id="watch-events-type"),
        pytest.param("watch_restarts_total", "reason", "WATCH_RESTART_REASONS", True, id="watch-restarts-reason"),
        pytest.param("faults_total", "kind", "FAULT_KINDS", True, id="faults-kind"),
        pytest.param("recovery_seconds", "job kind", "JOB_KINDS", True, id="recovery-job-kind"),
        pytest.param("recovery_failures_total", "reason", "FAILURE_REASONS", True, id="failures-reason"),
        pytest.param("events_published_total", "result", "PUBLISH_RESULTS", True, id="published-result"),
        pytest.param("kafka_errors_total", "reason", "KAFKA_ERROR_REASONS", True, id="kafka-errors-reason"),
        pytest.param("actions_total", "action", "ACTION_RESULTS", False, id="actions-action"),
        pytest.param("actions_total", "result", "ACTION_RESULTS.values", True, id="actions-result"),
        pytest.param("queue_depth_gauge", "queue", "QUEUES", True, id="queue-depth-queue"),
    ],
)
def test_the_help_lists_only_label_values_the_agent_exports(metric: str, word: str, known: str, closed: bool) -> None:
    """Issue 41, 8: a HELP text that lists a label's values lists the values exported, all of them where the set
    is closed (watch_events said "configmaps", exported as deviceinfo, nodeinfo, faultconfig, clusterinfo,
    publicfault; queue_depth said "signals, events", exported as "faults"; actions' results lacked breaker_open)."""
    from agent.sinks import metrics as mod

    if known == "ACTION_RESULTS.values":
        values: set[str] = set().union(*mod.ACTION_RESULTS.values())
    elif known == "QUEUES":
        from agent.engine.detecting import FAULT_QUEUE

        values = {FAULT_QUEUE}
    else:
        values = set(getattr(mod, known))
    help_text = getattr(AgentMetrics(CollectorRegistry()), metric)._documentation
    named = _named(help_text, word)
    assert len(named) == len(set(named))
    assert sorted(set(named) - values) == [], help_text
    if closed:
        assert sorted(values - set(named)) == [], help_text
