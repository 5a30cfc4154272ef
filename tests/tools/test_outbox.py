"""Outbox: order, durability across reopen and SIGKILL, torn and damaged records, limits and bad setups."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.factories import outbox_message as msg

from agent.sinks.events import Message
from agent.sinks.outbox import Batch, Outbox, OutboxError, OutboxFull, decode_body, encode_record


def drain(box: Outbox, chunk: int = 7) -> list[str]:
    ids: list[str] = []
    while True:
        batch = box.read(chunk)
        if not batch.messages:
            return ids
        ids += [m.event_id for m in batch.messages]
        box.ack(batch)


_OPENED: list[Outbox] = []


@pytest.fixture(autouse=True)
def _close_boxes() -> Iterator[None]:
    yield
    while _OPENED:
        _OPENED.pop().close()


def opened(path: Path, **kw: int) -> Outbox:
    box = Outbox(path, **kw)  # type: ignore[arg-type]
    box.open()
    _OPENED.append(box)
    return box


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("seg-*.log"))


def test_record_round_trip() -> None:
    m = msg(3)
    rec = encode_record(m)
    assert decode_body(rec[12:]) == m


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x06faults\x02", id="truncated"),
        pytest.param(b"\x03bad\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", id="unknown-stream"),
        pytest.param(encode_record(msg(1))[12:] + b"x", id="trailing-bytes"),
    ],
)
def test_decode_rejects_malformed_bodies(body: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):
        decode_body(body)


def test_encode_rejects_oversized_fields() -> None:
    m = msg(1)
    too_long = Message(m.stream, m.key, m.value, m.headers, "x" * 300, m.event_type)
    with pytest.raises(OutboxError) as info:
        encode_record(too_long)
    assert info.value.retriable is False


@pytest.mark.parametrize("segment_bytes", [200, 1000, 16 * 1024 * 1024])
def test_append_read_ack_keeps_order_across_segments(tmp_path: Path, segment_bytes: int) -> None:
    box = opened(tmp_path, segment_bytes=segment_bytes)
    for start in range(0, 100, 10):
        box.append([msg(i) for i in range(start, start + 10)])
    assert box.pending == 100
    assert drain(box) == [f"id-{i}" for i in range(100)]
    assert box.pending == 0
    assert box.size_bytes == 0
    # Consumed segments are deleted: at most the one being written stays.
    assert len(segments(tmp_path)) == 1
    box.close()


def test_reopen_resumes_after_the_last_ack(tmp_path: Path) -> None:
    box = opened(tmp_path, segment_bytes=500)
    box.append([msg(i) for i in range(20)])
    first = box.read(5)
    box.ack(first)
    box.read(5)  # read, never acknowledged: must come again
    box.close()
    again = opened(tmp_path, segment_bytes=500)
    assert again.pending == 15
    assert drain(again) == [f"id-{i}" for i in range(5, 20)]


def test_rewind_rereads_unacknowledged(tmp_path: Path) -> None:
    box = opened(tmp_path)
    box.append([msg(i) for i in range(6)])
    box.ack(box.read(2))
    assert [m.event_id for m in box.read(3).messages] == ["id-2", "id-3", "id-4"]
    box.rewind()
    assert drain(box) == [f"id-{i}" for i in range(2, 6)]


def test_appends_during_replay_come_after(tmp_path: Path) -> None:
    box = opened(tmp_path, segment_bytes=300)
    box.append([msg(i) for i in range(5)])
    got = [m.event_id for m in box.read(3).messages]
    box.append([msg(i) for i in range(5, 9)])
    got += drain(box)
    assert got == [f"id-{i}" for i in range(9)]


def _last_segment(path: Path) -> Path:
    return segments(path)[-1]


@pytest.mark.parametrize(
    ("damage", "survivors"),
    [
        pytest.param(lambda b: b[:-1], 9, id="last-byte-missing"),
        pytest.param(lambda b: b[:-60], 9, id="body-cut"),
        pytest.param(lambda b: b[: -(len(encode_record(msg(9))) - 5)], 9, id="header-cut"),
        pytest.param(lambda b: b[:-10] + b"\x00" * 10, 9, id="tail-zeroed-bad-crc"),
        pytest.param(lambda b: b + b"\x00" * 4096, 10, id="zero-fill-after-last-record"),
        pytest.param(lambda b: b + b"FAOB\x00\x00", 10, id="next-header-torn"),
    ],
)
def test_torn_last_record_is_cut_and_the_rest_kept(tmp_path: Path, damage: object, survivors: int) -> None:
    box = opened(tmp_path)
    box.append([msg(i) for i in range(10)])
    box.close()
    seg = _last_segment(tmp_path)
    seg.write_bytes(damage(seg.read_bytes()))  # type: ignore[operator]
    again = opened(tmp_path)
    assert again.pending == survivors
    again.append([msg(100)])  # appends continue cleanly after the cut
    assert drain(again) == [f"id-{i}" for i in range(survivors)] + ["id-100"]
    assert again.corrupt_records == 0


@pytest.mark.parametrize(
    "where",
    [pytest.param("crc", id="body-byte-flipped"), pytest.param("magic", id="magic-overwritten")],
)
def test_damaged_record_in_the_middle_is_skipped_and_counted(tmp_path: Path, where: str) -> None:
    box = opened(tmp_path)
    box.append([msg(i) for i in range(10)])
    box.close()
    seg = _last_segment(tmp_path)
    data = bytearray(seg.read_bytes())
    rec = len(encode_record(msg(0)))
    at = 4 * rec + (40 if where == "crc" else 0)
    data[at] ^= 0xFF
    seg.write_bytes(bytes(data))
    again = opened(tmp_path)
    assert drain(again) == [f"id-{i}" for i in range(10) if i != 4]
    assert again.corrupt_records == 1


def test_full_outbox_refuses_the_whole_batch(tmp_path: Path) -> None:
    one = len(encode_record(msg(0)))
    box = opened(tmp_path, max_bytes=one * 5)
    box.append([msg(i) for i in range(4)])
    with pytest.raises(OutboxFull) as info:
        box.append([msg(i) for i in range(4, 6)])
    assert info.value.retriable is True
    assert "full" in str(info.value)
    assert box.pending == 4
    box.append([msg(4)])
    assert drain(box) == [f"id-{i}" for i in range(5)]


@pytest.mark.parametrize(
    ("cursor", "match"),
    [
        pytest.param("garbage", "malformed cursor", id="garbage"),
        pytest.param("1 2 3\n", "malformed cursor", id="three-fields"),
        pytest.param("", "malformed cursor", id="empty"),
    ],
)
def test_broken_cursor_is_a_clear_error(tmp_path: Path, cursor: str, match: str) -> None:
    (tmp_path / "cursor").write_text(cursor)
    with pytest.raises(OutboxError, match=match) as info:
        Outbox(tmp_path).open()
    assert info.value.retriable is False


def test_unusable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutboxError, match="cannot use the directory"):
        Outbox(blocker / "outbox").open()


def test_use_before_open_is_an_error(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    with pytest.raises(OutboxError, match="not open"):
        box.append([msg(1)])
    with pytest.raises(OutboxError, match="not open"):
        box.read(1)


def test_stale_ack_is_ignored(tmp_path: Path) -> None:
    box = opened(tmp_path)
    box.append([msg(i) for i in range(4)])
    first = box.read(2)
    second = box.read(2)
    box.ack(second)
    box.ack(Batch(first.messages, first.end))
    assert box.pending == 0
    assert drain(box) == []


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from tests.support.factories import outbox_message as msg
    from agent.sinks.outbox import Outbox
    box = Outbox(sys.argv[1], segment_bytes=4096)
    box.open()
    for i in range(0, 10_000, 10):
        box.append([msg(n) for n in range(i, i + 10)])
        print(i + 10, flush=True)
        if i + 10 == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("kill_after", [10, 370])
def test_sigkill_during_appends_loses_nothing_that_was_acknowledged(tmp_path: Path, kill_after: int) -> None:
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=root), str(tmp_path / "box"), str(kill_after)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    acknowledged = int(proc.stdout.split()[-1])
    box = opened(tmp_path / "box", segment_bytes=4096)
    ids = drain(box, chunk=50)
    assert ids == [f"id-{i}" for i in range(len(ids))]
    assert len(ids) >= acknowledged
    assert os.listdir(tmp_path / "box")


@pytest.mark.parametrize("segment_bytes", [200, 16 * 1024 * 1024])
def test_ack_to_a_position_append_returned_survives_a_reopen(tmp_path: Path, segment_bytes: int) -> None:
    """The publisher's direct path: events appended, sent from memory, acknowledged by the positions append()
    returned (no read); after a crash only the unacknowledged rest is replayed."""
    box = opened(tmp_path, segment_bytes=segment_bytes)
    ends = box.append([msg(i) for i in range(5)]) + box.append([msg(i) for i in range(5, 12)])
    assert len(ends) == 12
    assert ends == sorted(ends)
    assert ends[-1] == box.end
    box.ack_to(ends[6], 7)
    assert box.pending == 5
    box.ack_to(ends[2], 3)  # an older position changes nothing
    assert box.pending == 5
    box.close()
    again = opened(tmp_path, segment_bytes=segment_bytes)
    assert again.pending == 5
    assert drain(again) == [f"id-{i}" for i in range(7, 12)]
