"""One process per outbox directory, and the take-over of a gone process's outbox.

Regression (found by a new-user trial): two agent processes given one outbox directory (the testbed's env for
every agent; deploy/'s two replicas on one shared volume) both opened it: the second sent the first's pending
events while the first still counted them, and each wrote the cursor and appended from its own view."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_outbox import drain, msg, opened

from agent.settings import KafkaSettings
from agent.sinks.kafka import KafkaPublisher
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
