"""remain-retry-times entries for every opted-in job before any failure (issue 35, defect 1): the pure rules
(agent.core.bookkeeping ``entry_changes``, ``fold_remain_retry_times`` with changes) and the engine keeping them
(agent.engine.bookkeeping ``Bookkeeper.sync_jobs``) against a fake writer port.

The Ascend Operator fails an AscendJob with fault-retry-times > 0 at its first Failed pod unless the entry exists
with Times >= 1 (component/ascend-operator/pkg/controllers/v1/unconditaional_retry.go); MindCluster's plugin makes
one for every running job whose fault-scheduling is not off (internal/rescheduling/reschedule.go
``updateNewFaultJobAttr``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from support import factories
from support.fakes import FakeWriter

from agent.actions import ActionResult, Outcome
from agent.core.bookkeeping import (
    FAULT_NPU_CM,
    KEY_REMAIN_RETRY_TIMES,
    EntryChange,
    RemainRetryTimes,
    encode_remain_retry_times,
    entry_changes,
    fold_remain_retry_times,
    scheduler_job_id,
)
from agent.core.clock import FixedClock
from agent.core.cluster import JobKind, JobRecord
from agent.core.observe import ConfigMapSeen
from agent.engine.ports import ClusterWriterPort
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sources.plugin_check import PluginCheck
from agent.sources.state import ClusterState
from testbed.encoder import shared

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _job(
    name: str = "a", uid: str = "u1", scheduling: str | None = "force", retry: str | None = "3", **kw: Any
) -> JobRecord:
    labels = {k: v for k, v in (("fault-scheduling", scheduling), ("fault-retry-times", retry)) if v is not None}
    job = factories.job(name, kind=JobKind.ASCEND, uid=uid, labels=tuple(sorted(labels.items())))
    times = int(retry) if retry is not None and retry.isdigit() else (0 if retry is not None else None)
    return replace(job, fault_retry_times=times, **kw)


def _id(job: JobRecord) -> str:
    return scheduler_job_id(job.namespace, job.name, job.uid)


A = _job()


@pytest.mark.parametrize(
    ("before", "after", "used", "expected"),
    [
        pytest.param(None, A, 0, [EntryChange(_id(A), "u1", 3)], id="seen-force"),
        pytest.param(None, _job(scheduling="grace"), 0, [EntryChange(_id(A), "u1", 3)], id="seen-grace"),
        # MindCluster skips only "off" (an absent label reads as off); Times is 0 without the retry label
        pytest.param(None, _job(scheduling="FORCE"), 0, [EntryChange(_id(A), "u1", 3)], id="unknown-value-like-mc"),
        pytest.param(None, _job(retry=None), 0, [EntryChange(_id(A), "u1", 0)], id="no-retry-label-times-0"),
        pytest.param(None, A, 2, [EntryChange(_id(A), "u1", 1)], id="after-two-business-retries"),
        pytest.param(None, A, 5, [EntryChange(_id(A), "u1", 0)], id="never-below-zero"),
        pytest.param(None, _job(scheduling="off"), 0, [], id="off"),
        pytest.param(None, _job(scheduling=None), 0, [], id="absent"),
        pytest.param(None, _job(phase="Failed"), 0, [], id="finished-job-gets-none"),
        pytest.param(A, None, 0, [EntryChange(_id(A), drop=True)], id="deleted"),
        pytest.param(
            A,
            _job(uid="u2"),
            0,
            [EntryChange(_id(A), drop=True), EntryChange(_id(_job(uid="u2")), "u2", 3)],
            id="uid-changed",
        ),
        pytest.param(A, _job(scheduling="off"), 0, [EntryChange(_id(A), drop=True)], id="label-turned-off"),
        pytest.param(A, _job(phase="Failed", retry="5"), 0, [], id="status-or-labels-changed-only"),
        pytest.param(_job(scheduling=None), A, 1, [EntryChange(_id(A), "u1", 2)], id="opted-in-later"),
    ],
)
def test_entry_changes(
    before: JobRecord | None, after: JobRecord | None, used: int, expected: list[EntryChange]
) -> None:
    uid = after.uid if after is not None else ""
    assert entry_changes([(before, after)], {uid: used}) == expected


def test_fold_keeps_an_entry_of_the_same_uid_and_writes_gos_bytes() -> None:
    """A job's entry of the same UID keeps its Times (never refilled: the restart's intent lowered it), another
    UID's is replaced, a drop removes one, jobs gone from the cache go (as the plugin's SyncJobRemainRetryTimes);
    the value is Go's json.Marshal of the map (testbed/mcencode)."""
    stored = encode_remain_retry_times(
        {
            "ns/a-u1": RemainRetryTimes("u1", 1),
            "ns/b-u0": RemainRetryTimes("u0", 2),
            "ns/c-u3": RemainRetryTimes("u3", 4),
            "ns/gone-u9": RemainRetryTimes("u9", 1),
            "other/x-u8": RemainRetryTimes("u8", 1),
        }
    )
    changes = [
        EntryChange("ns/a-u1", "u1", 3),  # kept at 1
        EntryChange("ns/b-u2", "u2", 3),  # a new job of that name: its own entry
        EntryChange("ns/c-u3", drop=True),
    ]
    live = {"ns/a-u1": "u1", "ns/b-u2": "u2", "ns/c-u3": "u3"}
    value = fold_remain_retry_times(stored, (), live, ("ns",), changes)
    want = {"ns/a-u1": {"UUID": "u1", "Times": 1}, "ns/b-u2": {"UUID": "u2", "Times": 3},
            "other/x-u8": {"UUID": "u8", "Times": 1}}  # fmt: skip
    assert value.text == shared().request("remain-retry-times", remain=want)
    assert value.dropped == ("ns/b-u0", "ns/c-u3", "ns/gone-u9")
    assert value.problem is None


# ---- the engine ----

OTHER_KEYS = {"fault-node": "", "fault-job": "{}"}


def _change(source: str, key: str, new: Any, old: Any, type_: ChangeType = ChangeType.MODIFIED) -> Change[Any]:
    return Change(type_, source, key, new, old, False, time.time())


def _state(*jobs: JobRecord) -> ClusterState:
    state = ClusterState()
    state.expect("acjobs@*")
    for job in jobs:
        state.apply(_change("acjobs", f"{job.namespace}/{job.name}", job, None, ChangeType.ADDED))
    state.apply(Change(ChangeType.LISTED, "acjobs", "", None, None, False, time.time(), "acjobs@*"))
    return state


def _engine(state: ClusterState, writer: FakeWriter, *, plugin: bool = False, **policy: Any) -> RecoveryEngine:
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": policy})
    port: ClusterWriterPort = writer  # type: ignore[assignment]
    return RecoveryEngine(settings, state, port, clock=FixedClock(NOW), plugin_active=lambda: plugin)


def _entries(writer: FakeWriter) -> dict[str, Any]:
    text = writer.configmaps.get(FAULT_NPU_CM, {}).get(KEY_REMAIN_RETRY_TIMES, "")
    return json.loads(text) if text else {}


async def _tick(engine: RecoveryEngine) -> None:
    await engine.tick(NOW)
    await engine.idle()


async def test_every_opted_in_job_gets_its_entry_before_any_failure_and_loses_it_when_gone() -> None:
    a, b, off = _job("a", "u1"), _job("b", "u2", retry=None), _job("c", "u3", scheduling="off")
    state = _state(a, b, off)
    writer = FakeWriter()
    writer.configmaps[FAULT_NPU_CM] = dict(OTHER_KEYS)  # the ConfigMap's other keys are kept
    engine = _engine(state, writer)
    await _tick(engine)
    assert _entries(writer) == {_id(a): {"UUID": "u1", "Times": 3}, _id(b): {"UUID": "u2", "Times": 0}}
    assert {k: v for k, v in writer.configmaps[FAULT_NPU_CM].items() if k in OTHER_KEYS} == OTHER_KEYS
    rounds = engine.bookkeeper.rounds
    await _tick(engine)  # nothing changed: no work, no write
    assert engine.bookkeeper.rounds == rounds
    # a's label turned off, b deleted and created again under a new UID, c opted in
    a_off, b2, on = replace(a, labels=(("fault-scheduling", "off"),)), _job("b", "u4"), _job("c", "u3")
    state.apply(_change("acjobs", "ns/a", a_off, a))
    state.apply(_change("acjobs", "ns/b", None, b, ChangeType.DELETED))
    state.apply(_change("acjobs", "ns/b", b2, None, ChangeType.ADDED))
    state.apply(_change("acjobs", "ns/c", on, off))
    await _tick(engine)
    assert _entries(writer) == {_id(b2): {"UUID": "u4", "Times": 3}, _id(on): {"UUID": "u3", "Times": 3}}
    assert engine.bookkeeper.rounds == rounds + 1  # one batched write for the three changes


@pytest.mark.parametrize(
    ("plugin", "policy"),
    [
        pytest.param(False, {"mode": "observe"}, id="observe-mode"),
        pytest.param(True, {}, id="mindcluster-plugin-runs"),
        pytest.param(False, {"bookkeeping": False}, id="bookkeeping-off"),
    ],
)
async def test_no_entries_when_not_the_agents_to_keep(plugin: bool, policy: dict[str, Any]) -> None:
    writer = FakeWriter()
    engine = _engine(_state(_job()), writer, plugin=plugin, **policy)
    await _tick(engine)
    await asyncio.sleep(0)
    assert FAULT_NPU_CM not in writer.configmaps


class _Gauge:
    def mindcluster_plugin(self, active: bool, mode: str) -> None: ...


def test_entries_wait_for_the_plugin_checks_first_answer() -> None:
    """Before the first read of the plugin's ConfigMap answers, the agent may not know the plugin runs: no entries
    yet; a read without the plugin's key, or a failed read (no RBAC for it), lets them be made."""
    check = PluginCheck("act", _Gauge())
    assert check.may_be_active
    check.seen(None)
    assert not check.may_be_active
    check.seen(ConfigMapSeen("7", frozenset({"fault-node", "remain-retry-times"})))
    assert check.may_be_active
    failing = PluginCheck("act", _Gauge())
    failing.failed(ApiException(status=403))
    assert not failing.may_be_active


class _FailingOnce(FakeWriter):
    """Fails the first ConfigMap write (the apiserver away), then writes as FakeWriter does."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def update_configmap_keys(
        self,
        namespace: str,
        name: str,
        update: Callable[[Mapping[str, str]], Mapping[str, str]],
        *,
        incident: str,
        tries: int = 5,
        annotations: Mapping[str, str] | None = None,
    ) -> ActionResult:
        if self.failures:
            self.failures -= 1
            return ActionResult("update-configmap", f"ConfigMap/{namespace}/{name}", Outcome.FAILED, "HTTP 503")
        return await super().update_configmap_keys(namespace, name, update, incident=incident)


async def test_a_failed_round_is_carried_by_the_next_one() -> None:
    a, b = _job("a", "u1"), _job("b", "u2")
    state = _state(a)
    writer = _FailingOnce()
    engine = _engine(state, writer)
    await _tick(engine)
    assert _entries(writer) == {}
    await _tick(engine)  # nothing changed: no retry storm, no write
    assert _entries(writer) == {}
    state.apply(_change("acjobs", "ns/b", b, None, ChangeType.ADDED))
    await _tick(engine)
    assert _entries(writer) == {_id(a): {"UUID": "u1", "Times": 3}, _id(b): {"UUID": "u2", "Times": 3}}
