"""Logging configuration: format choice, level filtering, bound context, library loggers, tracebacks."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any, Literal

import pytest
import structlog

from agent.runtime.logs import bound, configure_logging, job_ref, log_decision, wants_json
from agent.settings import LogSettings


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_fault_agent_handler", False):
            root.removeHandler(h)
    root.setLevel(logging.WARNING)


def _settings(level: str = "info", fmt: str = "json") -> LogSettings:
    return LogSettings.model_validate({"level": level, "format": fmt})


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("fmt", "tty", "expected_json"),
    [
        pytest.param("auto", False, True, id="auto-pipe-json"),
        pytest.param("auto", True, False, id="auto-terminal-console"),
        pytest.param("json", True, True, id="json-forced-on-terminal"),
        pytest.param("console", False, False, id="console-forced-in-container"),
    ],
)
def test_format_choice(fmt: Literal["auto", "json", "console"], tty: bool, expected_json: bool) -> None:
    stream: io.StringIO = _TTY() if tty else io.StringIO()
    assert wants_json(_settings(fmt=fmt), stream) is expected_json
    configure_logging(_settings(fmt=fmt), stream)
    structlog.get_logger("t").info("hello", node="node-1")
    out = stream.getvalue().strip()
    if expected_json:
        record = json.loads(out)
        assert record["event"] == "hello"
        assert record["node"] == "node-1"
        assert record["level"] == "info"
        assert record["timestamp"].endswith("Z")
    else:
        out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # colours on a terminal
        assert out.startswith("20")  # ISO timestamp first
        assert "hello" in out
        assert "node=" in out
        with pytest.raises(json.JSONDecodeError):
            json.loads(out)


@pytest.mark.parametrize(
    ("level", "emitted"),
    [
        pytest.param("debug", ["d", "i", "w", "e"], id="debug"),
        pytest.param("info", ["i", "w", "e"], id="info"),
        pytest.param("warning", ["w", "e"], id="warning"),
        pytest.param("error", ["e"], id="error"),
    ],
)
def test_level_filtering(level: str, emitted: list[str]) -> None:
    stream = io.StringIO()
    configure_logging(_settings(level=level), stream)
    log = structlog.get_logger("t")
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.error("e")
    assert [r["event"] for r in _lines(stream)] == emitted


def test_bound_context_is_added_and_restored() -> None:
    stream = io.StringIO()
    configure_logging(_settings(), stream)
    log = structlog.get_logger("t")
    with bound(incident="inc-1", job=job_ref("team-a", "llama"), node=None):
        log.info("outer")
        with bound(node="node-7"):
            log.info("inner")
        log.info("outer-again")
    log.info("after")
    lines = {r["event"]: r for r in _lines(stream)}
    assert lines["outer"]["incident"] == "inc-1"
    assert lines["outer"]["job"] == "team-a/llama"
    assert "node" not in lines["outer"]  # None is not bound
    assert lines["inner"]["node"] == "node-7"
    assert lines["inner"]["incident"] == "inc-1"
    assert "node" not in lines["outer-again"]
    assert not {"incident", "job", "node"} & set(lines["after"])


async def test_bound_context_follows_awaits_but_not_sibling_tasks() -> None:
    stream = io.StringIO()
    configure_logging(_settings(), stream)
    log = structlog.get_logger("t")

    async def step(name: str) -> None:
        await asyncio.sleep(0)
        log.info(name)

    async def handle(incident: str) -> None:
        with bound(incident=incident):
            await step(f"step-{incident}")

    await asyncio.gather(handle("a"), handle("b"))
    lines = {r["event"]: r for r in _lines(stream)}
    assert lines["step-a"]["incident"] == "a"
    assert lines["step-b"]["incident"] == "b"


@pytest.mark.parametrize(
    ("agent_level", "lib_level", "shown"),
    [
        pytest.param("info", logging.INFO, False, id="lib-info-hidden-at-info"),
        pytest.param("info", logging.WARNING, True, id="lib-warning-shown"),
        pytest.param("debug", logging.INFO, True, id="lib-info-shown-at-debug"),
    ],
)
def test_library_loggers_use_same_format(agent_level: str, lib_level: int, shown: bool) -> None:
    stream = io.StringIO()
    configure_logging(_settings(level=agent_level), stream)
    logging.getLogger("aiokafka.producer").log(lib_level, "broker %s down", "b1")
    lines = _lines(stream)
    if shown:
        assert lines == [{**lines[0], "event": "broker b1 down", "logger": "aiokafka.producer"}]
        assert "timestamp" in lines[0]
    else:
        assert lines == []


def test_exception_is_a_traceback_string_without_locals() -> None:
    stream = io.StringIO()
    configure_logging(_settings(), stream)
    secret = "s3cr3t-password"
    try:
        raise ValueError("bad " + "input")
    except ValueError:
        structlog.get_logger("t").exception("failed")
    (record,) = _lines(stream)
    assert record["level"] == "error"
    assert isinstance(record["exception"], str)
    assert "ValueError: bad input" in record["exception"]
    assert secret not in stream.getvalue()


def test_reconfiguring_does_not_duplicate_handlers() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(_settings(), first)
    configure_logging(_settings(), second)
    logging.getLogger("aiokafka").error("once")
    assert first.getvalue() == ""
    assert len(_lines(second)) == 1


def test_log_decision_writes_one_line_with_reason() -> None:
    stream = io.StringIO()
    configure_logging(_settings(), stream)
    log_decision(
        structlog.get_logger("policy"),
        action="restart-job",
        reason="SeparateNPU on node-3 chip Ascend910-2; fault-scheduling=force",
        job="team-a/llama",
        incident="inc-9",
        budget_left=2,
    )
    (record,) = _lines(stream)
    assert record["event"] == "decision"
    assert record["action"] == "restart-job"
    assert record["reason"].startswith("SeparateNPU")
    assert record["job"] == "team-a/llama"
    assert record["incident"] == "inc-9"
    assert record["budget_left"] == 2


def test_a_closed_stream_loses_the_line_and_never_fails_the_caller() -> None:
    """The agent's lines go straight to the stream (no standard-library handler between): a stream closed under it
    (a test's captured output, a container's stderr gone) must not raise into the code that logged."""
    stream = io.StringIO()
    configure_logging(_settings(), stream)
    stream.close()
    log = structlog.get_logger("t")
    log.info("lost")
    log.error("lost too", node="n1")
    log.exception("and this")
