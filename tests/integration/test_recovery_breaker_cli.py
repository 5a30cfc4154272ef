"""`fault-agent breaker show|reset` as an operator runs it, against the testbed's apiserver."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from agent.actions.breaker_store import read_breaker_state, write_breaker_state
from agent.core.guards import CircuitBreaker
from agent.settings import Settings

pytestmark = pytest.mark.integration


async def _cli(testbed: Any, namespace: str, *args: str) -> tuple[int, str]:
    env = os.environ | {
        "FAULT_AGENT_KUBE__KUBECONFIG": str(testbed.kubeconfig),
        "FAULT_AGENT_LEADER__NAMESPACE": namespace,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent", "breaker", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_breaker_show_and_reset(testbed: Any, kube_client: k8s.ApiClient, namespace: str) -> None:
    settings = Settings.model_validate({"leader": {"namespace": namespace}})
    core = k8s.CoreV1Api(kube_client)
    code, out = await _cli(testbed, namespace, "show")
    assert (code, "breaker:  closed" in out) == (0, True)
    breaker = CircuitBreaker(0.2, 300)
    for i in range(3):
        breaker.record_node_fault(f"n{i}", 100.0, 10)
    await write_breaker_state(core, settings, breaker.to_data())  # as a tripped agent writes it
    code, out = await _cli(testbed, namespace, "show")
    assert code == 1
    assert "breaker:  OPEN since 1970-01-01T00:01:40Z" in out
    assert "faulty_nodes: n0,n1,n2" in out
    assert "tripped_at: 1970-01-01T00:01:40Z" in out  # tripped at 100.0 s, shown as ISO 8601 UTC
    code, out = await _cli(testbed, namespace, "reset", "--by", "oncall")
    assert code == 0
    assert "it was open" in out
    data = await read_breaker_state(core, settings)
    assert data is not None
    assert (data["state"], data["reset_by"]) == ("closed", "oncall")
    code, out = await _cli(testbed, namespace, "show")
    assert code == 0
    assert re.search(r"reset_at: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", out, re.MULTILINE), out


async def test_reset_in_a_missing_namespace_names_what_is_missing(testbed: Any) -> None:
    code, out = await _cli(testbed, "no-such-ns", "reset")
    assert code == 1
    assert "ConfigMap fault-agent-breaker cannot be written because namespace no-such-ns does not exist" in out
    assert "leader.namespace (FAULT_AGENT_LEADER__NAMESPACE)" in out


async def test_show_in_a_missing_namespace_does_not_say_closed(testbed: Any) -> None:
    code, out = await _cli(testbed, "no-such-ns", "show")
    assert code == 1
    assert "closed" not in out
    assert "ConfigMap fault-agent-breaker cannot be read because namespace no-such-ns does not exist" in out
    assert "leader.namespace (FAULT_AGENT_LEADER__NAMESPACE)" in out


async def _status(testbed: Any, namespace: str) -> tuple[int, str]:
    """`fault-agent status -n NAMESPACE` found through FAULT_AGENT_KUBE__KUBECONFIG only, as `_cli` runs `breaker`."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "COLUMNS")} | {
        "FAULT_AGENT_KUBE__KUBECONFIG": str(testbed.kubeconfig),
        "FAULT_AGENT_LEADER__NAMESPACE": namespace,
        "HOME": "/nonexistent",  # no ~/.kube/config to fall back on
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent", "status", "-n", namespace, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_status_and_breaker_show_say_the_same_for_each_state(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    """Issue 41: `status` and `breaker show` said different things for one state ("unknown" / "closed" without a
    ConfigMap; "OPEN since …" / "breaker open"), and `status` ignored FAULT_AGENT_KUBE__KUBECONFIG, which
    `breaker` and `quarantine` read: both find the cluster the same way now and print the same line."""
    settings = Settings.model_validate({"leader": {"namespace": namespace}})
    core = k8s.CoreV1Api(kube_client)
    breaker = CircuitBreaker(0.2, 300)
    for i in range(3):
        breaker.record_node_fault(f"n{i}", 100.0, 10)
    for data in (
        None,
        breaker.to_data(),
        {"state": "closed", "reset_by": "oncall", "reset_at": "2026-01-01T00:00:00Z"},
    ):
        if data is not None:
            await write_breaker_state(core, settings, data)
        code, status_out = await _status(testbed, namespace)
        assert code == 0, status_out
        _code, show_out = await _cli(testbed, namespace, "show")
        [in_status] = [line for line in status_out.splitlines() if line.startswith("breaker:")]
        assert show_out.splitlines()[0] == in_status
