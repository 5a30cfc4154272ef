"""`fault-agent quarantine list|show|release` as an operator runs it, beside a running agent, against the
testbed's apiserver (issue 41, 2: nothing listed the quarantined nodes or released one after the hardware was
replaced; the hold lasted detect.isolation_release_s, 24 h)."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes_asyncio import client as k8s
from support.polling import eventually
from test_recovery import _settings, running_agent

from agent.core.faults import FaultLevel
from agent.core.quarantine import RELEASE_ANNOTATION, encode_quarantine_hold, parse_release
from testbed.cluster import Testbed
from testbed.inject import Injector

pytestmark = pytest.mark.integration


@pytest.fixture
def node(testbed: Testbed) -> Iterator[str]:
    inj = Injector(testbed.rest())
    name = f"quarantine-{uuid.uuid4().hex[:6]}"
    inj.add_nodes([name])
    yield name
    inj.delete_nodes([name])


async def _cli(testbed: Testbed, *args: str) -> tuple[int, str]:
    env = os.environ | {"FAULT_AGENT_KUBE__KUBECONFIG": str(testbed.kubeconfig)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent", "quarantine", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def _marks(core: k8s.CoreV1Api, name: str, key: str) -> tuple[list[str], dict[str, str]]:
    n = await core.read_node(name)
    taints = [t.value for t in (n.spec.taints or []) if t.key == key]
    return taints, dict(n.metadata.annotations or {})


async def test_list_show_and_a_release_the_running_agent_takes_up(
    testbed: Testbed, kube_client: k8s.ApiClient, namespace: str, node: str
) -> None:
    settings = _settings(testbed, namespace)
    key = settings.policy.taint_key
    core = k8s.CoreV1Api(kube_client)
    now = datetime.now(UTC)  # the hold a previous leader left: written an hour ago, 20 hours to go
    hold = encode_quarantine_hold(
        FaultLevel.MANUALLY_SEPARATE, now + timedelta(hours=20), since=now - timedelta(hours=1)
    )
    await core.patch_node(
        node,
        {"metadata": {"annotations": {key: hold}},
         "spec": {"taints": [{"key": key, "value": "ManuallySeparateNPU", "effect": "NoSchedule"}]}},
    )  # fmt: skip
    async with running_agent(settings):
        await asyncio.sleep(6)  # settled ticks reconcile every node: the hold keeps the taint
        taints, _ = await _marks(core, node, key)
        assert taints == ["ManuallySeparateNPU"]
        code, out = await _cli(testbed, "list")
        assert code == 0, out
        line = next(line for line in out.splitlines() if line.startswith(node))
        assert "ManuallySeparateNPU" in line
        code, out = await _cli(testbed, "show", node)
        assert code == 0, out
        assert f"node {node}: quarantined" in out
        assert "h left" in out

        code, out = await _cli(testbed, "release", node, "--reason", "board replaced", "--by", "oncall")
        assert code == 0, out

        async def lifted() -> bool:
            taints, annotations = await _marks(core, node, key)
            return not taints and key not in annotations

        await eventually(lifted, what="the agent lifts the taint and the hold after the release", timeout_s=20)
        _, annotations = await _marks(core, node, key)
        release = parse_release(annotations[RELEASE_ANNOTATION])  # stays as the record of who released it
        assert (release.by, release.reason) == ("oncall", "board replaced")
        code, out = await _cli(testbed, "show", node)
        assert code == 0
        assert f"node {node}: not quarantined by the agent" in out
        code, out = await _cli(testbed, "release", node, "--reason", "again")
        assert code == 1
        assert "not quarantined by the agent; nothing released" in out


async def test_release_needs_a_reason_and_a_node_that_exists(testbed: Testbed) -> None:
    code, out = await _cli(testbed, "release", "no-such-node-x")
    assert code == 2
    assert "--reason" in out
    code, out = await _cli(testbed, "show", "no-such-node-x")
    assert code == 1
    assert "node no-such-node-x not found" in out
