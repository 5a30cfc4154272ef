"""Dry-run keeps its own breaker and says each would-be taint once (issue 13 B6).

In dry-run the breaker ConfigMap is never written, so the ``closed`` state an earlier reset left there is still
what the agent reads after its breaker tripped in memory: that is not a reset. And a quarantine taint that was
not written is not on the node, which made every reconcile say ``would set taint`` again.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from structlog.testing import capture_logs
from support import factories
from support.fakes import InstantWriter, script

import agent.actions.breaker_store
from agent.actions import ActionResult, Outcome
from agent.core.faults import Fault, FaultKind, ObjectRef
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
EARLIER_RESET = {"state": "closed", "reset_at": "2026-11-28T09:00:00+00:00", "reset_by": "earlier"}


class Dry:
    """A dry-run :class:`InstantWriter` (`writer`) that logs the taint writes it skips: `taints` gives (node,
    value; None for an untaint), in order."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self.writer = InstantWriter(api, dry_run=True)
        self.log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

        def taint(node: str, *, key: str, value: str, incident: str = "") -> ActionResult:
            return ActionResult("taint", f"Node/{node}", Outcome.DRY_RUN, f"dry run: would set taint {key}={value}")

        def untaint(node: str, *, key: str, incident: str = "") -> ActionResult:
            return ActionResult("untaint", f"Node/{node}", Outcome.DRY_RUN, f"dry run: would remove taint {key}")

        script(self.writer, "taint_node", does=taint, log=self.log)
        script(self.writer, "untaint_node", does=untaint, log=self.log)

    @property
    def taints(self) -> list[tuple[str, str | None]]:
        return [(args[0], kwargs.get("value")) for _, args, kwargs in self.log]


def node_fault(node: str) -> Fault:
    return factories.fault(
        kind=FaultKind.NODE,
        node=node,
        chips=(),
        codes=("00000011",),
        at=NOW,
        source=ObjectRef("ConfigMap", "mindx-dl", f"mindx-dl-nodeinfo-{node}"),
        reason="SeparateFault",
    )


def _engine(api: k8s.ApiClient, nodes: int) -> tuple[RecoveryEngine, Dry]:
    state = ClusterState()
    for i in range(nodes):
        rec = factories.node(f"n{i}", uid=f"uid-{i}", at=NOW)
        state.apply(Change(ChangeType.ADDED, "nodes", f"n{i}", rec, None, False, time.time()))
    settings = Settings.model_validate(
        {
            "kafka": {"enabled": False},
            "policy": {"dry_run": True, "breaker_node_share": 0.5, "breaker_min_faulty_nodes": 2},
        }
    )
    dry = Dry(api)
    return RecoveryEngine(settings, state, dry.writer, clock=SystemClock()), dry


@pytest.mark.parametrize("read_first", [True, False], ids=["read-before-trip", "tripped-before-first-read"])
async def test_dry_run_breaker_is_not_reset_by_the_closed_state_it_never_overwrote(
    monkeypatch: pytest.MonkeyPatch, read_first: bool
) -> None:
    stored: dict[str, Any] = {"data": dict(EARLIER_RESET)}

    async def read(core: Any, settings: Any) -> dict[str, str] | None:
        return dict(stored["data"]) if stored["data"] is not None else None

    monkeypatch.setattr(agent.actions.breaker_store, "read_breaker_state", read)
    api = k8s.ApiClient()
    try:
        engine, _ = _engine(api, 4)
        if read_first:
            await engine.sync_breaker()
        for i in range(3):
            await engine.handle_fault(node_fault(f"n{i}"), NOW)
            await engine.idle()
        assert engine.breaker.is_open
        with capture_logs() as logs:
            for _ in range(3):
                await engine.sync_breaker()
            assert engine.breaker.is_open
            assert not [e for e in logs if e["event"] == "circuit breaker reset by a person"]
            stored["data"] = {"state": "closed", "reset_at": "2026-11-29T12:05:00+00:00", "reset_by": "oncall"}
            await engine.sync_breaker()  # a person's reset: the ConfigMap changed to closed
        assert not engine.breaker.is_open
        assert [e.get("by") for e in logs if e["event"] == "circuit breaker reset by a person"] == ["oncall"]
        assert stored["data"]["reset_by"] == "oncall"  # dry-run wrote nothing
    finally:
        await api.close()


async def test_dry_run_says_would_set_taint_once_per_change() -> None:
    api = k8s.ApiClient()
    try:
        engine, writer = _engine(api, 10)
        await engine.handle_fault(node_fault("n1"), NOW)
        await engine.idle()
        for _ in range(10):  # once a second for ten seconds
            await engine.reconcile_taints()
            await engine.idle()
        assert writer.taints == [("n1", "SeparateNPU")]
        engine.quarantining.note(node_fault("n1"), active=False)  # NodeD deleted its ConfigMap
        await engine.quarantining.request_sync("n1")
        for _ in range(10):
            await engine.reconcile_taints()
            await engine.idle()
        assert writer.taints == [("n1", "SeparateNPU"), ("n1", None)]
    finally:
        await api.close()


async def test_a_reset_made_before_the_first_read_but_after_the_trip_still_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def read(core: Any, settings: Any) -> dict[str, str] | None:
        return {"state": "closed", "reset_at": (NOW + timedelta(seconds=3)).isoformat(), "reset_by": "oncall"}

    monkeypatch.setattr(agent.actions.breaker_store, "read_breaker_state", read)
    api = k8s.ApiClient()
    try:
        engine, _ = _engine(api, 4)
        for i in range(3):
            await engine.handle_fault(node_fault(f"n{i}"), NOW)
            await engine.idle()
        assert engine.breaker.is_open
        await engine.sync_breaker()
        assert not engine.breaker.is_open
    finally:
        await api.close()
