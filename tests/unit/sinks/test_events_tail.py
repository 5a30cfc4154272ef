"""`events tail` formatting and argument parsing (no Kafka needed)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
from support import factories

from agent.cli import build_parser
from agent.core.faults import FaultKind, FaultLevel, ObjectRef
from agent.sinks import events as ev
from agent.sinks.tail import format_line, in_event_order

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
JOB = ObjectRef("vcjob", "team-a", "llama", "uid-1")


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        pytest.param(
            ev.recovery_started("inc-9", JOB, "restart-job", "chip out", cluster="c", at=T0),
            ["recovery.started.v1", "team-a/llama", "incident=inc-9", "action=restart-job"],
            id="started",
        ),
        pytest.param(
            ev.recovery_succeeded("inc-9", JOB, "restart-job", ev.Durations(1, 0.1, 0.2, 30, 31.3), cluster="c", at=T0),
            ["recovery.succeeded.v1", "total=31.3s"],
            id="ok",
        ),
        pytest.param(
            ev.recovery_failed("inc-9", JOB, "timeout", cluster="c", at=T0, detail="30 min"),
            ["recovery.failed.v1", "reason=timeout", "30 min"],
            id="failed",
        ),
        pytest.param(
            ev.breaker_reset(cluster="c", at=T0, by="alice"), ["breaker.reset.v1", "cluster", "alice"], id="breaker"
        ),
        pytest.param(
            ev.fault_detected(
                replace(
                    factories.fault(kind=FaultKind.NODE, level=FaultLevel.RESTART_NPU, at=T0),
                    chips=(),
                    codes=("XID-48",),
                    reason="GPUProblem",
                    detail="XidError48: DBE",
                    devices=("GPU:GPU-8f3c2a10-1b2c-4d5e-8f90-0123456789ab",),
                ),
                cluster="c",
                job=JOB,
            ),
            ["fault.detected.v1", "RestartNPU", "codes=XID-48", "devices=GPU:GPU-8f3c", "detail='XidError48: DBE'"],
            id="gpu-fault-keeps-nvidias-words",
        ),
    ],
)
def test_pretty_line_names_what_matters(event: object, expected: list[str]) -> None:
    line = format_line("t", b"k", ev.encode(event).value).plain  # type: ignore[arg-type]
    assert line.startswith("12:00:00.000 ")
    for part in expected:
        assert part in line


@pytest.mark.parametrize("value", [b"not json", b'{"specversion":"1.0"}', b""])
def test_foreign_records_are_shown_not_raised(value: bytes) -> None:
    assert format_line("t", None, value).plain.startswith("not a CloudEvent on t")


def test_cli_parses_tail_options() -> None:
    args = build_parser("events").parse_args(["events", "tail", "--topic", "a", "--topic", "b", "--json", "--max", "3"])
    assert args.topic == ["a", "b"]
    assert args.json is True
    assert args.max == 3
    assert callable(args.func)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--idle-exit", "-1"], "argument --idle-exit: must be 0 or more, got -1", id="negative-idle"),
        pytest.param(["--idle-exit", "-0.5"], "argument --idle-exit: must be 0 or more, got -0.5", id="fraction"),
        pytest.param(["--idle-exit", "nan"], "argument --idle-exit: must be 0 or more, got nan", id="nan"),
        pytest.param(["--idle-exit", "soon"], "argument --idle-exit: expected a number of seconds, got 'soon'",
                     id="not-a-number"),
        pytest.param(["--max", "-1"], "argument --max: must be 0 or more, got -1", id="negative-max"),
        pytest.param(["--max", "1.5"], "argument --max: expected a whole number, got '1.5'", id="max-not-whole"),
    ],
)  # fmt: skip
def test_cli_refuses_negative_numbers(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser("events").parse_args(["events", "tail", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "max_", "idle"), [(["--max", "0", "--idle-exit", "0"], 0, 0.0), ([], 0, 0.0),
                                                    (["--max", "5", "--idle-exit", "2.5"], 5, 2.5)])  # fmt: skip
def test_cli_accepts_zero_and_positive_numbers(argv: list[str], max_: int, idle: float) -> None:
    args = build_parser("events").parse_args(["events", "tail", *argv])
    assert (args.max, args.idle_exit) == (max_, idle)


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser("events").parse_args(["events", "tail", "--help"])
    out = capsys.readouterr().out
    assert "Follow the agent's CloudEvents on Kafka" in out
    assert "``" not in out


@pytest.mark.parametrize("topic", ["", ".", "..", "a b", "x" * 250, "faults/1"])
def test_tail_refuses_a_topic_kafka_cannot_have(topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from agent.sinks.tail import configure

    parser = argparse.ArgumentParser(prog="fault-agent events")
    configure(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["tail", "--topic", topic])
    assert exit_info.value.code == 2
    assert "is not a Kafka topic name" in capsys.readouterr().err


def test_tail_keeps_aiokafkas_connection_noise_out_of_the_terminal() -> None:
    import logging

    from agent.sinks.tail import _DropMissingTopic

    quiet = _DropMissingTopic()

    def record(msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("aiokafka", logging.ERROR, "client.py", 1, msg, args, None)

    assert not quiet.filter(record('Unable connect to "%s:%s": %s', "127.0.0.1", 1, "refused"))
    assert not quiet.filter(record("Topic %s not found in cluster metadata", "nope"))
    assert quiet.topics == {"nope"}
    assert quiet.filter(record("something else %s", "x"))


def test_a_dry_run_event_says_so() -> None:
    """Issue 41, 7: a dry-run recovery.started looked like a real one in `events tail`."""
    shadow = ev.recovery_started("inc-9", JOB, "restart-job", "chip out", cluster="c", at=T0, dry_run=True)
    real = ev.recovery_started("inc-9", JOB, "restart-job", "chip out", cluster="c", at=T0)
    assert "[dry-run]" in format_line("t", b"k", ev.encode(shadow).value).plain
    assert "[dry-run]" not in format_line("t", b"k", ev.encode(real).value).plain


@dataclass
class Rec:
    topic: str
    offset: int
    value: bytes | None


def test_records_of_one_fetch_print_in_the_order_of_their_events() -> None:
    """Issue 41, 7: Kafka orders records per partition only, so a fault.detected fetched after the
    recovery.started it caused printed after it. One fetch's records go in their events' own time order."""
    fault = factories.fault(at=T0)
    detected = ev.encode(ev.fault_detected(fault, cluster="c", job=JOB, incident_id="inc-9")).value
    started = ev.encode(
        ev.recovery_started("inc-9", JOB, "restart-job", "chip out", cluster="c", at=T0 + timedelta(milliseconds=40))
    ).value
    fetched = [Rec("training.recoveries", 7, started), Rec("training.faults", 3, detected), Rec("x", 0, b"junk")]
    ordered = in_event_order(fetched)
    assert [r.topic for r in ordered] == ["training.faults", "training.recoveries", "x"]
