"""Recording the watches (agent.kube.record): line format, the watcher's tap, rotation, size and age bounds."""

from __future__ import annotations

import asyncio
import gzip
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.fakes import FakeTransport
from support.polling import eventually
from test_kube_watch import PODS, line, pod

from agent.kube.record import Recorder, RecordError, Segment, list_segments, read_recording, record_resource, retention
from agent.kube.watch import Resource, Watcher
from agent.settings import RecordSettings
from agent.sources.pods import PodConverter
from agent.sources.state import ClusterState

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class StepClock:
    """A wall clock moved by hand."""

    def __init__(self, at: datetime = T0) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


def settings(**kw: Any) -> RecordSettings:
    return RecordSettings.model_validate(kw)


def test_line_format_and_round_trip(tmp_path: Path) -> None:
    clock = StepClock()
    rec = Recorder(tmp_path / "rec", settings(), clock=clock)
    rec.open()
    tap = rec.tap(PODS)
    tap("ADDED", pod("a", "1"))
    clock.at += timedelta(milliseconds=1500)
    tap("LISTED", {})
    assert rec.flush() == 2
    [seg] = list_segments(tmp_path / "rec")
    assert seg.path.name == f"rec-{int(T0.timestamp() * 1000):013d}-000000.jsonl.gz"
    lines = list(read_recording([tmp_path / "rec"]))
    t0 = int(T0.timestamp() * 1000)
    assert lines == [
        {"t": t0, "type": "ADDED", "resource": "pods", "source": "pods@ns", "object": pod("a", "1")},
        {"t": t0 + 1500, "type": "LISTED", "resource": "pods", "source": "pods@ns", "object": {}},
    ]


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param(Resource("pods", "Pod", "", "v1", "pods", "ns"), "pods", id="pods"),
        pytest.param(Resource("deviceinfo", "ConfigMap", "", "v1", "configmaps", "kube-system"), "configmaps", id="cm"),
        pytest.param(Resource("vcjobs", "Job", "batch.volcano.sh", "v1alpha1", "jobs"), "vcjobs", id="vcjobs"),
        pytest.param(Resource("acjobs", "AscendJob", "mindxdl.gitee.com", "v1", "ascendjobs"), "acjobs", id="acjobs"),
    ],
)
def test_resource_names(resource: Resource, expected: str) -> None:
    assert record_resource(resource) == expected


async def test_watcher_taps_list_items_listed_and_events_but_not_bookmarks(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, settings(), clock=StepClock())
    rec.open()
    t = FakeTransport()
    t.objects = [pod("a", "5"), pod("b", "6")]
    bookmark = {"kind": "Pod", "metadata": {"resourceVersion": "12"}}
    t.streams = [[line("MODIFIED", pod("a", "11")), line("BOOKMARK", bookmark), line("DELETED", pod("b", "13"))]]
    state = ClusterState()
    w = Watcher(t, PODS, PodConverter(()), state.store("pods"), state.apply, tap=rec.tap(PODS))
    await w.relist()
    await w.watch_once()
    rec.flush()
    got = [(x["type"], x["object"].get("metadata", {}).get("name")) for x in read_recording([tmp_path])]
    assert got == [("ADDED", "a"), ("ADDED", "b"), ("LISTED", None), ("MODIFIED", "a"), ("DELETED", "b")]


def test_rotation_by_size_and_deletion_by_total_size(tmp_path: Path) -> None:
    clock = StepClock()
    rec = Recorder(tmp_path, settings(segment_bytes=4096, max_bytes=3 * 4096 + 2048), clock=clock)
    rec.open()
    tap = rec.tap(PODS)
    rnd = os.urandom  # incompressible payloads, so sizes are predictable
    for i in range(40):
        clock.at += timedelta(seconds=1)
        tap("MODIFIED", {"metadata": {"name": f"p{i}"}, "blob": rnd(1500).hex()})
        rec.flush()
    segs = list_segments(tmp_path)
    assert len(segs) >= 2
    assert rec.segments_deleted > 0
    # every closed segment reached the size; the total stays under the bound plus one segment being written
    assert all(s.size >= 4096 for s in segs[:-1])
    assert sum(s.size for s in segs) <= 3 * 4096 + 2048 + 4096
    names = [x["object"]["metadata"]["name"] for x in read_recording([tmp_path])]
    assert names[-1] == "p39"  # the newest lines survive, the oldest went
    assert names == sorted(names, key=lambda n: int(n[1:]))
    assert names[0] != "p0"


@pytest.mark.parametrize(
    ("sizes_starts", "now_ms", "max_bytes", "max_age_s", "expected"),
    [
        pytest.param([(10, 0), (10, 1000), (10, 2000)], 2500, 100, 10, [], id="within-bounds"),
        pytest.param([(10, 0), (10, 1000), (10, 2000)], 2500, 25, 10, [0], id="size-deletes-oldest"),
        pytest.param([(10, 0), (10, 1000), (10, 2000)], 2500, 5, 10, [0, 1], id="never-the-newest"),
        pytest.param([(10, 0), (10, 1000), (10, 2000)], 12_500, 100, 10, [0, 1], id="age-by-successor-start"),
        pytest.param([(10, 0), (10, 1000), (10, 2000)], 11_500, 100, 10, [0], id="age-keeps-segment-with-young-lines"),
    ],
)
def test_retention(
    sizes_starts: list[tuple[int, int]], now_ms: int, max_bytes: int, max_age_s: float, expected: list[int]
) -> None:
    segs = [Segment(Path(f"s{i}"), start, i, size) for i, (size, start) in enumerate(sizes_starts)]
    doomed = retention(segs, now_ms=now_ms, max_bytes=max_bytes, max_age_s=max_age_s)
    assert [s.seq for s in doomed] == expected


def test_age_bound_deletes_old_segments(tmp_path: Path) -> None:
    clock = StepClock()
    rec = Recorder(tmp_path, settings(segment_bytes=4096, max_age_s=60), clock=clock)
    rec.open()
    tap = rec.tap(PODS)
    for i in range(6):
        tap("MODIFIED", {"metadata": {"name": f"p{i}"}, "blob": os.urandom(6000).hex()})
        rec.flush()
        clock.at += timedelta(seconds=30)
    starts = [s.start_ms for s in list_segments(tmp_path)]
    now_ms = int(clock.at.timestamp() * 1000)
    # a segment survives only if its successor started within the last 60 s (or it is the newest)
    assert all(b >= now_ms - 60_000 - 30_000 for b in starts[1:])
    assert rec.segments_deleted >= 2


def test_buffer_bound_drops_and_counts(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, settings(buffer_max_bytes=1 << 16), clock=StepClock())
    rec.open()
    tap = rec.tap(PODS)
    for i in range(100):
        tap("MODIFIED", {"metadata": {"name": f"p{i}"}, "blob": "x" * 1000})
    assert rec.dropped > 0
    assert rec.lines + rec.dropped == 100
    assert rec.flush() == rec.lines


def test_a_new_recorder_continues_the_sequence(tmp_path: Path) -> None:
    for _ in range(2):
        rec = Recorder(tmp_path, settings(), clock=StepClock())
        rec.open()
        rec.tap(PODS)("ADDED", pod("a", "1"))
        rec.flush()
    assert [s.seq for s in list_segments(tmp_path)] == [0, 1]


def test_bad_folders_fail_at_open_with_the_path(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(RecordError, match="exists and is not a folder"):
        Recorder(a_file, settings()).open()
    with pytest.raises(RecordError, match="parent folder does not exist"):
        Recorder(tmp_path / "missing" / "rec", settings()).open()
    with pytest.raises(RecordError, match="cannot create it"):
        Recorder(a_file / "rec", settings()).open()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"not json\n", "not JSON", id="not-json"),
        pytest.param(b'{"t": "x", "type": "ADDED", "resource": "pods", "object": {}}\n', "'t' must", id="t"),
        pytest.param(b'{"t": 1, "type": "BOOKMARK", "resource": "pods", "object": {}}\n', "'type' must", id="type"),
        pytest.param(b'{"t": 1, "type": "ADDED", "resource": "", "object": {}}\n', "'resource' must", id="res"),
        pytest.param(b'{"t": 1, "type": "ADDED", "resource": "pods", "object": []}\n', "'object' must", id="obj"),
    ],
)
def test_read_recording_names_file_and_line(tmp_path: Path, content: bytes, message: str) -> None:
    f = tmp_path / "rec-0000000000001-000000.jsonl.gz"
    good = orjson.dumps({"t": 1, "type": "LISTED", "resource": "pods", "object": {}}) + b"\n"
    f.write_bytes(gzip.compress(good + content))
    with pytest.raises(RecordError, match=rf"{f.name}:2: {message}"):
        list(read_recording([f]))


async def test_run_flushes_in_the_background_and_at_stop(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, settings(flush_interval_s=0.05), clock=StepClock())
    rec.open()
    stop = asyncio.Event()
    # the file appears before its first member is written (and a loaded machine's worker thread may take
    # seconds): wait for the background flush itself to return, not for the file
    flushed: list[int] = []  # lines each flush wrote
    flush = rec.flush

    def counted() -> int:
        flushed.append(flush())
        return flushed[-1]

    rec.flush = counted  # type: ignore[method-assign]
    task = asyncio.create_task(rec.run(stop))
    rec.tap(PODS)("ADDED", pod("a", "1"))
    await eventually(lambda: sum(flushed), what="a background flush of the first line", timeout_s=30, interval_s=0.02)
    assert not stop.is_set()
    assert len(list(read_recording([tmp_path]))) == 1
    rec.tap(PODS)("ADDED", pod("b", "1"))
    stop.set()
    await task
    assert len(list(read_recording([tmp_path]))) == 2
