"""`fault-agent replay`: replay a recording or scenario through the agent's decisions, compare two configurations,
or export a recording window as a scenario file.

- ``fault-agent replay FILE... [--config agent.yaml] [--json]``: every decision, intended write and event with its
  virtual time (agent.replay; docs/replay.md). FILE: recording segments or folders (agent.kube.record), JSON-lines
  files, scenario files (``.yaml``; their first step is at ``--start``).
- ``fault-agent replay FILE... --compare OTHER.yaml``: replay under both configurations (``--config`` and OTHER:
  agent settings or a fault-level table, agent.replay.compare); a table of the decisions that differ and totals.
- ``fault-agent replay --export-scenario RECORDING... [--from T] [--to T] -o FILE``: T is Unix milliseconds or an
  RFC 3339 time.

Exit codes: 0 replayed (compared, exported) and every input line was used; 1 done, but some input lines were
skipped (each named on stderr as ``file:line: what``, then a count); 2 usage error, unreadable configuration, or no
input record at all.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from agent.kube.record import RecordError, read_recording
from agent.replay.scenario import dump_scenario, export_scenario, load_scenario
from agent.settings import Settings

if TYPE_CHECKING:
    from agent.replay.records import Record

SCENARIO_START = "2026-01-01T00:00:00Z"
"""The default wall time of a scenario's ``at: 0`` (``--start``)."""


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
    parser.add_argument(
        "inputs", nargs="*", metavar="FILE", help="recording files or folders, JSON-lines or scenario (.yaml) files"
    )
    parser.add_argument("--config", help="agent settings file replayed (default: built-in defaults)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--compare", metavar="OTHER", help="replay again under OTHER (settings or a fault-level table) and compare"
    )
    parser.add_argument(
        "--start", type=parse_time_ms, default=None, help=f"wall time of a scenario's at: 0 (default {SCENARIO_START})"
    )
    parser.add_argument("--tail", type=float, default=0.0, help="virtual seconds replayed after the last record")
    parser.add_argument(
        "--export-scenario", action="store_true", help="write the recording window as a scenario file (-o)"
    )
    parser.add_argument("--from", dest="from_ms", type=parse_time_ms, help="window start (Unix ms or RFC 3339)")
    parser.add_argument("--to", dest="to_ms", type=parse_time_ms, help="window end (Unix ms or RFC 3339)")
    parser.add_argument("-o", "--output", help="scenario file to write ('-' for standard output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """See the module docstring for the exit codes."""
    if not args.export_scenario:
        return replay_main(args)
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


def replay_main(args: argparse.Namespace) -> int:
    """``fault-agent replay FILE... [--config] [--json] [--compare OTHER]`` (see the module docstring)."""
    from agent.replay import InputProblem, Problems, read_inputs, run_replay
    from agent.replay.compare import CompareError, other_configuration
    from agent.replay.ports import Output
    from agent.settings import SettingsError, load_settings

    if not args.inputs:
        print("fault-agent replay: give FILE... (a recording, JSON-lines or scenario file)", file=sys.stderr)
        return 2
    try:
        settings = load_settings(args.config) if args.config else load_settings_defaults()
    except SettingsError as e:
        print(f"fault-agent replay: {e}", file=sys.stderr)
        return 2
    start_ms = args.start if args.start is not None else parse_time_ms(SCENARIO_START)
    paths = [Path(p) for p in args.inputs]
    skipped = 0

    def problem(p: InputProblem) -> None:
        nonlocal skipped
        skipped += 1
        print(f"fault-agent replay: {p}", file=sys.stderr)

    _quiet_logs()
    if args.compare:
        try:
            other, inject = other_configuration(Path(args.compare), settings)
        except CompareError as e:
            print(f"fault-agent replay: {e}", file=sys.stderr)
            return 2
        out_a: list[Output] = []
        out_b: list[Output] = []
        res_a = run_replay(read_inputs(paths, Problems(on_problem=problem), scenario_start_ms=start_ms), settings,
                           on_output=out_a.append, on_problem=problem, tail_s=args.tail)  # fmt: skip
        res_b = run_replay(read_inputs(paths, Problems(), scenario_start_ms=start_ms), other,
                           on_output=out_b.append, tail_s=args.tail, inject=inject)  # fmt: skip
        if res_a.start is None:
            print("fault-agent replay: no input record", file=sys.stderr)
            return 2
        from agent.replay.table import print_comparison

        try:
            print_comparison(res_a, res_b, out_a, out_b, a_name=args.config or "defaults", b_name=args.compare,
                             as_json=args.json)  # fmt: skip
            sys.stdout.flush()
        except BrokenPipeError:  # `replay … --compare B | head`: the reader went away
            from agent.platform.output import output_closed

            return output_closed()
    else:
        closed = False  # standard output's reader went away (`replay … | head`)

        def emit(o: Output) -> None:
            # called from inside the engine: an error raised here would be logged as a failure to handle a fault
            nonlocal closed
            if closed:
                return
            try:
                sys.stdout.write((orjson.dumps(o.as_dict()).decode() if args.json else format_output(o)) + "\n")
            except BrokenPipeError:
                closed = True

        def until_closed(records: Iterator[Record]) -> Iterator[Record]:
            for record in records:  # no more input once nobody reads the output: the replay ends early
                if closed:
                    return
                yield record

        records = until_closed(read_inputs(paths, Problems(on_problem=problem), scenario_start_ms=start_ms))
        result = run_replay(records, settings, on_output=emit, on_problem=problem, tail_s=args.tail)
        if not closed:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                closed = True
        if closed:
            from agent.platform.output import output_closed

            return output_closed()
        if result.start is None:
            print("fault-agent replay: no input record", file=sys.stderr)
            return 2
    if skipped:
        print(f"fault-agent replay: {skipped} input lines skipped", file=sys.stderr)
        return 1
    return 0


def format_output(o: object) -> str:
    """One output as a text line: time, kind, job (or -), action, event type, reason."""
    from agent.replay.ports import Output, rfc3339_ms

    assert isinstance(o, Output)
    event = f" [{o.event_type}]" if o.event_type else ""
    return f"{rfc3339_ms(o.t)}  {o.kind:<8} {o.job or '-':<28} {o.action or '-':<18}{event} {o.reason}".rstrip()


def load_settings_defaults() -> Settings:
    """The built-in settings (``FAULT_AGENT_*`` variables still apply, as for ``fault-agent run``)."""
    from agent.settings import load_settings

    return load_settings(None)


def _quiet_logs() -> None:
    """The engine's logs go to stderr at warning level (the output is on stdout)."""
    from agent.runtime.logs import configure_logging
    from agent.settings import LogSettings

    configure_logging(LogSettings(level="warning", format="console"))
