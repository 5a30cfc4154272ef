"""One process per outbox directory, and the take-over of a gone process's outbox.

Regression (found by a new-user trial): two agent processes given one outbox directory (the testbed's env for
every agent; deploy/'s two replicas on one shared volume) both opened it: the second sent the first's pending
events while the first still counted them, and each wrote the cursor and appended from its own view."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from test_outbox import drain, msg, opened

from agent.settings import KafkaSettings
from agent.sinks.kafka import KafkaPublisher
from agent.sinks.kafka.peers import adopt_running
from agent.sinks.outbox import Outbox, OutboxInUse, adopt


def test_a_second_outbox_on_the_same_directory_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    first = opened(tmp_path / "box")
    first.append([msg(1)])
    with pytest.raises(OutboxInUse, match=r"in use by another agent process \(pid \d+ host .+\).*outbox_dir"):
        Outbox(tmp_path / "box").open()
    first.close()
    again = opened(tmp_path / "box")  # closed: the next process may take it
    assert drain(again) == ["id-1"]


def test_another_process_is_refused_while_the_holder_lives_and_takes_it_once_the_holder_is_gone(tmp_path: Path) -> None:
    box = tmp_path / "box"
    script = textwrap.dedent(f"""
        import sys
        from agent.sinks.outbox import Outbox
        held = Outbox({str(box)!r})
        held.open()
        print("open", flush=True)
        sys.stdin.read()
    """)
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "open"
            with pytest.raises(OutboxInUse, match=f"pid {holder.pid} "):
                Outbox(box).open()
        finally:
            holder.kill()
    opened(box)  # the holder is gone (killed: no close), and so is its lock


def test_adopt_moves_a_gone_process_events_in_order_and_deletes_its_directory(tmp_path: Path) -> None:
    gone = opened(tmp_path / "peers" / "pod-a")
    gone.append([msg(i) for i in range(5)])
    gone.ack(gone.read(2))  # two were delivered before it died
    gone.close()
    own = opened(tmp_path / "peers" / "pod-b")
    own.append([msg(10)])
    assert adopt(own, tmp_path / "peers" / "pod-a", batch=2) == 3
    assert not (tmp_path / "peers" / "pod-a").exists()
    assert drain(own) == ["id-10", "id-2", "id-3", "id-4"]


def test_adopt_leaves_an_outbox_a_live_process_holds(tmp_path: Path) -> None:
    alive = opened(tmp_path / "peers" / "pod-a")
    alive.append([msg(1)])
    own = opened(tmp_path / "peers" / "pod-b")
    assert adopt(own, tmp_path / "peers" / "pod-a") == 0
    assert own.pending == 0
    assert drain(alive) == ["id-1"]


def test_adopt_never_touches_a_directory_that_is_not_an_outbox(tmp_path: Path) -> None:
    """A volume's root may hold other folders (lost+found): no file is made or deleted there."""
    other = tmp_path / "peers" / "lost+found"
    other.mkdir(parents=True)
    (other / "keep").write_text("x")
    own = opened(tmp_path / "peers" / "pod-b")
    assert adopt(own, other) == 0
    assert sorted(p.name for p in other.iterdir()) == ["keep"]


def test_adopt_deletes_only_the_outbox_files_of_a_gone_process(tmp_path: Path) -> None:
    gone = opened(tmp_path / "peers" / "pod-a")
    gone.append([msg(1)])
    gone.close()
    (tmp_path / "peers" / "pod-a" / "notes.txt").write_text("someone's")
    own = opened(tmp_path / "peers" / "pod-b")
    assert adopt(own, tmp_path / "peers" / "pod-a") == 1
    assert sorted(p.name for p in (tmp_path / "peers" / "pod-a").iterdir()) == ["notes.txt"]


def test_an_adoption_cut_short_while_deleting_sends_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (found in review): the files went in name order, cursor and lock first; a crash right after
    the first deletion left the segments with no cursor, and the next adopter sent every event again. Segments go
    first now, so what a crash can leave is an outbox with its cursor at its end."""
    gone = opened(tmp_path / "peers" / "pod-a")
    gone.append([msg(i) for i in range(5)])
    gone.close()
    own = opened(tmp_path / "peers" / "pod-b")
    real_unlink = Path.unlink

    def crash(self: Path, missing_ok: bool = False) -> None:
        if self.name.startswith("seg-"):  # the process dies when it comes to the segments
            raise OSError(f"the process died before deleting {self.name}")
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", crash)
    with pytest.raises(OSError, match="died"):
        adopt(own, tmp_path / "peers" / "pod-a")
    monkeypatch.setattr(Path, "unlink", real_unlink)
    assert own.pending == 5  # moved before the crash
    assert adopt(own, tmp_path / "peers" / "pod-a") == 0  # nothing sent twice
    assert drain(own) == [f"id-{i}" for i in range(5)]


async def test_the_old_layout_outbox_at_the_peers_folders_root_is_taken_over(tmp_path: Path) -> None:
    """Regression (found in review): versions before per-pod folders kept the outbox at the volume's root, which
    is the peers folder now; what it still held was never sent."""
    root = Outbox(tmp_path / "outbox")
    root.open()
    root.append([msg(1), msg(2)])
    root.close()
    (tmp_path / "outbox" / "lock").unlink()  # the old versions made none
    settings = KafkaSettings.model_validate(
        {"outbox_dir": str(tmp_path / "outbox" / "pod-b"), "outbox_peers_dir": str(tmp_path / "outbox"),
         "enabled": False}
    )  # fmt: skip
    pub = KafkaPublisher(settings)
    await pub.start()
    try:
        assert pub.outbox.pending == 2
    finally:
        await pub.stop()
    assert sorted(p.name for p in (tmp_path / "outbox").iterdir()) == ["pod-b"]
    assert drain(opened(tmp_path / "outbox" / "pod-b")) == ["id-1", "id-2"]


async def test_a_folder_that_fails_while_taken_over_does_not_stop_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peers = tmp_path / "outbox"
    (peers / "pod-a").mkdir(parents=True)

    def vanished(*args: object, **kwargs: object) -> int:
        raise FileNotFoundError("seg-00000000000000000001.log")

    monkeypatch.setattr("agent.sinks.kafka.peers.adopt", vanished)
    settings = KafkaSettings.model_validate(
        {"outbox_dir": str(peers / "pod-b"), "outbox_peers_dir": str(peers), "enabled": False}
    )
    pub = KafkaPublisher(settings)
    await pub.start()
    await pub.stop()


async def test_a_starting_publisher_sends_what_a_gone_replica_left_before_its_own(tmp_path: Path) -> None:
    peers = tmp_path / "outbox"
    gone = Outbox(peers / "agent-0")
    gone.open()
    gone.append([msg(1), msg(2)])
    gone.close()
    alive = opened(peers / "agent-1")
    alive.append([msg(3)])
    settings = KafkaSettings.model_validate(
        {"outbox_dir": str(peers / "agent-2"), "outbox_peers_dir": str(peers), "enabled": False}
    )
    pub = KafkaPublisher(settings)
    await pub.start()
    try:
        assert pub.outbox.pending == 2  # agent-0's; agent-1 still runs
        assert sorted(p.name for p in peers.iterdir()) == ["agent-1", "agent-2"]
    finally:
        await pub.stop()
    assert drain(opened(peers / "agent-2")) == ["id-1", "id-2"]


async def _until(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    for _ in range(int(seconds / 0.02)):
        if check():
            return True
        await asyncio.sleep(0.02)
    return check()


async def test_a_running_publisher_takes_over_a_replica_that_dies_after_it_started(tmp_path: Path) -> None:
    """Issue 37, 2: a dead replica's events waited for a new process to start (59 s in the trial; never with a
    replica that stays dead). A running publisher looks at the peers folder every outbox_adopt_interval_s and
    sends what a gone replica left, through its own commit path; a live one is left alone."""
    peers = tmp_path / "outbox"
    settings = KafkaSettings.model_validate(
        {"outbox_dir": str(peers / "agent-1"), "outbox_peers_dir": str(peers), "enabled": False,
         "outbox_adopt_interval_s": 0.05}
    )  # fmt: skip
    pub = KafkaPublisher(settings)
    await pub.start()
    try:
        alive = opened(peers / "agent-2")  # another replica that runs: held
        alive.append([msg(9)])
        dying = opened(peers / "agent-0")
        dying.append([msg(1), msg(2), msg(3)])
        dying.ack(dying.read(1))  # one was delivered before it died
        await asyncio.sleep(0.2)
        assert pub.outbox.pending == 0  # agent-0 still holds its outbox
        dying.close()  # it dies: its lock goes with it
        assert await _until(lambda: pub.outbox.pending == 2), pub.outbox.pending
        assert await _until(lambda: not (peers / "agent-0").exists())
        assert sorted(p.name for p in peers.iterdir()) == ["agent-1", "agent-2"]
        assert alive.pending == 1  # the live one is untouched
        alive.close()
    finally:
        await pub.stop()
    assert drain(opened(peers / "agent-1")) == ["id-2", "id-3"]


async def test_a_take_over_the_own_outbox_cannot_hold_leaves_the_rest_for_later(tmp_path: Path) -> None:
    """The commit path refuses what does not fit (kafka.outbox_max_bytes): the gone replica's events that were
    not written stay in its outbox (never acknowledged there), and are taken once there is room."""
    peers = tmp_path / "outbox"
    gone = opened(peers / "agent-0")
    gone.append([msg(1), msg(2)])
    settings = KafkaSettings.model_validate(
        {"outbox_dir": str(peers / "agent-1"), "outbox_peers_dir": str(peers), "enabled": False}
    )
    pub = KafkaPublisher(settings, outbox=Outbox(peers / "agent-1", max_bytes=1))
    await pub.start()
    try:
        gone.close()
        assert await adopt_running(pub.outbox, peers / "agent-0", pub._commit_adopted, pub._stopping) == 0
        left = opened(peers / "agent-0")
        assert left.pending == 2
        left.close()
    finally:
        await pub.stop()
