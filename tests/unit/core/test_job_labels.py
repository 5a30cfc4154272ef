"""A job's opt-in label that the agent cannot read is reported, never silently read as "off" (issue 16 item 8):
``fault-scheduling`` = ``FORCE``, ``""`` or ``grace-ish`` leaves the job without rescheduling (as MindCluster's
Volcano plugin reads it), so the agent logs it once per distinct value, counts it, and `fault-agent status` shows
the label as unreadable."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from rich.console import Console
from structlog.testing import capture_logs

from agent.core.cluster import FaultScheduling, JobKind, JobRecord
from agent.core.faults import Fault, FaultCleared, ObjectRef
from agent.engine.detecting import DetectPipeline
from agent.kube.watch import Change, ChangeType
from agent.platform.status import job_view, render_job, render_table
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks.metrics import AgentMetrics
from agent.sources.jobs import JobConverter, fault_scheduling_problem, label_rejections
from agent.sources.state import ClusterState


def _vcjob(scheduling: str | None, rv: str = "1") -> dict[str, Any]:
    labels = {} if scheduling is None else {"fault-scheduling": scheduling}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u-1", "resourceVersion": rv, "labels": labels},
        "spec": {"maxRetry": 3, "minAvailable": 1},
        "status": {"state": {"phase": "Running"}, "version": 0},
    }


def _record(scheduling: str | None, rv: str = "1") -> JobRecord:
    rec = JobConverter(JobKind.VOLCANO)(_vcjob(scheduling, rv))
    assert isinstance(rec, JobRecord)
    return rec


@pytest.mark.parametrize(
    ("value", "bad"),
    [
        pytest.param("force", False, id="force"),
        pytest.param("grace", False, id="grace"),
        pytest.param("off", False, id="off"),
        pytest.param(None, False, id="absent"),
        pytest.param("FORCE", True, id="upper-case"),
        pytest.param("", True, id="empty"),
        pytest.param("grace-ish", True, id="grace-ish"),
        pytest.param(" force", True, id="leading-space"),
    ],
)
def test_fault_scheduling_problem(value: str | None, bad: bool) -> None:
    problem = fault_scheduling_problem(value)
    assert (problem is not None) is bad
    if bad:
        assert "fault-scheduling" in str(problem)
        assert repr(value) in str(problem)


@pytest.mark.parametrize("value", ["FORCE", "", "grace-ish"])
def test_a_bad_value_keeps_the_record_as_off_and_is_a_rejection(value: str) -> None:
    rec = _record(value)
    assert rec.fault_scheduling is FaultScheduling.OFF
    (rej,) = label_rejections(rec, ObjectRef("Job", "ns", "j", "u-1"))
    assert rej.reason == "bad-fault-scheduling"
    assert not label_rejections(_record("grace"), ObjectRef("Job", "ns", "j", "u-1"))


def _job_change(rec: JobRecord) -> Change[JobRecord]:
    return Change(ChangeType.MODIFIED, "vcjobs", "ns/j", rec, None, False, time.time())


def test_pipeline_reports_each_distinct_bad_value_once() -> None:
    registry = CollectorRegistry()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(Settings(), ClusterState(), queue, metrics=AgentMetrics(registry), clock=SystemClock())
    long_a, long_b = "x" * 60 + "a", "x" * 60 + "b"  # their rejection texts read the same (truncated)
    with capture_logs() as logs:
        for value, rv in [
            ("FORCE", "1"),
            ("FORCE", "2"),  # a status update: the same bad value, not reported again
            ("grace-ish", "3"),
            ("force", "4"),
            ("FORCE", "5"),  # bad again after a good value: reported again
            ("", "6"),
            (long_a, "7"),
            (long_b, "8"),
        ]:
            pipeline(_job_change(_record(value, rv)))
    reported = [e for e in logs if e.get("event") == "input rejected"]
    assert [e["reason"] for e in reported] == ["bad-fault-scheduling"] * 6
    assert ["'FORCE'" in e["detail"] for e in reported] == [True, False, True, False, False, False]
    labels = {"source": "Job", "reason": "bad-fault-scheduling"}
    assert registry.get_sample_value("fault_agent_input_rejected_total", labels) == 6
    assert queue.qsize() == 0  # a label is not a fault


def test_status_shows_an_unreadable_opt_in_label() -> None:
    view = job_view(JobKind.VOLCANO, _vcjob("FORCE"))
    assert view.fault_scheduling == "unreadable 'FORCE'"
    (problem,) = view.label_problems
    assert "force|grace|off" in problem
    console = Console(width=200, record=True)
    render_job(view, console)
    render_table([view], console)
    text = console.export_text()
    assert "unreadable: label fault-scheduling='FORCE' is not force|grace|off" in text
    assert text.count("unreadable 'FORCE'") == 2  # the job's header and the table's column
    assert job_view(JobKind.VOLCANO, _vcjob("grace")).fault_scheduling == "grace"
    assert job_view(JobKind.VOLCANO, _vcjob(None)).fault_scheduling == "off"
    assert job_view(JobKind.VOLCANO, _vcjob("")).fault_scheduling == "unreadable ''"
