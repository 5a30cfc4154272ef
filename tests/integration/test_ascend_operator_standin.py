"""The testbed's Ascend Operator stand-in (testbed/ascend_operator.py) runs the guide's AscendJob on the testbed:
PodGroup, gang-scheduled pods through Volcano, a deleted pod recreated at the next version, a failed pod failing
the job. It manages only namespaces labelled ``testbed.fault-agent.io/ascend-operator=stand-in``."""

from __future__ import annotations

import copy
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.polling import until
from support.standin import PIN, exists, standin_namespace

from testbed.cluster import Testbed
from testbed.inject import Injector
from testbed.rest import Rest

pytestmark = pytest.mark.integration
SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed-acjob.yaml"
JOBS = "/apis/mindxdl.gitee.com/v1"


@pytest.fixture
def labelled_namespace(testbed: Testbed) -> Iterator[tuple[Rest, str]]:
    rest = testbed.rest()
    with standin_namespace(rest, "t-acop", 2) as name:
        yield rest, name


def _pods(rest: Rest, ns: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"labelSelector": "training.kubeflow.org/job-name=default-test-pytorch"})
    items: list[dict[str, Any]] = rest.get(f"/api/v1/namespaces/{ns}/pods?{q}")["items"]
    return sorted((p for p in items if not p["metadata"].get("deletionTimestamp")), key=lambda p: p["metadata"]["name"])


def _running(rest: Rest, ns: str, versions: dict[str, str]) -> list[dict[str, Any]] | None:
    pods = _pods(rest, ns)
    got = {p["metadata"]["name"]: p["metadata"]["labels"].get("version") for p in pods}
    if got == versions and all(p.get("status", {}).get("phase") == "Running" for p in pods):
        return pods
    return None


def _job(rest: Rest, ns: str) -> dict[str, Any]:
    return rest.get(f"{JOBS}/namespaces/{ns}/ascendjobs/default-test-pytorch")


def test_the_guides_ascendjob_runs_and_restarts_under_the_stand_in(labelled_namespace: tuple[Rest, str]) -> None:
    rest, ns = labelled_namespace
    cm, job = (copy.deepcopy(d) for d in yaml.safe_load_all(SEED.read_text()) if d)
    for doc in (cm, job):
        doc["metadata"]["namespace"] = ns
    for spec in job["spec"]["replicaSpecs"].values():  # the testbed's nodes are the guide's 8-chip A2 nodes
        spec["template"]["spec"]["nodeSelector"]["accelerator-type"] = "module-910b-8"
        spec["template"]["spec"]["nodeSelector"][PIN] = ns
    rest.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm)
    created = rest.request("POST", f"{JOBS}/namespaces/{ns}/ascendjobs", job)
    uid = created["metadata"]["uid"]
    names = {"default-test-pytorch-master-0": "0", "default-test-pytorch-worker-0": "0"}
    pods = until(lambda: _running(rest, ns, names), "both pods Running at version 0")
    assert {p["spec"]["nodeName"] for p in pods} == {f"{ns}-n0", f"{ns}-n1"}  # Volcano placed them
    pg = rest.get(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/default-test-pytorch-{uid}")
    assert pg["metadata"]["labels"] == created["metadata"]["labels"]
    until(lambda: [c["type"] for c in _job(rest, ns)["status"]["conditions"]] == ["Created", "Running"], "Running")

    rest.request("DELETE", f"/api/v1/namespaces/{ns}/pods/default-test-pytorch-master-0", {"gracePeriodSeconds": 0})
    names["default-test-pytorch-master-0"] = "1"
    until(lambda: _running(rest, ns, names), "master-0 again, at version 1; worker-0 untouched")
    assert "version" not in (_job(rest, ns)["metadata"].get("labels") or {})

    Injector(rest).pod_failed(ns, "default-test-pytorch-worker-0")  # fault-retry-times 3, no remain-retry entry

    def failed() -> bool:
        conds = _job(rest, ns)["status"]["conditions"]
        return conds[-1]["type"] == "Failed" and conds[-1]["reason"] == "JobFailed"

    until(failed, "the job Failed")
    pg_path = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/{pg['metadata']['name']}"
    until(lambda: not exists(rest, pg_path), "the PodGroup deleted")
    assert len(_pods(rest, ns)) == 2  # the pods are left
