"""The coalesced bookkeeping writer (agent.engine.bookkeeping): rounds, queue order, failures and leadership,
against a fake writer port (a gate holds a round's write in flight) and a fixed clock."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from support.fakes import FakeWriter, script

from agent.actions import ActionResult, Outcome
from agent.core.bookkeeping import FAULT_NPU_CM, RESCHEDULE_REASON_CM, BookkeepingIntent, TaskReason
from agent.core.clock import FixedClock
from agent.core.fence import NotLeader
from agent.engine.ports import ClusterWriterPort
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}})


class Gated:
    """A :class:`FakeWriter` whose ``update_configmap_keys`` each wait for `gate` (open at first); `writes`: the
    (ConfigMap, incidents) each write carried. With `not_leader`, every such write raises NotLeader after the
    gate (the fence closed)."""

    def __init__(self, *, not_leader: bool = False) -> None:
        self.writer = FakeWriter()
        self.gate = asyncio.Event()
        self.gate.set()
        refused = NotLeader("update-configmap", "ConfigMap") if not_leader else None
        self.updates = script(self.writer, "update_configmap_keys", gate=self.gate, raises=refused)

    @property
    def writes(self) -> list[tuple[tuple[str, str], str]]:
        return [((args[0], args[1]), kwargs["incident"]) for args, kwargs in self.updates.calls]

    @property
    def configmaps(self) -> dict[tuple[str, str], dict[str, str]]:
        return self.writer.configmaps


class Counting:
    def __init__(self) -> None:
        self.actions: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None

    def action(self, action: str, result: str) -> None:
        self.actions.append((action, result))


def _intent(i: int) -> BookkeepingIntent:
    return BookkeepingIntent(f"ns/j{i}-u{i}", f"u{i}", i, (TaskReason("CardUnhealthy", f"j{i}-w-0", "n1", "0"),))


def _engine(gated: Gated, metrics: Counting | None = None) -> RecoveryEngine:
    port: ClusterWriterPort = gated.writer
    return RecoveryEngine(SETTINGS, ClusterState(), port, clock=FixedClock(NOW), metrics=metrics)  # type: ignore[arg-type]


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_intents_queued_during_a_write_go_in_the_next_round_in_queue_order() -> None:
    writer, metrics = Gated(), Counting()
    engine = _engine(writer, metrics)
    keeper = engine.bookkeeper
    writer.gate.clear()
    keeper.record(_intent(0), "inc-0")
    await _settle()  # round 1 is in flight with intent 0 alone
    for i in (1, 2, 3, 1):
        keeper.record(_intent(i), f"inc-{i}")
    writer.gate.set()
    await engine.idle()
    assert writer.writes == [
        (FAULT_NPU_CM, "inc-0"),
        (RESCHEDULE_REASON_CM, "inc-0"),
        (FAULT_NPU_CM, "inc-1,inc-2,inc-3,inc-1"),  # one write per ConfigMap for the four
        (RESCHEDULE_REASON_CM, "inc-1,inc-2,inc-3,inc-1"),
    ]
    assert keeper.rounds == 2
    remain = json.loads(writer.configmaps[FAULT_NPU_CM]["remain-retry-times"])
    assert remain == {f"ns/j{i}-u{i}": {"UUID": f"u{i}", "Times": i} for i in range(4)}
    records = json.loads(writer.configmaps[RESCHEDULE_REASON_CM]["recent-reschedule-records"])
    assert {k: v["TotalRescheduleTimes"] for k, v in records.items()} == {
        "ns/j0-u0": 1, "ns/j1-u1": 2, "ns/j2-u2": 1, "ns/j3-u3": 1,
    }  # fmt: skip
    assert metrics.actions.count(("bookkeeping", "done")) == 2 * 5  # per intent and ConfigMap, as before
    assert not keeper.pending


async def test_a_refused_write_fails_its_round_only() -> None:
    writer, metrics = Gated(), Counting()
    refused = ActionResult("update-configmap", "ConfigMap", Outcome.FAILED, "HTTP 403")
    script(writer.writer, "update_configmap_keys", answer=refused, times=1)
    engine = _engine(writer, metrics)
    engine.bookkeeper.record(_intent(0), "inc-0")
    await engine.idle()
    engine.bookkeeper.record(_intent(1), "inc-1")
    await engine.idle()
    assert metrics.actions.count(("bookkeeping", "failed")) == 1  # inc-0's remain-retry-times, never retried
    assert json.loads(writer.configmaps[FAULT_NPU_CM]["remain-retry-times"]) == {"ns/j1-u1": {"UUID": "u1", "Times": 1}}


async def test_leadership_lost_drops_whats_pending_without_spinning() -> None:
    writer, metrics = Gated(not_leader=True), Counting()
    engine = _engine(writer, metrics)
    keeper = engine.bookkeeper
    writer.gate.clear()
    keeper.record(_intent(0), "inc-0")
    await _settle()
    keeper.record(_intent(1), "inc-1")
    keeper.record(_intent(2), "inc-2")
    writer.gate.set()
    await engine.idle()
    assert writer.writes == [(FAULT_NPU_CM, "inc-0")]  # refused by the fence: nothing more is tried
    assert keeper.rounds == 1
    assert not keeper.pending
    assert metrics.actions.count(("bookkeeping", "failed")) == 2 * 3


async def test_a_cancelled_round_and_a_new_term_drop_whats_pending() -> None:
    writer, metrics = Gated(), Counting()
    engine = _engine(writer, metrics)
    keeper = engine.bookkeeper
    writer.gate.clear()
    keeper.record(_intent(0), "inc-0")
    await _settle()
    keeper.record(_intent(1), "inc-1")
    assert engine.tasks.cancel_leader_only() == 1  # leadership lost: leader-only steps end
    await engine.idle()
    assert not keeper.pending
    assert metrics.actions.count(("bookkeeping", "failed")) == 2  # inc-1, never sent
    keeper.record(_intent(2), "inc-2")  # a round starts again (the old task is gone)
    keeper.new_term()  # ... but a new term began before it ran
    writer.gate.set()
    await engine.idle()
    assert [w for w in writer.writes if "inc-2" in w[1]] == []
    assert FAULT_NPU_CM not in writer.configmaps
