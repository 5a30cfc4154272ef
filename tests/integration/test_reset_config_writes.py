"""The writer's reset-config-<job> updates against the testbed's real apiserver.

The expected data comes from Go's encoder (testbed/mcencode over MindCluster's TaskResetInfo field names), and the
checkCode is recomputed here with hashlib, never with the module under test.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from agent.actions import ClusterWriter, Outcome
from agent.core.resetconfig import ResetConfigUpdate, initial_reset_config, parse_reset_config
from testbed.encoder import shared

pytestmark = pytest.mark.integration
NOW_S = 1_767_225_600


def _go(reset: dict[str, Any], restart_type: str) -> Any:
    return shared().request("reset-config", reset=reset, restart_type=restart_type)


def _zero(**changed: Any) -> dict[str, Any]:
    base = {"RankList": None, "UpdateTime": 0, "RetryTime": 0, "FaultFlushing": False, "GracefulExit": 0,
            "RestartFaultProcess": False}  # fmt: skip
    return {**base, **changed}


async def _create(api: k8s.ApiClient, namespace: str, job: str) -> None:
    body = initial_reset_config(job, namespace)
    body["metadata"]["annotations"] = {"example.com/owner": "platform"}
    body["metadata"]["labels"]["example.com/team"] = "a"
    body["data"]["profilingSwitch"] = "{}"  # MindCluster's update replaces the whole data: dropped
    await k8s.CoreV1Api(api).create_namespaced_config_map(namespace, body)


async def _read(api: k8s.ApiClient, namespace: str, job: str) -> k8s.V1ConfigMap:
    return await k8s.CoreV1Api(api).read_namespaced_config_map(f"reset-config-{job}", namespace)


async def test_pod_level_update_writes_what_mindclusters_plugin_writes(
    kube_client: k8s.ApiClient, namespace: str
) -> None:
    await _create(kube_client, namespace, "train")
    writer = ClusterWriter(kube_client, attempts=1)
    update = ResetConfigUpdate(namespace, "train", "pod-reschedule", pod_level=True, now_s=NOW_S)
    assert (await writer.update_reset_config(update, incident="i-1")).outcome is Outcome.DONE
    cm = await _read(kube_client, namespace, "train")
    assert cm.data == _go(_zero(RankList=[], UpdateTime=NOW_S, RetryTime=1), "podReschedule")
    assert cm.data["checkCode"] == hashlib.sha256(cm.data["reset.json"].encode()).hexdigest()
    assert cm.metadata.labels == {"reset": "true", "example.com/team": "a"}
    assert cm.metadata.annotations == {"example.com/owner": "platform"}
    # a second pod-level restart counts again; a whole-job one resets the count
    await writer.update_reset_config(update, incident="i-2")
    assert json.loads((await _read(kube_client, namespace, "train")).data["reset.json"])["RetryTime"] == 2
    whole = ResetConfigUpdate(namespace, "train", "pod-reschedule", pod_level=False, now_s=NOW_S + 1)
    await writer.update_reset_config(whole, incident="i-3")
    got = parse_reset_config((await _read(kube_client, namespace, "train")).data)
    assert (got.info.retry_time, got.info.update_time, got.check_code_ok) == (0, NOW_S + 1, True)


async def test_graceful_exit_is_set_once_dropping_restart_type_and_reset(
    kube_client: k8s.ApiClient, namespace: str
) -> None:
    await _create(kube_client, namespace, "train")
    writer = ClusterWriter(kube_client, attempts=1)
    pod_level = ResetConfigUpdate(namespace, "train", "pod-reschedule", pod_level=True, now_s=NOW_S)
    await writer.update_reset_config(pod_level, incident="i-1")
    on = ResetConfigUpdate(namespace, "train", "grace-exit-on")
    assert (await writer.update_reset_config(on, incident="i-2")).outcome is Outcome.DONE
    cm = await _read(kube_client, namespace, "train")
    assert cm.data == _go(_zero(RankList=[], UpdateTime=NOW_S, RetryTime=1, GracefulExit=1), "")
    version = cm.metadata.resource_version
    assert (await writer.update_reset_config(on, incident="i-2")).outcome is Outcome.ALREADY_DONE
    assert (await _read(kube_client, namespace, "train")).metadata.resource_version == version  # not written
    off = ResetConfigUpdate(namespace, "train", "grace-exit-off")
    assert (await writer.update_reset_config(off, incident="i-2")).outcome is Outcome.DONE
    cm = await _read(kube_client, namespace, "train")
    assert cm.data == _go(_zero(RankList=[], UpdateTime=NOW_S, RetryTime=1), "")


async def test_missing_unreadable_and_dry_run(kube_client: k8s.ApiClient, namespace: str) -> None:
    writer = ClusterWriter(kube_client, attempts=1)
    on = ResetConfigUpdate(namespace, "train", "grace-exit-on")
    missing = await writer.update_reset_config(on, incident="i-1")
    assert (missing.outcome, missing.status) == (Outcome.FAILED, 404)
    body = {"metadata": {"name": "reset-config-train"}, "data": {"reset.json": '{"RetryTime": "x"}'}}
    await k8s.CoreV1Api(kube_client).create_namespaced_config_map(namespace, body)
    bad = await writer.update_reset_config(on, incident="i-1")
    assert (bad.outcome, bad.status) == (Outcome.FAILED, None)
    assert "reset.json.RetryTime" in bad.detail
    dry = ClusterWriter(kube_client, dry_run=True)
    before = await _read(kube_client, namespace, "train")
    assert (await dry.update_reset_config(on, incident="i-1")).outcome is Outcome.DRY_RUN
    assert (await _read(kube_client, namespace, "train")).metadata.resource_version == before.metadata.resource_version


async def test_a_write_that_lost_its_answer_is_not_counted_twice(kube_client: k8s.ApiClient, namespace: str) -> None:
    """The first replace lands but its answer is lost; the retry carries the old resourceVersion, gets 409,
    re-reads, finds its own data there: already done, RetryTime 1, not 2."""
    await _create(kube_client, namespace, "train")
    writer = ClusterWriter(kube_client, attempts=2, backoff_s=0.01)
    real = writer.core.replace_namespaced_config_map
    calls = 0

    async def lost_answer(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        result = await real(*args, **kwargs)
        if calls == 1:
            raise TimeoutError("answer lost")
        return result

    writer.core = _Patched(writer.core, replace_namespaced_config_map=lost_answer)
    update = ResetConfigUpdate(namespace, "train", "pod-reschedule", pod_level=True, now_s=NOW_S)
    result = await writer.update_reset_config(update, incident="i-1")
    assert result.outcome is Outcome.ALREADY_DONE
    assert calls == 2
    assert json.loads((await _read(kube_client, namespace, "train")).data["reset.json"])["RetryTime"] == 1


class _Patched:
    def __init__(self, inner: Any, **overrides: Any) -> None:
        self._inner = inner
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(self._inner, name)
