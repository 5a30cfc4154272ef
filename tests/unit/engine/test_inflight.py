"""The one owner of a restart in flight (agent/engine/inflight.py): each named operation, and what a new term keeps."""

from __future__ import annotations

import pytest

from agent.core.bookkeeping import BookkeepingIntent
from agent.core.faults import FaultKind
from agent.core.policy import Action
from agent.engine.inflight import COMMANDS_SENT_KEPT, UNSENT_DETAIL_CHARS, RestartsInFlight

INTENT = BookkeepingIntent("ns/job-uid-1", "uid-1", 1, ())


def test_a_task_acting_on_a_job_begins_and_ends_and_drops_its_untaken_bookkeeping() -> None:
    inflight = RestartsInFlight()
    inflight.begin("uid-1")
    inflight.plan_bookkeeping("inc-1", INTENT)
    assert inflight.acting_on("uid-1")
    assert inflight.executing() == {"uid-1"}
    inflight.end("uid-1", "inc-1")
    assert not inflight.acting_on("uid-1")
    assert inflight.take_bookkeeping("inc-1") is None  # dropped: a resume rebuilds it


def test_bookkeeping_is_taken_once_and_none_plans_nothing() -> None:
    inflight = RestartsInFlight()
    inflight.plan_bookkeeping("inc-1", None)
    assert inflight.take_bookkeeping("inc-1") is None
    inflight.plan_bookkeeping("inc-1", INTENT)
    assert inflight.take_bookkeeping("inc-1") == INTENT
    assert inflight.take_bookkeeping("inc-1") is None


def test_unsent_is_cut_and_cleared_when_sent() -> None:
    inflight = RestartsInFlight()
    inflight.mark_unsent("inc-1", "x" * (UNSENT_DETAIL_CHARS + 50))
    assert inflight.unsent("inc-1") == "x" * UNSENT_DETAIL_CHARS
    inflight.sent("inc-1")
    assert inflight.unsent("inc-1") is None


def test_sent_commands_are_bounded_oldest_first_and_a_repeat_is_the_newest() -> None:
    inflight = RestartsInFlight()
    for n in range(COMMANDS_SENT_KEPT):
        inflight.command_sent(f"inc-{n}")
    inflight.command_sent("inc-0")  # sent again: now the newest
    inflight.command_sent("inc-new")
    assert inflight.command_was_sent("inc-0")
    assert not inflight.command_was_sent("inc-1")  # the oldest went
    assert len(inflight.commands_sent()) == COMMANDS_SENT_KEPT
    assert inflight.commands_sent()[-2:] == ("inc-0", "inc-new")


def test_kept_resubmissions_are_kept_released_and_narrowed_to_the_records_listed() -> None:
    inflight = RestartsInFlight()
    for uid in ("a", "b", "c"):
        inflight.keep(uid)
    inflight.release("a")
    inflight.keep_only(["b", "z"])
    assert inflight.kept() == {"b"}
    assert inflight.is_kept("b")
    assert not inflight.is_kept("c")


@pytest.mark.parametrize(
    ("action", "closed"),
    [
        pytest.param(Action.RESUBMIT.value, True, id="resubmit-makes-its-record-stale"),
        pytest.param(Action.RESTART_JOB.value, False, id="restart-job"),
        pytest.param(None, False, id="no-action"),
    ],
)
def test_finish_forgets_the_incident_and_notes_a_closed_resubmission(action: str | None, closed: bool) -> None:
    inflight = RestartsInFlight()
    inflight.note_fault_kind("inc-1", FaultKind.NETWORK)
    inflight.mark_unsent("inc-1", "claim failed")
    inflight.command_sent("inc-1")
    assert inflight.finish("inc-1", action) is FaultKind.NETWORK
    assert inflight.unsent("inc-1") is None
    assert not inflight.command_was_sent("inc-1")
    assert inflight.resubmission_closed() is closed
    assert inflight.take_resubmission_closed() is closed
    assert not inflight.take_resubmission_closed()  # taken: reset
    assert inflight.finish("inc-1", action) is FaultKind.CHIP  # unknown now (as an adopted incident's)


def test_abandoned_forgets_only_the_fault_kind() -> None:
    inflight = RestartsInFlight()
    inflight.note_fault_kind("inc-1", FaultKind.NODE)
    inflight.command_sent("inc-1")
    assert inflight.abandoned("inc-1") is FaultKind.NODE
    assert inflight.abandoned("inc-1") is FaultKind.CHIP
    assert inflight.command_was_sent("inc-1")


def test_a_new_term_forgets_the_kept_resubmissions_and_keeps_running_tasks_and_sent_commands() -> None:
    inflight = RestartsInFlight()
    inflight.begin("uid-1")
    inflight.keep("uid-2")
    inflight.command_sent("inc-1")
    inflight.new_term()
    assert inflight.kept() == set()
    assert inflight.acting_on("uid-1")  # its task still runs
    assert inflight.command_was_sent("inc-1")  # a fact about this process, whatever the term
