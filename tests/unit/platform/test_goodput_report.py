"""`fault-agent goodput` and `fault-agent status --training`: their pure parts (the window, the table, the lines)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from agent.core.goodput import JobGoodput, JobTraining, LostTime
from agent.platform.goodput_cli import parse_since, parse_time, render
from agent.platform.status import training_share, training_text

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("90s", NOW - timedelta(seconds=90), id="seconds"),
        pytest.param("30m", NOW - timedelta(minutes=30), id="minutes"),
        pytest.param("1.5h", NOW - timedelta(minutes=90), id="fractional-hours"),
        pytest.param("7d", NOW - timedelta(days=7), id="days"),
        pytest.param("2025-02-01T00:00:00Z", datetime(2025, 2, 1, tzinfo=UTC), id="rfc3339"),
        pytest.param("2025-02-01T02:00:00+02:00", datetime(2025, 2, 1, tzinfo=UTC), id="offset-to-utc"),
    ],
)
def test_since(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "7w", "2025-02-01T00:00:00", "-5m"])
def test_since_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_since(text, NOW)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time(text)


def _row() -> JobGoodput:
    account = JobTraining(NOW)
    account.add(LostTime(2, 1, 40, 30, 27), NOW + timedelta(hours=1), 54)
    return JobGoodput("team-a", "llama", account.summary(NOW + timedelta(hours=2)))


def test_the_table_has_one_line_per_job_with_its_share_and_causes() -> None:
    console = Console(width=200, record=True)
    render([_row()], console)
    text = console.export_text()
    assert "llama" in text
    assert "98.6%" in text  # (7200 - 100) / 7200
    assert "RECOMPUTATION" in text
    assert "2h00m" in text
    render([], console)
    assert "no job with a recovery.resumed event" in console.export_text()


def test_status_training_line_and_cell() -> None:
    row = _row()
    assert training_share(row) == "98.6%"
    assert training_share(None) == "-"
    line = training_text(row)
    assert line.startswith("98.6% productive: 7100s of 7200s since 2025-03-01T12:00:00Z")
    assert "rescheduling 40.0s" in line
    assert "in 1 incident(s), 54 step(s) computed again" in line
    assert training_text(None).startswith("no recovery.resumed event")
