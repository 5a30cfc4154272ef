"""Taking over the outbox of an agent process that is gone (its ``lock`` held by no live process): open it
(:func:`open_gone`), move its events, delete its files (:func:`remove_taken`); :func:`adopt` does all three into
an open outbox. Blocking file I/O.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from agent.sinks.outbox.errors import OutboxError, OutboxInUse
from agent.sinks.outbox.files import SEGMENT_RE, is_outbox_file
from agent.sinks.outbox.store import Outbox


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
    if not any(is_outbox_file(name) for name in names):
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
        for name in sorted((p.name for p in path.iterdir() if SEGMENT_RE.match(p.name)), key=lambda n: int(n[4:24])):
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
