"""Taking over the outboxes of gone processes (a replica that died, or the version before per-pod folders) under
``kafka.outbox_peers_dir``: at start, straight into this process's outbox before it sends anything
(:func:`adopt_at_start`), and while running, every ``kafka.outbox_adopt_interval_s`` seconds through the
publisher's group commit (:func:`adopt_while_running`). "Gone" means no live process holds the outbox's lock
(:func:`agent.sinks.outbox.open_gone`).

Nothing here raises for a directory it cannot take: the problem is logged once per directory and round, and its
events stay there for the next round or start.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import structlog

from agent.sinks.events import Message
from agent.sinks.outbox import Outbox, OutboxError, adopt, open_gone, remove_taken

log = structlog.get_logger(__name__)

Commit = Callable[[Sequence[Message]], Awaitable[bool]]
"""Hands events to the publisher's group commit and waits for it: True once they are durable in its outbox,
False when the commit could not write them."""


def _peer_dirs(peers: Path) -> list[Path]:
    """`peers` itself (it holds an outbox's files in the layout of the versions before per-pod folders) and its
    sub-directories, in name order. Raises OSError when `peers` cannot be listed."""
    return [peers, *sorted(d for d in peers.iterdir() if d.is_dir())]


def adopt_at_start(outbox: Outbox, peers: Path) -> None:
    """Take over the outboxes under `peers` that no live process holds (:func:`agent.sinks.outbox.adopt`) into
    `outbox`, before its process sends anything: their events go out after its own pending ones, each outbox's in
    its order, the outboxes in name order. Blocking file I/O: run it in a thread."""
    own = outbox.directory.resolve()
    try:
        dirs = _peer_dirs(peers)
    except OSError as e:
        log.error("outbox peers not listed", directory=str(peers), error=str(e))
        return
    for d in dirs:
        if d.resolve() == own:
            continue
        try:
            moved = adopt(outbox, d)
        except (OutboxError, OSError) as e:
            log.error("outbox of a gone process not taken over; left for the next start", directory=str(d),
                      error=str(e))  # fmt: skip
            continue
        if moved:
            log.warning("outbox of a gone process taken over", directory=str(d), events=moved)


async def adopt_while_running(
    outbox: Outbox, peers: str, interval_s: float, commit: Commit, stopping: Callable[[], bool]
) -> None:
    """Every `interval_s` seconds until `stopping()`: take over the outboxes under `peers` that no live process
    holds (a replica that died while this one runs) through `commit` (:func:`adopt_running`). Returns at once when
    `peers` is empty or `interval_s` ≤ 0 (off)."""
    if not peers or interval_s <= 0:
        return
    while not stopping():
        await asyncio.sleep(interval_s)
        if stopping():
            return
        try:
            dirs = await asyncio.to_thread(_peer_dirs, Path(peers))
        except OSError as e:
            log.debug("outbox peers not listed", directory=peers, error=str(e))
            continue
        own = outbox.directory.resolve()
        for d in dirs:
            if stopping():
                return
            if d.resolve() == own:
                continue
            moved = await adopt_running(outbox, d, commit, stopping)
            if moved:
                log.warning("outbox of a gone process taken over while running", directory=str(d), events=moved)


async def adopt_running(
    outbox: Outbox, directory: Path, commit: Commit, stopping: Callable[[], bool], batch: int = 1000
) -> int:
    """Take over the outbox in `directory` when no live process holds it: each batch of (at most `batch`) events
    goes through `commit` like a new event (durable in `outbox`, then sent, in order), and is acknowledged in the
    old outbox only once that commit is on disk; then its files go (:func:`agent.sinks.outbox.remove_taken`). A
    commit that fails (`outbox` full, I/O) leaves the rest there for the next round. Returns the events moved;
    problems are logged and return what was moved.

    Events appended here come after whatever this replica published before: the bound that keeps a dead
    leader's events ahead of its successor's is the interval (default 5 s) against the Lease (15 s): a
    replica that dies releases its lock at once, and the successor's term opens ``lease_duration_s`` after
    the dead leader's last renewal."""
    try:
        peer = await asyncio.to_thread(open_gone, directory, fsync=outbox.fsync, max_bytes=outbox.max_bytes)
    except OutboxError as e:
        log.error("outbox of a gone process not taken over; tried again later", directory=str(directory),
                  error=str(e))  # fmt: skip
        return 0
    if peer is None:
        return 0
    moved = 0
    try:
        while not stopping() and (taken := await asyncio.to_thread(peer.read, batch)).messages:
            if not await commit(taken.messages):
                log.error("outbox of a gone process: this outbox took no more of its events; tried again later",
                          directory=str(directory), moved=moved)  # fmt: skip
                await asyncio.to_thread(peer.close)
                return moved
            await asyncio.to_thread(peer.ack, taken)
            moved += len(taken.messages)
        if stopping():
            await asyncio.to_thread(peer.close)
            return moved
        await asyncio.to_thread(remove_taken, peer)
    except (OutboxError, OSError) as e:
        log.error("outbox of a gone process not wholly taken over; tried again later", directory=str(directory),
                  moved=moved, error=str(e))  # fmt: skip
        with contextlib.suppress(OutboxError, OSError):
            await asyncio.to_thread(peer.close)
    return moved
