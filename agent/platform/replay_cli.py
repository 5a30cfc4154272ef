"""`fault-agent replay`: for now only ``--export-scenario``, which turns a recording window into a scenario file.

``fault-agent replay --export-scenario RECORDING... [--from T] [--to T] -o FILE``: RECORDING is a segment file or
a recording folder (agent.kube.record); T is Unix milliseconds or an RFC 3339 time. Replaying a recording or a
scenario through the agent's decisions is not available yet (it needs the engine redesign); ``fault-agent
replay`` without ``--export-scenario`` says so and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from agent.kube.record import RecordError, read_recording
from agent.platform.scenario import dump_scenario, export_scenario, load_scenario

NOT_YET = (
    "fault-agent replay: replaying a recording or scenario is not available yet; "
    "only --export-scenario RECORDING... -o FILE works in this version"
)


def parse_time_ms(value: str) -> int:
    """Unix milliseconds from ``1764590000123`` or an RFC 3339 time (``2026-12-01T13:00:00Z``).

    Raises:
        argparse.ArgumentTypeError: neither (a time without a zone is refused: it would depend on the machine).
    """
    if value.isdigit():
        return int(value)
    try:
        at = datetime.fromisoformat(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not Unix ms or an RFC 3339 time: {value!r}") from e
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"an RFC 3339 time needs its zone (Z or +hh:mm): {value!r}")
    return int(at.timestamp() * 1000)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this subcommand's arguments and its `func` (see agent.cli)."""
    parser.add_argument("inputs", nargs="*", metavar="FILE", help="recording files or folders")
    parser.add_argument(
        "--export-scenario", action="store_true", help="write the recording window as a scenario file (-o)"
    )
    parser.add_argument("--from", dest="from_ms", type=parse_time_ms, help="window start (Unix ms or RFC 3339)")
    parser.add_argument("--to", dest="to_ms", type=parse_time_ms, help="window end (Unix ms or RFC 3339)")
    parser.add_argument("-o", "--output", help="scenario file to write ('-' for standard output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit codes: 0 written, 2 usage error, replay requested, or an unreadable recording (message on stderr)."""
    if not args.export_scenario:
        print(NOT_YET, file=sys.stderr)
        return 2
    if not args.inputs or not args.output:
        print("fault-agent replay --export-scenario: give RECORDING... and -o FILE", file=sys.stderr)
        return 2
    if args.from_ms is not None and args.to_ms is not None and args.from_ms > args.to_ms:
        print("fault-agent replay: --from is after --to", file=sys.stderr)
        return 2
    try:
        steps = export_scenario(read_recording(Path(p) for p in args.inputs), from_ms=args.from_ms, to_ms=args.to_ms)
    except RecordError as e:
        print(f"fault-agent replay: {e}", file=sys.stderr)
        return 2
    text = dump_scenario(steps)
    load_scenario(text, filename=args.output)  # what we write must load: a bug here is ours, let it raise
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{len(steps)} steps written to {args.output}", file=sys.stderr)
    return 0
