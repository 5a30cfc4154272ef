"""Shrinking a failing schedule: delta debugging (Zeller and Hildebrandt's ddmin) over its steps.

Pure but for the predicate it is given: ``fails(steps)`` re-runs the soak on those steps (on the testbed) and
says whether it still fails the same way. The search stops when no single step can be removed (a 1-minimal
schedule) or when ``may_continue()`` says the time budget is spent; either way it returns the shortest failing
schedule found. Results are cached, so a subset is never run twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Shrunk(Generic[T]):
    """What :func:`ddmin` found: the shortest failing subsequence, the predicate runs it took, and whether it
    finished (False: the budget ran out first, so a shorter one may exist)."""

    items: tuple[T, ...]
    runs: int
    complete: bool


def ddmin(items: Sequence[T], fails: Callable[[tuple[T, ...]], bool], may_continue: Callable[[], bool]) -> Shrunk[T]:
    """The shortest subsequence of `items` (order kept) for which `fails` is true.

    `fails(items)` is assumed true and not run; the empty sequence is tried first. `may_continue()` is asked
    before every run of `fails`; once it says False the best so far is returned with ``complete=False``.

    Raises:
        whatever `fails` raises (a broken predicate is not a passing run).
    """
    current = tuple(items)
    cache: dict[tuple[int, ...], bool] = {tuple(range(len(current))): True}
    index = list(range(len(current)))  # positions into `items`, so equal items stay distinct
    runs = 0

    def test(subset: list[int]) -> bool | None:
        nonlocal runs
        key = tuple(subset)
        if key in cache:
            return cache[key]
        if not may_continue():
            return None
        runs += 1
        result = bool(fails(tuple(items[i] for i in subset)))
        cache[key] = result
        return result

    if index:  # does it fail with no step at all (the fault is in the set-up, not the schedule)?
        result = test([])
        if result is None:
            return Shrunk(current, runs, False)
        if result:
            return Shrunk((), runs, True)
    n = 2
    while len(index) >= 2:
        size = len(index)
        chunks = [index[size * k // n : size * (k + 1) // n] for k in range(n)]
        reduced = False
        for chunk in chunks:  # a chunk alone fails
            result = test(chunk)
            if result is None:
                return Shrunk(tuple(items[i] for i in index), runs, False)
            if result:
                index, n, reduced = chunk, 2, True
                break
        if not reduced:
            for chunk in chunks:  # the rest without a chunk fails
                rest = [i for i in index if i not in set(chunk)]
                if not rest:
                    continue
                result = test(rest)
                if result is None:
                    return Shrunk(tuple(items[i] for i in index), runs, False)
                if result:
                    index, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(index):
                break
            n = min(len(index), 2 * n)
    return Shrunk(tuple(items[i] for i in index), runs, True)
