"""Write the checked-in replay scenarios. The device-plugin ConfigMaps come from the testbed's Go encoder
(testbed/inject.py ``device_info_cm``, testbed/mcencode): their bytes and CheckCode are Go's, never the parser's.
Times: a scenario's ``at: 0`` is ``fault-agent replay --start``'s default, 2026-01-01T00:00:00Z.

    .venv/bin/python tests/scenarios/make_scenarios.py            # rewrites tests/scenarios/*.yaml
    .venv/bin/python tests/scenarios/make_scenarios.py --expected # and their golden replay outputs

The golden output of ``<name>.yaml`` is ``<name>.expected.jsonl``: ``fault-agent replay <name>.yaml`` with
:data:`REPLAY_ARGS` (tests/tools/test_replay_golden.py compares). Regenerate it after a change that is meant to
change the agent's decisions, and review the diff.

The scenarios imitate e2e tests of tests/e2e (named in each file's header): a Volcano Job of two pods on two
nodes, then a chip fault on one node.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from testbed.inject import ChipFault, PublicFault, SwitchFault, device_info_cm, node_info_cm, public_fault_cm

HERE = Path(__file__).parent
NPU = "huawei.com/Ascend910"
CHIPS = ",".join(f"Ascend910-{i}" for i in range(8))
JOB_UID = "6b1a3f2e-0c1d-4e5f-9a8b-7c6d5e4f3a2b"


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "host-arch": "huawei-x86"}},
        "status": {
            "allocatable": {NPU: "8"}, "capacity": {NPU: "8"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                            "lastTransitionTime": "2025-12-31T00:00:00Z", "reason": "KubeletReady"}],
        },
    }  # fmt: skip


def vcjob(name: str, *, scheduling: str = "force", retry: str = "3", phase: str = "Running", version: int = 0,
          uid: str = JOB_UID, max_retry: int = 3, retry_count: int = 0, labels: dict[str, str] | None = None,
          annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": "vcjob", "uid": uid,
                     "labels": {"ring-controller.atlas": "ascend-910b", "fault-scheduling": scheduling,
                                "fault-retry-times": retry}},
        "spec": {"minAvailable": 2, "schedulerName": "volcano", "maxRetry": max_retry, "queue": "default",
                 "tasks": [{"name": "default-test", "replicas": 2}]},
        "status": {"state": {"phase": phase}, "version": version, "retryCount": retry_count, "running": 2},
    }  # fmt: skip
    job["metadata"]["labels"].update(labels or {})
    if annotations:
        job["metadata"]["annotations"] = dict(annotations)
    return job


def pod(job: str, i: int, node_name: str, *, uid: str, version: int = 0, job_uid: str = JOB_UID) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{job}-default-test-{i}", "namespace": "vcjob", "uid": uid,
            "labels": {"volcano.sh/job-name": job, "volcano.sh/job-namespace": "vcjob",
                       "volcano.sh/task-spec": "default-test", "ring-controller.atlas": "ascend-910b"},
            "annotations": {"volcano.sh/job-version": str(version), NPU: CHIPS, "huawei.com/AscendReal": CHIPS,
                            "hccl/rankIndex": str(i)},
            "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job,
                                 "uid": job_uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"nodeName": node_name, "schedulerName": "volcano", "restartPolicy": "Never",
                 "containers": [{"name": "mindspore", "image": "ms-arm:b120",
                                 "resources": {"limits": {NPU: "8"}, "requests": {NPU: "8"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


START = datetime(2026, 1, 1, tzinfo=UTC)


def deviceinfo(node_name: str, at_s: float, faults: tuple[ChipFault, ...] = ()) -> dict[str, Any]:
    """The device plugin's ConfigMap for `node_name` written `at_s` after the start, with `faults`."""
    return device_info_cm(node_name, faults, now=START + timedelta(seconds=at_s))


SEPARATE = (ChipFault(5, ("80E3A201",), "SeparateNPU"),)
RESTART_BUSINESS = (ChipFault(3, ("80E01801",), "RestartBusiness"),)


def setup(job: str = "mindx-dls-test", **job_kw: Any) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for n in ("worker-01", "worker-02"):
        steps.append({"at": "0s", "apply": node(n)})
        steps.append({"at": "0s", "apply": deviceinfo(n, 0)})
    steps.append({"at": "0s", "apply": vcjob(job, **job_kw)})
    for i, n in enumerate(("worker-01", "worker-02")):
        steps.append({"at": "0s", "apply": pod(job, i, n, uid=f"pod-uid-{i}")})
    return steps


def chip_fault_restart() -> list[dict[str, Any]]:
    """tests/e2e/test_volcano_recovery.py: a SeparateNPU chip fault on worker-02 restarts the force-mode job; the
    recording-like tail shows Volcano's new pods (version 1) and the chip healthy again."""
    steps = setup()
    steps.append({"at": "5s", "apply": deviceinfo("worker-02", 5, SEPARATE)})
    steps.append(
        {"at": "6s", "delete": {"resource": "pods", "namespace": "vcjob", "name": "mindx-dls-test-default-test-0"}}
    )
    steps.append(
        {"at": "6s", "delete": {"resource": "pods", "namespace": "vcjob", "name": "mindx-dls-test-default-test-1"}}
    )
    steps.append({"at": "8s", "apply": deviceinfo("worker-02", 8)})
    steps.append({"at": "9s", "apply": vcjob("mindx-dls-test", version=1)})
    for i, n in enumerate(("worker-01", "worker-02")):
        steps.append({"at": "10s", "apply": pod("mindx-dls-test", i, n, uid=f"pod-uid-{i}-v1", version=1)})
    return steps


def restart_business_fault() -> list[dict[str, Any]]:
    """tests/e2e/test_budgets_and_outcomes.py: a RestartBusiness chip fault restarts a job whose budget is 1; the
    same chip's fault again 85 s after the job ran again (a flapping chip by the shipped frequency rules)."""
    steps = setup(retry="1")
    steps.append({"at": "5s", "apply": deviceinfo("worker-02", 5, RESTART_BUSINESS)})
    steps.append({"at": "8s", "apply": deviceinfo("worker-02", 8)})
    steps.append({"at": "9s", "apply": vcjob("mindx-dls-test", version=1, retry="1")})
    for i, n in enumerate(("worker-01", "worker-02")):
        steps.append({"at": "10s", "apply": pod("mindx-dls-test", i, n, uid=f"pod-uid-{i}-v1", version=1)})
    steps.append({"at": "90s", "apply": deviceinfo("worker-02", 90, RESTART_BUSINESS)})
    return steps


def not_opted_in() -> list[dict[str, Any]]:
    """tests/e2e/test_job_inputs.py: a job without the fault-scheduling label: the fault is only published."""
    steps = setup(scheduling="off")
    steps.append({"at": "5s", "apply": deviceinfo("worker-02", 5, SEPARATE)})
    return steps


def grace_mode() -> list[dict[str, Any]]:
    """tests/e2e/test_grace_mode.py: a grace-mode job's pods are deleted with their grace period, then force-deleted
    once policy.grace_over_time_s (900 s) has passed with them still there (nothing completes the deletion)."""
    steps = setup(scheduling="grace")
    steps.append({"at": "5s", "apply": deviceinfo("worker-02", 5, SEPARATE)})
    steps.append({"at": "16m", "apply": deviceinfo("worker-01", 960)})  # the device plugin's next write
    return steps


def node_not_ready() -> list[dict[str, Any]]:
    """tests/e2e/test_volcano_recovery.py (node NotReady): worker-02 goes NotReady; once the NotReady grace
    (detect.node_not_ready_grace_s, 5 s) is over the job restarts; the node comes back later."""
    steps = setup()
    down = node("worker-02")
    down["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                     "lastHeartbeatTime": "2026-01-01T00:00:02Z",
                                     "lastTransitionTime": "2026-01-01T00:00:05Z"}]  # fmt: skip
    steps.append({"at": "5s", "apply": down})
    up = node("worker-02")
    up["status"]["conditions"][0].update(lastHeartbeatTime="2026-01-01T00:01:00Z",
                                         lastTransitionTime="2026-01-01T00:01:00Z")  # fmt: skip
    steps.append({"at": "60s", "apply": up})
    return steps


def restarted(steps: list[dict[str, Any]], at_s: int, version: int, *,
              nodes: tuple[str, str] = ("worker-01", "worker-02"), **job_kw: Any) -> None:  # fmt: skip
    """Volcano's restart as the cluster shows it: the job's pods deleted at `at_s`, the job at `version` (and
    `job_kw`, :func:`vcjob`'s), its new pods Running on `nodes` a second later."""
    for i in range(2):
        steps.append(
            {"at": f"{at_s}s", "delete": {"resource": "pods", "namespace": "vcjob",
                                           "name": f"mindx-dls-test-default-test-{i}"}}
        )  # fmt: skip
    steps.append({"at": f"{at_s + 1}s", "apply": vcjob("mindx-dls-test", version=version, **job_kw)})
    for i, n in enumerate(nodes):
        steps.append(
            {"at": f"{at_s + 2}s", "apply": pod("mindx-dls-test", i, n, uid=f"pod-uid-{i}-v{version}", version=version)}
        )


def noded_separate_fault() -> list[dict[str, Any]]:
    """tests/e2e/test_volcano_recovery.py (NodeD): NodeD reports a SeparateFault CPU fault on worker-02: the job
    restarts once and the node is quarantined; NodeD deletes its ConfigMap once the node is healthy."""
    steps = setup()
    steps.append({"at": "5s", "apply": node_info_cm("worker-02", ("00000011",), "SeparateFault",
                                                    now=START + timedelta(seconds=5))})  # fmt: skip
    restarted(steps, 6, 1)
    steps.append(
        {"at": "20s", "delete": {"resource": "configmaps", "namespace": "mindx-dl",
                                  "name": "mindx-dl-nodeinfo-worker-02"}}
    )  # fmt: skip
    return steps


SWITCH_CODE = "[0x00f103b0,155907,na,na]"


def a3_switch_fault() -> list[dict[str, Any]]:
    """tests/e2e/test_mindcluster_sources.py (A3 switch, via the device plugin): a Separate switch event on
    worker-02 is a node fault: the job restarts once, the node is quarantined; the switch healthy clears it."""
    steps = setup()
    hit = device_info_cm("worker-02", (), now=START + timedelta(seconds=5),
                         switch=(SwitchFault(SWITCH_CODE, 0, 3, "Separate"),))  # fmt: skip
    steps.append({"at": "5s", "apply": hit})
    restarted(steps, 6, 1)
    steps.append({"at": "20s", "apply": device_info_cm("worker-02", (), now=START + timedelta(seconds=20), switch=())})
    return steps


def preseparate_no_action() -> list[dict[str, Any]]:
    """tests/e2e/test_volcano_recovery.py (PreSeparateNPU): a PreSeparateNPU chip fault under the job is reported
    and the running job is left alone."""
    steps = setup()
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, (ChipFault(0, ("80E3A201",), "PreSeparateNPU"),))})
    return steps


def failed_pod(job: str, i: int, node_name: str, *, uid: str, version: int, at_s: int) -> dict[str, Any]:
    """The pod whose training process exited 137 (the container terminated, the pod Failed), as the kubelet
    reports it (testbed/inject.py ``pod_failed``)."""
    obj = pod(job, i, node_name, uid=uid, version=version)
    now = (START + timedelta(seconds=at_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    term = {"exitCode": 137, "reason": "Error", "startedAt": now, "finishedAt": now}
    obj["status"] = {
        "phase": "Failed",
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "PodFailed"},
                       {"type": "ContainersReady", "status": "False", "lastTransitionTime": now,
                        "reason": "PodFailed"}],
        "containerStatuses": [{"name": "mindspore", "image": "ms-arm:b120", "imageID": "", "ready": False,
                               "restartCount": 0, "state": {"terminated": term}}],
    }  # fmt: skip
    return obj


def business_failures_budget() -> list[dict[str, Any]]:
    """tests/e2e/test_volcano_recovery.py (business failures): fault-retry-times=3: three training failures (exit
    137) give three restarts, the fourth is recovery failed (budget exhausted). maxRetry 10, as the test raises
    it, so that Volcano's own limit is not what ends the job; Volcano counts each restart in retryCount."""
    steps = setup(max_retry=10)
    for attempt in range(4):
        at = 5 + 20 * attempt
        uid = "pod-uid-0" if attempt == 0 else f"pod-uid-0-v{attempt}"
        steps.append({"at": f"{at}s", "apply": failed_pod("mindx-dls-test", 0, "worker-01", uid=uid,
                                                          version=attempt, at_s=at)})  # fmt: skip
        if attempt < 3:
            restarted(steps, at + 1, attempt + 1, max_retry=10, retry_count=attempt + 1)
    return steps


def spare_nodes(steps: list[dict[str, Any]], *names: str) -> None:
    """More idle nodes (and their device plugin's ConfigMaps) in the initial list."""
    for n in reversed(names):
        steps.insert(0, {"at": "0s", "apply": deviceinfo(n, 0)})
        steps.insert(0, {"at": "0s", "apply": node(n)})


def budget_follows_retry_count() -> list[dict[str, Any]]:
    """tests/e2e/test_budgets_and_outcomes.py (the guide's budget): maxRetry 3 and fault-retry-times 3: a chip
    fault (the job moves to worker-03 and worker-04) and a training failure are restarted (budget left 1, then 0:
    Volcano's retryCount 2 of maxRetry 3); the next training failure is recovery failed (budget exhausted), no
    third restart."""
    steps = setup()
    spare_nodes(steps, "worker-03", "worker-04")
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, (ChipFault(0, ("80E3A201",), "SeparateNPU"),))})
    restarted(steps, 6, 1, nodes=("worker-03", "worker-04"), retry_count=1)
    steps.append({"at": "25s", "apply": failed_pod("mindx-dls-test", 0, "worker-03", uid="pod-uid-0-v1", version=1,
                                                   at_s=25)})  # fmt: skip
    restarted(steps, 26, 2, nodes=("worker-03", "worker-04"), retry_count=2)
    steps.append({"at": "45s", "apply": failed_pod("mindx-dls-test", 0, "worker-03", uid="pod-uid-0-v2", version=2,
                                                   at_s=45)})  # fmt: skip
    return steps


def restarting_with_nowhere_to_go() -> list[dict[str, Any]]:
    """The guide's job restarted for a chip fault on worker-01 at 5 s, its two nodes taken for other work: the
    job Restarting (retryCount 1), its new pods Pending with nowhere to go."""
    steps = setup()
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, (ChipFault(0, ("80E3A201",), "SeparateNPU"),))})
    for i in range(2):
        steps.append(
            {"at": "6s", "delete": {"resource": "pods", "namespace": "vcjob",
                                     "name": f"mindx-dls-test-default-test-{i}"}}
        )  # fmt: skip
    steps.append({"at": "7s", "apply": vcjob("mindx-dls-test", phase="Restarting", version=1, retry_count=1)})
    for i in range(2):
        steps.append({"at": "8s", "apply": pending_pod("mindx-dls-test", i, uid=f"pod-uid-{i}-v1", version=1)})
    return steps


def volcano_fails_the_job() -> list[dict[str, Any]]:
    """tests/e2e/test_budgets_and_outcomes.py (Volcano fails the job): while the incident waits for the new pods,
    an operator lowers spec.maxRetry to 1 and Volcano marks the job Failed: the recovery fails at once
    (job-failed), nothing succeeds."""
    steps = restarting_with_nowhere_to_go()
    steps.append({"at": "15s", "apply": vcjob("mindx-dls-test", phase="Restarting", version=1, retry_count=1,
                                              max_retry=1)})  # fmt: skip
    steps.append({"at": "16s", "apply": vcjob("mindx-dls-test", phase="Failed", version=1, retry_count=1,
                                              max_retry=1)})  # fmt: skip
    return steps


def job_deleted_mid_recovery() -> list[dict[str, Any]]:
    """tests/e2e/test_budgets_and_outcomes.py (job deleted): the job is deleted while its incident waits for the
    new pods: one recovery failed (job-gone)."""
    steps = restarting_with_nowhere_to_go()
    steps.append({"at": "15s", "delete": {"resource": "vcjobs", "namespace": "vcjob", "name": "mindx-dls-test"}})
    for i in range(2):
        steps.append(
            {"at": "16s", "delete": {"resource": "pods", "namespace": "vcjob",
                                      "name": f"mindx-dls-test-default-test-{i}"}}
        )  # fmt: skip
    return steps


def observe_mode() -> list[dict[str, Any]]:
    """tests/e2e/test_observe_mode.py: under policy.mode observe (observe-mode.config.yaml) a chip fault is only
    published; another rescheduler evicts the faulty pod, Volcano restarts the job: the agent reports the observed
    recovery and writes nothing."""
    steps = setup()
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, (ChipFault(0, ("80E3A201",), "SeparateNPU"),))})
    restarted(steps, 10, 1)  # the eviction deletes pod 0, Volcano's RestartJob the rest
    return steps


def process_recover(**job_kw: Any) -> list[dict[str, Any]]:
    """The job with ``process-recover-enable=on`` (and `job_kw`), a spare worker-03, a SeparateNPU fault on chip
    2 under pod 1 (worker-02, rank 1: not the master, whose fault would
    escalate to the whole job) at 5 s."""
    steps = setup(labels={"process-recover-enable": "on"}, **job_kw)
    steps.insert(0, {"at": "0s", "apply": deviceinfo("worker-03", 0)})
    steps.insert(0, {"at": "0s", "apply": node("worker-03")})
    steps.append({"at": "5s", "apply": deviceinfo("worker-02", 5, (ChipFault(2, ("80E3A201",), "SeparateNPU"),))})
    return steps


def process_recover_faulty_pod() -> list[dict[str, Any]]:
    """tests/e2e/test_process_recovery.py (process-recover-enable): only the faulty pod is deleted (restart-pods,
    no restart Command); Volcano recreates it on the spare worker-03, the other pod runs on."""
    steps = process_recover()
    steps.append(
        {"at": "6s", "delete": {"resource": "pods", "namespace": "vcjob", "name": "mindx-dls-test-default-test-1"}}
    )
    steps.append({"at": "8s", "apply": pod("mindx-dls-test", 1, "worker-03", uid="pod-uid-1-r1")})
    return steps


def process_recover_strategy_hand_off() -> list[dict[str, Any]]:
    """tests/e2e/test_process_recovery.py (ProcessRecoverStrategy): the job's ``ProcessRecoverStrategy``
    annotation hands the fault off to ClusterD/TaskD: nothing is deleted; the chip healthy again at 10 s ends the
    recovery."""
    steps = process_recover(annotations={"ProcessRecoverStrategy": "recover"})
    steps.append({"at": "10s", "apply": deviceinfo("worker-02", 10)})
    return steps


def podgroup(job: dict[str, Any]) -> dict[str, Any]:
    """The PodGroup Volcano's job controller makes for `job` (a :func:`vcjob`): named ``<job>-<job uid>``, the
    job's labels and annotations copied, a controller ownerReference to the job, the job's minAvailable, tasks and
    queue (volcano-sh/volcano pkg/controllers/job/job_controller_actions.go ``createOrUpdatePodGroup``,
    ``generateRelatedPodGroupName``)."""
    meta, spec = job["metadata"], job["spec"]
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": f"{meta['name']}-{meta['uid']}", "namespace": meta["namespace"],
                     "labels": dict(meta["labels"]),
                     "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": "Job", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"minMember": spec["minAvailable"], "queue": spec["queue"],
                 "minTaskMember": {t["name"]: t["replicas"] for t in spec["tasks"]},
                 "minResources": {NPU: str(8 * spec["minAvailable"])}},
        "status": {"phase": "Running", "running": spec["minAvailable"]},
    }  # fmt: skip
    if meta.get("annotations"):
        group["metadata"]["annotations"] = dict(meta["annotations"])
    return group


def process_recover_strategy_on_the_podgroup() -> list[dict[str, Any]]:
    """tests/e2e/test_process_recovery.py (ProcessRecoverStrategy on the PodGroup): a platform sets the annotation
    on the job's PodGroup (not the job) at 2 s, while the agent runs; the chip fault at 5 s is handed off (the
    PodGroup's strategy): nothing deleted, no restart Command. The chip stays faulty, as in the test."""
    steps = process_recover()
    (i, job), *_ = [(i, s["apply"]) for i, s in enumerate(steps) if s.get("apply", {}).get("kind") == "Job"]
    group = podgroup(job)
    steps.insert(i + 1, {"at": "0s", "apply": group})
    patch = {"metadata": {"annotations": {"ProcessRecoverStrategy": "recover"}}}
    ref = {"resource": "podgroups", "namespace": "vcjob", "name": group["metadata"]["name"]}
    steps.insert(-1, {"at": "2s", "patch": {**ref, "patch": patch}})  # before the fault at 5 s
    return steps


AC_UID = "0c9d8e7f-6a5b-4c3d-8e2f-1a0b9c8d7e6f"


def acjob() -> dict[str, Any]:
    """The guide's AscendJob (tests/fixtures/seed-acjob.yaml: Master and Worker, one replica each, force mode),
    its Worker on the 8-chip node type as the e2e test sets it, Running."""
    import yaml

    docs = [d for d in yaml.safe_load_all((HERE.parent / "fixtures" / "seed-acjob.yaml").read_text()) if d]
    job: dict[str, Any] = docs[1]
    job["metadata"]["uid"] = AC_UID
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["accelerator-type"] = "module-910b-8"
    job["status"] = {"conditions": [{"type": "Running", "status": "True", "reason": "JobRunning"}]}
    return job


def acjob_pod(rtype: str, node_name: str, *, uid: str, version: int, index: int = 0,
              rank: int | None = None) -> dict[str, Any]:  # fmt: skip
    """The ascend-operator's pod for replica `rtype` index `index` (labels of component/ascend-operator; rank
    `rank`, by default Master 0, Worker 1 as beside the guide's Master), on `node_name` with its 8 chips."""
    name = "default-test-pytorch"
    obj = pod(name, 0, node_name, uid=uid, version=version, job_uid=AC_UID)
    obj["metadata"].update(name=f"{name}-{rtype.lower()}-{index}", namespace="default")
    obj["metadata"]["labels"] = {"ring-controller.atlas": "ascend-910b", "training.kubeflow.org/job-name": name,
                                 "training.kubeflow.org/replica-type": rtype.lower(),
                                 "training.kubeflow.org/replica-index": str(index),
                                 "version": str(version)}  # fmt: skip
    if rank is None:
        rank = 0 if rtype == "Master" else 1
    obj["metadata"]["annotations"] = {NPU: CHIPS, "huawei.com/AscendReal": CHIPS, "hccl/rankIndex": str(rank)}
    obj["metadata"]["ownerReferences"][0].update(apiVersion="mindxdl.gitee.com/v1", kind="AscendJob", name=name)
    return obj


def ascendjob_restart() -> list[dict[str, Any]]:
    """tests/e2e/test_ascendjob.py (chip fault, force mode): a SeparateNPU fault under the Master restarts the
    AscendJob (its pods force-deleted); the operator recreates them (version 1) off worker-01."""
    steps: list[dict[str, Any]] = []
    for n in ("worker-01", "worker-02", "worker-03"):
        steps.append({"at": "0s", "apply": node(n)})
        steps.append({"at": "0s", "apply": deviceinfo(n, 0)})
    steps.append({"at": "0s", "apply": acjob()})
    steps.append({"at": "0s", "apply": acjob_pod("Master", "worker-01", uid="ac-pod-m", version=0)})
    steps.append({"at": "0s", "apply": acjob_pod("Worker", "worker-02", uid="ac-pod-w", version=0)})
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, (ChipFault(1, ("80E3A201",), "SeparateNPU"),))})
    for rtype in ("master", "worker"):
        steps.append({"at": "6s", "delete": {"resource": "pods", "namespace": "default",
                                             "name": f"default-test-pytorch-{rtype}-0"}})  # fmt: skip
    steps.append({"at": "8s", "apply": acjob_pod("Master", "worker-03", uid="ac-pod-m-v1", version=1)})
    steps.append({"at": "8s", "apply": acjob_pod("Worker", "worker-02", uid="ac-pod-w-v1", version=1)})
    return steps


def ascendjob_rank0_worker() -> list[dict[str, Any]]:
    """tests/e2e/test_ascendjob.py (rank-0 worker): a worker-only AscendJob (two Worker replicas,
    ``pod-rescheduling=on``): worker-0 has rank 0 but is no master (MindCluster's ``isMasterRank`` needs a replica
    type other than worker), so its chip fault restarts only its pod; the operator recreates it on worker-03."""
    steps: list[dict[str, Any]] = []
    for n in ("worker-01", "worker-02", "worker-03"):
        steps.append({"at": "0s", "apply": node(n)})
        steps.append({"at": "0s", "apply": deviceinfo(n, 0)})
    job = acjob()
    del job["spec"]["replicaSpecs"]["Master"]
    job["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2
    job["metadata"]["labels"].update({"pod-rescheduling": "on", "version": "0"})
    steps.append({"at": "0s", "apply": job})
    for i, n in enumerate(("worker-01", "worker-02")):
        steps.append({"at": "0s", "apply": acjob_pod("Worker", n, uid=f"ac-pod-w{i}", version=0, index=i, rank=i)})
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, (ChipFault(1, ("80E3A201",), "SeparateNPU"),))})
    steps.append({"at": "6s", "delete": {"resource": "pods", "namespace": "default",
                                         "name": "default-test-pytorch-worker-0"}})  # fmt: skip
    bumped = copy.deepcopy(job)
    bumped["metadata"]["labels"]["version"] = "1"
    steps.append({"at": "6s", "apply": bumped})
    steps.append({"at": "8s", "apply": acjob_pod("Worker", "worker-03", uid="ac-pod-w0-v1", version=1, rank=0)})
    return steps


def ascendjob_unlimited() -> list[dict[str, Any]]:
    """tests/e2e/test_ascendjob.py (no backoffLimit, no fault-retry-times): the guide's AscendJob without the
    retry label has no limit (ascendjob_controller.go ``setFaultRetryTimesToBackoffLimits``), so four SeparateNPU
    faults, each under the Master's current node, give four whole-job restarts and no recovery failed.
    ``policy.breaker_min_faulty_nodes: 1000`` (ascendjob-unlimited-restarts.config.yaml), as every e2e agent but
    the breaker test's runs (tests/e2e/conftest.py): four faulty nodes of ten would trip the breaker."""
    nodes = [f"worker-{k:02d}" for k in range(1, 11)]
    steps: list[dict[str, Any]] = []
    for n in nodes:
        steps.append({"at": "0s", "apply": node(n)})
        steps.append({"at": "0s", "apply": deviceinfo(n, 0)})
    job = acjob()
    del job["metadata"]["labels"]["fault-retry-times"]
    job["metadata"]["labels"]["version"] = "0"
    steps.append({"at": "0s", "apply": job})
    master, worker = "worker-01", "worker-02"
    steps.append({"at": "0s", "apply": acjob_pod("Master", master, uid="ac-pod-m-v0", version=0)})
    steps.append({"at": "0s", "apply": acjob_pod("Worker", worker, uid="ac-pod-w-v0", version=0)})
    for r in range(1, 5):
        at = 20 * r - 15
        steps.append({"at": f"{at}s", "apply": deviceinfo(master, at, (ChipFault(1, ("80E3A201",), "SeparateNPU"),))})
        for rtype in ("master", "worker"):
            steps.append({"at": f"{at + 1}s", "delete": {"resource": "pods", "namespace": "default",
                                                         "name": f"default-test-pytorch-{rtype}-0"}})  # fmt: skip
        bumped = copy.deepcopy(job)
        bumped["metadata"]["labels"]["version"] = str(r)
        steps.append({"at": f"{at + 1}s", "apply": bumped})
        bad, master, worker = master, nodes[2 * r], nodes[2 * r + 1]
        steps.append({"at": f"{at + 3}s", "apply": acjob_pod("Master", master, uid=f"ac-pod-m-v{r}", version=r)})
        steps.append({"at": f"{at + 3}s", "apply": acjob_pod("Worker", worker, uid=f"ac-pod-w-v{r}", version=r)})
        steps.append({"at": f"{at + 8}s", "apply": deviceinfo(bad, at + 8)})
    return steps


def moved(steps: list[dict[str, Any]], at_s: int, version: int, nodes: tuple[str, str]) -> None:
    """Volcano's restart of the job (maxRetry 10) at `at_s`, its new pods (`version`) on `nodes` 2 s later."""
    for i in range(2):
        steps.append(
            {"at": f"{at_s}s", "delete": {"resource": "pods", "namespace": "vcjob",
                                           "name": f"mindx-dls-test-default-test-{i}"}}
        )  # fmt: skip
    steps.append({"at": f"{at_s + 1}s", "apply": vcjob("mindx-dls-test", version=version, max_retry=10,
                                                       retry_count=version)})  # fmt: skip
    for i, n in enumerate(nodes):
        steps.append(
            {"at": f"{at_s + 2}s", "apply": pod("mindx-dls-test", i, n, uid=f"pod-uid-{i}-v{version}", version=version)}
        )


def flapping_chip() -> list[dict[str, Any]]:
    """tests/e2e/test_flapping_chip.py: chip 3 of worker-01 (A) faults with RestartNPU 80E18008 (the job moves to
    worker-02 and worker-03), heals; a chip of worker-02 faults (the job moves back onto A); the same chip of A
    again: ManuallySeparateNPU by MindCluster's frequency rule, the job restarted off A, A tainted (it can no
    longer hold the job's 8-chip pods without that chip: issue 37 item 1); the chip
    healthy again keeps it isolated. detect.flap_threshold 0, as the test runs (flapping-chip.config.yaml). Ten
    more idle nodes, as the testbed has: two faulty nodes of three would trip the breaker (policy.breaker_*)."""
    steps = setup(max_retry=10)
    for k in range(12, 2, -1):
        steps.insert(0, {"at": "0s", "apply": deviceinfo(f"worker-{k:02d}", 0)})
        steps.insert(0, {"at": "0s", "apply": node(f"worker-{k:02d}")})
    flap = (ChipFault(3, ("80E18008",), "RestartNPU"),)
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, flap)})
    moved(steps, 6, 1, ("worker-02", "worker-03"))
    steps.append({"at": "15s", "apply": deviceinfo("worker-01", 15)})
    steps.append({"at": "25s", "apply": deviceinfo("worker-02", 25, (ChipFault(0, ("80E3A201",), "SeparateNPU"),))})
    moved(steps, 26, 2, ("worker-01", "worker-03"))
    steps.append({"at": "35s", "apply": deviceinfo("worker-02", 35)})
    steps.append({"at": "45s", "apply": deviceinfo("worker-01", 45, flap)})
    moved(steps, 46, 3, ("worker-02", "worker-03"))
    steps.append({"at": "55s", "apply": deviceinfo("worker-01", 55)})
    return steps


def flapping_quarantine() -> list[dict[str, Any]]:
    """tests/e2e/test_cluster_safety.py (flapping chip, K faults): chip 2 of worker-01 (no job on it) faults with
    RestartNPU 80E18404 three times, healed in between: the third fault is ManuallySeparateNPU (+Flapping) and,
    with detect.isolated_chips_taint 1, taints the node; the taint stays when the chip looks healthy again.
    Settings as the test starts the agent (flapping-quarantine.config.yaml: detect.flap_threshold 3,
    detect.isolated_chips_taint 1; the default taint key)."""
    steps: list[dict[str, Any]] = [
        {"at": "0s", "apply": node("worker-01")},
        {"at": "0s", "apply": deviceinfo("worker-01", 0)},
    ]
    for i in range(3):
        at = 5 + 3 * i
        steps.append(
            {"at": f"{at}s", "apply": deviceinfo("worker-01", at, (ChipFault(2, ("80E18404",), "RestartNPU"),))}
        )
        steps.append({"at": f"{at + 1}s", "apply": deviceinfo("worker-01", at + 1)})
    return steps


def one_replica_vcjob(version: int = 0) -> dict[str, Any]:
    """The guide's job with one replica (minAvailable 1), at `version`."""
    job = vcjob("mindx-dls-test", version=version)
    job["spec"].update(minAvailable=1, tasks=[{"name": "default-test", "replicas": 1}])
    job["status"]["running"] = 1
    return job


def flapping_separatenpu() -> list[dict[str, Any]]:
    """tests/e2e/test_cluster_safety.py (SeparateNPU flapping, issue 13 A.2): a one-replica job on worker-01; chip 2
    of worker-01 faults (SeparateNPU 80E18402, the injector's ``flap`` default) and heals three times, 2 s apart.
    The first fault restarts the job, whose new pod goes to worker-02 (the chip still unhealthy when Volcano
    places it: 7 of 8 chips left); the third fault is +Flapping (ManuallySeparateNPU) and taints worker-01.
    Settings as the test's (flapping-separatenpu.config.yaml: detect.flap_threshold 3, isolated_chips_taint 1)."""
    steps: list[dict[str, Any]] = []
    for n in ("worker-01", "worker-02", "worker-03"):
        steps.append({"at": "0s", "apply": node(n)})
        steps.append({"at": "0s", "apply": deviceinfo(n, 0)})
    steps.append({"at": "0s", "apply": one_replica_vcjob()})
    steps.append({"at": "0s", "apply": pod("mindx-dls-test", 0, "worker-01", uid="pod-uid-0")})
    for i in range(3):
        at = 5 + 2 * i
        steps.append({"at": f"{at}s", "apply": deviceinfo("worker-01", at, (ChipFault(2, ("80E18402",)),))})
        if i == 0:
            steps.append({"at": "5500ms", "delete": {"resource": "pods", "namespace": "vcjob",
                                                     "name": "mindx-dls-test-default-test-0"}})  # fmt: skip
            steps.append({"at": "5500ms", "apply": one_replica_vcjob(1)})
            steps.append({"at": "5800ms", "apply": pod("mindx-dls-test", 0, "worker-02", uid="pod-uid-0-v1",
                                                       version=1)})  # fmt: skip
        steps.append({"at": f"{at + 1}s", "apply": deviceinfo("worker-01", at + 1)})
    return steps


BREAKER_UIDS = ("0a0a0a0a-0000-4000-8000-000000000000", "1b1b1b1b-1111-4111-8111-111111111111",
                "2c2c2c2c-2222-4222-8222-222222222222")  # fmt: skip


def breaker_trips() -> list[dict[str, Any]]:
    """tests/e2e/test_cluster_safety.py (breaker): ten nodes run three copies of the guide's job (train-0..2);
    the node under each job's first pod reports a SeparateNPU chip, one after the other: with
    policy.breaker_node_share 0.25 and breaker_min_faulty_nodes 2 (breaker-trips.config.yaml, the test's 25 % of
    its nodes) two faulty nodes stay under the limit, the third trips the breaker: two restarts, the third job
    left alone, its fault still published."""
    nodes = [f"worker-{k:02d}" for k in range(1, 11)]
    steps: list[dict[str, Any]] = []
    for n in nodes:
        steps.append({"at": "0s", "apply": node(n)})
        steps.append({"at": "0s", "apply": deviceinfo(n, 0)})
    for j, uid in enumerate(BREAKER_UIDS):
        name = f"train-{j}"
        steps.append({"at": "0s", "apply": vcjob(name, uid=uid)})
        for i in range(2):
            steps.append({"at": "0s", "apply": pod(name, i, nodes[2 * j + i], uid=f"pod-uid-{j}-{i}", job_uid=uid)})
    for j in range(3):
        at_ms = 5000 + 200 * j
        hit = deviceinfo(nodes[2 * j], at_ms / 1000, (ChipFault(0, ("80E3A201",), "SeparateNPU"),))
        steps.append({"at": f"{at_ms}ms", "apply": hit})
    restarted_jobs = [(f"train-{j}", BREAKER_UIDS[j], j) for j in range(2)]  # Volcano restarts train-0, train-1
    for name, _, _ in restarted_jobs:
        for i in range(2):
            steps.append(
                {"at": "6s", "delete": {"resource": "pods", "namespace": "vcjob", "name": f"{name}-default-test-{i}"}}
            )
    for name, uid, _ in restarted_jobs:
        steps.append({"at": "7s", "apply": vcjob(name, uid=uid, version=1, retry_count=1)})
    for name, uid, j in restarted_jobs:
        for i in range(2):
            steps.append({"at": "8s", "apply": pod(name, i, nodes[6 + 2 * j + i], uid=f"pod-uid-{j}-{i}-v1",
                                                   version=1, job_uid=uid)})  # fmt: skip
    return steps


def malformed_retry_times() -> list[dict[str, Any]]:
    """tests/e2e/test_job_inputs.py (malformed fault-retry-times, the ``abc`` case): the label is reported once
    (job.misconfigured; the business retry budget is 0) and the job is still watched: a chip fault restarts it
    once, off worker-01."""
    steps = setup(retry="abc")
    spare_nodes(steps, "worker-03", "worker-04")
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, (ChipFault(0, ("80E3A201",), "SeparateNPU"),))})
    restarted(steps, 6, 1, nodes=("worker-03", "worker-04"), retry="abc", retry_count=1)
    return steps


def three_replica_vcjob(version: int = 0, retry_count: int = 0) -> dict[str, Any]:
    """The guide's job with three replicas (minAvailable 2), at `version`."""
    job = vcjob("mindx-dls-test", version=version, retry_count=retry_count)
    job["spec"]["tasks"] = [{"name": "default-test", "replicas": 3}]
    return job


def fault_joins_open_incident() -> list[dict[str, Any]]:
    """tests/e2e/test_volcano_recovery.py (issue 13 A.1): three replicas, minAvailable 2, on worker-01..03. A chip
    fault on worker-01 restarts the job; one new pod stays Pending (no node left with 8 free chips), the incident
    open. A chip fault on worker-02, under a new Running pod, joins that incident (no second restart). Two nodes
    are added, the Pending pod runs, the incident closes as recovered, and the joined fault, still active on the
    job's pod, restarts the job again at once; Volcano moves it to worker-03..05.
    ``policy.breaker_min_faulty_nodes: 1000`` (fault-joins-open-incident.config.yaml), as the e2e agent runs: two
    faulty nodes of three would trip the breaker."""
    steps: list[dict[str, Any]] = []
    for n in ("worker-01", "worker-02", "worker-03"):
        steps.append({"at": "0s", "apply": node(n)})
        steps.append({"at": "0s", "apply": deviceinfo(n, 0)})
    steps.append({"at": "0s", "apply": three_replica_vcjob()})
    for i, n in enumerate(("worker-01", "worker-02", "worker-03")):
        steps.append({"at": "0s", "apply": pod("mindx-dls-test", i, n, uid=f"pod-uid-{i}")})
    steps.append({"at": "5s", "apply": deviceinfo("worker-01", 5, (ChipFault(3, ("80E3A201",), "SeparateNPU"),))})
    for i in range(3):
        steps.append(
            {
                "at": "6s",
                "delete": {"resource": "pods", "namespace": "vcjob", "name": f"mindx-dls-test-default-test-{i}"},
            }
        )
    steps.append({"at": "7s", "apply": three_replica_vcjob(1, 1)})
    steps.append({"at": "8s", "apply": pod("mindx-dls-test", 0, "worker-02", uid="pod-uid-0-v1", version=1)})
    steps.append({"at": "8s", "apply": pod("mindx-dls-test", 1, "worker-03", uid="pod-uid-1-v1", version=1)})
    steps.append({"at": "8s", "apply": pending_pod("mindx-dls-test", 2, uid="pod-uid-2-v1", version=1)})
    steps.append({"at": "12s", "apply": deviceinfo("worker-02", 12, (ChipFault(5, ("80E3A201",), "SeparateNPU"),))})
    for n in ("worker-04", "worker-05"):
        steps.append({"at": "20s", "apply": node(n)})
        steps.append({"at": "20s", "apply": deviceinfo(n, 20)})
    steps.append({"at": "22s", "apply": pod("mindx-dls-test", 2, "worker-04", uid="pod-uid-2-v1", version=1)})
    for i in range(3):
        steps.append(
            {
                "at": "24s",
                "delete": {"resource": "pods", "namespace": "vcjob", "name": f"mindx-dls-test-default-test-{i}"},
            }
        )
    steps.append({"at": "25s", "apply": three_replica_vcjob(2, 2)})
    for i, n in enumerate(("worker-03", "worker-04", "worker-05")):
        steps.append({"at": "26s", "apply": pod("mindx-dls-test", i, n, uid=f"pod-uid-{i}-v2", version=2)})
    return steps


def clusterd_reports(writes: list[tuple[float, dict[str, Any]]]) -> list[dict[str, Any]]:
    """ClusterD's ``cluster-info-*`` ConfigMaps (namespace mindx-dl) after each of `writes` (time in seconds, a
    per-node ConfigMap): aggregated and encoded by the Go program (testbed/mcencode ``clusterd-put``,
    ``clusterd-report``, through a dedicated testbed/encoder.py process), applied when their content changed."""
    from testbed.encoder import Encoder, shared

    aggregator = Encoder(shared().binary)
    steps: list[dict[str, Any]] = []
    written: dict[str, Any] = {}
    try:
        for at, cm in writes:
            slim = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": cm["metadata"]["name"], "namespace": cm["metadata"]["namespace"]},
                    "data": cm["data"]}  # fmt: skip
            aggregator.request("clusterd-put", configmap=slim)
            for out in aggregator.request("clusterd-report", namespace="mindx-dl"):
                name = out["metadata"]["name"]
                if written.get(name) != out["data"]:
                    written[name] = out["data"]
                    steps.append({"at": f"{at}s", "apply": out})
    finally:
        aggregator.close()
    return steps


def clusterd_only() -> list[dict[str, Any]]:
    """tests/e2e/test_mindcluster_sources.py (ClusterD only): the per-node watches off, ClusterD's cluster-info
    ConfigMaps on (clusterd-only.config.yaml, as the test's ``clusterd_only``): a SeparateNPU chip fault on
    worker-01, read from ``cluster-info-device-0``, restarts the job once, off the node."""
    steps = [x for x in setup() if x["apply"].get("kind") != "ConfigMap"]
    spare = [node("worker-03"), node("worker-04")]
    steps[:0] = [{"at": "0s", "apply": n} for n in spare]
    nodes = ("worker-01", "worker-02", "worker-03", "worker-04")
    writes = [(0.0, deviceinfo(n, 0)) for n in nodes]
    writes.append((5.0, deviceinfo("worker-01", 5, (ChipFault(2, ("80E3A201",), "SeparateNPU"),))))
    reports = clusterd_reports(writes)
    steps = [*[r for r in reports if r["at"] == "0.0s"], *steps, *[r for r in reports if r["at"] != "0.0s"]]
    restarted(steps, 6, 1, nodes=("worker-03", "worker-04"), retry_count=1)
    return steps


def a3_switch_via_clusterd() -> list[dict[str, Any]]:
    """tests/e2e/test_mindcluster_sources.py (A3 switch, via ClusterD): as a3-switch-separate-fault, read from
    ClusterD's ``cluster-info-switch-<i>`` (Go-encoded, as clusterd-only-chip-fault's; settings
    a3-switch-via-clusterd.config.yaml): the job restarts once off worker-02, the node is quarantined, the switch
    healthy again clears it."""
    steps = [x for x in setup() if x["apply"].get("kind") != "ConfigMap"]
    writes = [(0.0, deviceinfo(n, 0)) for n in ("worker-01", "worker-02")]
    writes.append((5.0, device_info_cm("worker-02", (), now=START + timedelta(seconds=5),
                                       switch=(SwitchFault(SWITCH_CODE, 0, 3, "Separate"),))))  # fmt: skip
    writes.append((20.0, device_info_cm("worker-02", (), now=START + timedelta(seconds=20), switch=())))
    reports = clusterd_reports(writes)
    steps = [*[r for r in reports if r["at"] == "0.0s"], *steps, *[r for r in reports if r["at"] == "5.0s"]]
    restarted(steps, 6, 1)
    steps += [r for r in reports if r["at"] == "20.0s"]
    return steps


def pending_pod(job: str, i: int, *, uid: str, version: int) -> dict[str, Any]:
    """Volcano's replacement pod that no node can take: Pending, unbound, Unschedulable."""
    obj = pod(job, i, "", uid=uid, version=version)
    del obj["spec"]["nodeName"]
    obj["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                          "reason": "Unschedulable"}]}  # fmt: skip
    return obj


def pending_escalation() -> list[dict[str, Any]]:
    """tests/e2e/test_process_recovery.py (pod-rescheduling, unplaceable replacement): pod 1's node has a faulty
    chip and no other node is free: its replacement stays Pending; after policy.pending_escalation_s (12 s, the
    default; the test runs 2.4 s) the agent restarts the whole job, once: the job's pods stay unplaceable after it
    and no second restart follows."""
    steps = setup(labels={"pod-rescheduling": "on"})
    steps.append({"at": "5s", "apply": deviceinfo("worker-02", 5, (ChipFault(2, ("80E3A201",), "SeparateNPU"),))})
    steps.append(
        {"at": "6s", "delete": {"resource": "pods", "namespace": "vcjob", "name": "mindx-dls-test-default-test-1"}}
    )
    steps.append({"at": "7s", "apply": pending_pod("mindx-dls-test", 1, uid="pod-uid-1-r1", version=0)})
    # the whole-job restart (about 17 s): Volcano deletes both pods, version 1, pod 1 unplaceable again
    for i in range(2):
        steps.append(
            {"at": "20s", "delete": {"resource": "pods", "namespace": "vcjob",
                                      "name": f"mindx-dls-test-default-test-{i}"}}
        )  # fmt: skip
    steps.append({"at": "21s", "apply": vcjob("mindx-dls-test", version=1, labels={"pod-rescheduling": "on"})})
    steps.append({"at": "22s", "apply": pod("mindx-dls-test", 0, "worker-01", uid="pod-uid-0-v1", version=1)})
    steps.append({"at": "22s", "apply": pending_pod("mindx-dls-test", 1, uid="pod-uid-1-v1", version=1)})
    steps.append({"at": "80s", "apply": deviceinfo("worker-01", 80)})  # the device plugin's next write
    return steps


def public_fault() -> list[dict[str, Any]]:
    """No e2e test (tests/integration/test_detect_publicfault_watch.py reads the same ConfigMap): a monitor's
    public-fault ConfigMap reports NPU fault 220001001 on chip 0 of worker-02 (under pod 1): the job restarts
    once; the monitor's ``recover`` later clears it."""
    steps = setup()
    hit = PublicFault("worker-02", "220001001", "NPU", (0,), "occur")
    steps.append({"at": "5s", "apply": public_fault_cm("testbed-public-fault", "mindx-dl", (hit,),
                                                       now=START + timedelta(seconds=5))})  # fmt: skip
    restarted(steps, 6, 1)
    done = PublicFault("worker-02", "220001001", "NPU", (0,), "recover")
    steps.append({"at": "20s", "apply": public_fault_cm("testbed-public-fault", "mindx-dl", (done,),
                                                        now=START + timedelta(seconds=20))})  # fmt: skip
    return steps


def reset_config() -> dict[str, Any]:
    """The job's ``reset-config-mindx-dls-test`` as ``fault-agent submit`` creates it (our own product's object,
    agent.core.resetconfig ``initial_reset_config``, not a MindCluster component's output)."""
    from agent.core.resetconfig import initial_reset_config

    return initial_reset_config("mindx-dls-test", "vcjob")


def reset_config_job(labels: dict[str, str], fault: tuple[ChipFault, ...], **job_kw: Any) -> list[dict[str, Any]]:
    """A job submitted with `labels` by ``fault-agent submit`` (its reset-config in the initial list), a spare
    worker-03, and `fault` on worker-02 (pod 1, rank 1) at 5 s."""
    steps = setup(labels=labels, **job_kw)
    spare_nodes(steps, "worker-03")
    steps.append({"at": "0s", "apply": reset_config()})
    steps.append({"at": "5s", "apply": deviceinfo("worker-02", 5, fault)})
    return steps


def reset_config_pod_level() -> list[dict[str, Any]]:
    """tests/e2e/test_reset_config.py (pod-rescheduling): a SeparateNPU chip fault under pod 1 of a
    ``pod-rescheduling: on`` job: only pod 1 is deleted (restart-pods), Volcano recreates it on the spare worker-03;
    once the pods are back the agent writes the pod-level reset-config update (RetryTime 1). The stand-in's
    processes restart on RetryTime; the surviving pod stayed Ready, so no pod change shows it."""
    steps = reset_config_job({"pod-rescheduling": "on"}, (ChipFault(2, ("80E3A201",), "SeparateNPU"),))
    steps.append(
        {"at": "6s", "delete": {"resource": "pods", "namespace": "vcjob", "name": "mindx-dls-test-default-test-1"}}
    )
    steps.append({"at": "8s", "apply": pod("mindx-dls-test", 1, "worker-03", uid="pod-uid-1-r1")})
    return steps


def not_ready_pod(i: int, node_name: str, *, uid: str, at_s: float) -> dict[str, Any]:
    """Pod `i` Running with its training processes exited (the stand-in's reaction to ``GracefulExit`` 1,
    testbed/training_stand_in.py ``_exit_processes``): Ready and ContainersReady False, the container running."""
    obj = pod("mindx-dls-test", i, node_name, uid=uid)
    now = (START + timedelta(seconds=at_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "TrainingExited"},
        {"type": "ContainersReady", "status": "False", "lastTransitionTime": now, "reason": "TrainingExited"},
    ]
    obj["status"]["containerStatuses"] = [{"name": "mindspore", "ready": False, "restartCount": 0,
                                           "image": "ms-arm:b120", "imageID": "",
                                           "state": {"running": {"startedAt": now}}}]  # fmt: skip
    return obj


GRACE_EXIT = {"fault-scheduling": "grace", "subHealthyStrategy": "graceExit"}
SUB_HEALTH = (ChipFault(2, ("80E3A201",), "SubHealthFault"),)


def reset_config_grace_exit() -> list[dict[str, Any]]:
    """tests/e2e/test_reset_config.py (graceExit, processes exit): a SubHealthFault under pod 1 of a
    ``subHealthyStrategy: graceExit`` job: GracefulExit 1; the stand-in's processes exit at 5.2 s (both pods not
    Ready); then, not before, the grace deletion (the restart Command at the next 0.25 s poll), then GracefulExit
    0."""
    steps = reset_config_job(GRACE_EXIT, SUB_HEALTH)
    for i, n in enumerate(("worker-01", "worker-02")):
        steps.append({"at": "5.2s", "apply": not_ready_pod(i, n, uid=f"pod-uid-{i}", at_s=5.2)})
    restarted(steps, 6, 1, labels=GRACE_EXIT, scheduling="grace")
    return steps


def reset_config_grace_hang() -> list[dict[str, Any]]:
    """tests/e2e/test_reset_config.py (graceExit, processes hang): as reset-config-grace-exit, but the stand-in's
    processes do not exit (``exits=False``: no pod change): the grace deletion comes after
    policy.grace_exit_wait_s (3 s, as the test), then GracefulExit 0."""
    steps = reset_config_job(GRACE_EXIT, SUB_HEALTH)
    restarted(steps, 9, 1, labels=GRACE_EXIT, scheduling="grace")
    return steps


def reset_config_pod_level_grace() -> list[dict[str, Any]]:
    """tests/e2e/test_reset_config.py (pod-rescheduling and graceExit): a SubHealthFault under pod 1: GracefulExit
    1, the stand-in's processes exit at 5.2 s (both pods not Ready), only pod 1 is deleted (restart-pods) and
    recreated on worker-03; once the pods are back the pod-level update (RetryTime 1) restarts the survivor's
    processes: pod 0 Ready again 0.2 s after it."""
    labels = {**GRACE_EXIT, "pod-rescheduling": "on"}
    steps = reset_config_job(labels, SUB_HEALTH, scheduling="grace")
    for i, n in enumerate(("worker-01", "worker-02")):
        steps.append({"at": "5.2s", "apply": not_ready_pod(i, n, uid=f"pod-uid-{i}", at_s=5.2)})
    steps.append(
        {"at": "6s", "delete": {"resource": "pods", "namespace": "vcjob", "name": "mindx-dls-test-default-test-1"}}
    )
    steps.append({"at": "8s", "apply": pod("mindx-dls-test", 1, "worker-03", uid="pod-uid-1-r1")})
    steps.append({"at": "8.2s", "apply": pod("mindx-dls-test", 0, "worker-01", uid="pod-uid-0")})
    return steps


PROGRESS = {"fault-agent.io/progress": "lease", "fault-agent.io/hang-timeout-s": "60"}
"""The labels of a job that reports its progress with a heartbeat Lease, hang timeout 60 s (docs/progress.md;
longer than the replay's 30 s tail, so a scenario whose last record is a step ends without a hang)."""


def lease(at_s: float, step: int, *, checkpoint: int = 0, checkpointing: bool = False,
          holder: str = "mindx-dls-test-default-test-0") -> dict[str, Any]:  # fmt: skip
    """Rank 0's heartbeat Lease as agent/training/progress_client.py writes it `at_s` after the start: `step` done, the
    last checkpoint at step `checkpoint`, a step every 5 s, written every 5 s (lease duration 3 × 5 s)."""
    annotations = {"fault-agent.io/step": str(step), "fault-agent.io/step-time-s": "5.0",
                   "fault-agent.io/checkpoint-step": str(checkpoint)}  # fmt: skip
    if checkpointing:
        annotations["fault-agent.io/checkpointing"] = "true"
    renew = (START + timedelta(seconds=at_s)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "fault-agent-progress-mindx-dls-test", "namespace": "vcjob",
                     "uid": "lease-uid-0", "annotations": annotations,
                     "labels": {"fault-agent.io/progress": "lease", "fault-agent.io/job": "mindx-dls-test"}},
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": 15},
    }  # fmt: skip


def heartbeats(steps: list[dict[str, Any]], start_s: int, end_s: int, first_step: int, *,
               stepping_until_s: int | None = None, checkpoint: int = 0) -> int:  # fmt: skip
    """The Lease written every 5 s from `start_s` to `end_s` (inclusive), `first_step` at the first write and one
    step more at each write until `stepping_until_s` (then the same step renewed, as a training process stuck in a
    collective whose client thread still writes). Returns the last step written. The client writes nothing before
    the first step of its process, so a restarted job's Lease stays as the old process left it until then."""
    step = first_step - 1
    for at in range(start_s, end_s + 1, 5):
        if stepping_until_s is None or at <= stepping_until_s:
            step += 1
        steps.append({"at": f"{at}s", "apply": lease(at, step, checkpoint=checkpoint)})
    return step


def in_order(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`steps` (all timed in seconds, ``<n>s``) sorted by time, steps at the same time in their order."""
    return sorted(steps, key=lambda step: float(step["at"].removesuffix("s")))


def hang_restart() -> list[dict[str, Any]]:
    """tests/e2e/test_training_hang.py: rank 0's heartbeat steps every 5 s, then its step stops at 20 s (the
    Lease still renewed): 60 s later (the job's hang-timeout-s) the job is restarted once, reason hang, one
    business retry spent (job.hung); Volcano's restart shows at 82 s and the first step after it at 95 s is
    training resumed (recovery.resumed)."""
    steps = setup(labels=PROGRESS)
    last = heartbeats(steps, 0, 80, 1, stepping_until_s=20, checkpoint=2)
    assert last == 5
    restarted(steps, 82, 1, labels=PROGRESS)
    heartbeats(steps, 95, 120, 3, checkpoint=2)  # resumed from its checkpoint (step 2): step 3 first
    return in_order(steps)


def hang_joins_hardware_incident() -> list[dict[str, Any]]:
    """docs/progress.md (a hang joins an open incident): a SeparateNPU chip fault under rank 0 on worker-01 at 7 s
    restarts the job; the collective waiting on that chip stops the step at 5 s; Volcano's restart is slow (its
    pods still terminating), so the hang, due at 65 s, finds the chip fault's incident open and joins it: one
    incident, one restart (job.hung, action joined). The restart shows at 80 s and training resumes at 90 s."""
    steps = setup(labels=PROGRESS)
    spare_nodes(steps, "worker-03")
    heartbeats(steps, 0, 75, 1, stepping_until_s=5)
    steps.append({"at": "7s", "apply": deviceinfo("worker-01", 7, (ChipFault(1, ("80E3A201",), "SeparateNPU"),))})
    restarted(steps, 80, 1, nodes=("worker-03", "worker-02"), labels=PROGRESS)
    heartbeats(steps, 90, 110, 1)  # no checkpoint yet: from step 0 again
    return in_order(steps)


def progressing_no_action() -> list[dict[str, Any]]:
    """tests/e2e/test_training_hang.py (a progressing job is left alone): the heartbeat steps every 5 s for
    two minutes, pauses 90 s (longer than its 60 s hang timeout) while it writes a checkpoint (``checkpointing:
    true``), steps again; then someone else restarts the job and its first step comes 75 s later (initialising,
    nothing written): no hang, no action, and no recovery.resumed (the restart was not the agent's)."""
    steps = setup(labels=PROGRESS)
    step = heartbeats(steps, 0, 120, 1)
    for at in range(125, 215, 5):
        steps.append({"at": f"{at}s", "apply": lease(at, step, checkpoint=0, checkpointing=True)})
    checkpoint = step
    heartbeats(steps, 215, 250, step + 1, checkpoint=checkpoint)
    restarted(steps, 252, 1, labels=PROGRESS)
    # nothing written while the new process initialises (the client writes from its first step on)
    heartbeats(steps, 330, 360, checkpoint + 1, checkpoint=checkpoint)
    return in_order(steps)


SCENARIOS = {
    "grace-mode-force-after-grace": grace_mode,
    "node-not-ready": node_not_ready,
    "chip-fault-restart": chip_fault_restart,
    "repeat-fault-after-restart": restart_business_fault,
    "job-not-opted-in": not_opted_in,
    "noded-separate-fault": noded_separate_fault,
    "a3-switch-separate-fault": a3_switch_fault,
    "preseparate-no-action": preseparate_no_action,
    "business-failures-budget-exhausted": business_failures_budget,
    "observe-mode": observe_mode,
    "process-recover-faulty-pod-only": process_recover_faulty_pod,
    "process-recover-strategy-hand-off": process_recover_strategy_hand_off,
    "process-recover-strategy-on-the-podgroup": process_recover_strategy_on_the_podgroup,
    "ascendjob-chip-fault-restart": ascendjob_restart,
    "ascendjob-rank0-worker-restarts-its-pod": ascendjob_rank0_worker,
    "ascendjob-unlimited-restarts": ascendjob_unlimited,
    "flapping-chip": flapping_chip,
    "pending-escalation-once": pending_escalation,
    "public-fault-restart": public_fault,
    "budget-follows-retry-count": budget_follows_retry_count,
    "volcano-fails-the-job": volcano_fails_the_job,
    "job-deleted-mid-recovery": job_deleted_mid_recovery,
    "flapping-quarantine": flapping_quarantine,
    "flapping-separatenpu": flapping_separatenpu,
    "breaker-trips": breaker_trips,
    "malformed-fault-retry-times": malformed_retry_times,
    "fault-joins-open-incident": fault_joins_open_incident,
    "clusterd-only-chip-fault": clusterd_only,
    "a3-switch-via-clusterd": a3_switch_via_clusterd,
    "reset-config-pod-level": reset_config_pod_level,
    "reset-config-grace-exit": reset_config_grace_exit,
    "reset-config-grace-hang": reset_config_grace_hang,
    "reset-config-pod-level-grace": reset_config_pod_level_grace,
    "hang-restart": hang_restart,
    "hang-joins-hardware-incident": hang_joins_hardware_incident,
    "progressing-no-action": progressing_no_action,
}

CLUSTERD_ONLY = "kube:\n  fault_source: clusterd\n"
CONFIGS = {
    "observe-mode": "policy:\n  mode: observe\n",
    "flapping-chip": "detect:\n  flap_threshold: 0\n",
    "ascendjob-unlimited-restarts": "policy:\n  breaker_min_faulty_nodes: 1000\n",
    "flapping-quarantine": "detect:\n  flap_threshold: 3\n  isolated_chips_taint: 1\n",
    "flapping-separatenpu": "detect:\n  flap_threshold: 3\n  isolated_chips_taint: 1\n",
    "breaker-trips": "policy:\n  breaker_node_share: 0.25\n  breaker_min_faulty_nodes: 2\n",
    "fault-joins-open-incident": "policy:\n  breaker_min_faulty_nodes: 1000\n",
    "clusterd-only-chip-fault": CLUSTERD_ONLY,
    "a3-switch-via-clusterd": CLUSTERD_ONLY,
    "reset-config-grace-exit": "policy:\n  grace_exit_wait_s: 30\n  grace_over_time_s: 3\n",
    "reset-config-grace-hang": "policy:\n  grace_exit_wait_s: 3\n  grace_over_time_s: 3\n",
    "reset-config-pod-level-grace": "policy:\n  grace_exit_wait_s: 30\n  grace_over_time_s: 3\n",
}
"""Agent settings files replayed with a scenario (``<name>.config.yaml``, passed as ``--config``)."""


REPLAY_ARGS = ("--json", "--tail", "30")
"""The ``fault-agent replay`` arguments of the golden outputs (plus ``--config <name>.config.yaml`` where the
scenario has one: :func:`replay_args`)."""


def scenario_names(folder: Path) -> list[str]:
    """The scenario files' names in `folder` (``<name>.yaml``, not the ``<name>.config.yaml`` settings files)."""
    return sorted(p.stem for p in folder.glob("*.yaml") if not p.name.endswith(".config.yaml"))


def replay_args(path: Path) -> list[str]:
    """The ``fault-agent replay`` arguments of scenario `path`'s golden output."""
    config = path.with_name(f"{path.stem}.config.yaml")
    return [str(path), *REPLAY_ARGS, *(["--config", str(config)] if config.is_file() else [])]


def replay_json(path: Path) -> bytes:
    """``fault-agent replay`` of `path` with :func:`replay_args`: its standard output, run as a separate process."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "agent", "replay", *replay_args(path)], capture_output=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"replay of {path} exited {done.returncode}: {done.stderr.decode()}")
    return done.stdout


def main() -> None:
    import sys

    from agent.replay.scenario import dump_scenario, load_scenario

    for name, make in SCENARIOS.items():
        text = f"# {(make.__doc__ or '').strip().splitlines()[0]}\n# GENERATED by tests/scenarios/make_scenarios.py\n"
        text += dump_scenario(make())
        load_scenario(text, filename=name)
        if name in CONFIGS:
            (HERE / f"{name}.config.yaml").write_text(
                f"# agent settings replayed with {name}.yaml\n# GENERATED by tests/scenarios/make_scenarios.py\n"
                + CONFIGS[name],
                encoding="utf-8",
            )
        (HERE / f"{name}.yaml").write_text(text, encoding="utf-8")
        if "--expected" in sys.argv[1:]:
            (HERE / f"{name}.expected.jsonl").write_bytes(replay_json(HERE / f"{name}.yaml"))


if __name__ == "__main__":
    main()
