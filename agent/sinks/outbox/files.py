"""The outbox directory's files other than the records: the segment files' names, the ``cursor`` file (the first
record not yet delivered: ``<segment number> <byte offset>\\n``, replaced atomically: write, fsync, rename,
fsync of the directory) and the ``lock`` file (held with an exclusive ``flock`` and naming its holder,
``pid <pid> host <host>``). Blocking file I/O.

Errors: :class:`~agent.sinks.outbox.errors.OutboxError` with the file named; :class:`OutboxInUse` when another
process holds the lock.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
from pathlib import Path
from typing import BinaryIO, Final

from agent.sinks.outbox.errors import OutboxError, OutboxInUse
from agent.sinks.outbox.records import Position

SEGMENT_RE: Final = re.compile(r"^seg-(\d{20})\.log$")
"""A segment file's name: ``seg-<20-digit number>.log``."""


def segment_path(directory: Path, seg: int) -> Path:
    """The file of segment `seg` in `directory`."""
    return directory / f"seg-{seg:020d}.log"


def is_outbox_file(name: str) -> bool:
    """Whether `name` is one of an outbox directory's own files (segments, cursor, lock)."""
    return name in ("lock", "cursor") or name.startswith("cursor.tmp") or SEGMENT_RE.match(name) is not None


def take_lock(directory: Path) -> BinaryIO:
    """Hold ``directory/lock`` (flock, exclusive, not waiting) and write this process into it; the returned file
    holds the lock until it is closed.

    Raises:
        OutboxInUse: another process holds it: its pid and host are in the message.
        OutboxError: the lock file cannot be opened (not retriable).
    """
    path = directory / "lock"
    try:
        f = open(path, "a+b")  # noqa: SIM115 (held open while the outbox is)
    except OSError as e:
        raise OutboxError(f"outbox {directory}: cannot open its lock file: {e}", retriable=False) from e
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read(200).decode(errors="replace").strip() or "unknown"
        f.close()
        raise OutboxInUse(
            f"outbox {directory} is in use by another agent process ({holder}); give each agent process its "
            "own kafka.outbox_dir (FAULT_AGENT_KAFKA__OUTBOX_DIR): two writers of one outbox send each other's "
            "events and lose their places"
        ) from None
    f.truncate(0)
    f.write(f"pid {os.getpid()} host {socket.gethostname()}\n".encode())
    f.flush()
    return f


def load_cursor(directory: Path, default: Position) -> Position:
    """The position in ``directory/cursor``, or `default` when there is no cursor file yet.

    Raises:
        OutboxError: the file cannot be read or is malformed (not retriable).
    """
    path = directory / "cursor"
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return default
    except (OSError, UnicodeDecodeError) as e:
        raise OutboxError(f"outbox {path}: cannot read the cursor: {e}", retriable=False) from e
    m = re.fullmatch(r"(\d+) (\d+)\n", text)
    if not m:
        raise OutboxError(
            f"outbox {path}: malformed cursor {text[:40]!r}; expected '<segment> <offset>'", retriable=False
        )
    return Position(int(m.group(1)), int(m.group(2)))


def write_cursor(directory: Path, pos: Position, *, fsync: bool) -> None:
    """Replace ``directory/cursor`` with `pos` atomically (fsync'd with the directory when `fsync`).

    Raises:
        OutboxError: I/O error (retriable).
    """
    path = directory / "cursor"
    tmp = directory / "cursor.tmp"
    try:
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{pos.segment} {pos.offset}\n")
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if fsync:
            fsync_dir(directory)
    except OSError as e:
        raise OutboxError(f"outbox {path}: cannot write the cursor: {e}", retriable=True) from e


def fsync_dir(directory: Path) -> None:
    """fsync `directory` itself (a created, renamed or deleted entry is durable after it). Raises OSError."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
