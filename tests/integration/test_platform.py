"""submit and status against the testbed's real kube-apiserver (CRDs installed, no Volcano controller).

The CLI runs in-process in a worker thread (it calls asyncio.run itself), logged in with --kubeconfig, or as a
subprocess with $KUBECONFIG. Objects are read back with the admin client; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from agent.cli import main
from agent.core.incidents import LEDGER_ANNOTATION, encode_ledger
from agent.core.policy import RetryLedger
from agent.platform.submit import spec_matches

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"
KINDS = {
    "Job": ("batch.volcano.sh", "v1alpha1", "jobs"),
    "AscendJob": ("mindxdl.gitee.com", "v1", "ascendjobs"),
}


def _example(name: str, namespace: str, tmp_path: Path, **edit: Any) -> tuple[Path, list[dict[str, Any]]]:
    """An example job file moved to `namespace` (and optionally edited), written under tmp_path."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text(encoding="utf-8")) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    if "job_labels" in edit:
        docs[1]["metadata"]["labels"].update(edit["job_labels"])
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path, docs


async def _cli(testbed: Any, *argv: str) -> int:
    return await asyncio.to_thread(main, [*argv[:1], *argv[1:], "--kubeconfig", str(testbed.kubeconfig)])


async def _get_job(api: Any, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    group, version, plural = KINDS[kind]
    try:
        job: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, namespace, plural, name
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return job


async def _get_cm(api: Any, namespace: str, name: str) -> Any:
    try:
        return await client.CoreV1Api(api).read_namespaced_config_map(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


@pytest.mark.parametrize(
    "example",
    ["vcjob-mindx-dls-test.yaml", "acjob-default-test-pytorch.yaml", "vcjob-grace.yaml"],
)
async def test_submit_creates_rings_config_and_job(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str
) -> None:
    path, docs = _example(example, namespace, tmp_path)
    assert await _cli(testbed, "submit", "-f", str(path)) == 0
    out = capsys.readouterr().out
    cm_name, job = docs[0]["metadata"]["name"], docs[1]
    assert f"ConfigMap {namespace}/{cm_name} created" in out
    cm = await _get_cm(kube_client, namespace, cm_name)
    assert cm.data == {"hccl.json": '{"status": "initializing"}'}
    assert cm.metadata.labels == {"ring-controller.atlas": "ascend-910b"}
    stored = await _get_job(kube_client, job["kind"], namespace, job["metadata"]["name"])
    assert stored is not None
    assert stored["metadata"]["labels"] == job["metadata"]["labels"]
    assert spec_matches(job["spec"], stored["spec"])
    assert f"created (uid {stored['metadata']['uid']})" in out


async def test_second_submit_is_a_no_op_and_a_changed_one_an_error(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _example("vcjob-mindx-dls-test.yaml", namespace, tmp_path)
    assert await _cli(testbed, "submit", "-f", str(path)) == 0
    first = await _get_job(kube_client, "Job", namespace, "mindx-dls-test")
    assert first is not None
    capsys.readouterr()
    assert await _cli(testbed, "submit", "-f", str(path)) == 0
    out = capsys.readouterr().out
    assert "reusing it" in out
    assert "already exists with this spec" in out
    assert "nothing to do" in out

    changed = tmp_path / "changed"
    changed.mkdir()
    path2, _ = _example("vcjob-mindx-dls-test.yaml", namespace, changed, job_labels={"fault-retry-times": "1"})
    assert await _cli(testbed, "submit", "-f", str(path2)) == 1
    assert "already exists" in capsys.readouterr().err
    jobs = await client.CustomObjectsApi(kube_client).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs"
    )
    assert [j["metadata"]["uid"] for j in jobs["items"]] == [first["metadata"]["uid"]]
    assert jobs["items"][0]["metadata"]["labels"]["fault-retry-times"] == "3"


async def test_a_file_that_drops_fault_tolerance_labels_is_a_difference(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, docs = _example("vcjob-grace.yaml", namespace, tmp_path)
    assert await _cli(testbed, "submit", "-f", str(path)) == 0
    for label in ("fault-scheduling", "fault-retry-times"):
        del docs[1]["metadata"]["labels"][label]
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    capsys.readouterr()
    assert await _cli(testbed, "submit", "-f", str(path)) == 1
    captured = capsys.readouterr()
    assert "nothing to do" not in captured.out
    assert "with different labels or spec (the file drops label(s) fault-retry-times, fault-scheduling)" in captured.err
    assert "nothing was changed" in captured.err
    stored = await _get_job(kube_client, "Job", namespace, "mindx-dls-grace")
    assert stored is not None
    assert stored["metadata"]["labels"]["fault-scheduling"] == "grace"


async def test_existing_rings_config_is_reused_unchanged(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body: Any = {"metadata": {"name": "rings-config-mindx-dls-test"}, "data": {"hccl.json": '{"status": "completed"}'}}
    made = await client.CoreV1Api(kube_client).create_namespaced_config_map(namespace, body)
    path, _ = _example("vcjob-mindx-dls-test.yaml", namespace, tmp_path)
    assert await _cli(testbed, "submit", "-f", str(path)) == 0
    assert f"exists (uid {made.metadata.uid}): reusing it" in capsys.readouterr().out
    cm = await _get_cm(kube_client, namespace, "rings-config-mindx-dls-test")
    assert cm.metadata.uid == made.metadata.uid
    assert cm.data == {"hccl.json": '{"status": "completed"}'}


async def test_dry_run_stores_nothing(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _example("acjob-default-test-pytorch.yaml", namespace, tmp_path)
    assert await _cli(testbed, "submit", "-f", str(path), "--dry-run") == 0
    out = capsys.readouterr().out
    assert "would be created (server-side dry run)" in out
    assert await _get_cm(kube_client, namespace, "rings-config-default-test-pytorch") is None
    assert await _get_job(kube_client, "AscendJob", namespace, "default-test-pytorch") is None


@contextlib.contextmanager
def volcano_held(testbed: Any) -> Iterator[None]:
    """Pause the testbed's vc-controller-manager (SIGSTOP) for the block: the cases "no controller yet"."""
    testbed.pause("vc-controller-manager")
    try:
        yield
    finally:
        testbed.resume("vc-controller-manager")


async def test_wait_times_out_clearly_without_a_controller(
    testbed: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _example("vcjob-mindx-dls-test.yaml", namespace, tmp_path)
    with volcano_held(testbed):
        assert await _cli(testbed, "submit", "-f", str(path), "--wait", "--timeout", "2") == 3
    captured = capsys.readouterr()
    assert "phase none yet, pods 0/0 running" in captured.out
    assert f"timed out after 2 s waiting for Job {namespace}/mindx-dls-test to run" in captured.err
    # the same hint names the other reason too: a PodGroup that stays Pending (the cluster cannot place the job)
    assert "either the controller is not running or the cluster cannot place the job's minAvailable" in captured.err
    assert f"kubectl -n {namespace} get podgroups" in captured.err


async def test_invalid_name_is_refused_by_the_server_with_its_reason(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, docs = _example("vcjob-mindx-dls-test.yaml", namespace, tmp_path)
    docs[0]["metadata"]["name"] = "rings-config-Bad_Name"
    docs[1]["metadata"]["name"] = "Bad_Name"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert await _cli(testbed, "submit", "-f", str(path), "--skip-lint") == 1
    err = capsys.readouterr().err
    assert "cannot create ConfigMap" in err
    assert "(HTTP 422)" in err
    assert 'metadata.name: Invalid value: "rings-config-Bad_Name"' in err
    cms = await client.CoreV1Api(kube_client).list_namespaced_config_map(namespace)
    assert [c.metadata.name for c in cms.items if c.metadata.name.startswith("rings-config")] == []


async def test_refused_job_leaves_no_config_map_behind(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A label value the apiserver rejects, on the job only: the ConfigMap is created, then removed again.
    path, _ = _example("vcjob-mindx-dls-test.yaml", namespace, tmp_path, job_labels={"tor-affinity": "not valid!"})
    assert await _cli(testbed, "submit", "-f", str(path)) == 1
    captured = capsys.readouterr()
    assert "cannot create Job" in captured.err
    assert "metadata.labels: Invalid value" in captured.err
    assert "deleted again (the job was refused)" in captured.out
    assert await _get_cm(kube_client, namespace, "rings-config-mindx-dls-test") is None
    assert await _get_job(kube_client, "Job", namespace, "mindx-dls-test") is None


async def test_status_of_one_job_shows_pods_nodes_and_budgets(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with volcano_held(testbed):  # no phase yet and only the pod made below: hold the testbed's Volcano
        await _status_of_one_job(testbed, kube_client, namespace, tmp_path, capsys)


async def _status_of_one_job(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _example("vcjob-mindx-dls-test.yaml", namespace, tmp_path)
    assert await _cli(testbed, "submit", "-f", str(path)) == 0
    custom: Any = client.CustomObjectsApi(kube_client)
    ledger = encode_ledger(RetryLedger(business_retries_used=1, restarts_used=1))
    patch = {"metadata": {"annotations": {LEDGER_ANNOTATION: ledger, "fault-agent.io/incident": "{not json"}}}
    await custom.patch_namespaced_custom_object(
        "batch.volcano.sh",
        "v1alpha1",
        namespace,
        "jobs",
        "mindx-dls-test",
        patch,
        _content_type="application/merge-patch+json",
    )
    pod = {
        "metadata": {"name": "mindx-dls-test-default-test-0", "labels": {"volcano.sh/job-name": "mindx-dls-test"}},
        "spec": {"nodeName": "node-7", "containers": [{"name": "c", "image": "x"}]},
    }
    core: Any = client.CoreV1Api(kube_client)
    try:  # the controller-manager makes it too, perhaps not yet; pods are refused without it
        await core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    except ApiException as e:
        if e.status != 409:
            raise
    await core.create_namespaced_pod(namespace, pod)
    capsys.readouterr()
    assert await _cli(testbed, "status", f"{namespace}/mindx-dls-test", "--width", "200") == 0
    out = capsys.readouterr().out
    assert f"Job {namespace}/mindx-dls-test" in out
    assert "phase:            none yet" in out
    assert "retries:          0 / 3 (job controller)" in out
    assert "business retries: 1 / 3 (fault-retry-times)" in out
    assert "mindx-dls-test-default-test-0" in out
    assert "node-7" in out
    assert "unreadable: annotation fault-agent.io/incident" in out
    assert "fault-agent.io/incident: {not json" in out


async def test_status_unknown_job_is_a_clear_error(
    testbed: Any, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await _cli(testbed, "status", "-n", namespace, "nope") == 1
    assert f"no Job or AscendJob or JobSet named nope in namespace {namespace}" in capsys.readouterr().err


async def test_status_table_via_kubeconfig_env(testbed: Any, namespace: str, tmp_path: Path) -> None:
    for example in ("vcjob-mindx-dls-test.yaml", "acjob-default-test-pytorch.yaml"):
        path, _ = _example(example, namespace, tmp_path)
        assert await _cli(testbed, "submit", "-f", str(path)) == 0
    env = {**os.environ, "KUBECONFIG": str(testbed.kubeconfig), "COLUMNS": "200"}
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agent", "status", "-n", namespace],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if namespace in line]
    assert len(lines) == 2
    assert "acjob" in lines[0]
    assert "default-test-pytorch" in lines[0]
    assert "vcjob" in lines[1]
    assert "mindx-dls-test" in lines[1]
    assert "0 / 3" in lines[1]


async def _status_piped(testbed: Any, namespace: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`fault-agent status -n NAMESPACE` with stdout a pipe and no $COLUMNS, as a script runs it."""
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS" and not k.startswith("FAULT_AGENT_")}
    environ |= {"KUBECONFIG": str(testbed.kubeconfig), **env}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agent", "status", "-n", namespace],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_status_shows_breaker_and_leader_from_the_cluster(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path
) -> None:
    core: Any = client.CoreV1Api(kube_client)
    await core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {"name": "fault-agent-breaker"},
            "data": {"state": "open", "tripped_at": "1767268800.0", "reason": "3 of 10 watched nodes faulty"},
        },
    )
    renewed = datetime.now(UTC) - timedelta(seconds=5)
    lease: Any = {
        "metadata": {"name": "fault-agent-leader"},
        "spec": {
            "holderIdentity": "fault-agent-7d9-abc",
            "leaseDurationSeconds": 600,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }
    await client.CoordinationV1Api(kube_client).create_namespaced_lease(namespace, lease)
    path, _ = _example("vcjob-grace.yaml", namespace, tmp_path)
    assert await _cli(testbed, "submit", "-f", str(path)) == 0

    proc = await _status_piped(testbed, namespace, FAULT_AGENT_LEADER__NAMESPACE=namespace)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    breaker = [line for line in lines if line.startswith("breaker:")]
    assert breaker == [
        f"breaker:  OPEN since 2026-01-01T12:00:00Z (ConfigMap {namespace}/fault-agent-breaker): 3 of 10 watched "
        "nodes faulty; reset with `fault-agent breaker reset`"
    ]  # one line: a pipe is not cut at 80 columns
    leader = [line for line in lines if line.startswith("leader:")]
    assert len(leader) == 1
    assert leader[0].startswith("leader:   fault-agent-7d9-abc, renewed ")
    assert f"Lease {namespace}/fault-agent-leader)" in leader[0]
    assert re.search(r"\((5|6|7|8|9|\d\d) s ago;", leader[0]), leader[0]
    assert any("mindx-dls-grace" in line for line in lines)


async def test_status_without_agent_objects_says_what_is_missing(testbed: Any, namespace: str) -> None:
    proc = await _status_piped(testbed, namespace, FAULT_AGENT_LEADER__NAMESPACE=namespace)
    assert proc.returncode == 0, proc.stderr
    # the words of `breaker show` for the same state (tests/integration/test_recovery_breaker_cli.py)
    assert f"breaker:  closed (no ConfigMap {namespace}/fault-agent-breaker yet:" in proc.stdout
    assert f"leader:   unknown (no Lease {namespace}/fault-agent-leader:" in proc.stdout


async def test_status_lists_a_job_that_opted_in_with_fault_retry_times_only(
    testbed: Any, kube_client: Any, namespace: str, tmp_path: Path
) -> None:
    """A job labelled only `fault-retry-times` is watched by the agent (business-failure retries), so status
    lists it too."""
    _, docs = _example("vcjob-mindx-dls-test.yaml", namespace, tmp_path)
    job = docs[1]
    job["metadata"]["labels"].pop("fault-scheduling", None)
    job["metadata"]["labels"]["fault-retry-times"] = "2"
    job["metadata"]["name"] = "retry-only"
    await client.CustomObjectsApi(kube_client).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", job
    )
    proc = await _status_piped(testbed, namespace)
    assert proc.returncode == 0, proc.stderr
    assert "retry-only" in proc.stdout


async def test_status_in_a_missing_namespace_says_so(testbed: Any) -> None:
    proc = await _status_piped(testbed, "no-such-namespace-q7")
    assert proc.returncode == 1
    assert "namespace no-such-namespace-q7 does not exist" in proc.stderr
    assert "no watched jobs" not in proc.stdout
