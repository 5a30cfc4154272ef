"""Effective training time (issue 38) with the whole agent as a subprocess, a real Prometheus scraping it, and
``fault-agent goodput`` reading the real events topic.

The guide's Volcano Job opts in to the progress heartbeat (``fault-agent.io/progress: lease``); its rank 0's
training loop (testbed.heartbeat.TrainingLoop, the real client against the real apiserver) steps every 0.5 s,
checkpoints every 10 steps and writes the Lease every second. A SeparateNPU chip fault under rank 0 stops the
training (the loop stops stepping); the agent restarts the job; once the new pods run, the loop waits (its
initialisation) and steps again from its last checkpoint. The ``recovery.resumed`` event must carry the work lost
since that checkpoint and the outage split by cause; ``fault-agent goodput`` must report the job with lost time > 0
split by cause and productive time > 0; and the dashboard's Training panels must return those figures from
Prometheus.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import VC, eventually, guide_vcjob, submit, wait_running
from kubernetes_asyncio import client as k8s

from agent.cli import main
from agent.core.goodput import CAUSES
from agent.core.progress import (
    CHECKPOINT_STEP_ANNOTATION,
    HANG_TIMEOUT_LABEL,
    PROGRESS_LABEL,
    STEP_ANNOTATION,
    lease_name,
)
from testbed.agent_runner import RECOVERIES_TOPIC
from testbed.heartbeat import TrainingLoop
from testbed.inject import ChipFault
from testbed.prometheus import PrometheusServer

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "fault-agent-dashboard.json"
TRAINING_ROW = "Training (jobs that report their progress)"
INITIALISING_S = 3.0
# no hang while the training is stopped behind the dead chip: this test is about the chip fault's restart
LABELS = {PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: "300"}


def _training_panels(range_s: int, cluster: str) -> dict[str, str]:
    """{panel title: its expression} for the dashboard's Training row (Grafana's variables filled in)."""
    dash = json.loads(DASHBOARD.read_text())
    panels = dash["panels"]
    (row,) = [i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == TRAINING_ROW]
    out = {}
    for panel in panels[row + 1 :]:
        if panel["type"] == "row":
            break
        (target,) = panel["targets"]
        expr = target["expr"].replace("$__rate_interval", f"{range_s}s").replace("$__range", f"{range_s}s")
        out[panel["title"]] = expr.replace("$cluster", cluster)
    return out


def _by(samples: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {s["metric"].get(label, ""): float(s["value"][1]) for s in samples}


async def test_a_restart_costs_work_and_time_by_cause_and_goodput_reports_it(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = scenario
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels=LABELS, max_retry=10), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    rank0 = min(pods, key=lambda p: p.metadata.name)
    loop = TrainingLoop(sc.testbed, sc.namespace, name, rank0.metadata.name).start()
    agent = await sc.start_agent()
    prom = PrometheusServer(sc.workdir / "prometheus", [f"127.0.0.1:{agent.port}"], [], interval_s=2.0)
    started = time.monotonic()
    prom.start()  # in this (the main) thread: the server dies with the thread that started it
    try:
        await asyncio.sleep(8)  # the agent follows the job's steps: its account starts at the first one seen

        coordination = k8s.CoordinationV1Api(sc.api)

        async def written_just_after_a_checkpoint() -> bool:
            # the Lease itself (what the agent reads), not only the loop, is 2-4 steps past its checkpoint: the
            # agent's step at the fault is the last one written before the restart (the client writes once a
            # second; under load a restart can come before the loop's newest steps were written)
            lease = await coordination.read_namespaced_lease(lease_name(name), sc.namespace)
            notes = lease.metadata.annotations or {}
            written = int(notes.get(STEP_ANNOTATION, "0")) - int(notes.get(CHECKPOINT_STEP_ANNOTATION, "-100"))
            return 2 <= written <= 4 and 2 <= loop.step - loop.checkpoint <= 4

        await eventually(
            written_just_after_a_checkpoint, timeout_s=20, interval_s=0.1, what="a step just after a checkpoint"
        )
        # the chip under rank 0 dies: the training stops there
        loop.hang()
        await asyncio.sleep(0.5)  # the agent's Lease watch delivers the write read above before the fault's
        sc.injector.chip_fault(rank0.spec.node_name, [ChipFault(0, ("80E3A201",), "SeparateNPU")])
        checkpoint, last_step = loop.checkpoint, loop.step
        (begun,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)
        old = {p.metadata.uid for p in pods}
        await wait_running(sc.api, sc.namespace, name, not_uids=old, timeout_s=60)
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        # the pods run, the training has not stepped yet: the time to first step comes with recovery.resumed
        assert "time_to_first_step_s" not in succeeded["data"]
        await asyncio.sleep(INITIALISING_S)  # loading the checkpoint
        loop.resume()  # from the checkpoint's step, as a restarted job does
        (resumed,) = await sc.wait_events("recovery.resumed", for_job(uid), timeout_s=30)
        data = resumed["data"]
        assert data["incident_id"] == begun["data"]["incident_id"] == succeeded["data"]["incident_id"]

        # the work lost: the steps done since the checkpoint, seen by the agent before the restart
        work = data["work_lost"]
        assert work["checkpoint_step"] == checkpoint
        assert checkpoint < work["step_at_fault"] <= last_step
        assert work["steps"] == work["step_at_fault"] - checkpoint
        assert work["step_time_s"] == pytest.approx(0.5, rel=0.5)  # the client's moving average of 0.5 s steps
        assert work["seconds"] == pytest.approx(work["steps"] * work["step_time_s"])

        # the outage by cause, one after the other on the agent's clock
        lost = data["lost_s"]
        assert lost["rescheduling_s"] > 0  # Volcano deleting and recreating the pods, kwok running them
        assert lost["initialisation_s"] >= INITIALISING_S - 1.5  # less the Lease interval and the recovery check
        assert lost["recomputation_s"] == work["seconds"] > 0
        assert lost["detection_s"] >= 0
        assert lost["restart_s"] >= 0
        assert lost["total_s"] == pytest.approx(sum(lost[f"{c}_s"] for c in CAUSES))
        outage = lost["total_s"] - lost["recomputation_s"]
        assert outage == pytest.approx(data["fault_to_first_step_s"], abs=1e-6)
        training = data["training"]
        assert training["incidents"] == 1
        assert training["productive_s"] > 0
        assert 0 < training["running_share"] < 1

        # fault-agent goodput: the same figures from the events topic
        monkeypatch.setenv("FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS", sc.testbed.kafka_bootstrap)
        code = await asyncio.to_thread(main, ["goodput", "--topic", RECOVERIES_TOPIC, "-n", sc.namespace, "--json"])
        assert code == 0
        (row,) = json.loads(capsys.readouterr().out)["jobs"]
        assert (row["namespace"], row["name"], row["incidents"]) == (sc.namespace, name, 1)
        assert row["lost_s"] == pytest.approx(lost["total_s"], abs=0.01)
        assert row["lost_by_cause_s"]["rescheduling"] > 0
        assert row["lost_by_cause_s"]["initialisation"] > 0
        assert row["lost_by_cause_s"]["recomputation"] > 0
        assert row["productive_s"] > 0
        assert row["work_lost_steps"] == work["steps"]
        # fault-agent status --training: the job's line and the table's column, from the same topic
        kube = ["--kubeconfig", str(sc.testbed.kubeconfig), "--width", "250"]
        code = await asyncio.to_thread(main, ["status", f"{sc.namespace}/{name}", "--training", *kube])
        assert code == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("training:")]
        found = re.search(r"training: +([0-9.]+)% productive", line)
        assert found is not None, line
        # a moment later than goodput's: the same lost time in a longer wall time
        assert 100 * row["running_share"] - 0.1 <= float(found[1]) < 100
        assert f"recomputation {row['lost_by_cause_s']['recomputation']:.1f}s" in line
        assert "in 1 incident(s)" in line
        code = await asyncio.to_thread(main, ["status", "-n", sc.namespace, "--training", *kube])
        assert code == 0
        table = capsys.readouterr().out
        assert re.search(rf"{name} .* [0-9.]+%", table), table

        # the dashboard's Training row, from Prometheus scraping the agent
        async def scraped() -> bool:  # the counters and the gauges of the tick after the resume (set a moment later)
            steps = await asyncio.to_thread(prom.query, "fault_agent_work_lost_steps_total")
            share = await asyncio.to_thread(prom.query, "fault_agent_effective_training_ratio")
            return bool(steps and share) and float(steps[0]["value"][1]) > 0 and float(share[0]["value"][1]) < 1

        await eventually(scraped, timeout_s=20, what="Prometheus to scrape the lost work and the running share")
        range_s = int(time.monotonic() - started) + 2
        results = {}
        for title, expr in _training_panels(range_s, f"e2e-{sc.tag}").items():
            results[title] = await asyncio.to_thread(prom.query, expr)  # raises on a parse error
        assert sorted(t for t, samples in results.items() if not samples) == []
        (share,) = results["Effective training time"]
        assert 0 < float(share["value"][1]) < 1
        times = _by(results["Training time: wall and productive"], "time")
        assert 0 < times["productive"] < times["wall"]
        by_cause = _by(results["Lost training time by cause"], "cause")
        assert set(by_cause) == set(CAUSES)
        assert by_cause["rescheduling"] > 0
        assert by_cause["recomputation"] > 0
        first_step = _by(results["Time to first step after a restart (mean)"], "job_kind")
        assert first_step["vcjob"] == pytest.approx(data["time_to_first_step_s"], rel=0.05)
        (steps,) = results["Work lost (steps computed again)"]
        assert float(steps["value"][1]) >= work["steps"] * 0.9  # increase() extrapolates a little
    finally:
        prom.stop()
        loop.stop()
        sc.injector.chip_healthy(rank0.spec.node_name)
