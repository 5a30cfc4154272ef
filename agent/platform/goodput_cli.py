"""``fault-agent goodput``: effective training time per job, from the agent's events on Kafka.

Reads the recoveries topic (``kafka.recoveries_topic``, or ``--topic``) from its oldest retained record to its end
as of the start, without a consumer group, and adds up the ``io.faultagent.recovery.resumed.v1`` events
(agent.core.goodput.GoodputFold): per job (``namespace/name``), the wall time since its first training step the
agent saw (or ``--since``), the lost time of its incidents by cause (detection, restart, rescheduling,
initialisation, recomputation), productive = wall − lost, and the running share. A table (rich), or ``--json``.
Kafka connection and security come from the agent's settings (``kafka`` group), as for ``fault-agent events tail``.

What it cannot see: an outage whose job has not taken its first step again yet (no ``recovery.resumed`` yet), and
a job that ended: its wall time runs to now (give ``--now`` the job's end to close it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table

from agent.core.goodput import CAUSES, GoodputFold, JobGoodput
from agent.settings import SettingsError, load_settings

DESCRIPTION = (
    "Effective training time per job (productive vs lost since its first step, lost time by cause) from the "
    "agent's recovery.resumed events on Kafka: the recoveries topic read from the beginning to its end."
)

PIPE_WIDTH = 200
"""The table's width when standard output is not a terminal."""
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime) -> datetime:
    """`--since`: a duration before `now` (``90s``, ``30m``, ``24h``, ``7d``) or an RFC 3339 time with a zone.

    Raises:
        argparse.ArgumentTypeError: neither.
    """
    m = _DURATION.fullmatch(text.strip())
    if m is not None:
        return now - timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
    return parse_time(text)


def parse_time(text: str) -> datetime:
    """An RFC 3339 time with a zone (``Z`` or an offset), as UTC.

    Raises:
        argparse.ArgumentTypeError: not one.
    """
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration (90s, 30m, 24h, 7d) or an RFC 3339 time, got {text!r}"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone (add Z or an offset)")
    return when.astimezone(UTC)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``goodput`` options; sets ``func``."""
    parser.description = DESCRIPTION
    parser.add_argument("-n", "--namespace", help="only the jobs of this namespace (default: the whole cluster)")
    parser.add_argument("--since", help="count from this time: a duration before now (30m, 24h, 7d) or RFC 3339")
    parser.add_argument("--now", type=parse_time, help="the end of the window, RFC 3339 (default: the current time)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--topic", help="the topic to read (default: the kafka.recoveries_topic setting)")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for Kafka before giving up (default 30)"
    )
    parser.set_defaults(func=run)


class GoodputReadError(Exception):
    """The events topic could not be read (`reason` says why, for one line on stderr)."""


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What :func:`read_events` read: the `fold`, the `records` read, those that were no CloudEvent (`unreadable`)."""

    fold: GoodputFold
    records: int
    unreadable: int


async def read_events(kafka: Any, topic: str, timeout_s: float) -> ReadResult:
    """Fold every ``recovery.resumed`` event on `topic` (kafka: agent.settings.KafkaSettings), from the oldest
    retained record to the end offsets read at the start.

    Raises:
        GoodputReadError: Kafka not reachable within `timeout_s`, the topic missing, or a bad security setting.
    """
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError, UnknownTopicOrPartitionError

    from agent.sinks.events import RECOVERY_RESUMED
    from agent.sinks.kafka import KafkaSinkError, producer_options

    try:
        opts = producer_options(kafka)
    except KafkaSinkError as e:
        raise GoodputReadError(str(e)) from e
    consumer = AIOKafkaConsumer(
        topic, **opts, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
    )  # no group: every partition of the topic is assigned at the start
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # its retries; the one error below says what failed
    fold = GoodputFold()
    records = unreadable = 0
    try:
        async with asyncio.timeout(timeout_s):
            await consumer.start()
            if topic not in await consumer.topics():
                raise GoodputReadError(f"topic {topic} not found (check --topic or kafka.recoveries_topic)")
            while not consumer.assignment():  # noqa: ASYNC110 - aiokafka offers no event; bounded by the timeout
                await asyncio.sleep(0.1)
            tps = sorted(consumer.assignment())
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            todo = {tp for tp in tps if ends[tp] > await consumer.position(tp)}
            while todo:
                batch = await consumer.getmany(*todo, timeout_ms=1000)
                for tp, recs in batch.items():
                    for rec in recs:
                        records += 1
                        doc = _json(rec.value)
                        if doc is None:
                            unreadable += 1
                        elif doc.get("type") == RECOVERY_RESUMED and isinstance(doc.get("data"), dict):
                            fold.add(doc["data"])
                    if await consumer.position(tp) >= ends[tp]:
                        todo.discard(tp)
    except TimeoutError:
        raise GoodputReadError(f"not read to its end within {timeout_s:g} s (--timeout)") from None
    except UnknownTopicOrPartitionError:
        raise GoodputReadError(f"topic {topic} not found (check --topic or kafka.recoveries_topic)") from None
    except (KafkaError, OSError) as e:
        raise GoodputReadError(str(e) or type(e).__name__) from e
    finally:
        await consumer.stop()
        quiet.setLevel(level)
    return ReadResult(fold, records, unreadable)


def _json(value: bytes | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _duration(seconds: float) -> str:
    """``3d04h``, ``2h05m``, ``4m10s``, ``12.5s``: short and sortable by eye."""
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{seconds:.1f}s"


def render(rows: Sequence[JobGoodput], console: Console) -> None:
    """The table of `rows`, one job a line (or a line saying there is none)."""
    if not rows:
        console.print("no job with a recovery.resumed event (no restarted job that reports its progress)")
        return
    table = Table(show_edge=False, pad_edge=False)
    for name in ("NAMESPACE", "JOB", "WALL", "PRODUCTIVE", "LOST", "SHARE", *(c.upper() for c in CAUSES)):
        table.add_column(name, justify="left" if name in ("NAMESPACE", "JOB") else "right", no_wrap=True)
    table.add_column("INCIDENTS", justify="right")
    table.add_column("STEPS LOST", justify="right")
    for row in rows:
        s = row.summary
        share = "-" if s.running_share is None else f"{100 * s.running_share:.1f}%"
        table.add_row(
            row.namespace, row.name, _duration(s.wall_s), _duration(s.productive_s), _duration(s.lost_s), share,
            *(_duration(s.lost_by_cause[c]) for c in CAUSES), str(s.incidents), str(s.work_lost_steps),
        )  # fmt: skip
    console.print(table)


def as_document(rows: Sequence[JobGoodput], now: datetime, since: datetime | None, result: ReadResult) -> str:
    """The ``--json`` document: the window, the jobs and what was read."""
    return json.dumps(
        {
            "now": now.isoformat().replace("+00:00", "Z"),
            "since": None if since is None else since.isoformat().replace("+00:00", "Z"),
            "jobs": [row.as_data() for row in rows],
            "records_read": result.records,
            "events_refused": result.fold.rejected,
            "records_unreadable": result.unreadable,
        },
        ensure_ascii=False,
    )


def run(args: argparse.Namespace) -> int:
    """Exit 0 with the report, 1 when the settings or Kafka cannot be read, 2 on a bad ``--since``."""
    try:
        settings = load_settings(getattr(args, "config", None))
    except SettingsError as e:
        print(f"fault-agent goodput: {e}", file=sys.stderr)
        return 1
    now: datetime = args.now or datetime.now(UTC)
    since: datetime | None = None
    if args.since:
        try:
            since = parse_since(args.since, now)
        except argparse.ArgumentTypeError as e:
            print(f"fault-agent goodput: --since: {e}", file=sys.stderr)
            return 2
    topic = args.topic or settings.kafka.recoveries_topic
    try:
        result = asyncio.run(read_events(settings.kafka, topic, args.timeout))
    except GoodputReadError as e:
        print(f"fault-agent goodput: cannot read {topic} at {settings.kafka.bootstrap_servers}: {e}", file=sys.stderr)
        return 1
    rows = result.fold.report(now, since=since, namespace=args.namespace)
    if args.json:
        print(as_document(rows, now, since, result))
    else:
        console = Console(highlight=False)
        if not console.is_terminal:  # a pipe or a file: wide enough for every column (rich would use 80)
            console = Console(highlight=False, width=PIPE_WIDTH)
        render(rows, console)
        if result.fold.rejected:
            print(f"{result.fold.rejected} recovery.resumed event(s) without the figures refused", file=sys.stderr)
    return 0
