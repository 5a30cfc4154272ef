"""Hang detection from a step counter in Prometheus (issue 38), with the whole agent as a subprocess and the real
Prometheus server (Debian's ``prometheus``) scraping a training loop's /metrics every 0.5 s.

The guide's Volcano Job opts in with ``fault-agent.io/progress: prometheus`` and ``fault-agent.io/hang-timeout-s:
6``; its loop (testbed.step_metrics.ExportingLoop) steps every 0.25 s and exports ``training_step``. The agent
evaluates the job's step query every second against that Prometheus. A loop that keeps stepping is left alone; one
that stops is restarted once (reason ``hang``, a ``job.hung`` event naming the Prometheus source), and its first
step after the restart is a ``recovery.resumed`` event. A Prometheus that stops answering is reported once and is
never a hang, even while the loop does not step; a query Prometheus refuses is reported once and never acted on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from conftest import Scenario, for_job
from helpers import VC, eventually, get_job, guide_vcjob, holds, job_version, record_commands, restart_commands, submit
from helpers import wait_running as running

from agent.core.progress import HANG_TIMEOUT_LABEL, PROGRESS_LABEL
from agent.core.progress_prom import QUERY_ANNOTATION, STEP_TIME_QUERY_ANNOTATION
from testbed.prometheus import PrometheusServer
from testbed.step_metrics import ExportingLoop

pytestmark = pytest.mark.e2e

TIMEOUT_S = 6
LABELS = {PROGRESS_LABEL: "prometheus", HANG_TIMEOUT_LABEL: str(TIMEOUT_S)}
STEP_QUERY = 'max(training_step{namespace="{namespace}",job_name="{job}"})'
JOB = "mindx-dls-test"


@pytest.fixture
def loop(scenario: Scenario) -> Iterator[ExportingLoop]:
    exporting = ExportingLoop(scenario.namespace, JOB).start()
    yield exporting
    exporting.stop()


@pytest.fixture
def prometheus(scenario: Scenario, loop: ExportingLoop) -> Iterator[PrometheusServer]:
    prom = PrometheusServer(
        scenario.workdir / "prometheus", [], [], interval_s=0.5, scrape_jobs={"training": [loop.target]}
    )
    prom.start()  # in this (the main) thread: the server dies with the thread that started it
    yield prom
    prom.stop()


def agent_settings(prom: PrometheusServer, **more: str) -> dict[str, str]:
    return {"PROMETHEUS__URL": prom.url, "PROMETHEUS__INTERVAL_S": "1", **more}


async def test_a_job_progressing_in_prometheus_is_left_and_one_that_stops_is_restarted_once(
    scenario: Scenario, loop: ExportingLoop, prometheus: PrometheusServer
) -> None:
    sc = scenario
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels=LABELS, max_retry=10), VC)
    uid = created["metadata"]["uid"]
    pods = await running(sc.api, sc.namespace, JOB)
    commands = await record_commands(sc.api, sc.namespace)
    try:
        agent = await sc.start_agent(**agent_settings(prometheus, PROMETHEUS__STEP_QUERY=STEP_QUERY))
        version = job_version(await get_job(sc.api, sc.namespace, JOB))
        await holds(lambda: _commands_are(commands, 0), for_s=2 * TIMEOUT_S + 2, what="a progressing job is left")
        assert sc.events("job.hung", for_job(uid)) == []
        loop.hang()
        hung_step = loop.step
        (hung,) = await sc.wait_events("job.hung", for_job(uid), timeout_s=TIMEOUT_S + 15)
        data = hung["data"]
        assert data["action"] == "restart-job"
        assert data["lease"]["kind"] == "PrometheusQuery"  # the signal: the job's query, not a Lease
        assert (data["lease"]["namespace"], data["lease"]["name"]) == (sc.namespace, JOB)
        assert hung_step - 4 <= data["step"] <= hung_step  # the last scrape before the stop (0.5 s, 2 steps/s)
        assert (data["timeout_s"], data["timeout_from"]) == (TIMEOUT_S, "label")
        assert data["pod"]["name"] == min(p.metadata.name for p in pods)  # rank 0 is charged
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert [f["reason"] for f in started["data"]["faults"]] == ["hang"]
        await running(sc.api, sc.namespace, JOB, not_uids={p.metadata.uid for p in pods}, timeout_s=60)
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        assert job_version(await get_job(sc.api, sc.namespace, JOB)) == version + 1
        assert len(restart_commands(commands, JOB)) == 1
        assert agent.metric("fault_agent_faults_total", kind="business", source="progress") == 1
        # restarted, not stepping yet (initialising): no hang before its first step
        await holds(lambda: _commands_are(commands, 1), for_s=TIMEOUT_S + 2, what="no second restart before a step")
        loop.resume()
        (resumed,) = await sc.wait_events("recovery.resumed", for_job(uid), timeout_s=15)
        assert resumed["data"]["incident_id"] == data["incident_id"]
        assert agent.metric("fault_agent_input_rejected_total", source="Prometheus") == 0
    finally:
        await commands.stop()


async def test_a_stopped_prometheus_and_a_refused_query_are_reported_once_and_never_acted_on(
    scenario: Scenario, loop: ExportingLoop, prometheus: PrometheusServer
) -> None:
    sc = scenario
    await sc.add_nodes(4)
    cm, job = guide_vcjob(sc.namespace, sc.tag, labels=LABELS, max_retry=10)
    job["metadata"]["annotations"] = {  # the job's own queries (prometheus.job_queries: true by default)
        QUERY_ANNOTATION: STEP_QUERY,
        STEP_TIME_QUERY_ANNOTATION: 'max(training_step_seconds{namespace="{namespace}",job_name="{job}"})',
    }
    created = await submit(sc.api, (cm, job), VC)
    uid = created["metadata"]["uid"]
    bad_cm, bad = guide_vcjob(sc.namespace, sc.tag, name="bad-query", labels=LABELS, max_retry=10)
    bad["metadata"]["annotations"] = {QUERY_ANNOTATION: "max(training_step{"}  # PromQL that does not parse
    bad_uid = (await submit(sc.api, (bad_cm, bad), VC))["metadata"]["uid"]
    await running(sc.api, sc.namespace, JOB)
    commands = await record_commands(sc.api, sc.namespace)
    try:
        agent = await sc.start_agent(**agent_settings(prometheus))

        async def refused_once() -> bool:
            return agent.metric("fault_agent_input_rejected_total", source="Job", reason="bad-progress-query") >= 1

        await eventually(refused_once, timeout_s=15, what="the refused query reported")
        await asyncio.sleep(3)  # the agent sees the good job's steps move: armed
        loop.hang()  # the loop stops stepping *and* Prometheus goes: no data is not a hang
        await asyncio.to_thread(prometheus.stop)
        await holds(lambda: _commands_are(commands, 0), for_s=3 * TIMEOUT_S, what="no action without data")
        assert sc.events("job.hung", for_job(uid)) == []
        assert sc.events("job.hung", for_job(bad_uid)) == []
        assert (
            agent.metric("fault_agent_input_rejected_total", source="Prometheus", reason="prometheus-unreachable") == 1
        )
        assert agent.metric("fault_agent_input_rejected_total", source="Job", reason="bad-progress-query") == 1
        assert agent.metric("fault_agent_faults_total", kind="business", source="progress") == 0
    finally:
        await commands.stop()


async def _commands_are(commands: object, n: int) -> bool:
    return len(restart_commands(commands, JOB)) == n  # type: ignore[arg-type]
