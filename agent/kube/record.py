"""Recording the watches: every object the apiserver sends the agent's watchers, to rotating gzip JSON-lines files.

One line per object, as the watcher received it (``--record DIR``, setting ``record.dir``)::

    {"t": 1764590000123, "type": "ADDED", "resource": "pods", "source": "pods@train", "object": {...}}

- ``t``: Unix time in milliseconds when the agent read it (from the injected clock).
- ``type``: ``ADDED`` / ``MODIFIED`` / ``DELETED`` as the watch event said (``k8s.io/apimachinery/pkg/apis/meta/v1
  .WatchEvent``); every item of a (re-)list is an ``ADDED`` line, and ``LISTED`` (``object`` is ``{}``) marks the
  end of that list. Bookmarks are not recorded. A reader that re-lists on LISTED (as the watcher does: diff against
  what it had) sees the deletions that happened while the agent was away.
- ``resource``: the collection, ``pods`` / ``nodes`` / ``configmaps`` for the core group, ``vcjobs`` (Volcano
  ``batch.volcano.sh/v1alpha1`` jobs), ``acjobs`` (``mindxdl.gitee.com/v1`` AscendJobs) and ``podgroups``
  (``scheduling.volcano.sh/v1beta1`` PodGroups) otherwise.
- ``source``: which watcher (``deviceinfo@kube-system``): several watch ConfigMaps, and LISTED ends one of them.
- ``object``: the raw JSON object (list items carry no ``kind``/``apiVersion``, as the apiserver sends them).

Files: ``rec-<first t, 13 digits>-<seq, 6 digits>.jsonl.gz`` in DIR. Each flush appends one complete gzip member
(readable by :func:`gzip.open` even if the process dies right after), the segment rotates once it reaches
``segment_bytes``, and after each flush the oldest segments go while the total exceeds ``max_bytes`` or
while every line of a segment is older than ``max_age_s``. The watcher's thread only appends an encoded line to
a buffer; a background task hands the buffer to a worker thread (gzip + write) every ``flush_interval_s``.
A buffer that grows past ``buffer_max_bytes`` (a disk slower than the watches) drops lines, counted and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import orjson
import structlog

from agent.kube.watch import Resource
from agent.runtime.clock import SystemClock
from agent.settings import RecordSettings

log = structlog.get_logger("agent.kube.record")

SEGMENT_RE = re.compile(r"^rec-(\d{13})-(\d{6})\.jsonl\.gz$")
TYPES = ("ADDED", "MODIFIED", "DELETED", "LISTED")


class WallClock(Protocol):
    """The one wall clock the recorder reads (``agent.runtime.clock.SystemClock`` fits)."""

    def now(self) -> datetime:
        """The current time, time-zone aware."""
        ...


class RecordError(Exception):
    """The recording folder cannot be used (missing parent, not a folder, not writable). Message names the path."""


def record_resource(resource: Resource) -> str:
    """The ``resource`` field of a line for `resource`: the plural for the core group, the source otherwise."""
    return resource.plural if not resource.group else resource.source


@dataclass(frozen=True, slots=True)
class Segment:
    """One recording file: its path, the ``t`` (ms) of its first line, its sequence number and size (bytes)."""

    path: Path
    start_ms: int
    seq: int
    size: int


def list_segments(folder: Path) -> list[Segment]:
    """The recording files in `folder`, oldest first (by start time, then sequence). Other files are ignored."""
    out: list[Segment] = []
    for entry in os.scandir(folder):
        m = SEGMENT_RE.match(entry.name)
        if m and entry.is_file():
            out.append(Segment(Path(entry.path), int(m.group(1)), int(m.group(2)), entry.stat().st_size))
    out.sort(key=lambda s: (s.start_ms, s.seq))
    return out


def retention(segments: list[Segment], *, now_ms: int, max_bytes: int, max_age_s: float) -> list[Segment]:
    """Which of `segments` (oldest first, the last one being written) to delete. Pure.

    A segment goes while the total size exceeds `max_bytes`, or when its successor started more than
    `max_age_s` before `now_ms` (so every line in it is older). The newest segment is never deleted.
    """
    doomed: list[Segment] = []
    total = sum(s.size for s in segments)
    for i, seg in enumerate(segments[:-1]):
        too_old = segments[i + 1].start_ms < now_ms - max_age_s * 1000.0
        if total > max_bytes or too_old:
            doomed.append(seg)
            total -= seg.size
        else:
            break
    return doomed


def read_recording(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Every line of the recording files or folders `paths`, in file order (a folder: its segments oldest first).

    Raises:
        RecordError: a path is neither a segment file nor a folder, a file is not gzip, or a line is not a JSON
            object with ``t``, ``type``, ``resource`` and ``object`` (the message names file and line number).
    """
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(s.path for s in list_segments(p))
        elif p.is_file():
            files.append(p)
        else:
            raise RecordError(f"{p}: no such recording file or folder")
    for f in files:
        try:
            with gzip.open(f, "rb") as fh:
                for n, line in enumerate(fh, 1):
                    yield _parse_line(f, n, line)
        except (OSError, EOFError) as e:
            raise RecordError(f"{f}: not a readable gzip recording: {e}") from e


def _parse_line(f: Path, n: int, line: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise RecordError(f"{f}:{n}: not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise RecordError(f"{f}:{n}: not a JSON object")
    t = obj.get("t")
    if not isinstance(t, int) or isinstance(t, bool):
        raise RecordError(f"{f}:{n}: 't' must be an integer (Unix ms), got {t!r}")
    if obj.get("type") not in TYPES:
        raise RecordError(f"{f}:{n}: 'type' must be one of {', '.join(TYPES)}, got {obj.get('type')!r}")
    if not isinstance(obj.get("resource"), str) or not obj["resource"]:
        raise RecordError(f"{f}:{n}: 'resource' must be a non-empty string")
    if not isinstance(obj.get("object"), dict):
        raise RecordError(f"{f}:{n}: 'object' must be a JSON object")
    return obj


class Recorder:
    """Buffers recorded lines and writes them to segments from a worker thread.

    Args:
        folder: where the segments go (created if missing; its parent must exist).
        settings: ``record.*`` (sizes in bytes, ages and intervals in seconds).
        clock: the wall clock for ``t`` and for the age bound.

    Raises:
        RecordError: from :meth:`open` when `folder` cannot be used.
    """

    def __init__(self, folder: str | os.PathLike[str], settings: RecordSettings, *, clock: WallClock | None = None):
        self.folder = Path(folder)
        self.settings = settings
        self.clock: WallClock = clock or SystemClock()
        self._buf: list[bytes] = []
        self._buf_bytes = 0
        self._lock = threading.Lock()  # the buffer is swapped between the loop and the worker thread
        self._io_lock = threading.Lock()  # one writer at a time (flush from the task and from close)
        self._current: Segment | None = None
        self._seq = 0
        self.lines = 0  # lines accepted
        self.dropped = 0  # lines dropped because the buffer was full
        self.segments_deleted = 0
        self._warned_drop = False

    def open(self) -> None:
        """Check the folder now, so a bad ``--record`` fails at start with a clear message.

        Raises:
            RecordError: the parent is missing, the path is not a folder, or a file cannot be created in it.
        """
        f = self.folder
        try:
            f.mkdir(exist_ok=True)
        except FileNotFoundError as e:
            raise RecordError(f"recording folder {f}: its parent folder does not exist") from e
        except FileExistsError as e:
            raise RecordError(f"recording folder {f}: exists and is not a folder") from e
        except OSError as e:
            raise RecordError(f"recording folder {f}: cannot create it: {e.strerror or e}") from e
        if not f.is_dir():
            raise RecordError(f"recording folder {f}: exists and is not a folder")
        probe = f / f".probe-{os.getpid()}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise RecordError(f"recording folder {f}: not writable: {e.strerror or e}") from e
        existing = list_segments(f)
        self._seq = existing[-1].seq + 1 if existing else 0

    def tap(self, resource: Resource) -> Callable[[str, dict[str, Any]], None]:
        """The callback a :class:`~agent.kube.watch.Watcher` calls with (type, raw object) for `resource`."""
        name = record_resource(resource)
        source = resource.watcher_id

        def record(type_: str, obj: dict[str, Any]) -> None:
            self.record(type_, name, source, obj)

        return record

    def record(self, type_: str, resource: str, source: str, obj: dict[str, Any]) -> None:
        """Append one line to the buffer (encoding only; no I/O). Drops it when the buffer is full."""
        t = int(self.clock.now().timestamp() * 1000)
        line = orjson.dumps({"t": t, "type": type_, "resource": resource, "source": source, "object": obj}) + b"\n"
        with self._lock:
            if self._buf_bytes + len(line) > self.settings.buffer_max_bytes:
                self.dropped += 1
                drop = not self._warned_drop
                self._warned_drop = True
            else:
                self._buf.append(line)
                self._buf_bytes += len(line)
                self.lines += 1
                return
        if drop:
            log.warning("record.dropping", folder=str(self.folder), buffer_max_bytes=self.settings.buffer_max_bytes)

    def flush(self) -> int:
        """Write the buffered lines as one gzip member (blocking: call from a worker thread). Returns lines written.

        Rotates and applies retention when the segment is full. An OSError (disk full) is logged and the lines
        are lost (recording must never stop the agent).
        """
        with self._lock:
            batch, self._buf, self._buf_bytes = self._buf, [], 0
            self._warned_drop = False
        if not batch:
            return 0
        with self._io_lock:
            try:
                self._write(batch)
            except OSError as e:
                log.error("record.write-failed", folder=str(self.folder), error=str(e), lines=len(batch))
                return 0
        return len(batch)

    def _write(self, batch: list[bytes]) -> None:
        now_ms = int(self.clock.now().timestamp() * 1000)
        if self._current is None:
            first_t = int(orjson.loads(batch[0])["t"])
            path = self.folder / f"rec-{first_t:013d}-{self._seq:06d}.jsonl.gz"
            self._seq += 1
            self._current = Segment(path, first_t, self._seq - 1, 0)
        data = gzip.compress(b"".join(batch), compresslevel=self.settings.compress_level, mtime=0)
        with open(self._current.path, "ab") as fh:
            fh.write(data)
        cur = self._current
        self._current = Segment(cur.path, cur.start_ms, cur.seq, cur.size + len(data))
        if self._current.size >= self.settings.segment_bytes:
            self._current = None  # the next flush starts a new segment
        segments = list_segments(self.folder)
        for seg in retention(
            segments, now_ms=now_ms, max_bytes=self.settings.max_bytes, max_age_s=self.settings.max_age_s
        ):
            with contextlib.suppress(FileNotFoundError):
                seg.path.unlink()
            self.segments_deleted += 1
            log.info("record.segment-deleted", path=str(seg.path), bytes=seg.size)

    async def run(self, stop: asyncio.Event) -> None:
        """Flush every ``flush_interval_s`` in a worker thread until `stop` is set, then flush the rest."""
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.flush_interval_s):
                        await stop.wait()
                await asyncio.to_thread(self.flush)
        finally:
            self.flush()
