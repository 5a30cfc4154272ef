"""The shipped alerts and dashboard against a real Prometheus (Debian's ``prometheus`` server) scraping the real
agents on the testbed every 2 seconds.

The rules are deploy/prometheusrule.yaml's own groups on the test's time scale (testbed.prometheus.
rule_groups_on_test_scale: 20 s windows instead of 5 to 15 minutes, ``for: 1s``, and the slow-recovery bound
600 s lowered to 1 s with the rule's own spelling kept). One scenario drives each alert: a business failure of a
job with no retry left (retry budget exhausted), a chip fault whose restart takes longer than the lowered bound
(slow recovery), and two nodes failing at once (circuit breaker open, then reset by a person). Each alert must
fire and then resolve, through Prometheus' HTTP API; the budget abort must raise no other alert. Then every
dashboard panel's expressions must parse and return data.

One Prometheus scrapes the agents of two clusters (issue 41, 4): this test's agent (cluster ``e2e-<tag>``, cluster
a) and an idle one of another cluster_name (``e2e-<tag>-b``, its own Lease, watching a namespace without jobs).
Each cluster has one leader, which must be neither a split brain nor a missing leader; the alerts carry cluster
a's label; the dashboard shows cluster a; when b's agent stops, FaultAgentDown fires for cluster b alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Scenario, for_job
from helpers import VC, guide_vcjob, live_pods, submit, wait_running
from kubernetes_asyncio import client as k8s

from agent.actions.breaker_store import reset_breaker
from agent.settings import Settings
from testbed.inject import ChipFault
from testbed.prometheus import PrometheusServer, rule_groups_on_test_scale

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RULE = REPO / "deploy" / "prometheusrule.yaml"
DASHBOARD = REPO / "deploy" / "fault-agent-dashboard.json"
WINDOW_S = 20
SCRAPE_S = 2.0


class AlertRecorder:
    """Polls ``/api/v1/alerts`` every 0.25 s and keeps every (alert name, labels, state) it saw."""

    def __init__(self, prom: PrometheusServer) -> None:
        self.prom = prom
        self.seen: list[dict[str, Any]] = []
        self.now: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="alert-recorder")

    async def _run(self) -> None:
        while True:
            self.now = await asyncio.to_thread(self.prom.alerts)
            self.seen += self.now
            await asyncio.sleep(0.25)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def matching(self, name: str, labels: dict[str, str], alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            a
            for a in alerts
            if a["labels"].get("alertname") == name and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    async def firing(self, name: str, timeout_s: float = 30.0, **labels: str) -> dict[str, Any]:
        """Wait until alert `name` with `labels` is firing; returns it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            hits = [a for a in self.matching(name, labels, self.now) if a["state"] == "firing"]
            if hits:
                return hits[0]
            await asyncio.sleep(0.2)
        names = sorted({(a["labels"]["alertname"], a["state"]) for a in self.now})
        pytest.fail(f"{name} {labels} not firing within {timeout_s} s; active now: {names}")

    async def resolved(self, name: str, timeout_s: float = WINDOW_S + 15.0, **labels: str) -> None:
        """Wait until alert `name` with `labels` is no longer active (neither pending nor firing)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.matching(name, labels, self.now):
                return
            await asyncio.sleep(0.2)
        pytest.fail(f"{name} {labels} still active after {timeout_s} s")


def _values(samples: list[dict[str, Any]]) -> list[float]:
    return [float(s["value"][1]) for s in samples]


def _finite(samples: list[dict[str, Any]]) -> list[float]:
    return [v for v in _values(samples) if math.isfinite(v)]


def _panel_queries(range_s: int, cluster: str) -> list[tuple[str, str, str]]:
    """(panel title, legend, expression) for every dashboard target, Grafana's interval variables set to the
    time this test's Prometheus has data for and the cluster variable to `cluster`."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", f"{range_s}s").replace("$__range", f"{range_s}s")
            expr = expr.replace("$cluster", cluster)
            out.append((panel["title"], target.get("legendFormat", ""), expr))
    return out


async def test_alerts_fire_and_resolve_and_every_dashboard_panel_shows_data(scenario: Scenario) -> None:
    sc = scenario
    nodes = await sc.add_nodes(8)
    budget_job = guide_vcjob(sc.namespace, sc.tag, name="budget", labels={"fault-retry-times": "0"}, max_retry=10)
    budget = await submit(sc.api, budget_job, VC)
    slow = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, name="slow", max_retry=10), VC)
    budget_pods = await wait_running(sc.api, sc.namespace, "budget")
    slow_pods = await wait_running(sc.api, sc.namespace, "slow")
    breaker_cm = f"fault-agent-breaker-{sc.tag}"
    agent = await sc.start_agent(
        # two nodes turning faulty within 10 s trip the breaker, whatever the number of watched nodes
        POLICY__BREAKER_NODE_SHARE="0.001",
        POLICY__BREAKER_MIN_FAULTY_NODES="2",
        POLICY__BREAKER_WINDOW_S="10",
    )
    # another cluster's agent on the same Prometheus: its own cluster_name, Lease and breaker, no jobs to watch
    cluster_a, cluster_b = f"e2e-{sc.tag}", f"e2e-{sc.tag}-b"
    other = await sc.start_agent(
        "other",
        CLUSTER_NAME=cluster_b,
        KUBE__NAMESPACES=json.dumps([f"{sc.namespace}-b"]),
        LEADER__NAME=f"fault-agent-{sc.tag}-b",
        POLICY__BREAKER_CONFIGMAP=f"fault-agent-breaker-{sc.tag}-b",
    )
    doc = yaml.safe_load(RULE.read_text())
    groups = rule_groups_on_test_scale(doc, window=f"{WINDOW_S}s", hold="1s", bucket_bounds={"600": "1"})
    targets = [f"127.0.0.1:{agent.port}", f"127.0.0.1:{other.port}"]
    # every 2 s: a scrape costs each agent ~0.1 s of CPU (about 6000 series), and two agents scraped every second
    # on a loaded 2-core machine missed the 1 s scrape timeout often enough to leave gaps in their series
    prom = PrometheusServer(sc.workdir / "prometheus", targets, groups, interval_s=SCRAPE_S)
    started = time.monotonic()  # before the first scrape: the dashboard's ranges below reach back to it
    prom.start()  # in this (the main) thread: the server dies with the thread that started it
    alerts = AlertRecorder(prom)
    alerts.start()
    try:
        # 0. one Prometheus, two clusters, one leader each: per cluster, not two leaders in one
        leaders = await asyncio.to_thread(prom.query, "sum by (cluster) (fault_agent_leader)")
        assert {s["metric"]["cluster"]: float(s["value"][1]) for s in leaders} == {cluster_a: 1.0, cluster_b: 1.0}

        # 1. a business failure of a job with fault-retry-times=0: budget exhausted at its first occurrence
        sc.injector.pod_failed(sc.namespace, budget_pods[0].metadata.name, exit_code=137)
        # 2. a SeparateNPU chip under the other job: one restart, longer than the (lowered) 1 s bound. The recovery
        # counts from the fault's own time (its fault_time, in ms); a restart on this testbed can take under a second,
        # so the chip faulted 2 s before the device plugin reports it (at whole-second fault times the rounding
        # down added up to a second, which hid this)
        bad_node = slow_pods[0].spec.node_name
        sc.injector.chip_fault(bad_node, [ChipFault(0, ("80E3A201",), "SeparateNPU", age_s=2.0)])

        (failed,) = await sc.wait_events("recovery.failed", for_job(budget["metadata"]["uid"]))
        assert failed["data"]["reason"] == "budget-exhausted"
        assert failed["data"]["action"] == "abort"  # as fault_agent_recovery_seconds{action="abort"} says
        await alerts.firing("FaultAgentRetryBudgetExhausted", job_kind="vcjob", cluster=cluster_a)

        await sc.wait_events("recovery.succeeded", for_job(slow["metadata"]["uid"]), timeout_s=60)
        await alerts.firing("FaultAgentRecoverySlow", job_kind="vcjob", fault_kind="chip", cluster=cluster_a)

        # 3. two idle nodes fail at once: the breaker opens; a person resets it
        busy = {p.spec.node_name for p in await live_pods(sc.api, sc.namespace, "volcano.sh/job-name")}
        idle = [n for n in nodes if n not in busy and n != bad_node][:2]
        assert len(idle) == 2, f"no two idle nodes among {nodes} (busy {busy})"
        for node in idle:
            sc.injector.chip_fault(node, [ChipFault(1, ("80E3A201",), "SeparateNPU")])
        await sc.wait_events("breaker.tripped")
        await alerts.firing("FaultAgentBreakerOpen", cluster=cluster_a)

        await alerts.resolved("FaultAgentRetryBudgetExhausted", job_kind="vcjob")
        settings = Settings.model_validate(
            {"leader": {"namespace": sc.namespace}, "policy": {"breaker_configmap": breaker_cm}}
        )
        await reset_breaker(k8s.CoreV1Api(sc.api), settings, by="e2e", now=datetime.now(UTC))
        await alerts.resolved("FaultAgentBreakerOpen")
        await alerts.resolved("FaultAgentRecoverySlow", job_kind="vcjob", fault_kind="chip")

        # one alert per cause: the budget abort raised neither "recovery failed" alert
        seen = {a["labels"]["alertname"] for a in alerts.seen}
        assert {"FaultAgentRecoveryFailed", "FaultAgentRecoveryActionFailed"} & seen == set(), seen
        # two clusters' leaders are not a split brain, and the idle cluster raised nothing. FaultAgentDown is left
        # out: on this time scale (`for: 1s`) one scrape that misses its 1 s timeout on a loaded machine raises it.
        assert {"FaultAgentSplitBrain", "FaultAgentNoLeader"} & seen == set(), seen
        others = {(a["labels"]["alertname"], a["labels"].get("cluster"), a["state"]) for a in alerts.seen}
        assert {o for o in others if o[1] != cluster_a and o[0] != "FaultAgentDown"} == set(), others

        # 4. the dashboard: every expression parses, every panel has data, the named series are there
        range_s = int(time.monotonic() - started) + 2
        results: dict[tuple[str, str], list[dict[str, Any]]] = {}
        quantiles: list[tuple[str, str]] = []
        for title, legend, expr in _panel_queries(range_s, cluster_a):
            results[(title, legend)] = await asyncio.to_thread(prom.query, expr)  # raises on a parse error
            if "histogram_quantile" in expr:
                quantiles.append((title, legend))
        by_panel: dict[str, int] = {}
        for (title, _), samples in results.items():
            by_panel[title] = by_panel.get(title, 0) + len(samples)
        assert sorted(t for t, n in by_panel.items() if n == 0) == []
        assert sorted(f"{t} {leg}" for t, leg in quantiles if not _finite(results[(t, leg)])) == []
        p90 = results[("Recovery time p90 by job and fault kind", "{{job_kind}} / {{fault_kind}} ({{acted_by}})")]
        chip = [s for s in p90 if s["metric"] == {"job_kind": "vcjob", "fault_kind": "chip", "acted_by": "agent"}]
        assert _finite(chip), f"no vcjob/chip series in Recovery time p90: {p90}"
        actions = results[("Actions by result", "{{action}} {{result}}")]
        forced = [s for s in actions if s["metric"].get("action") == "force-after-command"]
        assert sum(_values(forced)) > 0, f"Actions by result has no force-after-command: {actions}"
        restarts = [s for s in actions if s["metric"] == {"action": "restart-job", "result": "done"}]
        assert sum(_values(restarts)) > 0
        ended: dict[str, float] = {}
        for s in results[("Recoveries (range)", "{{outcome}} ({{acted_by}})")]:
            if s["metric"].get("acted_by") == "agent":  # this test's restarts are the agent's own
                ended[s["metric"]["outcome"]] = ended.get(s["metric"]["outcome"], 0.0) + float(s["value"][1])
        assert ended.get("recovered", 0) > 0.5
        assert ended.get("failed", 0) > 0.5
        exhausted = results[("Retry budgets exhausted / inputs rejected", "budget exhausted {{job_kind}}")]
        assert sum(_values(exhausted)) > 0.5
        assert _values(results[("Leader replicas", "leaders")]) == [1.0]
        variable = await asyncio.to_thread(prom.query, "group by (cluster) (fault_agent_build_info)")
        assert {s["metric"]["cluster"] for s in variable} == {cluster_a, cluster_b}  # the cluster variable's choices

        # 5. cluster b's agent stops while cluster a's reports: FaultAgentDown for cluster b only
        await asyncio.to_thread(other.stop)
        await alerts.firing("FaultAgentDown", cluster=cluster_b)
        downs = {a["labels"].get("cluster") for a in alerts.now if a["labels"]["alertname"] == "FaultAgentDown"}
        assert downs == {cluster_b}
        assert alerts.matching("FaultAgentNoLeader", {}, alerts.now) == []  # no series, no leader to miss
    finally:
        await alerts.stop()
        prom.stop()
        for node in nodes:
            sc.injector.chip_healthy(node)
