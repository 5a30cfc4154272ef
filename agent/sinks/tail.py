"""``fault-agent events tail``: follow the agent's CloudEvents on Kafka, for operators.

Reads the faults and recoveries topics (or the ``--topic`` given) from the end (or ``--from-beginning``) without a
consumer group, and prints one line per event (pretty, with rich) or the event JSON (``--json``, one per line).
Kafka connection and security come from the agent's settings (``kafka`` group).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import re
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from rich.console import Console
from rich.text import Text

from agent.settings import SettingsError, load_settings
from agent.sinks.events import decode

DESCRIPTION = (
    "Follow the agent's CloudEvents on Kafka: the faults and recoveries topics (or each --topic), from the end "
    "(or --from-beginning), without a consumer group. One line per event, or the event's JSON with --json. "
    "Kafka connection and security come from the agent's settings (kafka group)."
)


def _non_negative(convert: Callable[[str], float], what: str) -> Callable[[str], Any]:
    """An argparse type: `convert` the text, refuse negative (and non-finite) numbers with a clear message."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
        return value

    return parse


_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topic_name(text: str) -> str:
    """argparse type of --topic: a legal Kafka topic name (1-249 of [A-Za-z0-9._-], not "." or "..")."""
    if not _TOPIC.fullmatch(text) or text in (".", ".."):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Kafka topic name (1-249 characters of letters, digits, '.', '_' and '-')"
        )
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``tail`` and its options to the ``events`` subcommand parser; sets ``func``."""
    sub = parser.add_subparsers(dest="events_command", metavar="ACTION")
    tail = sub.add_parser("tail", help="print events as they arrive", description=DESCRIPTION)
    tail.add_argument(
        "--topic", action="append", type=_topic_name, help="topic to read (repeatable; default: both agent topics)"
    )
    tail.add_argument("--json", action="store_true", help="print each event's JSON on one line")
    tail.add_argument("--from-beginning", action="store_true", help="start at the oldest retained event")
    tail.add_argument(
        "--max",
        type=_non_negative(int, "a whole number"),
        default=0,
        help="stop after this many events (0: run until Ctrl-C)",
    )
    tail.add_argument(
        "--idle-exit",
        type=_non_negative(float, "a number of seconds"),
        default=0.0,
        help="stop after this many seconds with no event (0: never)",
    )
    tail.set_defaults(func=run)
    parser.set_defaults(func=_usage(parser))


def _usage(parser: argparse.ArgumentParser) -> Any:
    def show(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return show


def run(args: argparse.Namespace) -> int:
    """Run ``events tail``; exit code 0 after --max/--idle-exit or Ctrl-C, 1 when Kafka cannot be read."""
    try:
        settings = load_settings(getattr(args, "config", None))
    except SettingsError as e:
        print(f"fault-agent events tail: {e}", file=sys.stderr)
        return 1
    topics = args.topic or [settings.kafka.faults_topic, settings.kafka.recoveries_topic]
    try:
        return asyncio.run(_tail(settings.kafka, topics, args))
    except KeyboardInterrupt:
        return 0


async def _tail(kafka: Any, topics: list[str], args: argparse.Namespace) -> int:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError, UnknownTopicOrPartitionError

    from agent.sinks.kafka import KafkaSinkError, producer_options

    console = Console(highlight=False, soft_wrap=True)
    try:
        opts = producer_options(kafka)
    except KafkaSinkError as e:
        print(f"fault-agent events tail: {e}", file=sys.stderr)
        return 1
    consumer = AIOKafkaConsumer(
        *topics,
        **opts,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
    )
    # aiokafka logs each metadata retry for a missing topic ("Topic x not found in cluster metadata"); the
    # error below says it once.
    quiet = _DropMissingTopic()
    cluster_log = logging.getLogger("aiokafka.cluster")
    cluster_log.addFilter(quiet)
    # and logs each failed bootstrap connection ('Unable connect to "host:port"'): the error below names it
    client_log = logging.getLogger("aiokafka")
    client_log.addFilter(quiet)
    try:
        await consumer.start()
    except (KafkaError, OSError) as e:
        if isinstance(e, UnknownTopicOrPartitionError):
            missing = ", ".join(sorted(quiet.topics)) or ", ".join(topics)
            reason = f"topic {missing} not found (check --topic or the kafka topic settings)"
        else:
            reason = str(e)
        print(
            f"fault-agent events tail: cannot read {', '.join(topics)} at {kafka.bootstrap_servers}: {reason}",
            file=sys.stderr,
        )
        await consumer.stop()
        return 1
    finally:
        cluster_log.removeFilter(quiet)
        client_log.removeFilter(quiet)
    seen = 0
    try:
        while True:
            timeout_ms = int(args.idle_exit * 1000) if args.idle_exit else 1000
            batch = await consumer.getmany(timeout_ms=timeout_ms)
            if not batch and args.idle_exit:
                return 0
            for rec in in_event_order([r for records in batch.values() for r in records]):
                _print(console, rec.topic, rec.key, rec.value, as_json=args.json)
                seen += 1
                if args.max and seen >= args.max:
                    return 0
    finally:
        await consumer.stop()


class _DropMissingTopic(logging.Filter):
    """Drops aiokafka's "Topic %s not found in cluster metadata" records (remembering the topics named) and its
    "Unable connect to" records while the consumer starts: the command prints one error of its own instead."""

    def __init__(self) -> None:
        super().__init__()
        self.topics: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == 'Unable connect to "%s:%s": %s':
            return False
        if record.msg == "Topic %s not found in cluster metadata" and record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            self.topics.add(str(args[0]))
            return False
        return True


class _Record(Protocol):
    topic: str
    offset: int
    value: bytes | None


R = TypeVar("R", bound=_Record)


def in_event_order(records: list[R]) -> list[R]:
    """`records` of one fetch (both topics, every partition) in the order of their events' own times, then topic and
    offset (a record that is no CloudEvent keeps its place at the end). Kafka orders records per partition only:
    a ``fault.detected`` (faults topic) fetched after the ``recovery.started`` (recoveries topic) it caused printed
    after it."""

    def when(rec: R) -> tuple[float, str, int]:
        try:
            t = decode(rec.value or b"").get_time()
        except ValueError:
            t = None
        return (t.timestamp() if t is not None else math.inf, rec.topic, rec.offset)

    return sorted(records, key=when)


def format_line(topic: str, key: bytes | None, value: bytes) -> Text:
    """One pretty line for an event record: time, type, ``[dry-run]`` when the agent wrote nothing (shadow mode),
    subject and the fields that matter for its type.

    A record that is not one of our CloudEvents is shown as such (never raises).
    """
    try:
        ev = decode(value)
    except ValueError as e:
        return Text.assemble(("not a CloudEvent ", "bold red"), f"on {topic} key={key!r}: {e}")
    data = ev.get_data()
    d: dict[str, Any] = data if isinstance(data, dict) else {}
    kind = ev.get_type().removeprefix("io.faultagent.")
    t = ev.get_time()
    style = "red" if "failed" in kind or "tripped" in kind or kind.startswith("fault.detected") else "green"
    line = Text.assemble((t.strftime("%H:%M:%S.%f")[:-3] if t else "-", "dim"), " ", (f"{kind:<24}", style), " ")
    if d.get("dry_run") is True:  # shadow mode: decided and published, nothing was written to the cluster
        line.append("[dry-run] ", style="bold yellow")
    line.append(ev.get_subject() or "-", style="bold")
    line.append(" " + _summary(kind, d))
    return line


def _summary(kind: str, d: dict[str, Any]) -> str:
    fault = d.get("fault") or {}
    if kind.startswith("fault."):
        chips = ",".join(fault.get("chips", []))
        parts = [fault.get("kind", ""), fault.get("level", ""), f"node={fault.get('node', '')}"]
        if chips:
            parts.append(f"chips={chips}")
        if fault.get("codes"):
            parts.append("codes=" + ",".join(fault["codes"]))
        if fault.get("devices"):  # a GPU's identifiers (PCI:…, GPU:<uuid>), issue 42
            parts.append("devices=" + ",".join(fault["devices"]))
        if fault.get("detail"):
            parts.append(f"detail={fault['detail'][:120]!r}")
        return " ".join(p for p in parts if p)
    if kind.startswith("recovery.held"):
        return f"incident={d.get('incident_id')} held-by-breaker would={d.get('action')} reason={d.get('reason')!r}"
    if kind.startswith("recovery.started"):
        return f"incident={d.get('incident_id')} action={d.get('action')} reason={d.get('reason')!r}"
    if kind.startswith("recovery.succeeded"):
        dur = d.get("durations") or {}
        return f"incident={d.get('incident_id')} total={dur.get('total_s', 0):.1f}s"
    if kind.startswith("recovery.failed"):
        return f"incident={d.get('incident_id')} reason={d.get('reason')} {d.get('detail', '')}".rstrip()
    if kind.startswith("quarantine.released"):
        chips = ",".join(d.get("chips") or [])
        still = d.get("still_quarantined")
        return (
            f"by={d.get('by')} reason={d.get('reason')!r}"
            + (f" chips={chips}" if chips else "")
            + (f" still quarantined at {still}" if still else " node free")
        )
    if kind.startswith("breaker."):
        return json.dumps({k: v for k, v in d.items() if k != "faulty_nodes"}, separators=(",", ":"))
    return ""


def _print(console: Console, topic: str, key: bytes | None, value: bytes, *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(value.decode("utf-8", errors="replace").strip() + "\n")
        sys.stdout.flush()
        return
    console.print(format_line(topic, key, value))
