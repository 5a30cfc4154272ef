"""Leader election on a real coordination.k8s.io Lease (agent/runtime/leader.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from support.polling import eventually

from agent.runtime.leader import LeaderElector
from agent.settings import LeaderSettings

pytestmark = pytest.mark.integration


def _settings(namespace: str) -> LeaderSettings:
    return LeaderSettings.model_validate(
        {
            "namespace": namespace,
            "name": "fault-agent-leader",
            "lease_duration_s": 3,
            "renew_deadline_s": 2,
            "retry_period_s": 0.2,
        }
    )


async def _holder(api: k8s.ApiClient, namespace: str) -> str | None:
    lease = await k8s.CoordinationV1Api(api).read_namespaced_lease("fault-agent-leader", namespace)
    holder: str | None = lease.spec.holder_identity
    return holder


async def _leaders(*electors: LeaderElector) -> list[str]:
    return [e.identity for e in electors if e.is_leader]


async def test_one_leader_and_release_hands_over_at_once(kube_client: k8s.ApiClient, namespace: str) -> None:
    changes: list[tuple[str, bool]] = []
    a_left_at: list[float] = []  # a's own moment of stepping down to release (its on_change call)

    def a_changed(leading: bool) -> None:
        changes.append(("a", leading))
        if not leading:
            a_left_at.append(time.monotonic())

    a = LeaderElector(kube_client, _settings(namespace), identity="a", on_change=a_changed)
    b_led_at: list[float] = []  # the elector's own moment of taking the Lease (its on_change call)

    def b_changed(leading: bool) -> None:
        changes.append(("b", leading))
        if leading:
            b_led_at.append(time.monotonic())

    b = LeaderElector(kube_client, _settings(namespace), identity="b", on_change=b_changed)
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(a.run(stop_a), name="elector-a")
        await eventually(lambda: _leaders(a), lambda ls: ls == ["a"], what="a leads")
        tg.create_task(b.run(stop_b), name="elector-b")
        await asyncio.sleep(1.0)  # several retry periods: b must stay a standby
        assert await _leaders(a, b) == ["a"]
        assert await _holder(kube_client, namespace) == "a"
        stop_a.set()  # a shuts down and releases
        await eventually(lambda: _leaders(a, b), lambda ls: ls == ["b"], what="b takes over", timeout_s=5)
        # from a's step-down to b's taking the Lease, both the electors' own moments (issue 40: not from when this
        # test asked a to stop): well before the 3 s lease would have expired
        assert b_led_at[0] - a_left_at[0] < 2.0
        assert await _holder(kube_client, namespace) == "b"
        stop_b.set()
    assert changes == [("a", True), ("a", False), ("b", True), ("b", False)]
    assert await _holder(kube_client, namespace) is None  # b released on shutdown too


async def test_crashed_leader_is_replaced_after_lease_expiry(kube_client: k8s.ApiClient, namespace: str) -> None:
    a = LeaderElector(kube_client, _settings(namespace), identity="a")
    b = LeaderElector(kube_client, _settings(namespace), identity="b")
    stop = asyncio.Event()
    task_a = asyncio.create_task(a.run(stop), name="elector-a")
    await eventually(lambda: _leaders(a), lambda ls: ls == ["a"], what="a leads")
    task_b = asyncio.create_task(b.run(stop), name="elector-b")
    await asyncio.sleep(0.5)
    task_a.cancel()  # a crash: no release
    with contextlib.suppress(asyncio.CancelledError):
        await task_a
    leases = k8s.CoordinationV1Api(kube_client)
    held = await leases.read_namespaced_lease("fault-agent-leader", namespace)
    assert held.spec.holder_identity == "a"
    await eventually(lambda: _leaders(b), lambda ls: ls == ["b"], what="b takes over", timeout_s=10)
    lease = await leases.read_namespaced_lease("fault-agent-leader", namespace)
    # the electors' own stamps (MicroTime): a's last renewal, b's acquisition
    waited = (lease.spec.acquire_time - held.spec.renew_time).total_seconds()
    assert 2.0 <= waited <= 6.0  # about one lease duration (3 s) as b observes it
    assert lease.spec.lease_transitions == 1
    stop.set()
    await task_b


async def test_renew_deadline_must_be_shorter_than_lease(kube_client: k8s.ApiClient) -> None:
    # the settings refuse it when they are loaded ...
    with pytest.raises(ValueError, match="retry_period_s < renew_deadline_s < lease_duration_s"):
        LeaderSettings.model_validate({"lease_duration_s": 5, "renew_deadline_s": 5})
    # ... and the elector too, for settings built without validation
    settings = LeaderSettings.model_construct(lease_duration_s=5, renew_deadline_s=5, retry_period_s=1)
    with pytest.raises(ValueError, match="must be less than"):
        LeaderElector(kube_client, settings, identity="x")


async def test_missing_namespace_is_named_once(kube_client: k8s.ApiClient, capsys: pytest.CaptureFixture[str]) -> None:
    """A Lease namespace that does not exist: nobody leads, and the log says why exactly once (not a bare 404
    every retry period)."""
    settings = _settings("no-such-namespace-for-lease")
    elector = LeaderElector(kube_client, settings, identity="lonely")
    for _ in range(3):
        assert await elector.try_acquire_or_renew() is False
    out = capsys.readouterr()
    text = out.out + out.err
    assert text.count("namespace not found") == 1
    assert "FAULT_AGENT_LEADER__NAMESPACE" in text


async def test_leader_steps_down_by_its_renew_deadline_when_the_apiserver_goes_silent(
    testbed: Any, kube_client: k8s.ApiClient, namespace: str
) -> None:
    """An apiserver that accepts connections but answers nothing (SIGSTOP): the renewal hangs, and the leader must
    still step down by its renew deadline (2 s), before the Lease (3 s) could go to another replica."""
    stepped_down: list[float] = []  # the elector's own moment of stepping down (its on_change call)
    a = LeaderElector(
        kube_client, _settings(namespace), identity="a",
        on_change=lambda leading: None if leading else stepped_down.append(time.monotonic()),
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(a.run(stop), name="elector-a")
    await eventually(lambda: _leaders(a), lambda ls: ls == ["a"], what="a leads")
    await asyncio.sleep(0.3)
    testbed.pause("kube-apiserver")
    try:
        paused = time.monotonic()
        await eventually(lambda: _leaders(a), lambda ls: ls == [], what="a steps down", timeout_s=10)
        waited = stepped_down[0] - paused
    finally:
        testbed.resume("kube-apiserver")
    assert waited < 3.0  # the renew deadline (2 s) from the last renewal, not an endless wait on the request
    await eventually(lambda: _leaders(a), lambda ls: ls == ["a"], what="a leads again", timeout_s=15)
    stop.set()
    await task
