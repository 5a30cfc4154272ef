"""The testbed's Ascend Operator stand-in keeps ``rings-config-<job>``'s rank table as MindCluster's operator does
(testbed/ascend_operator.py ``RankTable``; docs/mindcluster-parity.md "The rank table"): ``completed`` with the
job's pods once all are allocated, ``initializing`` when one goes, ``completed`` again with the new set, for an
AscendJob and for a Volcano Job labelled ``ring-controller.atlas``; the agent's own reset (the same merge patch,
sent after the restart) does not fight it."""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.polling import until
from support.standin import PIN, standin_namespace

from agent.actions.writer import RINGS_INITIALIZING, RINGS_KEY
from testbed.cluster import Testbed
from testbed.rest import Rest

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CONFIG = "ascend.kubectl.kubernetes.io/ascend-910-configuration"


@pytest.fixture
def namespace(testbed: Testbed) -> Iterator[tuple[Rest, str]]:
    """A namespace the stand-in manages, with three 8-chip nodes its jobs' pods are pinned to."""
    rest = testbed.rest()
    with standin_namespace(rest, "t-rank", 3) as name:
        yield rest, name


class Tables:
    """Every ``hccl.json`` value ``rings-config-<job>`` takes, from a watch (none missed between polls)."""

    def __init__(self, rest: Rest, ns: str, name: str) -> None:
        self.rest, self.ns, self.name = rest, ns, name
        self.values: list[dict[str, Any]] = []
        self.versions: list[str] = []
        self.stop = threading.Event()
        listing = rest.get(f"/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3D{name}")
        self.rv = listing["metadata"]["resourceVersion"]
        self._add(listing["items"][0])
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _add(self, cm: dict[str, Any]) -> None:
        data = cm.get("data") or {}
        value = json.loads(data.get(RINGS_KEY, "{}"))
        if not self.values or self.values[-1] != value:
            self.values.append(value)
            self.versions.append(data.get("version", ""))

    def _watch(self) -> None:
        while not self.stop.is_set():
            q = urllib.parse.urlencode(
                {"fieldSelector": f"metadata.name={self.name}", "watch": "1", "resourceVersion": self.rv}
            )
            req = urllib.request.Request(
                f"{self.rest.base}/api/v1/namespaces/{self.ns}/configmaps?{q}&timeoutSeconds=5"
            )
            req.add_header("Authorization", f"Bearer {self.rest.token}")
            with urllib.request.urlopen(req, timeout=30, context=self.rest.ctx) as resp:
                for line in resp:
                    event = json.loads(line)
                    self.rv = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._add(event["object"])

    def statuses(self) -> list[str]:
        return [str(v.get("status")) for v in self.values]

    def last(self) -> dict[str, Any]:
        return self.values[-1]


def _live_pods(rest: Rest, ns: str, selector: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"labelSelector": selector})
    items: list[dict[str, Any]] = rest.get(f"/api/v1/namespaces/{ns}/pods?{q}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _matches(table: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """`table` is a completed table of exactly `pods`: one server per pod, at its IP, with its chips."""
    if table.get("status") != "completed" or table.get("version") != "1.0":
        return False
    want = set()
    for pod in pods:
        config = json.loads(pod["metadata"]["annotations"][CONFIG])
        want.add((pod["status"].get("podIP"), tuple(d["device_id"] for d in config["devices"])))
    got = {(s["container_ip"], tuple(d["device_id"] for d in s["device"])) for s in table.get("server_list", [])}
    ranks = sorted(int(d["rank_id"]) for s in table.get("server_list", []) for d in s["device"])
    return got == want and table.get("server_count") == str(len(pods)) and ranks == list(range(8 * len(pods)))


def _running(rest: Rest, ns: str, selector: str, count: int, but: set[str]) -> list[dict[str, Any]] | None:
    pods = _live_pods(rest, ns, selector)
    ok = len(pods) == count and all(
        p.get("status", {}).get("phase") == "Running"
        and p["status"].get("podIP")
        and CONFIG in (p["metadata"].get("annotations") or {})
        and p["metadata"]["uid"] not in but
        for p in pods
    )
    return pods if ok else None


def test_an_ascendjob_restart_leaves_the_table_initializing_then_completed_with_the_new_pods(
    namespace: tuple[Rest, str],
) -> None:
    rest, ns = namespace
    cm, job = (copy.deepcopy(d) for d in yaml.safe_load_all((FIXTURES / "seed-acjob.yaml").read_text()) if d)
    for doc in (cm, job):
        doc["metadata"]["namespace"] = ns
    for spec in job["spec"]["replicaSpecs"].values():
        spec["template"]["spec"]["nodeSelector"]["accelerator-type"] = "module-910b-8"
        spec["template"]["spec"]["nodeSelector"][PIN] = ns
    rest.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm)
    tables = Tables(rest, ns, cm["metadata"]["name"])
    try:
        rest.request("POST", f"/apis/mindxdl.gitee.com/v1/namespaces/{ns}/ascendjobs", job)
        selector = "training.kubeflow.org/job-name=default-test-pytorch"
        first = until(lambda: _running(rest, ns, selector, 2, set()), "both pods Running")
        until(lambda: _matches(tables.last(), first), "a completed table of the first pods")
        assert tables.statuses() == ["initializing", "completed"]

        worker = next(p for p in first if p["metadata"]["name"].endswith("worker-0"))
        rest.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{worker['metadata']['name']}", {"gracePeriodSeconds": 0})
        # the agent's reset, sent once its restart was accepted (agent/actions/writer.py reset_rings_config)
        rest.merge_patch(
            f"/api/v1/namespaces/{ns}/configmaps/{cm['metadata']['name']}", {"data": {RINGS_KEY: RINGS_INITIALIZING}}
        )
        second = until(
            lambda: _running(rest, ns, selector, 2, {worker["metadata"]["uid"]}), "worker-0 replaced and Running"
        )
        until(lambda: _matches(tables.last(), second), "a completed table of the new pods")
        time.sleep(2)  # nothing writes after it
        assert _matches(tables.last(), second)
        # the operator's initializing (with the last servers, as the real one writes it) and the agent's reset may
        # land in either order; both say initializing, and the new table comes after both
        middle = tables.statuses()[2:-1]
        assert set(middle) == {"initializing"}, tables.statuses()
        assert tables.statuses()[:2] == ["initializing", "completed"]
        assert tables.statuses()[-1] == "completed"
        assert int(tables.versions[-1]) > 0  # stamped with the previous save's Unix time
    finally:
        tables.stop.set()


def test_a_volcano_job_labelled_ring_controller_gets_its_table_rebuilt_after_a_pod_goes(
    namespace: tuple[Rest, str],
) -> None:
    rest, ns = namespace
    cm, job = (copy.deepcopy(d) for d in yaml.safe_load_all((FIXTURES / "seed-vcjob.yaml").read_text()) if d)
    for doc in (cm, job):
        doc["metadata"]["namespace"] = ns
    job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"][PIN] = ns
    rest.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm)
    tables = Tables(rest, ns, cm["metadata"]["name"])
    try:
        rest.request("POST", f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs", job)
        selector = "volcano.sh/job-name=mindx-dls-test"
        first = until(lambda: _running(rest, ns, selector, 2, set()), "both pods Running")
        until(lambda: _matches(tables.last(), first), "a completed table of the first pods")
        # a Volcano Job's pods carry no rank index: the operator gives them one
        assert sorted(p["metadata"]["annotations"].get("hccl/rankIndex") for p in _live_pods(rest, ns, selector)) == [
            "0",
            "1",
        ]
        gone = first[0]
        rest.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{gone['metadata']['name']}", {"gracePeriodSeconds": 0})
        second = until(lambda: _running(rest, ns, selector, 2, {gone["metadata"]["uid"]}), "the pod replaced")
        until(lambda: _matches(tables.last(), second), "a completed table of the new pods")
        assert tables.statuses() == ["initializing", "completed", "initializing", "completed"]
    finally:
        tables.stop.set()
