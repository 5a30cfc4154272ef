"""The watch engine's layers against an in-memory transport: backoff, relist diff, events, 410, silence."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from support import factories
from support.fakes import FakeTransport

from agent.core.cluster import PodRecord
from agent.kube.errors import (
    KubeApiError,
    KubeConnectionError,
    ResourceGone,
    StreamCorrupt,
    WatchSilent,
    api_error,
    parse_retry_after,
)
from agent.kube.watch import (
    Change,
    ChangeType,
    CountingObserver,
    Resource,
    Watcher,
    backoff_delay,
    diff_relist,
)
from agent.sources.pods import PodConverter
from agent.sources.state import ClusterState

PODS = Resource("pods", "Pod", "", "v1", "pods", "ns")


def pod(name: str, rv: str, *, uid: str | None = None, node: str = "n1", ns: str = "ns") -> dict[str, Any]:
    return factories.pod_body(name, namespace=ns, uid=uid, resource_version=rv, node=node)


def line(type_: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": type_, "object": obj}) + b"\n"


class Recorder:
    """A sink that applies changes to a ClusterState and keeps them for assertions."""

    def __init__(self) -> None:
        self.state = ClusterState()
        self.changes: list[Change[Any]] = []

    def __call__(self, change: Change[Any]) -> None:
        self.state.apply(change)
        self.changes.append(change)

    def summary(self) -> list[tuple[str, str, str]]:
        out = []
        for c in self.changes:
            rec = c.new or c.old
            out.append((c.type.value, c.key, rec.resource_version if rec else ""))
        return out


def make(transport: FakeTransport, **kw: Any) -> tuple[Watcher[PodRecord], Recorder, CountingObserver]:
    rec = Recorder()
    obs = CountingObserver()
    w: Watcher[PodRecord] = Watcher(
        transport,
        kw.pop("resource", PODS),
        PodConverter(),
        rec.state.store("pods"),
        rec,
        observer=obs,
        page_size=2,
        rng=random.Random(1),
        **kw,
    )
    return w, rec, obs


# ---- pure helpers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "jitter", "expected"),
    [
        pytest.param(0, 0.0, 0.25, id="first-no-jitter-half"),
        pytest.param(0, 1.0, 0.5, id="first-full-jitter"),
        pytest.param(3, 0.5, 3.0, id="doubles"),
        pytest.param(10, 1.0, 30.0, id="capped"),
        pytest.param(10_000, 0.0, 15.0, id="huge-attempt-capped"),
    ],
)
def test_backoff_delay(attempt: int, jitter: float, expected: float) -> None:
    assert backoff_delay(attempt, initial_s=0.5, max_s=30.0, jitter=jitter) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param("3", 3.0, id="seconds"),
        pytest.param(" 1.5 ", 1.5, id="fraction-and-spaces"),
        pytest.param("-1", None, id="negative"),
        pytest.param("Wed, 21 Oct 2015 07:28:00 GMT", None, id="http-date"),
    ],
)
def test_parse_retry_after(header: str | None, expected: float | None) -> None:
    assert parse_retry_after(header) == expected


@pytest.mark.parametrize(
    ("status", "cls", "retriable"),
    [
        pytest.param(410, ResourceGone, True, id="gone"),
        pytest.param(429, KubeApiError, True, id="too-many"),
        pytest.param(503, KubeApiError, True, id="unavailable"),
        pytest.param(403, KubeApiError, False, id="forbidden"),
        pytest.param(404, KubeApiError, False, id="not-found"),
    ],
)
def test_api_error_typing(status: int, cls: type[Exception], retriable: bool) -> None:
    e = api_error(status, "x", retry_after=2.0)
    assert type(e) is cls
    assert (e.retriable, e.status, e.retry_after) == (retriable, status, 2.0)


class V:
    def __init__(self, rv: str, uid: str = "u") -> None:
        self.resource_version = rv
        self.uid = uid

    def __repr__(self) -> str:
        return f"V({self.resource_version},{self.uid})"


@pytest.mark.parametrize(
    ("cache", "listed", "expected"),
    [
        pytest.param({}, {"ns/a": V("1")}, [("ADDED", "ns/a")], id="new"),
        pytest.param({"ns/a": V("1")}, {"ns/a": V("1")}, [], id="unchanged-is-silent"),
        pytest.param({"ns/a": V("1")}, {"ns/a": V("2")}, [("MODIFIED", "ns/a")], id="modified"),
        pytest.param({"ns/a": V("1")}, {}, [("DELETED", "ns/a")], id="gone"),
        pytest.param(
            {"ns/a": V("1", "u1")}, {"ns/a": V("5", "u2")}, [("DELETED", "ns/a"), ("ADDED", "ns/a")], id="recreated"
        ),
        pytest.param({"ns/a": V("1")}, {"ns/a": None}, [], id="rejected-is-kept"),
        pytest.param({"other/a": V("1")}, {}, [], id="out-of-scope-kept"),
        pytest.param(
            {"ns/a": V("1"), "ns/b": V("1")},
            {"ns/c": V("3"), "ns/b": V("2")},
            [("ADDED", "ns/c"), ("MODIFIED", "ns/b"), ("DELETED", "ns/a")],
            id="deletions-last",
        ),
    ],
)
def test_diff_relist(cache: dict[str, V], listed: dict[str, V | None], expected: list[tuple[str, str]]) -> None:
    got = diff_relist(cache, listed, lambda k: k.startswith("ns/"))
    assert [(t.value, k) for t, k, _, _ in got] == expected


def test_resource_paths() -> None:
    assert PODS.path == "/api/v1/namespaces/ns/pods"
    assert Resource("nodes", "Node", "", "v1", "nodes").path == "/api/v1/nodes"
    vc = Resource("vcjobs", "Job", "batch.volcano.sh", "v1alpha1", "jobs")
    assert vc.path == "/apis/batch.volcano.sh/v1alpha1/jobs"
    assert (PODS.watcher_id, vc.watcher_id) == ("pods@ns", "vcjobs@*")


# ---- layer 2 + 3 ---------------------------------------------------------------------------------------


async def test_list_pages_then_watch_events() -> None:
    t = FakeTransport()
    t.objects = [pod("a", "1"), pod("b", "2"), pod("c", "3")]
    t.streams = [
        [
            line("ADDED", pod("d", "11")),
            line("MODIFIED", pod("a", "12", node="n2")),
            # split across chunks, and a bookmark
            line("DELETED", pod("b", "13"))[:10],
            line("DELETED", pod("b", "13"))[10:] + line("BOOKMARK", {"metadata": {"resourceVersion": "20"}}),
        ]
    ]
    w, rec, obs = make(t, inactivity_s=0.2)
    with pytest.raises(WatchSilent):  # the fake hangs after its stream: the deadline ends the test
        await w.list_then_watch()
    assert t.page_calls == ["", "2"]
    assert rec.summary() == [
        ("ADDED", "ns/a", "1"),
        ("ADDED", "ns/b", "2"),
        ("ADDED", "ns/c", "3"),
        ("LISTED", "", ""),
        ("ADDED", "ns/d", "11"),
        ("MODIFIED", "ns/a", "12"),
        ("DELETED", "ns/b", "2"),
    ]
    assert t.watch_rvs[0] == "10"
    assert w.resource_version == "20"  # bookmarks move the resourceVersion
    assert sorted(rec.state.pods) == ["ns/a", "ns/c", "ns/d"]
    assert rec.state.pods_by_node == {"n1": {"ns/c", "ns/d"}, "n2": {"ns/a"}}
    assert rec.state.check_indexes() == []
    assert obs.events[("pods", "BOOKMARK")] == 1
    assert obs.synced == {"pods": True}
    assert rec.state.ready is False  # nobody expected: the state cannot claim readiness
    rec.state.expect("pods@ns")
    rec.state.expect("nodes@*")
    assert rec.state.ready is False  # nodes have not listed
    assert rec.state.not_listed == {"nodes@*"}
    rec.state.apply(Change(ChangeType.LISTED, "nodes", "", None, None, True, 0.0, "nodes@*"))
    assert rec.state.ready is True


async def test_replayed_and_stale_events_are_not_changes() -> None:
    t = FakeTransport()
    t.objects = [pod("a", "5")]
    t.streams = [[line("ADDED", pod("a", "5")), line("MODIFIED", pod("a", "5")), line("DELETED", pod("zz", "6"))]]
    w, rec, _ = make(t, inactivity_s=0.2)
    with pytest.raises(WatchSilent):
        await w.list_then_watch()
    assert rec.summary() == [("ADDED", "ns/a", "5"), ("LISTED", "", "")]


async def test_recreated_object_yields_delete_then_add() -> None:
    t = FakeTransport()
    t.objects = [pod("a", "5", uid="old")]
    t.streams = [[line("MODIFIED", pod("a", "9", uid="new"))]]
    w, rec, _ = make(t, inactivity_s=0.2)
    with pytest.raises(WatchSilent):
        await w.list_then_watch()
    assert rec.summary()[2:] == [("DELETED", "ns/a", "5"), ("ADDED", "ns/a", "9")]
    assert rec.state.pods["ns/a"].uid == "new"


async def test_malformed_objects_are_skipped_counted_and_logged_once(capsys: pytest.CaptureFixture[str]) -> None:
    bad = pod("bad", "3")
    bad["metadata"]["annotations"] = {"hccl/rankIndex": "zero"}
    t = FakeTransport()
    t.objects = [pod("a", "1"), bad, {"kind": "Pod"}]
    bad2 = pod("bad", "12")
    bad2["metadata"]["annotations"] = {"hccl/rankIndex": "one"}
    t.streams = [[line("MODIFIED", bad2), line("ADDED", pod("b", "13"))]]
    w, rec, obs = make(t, inactivity_s=0.2)
    with pytest.raises(WatchSilent):
        await w.list_then_watch()
    assert rec.summary() == [("ADDED", "ns/a", "1"), ("LISTED", "", ""), ("ADDED", "ns/b", "13")]
    assert obs.rejected == {("Pod", "bad-rank"): 2, ("Pod", "missing-metadata"): 1}
    assert w.resource_version == "13"
    out = capsys.readouterr().out
    assert out.count("bad-rank") == 2  # two distinct bad writes of one object: each is logged (once)
    assert "ns/bad" in out or "Pod/ns/bad" in out


async def test_a_bad_write_seen_again_is_not_logged_again_but_a_new_one_with_the_same_text_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def bad(rv: str) -> dict[str, Any]:
        obj = pod("bad", rv)
        obj["metadata"]["annotations"] = {"hccl/rankIndex": "zero"}
        return obj

    t = FakeTransport()
    t.objects = [bad("3")]
    # the same write replayed (a reconnect), then a new write whose rejection reads exactly the same
    t.streams = [[line("MODIFIED", bad("3")), line("MODIFIED", bad("7"))]]
    w, _, obs = make(t, inactivity_s=0.2)
    with pytest.raises(WatchSilent):
        await w.list_then_watch()
    assert obs.rejected == {("Pod", "bad-rank"): 3}  # every sighting counted
    out = capsys.readouterr().out
    assert out.count("bad-rank") == 2  # resourceVersion 3 once, resourceVersion 7 once


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        pytest.param(b"{not json\n", StreamCorrupt, id="not-json"),
        pytest.param(b'{"type":"ADDED"}\n', StreamCorrupt, id="no-object"),
        pytest.param(b'{"type":"WHAT","object":{}}\n', StreamCorrupt, id="unknown-type"),
        pytest.param(line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"}), ResourceGone, id="error-410"),
        pytest.param(line("ERROR", {"kind": "Status", "code": 500, "reason": "x"}), KubeApiError, id="error-500"),
    ],
)
async def test_bad_stream_lines(payload: bytes, error: type[Exception]) -> None:
    t = FakeTransport()
    t.streams = [[payload]]
    w, _, _ = make(t, inactivity_s=5)
    with pytest.raises(error):
        await w.list_then_watch()


async def test_silent_stream_is_replaced_after_the_deadline() -> None:
    t = FakeTransport()
    t.objects = [pod("a", "1")]
    # a stream that sends one event then goes silent, then a healthy one
    t.streams = [[line("MODIFIED", pod("a", "11")), "hang"], [line("MODIFIED", pod("a", "12"))]]
    w, rec, obs = make(t, inactivity_s=0.3)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await w.run(stop, max_iterations=2)
    elapsed = loop.time() - started
    assert obs.restarts[("pods", "inactivity")] == 2
    assert t.watch_rvs == ["10", "11", "12"]  # resumed from the last seen resourceVersion, no relist
    assert t.list_calls == 1
    assert rec.state.pods["ns/a"].resource_version == "12"
    assert elapsed >= 0.6  # two deadlines of 0.3 s


async def test_gone_relists_and_emits_exactly_the_difference() -> None:
    t = FakeTransport()
    t.objects = [pod("a", "1"), pod("b", "2"), pod("c", "3")]
    t.streams = [[line("ERROR", {"kind": "Status", "code": 410})]]
    w, rec, obs = make(t, inactivity_s=0.3)
    # between the 410 and the relist: a deleted, b modified, d added, c unchanged; continue token expires once
    orig = t.watch

    @asynccontextmanager
    async def watch(resource: Resource, *, resource_version: str, timeout_s: int) -> AsyncIterator[Any]:
        if not t.watch_rvs:  # the first stream (which ends in 410) opens: the cluster changes meanwhile
            t.objects = [pod("b", "22"), pod("c", "3"), pod("d", "23")]
            t.list_rv = "30"
            t.expire_continue_once = True
        async with orig(resource, resource_version=resource_version, timeout_s=timeout_s) as c:
            yield c

    t.watch = watch  # type: ignore[method-assign]
    await w.run(asyncio.Event(), max_iterations=2)
    after = rec.summary()[4:]
    assert after == [("MODIFIED", "ns/b", "22"), ("ADDED", "ns/d", "23"), ("DELETED", "ns/a", "1"), ("LISTED", "", "")]
    assert all(c.relist for c in rec.changes[4:])
    assert obs.restarts[("pods", "gone")] == 1
    assert obs.relists["pods"] == 2
    assert t.watch_rvs[-1] == "30"
    assert rec.state.check_indexes() == []


async def test_errors_back_off_and_honour_retry_after() -> None:
    t = FakeTransport()
    t.streams = [api_error(429, "slow down", retry_after=0.4), KubeConnectionError("refused")]
    w, _, obs = make(t, inactivity_s=0.3, backoff_initial_s=0.01, backoff_max_s=0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await w.run(asyncio.Event(), max_iterations=2)
    assert loop.time() - started >= 0.4
    assert obs.restarts[("pods", "error")] == 2


async def test_stop_event_ends_run_promptly() -> None:
    t = FakeTransport()
    t.objects = [pod("a", "1")]
    w, rec, _ = make(t, inactivity_s=60)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    for _ in range(100):
        if w.listed_once:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 2)
    assert w.listed_once
    assert "ns/a" in rec.state.pods


async def test_name_prefix_filters_client_side() -> None:
    t = FakeTransport()
    res = Resource("pods", "Pod", "", "v1", "pods", "ns", name_prefix="keep-")
    t.objects = [pod("keep-1", "1"), pod("drop-1", "2")]
    t.streams = [[line("ADDED", pod("drop-2", "11")), line("ADDED", pod("keep-2", "12"))]]
    w, rec, _ = make(t, resource=res, inactivity_s=0.2)
    with pytest.raises(WatchSilent):
        await w.list_then_watch()
    assert sorted(rec.state.pods) == ["ns/keep-1", "ns/keep-2"]


async def test_writes_that_change_nothing_the_record_holds_are_not_changes() -> None:
    """With the pod converter's `unchanged`, a write of managedFields or the resourceVersion only reaches neither
    the converter nor the sink; a write of anything the record reads (here the phase, then the node) does."""
    touched = pod("a", "6")
    touched["metadata"]["managedFields"] = [{"manager": "kubectl", "time": "2026-01-01T00:00:09Z"}]
    failed = pod("a", "7")
    failed["status"]["phase"] = "Failed"
    moved = pod("a", "8", node="n2")
    moved["status"]["phase"] = "Failed"
    t = FakeTransport()
    t.objects = [pod("a", "5")]
    t.streams = [[line("MODIFIED", touched), line("MODIFIED", failed), line("MODIFIED", moved)]]
    convert = PodConverter()
    converted: list[str] = []

    def counting(obj: dict[str, Any]) -> Any:
        converted.append(obj["metadata"]["resourceVersion"])
        return convert(obj)

    w, rec, obs = make(t, inactivity_s=0.2, unchanged=convert.unchanged)
    w.convert = counting
    with pytest.raises(WatchSilent):
        await w.list_then_watch()
    assert converted == ["5", "7", "8"]
    assert rec.summary() == [("ADDED", "ns/a", "5"), ("LISTED", "", ""), ("MODIFIED", "ns/a", "7"),
                             ("MODIFIED", "ns/a", "8")]  # fmt: skip
    assert obs.events[("pods", "MODIFIED")] == 3  # every write is counted
    assert rec.state.pods["ns/a"].phase == "Failed"
    assert rec.state.pods_by_node == {"n2": {"ns/a"}}
    assert rec.state.check_indexes() == []


async def test_a_relist_converts_only_the_objects_whose_write_the_cache_does_not_hold() -> None:
    t = FakeTransport()
    t.objects = [pod("a", "1"), pod("b", "2"), pod("c", "3")]
    convert = PodConverter()
    converted: list[str] = []

    def counting(obj: dict[str, Any]) -> Any:
        converted.append(obj["metadata"]["name"])
        return convert(obj)

    w, rec, _ = make(t)
    w.convert = counting
    await w.relist()
    t.objects = [pod("a", "1"), pod("b", "7", node="n2"), pod("c", "3", uid="other")]
    await w.relist()
    assert converted == ["a", "b", "c", "b", "c"]  # "a": the same write (UID and resourceVersion) is not read again
    assert [(c.type.value, c.key) for c in rec.changes[4:]] == [("MODIFIED", "ns/b"), ("DELETED", "ns/c"),
                                                                 ("ADDED", "ns/c"), ("LISTED", "")]  # fmt: skip
    assert rec.state.check_indexes() == []


async def test_watch_lines_are_framed_the_same_wherever_the_chunks_are_cut() -> None:
    """The lines inside a chunk are parsed in place and the part after its last newline is carried to the next: cut
    the same stream at every offset (a cut before, on and after each newline, chunks with no newline, blank lines,
    a last line without its newline) and the changes are the same."""
    stream = (
        line("ADDED", pod("a", "11"))
        + b"\n"
        + line("ADDED", pod("b", "12"))
        + line("MODIFIED", pod("a", "13", node="n2"))
        + line("DELETED", pod("b", "14"))
        + line("ADDED", pod("c", "15")).rstrip(b"\n")
    )
    expected = [("ADDED", "ns/a", "11"), ("ADDED", "ns/b", "12"), ("MODIFIED", "ns/a", "13"),
                ("DELETED", "ns/b", "12"), ("ADDED", "ns/c", "15")]  # fmt: skip
    cuts = sorted({*range(0, len(stream), 97), *(i + d for i, b in enumerate(stream) if b == 10 for d in (-1, 0, 1))})
    for width in (len(stream), 7, 300):
        for first in cuts:
            offsets = sorted({0, *(o for o in range(first % width or width, len(stream), width)), first, len(stream)})
            chunks = [stream[a:b] for a, b in itertools.pairwise(offsets) if b > a]
            assert b"".join(chunks) == stream
            t = FakeTransport()
            t.streams = [chunks]
            w, rec, _ = make(t)
            w.resource_version = "10"
            await w.watch_once()
            assert rec.summary() == expected, (width, first)


async def test_a_burst_of_watch_lines_gives_the_loop_a_turn_every_few_lines() -> None:
    """One chunk of 200 pod events (aiohttp hands over everything buffered at once): a task made ready when the
    burst starts runs after at most LINES_PER_TURN of them, not after the whole burst; the changes are the same
    and in order. Before the turns, the other task waited for all 200 (a fault read by another watch waited
    behind up to 54 ms of pod events in a bench_e2e run)."""
    from agent.kube.watch import LINES_PER_TURN

    n = 200
    t = FakeTransport()
    t.streams = [[b"".join(line("ADDED", pod(f"p{i}", str(11 + i))) for i in range(n))]]
    w, rec, _ = make(t)
    w.resource_version = "10"
    seen_by_other: list[int] = []

    async def other() -> None:
        seen_by_other.append(len(rec.changes))

    watching = asyncio.ensure_future(w.watch_once())
    await asyncio.sleep(0)  # the watch opens its stream and starts on the burst in its first step
    assert rec.changes  # the burst is being applied
    other_task = asyncio.ensure_future(other())
    await watching
    await other_task
    assert seen_by_other[0] <= 2 * LINES_PER_TURN < n
    assert [k for _, k, _ in rec.summary()] == [f"ns/p{i}" for i in range(n)]
    assert w.resource_version == str(10 + n)
