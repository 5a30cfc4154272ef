"""Durable on-disk outbox: events Kafka could not take yet, kept in order across broker outages and agent crashes.

Layout of the directory (one process at a time, enforced by ``lock``; the agent runs one publisher):

- ``seg-<20-digit number>.log``: append-only segments, rolled at ``segment_bytes``. Each record is
  ``magic "FAOB" | u32 length | u32 CRC-32 of the body | body`` (big-endian), the body being
  ``u8 stream length, stream | u8 id length, id | u8 type length, type | u16 key length, key |
  u8 header count, (u8 name length, name, u16 value length, value)* | u32 value length, value``.
- ``cursor``: ``<segment number> <byte offset>\\n``, the first record not yet delivered; replaced atomically
  (write, fsync, rename, fsync of the directory).
- ``lock``: held with ``flock`` (exclusive) by the process that has the outbox open, from :meth:`Outbox.open` to
  :meth:`Outbox.close` (or its exit), and naming it (``pid host``). A second process gets a clear
  :class:`OutboxError` instead of two writers of one cursor and one segment; see :func:`adopt` for taking over the
  events of an outbox whose process is gone.

Crash safety: :meth:`Outbox.append` writes a whole batch and fsyncs before returning, so a returned append
survives SIGKILL and power loss. The publisher appends every event here before it reports the event accepted
(a write-ahead log, not only a spill area) and moves the cursor as Kafka acknowledges, in outbox order.
A record torn by a crash (short, or a bad CRC) at the end of the last segment is cut off at :meth:`Outbox.open`;
a damaged record elsewhere is skipped by searching for the next magic, counted in ``corrupt_records`` and logged
once. Delivery is at-least-once: a crash between Kafka's acknowledgement and
:meth:`Outbox.ack` re-sends those events, which keep their deterministic CloudEvents ids.

All methods are blocking (file I/O); call them from a worker thread (``asyncio.to_thread``). A lock makes them safe
to call from several threads.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import struct
import threading
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import structlog

from agent.sinks.events import Message, Stream

log = structlog.get_logger(__name__)

MAGIC: Final = b"FAOB"
_HEAD: Final = struct.Struct(">4sII")  # magic, body length, crc32
_MAX_BODY: Final = 64 * 1024 * 1024
_SEGMENT_RE: Final = re.compile(r"^seg-(\d{20})\.log$")


class OutboxError(Exception):
    """The outbox directory cannot be used (permissions, disk full, a broken cursor file).

    Attributes:
        retriable: True when trying again later may work (disk full, I/O error), False for a broken setup.
    """

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class OutboxInUse(OutboxError):
    """Another process holds the outbox directory (its ``lock``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


class OutboxFull(OutboxError):
    """Appending would take the outbox past ``max_bytes``; the batch was not written."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=True)


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A place in the outbox: segment number and byte offset in it."""

    segment: int
    offset: int


@dataclass(frozen=True, slots=True)
class Batch:
    """Records read in order; `end` is the position just after the last one (what :meth:`Outbox.ack` takes)."""

    messages: tuple[Message, ...]
    end: Position


def encode_record(m: Message) -> bytes:
    """One framed record for `m` (see the module docstring for the layout).

    Raises:
        OutboxError: a field longer than its length prefix allows (not retriable).
    """
    try:
        parts = [
            _short(m.stream.value.encode()),
            _short(m.event_id.encode()),
            _short(m.event_type.encode()),
            struct.pack(">H", len(m.key)),
            m.key,
            struct.pack(">B", len(m.headers)),
        ]
        for name, value in m.headers:
            parts += [_short(name.encode()), struct.pack(">H", len(value)), value]
        parts += [struct.pack(">I", len(m.value)), m.value]
    except struct.error as e:
        raise OutboxError(f"event {m.event_id}: a field is too long for the outbox format: {e}", retriable=False) from e
    body = b"".join(parts)
    return _HEAD.pack(MAGIC, len(body), zlib.crc32(body)) + body


def decode_body(body: bytes) -> Message:
    """Parse a record body written by :func:`encode_record`.

    Raises:
        ValueError: malformed body (truncated, unknown stream, bad UTF-8).
    """
    try:
        i = 0

        def take(n: int) -> bytes:
            nonlocal i
            if i + n > len(body):
                raise ValueError("body truncated")
            chunk = body[i : i + n]
            i += n
            return chunk

        def short() -> bytes:
            return take(take(1)[0])

        stream = Stream(short().decode())
        event_id = short().decode()
        event_type = short().decode()
        key = take(struct.unpack(">H", take(2))[0])
        headers = []
        for _ in range(take(1)[0]):
            name = short().decode()
            headers.append((name, take(struct.unpack(">H", take(2))[0])))
        value = take(struct.unpack(">I", take(4))[0])
        if i != len(body):
            raise ValueError(f"{len(body) - i} trailing bytes")
    except (UnicodeDecodeError, struct.error) as e:
        raise ValueError(f"malformed outbox record: {e}") from e
    return Message(stream, key, value, tuple(headers), event_id, event_type)


def _short(b: bytes) -> bytes:
    return struct.pack(">B", len(b)) + b


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
            self._take_lock()
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
                int(m.group(1)) for p in self.directory.iterdir() if (m := _SEGMENT_RE.match(p.name))
            )
            for stale in self.directory.glob("cursor.tmp*"):
                stale.unlink()
        except OSError as e:
            raise OutboxError(f"outbox {self.directory}: cannot use the directory: {e}", retriable=False) from e
        self._cursor = self._load_cursor()
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

    def _take_lock(self) -> None:
        """Hold ``lock`` (flock, exclusive, not waiting) and write this process into it.

        Raises:
            OutboxInUse: another process holds it: its pid and host are in the message.
        """
        path = self.directory / "lock"
        try:
            f = open(path, "a+b")  # noqa: SIM115 (held open while the outbox is)
        except OSError as e:
            raise OutboxError(f"outbox {self.directory}: cannot open its lock file: {e}", retriable=False) from e
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read(200).decode(errors="replace").strip() or "unknown"
            f.close()
            raise OutboxInUse(
                f"outbox {self.directory} is in use by another agent process ({holder}); give each agent process its "
                "own kafka.outbox_dir (FAULT_AGENT_KAFKA__OUTBOX_DIR): two writers of one outbox send each other's "
                "events and lose their places"
            ) from None
        f.truncate(0)
        f.write(f"pid {os.getpid()} host {socket.gethostname()}\n".encode())
        f.flush()
        self._lock_file = f

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
        return self.directory / f"seg-{seg:020d}.log"

    def _load_cursor(self) -> Position:
        path = self.directory / "cursor"
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            return Position(self._segments[0] if self._segments else 0, 0)
        except (OSError, UnicodeDecodeError) as e:
            raise OutboxError(f"outbox {path}: cannot read the cursor: {e}", retriable=False) from e
        m = re.fullmatch(r"(\d+) (\d+)\n", text)
        if not m:
            raise OutboxError(
                f"outbox {path}: malformed cursor {text[:40]!r}; expected '<segment> <offset>'", retriable=False
            )
        return Position(int(m.group(1)), int(m.group(2)))

    def _write_cursor(self, pos: Position) -> None:
        path = self.directory / "cursor"
        tmp = self.directory / "cursor.tmp"
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write(f"{pos.segment} {pos.offset}\n")
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            self._fsync_dir()
        except OSError as e:
            raise OutboxError(f"outbox {path}: cannot write the cursor: {e}", retriable=True) from e

    def _fsync_dir(self) -> None:
        if not self.fsync:
            return
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

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
            head = f.read(_HEAD.size)
            if len(head) < _HEAD.size:
                break
            magic, length, crc = _HEAD.unpack(head)
            body = f.read(length) if magic == MAGIC and length <= _MAX_BODY else b""
            if magic == MAGIC and len(body) == length and zlib.crc32(body) == crc:
                try:
                    out.append(decode_body(body))
                except ValueError as e:
                    self._corrupt(pos.segment, offset, str(e))
                offset += _HEAD.size + length
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
                    head = f.read(_HEAD.size)
                    if len(head) < _HEAD.size:
                        break
                    magic, length, crc = _HEAD.unpack(head)
                    if magic != MAGIC or length > _MAX_BODY:
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


def _is_outbox_file(name: str) -> bool:
    """Whether `name` is one of an outbox directory's own files (see the module docstring)."""
    return name in ("lock", "cursor") or name.startswith("cursor.tmp") or _SEGMENT_RE.match(name) is not None


def open_gone(directory: str | os.PathLike[str], *, fsync: bool, max_bytes: int) -> Outbox | None:
    """Open the outbox in `directory` when no live process holds it (its ``lock``), to take it over; None when a
    process holds it or `directory` holds none of an outbox's files (lost+found on a volume's root, anything else:
    never opened, never touched). The caller moves its events (:meth:`Outbox.read`, :meth:`Outbox.ack`) and then
    calls :func:`remove_taken`, or :meth:`Outbox.close` to leave what is left for a later try.

    Raises:
        OutboxError: `directory` cannot be listed, or its outbox cannot be read (a broken cursor).
    """
    path = Path(directory)
    try:
        names = {p.name for p in path.iterdir()}
    except OSError as e:
        raise OutboxError(f"outbox {path}: cannot list it: {e}", retriable=True) from e
    if not any(_is_outbox_file(name) for name in names):
        return None
    peer = Outbox(path, fsync=fsync, max_bytes=max_bytes)
    try:
        peer.open()
    except OutboxInUse:
        return None
    return peer


def remove_taken(peer: Outbox) -> None:
    """Delete the files of an outbox whose events were all moved (opened by :func:`open_gone`), close it, and remove
    its directory when nothing else is left there.

    Segments in their order, then the cursor, then the lock (still held): a crash between two deletions leaves an
    outbox whose cursor is at its end (nothing sent again), and an opener racing the lock's deletion finds no
    events left. Anything else someone put there stays, and so does the directory.

    Raises:
        OSError: a file could not be deleted (another process at work there).
    """
    path = peer.directory
    try:
        for name in sorted((p.name for p in path.iterdir() if _SEGMENT_RE.match(p.name)), key=lambda n: int(n[4:24])):
            (path / name).unlink(missing_ok=True)
        for name in sorted(p.name for p in path.iterdir() if p.name.startswith("cursor")):
            (path / name).unlink(missing_ok=True)
        (path / "lock").unlink(missing_ok=True)
    finally:
        peer.close()
    with contextlib.suppress(OSError):  # another process opened it again meanwhile: it stays
        path.rmdir()


def adopt(into: Outbox, directory: str | os.PathLike[str], *, batch: int = 1000) -> int:
    """Take over the outbox in `directory` of an agent process that is gone: append its pending events, in order,
    to the open outbox `into` (fsync'd there before they leave the old one), then delete its files and the
    directory (:func:`open_gone`, :func:`remove_taken`). A process that still holds it (its ``lock``) is left
    alone. For a process that starts, before it sends anything; a running publisher takes a peer over through its
    own commit path instead (agent.sinks.kafka).

    A crash half-way leaves the events in both outboxes: they are sent twice, with their deterministic ids, never
    lost.

    Returns:
        The events moved (0 when the directory is held by a live process, holds none, or is not an outbox).

    Raises:
        OutboxError: `directory` cannot be read (a broken cursor) or `into` cannot take the events (full, I/O).
        OSError: a file vanished or could not be deleted under it (another process at work there).
    """
    peer = open_gone(directory, fsync=into.fsync, max_bytes=into.max_bytes)
    if peer is None:
        return 0
    moved = 0
    try:
        while (taken := peer.read(batch)).messages:
            into.append(taken.messages)
            peer.ack(taken)
            moved += len(taken.messages)
    except BaseException:
        peer.close()
        raise
    remove_taken(peer)
    return moved
