"""An append (an event being made durable before the agent acts on it) never waits for a cursor write.

The direct path acknowledges delivered events by writing the outbox cursor (write, fsync, rename, fsync of the
directory). Regression (issue 19): that ran under the append lock, so a fault's fault.detected committed while
the acknowledgement of earlier events was being written waited for two more fsyncs before the restart could go
out (seen as a long tail of fault → Kafka and fault → Command on a loaded testbed)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from support.factories import outbox_message as msg

from agent.sinks.outbox import Outbox


def test_an_append_is_not_held_up_by_a_cursor_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Outbox(tmp_path / "outbox")
    box.open()
    try:
        ends = box.append([msg(1), msg(2)])
        writing, release = threading.Event(), threading.Event()
        real = box._write_cursor

        def slow_cursor(pos: object) -> None:
            writing.set()
            release.wait(10)
            real(pos)  # type: ignore[arg-type]

        monkeypatch.setattr(box, "_write_cursor", slow_cursor)
        acker = threading.Thread(target=box.ack_to, args=(ends[0], 1))
        acker.start()
        assert writing.wait(5)
        appended: list[object] = []
        appender = threading.Thread(target=lambda: appended.extend(box.append([msg(3)])))
        appender.start()
        appender.join(2)
        done_while_cursor_written = not appender.is_alive()
        release.set()
        acker.join(5)
        appender.join(5)
        assert done_while_cursor_written
        assert len(appended) == 1
        assert box.pending == 2  # 3 appended, 1 acknowledged
    finally:
        box.close()
