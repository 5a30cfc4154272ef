"""The what-if report: a ``rich`` table of the decisions that differ between two replays, and their totals."""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import TextIO

import orjson
from rich.console import Console
from rich.table import Table

from agent.replay.compare import breaker_trips, compare_decisions, totals
from agent.replay.driver import ReplayResult
from agent.replay.ports import Output, rfc3339_ms


def print_comparison(
    a: ReplayResult,
    b: ReplayResult,
    out_a: Sequence[Output],
    out_b: Sequence[Output],
    *,
    a_name: str,
    b_name: str,
    as_json: bool = False,
    stream: TextIO | None = None,
) -> None:
    """Print the decisions of `a` and `b` that differ (job, time, action A, action B, reason) and both replays'
    totals (decisions, restarts, quarantines, aborts). `as_json`: one JSON object per difference
    (``{"t", "job", "a", "b", "reason"}``) then one ``{"totals": {"a": …, "b": …}}``. Deterministic (no terminal
    width or colour in the output when `stream` is not a terminal)."""
    out = stream or sys.stdout
    diffs = compare_decisions(a.decisions, b.decisions)
    ta, tb = totals(out_a), totals(out_b)
    trips = {"A": breaker_trips(out_a), "B": breaker_trips(out_b)}
    if as_json:
        for d in diffs:
            row = {"t": rfc3339_ms(d.t), "job": d.job, "a": d.a or None, "b": d.b or None, "reason": d.reason}
            out.write(orjson.dumps(row).decode() + "\n")
        tripped = {k.lower(): [rfc3339_ms(o.t) for o in v] for k, v in trips.items()}
        out.write(orjson.dumps({"totals": {"a": ta, "b": tb}, "breaker_tripped": tripped}).decode() + "\n")
        return
    # rendered in memory, then written at once: a reader that went away (`| head`) is one BrokenPipeError for the
    # caller (rich would handle it itself with SystemExit(1))
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, color_system=None, force_terminal=False, soft_wrap=False)
    console.print(f"A = {a_name}\nB = {b_name}")
    table = Table(title="Decisions that differ", show_lines=False)
    for col in ("time", "job", "A", "B", "reason"):
        table.add_column(col, overflow="fold")
    for d in diffs:
        table.add_row(rfc3339_ms(d.t), d.job, d.a or "—", d.b or "—", d.reason)
    console.print(table)
    summary = Table(title="Totals")
    keys = ("decisions", "restarts", "quarantines", "aborts", "breaker_trips")
    for col in ("", *(k.replace("_", " ") for k in keys)):
        summary.add_column(col, justify="right")
    for name, t in (("A", ta), ("B", tb)):
        summary.add_row(name, *(str(t[k]) for k in keys))
    console.print(summary)
    console.print(f"{len(diffs)} decisions differ")
    for name, side in trips.items():
        if side:  # decisions alike can still differ in what was done: nothing is acted on while it is open
            console.print(
                f"{name}: the breaker tripped at {rfc3339_ms(side[0].t)}; decisions after it were not acted on until "
                "a reset"
            )
    out.write(buffer.getvalue())
