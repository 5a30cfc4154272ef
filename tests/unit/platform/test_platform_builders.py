"""Builders: the built objects equal the example files, and bad inputs are refused with a specific message."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import V1ConfigMap

from agent.core.cluster import FaultScheduling
from agent.platform import builders as b

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "config" / "examples"
FIXTURES = ROOT / "tests" / "fixtures"

Factory = Callable[[], tuple[V1ConfigMap, dict[str, Any]]]


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


@pytest.mark.parametrize(
    ("path", "factory"),
    [
        pytest.param(EXAMPLES / "vcjob-mindx-dls-test.yaml", b.guide_volcano_job, id="example-vcjob"),
        pytest.param(EXAMPLES / "acjob-default-test-pytorch.yaml", b.guide_ascend_job, id="example-acjob"),
        pytest.param(EXAMPLES / "vcjob-grace.yaml", b.grace_volcano_job, id="example-grace"),
        pytest.param(FIXTURES / "seed-vcjob.yaml", b.guide_volcano_job, id="guide-seed-vcjob"),
        pytest.param(FIXTURES / "seed-acjob.yaml", b.guide_ascend_job, id="guide-seed-acjob"),
    ],
)
def test_built_objects_equal_the_files(path: Path, factory: Factory) -> None:
    rings_config, job = factory()
    docs = _docs(path)
    assert len(docs) == 2
    assert b.to_wire(rings_config) == docs[0]
    assert job == docs[1]


def test_builder_names_follow_the_job() -> None:
    cm, job = b.guide_volcano_job(name="other", namespace="ns1")
    assert cm.metadata.name == "rings-config-other"
    assert cm.metadata.namespace == "ns1"
    template = job["spec"]["tasks"][0]["template"]
    assert template["spec"]["volumes"][0]["configMap"]["name"] == "rings-config-other"
    term = template["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"]["matchExpressions"][0]["values"] == ["other"]


def _container(**kw: Any) -> b.TrainingContainer:
    base: dict[str, Any] = {"name": "ascend", "image": "img:1", "command": ("sh",)}
    return b.TrainingContainer(**(base | kw))


def _vcjob(**kw: Any) -> b.VolcanoJobSpec:
    base: dict[str, Any] = {
        "name": "job",
        "namespace": "ns",
        "tasks": (b.VolcanoTask(name="t", replicas=2, container=_container()),),
    }
    return b.VolcanoJobSpec(**(base | kw))


def _acjob(**kw: Any) -> b.AscendJobSpec:
    base: dict[str, Any] = {
        "name": "job",
        "namespace": "ns",
        "framework": "pytorch",
        "replica_specs": {"Master": b.AscendReplica(replicas=1, container=_container())},
    }
    return b.AscendJobSpec(**(base | kw))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(lambda: b.build_volcano_job(_vcjob(name="Bad_Name")), "job name 'Bad_Name'", id="bad-name"),
        pytest.param(lambda: b.build_volcano_job(_vcjob(namespace="")), "namespace ''", id="empty-namespace"),
        pytest.param(lambda: b.build_volcano_job(_vcjob(tasks=())), "at least one task", id="no-tasks"),
        pytest.param(
            lambda: b.build_volcano_job(
                _vcjob(tasks=(b.VolcanoTask("t", 1, _container()), b.VolcanoTask("t", 1, _container())))
            ),
            "task names must be unique",
            id="duplicate-task",
        ),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(tasks=(b.VolcanoTask("t", 0, _container()),))),
            "replicas must be ≥ 1, got 0",
            id="zero-replicas",
        ),
        pytest.param(lambda: b.build_volcano_job(_vcjob(min_available=3)), "min_available must be 1–2", id="gang"),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(fault=b.FaultTolerance(fault_retry_times=5), max_retry=3)),
            "max_retry 3 is smaller than fault_retry_times 5",
            id="max-retry-below-retry-times",
        ),
        pytest.param(
            lambda: b.build_volcano_job(
                _vcjob(fault=b.FaultTolerance(fault_retry_times=1), policies=(("PodFailed", "RestartJob"),))
            ),
            "restarts the job twice",
            id="double-restart",
        ),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(fault=b.FaultTolerance(fault_retry_times=101), max_retry=200)),
            "fault_retry_times must be 0–100, got 101",
            id="retry-times-range",
        ),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(fault=b.FaultTolerance(sub_healthy_strategy="panic"))),
            "sub_healthy_strategy must be one of",
            id="sub-healthy",
        ),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(fault=b.FaultTolerance(ring_controller=""))),
            "ring-controller.atlas) must not be empty",
            id="empty-ring-controller",
        ),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(tasks=(b.VolcanoTask("t", 1, _container(npus=0)),))),
            "npus must be ≥ 1, got 0",
            id="zero-npus",
        ),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(tasks=(b.VolcanoTask("t", 1, _container(image="")),))),
            "image must not be empty",
            id="no-image",
        ),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(tasks=(b.VolcanoTask("t", 1, _container(ports=(("p", 0),))),))),
            "port 'p' must be 1–65535, got 0",
            id="bad-port",
        ),
        pytest.param(
            lambda: b.build_volcano_job(_vcjob(termination_grace_period_s=-1)),
            "termination_grace_period_s must be ≥ 0",
            id="negative-grace-period",
        ),
        pytest.param(lambda: b.build_ascend_job(_acjob(framework="jax")), "framework must be one of", id="framework"),
        pytest.param(lambda: b.build_ascend_job(_acjob(replica_specs={})), "at least one replica", id="no-replicas"),
        pytest.param(
            lambda: b.build_ascend_job(_acjob(replica_specs={"Boss": b.AscendReplica(1, _container())})),
            "replica type must be one of Master, Scheduler, Chief, Worker, got 'Boss'",
            id="replica-type",
        ),
        pytest.param(
            lambda: b.build_ascend_job(_acjob(replica_specs={"Master": b.AscendReplica(1, _container(name="x"))})),
            "must be named 'ascend', got 'x'",
            id="container-name",
        ),
        pytest.param(
            lambda: b.build_ascend_job(_acjob(fault=b.FaultTolerance(fault_retry_times=4), backoff_limit=2)),
            "backoff_limit 2 is smaller than fault_retry_times 4",
            id="backoff-limit",
        ),
        pytest.param(lambda: b.build_ascend_job(_acjob(min_available=0)), "min_available must be 1–1", id="ac-gang"),
        pytest.param(lambda: b.build_rings_config("job", "ns", ""), "must not be empty", id="rings-no-controller"),
        pytest.param(lambda: b.build_rings_config("a" * 64, "ns", "x"), "at most 63", id="rings-long-name"),
    ],
)
def test_bad_input_is_refused(build: Callable[[], object], message: str) -> None:
    with pytest.raises(b.BuildError) as info:
        build()
    assert message in str(info.value)


def test_labels_are_strings_and_optional_ones_appear_when_set() -> None:
    fault = b.FaultTolerance(
        fault_scheduling=FaultScheduling.GRACE,
        fault_retry_times=0,
        pod_rescheduling=True,
        sub_healthy_strategy="graceExit",
        tor_affinity="large-model-schema",
    )
    assert fault.labels() == {
        "ring-controller.atlas": "ascend-910b",
        "fault-scheduling": "grace",
        "fault-retry-times": "0",
        "pod-rescheduling": "on",
        "subHealthyStrategy": "graceExit",
        "tor-affinity": "large-model-schema",
    }
    # grace-over-time is scheduler-wide in MindCluster (a Volcano plugin argument) and in the agent
    # (policy.grace_over_time_s): the builder offers no per-job label for it.
    assert "grace_over_time_s" not in {f.name for f in dataclasses.fields(b.FaultTolerance)}
    assert b.GRACE_OVER_TIME_LABEL not in b.grace_volcano_job()[1]["metadata"]["labels"]
    off = dataclasses.replace(b.FaultTolerance(), fault_scheduling=None)
    assert off.labels() == {"ring-controller.atlas": "ascend-910b"}


def test_ascend_job_backoff_limit_and_defaults() -> None:
    job = b.build_ascend_job(_acjob(backoff_limit=7))
    assert job["spec"]["runPolicy"] == {"backoffLimit": 7, "schedulingPolicy": {"minAvailable": 1, "queue": "default"}}
    master = job["spec"]["replicaSpecs"]["Master"]
    assert master["restartPolicy"] == "Never"
    assert "restartPolicy" not in master["template"]["spec"]


def test_to_wire_rejects_unknown_objects() -> None:
    with pytest.raises(TypeError, match="cannot serialise object"):
        b.to_wire(object())


def test_reset_config_is_the_initial_form_and_only_jobs_that_need_it_get_one() -> None:
    from agent.core.resetconfig import initial_reset_config, parse_reset_config

    cm = b.build_reset_config("job", "ns")
    assert b.to_wire(cm) == initial_reset_config("job", "ns")
    assert parse_reset_config(cm.data).check_code_ok is True
    _, guide = b.guide_volcano_job()
    assert b.needs_reset_config(guide) is None
    guide["metadata"]["labels"]["subHealthyStrategy"] = "graceExit"
    assert b.needs_reset_config(guide) == "subHealthyStrategy=graceExit"
    with pytest.raises(b.BuildError):
        b.build_reset_config("Bad_Name", "ns")
