"""Delta debugging of a failing soak schedule (testbed/soak/shrink.py), with predicates standing in for re-runs."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import cast

import pytest

from testbed.cluster import Testbed
from testbed.soak import cli, runner
from testbed.soak.checks import Verdict, Violation
from testbed.soak.shrink import ddmin


def test_it_finds_the_two_steps_that_fail_together() -> None:
    items = tuple(range(40))
    runs: list[tuple[int, ...]] = []

    def fails(sub: tuple[int, ...]) -> bool:
        runs.append(sub)
        return 7 in sub and 31 in sub

    shrunk = ddmin(items, fails, lambda: True)
    assert shrunk.items == (7, 31)
    assert shrunk.complete
    assert shrunk.runs == len(runs) == len(set(runs))  # never the same subset twice
    assert shrunk.runs < 60  # far fewer than the 2**40 subsets


def test_a_single_culprit_and_order_are_kept() -> None:
    shrunk = ddmin(("a", "b", "c", "d", "e"), lambda sub: "d" in sub, lambda: True)
    assert shrunk.items == ("d",)
    three = ddmin(tuple(range(12)), lambda sub: {2, 5, 9} <= set(sub), lambda: True)
    assert three.items == (2, 5, 9)


def test_the_result_is_one_minimal() -> None:
    """No single step of the result can be dropped and still fail (checked for an order-dependent predicate)."""

    def fails(sub: tuple[int, ...]) -> bool:  # needs a 3 before a 8 and at least one odd step after
        return any(a == 3 and b == 8 and any(c % 2 for c in sub[j + 1 :]) for (i, a), (j, b) in
                   itertools.combinations(enumerate(sub), 2))  # fmt: skip

    items = (1, 3, 4, 8, 2, 9, 8, 11)
    shrunk = ddmin(items, fails, lambda: True)
    assert fails(shrunk.items)
    for k in range(len(shrunk.items)):
        assert not fails(shrunk.items[:k] + shrunk.items[k + 1 :])


def test_a_failure_without_any_step_shrinks_to_the_empty_schedule() -> None:
    shrunk = ddmin(tuple(range(10)), lambda sub: True, lambda: True)
    assert shrunk.items == ()
    assert shrunk.runs == 1


def test_a_flaky_failure_that_no_subset_reproduces_keeps_the_whole_schedule() -> None:
    items = tuple(range(6))
    shrunk = ddmin(items, lambda sub: len(sub) == len(items), lambda: True)
    assert shrunk.items == items
    assert shrunk.complete


def test_the_budget_stops_the_search_with_the_best_so_far() -> None:
    budget = iter([True] * 5)

    shrunk = ddmin(tuple(range(64)), lambda sub: 40 in sub, lambda: next(budget, False))
    assert not shrunk.complete
    assert shrunk.runs == 5
    assert 40 in shrunk.items
    assert len(shrunk.items) < 64  # it got somewhere before the budget ran out


async def test_a_shrink_try_that_cannot_run_leaves_the_original_failure_standing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """CI, 2026-12-01: the soak failed (lifecycle), its third shrink try timed out setting up, and the whole soak
    exited 2 "could not run" with an empty message instead of reporting the failure it had found."""
    failing = Verdict((Violation("lifecycle", "incident x never ended"),), {})
    calls: list[int] = []

    async def fake_run(testbed: object, steps: object, **kwargs: object) -> tuple[Verdict, object]:
        calls.append(len(calls))
        if len(calls) == 1:
            return failing, None
        raise TimeoutError()  # a shrink try whose set-up timed out

    monkeypatch.setattr(runner, "run", fake_run)
    result = await cli.soak(
        cast(Testbed, None), seed=1, duration_s=60.0, workdir=tmp_path, shrink_budget_s=30.0, log=lambda _: None
    )
    assert result.verdict is failing
    assert len(calls) > 1  # shrinking was tried
    assert result.shrunk is not None
    assert len(result.shrunk.items) == len(result.steps)  # nothing could be dropped: the original schedule stands
