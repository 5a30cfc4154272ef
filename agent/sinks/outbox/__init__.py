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

The package by topic: :mod:`~agent.sinks.outbox.store` (the :class:`Outbox`), :mod:`~agent.sinks.outbox.records`
(the record format, positions), :mod:`~agent.sinks.outbox.files` (segment names, cursor and lock files),
:mod:`~agent.sinks.outbox.peers` (taking over a gone process's outbox) and :mod:`~agent.sinks.outbox.errors`.
Callers import the public names from here.
"""

from agent.sinks.outbox.errors import OutboxError, OutboxFull, OutboxInUse
from agent.sinks.outbox.peers import adopt, open_gone, remove_taken
from agent.sinks.outbox.records import MAGIC, Batch, Position, decode_body, encode_record
from agent.sinks.outbox.store import Outbox

__all__ = [
    "MAGIC",
    "Batch",
    "Outbox",
    "OutboxError",
    "OutboxFull",
    "OutboxInUse",
    "Position",
    "adopt",
    "decode_body",
    "encode_record",
    "open_gone",
    "remove_taken",
]
