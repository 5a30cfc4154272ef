"""The outbox itself (:class:`Outbox`): an ordered, durable queue of event records in segment files, appended by
the publisher's commit, read and acknowledged by its delivery paths. The record format is
:mod:`agent.sinks.outbox.records`; the cursor and lock files :mod:`agent.sinks.outbox.files`. See
:mod:`agent.sinks.outbox` for the directory's layout and the crash-safety guarantees.
"""

from __future__ import annotations

import contextlib
import os
import threading
import zlib
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import structlog

from agent.sinks.events import Message
from agent.sinks.outbox.errors import OutboxError, OutboxFull
from agent.sinks.outbox.files import SEGMENT_RE, fsync_dir, load_cursor, segment_path, take_lock, write_cursor
from agent.sinks.outbox.records import HEAD, MAGIC, MAX_BODY, Batch, Position, decode_body, encode_record

log = structlog.get_logger(__name__)


class Outbox:
    """An ordered, durable queue of :class:`~agent.sinks.events.Message` in a directory.

    Usage: ``open()``, then ``append(batch)`` from the spill path and ``read(n)`` / ``ack(batch)`` (or
    ``rewind()`` after a failed send) from the replay path; ``close()`` at the end.

    Args:
        directory: created if missing (with parents).
        segment_bytes: roll to a new segment file after this many bytes (default 16 MiB).
        max_bytes: refuse appends beyond this total size (default 1 GiB); see :class:`OutboxFull`.
        fsync: fsync after each append and cursor update; only benchmarks of the format turn it off.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = 16 * 1024 * 1024,
        max_bytes: int = 1024 * 1024 * 1024,
        fsync: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        self.fsync = fsync
        self.corrupt_records = 0
        self._lock = threading.Lock()
        self._cursor_lock = threading.Lock()  # taken before _lock: one cursor write at a time
        self._pending = 0
        self._bytes = 0
        self._cursor = Position(0, 0)
        self._read = Position(0, 0)
        self._unacked: deque[tuple[Position, int]] = deque()  # (end, count) of batches read, not acknowledged
        self._segments: list[int] = []
        self._writer: BinaryIO | None = None
        self._reader: BinaryIO | None = None
        self._reader_segment = -1
        self._opened = False
        self._counting = False
        self._lock_file: BinaryIO | None = None

    # --- state ----------------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Events appended and not yet acknowledged."""
        return self._pending

    @property
    def size_bytes(self) -> int:
        """Bytes of the events not yet acknowledged (segment files minus the delivered part of the first one)."""
        return max(0, self._bytes - self._cursor.offset)

    def __len__(self) -> int:
        return self._pending

    # --- lifecycle ------------------------------------------------------------------------------------

    def open(self) -> None:
        """Create or recover the directory: read the cursor, cut a torn last record, count pending events.

        Raises:
            OutboxError: the directory cannot be created or written, or the cursor file is unreadable.
        """
        with self._lock:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise OutboxError(f"outbox {self.directory}: cannot use the directory: {e}", retriable=False) from e
            self._lock_file = take_lock(self.directory)
            try:
                self._recover()
            except BaseException:
                self._release_lock()  # not opened: the next open, of this process or another, may take it
                raise
            self._opened = True
            if self._pending:
                log.info("outbox recovered", directory=str(self.directory), pending=self._pending, bytes=self._bytes)

    def _recover(self) -> None:
        """:meth:`open`'s work once the lock is held: the cursor, the segments, a torn tail cut, the writer."""
        try:
            self._segments = sorted(
                int(m.group(1)) for p in self.directory.iterdir() if (m := SEGMENT_RE.match(p.name))
            )
            for stale in self.directory.glob("cursor.tmp*"):
                stale.unlink()
        except OSError as e:
            raise OutboxError(f"outbox {self.directory}: cannot use the directory: {e}", retriable=False) from e
        self._cursor = load_cursor(self.directory, Position(self._segments[0] if self._segments else 0, 0))
        # Segments before the cursor's were fully delivered (a crash after the cursor write, before unlink).
        for seg in [s for s in self._segments if s < self._cursor.segment]:
            self._unlink(seg)
        if not self._segments:
            self._segments = [max(self._cursor.segment, 1)]
            self._cursor = Position(self._segments[0], 0)
            self._create_segment(self._segments[0])
        elif self._cursor.segment not in self._segments:
            self._cursor = Position(self._segments[0], 0)
        self._repair_tail()
        self._pending = self._count_from(self._cursor)
        self._bytes = sum(self._path(s).stat().st_size for s in self._segments)
        self._read = self._cursor
        self._unacked.clear()
        try:
            self._writer = open(self._path(self._segments[-1]), "ab")  # noqa: SIM115 (kept open)
        except OSError as e:
            raise OutboxError(f"outbox {self.directory}: cannot open for append: {e}", retriable=True) from e

    def close(self) -> None:
        """Close the files; pending events stay on disk for the next :meth:`open`."""
        with self._lock:
            for f in (self._writer, self._reader):
                if f is not None:
                    f.close()
            self._writer = self._reader = None
            self._reader_segment = -1
            self._opened = False
            self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing the file releases the flock
            self._lock_file = None

    # --- append ---------------------------------------------------------------------------------------

    def append(self, messages: Sequence[Message]) -> list[Position]:
        """Write `messages` in order after everything already in the outbox; durable (fsync) on return.

        Returns the position just after each message's record (what :meth:`ack_to` takes), in order.

        Raises:
            OutboxFull: the batch would exceed ``max_bytes``; nothing was written.
            OutboxError: I/O error (disk full: retriable); the partial write is cut off again.
        """
        if not messages:
            return []
        records = [encode_record(m) for m in messages]
        data = b"".join(records)
        with self._lock:
            self._check_open()
            if self._bytes + len(data) > self.max_bytes:
                raise OutboxFull(
                    f"outbox {self.directory}: full ({self._bytes} of {self.max_bytes} bytes, "
                    f"{self._pending} events); {len(messages)} events not written"
                )
            assert self._writer is not None
            if self._writer.tell() >= self.segment_bytes:
                self._roll()
            start = self._writer.tell()
            try:
                self._writer.write(data)
                self._writer.flush()
                if self.fsync:
                    os.fsync(self._writer.fileno())
            except OSError as e:
                with contextlib.suppress(OSError):
                    self._writer.truncate(start)
                    self._writer.seek(start)
                raise OutboxError(f"outbox {self.directory}: append failed: {e}", retriable=True) from e
            self._pending += len(messages)
            self._bytes += len(data)
            seg, ends, offset = self._segments[-1], [], start
            for r in records:
                offset += len(r)
                ends.append(Position(seg, offset))
            return ends

    @property
    def end(self) -> Position:
        """The position just after the last record appended (where the next append goes)."""
        with self._lock:
            self._check_open()
            assert self._writer is not None
            return Position(self._segments[-1], self._writer.tell())

    # --- replay ---------------------------------------------------------------------------------------

    def read(self, max_records: int) -> Batch:
        """Up to `max_records` events after the last read (or after the cursor after :meth:`rewind`), in order.

        An empty batch means the outbox has nothing more to read. Damaged records are skipped and counted.

        Raises:
            OutboxError: I/O error while reading.
        """
        out: list[Message] = []
        with self._lock:
            self._check_open()
            pos = self._read
            while len(out) < max_records:
                f = self._reader_for(pos.segment)
                f.seek(pos.offset)
                got, pos = self._read_some(f, pos, max_records - len(out))
                out += got
                if len(out) >= max_records:
                    break
                later = [s for s in self._segments if s > pos.segment]
                if not later:
                    break
                pos = Position(later[0], 0)
            self._read = pos
            if out:
                self._unacked.append((pos, len(out)))
            return Batch(tuple(out), pos)

    def ack(self, batch: Batch) -> None:
        """Mark everything up to ``batch.end`` delivered: move the cursor (durably), delete consumed segments.

        Batches must be acknowledged in the order they were read.

        Raises:
            OutboxError: the cursor could not be written (retriable); the events will be re-sent after a restart.
        """
        with self._cursor_lock:
            with self._lock:
                self._check_open()
                if batch.end < self._cursor:
                    return
            self._write_cursor(batch.end)  # outside the append lock: an append never waits for the cursor's fsyncs
            with self._lock:
                self._cursor = batch.end
                done = 0
                while self._unacked and self._unacked[0][0] <= batch.end:
                    done += self._unacked.popleft()[1]
                self._pending = max(0, self._pending - done)
                for seg in [s for s in self._segments if s < batch.end.segment]:
                    self._unlink(seg)

    def ack_to(self, end: Position, count: int) -> None:
        """Mark the `count` events before `end` delivered, for events sent from memory rather than :meth:`read`
        (the publisher's direct path): `end` is a position :meth:`append` returned, acknowledged in order.
        Earlier positions than the cursor are ignored.

        Raises:
            OutboxError: the cursor could not be written (retriable); the events will be re-sent after a restart.
        """
        with self._cursor_lock:
            with self._lock:
                self._check_open()
                if end <= self._cursor:
                    return
            # outside the append lock: an append (an event being made durable) never waits for the cursor's
            # two fsyncs; the cursor lock keeps cursor writes in order
            self._write_cursor(end)
            with self._lock:
                self._cursor = end
                self._pending = max(0, self._pending - count)
                if self._read < end:
                    self._read = end
                for seg in [s for s in self._segments if s < end.segment]:
                    self._unlink(seg)

    def rewind(self) -> None:
        """Forget reads that were not acknowledged: the next :meth:`read` starts at the cursor again."""
        with self._lock:
            self._read = self._cursor
            self._unacked.clear()

    # --- internals ------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._opened:
            raise OutboxError(f"outbox {self.directory}: not open", retriable=False)

    def _path(self, seg: int) -> Path:
        return segment_path(self.directory, seg)

    def _write_cursor(self, pos: Position) -> None:
        write_cursor(self.directory, pos, fsync=self.fsync)

    def _fsync_dir(self) -> None:
        if self.fsync:
            fsync_dir(self.directory)

    def _create_segment(self, seg: int) -> None:
        try:
            self._path(seg).touch()
            self._fsync_dir()
        except OSError as e:
            raise OutboxError(f"outbox {self.directory}: cannot create a segment: {e}", retriable=True) from e

    def _roll(self) -> None:
        assert self._writer is not None
        self._writer.close()
        seg = self._segments[-1] + 1
        self._create_segment(seg)
        self._segments.append(seg)
        self._writer = open(self._path(seg), "ab")  # noqa: SIM115 (kept open)

    def _unlink(self, seg: int) -> None:
        if self._reader_segment == seg and self._reader is not None:
            self._reader.close()
            self._reader, self._reader_segment = None, -1
        path = self._path(seg)
        with contextlib.suppress(FileNotFoundError):
            self._bytes -= path.stat().st_size
            path.unlink()
        self._segments.remove(seg)

    def _reader_for(self, seg: int) -> BinaryIO:
        if self._reader is None or self._reader_segment != seg:
            if self._reader is not None:
                self._reader.close()
            try:
                self._reader = open(self._path(seg), "rb")  # noqa: SIM115 (kept open)
            except OSError as e:
                raise OutboxError(f"outbox {self.directory}: cannot read segment {seg}: {e}", retriable=True) from e
            self._reader_segment = seg
        return self._reader

    def _read_some(self, f: BinaryIO, pos: Position, limit: int) -> tuple[list[Message], Position]:
        """Read up to `limit` records from `f` at `pos`; stops at the end of the file (or a torn tail)."""
        out: list[Message] = []
        offset = pos.offset
        while len(out) < limit:
            head = f.read(HEAD.size)
            if len(head) < HEAD.size:
                break
            magic, length, crc = HEAD.unpack(head)
            body = f.read(length) if magic == MAGIC and length <= MAX_BODY else b""
            if magic == MAGIC and len(body) == length and zlib.crc32(body) == crc:
                try:
                    out.append(decode_body(body))
                except ValueError as e:
                    self._corrupt(pos.segment, offset, str(e))
                offset += HEAD.size + length
                continue
            if magic == MAGIC and len(body) < length and f.tell() == os.fstat(f.fileno()).st_size:
                break  # a record still torn at the very end: nothing more to read
            nxt = self._next_magic(f, offset + 1)
            self._corrupt(pos.segment, offset, "bad magic or CRC")
            if nxt is None:
                offset = os.fstat(f.fileno()).st_size
                break
            offset = nxt
            f.seek(offset)
        return out, Position(pos.segment, offset)

    def _next_magic(self, f: BinaryIO, start: int) -> int | None:
        f.seek(start)
        data = f.read()
        i = data.find(MAGIC)
        return None if i < 0 else start + i

    def _corrupt(self, seg: int, offset: int, why: str) -> None:
        if self._counting:
            return
        self.corrupt_records += 1
        log.error("outbox record damaged, skipped", segment=seg, offset=offset, reason=why)

    def _repair_tail(self) -> None:
        """Cut a torn record at the end of the last segment (the only place a crash can tear one)."""
        seg = self._segments[-1]
        path = self._path(seg)
        start = self._cursor.offset if self._cursor.segment == seg else 0
        try:
            with open(path, "r+b") as f:
                size = os.fstat(f.fileno()).st_size
                good = start
                f.seek(start)
                while True:
                    head = f.read(HEAD.size)
                    if len(head) < HEAD.size:
                        break
                    magic, length, crc = HEAD.unpack(head)
                    if magic != MAGIC or length > MAX_BODY:
                        # Damage inside the file: leave it to read() to skip, unless nothing valid follows.
                        nxt = self._next_magic(f, good + 1)
                        if nxt is None:
                            break
                        good = nxt
                        f.seek(good)
                        continue
                    body = f.read(length)
                    if len(body) < length:
                        break
                    if zlib.crc32(body) != crc and f.tell() == size:
                        break  # the last record's length made it to disk but not all of its bytes
                    good = f.tell()
                if good < size:
                    f.truncate(good)
                    if self.fsync:
                        os.fsync(f.fileno())
                    log.warning("outbox: cut a torn record at the end", segment=seg, offset=good, bytes_cut=size - good)
        except OSError as e:
            raise OutboxError(f"outbox {path}: cannot repair: {e}", retriable=True) from e

    def _count_from(self, pos: Position) -> int:
        n = 0
        p = pos
        self._counting = True
        for seg in [s for s in self._segments if s >= pos.segment]:
            f = self._reader_for(seg)
            start = p.offset if seg == p.segment else 0
            f.seek(start)
            while True:
                got, newp = self._read_some(f, Position(seg, start), 4096)
                n += len(got)
                if not got:
                    break
                start = newp.offset
        # Damage is reported once, when it is read for delivery, not when counting.
        self._counting = False
        return n
