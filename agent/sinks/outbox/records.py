"""The outbox's record format and positions. A record is ``magic "FAOB" | u32 length | u32 CRC-32 of the body |
body`` (big-endian), the body ``u8 stream length, stream | u8 id length, id | u8 type length, type | u16 key length,
key | u8 header count, (u8 name length, name, u16 value length, value)* | u32 value length, value``. Our own format
(no external source); a :class:`Position` is a segment number and a byte offset in it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Final

from agent.sinks.events import Message, Stream
from agent.sinks.outbox.errors import OutboxError

MAGIC: Final = b"FAOB"
HEAD: Final = struct.Struct(">4sII")  # magic, body length, crc32
MAX_BODY: Final = 64 * 1024 * 1024
"""Bytes a record's body may have; a larger length in a head is damage, not a record."""


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
    return HEAD.pack(MAGIC, len(body), zlib.crc32(body)) + body


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
