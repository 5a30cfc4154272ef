"""Recording a real agent run's watches (``fault-agent run --record DIR``), driven by a scenario file applied to the
testbed's apiserver (testbed/scenario.py), and exporting the recording back to a scenario."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.kube.record import read_recording
from agent.replay.scenario import export_scenario, load_scenario
from testbed.agent_runner import AgentProcess
from testbed.cluster import Testbed
from testbed.scenario import apply_scenario

pytestmark = pytest.mark.integration

SCENARIO = """\
- at: 0s
  apply:
    apiVersion: v1
    kind: Pod
    metadata: {{name: rec-pod, namespace: {ns}, labels: {{volcano.sh/job-name: train}}}}
    spec:
      schedulerName: no-such-scheduler  # never bound, so a delete removes it at once (no kubelet to wait for)
      containers: [{{name: c, image: busybox}}]
- at: 0.3s
  patch: {{resource: pods, namespace: {ns}, name: rec-pod, patch: {{metadata: {{labels: {{step: two}}}}}}}}
- at: 0.6s
  delete: {{resource: pods, namespace: {ns}, name: rec-pod}}
"""


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def _pod_lines(rec: Path, ns: str) -> list[dict[str, Any]]:
    return [
        x
        for x in read_recording([rec])
        if x["resource"] == "pods" and x["object"].get("metadata", {}).get("namespace") == ns
    ]


async def test_agent_records_its_watches_as_a_scenario_drives_the_cluster(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    rec = tmp_path / "rec"
    agent = AgentProcess(
        testbed,
        tmp_path,
        settings={
            "KUBE__NAMESPACES": json.dumps([namespace]),
            "LEADER__NAMESPACE": namespace,
            "CLUSTER_NAME": f"rec-{namespace}",
            "KAFKA__ENABLED": "false",
            "RECORD__FLUSH_INTERVAL_S": "0.2",
            "POLICY__BREAKER_MIN_FAULTY_NODES": "1000",
        },
        name=f"rec-{namespace}",
        args=["--record", str(rec)],
    )
    await asyncio.to_thread(agent.start)
    try:
        steps = load_scenario(SCENARIO.format(ns=namespace), filename="record.yaml")
        await asyncio.to_thread(apply_scenario, testbed.rest(), steps)
        await asyncio.to_thread(
            wait_for, lambda: any(x["type"] == "DELETED" for x in _pod_lines(rec, namespace)), "the DELETED line"
        )
    finally:
        assert agent.stop() == 0, agent.tail()
    lines = list(read_recording([rec]))
    assert lines, "nothing recorded"
    # every watcher finished its first list, and said so with a LISTED line under its own source
    listed = {x["source"] for x in lines if x["type"] == "LISTED"}
    assert {f"pods@{namespace}", "nodes@*", f"vcjobs@{namespace}", f"acjobs@{namespace}"} <= listed
    # with DRA's two: kube.dra auto watches them on an apiserver serving resource.k8s.io/v1
    watched = {"pods", "nodes", "configmaps", "vcjobs", "acjobs", "podgroups", "leases"}
    assert {x["resource"] for x in lines} <= watched | {"resourceslices", "resourceclaims"}
    ts = [x["t"] for x in lines]
    assert ts == sorted(ts)
    assert abs(ts[-1] / 1000 - time.time()) < 600  # Unix ms, not seconds or a monotonic count
    pod = _pod_lines(rec, namespace)
    assert [x["type"] for x in pod][:1] == ["ADDED"]
    assert "DELETED" in [x["type"] for x in pod]
    modified = [x for x in pod if x["type"] == "MODIFIED"]
    assert any(x["object"]["metadata"].get("labels", {}).get("step") == "two" for x in modified)
    # the object as the apiserver sent it, not the agent's slim record: fields the agent never keeps are there
    assert pod[0]["object"]["spec"]["containers"][0]["image"] == "busybox"
    assert pod[0]["object"]["metadata"]["managedFields"]

    # the recording window back to a scenario: the pod's life as apply / apply / delete steps
    mine = [
        s
        for s in export_scenario(lines)
        if (s.get("apply", {}).get("metadata", {}).get("namespace") or s.get("delete", {}).get("namespace"))
        == namespace
    ]
    assert next(iter(set(mine[0]) - {"at"})) == "apply"
    assert [next(iter(set(s) - {"at"})) for s in mine][-1] == "delete"


def test_an_unusable_record_folder_stops_the_agent_at_start_with_a_clear_error(
    testbed: Testbed, tmp_path: Path
) -> None:
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "run", "--record", str(a_file)],
        env={"FAULT_AGENT_KUBE__KUBECONFIG": str(testbed.kubeconfig), "FAULT_AGENT_LOG__FORMAT": "console",
             "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"recording folder {a_file}: exists and is not a folder" in proc.stdout + proc.stderr
