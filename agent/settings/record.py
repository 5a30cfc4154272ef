"""``record.*``: the recording of the watches for replay (agent.kube.record)."""

from __future__ import annotations

from pydantic import Field

from agent.settings.common import (
    Group,
)


class RecordSettings(Group):
    """Recording every input the agent receives (for replay): where, how much and how it is written."""

    dir: str | None = Field(
        None,
        description="Folder the watches are recorded to (gzip JSON lines, agent.kube.record); None records nothing. "
        "`fault-agent run --record DIR` sets it.",
    )
    max_bytes: int = Field(
        1 << 30,
        ge=1 << 12,
        description="Total size of the recording (bytes, compressed) above which the oldest segments are deleted; "
        "1 GiB holds days of a 1,000-node cluster's watches.",
    )
    max_age_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="Segments whose every line is older than this (seconds) are deleted; a week, so last week's "
        "history can be replayed.",
    )
    segment_bytes: int = Field(
        64 << 20,
        ge=1 << 12,
        description="Compressed size (bytes) at which a segment is closed and the next one started; 64 MiB keeps "
        "a file easy to copy into a bug report and retention fine-grained.",
    )
    flush_interval_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="Seconds between writes of the buffered lines (one gzip member each); a crash loses at most "
        "this much.",
    )
    buffer_max_bytes: int = Field(
        64 << 20,
        ge=1 << 16,
        description="Uncompressed bytes buffered between flushes beyond which lines are dropped (counted, logged "
        "once), so a slow disk never grows the agent's memory without bound.",
    )
    compress_level: int = Field(
        6, ge=1, le=9, description="gzip level of the segments; 6 is gzip's default balance of speed and size."
    )
